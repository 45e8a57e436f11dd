// Elementwise binary arithmetic with numpy broadcasting: AddV2 (Add), Sub,
// Mul, RealDiv (Div), Maximum, Minimum, SquaredDifference, Pow, Atan2. Each
// backward sums an input's gradient over the axes that input was broadcast
// along.
#include <cmath>
#include <complex>
#include <type_traits>

#include "core/autodiff/forward_mode.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {
namespace {

Op Binary(Op op) { return std::move(op.Inputs({"x", "y"}).Outputs({"z"})); }

// AddV2 and Add (TensorFlow's older name for it).
Op Addition(Op op) {
  return std::move(
      Binary(std::move(op))
          .Forward([](KernelContext& ctx) {
            return BinaryKernel<DTypes::kArithmetic>(ctx,
                                                     ArithFn<VecArith::kAdd>());
          })
          // dx = dy, dy' = dy (each summed over its broadcast axes)
          .Backward([](GradContext& g) {
            for (int i = 0; i < 2; ++i) {
              if (g.NeedsGrad(i)) {
                g.SetGrad(i, g.SumToShape(g.Grad(0), g.InputShape(i)));
              }
            }
          })
          // tz = tx + ty
          .Jvp([](JvpContext& j) {
            j.SetTangent(0, j.Add(j.Tangent(0), j.Tangent(1)));
          })
          .Summary("z = x + y, with numpy broadcasting"));
}

// RealDiv and Div (both floating or complex here: no integer division).
Op Division(Op op) {
  return std::move(
      Binary(std::move(op))
          .Forward([](KernelContext& ctx) {
            return BinaryKernel<DTypes::kInexact>(ctx,
                                                  ArithFn<VecArith::kDiv>());
          })
          // dx = dz / conj(y), dy = -dz * conj(x) / conj(y)^2
          .Backward([](GradContext& g) {
            Tensor x = g.Conj(g.Input(0)), y = g.Conj(g.Input(1));
            Tensor dz = g.Grad(0);
            if (g.NeedsGrad(0)) {
              g.SetGrad(0, g.SumToShape(g.Div(dz, y), g.InputShape(0)));
            }
            if (g.NeedsGrad(1)) {
              Tensor t = g.Div(g.Div(g.Mul(dz, x), y), y);
              g.SetGrad(1, g.SumToShape(g.Neg(t), g.InputShape(1)));
            }
          })
          .SavesInputs({0, 1})
          // tz = tx / y - z * ty / y
          .Jvp([](JvpContext& j) {
            Tensor y = j.Input(1), t;
            if (j.HasTangent(0)) t = j.Div(j.Tangent(0), y);
            if (j.HasTangent(1)) {
              Tensor u = j.Div(j.Mul(j.Output(0), j.Tangent(1)), y);
              t = t.valid() ? j.Sub(t, u) : j.Neg(u);
            }
            j.SetTangent(0, t);
          })
          .Summary("z = x / y (floating or complex), with numpy "
                   "broadcasting"));
}

// Maximum / Minimum: dx gets dz where `selector`(x, y) holds (GreaterEqual /
// LessEqual: ties go to x, as in TensorFlow), dy elsewhere; each summed over
// its broadcast axes.
Op MaxMin(Op op, bool max) {
  const char* selector = max ? "GreaterEqual" : "LessEqual";
  return std::move(
      Binary(std::move(op))
          .Forward([max](KernelContext& ctx) {
            if (max) {
              return BinaryKernel<DTypes::kNumeric>(
                  ctx, [](auto a, auto b) { return a >= b ? a : b; });
            }
            return BinaryKernel<DTypes::kNumeric>(
                ctx, [](auto a, auto b) { return a <= b ? a : b; });
          })
          // m = x >= y (Maximum) or x <= y (Minimum):
          //   dx = select(m, dz, 0),  dy = select(m, 0, dz)
          .Backward([selector](GradContext& g) {
            Tensor dz = g.Grad(0);
            Tensor mask = g.Op(selector, {g.Input(0), g.Input(1)});
            Tensor zeros = g.Op("ZerosLike", {dz});
            if (g.NeedsGrad(0)) {
              g.SetGrad(0, g.SumToShape(g.Op("Select", {mask, dz, zeros}),
                                        g.InputShape(0)));
            }
            if (g.NeedsGrad(1)) {
              g.SetGrad(1, g.SumToShape(g.Op("Select", {mask, zeros, dz}),
                                        g.InputShape(1)));
            }
          })
          .SavesInputs({0, 1})
          .Summary(max ? "z = max(x, y), with numpy broadcasting"
                       : "z = min(x, y), with numpy broadcasting"));
}

// x^y for integers, by squaring, wrapping on overflow as TensorFlow's CPU
// kernel does (y >= 0: the caller checked).
template <typename T>
T IntegerPow(T x, T y) {
  using U = std::make_unsigned_t<T>;
  U result = 1, base = static_cast<U>(x);
  for (U e = static_cast<U>(y); e != 0; e >>= 1) {
    if (e & 1) result *= base;
    base *= base;
  }
  return static_cast<T>(result);
}

absl::Status PowKernel(KernelContext& ctx) {
  const Tensor& y = ctx.input(1);
  const bool int32 = y.dtype() == DType::kInt32;
  if ((int32 || y.dtype() == DType::kInt64) &&
      ctx.input(0).dtype() == y.dtype()) {
    for (int64_t i = 0; i < y.num_elements(); ++i) {
      const int64_t e = int32 ? y.data<int32_t>()[i] : y.data<int64_t>()[i];
      if (e < 0) {
        return ctx.InvalidArgument(
            "integers to negative integer powers are not allowed: y[", i,
            "] = ", e, " (y ", y.DebugString(), ")");
      }
    }
  }
  return BinaryKernel<DTypes::kArithmetic>(ctx, [](auto a, auto b) {
    if constexpr (std::is_integral_v<decltype(a)>) {
      return IntegerPow(a, b);
    } else {
      return std::pow(a, b);
    }
  });
}

// TensorFlow's _PowGrad, with x, y, z conjugated for complex:
//   dx = dz * y * x^(y - 1)
//   dy = dz * z * log(x) where x > 0 (complex: x != 0), else 0
void PowBackward(GradContext& g) {
  Tensor x = g.Conj(g.Input(0)), y = g.Conj(g.Input(1)), dz = g.Grad(0);
  const DType dtype = g.InputDType(0);
  if (g.NeedsGrad(0)) {
    Tensor p = g.Op("Pow", {x, g.Sub(y, g.Const(1.0, dtype))});
    g.SetGrad(0, g.SumToShape(g.Mul(dz, g.Mul(y, p)), g.InputShape(0)));
  }
  if (g.NeedsGrad(1)) {
    Tensor z = g.Conj(g.Output(0));
    Tensor zero = g.Op("ZerosLike", {x});
    Tensor mask = IsComplex(dtype) ? g.Op("NotEqual", {x, zero})
                                   : g.Op("Greater", {x, zero});
    Tensor safe_x = g.Op("Select", {mask, x, g.Op("OnesLike", {x})});
    Tensor log_x = g.Op("Select", {mask, g.Op("Log", {safe_x}), zero});
    g.SetGrad(1, g.SumToShape(g.Mul(dz, g.Mul(z, log_x)), g.InputShape(1)));
  }
}

}  // namespace

void RegisterBinaryOps(OpRegistry& r) {
  r.Add(Addition(Op("AddV2")));
  r.Add(Addition(Op("Add")));
  r.Add(Binary(Op("Sub"))
            .Forward([](KernelContext& ctx) {
              return BinaryKernel<DTypes::kArithmetic>(
                  ctx, ArithFn<VecArith::kSub>());
            })
            // dx = dz, dy = -dz
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.SumToShape(g.Grad(0), g.InputShape(0)));
              }
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, g.SumToShape(g.Neg(g.Grad(0)), g.InputShape(1)));
              }
            })
            // tz = tx - ty
            .Jvp([](JvpContext& j) {
              j.SetTangent(0, j.Sub(j.Tangent(0), j.Tangent(1)));
            })
            .Summary("z = x - y, with numpy broadcasting"));
  r.Add(Binary(Op("Mul"))
            .Forward([](KernelContext& ctx) {
              return BinaryKernel<DTypes::kArithmetic>(
                  ctx, ArithFn<VecArith::kMul>());
            })
            // dx = dz * conj(y), dy = dz * conj(x)  (conj: complex only)
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.SumToShape(g.Mul(g.Grad(0), g.Conj(g.Input(1))),
                                          g.InputShape(0)));
              }
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, g.SumToShape(g.Mul(g.Grad(0), g.Conj(g.Input(0))),
                                          g.InputShape(1)));
              }
            })
            .SavesInputs({0, 1})
            // tz = tx * y + x * ty (each term broadcasts to z's shape)
            .Jvp([](JvpContext& j) {
              Tensor a, b;
              if (j.HasTangent(0)) a = j.Mul(j.Tangent(0), j.Input(1));
              if (j.HasTangent(1)) b = j.Mul(j.Input(0), j.Tangent(1));
              j.SetTangent(0, !a.valid() ? b : !b.valid() ? a : j.Add(a, b));
            })
            .Summary("z = x * y, with numpy broadcasting"));
  r.Add(Division(Op("RealDiv")));
  r.Add(Division(Op("Div")));
  r.Add(MaxMin(Op("Maximum"), /*max=*/true));
  r.Add(MaxMin(Op("Minimum"), /*max=*/false));
  r.Add(Binary(Op("SquaredDifference"))
            .Forward([](KernelContext& ctx) {
              return BinaryKernel<DTypes::kArithmetic>(ctx, [](auto a, auto b) {
                const auto d = a - b;
                if constexpr (std::is_arithmetic_v<decltype(d)>) {
                  return d * d;
                } else {  // TensorFlow's: |x - y|^2, a real value
                  return d * std::conj(d);
                }
              });
            })
            // dx = 2 (x - y) dz,  dy = -dx (each summed to its shape). For
            // complex, z = |x - y|^2 is real, so only Re(dz) reaches x and
            // y (TensorFlow's _SquaredDifferenceGrad uses dz itself, which
            // differs only when a loss reads Im(z), always 0).
            .Backward([](GradContext& g) {
              Tensor two = g.Const(2.0, g.InputDType(0));
              Tensor dz = g.Grad(0);
              if (IsComplex(g.InputDType(0))) {
                Tensor re = g.Op("Real", {dz});
                dz = g.Op("Complex", {re, g.Op("ZerosLike", {re})});
              }
              Tensor t = g.Mul(g.Mul(two, dz), g.Sub(g.Input(0), g.Input(1)));
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.SumToShape(t, g.InputShape(0)));
              }
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, g.SumToShape(g.Neg(t), g.InputShape(1)));
              }
            })
            .SavesInputs({0, 1})
            .Summary("z = (x - y)^2 (|x - y|^2 for complex), with numpy "
                     "broadcasting"));
  r.Add(Binary(Op("Pow"))
            .Forward(PowKernel)
            // dx = dz * y * x^(y-1), dy = dz * z * log(x) (0 where x <= 0)
            .Backward(PowBackward)
            .SavesInputs({0, 1})
            .SavesOutputs({0})
            .Summary("z = x^y, with numpy broadcasting (floating, complex; "
                     "integers with y >= 0, wrapping on overflow)"));
  r.Add(Op("Atan2")
            .Inputs({"y", "x"})
            .Outputs({"z"})
            .Forward([](KernelContext& ctx) {
              return BinaryKernel<DTypes::kFloating>(
                  ctx, [](auto a, auto b) { return std::atan2(a, b); });
            })
            // TensorFlow's _Atan2Grad: with q = dz / (x^2 + y^2),
            //   dy = x q,  dx = -y q  (each summed to its input's shape)
            .Backward([](GradContext& g) {
              Tensor y = g.Input(0), x = g.Input(1);
              Tensor q = g.Div(g.Grad(0), g.Add(g.Mul(x, x), g.Mul(y, y)));
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.SumToShape(g.Mul(x, q), g.InputShape(0)));
              }
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, g.SumToShape(g.Neg(g.Mul(y, q)), g.InputShape(1)));
              }
            })
            .SavesInputs({0, 1})
            .Summary("z = atan2(y, x), the angle of (x, y) in [-pi, pi], "
                     "with numpy broadcasting"));
}

}  // namespace gradtape
