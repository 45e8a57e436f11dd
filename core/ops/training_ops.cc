// Optimizers as ops (TensorFlow's ResourceApply* training ops): each updates
// its variable and slot variables in place and has no outputs.
//
// Inputs come in three kinds, in TensorFlow's order: variable handles first
// (the variable, then its slots), hyperparameter scalars, and the gradient.
// Every handle's variable, the gradient and each scalar must share one
// floating or complex dtype (the "T" attr, inferred when unset); slots and
// gradient must have the variable's shape. All checks run before anything
// changes, and the new values go into fresh buffers, so a tensor read before
// the update keeps the old values (as after AssignVariableOp). `use_locking` is
// accepted for compatibility: a session applies its commands one at a time.
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"
#include "core/tensor/variable.h"

namespace gradtape {
namespace {

// How a ResourceApply op lays out its inputs: handles [0, num_vars), the
// gradient at `grad`, scalars everywhere else.
struct ApplyLayout {
  int num_vars;
  int grad;
};

template <typename T>
using FlatMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstFlatMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// What an update function sees: the new values of the variables (copies of
// the current ones, to be updated in place), the gradient, and the scalar
// inputs indexed by input position.
template <typename T>
struct ApplyArgs {
  std::vector<FlatMap<T>> var;
  ConstFlatMap<T> grad;
  std::vector<T> scalar;
};

std::string Described(const KernelContext& ctx, int i, const Variable& var) {
  return absl::StrCat(ctx.op().input_names[i], " '", var.name, "' (",
                      DTypeName(var.dtype), ShapeString(var.shape), ")");
}

// Validates the inputs; on success `vars` holds the variables (handles in
// input order) and `dtype` their dtype.
absl::Status CheckApply(const KernelContext& ctx, const ApplyLayout& layout,
                        std::vector<Variable*>* vars, DType* dtype) {
  const auto& names = ctx.op().input_names;
  for (int i = 0; i < layout.num_vars; ++i) {
    Variable* var = VariableOf(ctx.input(i));
    if (var == nullptr) {
      return ctx.InvalidArgument("input ", i, " (", names[i],
                                 ") must be a variable handle (VarHandleOp's "
                                 "output), got ",
                                 ctx.input(i).DebugString());
    }
    for (int j = 0; j < i; ++j) {
      if ((*vars)[j] == var) {
        return ctx.InvalidArgument(names[j], " and ", names[i],
                                   " are the same variable '", var->name,
                                   "'; slots need variables of their own");
      }
    }
    vars->push_back(var);
  }
  const Variable& var = *(*vars)[0];
  *dtype = var.dtype;
  const DType want = ctx.attrs().Type("T");
  if (want != DType::kInvalid && want != var.dtype) {
    return ctx.InvalidArgument("attr T is ", DTypeName(want), " but ",
                               Described(ctx, 0, var), " is not");
  }
  if (!IsFloating(var.dtype) && !IsComplex(var.dtype)) {
    return ctx.InvalidArgument(Described(ctx, 0, var),
                               " must be float32, float64, complex64 or "
                               "complex128");
  }
  for (int i = 1; i < layout.num_vars; ++i) {
    const Variable& slot = *(*vars)[i];
    if (slot.dtype != var.dtype || slot.shape != var.shape) {
      return ctx.InvalidArgument(Described(ctx, i, slot), " does not match ",
                                 Described(ctx, 0, var));
    }
  }
  const Tensor& grad = ctx.input(layout.grad);
  if (grad.dtype() != var.dtype || grad.shape() != var.shape) {
    return ctx.InvalidArgument(names[layout.grad], " is ", grad.DebugString(),
                               " but ", Described(ctx, 0, var),
                               " needs the same dtype and shape");
  }
  for (int i = layout.num_vars; i < ctx.num_inputs(); ++i) {
    if (i == layout.grad) continue;
    const Tensor& s = ctx.input(i);
    if (s.dtype() != var.dtype || s.rank() != 0) {
      return ctx.InvalidArgument(names[i], " must be a ", DTypeName(var.dtype),
                                 " scalar (the dtype of ",
                                 Described(ctx, 0, var), "), got ",
                                 s.DebugString());
    }
  }
  for (int i = 0; i < layout.num_vars; ++i) {
    if (!(*vars)[i]->value.valid()) {
      return absl::FailedPreconditionError(absl::StrCat(
          ctx.op().name, ": ", Described(ctx, i, *(*vars)[i]),
          " is uninitialized; assign it first (AssignVariableOp)"));
    }
  }
  return absl::OkStatus();
}

// Runs `update` (a generic lambda on ApplyArgs<T>&) on copies of the
// variables' values, then stores the copies.
template <typename Update>
absl::Status ApplyKernel(KernelContext& ctx, const ApplyLayout& layout,
                         Update update) {
  std::vector<Variable*> vars;
  DType dtype = DType::kInvalid;
  RETURN_IF_ERROR(CheckApply(ctx, layout, &vars, &dtype));
  std::vector<Tensor> values;
  values.reserve(vars.size());
  for (Variable* var : vars) {
    // Written in full by the memcpy: not zero-filled first.
    ASSIGN_OR_RETURN(Tensor copy, AllocateOutput(ctx, var->dtype, var->shape));
    if (copy.num_bytes() > 0) {
      std::memcpy(copy.raw_mutable_data(), var->value.raw_data(),
                  copy.num_bytes());
    }
    values.push_back(std::move(copy));
  }
  // Complex variables update by the same formulas in complex arithmetic
  // (TensorFlow's CPU kernels: grad^2, not |grad|^2; the principal sqrt).
  DispatchInexact(dtype, [&](auto zero) {
    using T = decltype(zero);
    const Tensor& grad = ctx.input(layout.grad);
    ApplyArgs<T> args{{}, grad.flat<T>(), std::vector<T>(ctx.num_inputs())};
    for (Tensor& v : values) args.var.push_back(v.flat<T>());
    for (int i = layout.num_vars; i < ctx.num_inputs(); ++i) {
      if (i != layout.grad) args.scalar[i] = ctx.input(i).data<T>()[0];
    }
    update(args);
  });
  for (size_t i = 0; i < vars.size(); ++i)
    vars[i]->value = std::move(values[i]);
  return absl::OkStatus();
}

// ResourceApplyAdam. float32 and float64 take one pass (VecAdam: the wide
// loop for the CPU, the same bits as the generic update) from the old
// values straight into the new buffers, with no copies first; complex
// variables take ApplyKernel's generic update.
absl::Status AdamKernel(KernelContext& ctx) {
  const bool nesterov = ctx.attrs().Bool("use_nesterov");
  const ApplyLayout layout{3, 9};
  auto generic = [nesterov](auto& a) {
    using T = typename std::decay_t<decltype(a.scalar)>::value_type;
    const T beta1_power = a.scalar[3], beta2_power = a.scalar[4];
    const T lr = a.scalar[5], beta1 = a.scalar[6];
    const T beta2 = a.scalar[7], epsilon = a.scalar[8];
    const T alpha = lr * std::sqrt(T(1) - beta2_power) / (T(1) - beta1_power);
    a.var[1] += (a.grad - a.var[1]) * (T(1) - beta1);
    a.var[2] += (a.grad.square() - a.var[2]) * (T(1) - beta2);
    if (nesterov) {
      a.var[0] -= ((a.grad * (T(1) - beta1) + beta1 * a.var[1]) * alpha) /
                  (a.var[2].sqrt() + epsilon);
    } else {
      a.var[0] -= (a.var[1] * alpha) / (a.var[2].sqrt() + epsilon);
    }
  };
  const DType dtype = ctx.input(layout.grad).dtype();
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) {
    return ApplyKernel(ctx, layout, generic);
  }
  std::vector<Variable*> vars;
  DType var_dtype = DType::kInvalid;
  RETURN_IF_ERROR(CheckApply(ctx, layout, &vars, &var_dtype));
  std::vector<Tensor> out;
  for (Variable* var : vars) {
    ASSIGN_OR_RETURN(Tensor t, AllocateOutput(ctx, var->dtype, var->shape));
    out.push_back(std::move(t));
  }
  DispatchFloat(var_dtype, [&](auto zero) {
    using T = decltype(zero);
    const T beta1_power = ctx.input(3).data<T>()[0];
    const T beta2_power = ctx.input(4).data<T>()[0];
    const T lr = ctx.input(5).data<T>()[0], beta1 = ctx.input(6).data<T>()[0];
    const T beta2 = ctx.input(7).data<T>()[0];
    AdamStep<T> step;
    step.one_minus_beta1 = T(1) - beta1;
    step.one_minus_beta2 = T(1) - beta2;
    step.beta1 = beta1;
    step.alpha = lr * std::sqrt(T(1) - beta2_power) / (T(1) - beta1_power);
    step.epsilon = ctx.input(8).data<T>()[0];
    step.nesterov = nesterov;
    const T* var = vars[0]->value.data<T>();
    const T* m = vars[1]->value.data<T>();
    const T* v = vars[2]->value.data<T>();
    const T* g = ctx.input(layout.grad).data<T>();
    T* var_out = out[0].mutable_data<T>();
    T* m_out = out[1].mutable_data<T>();
    T* v_out = out[2].mutable_data<T>();
    ParallelRange(out[0].num_elements(), kElementwiseGrain,
                  [&](int64_t begin, int64_t end) {
                    VecAdam(step, var + begin, m + begin, v + begin, g + begin,
                            var_out + begin, m_out + begin, v_out + begin,
                            end - begin);
                  });
  });
  for (size_t i = 0; i < vars.size(); ++i) vars[i]->value = std::move(out[i]);
  return absl::OkStatus();
}

}  // namespace

void RegisterTrainingOps(OpRegistry& r) {
  // var -= alpha * delta
  r.Add(Op("ResourceApplyGradientDescent")
            .Inputs({"var", "alpha", "delta"})
            .ResourceInputs({0})
            .Attr("T", DType::kInvalid)
            .Attr("use_locking", false)
            .Forward([](KernelContext& ctx) {
              return ApplyKernel(ctx, {1, 2}, [](auto& a) {
                a.var[0] -= a.scalar[1] * a.grad;
              });
            })
            .NotDifferentiable()
            .Summary("var -= alpha * delta, in place"));
  // accum = accum * momentum + grad
  // var -= lr * accum, or with use_nesterov
  // var -= grad * lr + accum * momentum * lr
  r.Add(Op("ResourceApplyMomentum")
            .Inputs({"var", "accum", "lr", "grad", "momentum"})
            .ResourceInputs({0, 1})
            .Attr("T", DType::kInvalid)
            .Attr("use_locking", false)
            .Attr("use_nesterov", false)
            .Forward([](KernelContext& ctx) {
              const bool nesterov = ctx.attrs().Bool("use_nesterov");
              return ApplyKernel(ctx, {2, 3}, [nesterov](auto& a) {
                const auto lr = a.scalar[2];
                const auto momentum = a.scalar[4];
                a.var[1] = a.var[1] * momentum + a.grad;
                if (nesterov) {
                  a.var[0] -= a.grad * lr + a.var[1] * momentum * lr;
                } else {
                  a.var[0] -= lr * a.var[1];
                }
              });
            })
            .NotDifferentiable()
            .Summary("momentum SGD (use_nesterov for Nesterov), in place"));
  // lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
  // m += (grad - m) * (1 - beta1); v += (grad^2 - v) * (1 - beta2)
  // var -= lr_t * m / (sqrt(v) + epsilon), or with use_nesterov
  // var -= lr_t * (grad * (1 - beta1) + beta1 * m) / (sqrt(v) + epsilon)
  r.Add(Op("ResourceApplyAdam")
            .Inputs({"var", "m", "v", "beta1_power", "beta2_power", "lr",
                     "beta1", "beta2", "epsilon", "grad"})
            .ResourceInputs({0, 1, 2})
            .Attr("T", DType::kInvalid)
            .Attr("use_locking", false)
            .Attr("use_nesterov", false)
            .Forward(AdamKernel)
            .NotDifferentiable()
            .Summary("Adam (use_nesterov for NAdam-style), in place; "
                     "beta1_power and beta2_power are beta^t"));
  // accum += grad^2 (if update_slots); var -= lr * grad / sqrt(accum)
  r.Add(Op("ResourceApplyAdagrad")
            .Inputs({"var", "accum", "lr", "grad"})
            .ResourceInputs({0, 1})
            .Attr("T", DType::kInvalid)
            .Attr("use_locking", false)
            .Attr("update_slots", true)
            .Forward([](KernelContext& ctx) {
              const bool update_slots = ctx.attrs().Bool("update_slots");
              return ApplyKernel(ctx, {2, 3}, [update_slots](auto& a) {
                if (update_slots) a.var[1] += a.grad.square();
                a.var[0] -= a.grad * a.scalar[2] * a.var[1].rsqrt();
              });
            })
            .NotDifferentiable()
            .Summary("Adagrad, in place"));
  // ms += (grad^2 - ms) * (1 - rho)
  // mom = mom * momentum + lr * grad / sqrt(ms + epsilon); var -= mom
  r.Add(Op("ResourceApplyRMSProp")
            .Inputs({"var", "ms", "mom", "lr", "rho", "momentum", "epsilon",
                     "grad"})
            .ResourceInputs({0, 1, 2})
            .Attr("T", DType::kInvalid)
            .Attr("use_locking", false)
            .Forward([](KernelContext& ctx) {
              return ApplyKernel(ctx, {3, 7}, [](auto& a) {
                using T = typename std::decay_t<decltype(a.scalar)>::value_type;
                const T lr = a.scalar[3], rho = a.scalar[4];
                const T momentum = a.scalar[5], epsilon = a.scalar[6];
                a.var[1] += (a.grad.square() - a.var[1]) * (T(1) - rho);
                a.var[2] = a.var[2] * momentum +
                           (a.grad * lr) / (a.var[1] + epsilon).sqrt();
                a.var[0] -= a.var[2];
              });
            })
            .NotDifferentiable()
            .Summary("RMSProp with momentum, in place"));
}

}  // namespace gradtape
