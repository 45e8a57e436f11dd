// Scans along the attr "axis" with TensorFlow's exclusive / reverse
// semantics: Cumsum, Cumprod.
#include <algorithm>
#include <vector>

#include "core/autodiff/forward_mode.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {
namespace {

// Cumsum (prod = false) or Cumprod along the attr "axis", TensorFlow's
// exclusive / reverse semantics.
absl::Status ScanKernel(KernelContext& ctx, bool prod) {
  RETURN_IF_ERROR(
      RequireDTypes(ctx, 0, prod ? DTypes::kNumeric : DTypes::kArithmetic));
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  int64_t axis = ctx.attrs().Int("axis");
  if (rank == 0) {
    return ctx.InvalidArgument("x must have rank >= 1, got ", x.DebugString());
  }
  if (axis < -rank || axis >= rank) {
    return ctx.InvalidArgument("axis ", axis, " is out of range for shape ",
                               ShapeString(x.shape()));
  }
  if (axis < 0) axis += rank;
  const bool exclusive = ctx.attrs().Bool("exclusive");
  const bool reverse = ctx.attrs().Bool("reverse");
  const int64_t n = x.dim(axis);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int64_t d = axis + 1; d < rank; ++d) inner *= x.dim(d);
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, x.dtype(), x.shape()));
  if (y.num_elements() == 0) {  // `inner` may be huge: no scratch for it
    ctx.set_output(0, std::move(y));
    return absl::OkStatus();
  }
  DispatchArithmetic(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    std::vector<T> acc(inner);
    for (int64_t o = 0; o < outer; ++o) {
      std::fill(acc.begin(), acc.end(), prod ? T(1) : T(0));
      for (int64_t k = 0; k < n; ++k) {
        const int64_t row = (o * n + (reverse ? n - 1 - k : k)) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const T v = px[row + i];
          if (exclusive) py[row + i] = acc[i];
          acc[i] = prod ? acc[i] * v : acc[i] + v;
          if (!exclusive) py[row + i] = acc[i];
        }
      }
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// An op that scans along `axis` with TensorFlow's exclusive / reverse.
Op Scan(Op op, bool prod) {
  return std::move(op.Inputs({"x"})
                       .Outputs({"out"})
                       .Attr("axis", int64_t{0})
                       .Attr("exclusive", false)
                       .Attr("reverse", false)
                       .Forward([prod](KernelContext& ctx) {
                         return ScanKernel(ctx, prod);
                       }));
}

// `op` (Cumsum or Cumprod) of t with the attrs of the scan whose backward
// runs, its direction flipped if `flip`.
Tensor ScanLike(GradContext& g, const char* op, Tensor t, bool flip) {
  const AttrMap& a = g.attrs();
  return g.Op(op, {t},
              {{"axis", a.Int("axis")},
               {"exclusive", a.Bool("exclusive")},
               {"reverse", a.Bool("reverse") != flip}});
}

}  // namespace

void RegisterScanOps(OpRegistry& r) {
  r.Add(Scan(Op("Cumsum"), /*prod=*/false)
            // dx = cumsum(dy, exclusive, !reverse)
            .Backward([](GradContext& g) {
              g.SetGrad(0, ScanLike(g, "Cumsum", g.Grad(0), /*flip=*/true));
            })
            .Summary("cumulative sum along `axis` (an attr); exclusive / "
                     "reverse as in TensorFlow"));
  r.Add(Scan(Op("Cumprod"), /*prod=*/true)
            // dx = cumsum(cumprod(x) * dy, exclusive, !reverse) / x
            // (TensorFlow's formula: valid where x != 0)
            .Backward([](GradContext& g) {
              Tensor x = g.Input(0);
              Tensor t = g.Mul(ScanLike(g, "Cumprod", x, false), g.Grad(0));
              g.SetGrad(0, g.Div(ScanLike(g, "Cumsum", t, true), x));
            })
            .SavesInputs({0})
            .Summary("cumulative product along `axis` (an attr), real dtypes; "
                     "exclusive / reverse as in TensorFlow"));
}

}  // namespace gradtape
