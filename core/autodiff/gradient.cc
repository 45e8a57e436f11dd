// The gradient engine; the algorithm is described in gradient.h. Each step
// is one function below, in the order Gradient calls them.
#include "core/autodiff/gradient.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/autodiff/custom_gradient.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/tensor/variable.h"

namespace gradtape {
namespace {

absl::Status CheckOutputGradients(absl::Span<const Tensor> targets,
                                  absl::Span<const Tensor> output_gradients) {
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
  return absl::OkStatus();
}

// Step 1: the ids of the recorded ops the targets depend on, ascending.
std::vector<int64_t> Reach(const Tape& tape, absl::Span<const Tensor> targets) {
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
  return order;
}

// The running gradient sum per tensor id (steps 3 to 5).
class GradientSums {
 public:
  explicit GradientSums(OpExecutor& exec) : exec_(exec) {}

  // Adds `g` into the sum for `id`, with AddV2 through the executor.
  absl::Status Add(int64_t id, Tensor g) {
    auto [it, inserted] = sums_.try_emplace(id, g);
    if (inserted) return absl::OkStatus();
    Tensors out;
    RETURN_IF_ERROR(exec_.Execute("AddV2", {it->second, g}, {}, &out));
    it->second = out[0];
    return absl::OkStatus();
  }
  // The complete gradients of `entry`'s outputs (invalid where none
  // arrived); false if none did. Sums of non-sources are consumed.
  bool TakeOutputGrads(const TapeEntry& entry, const GradientPlan& plan,
                       Tensors* out_grads) {
    out_grads->assign(entry.outputs.size(), Tensor());
    bool any = false;
    for (size_t j = 0; j < entry.outputs.size(); ++j) {
      auto it = sums_.find(entry.outputs[j].id);
      if (it == sums_.end()) continue;
      (*out_grads)[j] = it->second;
      any = true;
      if (!plan.IsSource(entry.outputs[j].id)) sums_.erase(it);
    }
    return any;
  }
  const Tensor* Find(int64_t id) const {
    auto it = sums_.find(id);
    return it == sums_.end() ? nullptr : &it->second;
  }

 private:
  OpExecutor& exec_;
  absl::flat_hash_map<int64_t, Tensor> sums_;
};

// Step 3: ones (or the given output gradient) for every target.
absl::Status Seed(OpExecutor& exec, absl::Span<const Tensor> targets,
                  absl::Span<const Tensor> output_gradients,
                  GradientSums& sums) {
  for (size_t i = 0; i < targets.size(); ++i) {
    const Tensor& t = targets[i];
    if (i < output_gradients.size() && output_gradients[i].valid()) {
      RETURN_IF_ERROR(sums.Add(t.id(), output_gradients[i]));
      continue;
    }
    absl::StatusOr<Tensor> ones = Tensor::Filled(t.dtype(), t.shape(), 1.0);
    if (!ones.ok()) {
      return absl::Status(ones.status().code(),
                          absl::StrCat("the seed (ones) of target ", i, ": ",
                                       ones.status().message()));
    }
    exec.NoteConstant(*ones);
    RETURN_IF_ERROR(sums.Add(t.id(), *std::move(ones)));
  }
  return absl::OkStatus();
}

// Runs the backward of `entry` (its custom gradient, if it has one) on
// `out_grads`; its input gradients go to `input_grads`.
// Runs `entry`'s backward (the registered one, or the execution's custom
// gradient) in `g`.
absl::Status RunBackwardOf(const TapeEntry& entry, GradContext& g) {
  if (entry.custom != nullptr) {
    RunGradientProgram(*entry.custom, entry, g);
  } else {
    g.RunBackward();
  }
  return g.status();
}

absl::Status CheckInputGradient(const TapeEntry& entry, size_t i,
                                const Tensor& grad) {
  const TensorMeta& in = entry.inputs[i];
  if (in.dtype == DType::kResource ||
      (grad.shape() == in.shape && grad.dtype() == in.dtype)) {
    return absl::OkStatus();
  }
  // A registered backward that does this is a bug of gradtape's; a custom
  // gradient is the client's program.
  const std::string what =
      entry.custom != nullptr
          ? absl::StrCat("the custom gradient of ", entry.op->name)
          : absl::StrCat("backward of ", entry.op->name);
  const std::string message =
      absl::StrCat(what, " produced ", grad.DebugString(), " for input ", i,
                   " which is ", DTypeName(in.dtype), ShapeString(in.shape));
  return entry.custom != nullptr ? absl::InvalidArgumentError(message)
                                 : absl::InternalError(message);
}

// Step 4 for one op: its output gradients through its backward into the
// sums of its inputs.
absl::Status Backprop(OpExecutor& exec, const TapeEntry& entry,
                      const GradientPlan& plan, GradientSums& sums) {
  Tensors out_grads;
  if (!sums.TakeOutputGrads(entry, plan, &out_grads)) return absl::OkStatus();
  std::vector<bool> needs_grad(entry.inputs.size());
  for (size_t i = 0; i < entry.inputs.size(); ++i) {
    needs_grad[i] = plan.NeedsGrad(entry, static_cast<int>(i));
  }
  GradContext g(exec, entry, std::move(out_grads), std::move(needs_grad));
  RETURN_IF_ERROR(RunBackwardOf(entry, g));
  for (size_t i = 0; i < entry.inputs.size(); ++i) {
    if (!g.NeedsGrad(static_cast<int>(i))) continue;
    Tensor& grad = g.input_grads()[i];
    if (!grad.valid()) continue;  // The backward says: no gradient.
    RETURN_IF_ERROR(CheckInputGradient(entry, i, grad));
    RETURN_IF_ERROR(sums.Add(entry.inputs[i].id, std::move(grad)));
  }
  return absl::OkStatus();
}

absl::Status Walk(OpExecutor& exec, Tape& tape, const GradientPlan& plan,
                  GradientSums& sums) {
  for (auto op_it = plan.ops().rbegin(); op_it != plan.ops().rend(); ++op_it) {
    RETURN_IF_ERROR(Backprop(exec, *tape.FindEntry(*op_it), plan, sums));
    if (!tape.persistent()) tape.ForgetEntry(*op_it);
  }
  return absl::OkStatus();
}

// Step 5: one result per source.
absl::StatusOr<std::vector<Tensor>> Collect(
    OpExecutor& exec, absl::Span<const Tensor> sources,
    const GradientSums& sums, const absl::flat_hash_set<int64_t>& created,
    Unconnected unconnected) {
  std::vector<Tensor> results;
  results.reserve(sources.size());
  for (const Tensor& s : sources) {
    const Tensor* sum = sums.Find(s.id());
    Tensor r;
    if (sum != nullptr && IsTrainable(s.dtype())) {
      r = *sum;
      // A seed or a given output gradient reached the source unchanged
      // (target == source): give it its own id so each handle owns one.
      if (!created.contains(r.id())) r = exec.Adopt(r);
    } else if (unconnected == Unconnected::kZero) {
      absl::StatusOr<Tensor> zeros =
          Tensor::Zeros(ValueDType(s), ValueShape(s));
      if (!zeros.ok()) {
        return absl::Status(
            zeros.status().code(),
            absl::StrCat("the ZERO gradient of source ", results.size(), ": ",
                         zeros.status().message()));
      }
      r = exec.Adopt(*std::move(zeros));
    }
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace

absl::Status CheckTapeUnused(const Tape& tape, absl::string_view call) {
  if (!tape.used()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "a non-persistent tape can compute one set of gradients only, and "
      "this one already did; push the tape with persistent=true to call ",
      call, " more than once"));
}

Shape ValueShape(const Tensor& source) {
  const Variable* var = VariableOf(source);
  return var != nullptr ? var->shape : source.shape();
}

DType ValueDType(const Tensor& source) {
  const Variable* var = VariableOf(source);
  return var != nullptr ? var->dtype : source.dtype();
}

// Step 2 (prune) on step 1 (reach): a reached op is kept if an input needs
// a gradient, and then its outputs lead to a source too.
GradientPlan::GradientPlan(const Tape& tape, absl::Span<const Tensor> targets,
                           absl::Span<const Tensor> sources) {
  for (const Tensor& s : sources) source_ids_.insert(s.id());
  leads_to_source_ = source_ids_;
  for (int64_t op_id : Reach(tape, targets)) {
    const TapeEntry* entry = tape.FindEntry(op_id);
    if (entry == nullptr) continue;
    bool keep = false;
    for (int i = 0; i < static_cast<int>(entry->inputs.size()) && !keep; ++i) {
      keep = NeedsGrad(*entry, i);
    }
    if (!keep) continue;
    kept_.push_back(op_id);
    for (const TensorMeta& out : entry->outputs) {
      leads_to_source_.insert(out.id);
    }
  }
}

bool GradientPlan::NeedsGrad(const TapeEntry& entry, int i) const {
  const TensorMeta& in = entry.inputs[i];
  return entry.op->input_differentiable[i] && IsTrainable(in.dtype) &&
         leads_to_source_.contains(in.id);
}

absl::StatusOr<std::vector<Tensor>> RunGradient(
    OpExecutor& exec, Tape& tape, const GradientPlan& plan,
    absl::Span<const Tensor> targets, absl::Span<const Tensor> sources,
    absl::Span<const Tensor> output_gradients, Unconnected unconnected) {
  // The backward's intermediates are collected to delete their traces.
  std::vector<int64_t> created;
  OpExecutor::ScopedCreatedIds created_scope(exec, &created);
  // A persistent tape that is still pushed records its own backward, as in
  // TensorFlow (a gradient taken inside its block can be differentiated
  // again); any other tape is suspended.
  TapeSet::ScopedSuspend suspend(exec.tapes(),
                                 tape.persistent() ? nullptr : &tape);
  GradientSums sums(exec);
  absl::Status status = Seed(exec, targets, output_gradients, sums);
  if (status.ok()) status = Walk(exec, tape, plan, sums);
  if (!tape.persistent()) tape.MarkUsed();
  absl::StatusOr<std::vector<Tensor>> results =
      status.ok() ? Collect(exec, sources, sums,
                            absl::flat_hash_set<int64_t>(created.begin(),
                                                         created.end()),
                            unconnected)
                  : absl::StatusOr<std::vector<Tensor>>(status);
  // Forget the intermediates; the results' ids pass up to an enclosing
  // scope (e.g. a Jacobian's, or forward mode's).
  absl::flat_hash_set<int64_t> result_ids;
  if (results.ok()) {
    for (const Tensor& r : *results) result_ids.insert(r.id());
  }
  for (int64_t id : created) {
    if (!result_ids.contains(id)) {
      exec.Forget(id);
    } else {
      created_scope.PassUp(id);
    }
  }
  return results;
}

absl::StatusOr<std::vector<Tensor>> Gradient(
    OpExecutor& exec, Tape& tape, absl::Span<const Tensor> targets,
    absl::Span<const Tensor> sources, absl::Span<const Tensor> output_gradients,
    Unconnected unconnected) {
  RETURN_IF_ERROR(CheckTapeUnused(tape, "gradient"));
  RETURN_IF_ERROR(CheckOutputGradients(targets, output_gradients));
  const GradientPlan plan(tape, targets, sources);
  return RunGradient(exec, tape, plan, targets, sources, output_gradients,
                     unconnected);
}

}  // namespace gradtape
