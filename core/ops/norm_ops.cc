// Batch normalization with given statistics: TensorFlow's (deprecated)
// BatchNormWithGlobalNormalization and its gradient op. Per channel c (the
// last dim of a 4-D t):
//
//   result = (t - m[c]) * r[c] * s[c] + beta[c],
//   r = 1 / sqrt(v + variance_epsilon),  s = gamma if scale_after_normalization
//   else 1.
//
// v + variance_epsilon must be positive (not checked, as in TensorFlow: the
// result is NaN otherwise).
#include <cmath>
#include <vector>

#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {
namespace {

// Checks input 0 is a 4-D float tensor, and `channel_inputs` are vectors of
// its last dim in the same dtype. Returns the channel count.
absl::StatusOr<int64_t> CheckBatchNormInputs(
    const KernelContext& ctx, std::initializer_list<int> channel_inputs) {
  RETURN_IF_ERROR(ctx.RequireFloat(0));
  RETURN_IF_ERROR(ctx.RequireRank(0, 4));
  const Tensor& t = ctx.input(0);
  const int64_t depth = t.dim(3);
  for (int i : channel_inputs) {
    RETURN_IF_ERROR(ctx.RequireSameDType(0, i));
    const Tensor& p = ctx.input(i);
    if (p.rank() != 1 || p.dim(0) != depth) {
      return ctx.InvalidArgument(ctx.op().input_names[i], " ", p.DebugString(),
                                 " must be a vector of ", depth,
                                 " (the last dim of ", ctx.op().input_names[0],
                                 " ", t.DebugString(), ")");
    }
  }
  return depth;
}

// Per-channel factor r * s (see the file comment).
template <typename T>
std::vector<T> Scales(const KernelContext& ctx, const Tensor& v,
                      const Tensor& gamma) {
  const T eps = static_cast<T>(ctx.attrs().Float("variance_epsilon"));
  const bool scale = ctx.attrs().Bool("scale_after_normalization");
  std::vector<T> a(v.num_elements());
  for (size_t c = 0; c < a.size(); ++c) {
    a[c] = T(1) / std::sqrt(v.data<T>()[c] + eps);
    if (scale) a[c] *= gamma.data<T>()[c];
  }
  return a;
}

// Inputs t, m, v, beta, gamma.
absl::Status BatchNormKernel(KernelContext& ctx) {
  ASSIGN_OR_RETURN(int64_t depth, CheckBatchNormInputs(ctx, {1, 2, 3, 4}));
  const Tensor& t = ctx.input(0);
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, t.dtype(), t.shape()));
  DispatchFloat(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> a = Scales<T>(ctx, ctx.input(2), ctx.input(4));
    const T* m = ctx.input(1).data<T>();
    const T* beta = ctx.input(3).data<T>();
    const T* px = t.data<T>();
    T* py = y.mutable_data<T>();
    const int64_t rows = depth == 0 ? 0 : t.num_elements() / depth;
    for (int64_t i = 0; i < rows; ++i) {
      const T* in = px + i * depth;
      T* out = py + i * depth;
      for (int64_t c = 0; c < depth; ++c) {
        out[c] = (in[c] - m[c]) * a[c] + beta[c];
      }
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// Inputs t, m, v, gamma, backprop; outputs dx, dm, dv, db, dg with
//   dx = bp * r s,  db = sum(bp),  dm = -db * r s,  P = sum(bp * (t - m)),
//   dv = -1/2 r^3 s P,  dg = r P if scale_after_normalization else 0
// (sums over all but the last axis).
absl::Status BatchNormGradKernel(KernelContext& ctx) {
  ASSIGN_OR_RETURN(int64_t depth, CheckBatchNormInputs(ctx, {1, 2, 3}));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 4));
  const Tensor& t = ctx.input(0);
  const Tensor& bp = ctx.input(4);
  if (bp.shape() != t.shape()) {
    return ctx.InvalidArgument("backprop ", bp.DebugString(),
                               " must have the shape of t ", t.DebugString());
  }
  const int64_t n = depth;
  const bool scale = ctx.attrs().Bool("scale_after_normalization");
  ASSIGN_OR_RETURN(Tensor dx, Allocate(ctx, t.dtype(), t.shape()));
  ASSIGN_OR_RETURN(Tensor dm, Allocate(ctx, t.dtype(), {n}));
  ASSIGN_OR_RETURN(Tensor dv, Allocate(ctx, t.dtype(), {n}));
  ASSIGN_OR_RETURN(Tensor db, Allocate(ctx, t.dtype(), {n}));
  ASSIGN_OR_RETURN(Tensor dg, Allocate(ctx, t.dtype(), {n}));
  DispatchFloat(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::vector<T> a = Scales<T>(ctx, ctx.input(2), ctx.input(3));
    const T eps = static_cast<T>(ctx.attrs().Float("variance_epsilon"));
    const T* m = ctx.input(1).data<T>();
    const T* v = ctx.input(2).data<T>();
    const T* px = t.data<T>();
    const T* pbp = bp.data<T>();
    T* pdx = dx.mutable_data<T>();
    T* pdb = db.mutable_data<T>();
    std::vector<T> p(n, T(0));
    const int64_t rows = n == 0 ? 0 : t.num_elements() / n;
    for (int64_t i = 0; i < rows; ++i) {
      const T* in = px + i * n;
      const T* g = pbp + i * n;
      T* out = pdx + i * n;
      for (int64_t c = 0; c < n; ++c) {
        out[c] = g[c] * a[c];
        pdb[c] += g[c];
        p[c] += g[c] * (in[c] - m[c]);
      }
    }
    for (int64_t c = 0; c < n; ++c) {
      const T r = T(1) / std::sqrt(v[c] + eps);
      dm.mutable_data<T>()[c] = -pdb[c] * a[c];
      // a = r s, so -1/2 r^3 s P = -1/2 a r^2 P.
      dv.mutable_data<T>()[c] = T(-0.5) * a[c] * r * r * p[c];
      dg.mutable_data<T>()[c] = scale ? r * p[c] : T(0);
    }
  });
  ctx.set_output(0, std::move(dx));
  ctx.set_output(1, std::move(dm));
  ctx.set_output(2, std::move(dv));
  ctx.set_output(3, std::move(db));
  ctx.set_output(4, std::move(dg));
  return absl::OkStatus();
}

AttrMap BatchNormAttrs(const AttrMap& attrs) {
  return {
      {"variance_epsilon", *attrs.Find("variance_epsilon")},
      {"scale_after_normalization", *attrs.Find("scale_after_normalization")}};
}

// sum over all but the last axis of a 4-D tensor.
Tensor SumRest(GradContext& g, Tensor x) {
  return g.Op("Sum", {x}, {{"axis", std::vector<int64_t>{0, 1, 2}}});
}

// The backward of BatchNormWithGlobalNormalizationGrad, from its outputs
// (see BatchNormGradKernel) with upstream gradients Gx, Gm, Gv, Gb, Gg and
// xc = t - m, B = sum(bp), P = sum(bp xc), Q = sum(Gx bp) - B Gm:
//   k     = -1/2 r^3 s Gv + [scale] r Gg
//   dt    = bp k
//   dm    = -B k
//   dv    = -1/2 r^3 (s Q + [scale] P Gg) + 3/4 r^5 s P Gv
//   dgamma = [scale] (r Q - 1/2 r^3 P Gv)
//   dbp   = Gx r s + (Gb - r s Gm) + xc k
void BatchNormGradGrad(GradContext& g) {
  const bool scale = g.attrs().Bool("scale_after_normalization");
  const DType dtype = g.InputDType(0);
  auto c = [&](double value) { return g.Const(value, dtype); };
  Tensor t = g.Input(0), m = g.Input(1), v = g.Input(2), bp = g.Input(4);
  Tensor gamma = scale ? g.Input(3) : Tensor();
  Tensor r = g.Div(
      c(1), g.Op("Sqrt", {g.Add(v, c(g.attrs().Float("variance_epsilon")))}));
  Tensor r2 = g.Mul(r, r);
  Tensor r3 = g.Mul(r2, r);
  Tensor rs = scale ? g.Mul(r, gamma) : r;
  Tensor r3s = scale ? g.Mul(r3, gamma) : r3;
  Tensor gm = g.Grad(1), gv = g.Grad(2), gb = g.Grad(3), gg = g.Grad(4);
  const bool has_gx = g.HasGrad(0);
  Tensor gx = has_gx ? g.Grad(0) : Tensor();

  Tensor k = g.Mul(c(-0.5), g.Mul(r3s, gv));
  if (scale) k = g.Add(k, g.Mul(r, gg));
  const bool need_b = g.NeedsGrad(1) || g.NeedsGrad(2) || g.NeedsGrad(3);
  const bool need_p = g.NeedsGrad(2) || g.NeedsGrad(3);
  Tensor xc = need_p || g.NeedsGrad(4) ? g.Sub(t, m) : Tensor();
  Tensor b = need_b ? SumRest(g, bp) : Tensor();
  Tensor p = need_p ? SumRest(g, g.Mul(bp, xc)) : Tensor();
  Tensor q;
  if (need_p) {
    q = g.Neg(g.Mul(b, gm));
    if (has_gx) q = g.Add(q, SumRest(g, g.Mul(gx, bp)));
  }

  if (g.NeedsGrad(0)) g.SetGrad(0, g.Mul(bp, k));
  if (g.NeedsGrad(1)) g.SetGrad(1, g.Neg(g.Mul(b, k)));
  if (g.NeedsGrad(2)) {
    Tensor inner = g.Mul(scale ? gamma : c(1), q);
    if (scale) inner = g.Add(inner, g.Mul(p, gg));
    Tensor r5s = g.Mul(r3s, r2);
    g.SetGrad(2, g.Add(g.Mul(c(-0.5), g.Mul(r3, inner)),
                       g.Mul(c(0.75), g.Mul(r5s, g.Mul(p, gv)))));
  }
  if (g.NeedsGrad(3) && scale) {
    g.SetGrad(3, g.Sub(g.Mul(r, q), g.Mul(c(0.5), g.Mul(r3, g.Mul(p, gv)))));
  }
  if (g.NeedsGrad(4)) {
    Tensor dbp = g.Add(g.Mul(xc, k), g.Sub(gb, g.Mul(rs, gm)));
    if (has_gx) dbp = g.Add(dbp, g.Mul(gx, rs));
    g.SetGrad(4, dbp);
  }
}

}  // namespace

void RegisterNormOps(OpRegistry& r) {
  r.Add(Op("BatchNormWithGlobalNormalization")
            .Inputs({"t", "m", "v", "beta", "gamma"})
            .Outputs({"result"})
            .Attr("variance_epsilon", AttrType::kFloat)
            .Attr("scale_after_normalization", AttrType::kBool)
            .Forward(BatchNormKernel)
            // (dt, dm, dv, dbeta, dgamma) =
            //     BatchNormWithGlobalNormalizationGrad(t, m, v, gamma, dy)
            .Backward([](GradContext& g) {
              Tensors d = g.OpN(
                  "BatchNormWithGlobalNormalizationGrad",
                  {g.Input(0), g.Input(1), g.Input(2), g.Input(4), g.Grad(0)},
                  BatchNormAttrs(g.attrs()));
              if (!g.ok()) return;
              // Output i of the Grad op is the gradient of input i.
              for (int i = 0; i < 5; ++i) {
                if (g.NeedsGrad(i)) g.SetGrad(i, d[i]);
              }
            })
            .SavesInputs({0, 1, 2, 4})
            .Summary("(t - m) / sqrt(v + variance_epsilon) [* gamma] + beta "
                     "per last-dim channel of a 4-D t (TensorFlow's "
                     "deprecated batch norm with given statistics)"));
  r.Add(Op("BatchNormWithGlobalNormalizationGrad")
            .Inputs({"t", "m", "v", "gamma", "backprop"})
            .Outputs({"dx", "dm", "dv", "db", "dg"})
            .Attr("variance_epsilon", AttrType::kFloat)
            .Attr("scale_after_normalization", AttrType::kBool)
            .Forward(BatchNormGradKernel)
            // polynomial in the inputs and r = (v + eps)^-1/2; see
            // BatchNormGradGrad for the formulas
            .Backward(BatchNormGradGrad)
            .SavesInputs({0, 1, 2, 3, 4})
            .Summary("the gradient of BatchNormWithGlobalNormalization "
                     "(dg is 0 without scale_after_normalization)"));
}

}  // namespace gradtape
