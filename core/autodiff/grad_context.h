// GradContext: what a backward function sees, and how it computes.
//
// A backward reads the upstream gradients (Grad), the saved tensors it
// declared (Input / Output; reading an undeclared one is an error), the
// shapes and dtypes of every input and output (always kept: they are small),
// and builds input gradients by running registered ops (Op and the
// shortcuts), which go through OpExecutor::Execute and so are recorded by any
// outer tape: that is how higher-order gradients work.
//
// Errors are sticky, as with TensorFlow's C++ Scope: after the first failure
// every op returns an invalid Tensor and the failure is reported once the
// backward returns. So a backward is straight-line code.
#ifndef GRADTAPE_CORE_AUTODIFF_GRAD_CONTEXT_H_
#define GRADTAPE_CORE_AUTODIFF_GRAD_CONTEXT_H_

#include <initializer_list>
#include <vector>

#include "absl/status/status.h"
#include "core/autodiff/op_executor.h"
#include "core/autodiff/rule_context.h"
#include "core/autodiff/tape.h"

namespace gradtape {

class GradContext : public RuleContext {
 public:
  GradContext(OpExecutor& ctx, const TapeEntry& entry, Tensors output_grads,
              std::vector<bool> needs_grad);

  const OpDef& op() const { return *entry_.op; }
  const AttrMap& attrs() const;

  // Gradient flowing into output i; zeros of its shape if none reached it.
  Tensor Grad(int i);
  bool HasGrad(int i) const { return output_grads_[i].valid(); }
  // Saved forward tensors; an error unless the op declares them saved.
  Tensor Input(int i);
  Tensor Output(int i);
  const Shape& InputShape(int i) const { return entry_.inputs[i].shape; }
  DType InputDType(int i) const { return entry_.inputs[i].dtype; }
  const Shape& OutputShape(int i) const { return entry_.outputs[i].shape; }
  DType OutputDType(int i) const { return entry_.outputs[i].dtype; }
  int num_inputs() const { return static_cast<int>(entry_.inputs.size()); }

  // True if input i leads to a requested source (others may be skipped).
  bool NeedsGrad(int i) const { return needs_grad_[i]; }
  void SetGrad(int i, Tensor grad);
  // Runs the op's registered backward; UNIMPLEMENTED (sticky, as any
  // failure) for an op registered BackwardUnsupported.
  void RunBackward();

  // conj(a) for complex a; a itself otherwise (TensorFlow's math_ops.conj).
  Tensor Conj(Tensor a) {
    return ok() && IsComplex(a.dtype()) ? Op("Conj", {a}) : a;
  }
  Tensor Reshape(Tensor a, const Shape& shape);
  // Sums `grad` (broadcast result) back to `shape` (an input's shape):
  // the gradient of numpy broadcasting.
  Tensor SumToShape(Tensor grad, const Shape& shape);

  Tensors& input_grads() { return input_grads_; }

 private:
  const TapeEntry& entry_;
  Tensors output_grads_;
  std::vector<bool> needs_grad_;
  Tensors input_grads_;
};

}  // namespace gradtape

#endif  // GRADTAPE_CORE_AUTODIFF_GRAD_CONTEXT_H_
