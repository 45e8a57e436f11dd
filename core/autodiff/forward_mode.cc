#include "core/autodiff/forward_mode.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/autodiff/grad_context.h"
#include "core/autodiff/op_executor.h"
#include "core/autodiff/tape.h"
#include "core/base/status_macros.h"

namespace gradtape {

JvpContext::JvpContext(OpExecutor& ctx, const OpDef& op, const AttrMap& attrs,
                       absl::Span<const Tensor> inputs,
                       absl::Span<const Tensor> outputs, Tensors input_tangents)
    : RuleContext(ctx, "the forward-mode rule of", op.name),
      op_(op),
      attrs_(attrs),
      inputs_(inputs),
      outputs_(outputs),
      tangents_(std::move(input_tangents)),
      output_tangents_(outputs.size()) {}

Tensor JvpContext::Tangent(int i) {
  if (!tangents_[i].valid()) {
    tangents_[i] = Filled(inputs_[i].dtype(), inputs_[i].shape(), 0.0);
  }
  return tangents_[i];
}

void JvpContext::SetTangent(int o, Tensor tangent) {
  if (!ok()) return;
  output_tangents_[o] = std::move(tangent);
}

void LinearUnaryJvp(JvpContext& j) {
  j.SetTangent(0, j.Op(j.op().name, {j.Tangent(0)}, j.attrs()));
}

ForwardAccumulator::Entry ForwardAccumulator::Take(int64_t id) {
  auto it = tangents_.find(id);
  if (it == tangents_.end()) return {};
  Entry entry = std::move(it->second);
  tangents_.erase(it);
  return entry;
}

int64_t ForwardAccumulator::TangentBytes() const {
  int64_t bytes = 0;
  for (const auto& [id, entry] : tangents_) bytes += entry.tangent.num_bytes();
  return bytes;
}

absl::Status AccumulatorSet::Push(int64_t id) {
  auto [it, inserted] = accumulators_.try_emplace(id);
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat("accumulator ", id, " already exists; delete it first"));
  }
  it->second = std::make_unique<ForwardAccumulator>();
  active_.push_back(it->second.get());
  return absl::OkStatus();
}

absl::Status AccumulatorSet::Pop(int64_t id) {
  ASSIGN_OR_RETURN(ForwardAccumulator * acc, Find(id));
  auto it = std::find(active_.begin(), active_.end(), acc);
  if (it == active_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "accumulator ", id, " is not accumulating (already popped)"));
  }
  active_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> AccumulatorSet::Delete(int64_t id) {
  auto it = accumulators_.find(id);
  if (it == accumulators_.end()) {
    return absl::NotFoundError(absl::StrCat("accumulator ", id, " not found"));
  }
  std::vector<int64_t> owned;
  it->second->ForEach([&](int64_t, const ForwardAccumulator::Entry& e) {
    if (e.owned) owned.push_back(e.tangent.id());
  });
  active_.erase(std::remove(active_.begin(), active_.end(), it->second.get()),
                active_.end());
  accumulators_.erase(it);
  return owned;
}

absl::StatusOr<ForwardAccumulator*> AccumulatorSet::Find(int64_t id) {
  auto it = accumulators_.find(id);
  if (it == accumulators_.end()) {
    return absl::NotFoundError(
        absl::StrCat("accumulator ", id, " not found (push it first)"));
  }
  return it->second.get();
}

void AccumulatorSet::Forget(int64_t id, std::vector<int64_t>* owned) {
  for (auto& [acc_id, acc] : accumulators_) {
    ForwardAccumulator::Entry e = acc->Take(id);
    if (e.owned) owned->push_back(e.tangent.id());
  }
}

int64_t AccumulatorSet::TangentBytes() const {
  int64_t bytes = 0;
  for (const auto& [id, acc] : accumulators_) bytes += acc->TangentBytes();
  return bytes;
}

AccumulatorSet::ScopedTruncate::ScopedTruncate(AccumulatorSet& set, size_t n)
    : set_(set), saved_(set.active_) {
  set_.active_.resize(std::min(n, set_.active_.size()));
}

AccumulatorSet::ScopedTruncate::~ScopedTruncate() {
  set_.active_ = std::move(saved_);
}

namespace {

bool HasTangentDType(DType dtype) {
  return IsTrainable(dtype) && dtype != DType::kResource;
}

// The double-VJP fallback: with u a dummy gradient for each output, watched
// by an internal tape, the op's backward gives g(u) = J^T u (linear in u);
// then d/du sum_i <g_i(u), t_i> = J t.
absl::Status DoubleVjp(OpExecutor& ctx, const OpDef& op, const AttrMap& attrs,
                       absl::Span<const Tensor> inputs,
                       absl::Span<const Tensor> outputs,
                       const Tensors& tangents, Tensors* out_tangents) {
  if (!op.backward_unsupported.empty()) {
    return absl::UnimplementedError(
        absl::StrCat(op.name,
                     " has no forward-mode rule, and the double-VJP fallback "
                     "needs its gradient, which is not supported: ",
                     op.backward_unsupported));
  }
  for (const Tensor& t : inputs) {
    if (IsComplex(t.dtype())) {
      return absl::UnimplementedError(
          absl::StrCat(op.name,
                       " has no forward-mode rule, and the double-VJP fallback "
                       "handles real dtypes only, got ",
                       t.DebugString()));
    }
  }
  // The tape entry the backward would see, with everything it saves.
  TapeEntry entry;
  entry.op = &op;
  if (!attrs.empty()) entry.attrs = std::make_shared<const AttrMap>(attrs);
  entry.saved_inputs.resize(inputs.size());
  entry.saved_outputs.resize(outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    entry.inputs.push_back(
        {inputs[i].id(), inputs[i].dtype(), inputs[i].shape()});
    if (op.input_saved[i]) entry.saved_inputs[i] = inputs[i];
  }
  for (size_t o = 0; o < outputs.size(); ++o) {
    entry.outputs.push_back(
        {outputs[o].id(), outputs[o].dtype(), outputs[o].shape()});
    if (op.output_saved[o]) entry.saved_outputs[o] = outputs[o];
  }

  Tape tape(/*persistent=*/false, /*watch_accessed_variables=*/false);
  Tensors u(outputs.size());
  std::vector<Tensor> dummies;
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (!HasTangentDType(outputs[o].dtype())) continue;
    absl::StatusOr<Tensor> zeros =
        Tensor::Zeros(outputs[o].dtype(), outputs[o].shape());
    if (!zeros.ok()) {
      for (const Tensor& d : dummies) ctx.Forget(d.id());
      return zeros.status();
    }
    u[o] = ctx.Adopt(*std::move(zeros));
    tape.Watch(u[o]);
    dummies.push_back(u[o]);
  }
  std::vector<bool> needs_grad(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    needs_grad[i] = tangents[i].valid();
  }
  absl::Status status;
  Tensor total;
  {
    TapeSet::ScopedActivate activate(ctx.tapes(), &tape);
    GradContext g(ctx, entry, u, std::move(needs_grad));
    g.RunBackward();
    if (!g.ok()) {
      status = g.status();
    } else {
      for (size_t i = 0; i < inputs.size() && status.ok(); ++i) {
        const Tensor& gi = g.input_grads()[i];
        if (!tangents[i].valid() || !gi.valid()) continue;
        Tensors prod, sum;
        status = ctx.Execute("Mul", {gi, tangents[i]}, {}, &prod);
        if (status.ok()) {
          status = ctx.Execute("Sum", {prod[0]}, {}, &sum);
        }
        if (!status.ok()) break;
        if (!total.valid()) {
          total = sum[0];
        } else {
          Tensors added;
          status = ctx.Execute("AddV2", {total, sum[0]}, {}, &added);
          if (status.ok()) total = added[0];
        }
      }
    }
  }
  if (status.ok() && total.valid()) {
    absl::StatusOr<std::vector<Tensor>> jvp =
        ctx.Gradient(tape, {total}, dummies, {}, Unconnected::kNone);
    if (!jvp.ok()) {
      status = jvp.status();
    } else {
      size_t k = 0;
      for (size_t o = 0; o < outputs.size(); ++o) {
        if (u[o].valid()) (*out_tangents)[o] = (*jvp)[k++];
      }
    }
  }
  for (const Tensor& d : dummies) ctx.Forget(d.id());
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("forward mode (double-VJP fallback) "
                                     "through ",
                                     op.name, ": ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Accumulate(OpExecutor& ctx, const OpDef& op, const AttrMap& attrs,
                        absl::Span<const Tensor> inputs,
                        absl::Span<const Tensor> outputs) {
  AccumulatorSet& set = ctx.accumulators();
  if (!op.differentiable() || ctx.tapes().stopped()) return absl::OkStatus();
  // A snapshot: computing tangents truncates the active list.
  const std::vector<ForwardAccumulator*> active = set.active();
  for (size_t k = 0; k < active.size(); ++k) {
    ForwardAccumulator* acc = active[k];
    Tensors tangents(inputs.size());
    bool any = false;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& in = inputs[i];
      if (in.id() == 0 || !op.input_differentiable[i] ||
          !HasTangentDType(in.dtype())) {
        continue;
      }
      if (const ForwardAccumulator::Entry* e = acc->Find(in.id())) {
        tangents[i] = e->tangent;
        any = true;
      }
    }
    if (!any) continue;

    Tensors out_tangents(outputs.size());
    std::vector<int64_t> created;
    absl::Status status;
    {
      AccumulatorSet::ScopedTruncate truncate(set, k);
      OpExecutor::ScopedCreatedIds scope(ctx, &created);
      if (op.jvp) {
        JvpContext j(ctx, op, attrs, inputs, outputs, tangents);
        op.jvp(j);
        status = j.status();
        if (status.ok()) out_tangents = std::move(j.output_tangents());
      } else {
        status =
            DoubleVjp(ctx, op, attrs, inputs, outputs, tangents, &out_tangents);
      }
    }
    for (size_t o = 0; o < outputs.size() && status.ok(); ++o) {
      const Tensor& t = out_tangents[o];
      if (!t.valid()) continue;
      if (t.dtype() != outputs[o].dtype() || t.shape() != outputs[o].shape()) {
        status = absl::InternalError(absl::StrCat(
            "the forward-mode rule of ", op.name, " produced ", t.DebugString(),
            " for output ", o, " which is ", outputs[o].DebugString()));
      }
    }
    absl::flat_hash_set<int64_t> kept;
    if (status.ok()) {
      absl::flat_hash_set<int64_t> created_set(created.begin(), created.end());
      for (size_t o = 0; o < outputs.size(); ++o) {
        Tensor t = out_tangents[o];
        if (!t.valid() || !HasTangentDType(outputs[o].dtype())) continue;
        // A tangent made here that no other output took yet is owned.
        const bool owned =
            created_set.contains(t.id()) && kept.insert(t.id()).second;
        acc->Set(outputs[o].id(), {std::move(t), owned});
      }
    }
    for (int64_t id : created) {
      if (!kept.contains(id)) ctx.Forget(id);
    }
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace gradtape
