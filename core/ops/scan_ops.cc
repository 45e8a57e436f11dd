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
// exclusive / reverse semantics, for real and complex dtypes.
absl::Status ScanKernel(KernelContext& ctx, bool prod) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kArithmetic));
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

// Cumprod's dx, exact where x holds zeros. With the forward
// y_j = prod_{k<=j} x_k (k < j when exclusive; the other way when reverse),
//   dx_i = sum_{j>=i} dy_j prod_{k<=j, k!=i} x_k   (j > i when exclusive).
// Where x_i != 0 that is cumsum(dy * y, flipped)_i / x_i (TensorFlow's
// formula), right also after a zero: every y_j there is 0. At the first zero
// z of a scan (in scan order) the product skips x_z:
//   dx_z = cumsum(dy * cumprod(x with x_z := 1), flipped)_z,
// and at a later zero every term has the factor x_z = 0: dx = 0, which the
// first formula gives with x_i read as 1. Written in registered ops with the
// zero masks constant, so it is exact to first order everywhere and to
// second order where a scan holds at most one zero (with more, the second
// derivative at a later zero with respect to an earlier one comes out 0).
// For complex x each product is conjugated (the gradient of a holomorphic
// op is conj(dy_j/dx_i) dy_j); all of them are products of x's elements, so
// running the formulas on conj(x) does it. (TensorFlow 2.21's _CumprodGrad
// does not conjugate: its complex gradient is off by that conj.)
void CumprodGrad(GradContext& g) {
  const AttrMap& a = g.attrs();
  const DType dtype = g.InputDType(0);
  Tensor x = g.Conj(g.Input(0)), dy = g.Grad(0);
  Tensor zero = g.Const(0.0, dtype), one = g.Const(1.0, dtype);
  Tensor ones = g.Op("OnesLike", {x});
  Tensor is_zero = g.Op("Equal", {x, zero});
  // first: x_i == 0 with no zero before it in scan order.
  Tensor nonzero =
      g.Op("Cast", {g.Op("NotEqual", {x, zero})}, {{"DstT", dtype}});
  Tensor none_before = g.Op("Cumprod", {nonzero},
                            {{"axis", a.Int("axis")},
                             {"exclusive", true},
                             {"reverse", a.Bool("reverse")}});
  Tensor first = g.Op("Equal", {g.Mul(none_before, g.Sub(one, nonzero)), one});
  // Away from the first zero: cumsum(dy * y, flipped) / x, zeros read as 1.
  Tensor y = ScanLike(g, "Cumprod", x, /*flip=*/false);
  Tensor away = g.Div(ScanLike(g, "Cumsum", g.Mul(dy, y), /*flip=*/true),
                      g.Op("Select", {is_zero, ones, x}));
  // At the first zero: the scan of x with that zero read as 1.
  Tensor skipped =
      ScanLike(g, "Cumprod", g.Op("Select", {first, ones, x}), /*flip=*/false);
  Tensor at_first = ScanLike(g, "Cumsum", g.Mul(dy, skipped), /*flip=*/true);
  g.SetGrad(0, g.Op("Select", {first, at_first, away}));
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
            // dx_i = sum_{j>=i} dy_j prod_{k<=j, k!=i} x_k, exact with
            // zeros in x (see CumprodGrad)
            .Backward(CumprodGrad)
            .SavesInputs({0})
            .Summary("cumulative product along `axis` (an attr); exclusive / "
                     "reverse as in TensorFlow"));
}

}  // namespace gradtape
