// Reductions over the attr "axis" (TensorFlow's host int tensor; empty: all
// axes): Sum, Mean, Prod, and L2Loss.
#include <algorithm>
#include <vector>

#include "core/autodiff/forward_mode.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {
namespace {

enum class Reduction { kSum, kMean, kProd };

// Sum, Mean or Prod over the attr "axis" (empty: all axes). Prod takes real
// dtypes only (its gradient has no complex form here).
absl::Status ReduceKernel(KernelContext& ctx, Reduction kind) {
  const bool prod = kind == Reduction::kProd;
  RETURN_IF_ERROR(
      RequireDTypes(ctx, 0, prod ? DTypes::kNumeric : DTypes::kArithmetic));
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(std::vector<bool> mask,
                   AxesMask(ctx, ctx.attrs().IntList("axis"), x.shape()));
  const bool keep_dims = ctx.attrs().Bool("keep_dims");
  Shape kept, out_shape;  // kept: reduced dims as 1
  int64_t count = 1;
  for (int i = 0; i < x.rank(); ++i) {
    kept.push_back(mask[i] ? 1 : x.dim(i));
    if (mask[i]) count *= x.dim(i);
    if (!mask[i] || keep_dims) out_shape.push_back(kept.back());
  }
  ASSIGN_OR_RETURN(Tensor y,
                   AllocateFilled(ctx, x.dtype(), out_shape, prod ? 1.0 : 0.0));
  DispatchArithmetic(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    Shape sy = BroadcastStrides(kept, x.rank());
    Shape sx = RowMajorStrides(x.shape());
    if (prod) {
      ForEachStrided(x.shape(), sx, sy,
                     [&](int64_t, int64_t i, int64_t j) { py[j] *= px[i]; });
    } else {
      ForEachStrided(x.shape(), sx, sy,
                     [&](int64_t, int64_t i, int64_t j) { py[j] += px[i]; });
    }
    if (kind == Reduction::kMean && count > 0) {
      for (int64_t j = 0; j < y.num_elements(); ++j) {
        py[j] = static_cast<T>(py[j] / static_cast<T>(count));
      }
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// The reduced-axes mask of a reduction's input from its "axis" attr (the
// forward validated it); empty axis: all.
std::vector<bool> ReducedAxes(GradContext& g) {
  const Shape& in = g.InputShape(0);
  const int64_t rank = static_cast<int64_t>(in.size());
  const auto& axes = g.attrs().IntList("axis");
  std::vector<bool> mask(rank, axes.empty());
  for (int64_t a : axes) mask[a < 0 ? a + rank : a] = true;
  return mask;
}

// dy with the reduced dims kept as 1 (it broadcasts against the input).
Tensor ReductionGradKept(GradContext& g) {
  const Shape& in = g.InputShape(0);
  std::vector<bool> mask = ReducedAxes(g);
  Shape kept;
  for (size_t i = 0; i < in.size(); ++i) kept.push_back(mask[i] ? 1 : in[i]);
  return g.Reshape(g.Grad(0), kept);
}

// Prod's dx / dy: for each element the product of the other elements of its
// reduction group, computed as exclusive cumprods from both ends (exact when
// the group holds zeros, unlike y / x). The reduced axes are moved to the
// front and flattened so the cumprods run along axis 0 of a matrix.
Tensor ProdOthers(GradContext& g) {
  const Shape& in = g.InputShape(0);
  const int rank = static_cast<int>(in.size());
  std::vector<bool> mask = ReducedAxes(g);
  std::vector<int64_t> perm;
  int64_t reduced = 1, other = 1;
  for (int i = 0; i < rank; ++i) {
    if (mask[i]) perm.push_back(i), reduced *= in[i];
  }
  for (int i = 0; i < rank; ++i) {
    if (!mask[i]) perm.push_back(i), other *= in[i];
  }
  bool identity = true;
  Shape permuted_shape;
  std::vector<int64_t> inverse(rank);
  for (int i = 0; i < rank; ++i) {
    identity = identity && perm[i] == i;
    permuted_shape.push_back(in[perm[i]]);
    inverse[perm[i]] = i;
  }
  Tensor x = g.Input(0);
  if (!identity) x = g.Op("Transpose", {x}, {{"perm", perm}});
  x = g.Reshape(x, {reduced, other});
  auto cumprod = [&](bool reverse) {
    return g.Op(
        "Cumprod", {x},
        {{"axis", int64_t{0}}, {"exclusive", true}, {"reverse", reverse}});
  };
  Tensor y = g.Reshape(g.Mul(cumprod(false), cumprod(true)), permuted_shape);
  if (!identity) y = g.Op("Transpose", {y}, {{"perm", inverse}});
  return y;
}

// The gradient of a reduction: dy reshaped with the reduced dims as 1, then
// broadcast to the input's shape.
Tensor ReductionGrad(GradContext& g) {
  const Shape& in = g.InputShape(0);
  return g.Op("BroadcastTo", {ReductionGradKept(g)},
              {{"shape", std::vector<int64_t>(in.begin(), in.end())}});
}

// Sum or Mean (mean = true).
Op SumOrMean(Op op, bool mean) {
  return std::move(
      op.Inputs({"input"})
          .Outputs({"output"})
          .Attr("axis", std::vector<int64_t>{})
          .Attr("keep_dims", false)
          .Forward([mean](KernelContext& ctx) {
            return ReduceKernel(ctx, mean ? Reduction::kMean : Reduction::kSum);
          })
          // Sum: dx = broadcast(dy);  Mean: dx = broadcast(dy) / count
          .Backward([mean](GradContext& g) {
            Tensor dx = ReductionGrad(g);
            if (mean && g.ok()) {
              const int64_t count =
                  NumElements(g.InputShape(0)) /
                  std::max<int64_t>(1, NumElements(g.OutputShape(0)));
              dx = g.Div(dx,
                         g.Const(static_cast<double>(count), g.InputDType(0)));
            }
            g.SetGrad(0, dx);
          })
          .Jvp(LinearUnaryJvp)  // linear: ty = reduce(tx)
          .Summary(mean ? "mean over `axis` (empty: all axes)"
                        : "sum over `axis` (empty: all axes)"));
}

}  // namespace

void RegisterReductionOps(OpRegistry& r) {
  r.Add(SumOrMean(Op("Sum"), /*mean=*/false));
  r.Add(SumOrMean(Op("Mean"), /*mean=*/true));
  r.Add(Op("Prod")
            .Inputs({"input"})
            .Outputs({"output"})
            .Attr("axis", std::vector<int64_t>{})
            .Attr("keep_dims", false)
            .Forward([](KernelContext& ctx) {
              return ReduceKernel(ctx, Reduction::kProd);
            })
            // dx = broadcast(dy) * (product of the other elements of x's
            // group), by exclusive cumprods so zeros in x are handled
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Mul(ProdOthers(g), ReductionGradKept(g)));
            })
            .SavesInputs({0})
            .Summary("product over `axis` (an attr; empty: all axes), real "
                     "dtypes"));
  r.Add(Op("L2Loss")
            .Inputs({"t"})
            .Outputs({"output"})
            .Forward([](KernelContext& ctx) {
              RETURN_IF_ERROR(ctx.RequireFloat(0));
              const Tensor& t = ctx.input(0);
              ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, t.dtype(), {}));
              DispatchFloat(t.dtype(), [&](auto zero) {
                using T = decltype(zero);
                y.mutable_data<T>()[0] = t.flat<T>().square().sum() / T(2);
              });
              ctx.set_output(0, std::move(y));
              return absl::OkStatus();
            })
            // dt = t * dz
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Mul(g.Input(0), g.Grad(0)));
            })
            .SavesInputs({0})
            .Summary("output = sum(t^2) / 2, a scalar"));
}

}  // namespace gradtape
