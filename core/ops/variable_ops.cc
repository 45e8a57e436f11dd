// Resource variables: VarHandleOp, ReadVariableOp, AssignVariableOp,
// AssignAddVariableOp, AssignSubVariableOp, and ResourceGather (the
// embedding lookup: rows of the variable's value).
//
// Reading records like an identity from the handle to the value, so a tape
// that watches a handle (or was pushed with watch_accessed_variables, which
// watches every handle an op reads) gets gradients with respect to the
// variable: the gradient has the variable's dtype and shape. ResourceGather
// records the same way; its gradient is a dense tensor of the variable's
// shape (the rows of dy added where they were gathered), not TensorFlow's
// IndexedSlices: it is what the optimizers apply.
#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"
#include "core/tensor/variable.h"

namespace gradtape {
namespace {

std::atomic<int64_t> g_next_handle{0};

// The variable behind input i, or INVALID_ARGUMENT.
absl::StatusOr<Variable*> VariableInput(const KernelContext& ctx, int i) {
  Variable* var = VariableOf(ctx.input(i));
  if (var == nullptr) {
    return ctx.InvalidArgument("input ", i,
                               " must be a variable handle "
                               "(VarHandleOp's output), got ",
                               ctx.input(i).DebugString());
  }
  return var;
}

// The optional "dtype" attr (kInvalid: any) must match the variable's.
absl::Status CheckDType(const KernelContext& ctx, const Variable& var) {
  DType want = ctx.attrs().Type("dtype");
  if (want == DType::kInvalid || want == var.dtype) return absl::OkStatus();
  return ctx.InvalidArgument("variable '", var.name, "' is ",
                             DTypeName(var.dtype), ", not ", DTypeName(want));
}

absl::Status VarHandleKernel(KernelContext& ctx) {
  auto var = std::make_shared<Variable>();
  var->dtype = ctx.attrs().Type("dtype");
  const std::vector<int64_t>& shape = ctx.attrs().IntList("shape");
  if (var->dtype == DType::kInvalid || var->dtype == DType::kResource) {
    return ctx.InvalidArgument("dtype must be a value dtype, got ",
                               DTypeName(var->dtype));
  }
  // The variable's value is allocated later (by an assignment, or as a
  // ZERO gradient), so its size is checked now.
  if (absl::StatusOr<TensorSize> size = CheckedTensorSize(var->dtype, shape);
      !size.ok()) {
    return absl::Status(
        size.status().code(),
        absl::StrCat("VarHandleOp: shape attr: ", size.status().message()));
  }
  var->shape.assign(shape.begin(), shape.end());
  const int64_t handle = ++g_next_handle;
  var->name = ctx.attrs().Get<std::string>("shared_name");
  if (var->name.empty()) var->name = absl::StrCat("variable_", handle);
  ASSIGN_OR_RETURN(Tensor resource, Tensor::Resource(std::move(var), handle));
  ctx.set_output(0, std::move(resource));
  return absl::OkStatus();
}

absl::Status ReadVariableKernel(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Variable * var, VariableInput(ctx, 0));
  RETURN_IF_ERROR(CheckDType(ctx, *var));
  if (!(var)->value.valid()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx.op().name, ": variable '", (var)->name,
                     "' is uninitialized; assign it first (AssignVariableOp)"));
  }
  ctx.set_output(0, (var)->value);
  return absl::OkStatus();
}

absl::Status AssignVariableKernel(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Variable * var, VariableInput(ctx, 0));
  RETURN_IF_ERROR(CheckDType(ctx, *var));
  const Tensor& value = ctx.input(1);
  if (value.dtype() != (var)->dtype || value.shape() != (var)->shape) {
    return ctx.InvalidArgument(
        "variable '", (var)->name, "' is ", DTypeName((var)->dtype),
        ShapeString((var)->shape), "; cannot assign ", value.DebugString());
  }
  Tensor stored = value;
  stored.set_id(0);
  (var)->value = std::move(stored);
  return absl::OkStatus();
}

// AssignAddVariableOp / AssignSubVariableOp: value = value (+|-) delta, into
// a new buffer (earlier reads keep the old one).
template <typename Combine>
absl::Status AssignUpdateKernel(KernelContext& ctx, Combine combine) {
  ASSIGN_OR_RETURN(Variable * var, VariableInput(ctx, 0));
  RETURN_IF_ERROR(CheckDType(ctx, *var));
  const Tensor& delta = ctx.input(1);
  if (delta.dtype() != (var)->dtype || delta.shape() != (var)->shape) {
    return ctx.InvalidArgument("variable '", (var)->name, "' is ",
                               DTypeName((var)->dtype),
                               ShapeString((var)->shape),
                               "; cannot update it by ", delta.DebugString());
  }
  if (!(var)->value.valid()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx.op().name, ": variable '", (var)->name,
                     "' is uninitialized; assign it first (AssignVariableOp)"));
  }
  const Tensor& old = (var)->value;
  ASSIGN_OR_RETURN(Tensor updated, Allocate(ctx, old.dtype(), old.shape()));
  const bool supported = DispatchArithmetic(old.dtype(), [&](auto zero) {
    using T = decltype(zero);
    updated.flat<T>() = combine(old.flat<T>(), delta.flat<T>());
  });
  if (!supported) {
    return ctx.InvalidArgument("variable '", (var)->name, "' is ",
                               DTypeName(old.dtype()),
                               "; only numeric variables can be updated");
  }
  (var)->value = std::move(updated);
  return absl::OkStatus();
}

// ResourceGather with batch_dims 0: output = value[indices] along axis 0,
// output shape indices.shape + value.shape[1:]. Indices out of range are
// INVALID_ARGUMENT (validate_indices is always on, as on TensorFlow's CPU).
absl::Status ResourceGatherKernel(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Variable * var, VariableInput(ctx, 0));
  RETURN_IF_ERROR(CheckDType(ctx, *var));
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  if (const int64_t b = ctx.attrs().Int("batch_dims"); b != 0) {
    return ctx.InvalidArgument("batch_dims ", b, " is not supported (only 0)");
  }
  if (!var->value.valid()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx.op().name, ": variable '", var->name,
                     "' is uninitialized; assign it first (AssignVariableOp)"));
  }
  const Tensor& params = var->value;
  if (params.rank() < 1) {
    return ctx.InvalidArgument("variable '", var->name,
                               "' is a scalar; gathering needs rank >= 1");
  }
  const Tensor& indices = ctx.input(1);
  const int64_t limit = params.dim(0);
  for (int64_t n = 0; n < indices.num_elements(); ++n) {
    const int64_t index = IndexAt(indices, n);
    if (index < 0 || index >= limit) {
      return ctx.InvalidArgument("indices[", n, "] = ", index,
                                 " is not in [0, ", limit, ") (variable '",
                                 var->name, "' of shape ",
                                 ShapeString(params.shape()), ")");
    }
  }
  Shape out_shape(indices.shape().begin(), indices.shape().end());
  out_shape.insert(out_shape.end(), params.shape().begin() + 1,
                   params.shape().end());
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, params.dtype(), out_shape));
  const int64_t inner = limit == 0 ? 0 : params.num_elements() / limit;
  DispatchAny(params.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = params.data<T>();
    T* py = y.mutable_data<T>();
    for (int64_t n = 0; n < indices.num_elements(); ++n) {
      const T* from = px + IndexAt(indices, n) * inner;
      std::copy(from, from + inner, py + n * inner);
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// d variable = UnsortedSegmentSum(dy rows, indices, variable rows),
// reshaped to the variable's shape: dense (TensorFlow: IndexedSlices). The
// variable's shape is fixed at VarHandleOp, so the saved handle tells it.
void ResourceGatherGrad(GradContext& g) {
  Tensor handle = g.Input(0), indices = g.Input(1);
  if (!g.ok()) return;
  const Variable* var = VariableOf(handle);
  if (var == nullptr) return;
  const Shape& shape = var->shape;
  int64_t inner = 1;
  for (size_t i = 1; i < shape.size(); ++i) inner *= shape[i];
  const int64_t n = NumElements(g.InputShape(1));
  Tensor dx = g.Op("UnsortedSegmentSum",
                   {g.Reshape(g.Grad(0), {n, inner}), g.Reshape(indices, {n})},
                   {{"num_segments", shape[0]}});
  g.SetGrad(0, g.Reshape(dx, shape));
}

}  // namespace

void RegisterVariableOps(OpRegistry& r) {
  r.Add(Op("VarHandleOp")
            .Outputs({"resource"})
            .OutputDType(DTypeRule::Fixed(DType::kResource))
            .Attr("dtype", AttrType::kType)
            .Attr("shape", AttrType::kIntList)
            .Attr("shared_name", std::string())
            .Attr("container", std::string())
            .Forward(VarHandleKernel)
            .NotDifferentiable()
            .Summary("a new, uninitialized variable of dtype and shape"));
  r.Add(Op("ReadVariableOp")
            .Inputs({"resource"})
            .ResourceInputs({0})
            .Outputs({"value"})
            .Attr("dtype", DType::kInvalid)
            // unset (kInvalid): the variable's, which no input dtype tells
            .OutputDType(DTypeRule::FromAttr("dtype"))
            .Forward(ReadVariableKernel)
            // d variable = dvalue
            .Backward([](GradContext& g) { g.SetGrad(0, g.Grad(0)); })
            .Summary("the variable's current value (recorded on tapes that "
                     "watch the handle or watch accessed variables)"));
  r.Add(Op("AssignVariableOp")
            .Inputs({"resource", "value"})
            .ResourceInputs({0})
            .Attr("dtype", DType::kInvalid)
            .Forward(AssignVariableKernel)
            .NotDifferentiable()
            .Summary("sets the variable's value (same dtype and shape); "
                     "earlier reads keep the old value"));
  r.Add(Op("AssignAddVariableOp")
            .Inputs({"resource", "value"})
            .ResourceInputs({0})
            .Attr("dtype", DType::kInvalid)
            .Forward([](KernelContext& ctx) {
              return AssignUpdateKernel(
                  ctx, [](const auto& a, const auto& b) { return a + b; });
            })
            .NotDifferentiable()
            .Summary("adds value to the variable (same dtype and shape; "
                     "initialized); earlier reads keep the old value"));
  r.Add(Op("AssignSubVariableOp")
            .Inputs({"resource", "value"})
            .ResourceInputs({0})
            .Attr("dtype", DType::kInvalid)
            .Forward([](KernelContext& ctx) {
              return AssignUpdateKernel(
                  ctx, [](const auto& a, const auto& b) { return a - b; });
            })
            .NotDifferentiable()
            .Summary("subtracts value from the variable (same dtype and "
                     "shape; initialized); earlier reads keep the old value"));
  r.Add(Op("ResourceGather")
            .Inputs({"resource", "indices"})
            .ResourceInputs({0})
            .Outputs({"output"})
            .Attr("batch_dims", int64_t{0})
            .Attr("validate_indices", true)
            .Attr("dtype", DType::kInvalid)
            // unset (kInvalid): the variable's
            .OutputDType(DTypeRule::FromAttr("dtype"))
            .Forward(ResourceGatherKernel)
            // d variable = UnsortedSegmentSum(dy, indices, rows): dense
            .Backward(ResourceGatherGrad)
            .SavesInputs({0, 1})
            .NonDifferentiableInputs({1})
            .Summary("value[indices] along axis 0 of the variable (an "
                     "embedding lookup; batch_dims 0); its gradient is a "
                     "DENSE tensor of the variable's shape (TensorFlow gives "
                     "IndexedSlices)"));
}

}  // namespace gradtape
