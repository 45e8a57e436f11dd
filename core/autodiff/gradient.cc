// How ComputeGradient works
//
// 1. Reach: from the targets, follow producers on the tape (tensor id ->
//    op id) to collect every recorded op that the targets depend on.
// 2. Prune: walk those ops in ascending op id (a topological order, since an
//    op's inputs were produced before it was recorded) and keep the ops with
//    a differentiable, trainable input that is a source or was produced by a
//    kept op. Only kept ops run their backward; inputs that do not lead to a
//    source are marked as not needing a gradient.
// 3. Seed each target with ones of its shape (or the given output gradient).
// 4. Walk the kept ops in descending op id (reverse topological): by the time
//    an op is reached, every consumer of its outputs has added its share, so
//    its output gradients are complete. Run the backward, add each input
//    gradient into the running sum for that tensor id (fan-in aggregation,
//    with AddV2 through the executor so outer tapes see it). A
//    non-persistent tape drops the entry (and its saved tensors) right after.
// 5. Read the sums at the sources; an unreached source is None or zeros.
//
// Every tensor the backward functions create goes through OpExecutor::Execute,
// so tapes other than this one record the backward (higher-order
// gradients). Those intermediates have no client handle: when the gradient
// is done, their traces are deleted unless they are results.
#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/autodiff/custom_gradient.h"
#include "core/autodiff/grad_context.h"
#include "core/tensor/variable.h"

namespace gradtape {
namespace {

const AttrMap& EmptyAttrs() {
  static const AttrMap* empty = new AttrMap;
  return *empty;
}

}  // namespace

GradContext::GradContext(OpExecutor& ctx, const TapeEntry& entry,
                         Tensors output_grads, std::vector<bool> needs_grad)
    : RuleContext(ctx, "the backward of", entry.op->name),
      entry_(entry),
      output_grads_(std::move(output_grads)),
      needs_grad_(std::move(needs_grad)),
      input_grads_(entry.inputs.size()) {}

const AttrMap& GradContext::attrs() const {
  return entry_.attrs ? *entry_.attrs : EmptyAttrs();
}

Tensor GradContext::Grad(int i) {
  if (!output_grads_[i].valid()) {
    const TensorMeta& meta = entry_.outputs[i];
    output_grads_[i] = Filled(meta.dtype, meta.shape, 0.0);
  }
  return output_grads_[i];
}

Tensor GradContext::Input(int i) {
  if (!entry_.op->input_saved[i]) {
    Fail(absl::InternalError(absl::StrCat(
        "backward of ", op().name, " read input ", i, " (", op().input_names[i],
        ") which its registration does not save; add it to SavesInputs")));
    return Tensor();
  }
  return entry_.saved_inputs[i];
}

Tensor GradContext::Output(int i) {
  if (!entry_.op->output_saved[i]) {
    Fail(absl::InternalError(absl::StrCat(
        "backward of ", op().name, " read output ", i, " (",
        op().output_names[i],
        ") which its registration does not save; add it to SavesOutputs")));
    return Tensor();
  }
  return entry_.saved_outputs[i];
}

void GradContext::RunBackward() {
  if (op().backward_supported()) {
    op().backward(*this);
    return;
  }
  std::string message;
  if (const AttrValue* m = attrs().Find("message");
      m != nullptr && TypeOf(*m) == AttrType::kString &&
      !std::get<std::string>(*m).empty()) {
    message = absl::StrCat(" (message: ", std::get<std::string>(*m), ")");
  }
  Fail(absl::UnimplementedError(
      absl::StrCat("the gradient of ", op().name,
                   " is not supported: ", op().backward_unsupported, message)));
}

void GradContext::SetGrad(int i, Tensor grad) {
  if (!ok()) return;
  input_grads_[i] = std::move(grad);
}

Tensor GradContext::Reshape(Tensor a, const Shape& shape) {
  if (ok() && a.shape() == shape) return a;
  return Op("Reshape", {a},
            {{"shape", std::vector<int64_t>(shape.begin(), shape.end())}});
}

Tensor GradContext::SumToShape(Tensor grad, const Shape& shape) {
  if (!ok() || grad.shape() == shape) return grad;
  const int rank = grad.rank();
  const int pad = rank - static_cast<int>(shape.size());
  std::vector<int64_t> axes;
  for (int i = 0; i < rank; ++i) {
    if (i < pad || (shape[i - pad] == 1 && grad.dim(i) != 1)) axes.push_back(i);
  }
  Tensor summed =
      axes.empty()
          ? grad
          : Op("Sum", {grad}, {{"axis", std::move(axes)}, {"keep_dims", true}});
  return Reshape(summed, shape);
}

absl::StatusOr<std::vector<Tensor>> OpExecutor::Gradient(
    Tape& tape, absl::Span<const Tensor> targets,
    absl::Span<const Tensor> sources, absl::Span<const Tensor> output_gradients,
    Unconnected unconnected) {
  if (tape.used()) {
    return absl::FailedPreconditionError(
        "a non-persistent tape can compute one set of gradients only, and "
        "this one already did; push the tape with persistent=true to call "
        "gradient more than once");
  }
  if (!output_gradients.empty() && output_gradients.size() != targets.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", output_gradients.size(), " output gradients for ",
                     targets.size(), " targets"));
  }
  for (size_t i = 0; i < output_gradients.size(); ++i) {
    const Tensor& og = output_gradients[i];
    if (og.valid() && (og.shape() != targets[i].shape() ||
                       og.dtype() != targets[i].dtype())) {
      return absl::InvalidArgumentError(
          absl::StrCat("output gradient ", i, " is ", og.DebugString(),
                       " but target ", i, " is ", targets[i].DebugString()));
    }
  }

  // 1. Reach.
  absl::flat_hash_set<int64_t> reached;
  std::vector<int64_t> stack;
  for (const Tensor& t : targets) stack.push_back(t.id());
  while (!stack.empty()) {
    int64_t id = stack.back();
    stack.pop_back();
    const int64_t producer = tape.Producer(id);
    if (producer < 0) continue;  // kWatched or kNotOnTape
    if (!reached.insert(producer).second) continue;
    const TapeEntry* entry = tape.FindEntry(producer);
    if (entry == nullptr) continue;
    for (const TensorMeta& in : entry->inputs) stack.push_back(in.id);
  }
  std::vector<int64_t> order(reached.begin(), reached.end());
  std::sort(order.begin(), order.end());

  // 2. Prune.
  absl::flat_hash_set<int64_t> leads_to_source;
  for (const Tensor& s : sources) leads_to_source.insert(s.id());
  auto needs = [&](const OpDef& op, const TensorMeta& in, int i) {
    return op.input_differentiable[i] && IsTrainable(in.dtype) &&
           leads_to_source.contains(in.id);
  };
  std::vector<int64_t> kept;
  for (int64_t op_id : order) {
    const TapeEntry* entry = tape.FindEntry(op_id);
    if (entry == nullptr) continue;
    const TapeEntry& e = *entry;
    bool keep = false;
    for (int i = 0; i < static_cast<int>(e.inputs.size()) && !keep; ++i) {
      keep = needs(*e.op, e.inputs[i], i);
    }
    if (!keep) continue;
    kept.push_back(op_id);
    for (const TensorMeta& out : e.outputs) leads_to_source.insert(out.id);
  }

  // The backward's intermediates are collected to delete their traces.
  std::vector<int64_t> created;
  ScopedCreatedIds created_scope(*this, &created);
  TapeSet::ScopedSuspend suspend(tapes_, &tape);

  // 3. Seed.
  absl::flat_hash_map<int64_t, Tensor> sums;
  absl::Status status;
  auto accumulate = [&](int64_t id, Tensor g) {
    auto [it, inserted] = sums.try_emplace(id, g);
    if (inserted) return;
    Tensors out;
    absl::Status s = Execute("AddV2", {it->second, g}, {}, &out);
    if (!s.ok()) {
      status.Update(s);
      return;
    }
    it->second = out[0];
  };
  for (size_t i = 0; i < targets.size() && status.ok(); ++i) {
    const Tensor& t = targets[i];
    if (i < output_gradients.size() && output_gradients[i].valid()) {
      accumulate(t.id(), output_gradients[i]);
      continue;
    }
    absl::StatusOr<Tensor> ones = Tensor::Filled(t.dtype(), t.shape(), 1.0);
    if (!ones.ok()) {
      status = absl::Status(ones.status().code(),
                            absl::StrCat("the seed (ones) of target ", i, ": ",
                                         ones.status().message()));
      break;
    }
    accumulate(t.id(), *std::move(ones));
  }
  absl::flat_hash_set<int64_t> source_ids;
  for (const Tensor& s : sources) source_ids.insert(s.id());

  // 4. Backward walk.
  for (auto op_it = kept.rbegin(); op_it != kept.rend() && status.ok();
       ++op_it) {
    const TapeEntry& e = *tape.FindEntry(*op_it);
    Tensors out_grads(e.outputs.size());
    bool any = false;
    for (size_t j = 0; j < e.outputs.size(); ++j) {
      auto it = sums.find(e.outputs[j].id);
      if (it == sums.end()) continue;
      out_grads[j] = it->second;
      any = true;
      if (!source_ids.contains(e.outputs[j].id)) sums.erase(it);
    }
    if (!any) continue;
    std::vector<bool> needs_grad(e.inputs.size());
    for (size_t i = 0; i < e.inputs.size(); ++i) {
      needs_grad[i] = needs(*e.op, e.inputs[i], static_cast<int>(i));
    }
    GradContext g(*this, e, std::move(out_grads), std::move(needs_grad));
    if (e.custom != nullptr) {
      RunGradientProgram(*e.custom, e, g);
    } else {
      g.RunBackward();
    }
    if (!g.ok()) {
      status = g.status();
      break;
    }
    for (size_t i = 0; i < e.inputs.size() && status.ok(); ++i) {
      if (!g.NeedsGrad(static_cast<int>(i))) continue;
      Tensor& grad = g.input_grads()[i];
      if (!grad.valid()) continue;  // The backward says: no gradient.
      const TensorMeta& in = e.inputs[i];
      // A variable handle's gradient has the variable's dtype and shape.
      if (in.dtype != DType::kResource &&
          (grad.shape() != in.shape || grad.dtype() != in.dtype)) {
        // A registered backward that does this is a bug of gradtape's; a
        // custom gradient is the client's program.
        const std::string what =
            e.custom != nullptr
                ? absl::StrCat("the custom gradient of ", e.op->name)
                : absl::StrCat("backward of ", e.op->name);
        const std::string message = absl::StrCat(
            what, " produced ", grad.DebugString(), " for input ", i,
            " which is ", DTypeName(in.dtype), ShapeString(in.shape));
        status = e.custom != nullptr ? absl::InvalidArgumentError(message)
                                     : absl::InternalError(message);
        break;
      }
      accumulate(in.id, std::move(grad));
    }
    if (!tape.persistent()) tape.ForgetEntry(*op_it);
  }
  if (!tape.persistent()) tape.MarkUsed();

  // 5. Results.
  std::vector<Tensor> results;
  absl::flat_hash_set<int64_t> created_set(created.begin(), created.end());
  if (status.ok()) {
    results.reserve(sources.size());
    for (const Tensor& s : sources) {
      auto it = sums.find(s.id());
      Tensor r;
      if (it != sums.end() && IsTrainable(s.dtype())) {
        r = it->second;
        // A seed or a given output gradient reached the source unchanged
        // (target == source): give it its own id so each handle owns one.
        if (!created_set.contains(r.id())) r = Adopt(r);
      } else if (unconnected == Unconnected::kZero) {
        const Variable* var = VariableOf(s);
        absl::StatusOr<Tensor> zeros =
            var != nullptr ? Tensor::Zeros(var->dtype, var->shape)
                           : Tensor::Zeros(s.dtype(), s.shape());
        if (!zeros.ok()) {
          status = absl::Status(
              zeros.status().code(),
              absl::StrCat("the ZERO gradient of source ", results.size(), ": ",
                           zeros.status().message()));
          break;
        }
        r = Adopt(*std::move(zeros));
      }
      results.push_back(std::move(r));
    }
  }
  if (!status.ok()) results.clear();
  absl::flat_hash_set<int64_t> result_ids;
  for (const Tensor& r : results) result_ids.insert(r.id());
  for (int64_t id : created) {
    if (!result_ids.contains(id)) {
      Forget(id);
    } else {
      created_scope.PassUp(id);
    }
  }
  if (!status.ok()) return status;
  return results;
}

}  // namespace gradtape
