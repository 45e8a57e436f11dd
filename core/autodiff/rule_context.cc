#include "core/autodiff/rule_context.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/autodiff/op_executor.h"

namespace gradtape {

Tensors RuleContext::RunOp(absl::string_view name,
                           absl::Span<const Tensor> inputs, AttrMap attrs) {
  Tensors outputs;
  if (!ok()) return outputs;
  absl::Status s = ctx_.Execute(name, inputs, std::move(attrs), &outputs);
  if (!s.ok()) {
    Fail(absl::Status(s.code(), absl::StrCat("in ", kind_, " ", op_name_, ": ",
                                             s.message())));
    outputs.clear();
  }
  return outputs;
}

Tensors RuleContext::OpN(absl::string_view name,
                         std::initializer_list<Tensor> inputs, AttrMap attrs) {
  return RunOp(name, absl::Span<const Tensor>(inputs.begin(), inputs.size()),
               std::move(attrs));
}

Tensor RuleContext::Op(absl::string_view name,
                       std::initializer_list<Tensor> inputs, AttrMap attrs) {
  Tensors outputs = OpN(name, inputs, std::move(attrs));
  return outputs.empty() ? Tensor() : outputs[0];
}

Tensor RuleContext::Filled(DType dtype, absl::Span<const int64_t> shape,
                           double value) {
  if (!ok()) return Tensor();
  absl::StatusOr<Tensor> t = Tensor::Filled(dtype, shape, value);
  if (!t.ok()) {
    Fail(absl::Status(
        t.status().code(),
        absl::StrCat("in ", kind_, " ", op_name_, ": ", t.status().message())));
    return Tensor();
  }
  ctx_.NoteConstant(*t);
  return *std::move(t);
}

void RuleContext::Fail(absl::Status status) {
  if (status_.ok()) status_ = std::move(status);
}

}  // namespace gradtape
