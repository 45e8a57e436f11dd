// Elementwise unary math: Neg, Abs, Sign, Square, Sqrt, Rsqrt, Exp, Expm1,
// Log, Log1p, Sin, Cos, Tan, Tanh, Sigmoid, Reciprocal (Inv), Erf, Erfc,
// Floor, Ceil, Round, and the helpers their backwards run, TensorFlow's
// SqrtGrad, RsqrtGrad, TanhGrad, SigmoidGrad and ReciprocalGrad (inputs
// (y, dy), y the forward output). The ops whose TensorFlow CPU kernels take
// complex take complex64 and complex128 here too (not Abs, Erf, Erfc, Floor,
// Ceil, Round, whose kernels do not; nor Sign yet: TensorFlow's zero
// gradient is not x / |x|'s derivative, which the generic gradient check
// compares), with TensorFlow's conjugating backwards.
#include <cmath>
#include <complex>
#include <type_traits>

#include "Eigen/Core"
#include "core/autodiff/forward_mode.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"
#include "core/ops/vector_math.h"
#include "unsupported/Eigen/SpecialFunctions"

namespace gradtape {
namespace {

Op Unary(Op op) { return std::move(op.Inputs({"x"}).Outputs({"y"})); }
// TensorFlow's *Grad helpers take (y, dy): y the forward output.
Op GradHelper(Op op) {
  return std::move(op.Inputs({"y", "dy"}).Outputs({"z"}));
}

template <DTypes kKinds = DTypes::kFloating>
absl::Status SameShapeBinary(KernelContext& ctx) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, kKinds));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 1));
  if (ctx.input(0).shape() != ctx.input(1).shape()) {
    return ctx.InvalidArgument("y ", ShapeString(ctx.input(0).shape()),
                               " and dy ", ShapeString(ctx.input(1).shape()),
                               " must have the same shape");
  }
  return absl::OkStatus();
}

// z = f(y, dy) for the *Grad helpers (same shapes; floating, or kKinds).
template <DTypes kKinds = DTypes::kFloating, typename F>
absl::Status GradHelperKernel(KernelContext& ctx, F f) {
  RETURN_IF_ERROR(SameShapeBinary<kKinds>(ctx));
  return BinaryKernel<kKinds>(ctx, f);
}

// y = f(x) elementwise for complex x, f a scalar function of std::complex
// (std::sqrt, std::exp, ...); for real x, `real` (the float path as it was).
template <typename F, typename Real>
absl::Status InexactKernel(KernelContext& ctx, F f, Real real) {
  if (!IsComplex(ctx.input(0).dtype())) return real(ctx);
  return UnaryKernel<DTypes::kInexact>(
      ctx, [f](const auto& x) { return x.unaryExpr(f); });
}

// e^z - 1 and ln(1 + z) for complex z, accurate near 0:
//   e^z - 1 = (expm1(a) cos b - 2 sin^2(b / 2)) + i e^a sin b,
//   ln(1 + z) = log1p(2a + a^2 + b^2) / 2 + i atan2(b, 1 + a).
template <typename C>
C ComplexExpm1(C z) {
  if constexpr (std::is_floating_point_v<C>) {  // compiled, never run
    return std::expm1(z);
  } else {
    const auto a = z.real(), b = z.imag();
    const auto s = std::sin(b / 2);
    return C(std::expm1(a) * std::cos(b) - 2 * s * s,
             std::exp(a) * std::sin(b));
  }
}
template <typename C>
C ComplexLog1p(C z) {
  if constexpr (std::is_floating_point_v<C>) {  // compiled, never run
    return std::log1p(z);
  } else {
    const auto a = z.real(), b = z.imag();
    return C(std::log1p(2 * a + a * a + b * b) / 2, std::atan2(b, 1 + a));
  }
}

// conj(t) for a complex t, t itself otherwise (in a forward-mode rule).
Tensor ConjOf(JvpContext& j, Tensor t) {
  return j.ok() && IsComplex(t.dtype()) ? j.Op("Conj", {t}) : t;
}

// y = f(x) for floating x, with f an array function of vector_math.h
// (f(const T* x, T* y, int64_t n)).
template <typename F>
absl::Status ArrayFloatKernel(KernelContext& ctx, F f) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kFloating));
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(Tensor y, AllocateOutput(ctx, x.dtype(), x.shape()));
  DispatchFloat(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    ParallelRange(x.num_elements(), kElementwiseGrain / 4,
                  [&](int64_t begin, int64_t end) {
                    f(px + begin, py + begin, end - begin);
                  });
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

template <typename T>
T Conj(T v) {
  if constexpr (std::is_same_v<T, complex64> || std::is_same_v<T, complex128>) {
    return std::conj(v);
  } else {
    return v;
  }
}

// ReciprocalGrad: z = -dy * conj(y)^2 (0 where dy is 0, so an infinite y
// with no gradient flowing gives 0, as TensorFlow's kernel does).
absl::Status ReciprocalGradKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kInexact));
  if (ctx.input(0).shape() != ctx.input(1).shape()) {
    return ctx.InvalidArgument("y ", ctx.input(0).DebugString(), " and dy ",
                               ctx.input(1).DebugString(),
                               " must have the same shape");
  }
  return BinaryKernel<DTypes::kInexact>(ctx, [](auto y, auto dy) {
    using T = decltype(y);
    if (dy == T(0)) return T(0);
    const T cy = Conj(y);
    return -dy * cy * cy;
  });
}

// Reciprocal and Inv (TensorFlow's older name for it).
Op Reciprocal(Op op) {
  return std::move(
      Unary(std::move(op))
          .Forward([](KernelContext& ctx) {
            return UnaryKernel<DTypes::kInexact>(
                ctx, [](const auto& x) { return x.inverse(); });
          })
          // dx = -dy * conj(y)^2 = ReciprocalGrad(y, dy)
          .Backward([](GradContext& g) {
            g.SetGrad(0, g.Op("ReciprocalGrad", {g.Output(0), g.Grad(0)}));
          })
          .SavesOutputs({0})
          .Summary("y = 1 / x (floating or complex)"));
}

// Erf (sign = 1) and Erfc (sign = -1): dx = sign * 2/sqrt(pi) e^(-x^2) dy.
void ErfBackward(GradContext& g, double sign) {
  const DType t = g.InputDType(0);
  Tensor x = g.Input(0);
  Tensor e = g.Op("Exp", {g.Neg(g.Mul(x, x))});
  Tensor c = g.Const(sign * 2.0 / std::sqrt(M_PI), t);
  g.SetGrad(0, g.Mul(g.Grad(0), g.Mul(c, e)));
}

// Erf, Erfc, Floor, Ceil and Round (TensorFlow registers no gradient for
// the last three: their gradient is None).
void RegisterRoundingAndErfOps(OpRegistry& r) {
  r.Add(Unary(Op("Erf"))
            .Forward([](KernelContext& ctx) {
              // VecErf: float32 through our polynomial fits, vectorised
              // per ISA (within 3 ulp); float64 through std::erf.
              return ArrayFloatKernel(ctx, [](const auto* x, auto* y,
                                              int64_t n) { VecErf(x, y, n); });
            })
            // dx = 2/sqrt(pi) e^(-x^2) dy
            .Backward([](GradContext& g) { ErfBackward(g, 1.0); })
            .SavesInputs({0})
            .Summary("y = erf(x), the error function"));
  r.Add(Unary(Op("Erfc"))
            .Forward([](KernelContext& ctx) {
              return UnaryFloatKernel(ctx, [](const auto& x) {
                return x.unaryExpr([](auto v) { return std::erfc(v); });
              });
            })
            // dx = -2/sqrt(pi) e^(-x^2) dy
            .Backward([](GradContext& g) { ErfBackward(g, -1.0); })
            .SavesInputs({0})
            .Summary("y = erfc(x) = 1 - erf(x)"));
  r.Add(Unary(Op("Floor"))
            .Forward([](KernelContext& ctx) {
              return UnaryFloatKernel(ctx, [](const auto& x) {
                return x.unaryExpr([](auto v) { return std::floor(v); });
              });
            })
            .NotDifferentiable()  // TensorFlow's _FloorGrad: None
            .Summary("y = the largest integer <= x (floating)"));
  r.Add(Unary(Op("Ceil"))
            .Forward([](KernelContext& ctx) {
              return UnaryFloatKernel(ctx, [](const auto& x) {
                return x.unaryExpr([](auto v) { return std::ceil(v); });
              });
            })
            .NotDifferentiable()  // TensorFlow's _CeilGrad: None
            .Summary("y = the smallest integer >= x (floating)"));
  r.Add(Unary(Op("Round"))
            .Forward([](KernelContext& ctx) {
              return UnaryKernel<DTypes::kNumeric>(ctx, [](const auto& x) {
                return x.unaryExpr([](auto v) {
                  if constexpr (std::is_integral_v<decltype(v)>) {
                    return v;
                  } else {  // half to even (the default rounding mode)
                    return std::nearbyint(v);
                  }
                });
              });
            })
            .NotDifferentiable()  // TensorFlow's _RoundGrad: None
            .Summary("y = x rounded to the nearest integer, half to even "
                     "(integers: x)"));
}

}  // namespace

void RegisterUnaryOps(OpRegistry& r) {
  RegisterRoundingAndErfOps(r);
  r.Add(Unary(Op("Neg"))
            .Forward([](KernelContext& ctx) {
              return UnaryKernel<DTypes::kArithmetic>(
                  ctx, [](const auto& x) { return -x; });
            })
            // dx = -dy
            .Backward([](GradContext& g) { g.SetGrad(0, g.Neg(g.Grad(0))); })
            .Jvp(LinearUnaryJvp)  // ty = -tx
            .Summary("y = -x"));
  r.Add(Unary(Op("Square"))
            .Forward([](KernelContext& ctx) {
              return UnaryKernel<DTypes::kInexact>(
                  ctx, [](const auto& x) { return x * x; });
            })
            // dx = dy * 2 conj(x)
            .Backward([](GradContext& g) {
              Tensor two = g.Const(2.0, g.InputDType(0));
              g.SetGrad(0, g.Mul(g.Grad(0), g.Mul(two, g.Conj(g.Input(0)))));
            })
            .SavesInputs({0})
            // ty = 2x * tx
            .Jvp([](JvpContext& j) {
              Tensor two = j.Const(2.0, j.Input(0).dtype());
              j.SetTangent(0, j.Mul(j.Mul(two, j.Input(0)), j.Tangent(0)));
            })
            .Summary("y = x^2 (floating or complex)"));
  r.Add(Unary(Op("Sqrt"))
            .Forward([](KernelContext& ctx) {
              return InexactKernel(
                  ctx, [](auto v) { return std::sqrt(v); },
                  [](KernelContext& c) {
                    return UnaryFloatKernel(
                        c, [](const auto& x) { return x.sqrt(); });
                  });
            })
            // dx = dy * 0.5 / conj(y)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("SqrtGrad", {g.Output(0), g.Grad(0)}));
            })
            .SavesOutputs({0})
            // ty = 0.5 tx / y
            .Jvp([](JvpContext& j) {
              j.SetTangent(
                  0, j.Op("SqrtGrad", {ConjOf(j, j.Output(0)), j.Tangent(0)}));
            })
            .Summary("y = sqrt(x) (complex: the principal branch)"));
  r.Add(GradHelper(Op("SqrtGrad"))
            .Forward([](KernelContext& ctx) {
              return GradHelperKernel<DTypes::kInexact>(
                  ctx, [](auto y, auto dy) {
                    return static_cast<decltype(y)>(0.5) * dy / Conj(y);
                  });
            })
            // z = 0.5 dy / conj(y) (TensorFlow's _SqrtGradGrad): with
            // ga = g / y,  d(dy) = 0.5 ga,  d(y) = -conj(ga) z
            .Backward([](GradContext& g) {
              Tensor ga = g.Div(g.Grad(0), g.Input(0));
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.Neg(g.Mul(g.Conj(ga), g.Output(0))));
              }
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, g.Mul(g.Const(0.5, g.InputDType(0)), ga));
              }
            })
            .SavesInputs({0})
            .SavesOutputs({0})
            .Summary("z = 0.5 * dy / conj(y) (the gradient of Sqrt)"));
  r.Add(Unary(Op("Rsqrt"))
            .Forward([](KernelContext& ctx) {
              return InexactKernel(
                  ctx, [](auto v) { return decltype(v)(1) / std::sqrt(v); },
                  [](KernelContext& c) {
                    return UnaryFloatKernel(
                        c, [](const auto& x) { return x.rsqrt(); });
                  });
            })
            // dx = -0.5 dy conj(y)^3 = RsqrtGrad(y, dy)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("RsqrtGrad", {g.Output(0), g.Grad(0)}));
            })
            .SavesOutputs({0})
            // ty = -0.5 tx y^3
            .Jvp([](JvpContext& j) {
              j.SetTangent(
                  0, j.Op("RsqrtGrad", {ConjOf(j, j.Output(0)), j.Tangent(0)}));
            })
            .Summary("y = 1 / sqrt(x) (complex: the principal branch)"));
  r.Add(
      GradHelper(Op("RsqrtGrad"))
          .Forward([](KernelContext& ctx) {
            return GradHelperKernel<DTypes::kInexact>(ctx, [](auto y, auto dy) {
              const auto cy = Conj(y);
              return static_cast<decltype(y)>(-0.5) * dy * cy * cy * cy;
            });
          })
          // z = -0.5 dy conj(y)^3 (TensorFlow's _RsqrtGradGrad):
          //   d(y) = -1.5 conj(g) dy conj(y)^2,
          //   d(dy) = RsqrtGrad(conj(y), g)
          .Backward([](GradContext& g) {
            Tensor y = g.Conj(g.Input(0)), dy = g.Input(1), gz = g.Grad(0);
            if (g.NeedsGrad(0)) {
              Tensor c = g.Const(-1.5, g.InputDType(0));
              g.SetGrad(0, g.Mul(g.Mul(c, g.Mul(g.Conj(gz), dy)), g.Mul(y, y)));
            }
            if (g.NeedsGrad(1)) g.SetGrad(1, g.Op("RsqrtGrad", {y, gz}));
          })
          .SavesInputs({0, 1})
          .Summary("z = -0.5 * dy * conj(y)^3 (the gradient of Rsqrt)"));
  r.Add(Unary(Op("Exp"))
            .Forward([](KernelContext& ctx) {
              return InexactKernel(
                  ctx, [](auto v) { return std::exp(v); },
                  [](KernelContext& c) {
                    return ArrayFloatKernel(
                        c, [](const auto* x, auto* y, int64_t n) {
                          VecExp(x, y, n);
                        });
                  });
            })
            // dx = dy * conj(y)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Mul(g.Grad(0), g.Conj(g.Output(0))));
            })
            .SavesOutputs({0})
            // ty = tx * y
            .Jvp([](JvpContext& j) {
              j.SetTangent(0, j.Mul(j.Tangent(0), j.Output(0)));
            })
            .Summary("y = e^x (floating or complex)"));
  r.Add(Unary(Op("Log"))
            .Forward([](KernelContext& ctx) {
              if (IsComplex(ctx.input(0).dtype())) {  // principal branch
                return UnaryKernel<DTypes::kInexact>(
                    ctx, [](const auto& x) { return x.log(); });
              }
              return ArrayFloatKernel(ctx, [](const auto* x, auto* y,
                                              int64_t n) { VecLog(x, y, n); });
            })
            // dx = dy / conj(x)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Div(g.Grad(0), g.Conj(g.Input(0))));
            })
            .SavesInputs({0})
            // ty = tx / x
            .Jvp([](JvpContext& j) {
              j.SetTangent(0, j.Div(j.Tangent(0), j.Input(0)));
            })
            .Summary("y = ln(x) (complex: the principal branch)"));
  r.Add(Unary(Op("Tanh"))
            .Forward([](KernelContext& ctx) {
              return InexactKernel(
                  ctx, [](auto v) { return std::tanh(v); },
                  [](KernelContext& c) {
                    return UnaryFloatKernel(
                        c, [](const auto& x) { return x.tanh(); });
                  });
            })
            // dx = dy * (1 - conj(y)^2) (TensorFlow's _TanhGrad)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("TanhGrad", {g.Conj(g.Output(0)), g.Grad(0)}));
            })
            .SavesOutputs({0})
            // ty = tx * (1 - y^2)
            .Jvp([](JvpContext& j) {
              j.SetTangent(0, j.Op("TanhGrad", {j.Output(0), j.Tangent(0)}));
            })
            .Summary("y = tanh(x) (floating or complex)"));
  r.Add(GradHelper(Op("TanhGrad"))
            .Forward([](KernelContext& ctx) {
              return GradHelperKernel<DTypes::kInexact>(
                  ctx, [](auto y, auto dy) {
                    return dy * (static_cast<decltype(y)>(1) - y * y);
                  });
            })
            // z = dy (1 - y^2) (TensorFlow's _TanhGradGrad, conjugating y
            // and dy for complex):  d(y) = -2 g dy y,  d(dy) = g (1 - y^2)
            .Backward([](GradContext& g) {
              Tensor y = g.Conj(g.Input(0)), dy = g.Conj(g.Input(1));
              Tensor gz = g.Grad(0);
              if (g.NeedsGrad(0)) {
                Tensor m2 = g.Const(-2.0, g.InputDType(0));
                g.SetGrad(0, g.Mul(g.Mul(m2, g.Mul(gz, dy)), y));
              }
              if (g.NeedsGrad(1)) g.SetGrad(1, g.Op("TanhGrad", {y, gz}));
            })
            .SavesInputs({0, 1})
            .Summary("z = dy * (1 - y^2) (the gradient of Tanh)"));
  r.Add(
      Unary(Op("Sigmoid"))
          .Forward([](KernelContext& ctx) {
            return InexactKernel(
                ctx,
                [](auto v) {
                  using T = decltype(v);
                  return T(1) / (T(1) + std::exp(-v));
                },
                [](KernelContext& c) {
                  return ArrayFloatKernel(
                      c, [](const auto* x, auto* y, int64_t n) {
                        VecSigmoid(x, y, n);
                      });
                });
          })
          // dx = dy * conj(y) * (1 - conj(y)) (TensorFlow's _SigmoidGrad)
          .Backward([](GradContext& g) {
            g.SetGrad(0, g.Op("SigmoidGrad", {g.Conj(g.Output(0)), g.Grad(0)}));
          })
          .SavesOutputs({0})
          // ty = tx * y * (1 - y)
          .Jvp([](JvpContext& j) {
            j.SetTangent(0, j.Op("SigmoidGrad", {j.Output(0), j.Tangent(0)}));
          })
          .Summary("y = 1 / (1 + e^-x) (floating or complex)"));
  r.Add(GradHelper(Op("SigmoidGrad"))
            .Forward([](KernelContext& ctx) {
              return GradHelperKernel<DTypes::kInexact>(
                  ctx, [](auto y, auto dy) {
                    return dy * y * (static_cast<decltype(y)>(1) - y);
                  });
            })
            // z = dy y (1 - y) (TensorFlow's _SigmoidGradGrad, conjugating y
            // and dy for complex):  d(y) = g dy (1 - 2y),  d(dy) = g y (1 - y)
            .Backward([](GradContext& g) {
              Tensor y = g.Conj(g.Input(0)), dy = g.Conj(g.Input(1));
              Tensor gz = g.Grad(0);
              if (g.NeedsGrad(0)) {
                DType t = g.InputDType(0);
                Tensor one_minus_2y =
                    g.Sub(g.Const(1.0, t), g.Mul(g.Const(2.0, t), y));
                g.SetGrad(0, g.Mul(g.Mul(gz, dy), one_minus_2y));
              }
              if (g.NeedsGrad(1)) g.SetGrad(1, g.Op("SigmoidGrad", {y, gz}));
            })
            .SavesInputs({0, 1})
            .Summary("z = dy * y * (1 - y) (the gradient of Sigmoid)"));
  r.Add(Unary(Op("Abs"))
            .Forward([](KernelContext& ctx) {
              return UnaryKernel<DTypes::kNumeric>(
                  ctx, [](const auto& x) { return x.abs(); });
            })
            // dx = dy * sign(x)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Mul(g.Grad(0), g.Op("Sign", {g.Input(0)})));
            })
            .SavesInputs({0})
            .Summary("y = |x| (real dtypes)"));
  r.Add(Unary(Op("Sign"))
            .Forward([](KernelContext& ctx) {
              // Eigen's sign of a complex z is z / |z| (0 at 0), TF's.
              return UnaryKernel<DTypes::kArithmetic>(
                  ctx, [](const auto& x) { return x.sign(); });
            })
            // dx = 0 (TensorFlow's _SignGrad: zeros, not None, also for
            // complex, where sign is not constant)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("ZerosLike", {g.Grad(0)}));
            })
            .Summary("y = -1, 0 or 1 as x < 0, x == 0, x > 0; x / |x| "
                     "for complex x (0 at 0)"));
  r.Add(Unary(Op("Expm1"))
            .Forward([](KernelContext& ctx) {
              return InexactKernel(
                  ctx, [](auto v) { return ComplexExpm1(v); },
                  [](KernelContext& c) {
                    return UnaryFloatKernel(
                        c, [](const auto& x) { return x.expm1(); });
                  });
            })
            // dx = dy * e^conj(x)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Mul(g.Grad(0), g.Op("Exp", {g.Conj(g.Input(0))})));
            })
            .SavesInputs({0})
            .Summary("y = e^x - 1, accurate near 0 (floating or complex)"));
  r.Add(Unary(Op("Log1p"))
            .Forward([](KernelContext& ctx) {
              return InexactKernel(
                  ctx, [](auto v) { return ComplexLog1p(v); },
                  [](KernelContext& c) {
                    return UnaryFloatKernel(
                        c, [](const auto& x) { return x.log1p(); });
                  });
            })
            // dx = dy / (1 + conj(x))
            .Backward([](GradContext& g) {
              Tensor one = g.Const(1.0, g.InputDType(0));
              g.SetGrad(0, g.Div(g.Grad(0), g.Add(one, g.Conj(g.Input(0)))));
            })
            .SavesInputs({0})
            .Summary("y = ln(1 + x), accurate near 0 (complex: the principal "
                     "branch)"));
  r.Add(Unary(Op("Sin"))
            .Forward([](KernelContext& ctx) {
              return InexactKernel(
                  ctx, [](auto v) { return std::sin(v); },
                  [](KernelContext& c) {
                    return UnaryFloatKernel(
                        c, [](const auto& x) { return x.sin(); });
                  });
            })
            // dx = dy * cos(conj(x))
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Mul(g.Grad(0), g.Op("Cos", {g.Conj(g.Input(0))})));
            })
            .SavesInputs({0})
            .Summary("y = sin(x) (floating or complex)"));
  r.Add(Unary(Op("Cos"))
            .Forward([](KernelContext& ctx) {
              return InexactKernel(
                  ctx, [](auto v) { return std::cos(v); },
                  [](KernelContext& c) {
                    return UnaryFloatKernel(
                        c, [](const auto& x) { return x.cos(); });
                  });
            })
            // dx = -dy * sin(conj(x))
            .Backward([](GradContext& g) {
              Tensor sin = g.Op("Sin", {g.Conj(g.Input(0))});
              g.SetGrad(0, g.Neg(g.Mul(g.Grad(0), sin)));
            })
            .SavesInputs({0})
            .Summary("y = cos(x) (floating or complex)"));
  r.Add(Unary(Op("Tan"))
            .Forward([](KernelContext& ctx) {
              return InexactKernel(
                  ctx, [](auto v) { return std::tan(v); },
                  [](KernelContext& c) {
                    return UnaryFloatKernel(
                        c, [](const auto& x) { return x.tan(); });
                  });
            })
            // dx = dy / cos(conj(x))^2
            .Backward([](GradContext& g) {
              Tensor cos = g.Op("Cos", {g.Conj(g.Input(0))});
              g.SetGrad(0, g.Div(g.Grad(0), g.Op("Square", {cos})));
            })
            .SavesInputs({0})
            .Summary("y = tan(x) (floating or complex)"));
  r.Add(Reciprocal(Op("Reciprocal")));
  r.Add(Reciprocal(Op("Inv")));
  r.Add(GradHelper(Op("ReciprocalGrad"))
            .Forward(ReciprocalGradKernel)
            // z = -dy conj(y)^2:  d(y) = -2 conj(g) dy conj(y),
            //                     d(dy) = ReciprocalGrad(conj(y), g)
            .Backward([](GradContext& g) {
              Tensor y = g.Input(0), dy = g.Input(1), gz = g.Grad(0);
              Tensor cg = gz;
              if (IsComplex(g.InputDType(0))) {
                y = g.Op("Conj", {y});
                cg = g.Op("Conj", {gz});
              }
              if (g.NeedsGrad(0)) {
                Tensor m2 = g.Const(-2.0, g.InputDType(0));
                g.SetGrad(0, g.Mul(g.Mul(g.Mul(cg, m2), dy), y));
              }
              if (g.NeedsGrad(1)) g.SetGrad(1, g.Op("ReciprocalGrad", {y, gz}));
            })
            .SavesInputs({0, 1})
            .Summary("z = -dy * conj(y)^2 (the gradient of Reciprocal)"));
}

}  // namespace gradtape
