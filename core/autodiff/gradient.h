// The gradient engine: d(sum of targets)/d(sources) on one tape, by running
// the recorded ops' backward functions in reverse (TensorFlow's
// tensorflow/c/eager/tape.h, ComputeGradient).
//
// How it works
//
// A tape (core/autodiff/tape.h) maps each tensor id on it to the op that
// produced it, and each op id to its entry: the op, its inputs' and outputs'
// ids, dtypes and shapes, and the tensors its backward reads. Op ids grow
// with recording order, so ascending op id is a topological order and
// descending op id a reverse one. Gradient runs five steps:
//
// 1. Reach: from the targets, follow producers on the tape (tensor id ->
//    op id) to collect every recorded op that the targets depend on.
// 2. Prune: walk those ops in ascending op id and keep the ops with a
//    differentiable, trainable input that is a source or was produced by a
//    kept op. Only kept ops run their backward; their inputs that do not
//    lead to a source are marked as not needing a gradient (a backward may
//    skip them). Reach and prune make a GradientPlan; neither fails.
// 3. Seed: each target's gradient starts as ones of its shape, or the given
//    output gradient.
// 4. Walk: the kept ops in descending op id. By the time an op is reached,
//    every consumer of its outputs has added its share, so its output
//    gradients are complete; an op that no gradient reached is skipped. The
//    backward (the registered one, or the execution's custom gradient) gives
//    one gradient per input that needs one; each is checked against the
//    input's dtype and shape and added into the running sum for that tensor
//    id (fan-in aggregation, with AddV2 through the executor so outer tapes
//    see it). A non-persistent tape drops each entry, and so its saved
//    tensors, right after its backward ran, and is used up at the end.
// 5. Collect: read the sums at the sources; a source no gradient reached
//    (or one without a trainable dtype) gets None (an invalid Tensor) or,
//    with Unconnected::kZero, zeros of its value's shape.
//
// Every tensor the backward functions create goes through
// OpExecutor::Execute, so tapes other than this one record the backward:
// that is how gradients of gradients work. This tape itself is suspended
// while its gradient runs, unless it is persistent: a persistent tape that
// is still pushed records its own backward (TensorFlow's rule), which is
// safe because the walk only reads entries recorded before it started and
// erases none (entries live in stable chunks). The backward's intermediates
// have no client handle: when the gradient is done, their traces are deleted
// (OpExecutor::Forget) unless they are results.
//
// On error nothing is returned and the intermediates are forgotten; a
// non-persistent tape is used up all the same.
#ifndef GRADTAPE_CORE_AUTODIFF_GRADIENT_H_
#define GRADTAPE_CORE_AUTODIFF_GRADIENT_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/autodiff/op_executor.h"
#include "core/autodiff/tape.h"
#include "core/tensor/tensor.h"

namespace gradtape {

// d(sum of targets)/d(sources) on `tape`, one result per source.
// `output_gradients` is empty or has one entry per target (an invalid Tensor
// there means "ones"; a valid one must have its target's dtype and shape,
// else INVALID_ARGUMENT). A None result is an invalid Tensor.
// FAILED_PRECONDITION on a non-persistent tape that already computed one.
absl::StatusOr<std::vector<Tensor>> Gradient(
    OpExecutor& exec, Tape& tape, absl::Span<const Tensor> targets,
    absl::Span<const Tensor> sources, absl::Span<const Tensor> output_gradients,
    Unconnected unconnected);

// --- The steps, for Jacobian (core/autodiff/jacobian.cc) -------------------

// FAILED_PRECONDITION if `tape` is a non-persistent tape that already
// computed its gradients; the message tells the client to push a persistent
// tape to `call` ("gradient", "jacobian") more than once.
absl::Status CheckTapeUnused(const Tape& tape, absl::string_view call);

// The shape and dtype of the value a source stands for (a variable handle
// stands for its variable): the shape and dtype of its gradient.
Shape ValueShape(const Tensor& source);
DType ValueDType(const Tensor& source);

// Steps 1 and 2: the recorded ops between the targets and the sources. Valid
// while the tape records nothing and erases nothing (Jacobian runs one plan
// once per row, with recording stopped and the tape made persistent).
class GradientPlan {
 public:
  GradientPlan(const Tape& tape, absl::Span<const Tensor> targets,
               absl::Span<const Tensor> sources);

  // The kept ops' ids, ascending.
  const std::vector<int64_t>& ops() const { return kept_; }
  // True if input i of `entry` (a kept op) is differentiable, trainable and
  // leads to a source.
  bool NeedsGrad(const TapeEntry& entry, int i) const;
  bool IsSource(int64_t tensor_id) const {
    return source_ids_.contains(tensor_id);
  }

 private:
  std::vector<int64_t> kept_;
  absl::flat_hash_set<int64_t> source_ids_;
  // Sources and the outputs of kept ops.
  absl::flat_hash_set<int64_t> leads_to_source_;
};

// Steps 3 to 5 on `plan` (made on `tape` for these targets and sources), for
// output gradients already checked as Gradient does.
absl::StatusOr<std::vector<Tensor>> RunGradient(
    OpExecutor& exec, Tape& tape, const GradientPlan& plan,
    absl::Span<const Tensor> targets, absl::Span<const Tensor> sources,
    absl::Span<const Tensor> output_gradients, Unconnected unconnected);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_AUTODIFF_GRADIENT_H_
