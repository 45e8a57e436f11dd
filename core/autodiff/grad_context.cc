#include "core/autodiff/grad_context.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

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

}  // namespace gradtape
