// RuleContext: what a backward rule (GradContext, core/autodiff/grad_context.h)
// and a forward-mode rule (JvpContext, core/autodiff/forward_mode.h) write
// their math with. Registered ops run through the session's OpExecutor; the
// first failure is kept, prefixed with the rule it happened in, and every later
// op returns nothing, so a rule reads straight through and its caller checks
// ok().
#ifndef GRADTAPE_CORE_AUTODIFF_RULE_CONTEXT_H_
#define GRADTAPE_CORE_AUTODIFF_RULE_CONTEXT_H_

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/registry/op_registry.h"
#include "core/tensor/attrs.h"
#include "core/tensor/tensor.h"

namespace gradtape {

class OpExecutor;

class RuleContext {
 public:
  RuleContext(const RuleContext&) = delete;
  RuleContext& operator=(const RuleContext&) = delete;

  // Runs a registered op; returns output 0 (Op) or all outputs (OpN,
  // RunOp). Empty after a failure.
  Tensor Op(absl::string_view name, std::initializer_list<Tensor> inputs,
            AttrMap attrs = {});
  Tensors OpN(absl::string_view name, std::initializer_list<Tensor> inputs,
              AttrMap attrs = {});
  Tensors RunOp(absl::string_view name, absl::Span<const Tensor> inputs,
                AttrMap attrs = {});
  // A scalar constant (on no tape).
  Tensor Const(double value, DType dtype) { return Filled(dtype, {}, value); }
  // A constant of `shape` (on no tape); empty (and the context failed) if
  // it cannot be allocated.
  Tensor Filled(DType dtype, absl::Span<const int64_t> shape, double value);
  Tensor Add(Tensor a, Tensor b) { return Op("AddV2", {a, b}); }
  Tensor Sub(Tensor a, Tensor b) { return Op("Sub", {a, b}); }
  Tensor Mul(Tensor a, Tensor b) { return Op("Mul", {a, b}); }
  Tensor Div(Tensor a, Tensor b) { return Op("RealDiv", {a, b}); }
  Tensor Neg(Tensor a) { return Op("Neg", {a}); }

  // Keeps the first failure.
  void Fail(absl::Status status);
  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }

 protected:
  // Error messages name the rule as "in <kind> <op_name>: ", e.g. "in the
  // backward of MatMul: "; both must outlive the context (a literal, and
  // the name in the op's registration).
  RuleContext(OpExecutor& ctx, const char* kind, absl::string_view op_name)
      : ctx_(ctx), kind_(kind), op_name_(op_name) {}
  ~RuleContext() = default;

  OpExecutor& ctx_;

 private:
  const char* kind_;
  absl::string_view op_name_;
  absl::Status status_;
};

}  // namespace gradtape

#endif  // GRADTAPE_CORE_AUTODIFF_RULE_CONTEXT_H_
