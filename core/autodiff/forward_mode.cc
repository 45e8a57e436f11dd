#include "core/autodiff/forward_mode.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/autodiff/grad_context.h"
#include "core/autodiff/gradient.h"
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
// then d/du sum_i <g_i(u), t_i> = J t. DoubleVjp runs the steps below.

// UNIMPLEMENTED unless the op has a gradient and only real inputs.
absl::Status CheckDoubleVjp(const OpDef& op, absl::Span<const Tensor> inputs) {
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
  return absl::OkStatus();
}

// The tape entry the backward would see, with everything it saves.
TapeEntry EntryOf(const OpDef& op, const AttrMap& attrs,
                  absl::Span<const Tensor> inputs,
                  absl::Span<const Tensor> outputs) {
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
  return entry;
}

// u: zeros for each output with a tangent dtype (invalid elsewhere), watched
// by `tape`; `dummies` are the valid ones, in output order. On error none is
// left.
absl::Status MakeDummies(OpExecutor& ctx, absl::Span<const Tensor> outputs,
                         Tape& tape, Tensors& u, std::vector<Tensor>& dummies) {
  u.assign(outputs.size(), Tensor());
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (!HasTangentDType(outputs[o].dtype())) continue;
    absl::StatusOr<Tensor> zeros =
        Tensor::Zeros(outputs[o].dtype(), outputs[o].shape());
    if (!zeros.ok()) {
      for (const Tensor& d : dummies) ctx.Forget(d.id());
      dummies.clear();
      return zeros.status();
    }
    u[o] = ctx.Adopt(*std::move(zeros));
    tape.Watch(u[o]);
    dummies.push_back(u[o]);
  }
  return absl::OkStatus();
}

// sum_i <g_i(u), t_i>, recorded on `tape`: the backward of `entry` on u,
// contracted with the tangents. Invalid if no input has both.
absl::Status ContractedBackward(OpExecutor& ctx, Tape& tape,
                                const TapeEntry& entry, const Tensors& u,
                                const Tensors& tangents, Tensor& total) {
  std::vector<bool> needs_grad(entry.inputs.size());
  for (size_t i = 0; i < entry.inputs.size(); ++i) {
    needs_grad[i] = tangents[i].valid();
  }
  TapeSet::ScopedActivate activate(ctx.tapes(), &tape);
  GradContext g(ctx, entry, u, std::move(needs_grad));
  g.RunBackward();
  if (!g.ok()) return g.status();
  for (size_t i = 0; i < entry.inputs.size(); ++i) {
    const Tensor& gi = g.input_grads()[i];
    if (!tangents[i].valid() || !gi.valid()) continue;
    Tensors prod, sum;
    RETURN_IF_ERROR(ctx.Execute("Mul", {gi, tangents[i]}, {}, &prod));
    RETURN_IF_ERROR(ctx.Execute("Sum", {prod[0]}, {}, &sum));
    if (!total.valid()) {
      total = sum[0];
      continue;
    }
    Tensors added;
    RETURN_IF_ERROR(ctx.Execute("AddV2", {total, sum[0]}, {}, &added));
    total = added[0];
  }
  return absl::OkStatus();
}

// The output tangents J t: the gradient of `total` with respect to u.
absl::Status TangentsFromDummies(OpExecutor& ctx, Tape& tape,
                                 const Tensor& total, const Tensors& u,
                                 const std::vector<Tensor>& dummies,
                                 Tensors* out_tangents) {
  ASSIGN_OR_RETURN(
      std::vector<Tensor> jvp,
      Gradient(ctx, tape, {total}, dummies, {}, Unconnected::kNone));
  size_t k = 0;
  for (size_t o = 0; o < u.size(); ++o) {
    if (u[o].valid()) (*out_tangents)[o] = jvp[k++];
  }
  return absl::OkStatus();
}

absl::Status DoubleVjp(OpExecutor& ctx, const OpDef& op, const AttrMap& attrs,
                       absl::Span<const Tensor> inputs,
                       absl::Span<const Tensor> outputs,
                       const Tensors& tangents, Tensors* out_tangents) {
  RETURN_IF_ERROR(CheckDoubleVjp(op, inputs));
  const TapeEntry entry = EntryOf(op, attrs, inputs, outputs);
  Tape tape(/*persistent=*/false, /*watch_accessed_variables=*/false);
  Tensors u;
  std::vector<Tensor> dummies;
  RETURN_IF_ERROR(MakeDummies(ctx, outputs, tape, u, dummies));
  Tensor total;
  absl::Status status =
      ContractedBackward(ctx, tape, entry, u, tangents, total);
  if (status.ok() && total.valid()) {
    status = TangentsFromDummies(ctx, tape, total, u, dummies, out_tangents);
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

// The tangents `acc` has for the op's inputs (invalid where none); false if
// it has none.
bool InputTangents(const ForwardAccumulator& acc, const OpDef& op,
                   absl::Span<const Tensor> inputs, Tensors& tangents) {
  tangents.assign(inputs.size(), Tensor());
  bool any = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (in.id() == 0 || !op.input_differentiable[i] ||
        !HasTangentDType(in.dtype())) {
      continue;
    }
    if (const ForwardAccumulator::Entry* e = acc.Find(in.id())) {
      tangents[i] = e->tangent;
      any = true;
    }
  }
  return any;
}

// The output tangents by the op's forward-mode rule, or the double-VJP
// fallback, seen by the accumulators before the k-th only; the ids of the
// tensors it made go to `created`.
absl::Status OutputTangents(OpExecutor& ctx, size_t k, const OpDef& op,
                            const AttrMap& attrs,
                            absl::Span<const Tensor> inputs,
                            absl::Span<const Tensor> outputs,
                            const Tensors& tangents, Tensors& out_tangents,
                            std::vector<int64_t>& created) {
  out_tangents.assign(outputs.size(), Tensor());
  AccumulatorSet::ScopedTruncate truncate(ctx.accumulators(), k);
  OpExecutor::ScopedCreatedIds scope(ctx, &created);
  if (!op.jvp) {
    return DoubleVjp(ctx, op, attrs, inputs, outputs, tangents, &out_tangents);
  }
  JvpContext j(ctx, op, attrs, inputs, outputs, tangents);
  op.jvp(j);
  if (j.ok()) out_tangents = std::move(j.output_tangents());
  return j.status();
}

// A tangent must have its output's dtype and shape.
absl::Status CheckOutputTangents(const OpDef& op,
                                 absl::Span<const Tensor> outputs,
                                 const Tensors& out_tangents) {
  for (size_t o = 0; o < outputs.size(); ++o) {
    const Tensor& t = out_tangents[o];
    if (!t.valid()) continue;
    if (t.dtype() != outputs[o].dtype() || t.shape() != outputs[o].shape()) {
      return absl::InternalError(absl::StrCat(
          "the forward-mode rule of ", op.name, " produced ", t.DebugString(),
          " for output ", o, " which is ", outputs[o].DebugString()));
    }
  }
  return absl::OkStatus();
}

// Gives `acc` the output tangents; returns the ids it owns from now on.
absl::flat_hash_set<int64_t> StoreOutputTangents(
    ForwardAccumulator& acc, absl::Span<const Tensor> outputs,
    const Tensors& out_tangents, const std::vector<int64_t>& created) {
  absl::flat_hash_set<int64_t> kept;
  absl::flat_hash_set<int64_t> created_set(created.begin(), created.end());
  for (size_t o = 0; o < outputs.size(); ++o) {
    Tensor t = out_tangents[o];
    if (!t.valid() || !HasTangentDType(outputs[o].dtype())) continue;
    // A tangent made here that no other output took yet is owned.
    const bool owned =
        created_set.contains(t.id()) && kept.insert(t.id()).second;
    acc.Set(outputs[o].id(), {std::move(t), owned});
  }
  return kept;
}

}  // namespace

absl::Status Accumulate(OpExecutor& ctx, const OpDef& op, const AttrMap& attrs,
                        absl::Span<const Tensor> inputs,
                        absl::Span<const Tensor> outputs) {
  if (!op.differentiable() || ctx.tapes().stopped()) return absl::OkStatus();
  // A snapshot: computing tangents truncates the active list.
  const std::vector<ForwardAccumulator*> active = ctx.accumulators().active();
  for (size_t k = 0; k < active.size(); ++k) {
    ForwardAccumulator* acc = active[k];
    Tensors tangents;
    if (!InputTangents(*acc, op, inputs, tangents)) continue;
    Tensors out_tangents;
    std::vector<int64_t> created;
    absl::Status status = OutputTangents(ctx, k, op, attrs, inputs, outputs,
                                         tangents, out_tangents, created);
    if (status.ok()) status = CheckOutputTangents(op, outputs, out_tangents);
    absl::flat_hash_set<int64_t> kept;
    if (status.ok()) {
      kept = StoreOutputTangents(*acc, outputs, out_tangents, created);
    }
    for (int64_t id : created) {
      if (!kept.contains(id)) ctx.Forget(id);
    }
    RETURN_IF_ERROR(status);
  }
  return absl::OkStatus();
}

}  // namespace gradtape
