// Complex numbers: Complex, Real, Imag, Angle, Conj.
//
// Gradient convention (TensorFlow's): for a real loss L and a complex tensor
// z = x + iy, the gradient is dL/dx + i dL/dy, i.e. twice the conjugate
// Wirtinger derivative. So Real's gradient is the real number itself, Imag's
// is i times it, and Conj's is the conjugate of the incoming gradient.
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {
namespace {

// out = real + i imag, numpy broadcasting.
absl::Status ComplexKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(ctx.RequireFloat(0));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 1));
  const Tensor& re = ctx.input(0);
  const Tensor& im = ctx.input(1);
  ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(ctx, re.shape(), im.shape()));
  ASSIGN_OR_RETURN(Tensor out, Allocate(ctx, ComplexDType(re.dtype()), shape));
  DispatchFloat(re.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pr = re.data<T>();
    const T* pi = im.data<T>();
    auto* po = out.mutable_data<std::complex<T>>();
    const int rank = static_cast<int>(shape.size());
    ForEachStrided(shape, BroadcastStrides(re.shape(), rank),
                   BroadcastStrides(im.shape(), rank),
                   [&](int64_t o, int64_t i, int64_t j) {
                     po[o] = std::complex<T>(pr[i], pi[j]);
                   });
  });
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

// out[i] = f(in[i]) from complex to real (Real, Imag, Angle).
template <typename F>
absl::Status ComplexToRealKernel(KernelContext& ctx, F f) {
  const Tensor& z = ctx.input(0);
  if (!IsComplex(z.dtype())) {
    return ctx.InvalidArgument("input must be complex64 or complex128, got ",
                               z.DebugString());
  }
  ASSIGN_OR_RETURN(Tensor out, Allocate(ctx, RealDType(z.dtype()), z.shape()));
  DispatchComplex(z.dtype(), [&](auto zero) {
    using C = decltype(zero);
    using T = typename C::value_type;
    const C* pz = z.data<C>();
    T* po = out.mutable_data<T>();
    for (int64_t i = 0; i < z.num_elements(); ++i) po[i] = f(pz[i]);
  });
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

absl::Status ConjKernel(KernelContext& ctx) {
  const Tensor& z = ctx.input(0);
  if (!IsComplex(z.dtype())) {
    return ctx.InvalidArgument("input must be complex64 or complex128, got ",
                               z.DebugString());
  }
  ASSIGN_OR_RETURN(Tensor out, Allocate(ctx, z.dtype(), z.shape()));
  DispatchComplex(z.dtype(), [&](auto zero) {
    using C = decltype(zero);
    out.flat<C>() = z.flat<C>().conjugate();
  });
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

}  // namespace

void RegisterComplexOps(OpRegistry& r) {
  r.Add(Op("Complex")
            .Inputs({"real", "imag"})
            .Outputs({"out"})
            .OutputDType(DTypeRule::ComplexOfInput(0))
            .Forward(ComplexKernel)
            // d real = Re(dz), d imag = Im(dz) (summed over broadcast axes)
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.SumToShape(g.Op("Real", {g.Grad(0)}),
                                          g.InputShape(0)));
              }
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, g.SumToShape(g.Op("Imag", {g.Grad(0)}),
                                          g.InputShape(1)));
              }
            })
            .Summary("out = real + i imag (float32 -> complex64, float64 -> "
                     "complex128; TensorFlow's Tout is inferred)"));
  r.Add(Op("Real")
            .Inputs({"input"})
            .Outputs({"output"})
            .OutputDType(DTypeRule::RealOfInput(0))
            .Forward([](KernelContext& ctx) {
              return ComplexToRealKernel(ctx, [](auto z) { return z.real(); });
            })
            // dz = dy + 0i
            .Backward([](GradContext& g) {
              Tensor dy = g.Grad(0);
              g.SetGrad(0, g.Op("Complex", {dy, g.Op("ZerosLike", {dy})}));
            })
            .Summary("real part"));
  r.Add(Op("Imag")
            .Inputs({"input"})
            .Outputs({"output"})
            .OutputDType(DTypeRule::RealOfInput(0))
            .Forward([](KernelContext& ctx) {
              return ComplexToRealKernel(ctx, [](auto z) { return z.imag(); });
            })
            // dz = 0 + i dy
            .Backward([](GradContext& g) {
              Tensor dy = g.Grad(0);
              g.SetGrad(0, g.Op("Complex", {g.Op("ZerosLike", {dy}), dy}));
            })
            .Summary("imaginary part"));
  r.Add(Op("Angle")
            .Inputs({"input"})
            .Outputs({"output"})
            .OutputDType(DTypeRule::RealOfInput(0))
            .Forward([](KernelContext& ctx) {
              return ComplexToRealKernel(ctx,
                                         [](auto z) { return std::arg(z); });
            })
            // angle = atan2(y, x):  dz = dy (-y + i x) / (x^2 + y^2)
            //                          = -dy / (y + i x)
            .Backward([](GradContext& g) {
              Tensor z = g.Input(0), dy = g.Grad(0);
              Tensor swapped =
                  g.Op("Complex", {g.Op("Imag", {z}), g.Op("Real", {z})});
              Tensor dyc = g.Op("Complex", {dy, g.Op("ZerosLike", {dy})});
              g.SetGrad(0, g.Neg(g.Div(dyc, swapped)));
            })
            .SavesInputs({0})
            .Summary("argument (phase) in (-pi, pi]"));
  r.Add(Op("Conj")
            .Inputs({"input"})
            .Outputs({"output"})
            .Forward(ConjKernel)
            // dz = conj(dy)
            .Backward(
                [](GradContext& g) { g.SetGrad(0, g.Op("Conj", {g.Grad(0)})); })
            .Summary("complex conjugate"));
}

}  // namespace gradtape
