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
//
// FusedBatchNormV3 and FusedBatchNormGradV3 as TensorFlow's CPU kernels (see
// the comment before FusedBatchNormKernel).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"
#include "core/ops/parallel.h"

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
  if (g.NeedsGrad(3) && !scale) {
    // Without scale_after_normalization no output depends on gamma.
    g.SetGrad(3, g.Op("ZerosLike", {g.Input(3)}));
  } else if (g.NeedsGrad(3)) {
    g.SetGrad(3, g.Sub(g.Mul(r, q), g.Mul(c(0.5), g.Mul(r3, g.Mul(p, gv)))));
  }
  if (g.NeedsGrad(4)) {
    Tensor dbp = g.Add(g.Mul(xc, k), g.Sub(gb, g.Mul(rs, gm)));
    if (has_gx) dbp = g.Add(dbp, g.Mul(gx, rs));
    g.SetGrad(4, dbp);
  }
}

// ---------------------------------------------------------------------------
// FusedBatchNormV3(x, scale, offset, mean, variance) as TensorFlow's CPU
// kernel. Per channel c (the last axis for data_format NHWC / NDHWC, axis 1
// for NCHW / NCDHW; x is 4-D or 5-D), over the N = size / channels elements
// of that channel:
//
//   is_training:  m = mean(x), v = mean((x - m)^2) (biased),
//                 y = (x - m) / sqrt(v + epsilon) * scale + offset,
//                 batch_mean = f m + (1 - f) mean_in,
//                 batch_variance = f v N / (N - 1) + (1 - f) variance_in
//                 (f = exponential_avg_factor; the given mean and variance
//                 are not read when f is 1; N / (N - 1) is 1 when N is 1),
//                 reserve_space_1 = m, reserve_space_2 = v;
//   otherwise:    the same y with m, v = the given mean and variance, and
//                 every statistics output a copy of them.
//
// reserve_space_3 is a scalar 0 (TensorFlow's CPU placeholder). An empty x
// gives NaN batch statistics, as in TensorFlow.

// The channel layout of a FusedBatchNorm x.
struct FbnLayout {
  int channel_axis = 0;
  int64_t depth = 0;  // channels
  int64_t inner = 1;  // elements after the channel axis (1 if channels-last)
  int64_t count = 0;  // N: elements per channel
  // Channel of flat element i.
  int64_t Channel(int64_t i) const { return (i / inner) % depth; }
};

bool ChannelsFirst(const std::string& format) {
  return format == "NCHW" || format == "NCDHW";
}

// Checks data_format and that input `xi` is a 4-D or 5-D float tensor.
absl::StatusOr<FbnLayout> CheckFbnX(const KernelContext& ctx, int xi) {
  const std::string& format = ctx.attrs().Get<std::string>("data_format");
  if (format != "NHWC" && format != "NCHW" && format != "NDHWC" &&
      format != "NCDHW") {
    return ctx.InvalidArgument("data_format \"", format,
                               "\" must be NHWC, NCHW, NDHWC or NCDHW");
  }
  RETURN_IF_ERROR(ctx.RequireFloat(xi));
  const Tensor& x = ctx.input(xi);
  if (x.rank() != 4 && x.rank() != 5) {
    return ctx.InvalidArgument(ctx.op().input_names[xi], " ", x.DebugString(),
                               " must be 4-D or 5-D");
  }
  FbnLayout l;
  l.channel_axis = ChannelsFirst(format) ? 1 : x.rank() - 1;
  l.depth = x.dim(l.channel_axis);
  for (int d = l.channel_axis + 1; d < x.rank(); ++d) l.inner *= x.dim(d);
  l.count = l.depth == 0 ? 0 : x.num_elements() / l.depth;
  return l;
}

// Checks that `inputs` are vectors in the dtype of input `xi`, of `depth`
// elements unless `depth` is negative (any length). `why` says when the
// length is required.
absl::Status CheckFbnVectors(const KernelContext& ctx, int xi,
                             std::initializer_list<int> inputs, int64_t depth,
                             const char* why) {
  const Tensor& x = ctx.input(xi);
  for (int i : inputs) {
    RETURN_IF_ERROR(ctx.RequireSameDType(xi, i));
    const Tensor& p = ctx.input(i);
    if (p.rank() != 1) {
      return ctx.InvalidArgument(ctx.op().input_names[i], " ", p.DebugString(),
                                 " must be 1-D");
    }
    if (depth >= 0 && p.dim(0) != depth) {
      return ctx.InvalidArgument(
          why, ctx.op().input_names[i], " ", p.DebugString(), " must have ",
          depth, " elements, the channels of ", ctx.op().input_names[xi], " ",
          x.DebugString(), " (data_format ",
          ctx.attrs().Get<std::string>("data_format"), ")");
    }
  }
  return absl::OkStatus();
}

// x seen as [outer, depth, inner]: outer rows of depth channels of inner
// elements each.
int64_t FbnOuter(const FbnLayout& l, int64_t n) {
  return l.depth * l.inner == 0 ? 0 : n / (l.depth * l.inner);
}

// Elements per block of a per-channel sum: fixed, not per thread, so the
// partial sums and the order they are added in (block by block) do not
// depend on the thread count.
constexpr int64_t kFbnBlockElements = 16 * 1024;

// Per-channel sums of `terms` quantities: row(o, acc) adds row o's terms to
// acc[t * depth + c]. Blocks of rows run in parallel into partial sums (in
// double) that are then added in block order.
template <typename RowFn>
std::vector<double> PerChannelSums(const FbnLayout& l, int64_t outer, int terms,
                                   const RowFn& row) {
  const int64_t width = terms * l.depth;
  const int64_t rows_per_block = std::max<int64_t>(
      1, kFbnBlockElements / std::max<int64_t>(1, l.depth * l.inner));
  const int64_t blocks = (outer + rows_per_block - 1) / rows_per_block;
  std::vector<double> partial(blocks * width, 0.0);
  ParallelFor(static_cast<int>(blocks), [&](int b) {
    double* acc = partial.data() + b * width;
    const int64_t end = std::min(outer, (b + 1) * rows_per_block);
    for (int64_t o = b * rows_per_block; o < end; ++o) row(o, acc);
  });
  std::vector<double> total(width, 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t j = 0; j < width; ++j) total[j] += partial[b * width + j];
  }
  return total;
}

// Calls fn(o_begin, o_end) over the rows of x in parallel (elementwise
// passes).
template <typename Fn>
void ForFbnRows(const FbnLayout& l, int64_t outer, const Fn& fn) {
  ParallelRange(
      outer,
      std::max<int64_t>(
          1, kElementwiseGrain / std::max<int64_t>(1, l.depth * l.inner)),
      fn);
}

// Per-channel mean and biased variance of x (NaN for an empty x).
template <typename T>
void BatchStats(const Tensor& x, const FbnLayout& l, std::vector<double>& m,
                std::vector<double>& v) {
  const T* px = x.data<T>();
  const int64_t outer = FbnOuter(l, x.num_elements());
  const int64_t depth = l.depth, inner = l.inner;
  std::vector<double> sum =
      PerChannelSums(l, outer, 1, [&](int64_t o, double* acc) {
        const T* row = px + o * depth * inner;
        if (inner == 1) {
          for (int64_t c = 0; c < depth; ++c) acc[c] += row[c];
          return;
        }
        for (int64_t c = 0; c < depth; ++c) {
          double s = 0;
          for (int64_t k = 0; k < inner; ++k) s += row[c * inner + k];
          acc[c] += s;
        }
      });
  for (int64_t c = 0; c < depth; ++c) m[c] = sum[c] / l.count;
  sum = PerChannelSums(l, outer, 1, [&](int64_t o, double* acc) {
    const T* row = px + o * depth * inner;
    if (inner == 1) {
      for (int64_t c = 0; c < depth; ++c) {
        const double d = row[c] - m[c];
        acc[c] += d * d;
      }
      return;
    }
    for (int64_t c = 0; c < depth; ++c) {
      double s = 0;
      for (int64_t k = 0; k < inner; ++k) {
        const double d = row[c * inner + k] - m[c];
        s += d * d;
      }
      acc[c] += s;
    }
  });
  for (int64_t c = 0; c < depth; ++c) v[c] = sum[c] / l.count;
}

template <typename T>
void FillVector(Tensor& t, const std::vector<double>& values) {
  T* p = t.mutable_data<T>();
  for (size_t c = 0; c < values.size(); ++c) p[c] = static_cast<T>(values[c]);
}

// y, batch_mean, batch_variance, reserve_space_1, reserve_space_2 (all
// allocated) from x and the statistics m, v used for y.
template <typename T>
void FusedBatchNormCompute(const KernelContext& ctx, const FbnLayout& l,
                           const std::vector<double>& m,
                           const std::vector<double>& v, Tensors& out) {
  const bool training = ctx.attrs().Bool("is_training");
  const double eps = static_cast<T>(ctx.attrs().Float("epsilon"));
  const double f = ctx.attrs().Float("exponential_avg_factor");
  const T* px = ctx.input(0).data<T>();
  const T* s = ctx.input(1).data<T>();
  const T* o = ctx.input(2).data<T>();
  std::vector<double> a(l.depth);
  for (int64_t c = 0; c < l.depth; ++c) a[c] = s[c] / std::sqrt(v[c] + eps);
  T* py = out[0].mutable_data<T>();
  const int64_t n = ctx.input(0).num_elements();
  const int64_t depth = l.depth, inner = l.inner;
  ForFbnRows(l, FbnOuter(l, n), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      if (inner == 1) {  // channels last: one vectorisable pass per row
        const T* xr = px + row * depth;
        T* yr = py + row * depth;
        for (int64_t c = 0; c < depth; ++c) {
          yr[c] = static_cast<T>((xr[c] - m[c]) * a[c] + o[c]);
        }
        continue;
      }
      for (int64_t c = 0; c < depth; ++c) {
        const int64_t at = (row * depth + c) * inner;
        for (int64_t k = at; k < at + inner; ++k) {
          py[k] = static_cast<T>((px[k] - m[c]) * a[c] + o[c]);
        }
      }
    }
  });
  std::vector<double> bm = m, bv = v;
  if (training) {
    const double adj = l.count > 1 ? double(l.count) / (l.count - 1) : 1.0;
    for (int64_t c = 0; c < l.depth; ++c) {
      bv[c] = v[c] * adj;
      if (f != 1.0) {
        bm[c] = (1 - f) * ctx.input(3).data<T>()[c] + f * m[c];
        bv[c] = (1 - f) * ctx.input(4).data<T>()[c] + f * adj * v[c];
      }
    }
  }
  if (n == 0) {
    std::fill(bm.begin(), bm.end(), std::numeric_limits<double>::quiet_NaN());
    bv = bm;
  }
  FillVector<T>(out[1], bm);
  FillVector<T>(out[2], bv);
  FillVector<T>(out[3], m);
  FillVector<T>(out[4], v);
}

absl::Status FusedBatchNormKernel(KernelContext& ctx) {
  ASSIGN_OR_RETURN(FbnLayout l, CheckFbnX(ctx, 0));
  RETURN_IF_ERROR(CheckFbnVectors(ctx, 0, {1, 2}, l.depth, ""));
  const bool training = ctx.attrs().Bool("is_training");
  const bool blend = ctx.attrs().Float("exponential_avg_factor") != 1.0;
  RETURN_IF_ERROR(CheckFbnVectors(
      ctx, 0, {3, 4}, training && !blend ? -1 : l.depth,
      training ? "with exponential_avg_factor != 1, " : "with !is_training, "));
  const Tensor& x = ctx.input(0);
  Tensors out(6);
  ASSIGN_OR_RETURN(out[0], AllocateOutput(ctx, x.dtype(), x.shape()));
  for (int i = 1; i <= 4; ++i) {
    ASSIGN_OR_RETURN(out[i], Allocate(ctx, x.dtype(), {l.depth}));
  }
  ASSIGN_OR_RETURN(out[5], Allocate(ctx, x.dtype(), {}));
  DispatchFloat(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    std::vector<double> m(l.depth), v(l.depth);
    if (training) {
      BatchStats<T>(x, l, m, v);
    } else {
      for (int64_t c = 0; c < l.depth; ++c) {
        m[c] = ctx.input(3).data<T>()[c];
        v[c] = ctx.input(4).data<T>()[c];
      }
    }
    FusedBatchNormCompute<T>(ctx, l, m, v, out);
  });
  for (int i = 0; i < 6; ++i) ctx.set_output(i, std::move(out[i]));
  return absl::OkStatus();
}

// FusedBatchNormGradV3(y_backprop, x, scale, reserve_space_1 (m),
// reserve_space_2 (v), reserve_space_3 (not read)), TensorFlow's CPU kernel,
// per channel with r = 1 / sqrt(v + epsilon), xc = x - m, N as above:
//   is_training:  x_backprop = scale r (dy - mean(dy) - xc r^2 mean(dy xc))
//   otherwise:    x_backprop = scale r dy
//   scale_backprop = r sum(dy xc),  offset_backprop = sum(dy);
// reserve_space_4 and _5 are empty placeholders. An empty x gives zero
// scale and offset gradients.
template <typename T>
void FusedBatchNormGradCompute(const KernelContext& ctx, const FbnLayout& l,
                               Tensors& out) {
  const bool training = ctx.attrs().Bool("is_training");
  const double eps = static_cast<T>(ctx.attrs().Float("epsilon"));
  const T* dy = ctx.input(0).data<T>();
  const T* x = ctx.input(1).data<T>();
  const T* s = ctx.input(2).data<T>();
  const T* m = ctx.input(3).data<T>();
  const T* v = ctx.input(4).data<T>();
  const int64_t n = ctx.input(1).num_elements();
  const int64_t depth = l.depth, inner = l.inner;
  const int64_t outer = FbnOuter(l, n);
  std::vector<double> r(depth);
  for (int64_t c = 0; c < depth; ++c) r[c] = 1 / std::sqrt(v[c] + eps);
  // sums[c] = sum(dy), sums[depth + c] = sum(dy xc).
  const std::vector<double> sums =
      PerChannelSums(l, outer, 2, [&](int64_t o, double* acc) {
        if (inner == 1) {  // channels last: vectorisable over channels
          const T* dyr = dy + o * depth;
          const T* xr = x + o * depth;
          for (int64_t c = 0; c < depth; ++c) {
            acc[c] += dyr[c];
            acc[depth + c] += dyr[c] * (xr[c] - m[c]);
          }
          return;
        }
        for (int64_t c = 0; c < depth; ++c) {
          const int64_t at = (o * depth + c) * inner;
          double sd = 0, sp = 0;
          for (int64_t k = at; k < at + inner; ++k) {
            sd += dy[k];
            sp += dy[k] * (x[k] - m[c]);
          }
          acc[c] += sd;
          acc[depth + c] += sp;
        }
      });
  std::vector<double> sum_dy(sums.begin(), sums.begin() + depth);
  std::vector<double> p(sums.begin() + depth, sums.end());
  T* dx = out[0].mutable_data<T>();
  // dx = k1[c] dy + k2[c] (x - m[c]) + k0[c], the same formula per channel.
  std::vector<double> k0(depth), k1(depth), k2(depth);
  for (int64_t c = 0; c < depth; ++c) {
    k1[c] = s[c] * r[c];
    k0[c] = training ? -k1[c] * sum_dy[c] / l.count : 0.0;
    k2[c] = training ? -k1[c] * r[c] * r[c] * p[c] / l.count : 0.0;
  }
  ForFbnRows(l, outer, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      if (inner == 1) {  // channels last: one vectorisable pass per row
        const T* dyr = dy + row * depth;
        const T* xr = x + row * depth;
        T* dxr = dx + row * depth;
        for (int64_t c = 0; c < depth; ++c) {
          dxr[c] =
              static_cast<T>(k1[c] * dyr[c] + k2[c] * (xr[c] - m[c]) + k0[c]);
        }
        continue;
      }
      for (int64_t c = 0; c < depth; ++c) {
        const int64_t at = (row * depth + c) * inner;
        for (int64_t k = at; k < at + inner; ++k) {
          dx[k] = static_cast<T>(k1[c] * dy[k] + k2[c] * (x[k] - m[c]) + k0[c]);
        }
      }
    }
  });
  for (int64_t c = 0; c < l.depth; ++c) p[c] *= r[c];
  FillVector<T>(out[1], p);
  FillVector<T>(out[2], sum_dy);
}

absl::Status FusedBatchNormGradKernel(KernelContext& ctx) {
  ASSIGN_OR_RETURN(FbnLayout l, CheckFbnX(ctx, 1));
  RETURN_IF_ERROR(ctx.RequireSameDType(1, 0));
  const Tensor& x = ctx.input(1);
  const Tensor& dy = ctx.input(0);
  if (dy.shape() != x.shape()) {
    return ctx.InvalidArgument("y_backprop ", dy.DebugString(),
                               " must have the shape of x ", x.DebugString());
  }
  RETURN_IF_ERROR(CheckFbnVectors(ctx, 1, {2, 3, 4}, l.depth, ""));
  Tensors out(5);
  ASSIGN_OR_RETURN(out[0], AllocateOutput(ctx, x.dtype(), x.shape()));
  ASSIGN_OR_RETURN(out[1], Allocate(ctx, x.dtype(), {l.depth}));
  ASSIGN_OR_RETURN(out[2], Allocate(ctx, x.dtype(), {l.depth}));
  ASSIGN_OR_RETURN(out[3], Allocate(ctx, x.dtype(), {0}));
  ASSIGN_OR_RETURN(out[4], Allocate(ctx, x.dtype(), {0}));
  if (x.num_elements() > 0) {
    DispatchFloat(x.dtype(), [&](auto zero) {
      FusedBatchNormGradCompute<decltype(zero)>(ctx, l, out);
    });
  }
  for (int i = 0; i < 5; ++i) ctx.set_output(i, std::move(out[i]));
  return absl::OkStatus();
}

// Per-channel helpers of the FusedBatchNorm backwards, for an x of `shape`.
class FbnGraph {
 public:
  FbnGraph(GradContext& g, const Shape& shape, DType dtype)
      : g_(g), dtype_(dtype), rank_(static_cast<int>(shape.size())) {
    const bool first = ChannelsFirst(g.attrs().Get<std::string>("data_format"));
    axis_ = first ? 1 : rank_ - 1;
    depth_ = shape[axis_];
    const int64_t n = NumElements(shape);
    count_ = depth_ == 0 ? 0 : n / depth_;
  }
  Tensor C(double value) { return g_.Const(value, dtype_); }
  // A [C] vector laid along the channel axis of x.
  Tensor Bc(Tensor v) {
    if (axis_ == rank_ - 1) return v;
    Shape shape(rank_, 1);
    shape[axis_] = depth_;
    return g_.Reshape(v, shape);
  }
  // The per-channel sum of a tensor shaped like x.
  Tensor Sum(Tensor t) {
    std::vector<int64_t> axes;
    for (int d = 0; d < rank_; ++d) {
      if (d != axis_) axes.push_back(d);
    }
    return g_.Op("Sum", {t}, {{"axis", axes}});
  }
  // 1 / N (0 for an empty x) and Bessel's N / (N - 1) (1 when N <= 1).
  double InvCount() const { return count_ > 0 ? 1.0 / count_ : 0.0; }
  double Bessel() const {
    return count_ > 1 ? static_cast<double>(count_) / (count_ - 1) : 1.0;
  }

 private:
  GradContext& g_;
  DType dtype_;
  int rank_;
  int axis_ = 0;
  int64_t depth_ = 0;
  int64_t count_ = 0;
};

Tensor AddOrSet(GradContext& g, Tensor sum, Tensor term) {
  return sum.valid() ? g.Add(sum, term) : term;
}

// In training, the gradient that the statistics outputs send to x:
// batch_mean and reserve_space_1 are means of x (d/dx = 1/N), batch_variance
// and reserve_space_2 biased variances (d/dx = 2 xc / N) times f N/(N-1)
// and 1. TensorFlow drops these gradients; nothing reaches them unless the
// statistics are differentiated (second order does, through the gradient
// op's reserve_space inputs).
Tensor StatisticsGrad(GradContext& g, FbnGraph& b, Tensor dx) {
  const double f = g.attrs().Float("exponential_avg_factor");
  const double inv_n = b.InvCount();
  Tensor a, c;  // per channel: the coefficients of 1 and of xc
  if (g.HasGrad(1)) a = g.Mul(b.C(f * inv_n), g.Grad(1));
  if (g.HasGrad(3)) a = AddOrSet(g, a, g.Mul(b.C(inv_n), g.Grad(3)));
  if (g.HasGrad(2)) c = g.Mul(b.C(2 * f * b.Bessel() * inv_n), g.Grad(2));
  if (g.HasGrad(4)) c = AddOrSet(g, c, g.Mul(b.C(2 * inv_n), g.Grad(4)));
  if (a.valid()) dx = g.Add(dx, b.Bc(a));
  if (c.valid()) {
    Tensor xc = g.Sub(g.Input(0), b.Bc(g.Output(3)));
    dx = g.Add(dx, g.Mul(xc, b.Bc(c)));
  }
  return dx;
}

AttrMap FbnGradAttrs(const AttrMap& attrs) {
  return {{"epsilon", *attrs.Find("epsilon")},
          {"data_format", *attrs.Find("data_format")},
          {"is_training", *attrs.Find("is_training")}};
}

// TensorFlow's _FusedBatchNormV3Grad: (dx, dscale, doffset) =
// FusedBatchNormGradV3(dy, x, scale, reserve_space_1, reserve_space_2, 0),
// the reserve spaces holding the statistics y used (TensorFlow's inference
// branch passes the given mean and variance: the same values here), plus
// StatisticsGrad. mean and variance get none, as in TensorFlow.
void FusedBatchNormBackward(GradContext& g) {
  const DType dtype = g.InputDType(0);
  FbnGraph b(g, g.InputShape(0), dtype);
  Tensors d = g.OpN("FusedBatchNormGradV3",
                    {g.Grad(0), g.Input(0), g.Input(1), g.Output(3),
                     g.Output(4), g.Const(0.0, dtype)},
                    FbnGradAttrs(g.attrs()));
  if (!g.ok()) return;
  if (g.NeedsGrad(0)) {
    const bool training = g.attrs().Bool("is_training");
    g.SetGrad(0, training ? StatisticsGrad(g, b, d[0]) : d[0]);
  }
  if (g.NeedsGrad(1)) g.SetGrad(1, d[1]);
  if (g.NeedsGrad(2)) g.SetGrad(2, d[2]);
}

// What both modes of FusedBatchNormGradV3's backward share (see
// FusedBatchNormGradKernel for the names).
struct FbnGradTerms {
  Tensor dy, xc, s, r, r3, sr, gx, gs, go, gsr, sum_dy, p, sum_gx_dy;
};

// is_training = false: the kernel is x_backprop = s r dy, scale_backprop =
// r P (P = sum(dy xc)), offset_backprop = D (D = sum(dy)), so with upstream
// gx, gs, go: ddy = s r gx + gs r xc + go, dx = gs r dy, dm = -gs r D,
// dscale = r sum(gx dy), dv = -1/2 r^3 (s sum(gx dy) + gs P).
void FbnInferenceGradGrad(GradContext& g, FbnGraph& b, FbnGradTerms& t) {
  if (g.NeedsGrad(0)) {
    g.SetGrad(0, g.Add(g.Add(g.Mul(b.Bc(t.sr), t.gx), g.Mul(t.xc, b.Bc(t.gsr))),
                       b.Bc(t.go)));
  }
  if (g.NeedsGrad(1)) g.SetGrad(1, g.Mul(b.Bc(t.gsr), t.dy));
  if (g.NeedsGrad(3)) g.SetGrad(3, g.Neg(g.Mul(t.gsr, t.sum_dy)));
  if (g.NeedsGrad(2)) g.SetGrad(2, g.Mul(t.r, t.sum_gx_dy));
  if (g.NeedsGrad(4)) {
    Tensor inner = g.Add(g.Mul(t.s, t.sum_gx_dy), g.Mul(t.gs, t.p));
    g.SetGrad(4, g.Mul(b.C(-0.5), g.Mul(t.r3, inner)));
  }
}

// is_training: with A = sum(gx), B = sum(gx xc), k = r^2 / N, the loss
// L = s r (sum(gx dy) - A D/N - B P k) + gs r P + go D has
//   ddy = s r (gx - A/N - xc B k) + gs r xc + go
//   dx  = gs r dy - s r k (gx P + B dy)          (m, v held)
//   dm  = s r k (A P + B D) - gs r D             (= -sum(dx))
//   dscale = r (C1 - r^2 C2),  C1 = sum(gx dy) - A D/N,  C2 = B P / N
//   dv  = -1/2 r^3 (s (C1 - 3 r^2 C2) + gs P).
void FbnTrainingGradGrad(GradContext& g, FbnGraph& b, FbnGradTerms& t) {
  const double inv_n = b.InvCount();
  Tensor a = b.Sum(t.gx);
  Tensor bb = b.Sum(g.Mul(t.gx, t.xc));
  Tensor r2 = g.Mul(t.r, t.r);
  Tensor k = g.Mul(r2, b.C(inv_n));
  if (g.NeedsGrad(0)) {
    Tensor in = g.Sub(g.Sub(t.gx, b.Bc(g.Mul(a, b.C(inv_n)))),
                      g.Mul(t.xc, b.Bc(g.Mul(bb, k))));
    g.SetGrad(0, g.Add(g.Add(g.Mul(b.Bc(t.sr), in), g.Mul(t.xc, b.Bc(t.gsr))),
                       b.Bc(t.go)));
  }
  Tensor srk = g.Mul(t.sr, k);
  if (g.NeedsGrad(1)) {
    Tensor in = g.Add(g.Mul(t.gx, b.Bc(t.p)), g.Mul(b.Bc(bb), t.dy));
    g.SetGrad(1, g.Sub(g.Mul(b.Bc(t.gsr), t.dy), g.Mul(b.Bc(srk), in)));
  }
  if (g.NeedsGrad(3)) {
    Tensor in = g.Add(g.Mul(a, t.p), g.Mul(bb, t.sum_dy));
    g.SetGrad(3, g.Sub(g.Mul(srk, in), g.Mul(t.gsr, t.sum_dy)));
  }
  Tensor c1 = g.Sub(t.sum_gx_dy, g.Mul(b.C(inv_n), g.Mul(a, t.sum_dy)));
  Tensor c2 = g.Mul(b.C(inv_n), g.Mul(bb, t.p));
  if (g.NeedsGrad(2)) g.SetGrad(2, g.Mul(t.r, g.Sub(c1, g.Mul(r2, c2))));
  if (g.NeedsGrad(4)) {
    Tensor in = g.Sub(c1, g.Mul(b.C(3), g.Mul(r2, c2)));
    in = g.Add(g.Mul(t.s, in), g.Mul(t.gs, t.p));
    g.SetGrad(4, g.Mul(b.C(-0.5), g.Mul(t.r3, in)));
  }
}

// The backward of FusedBatchNormGradV3: the exact partial derivatives of
// its outputs (x_backprop, scale_backprop, offset_backprop) in y_backprop,
// x, scale, reserve_space_1 and reserve_space_2 (reserve_space_3 is not
// read). TensorFlow's _FusedBatchNormGradGrad recomputes the statistics
// from x instead and gives reserve_space_1/2 none; through FusedBatchNormV3
// the two agree, since the reserve spaces' gradients flow back to x there
// (see StatisticsGrad).
void FusedBatchNormGradGrad(GradContext& g) {
  const DType dtype = g.InputDType(1);
  FbnGraph b(g, g.InputShape(1), dtype);
  FbnGradTerms t;
  t.dy = g.Input(0);
  t.s = g.Input(2);
  t.xc = g.Sub(g.Input(1), b.Bc(g.Input(3)));
  t.r =
      g.Div(b.C(1),
            g.Op("Sqrt", {g.Add(g.Input(4), b.C(g.attrs().Float("epsilon")))}));
  t.r3 = g.Mul(t.r, g.Mul(t.r, t.r));
  t.sr = g.Mul(t.s, t.r);
  t.gx = g.Grad(0);
  t.gs = g.Grad(1);
  t.go = g.Grad(2);
  t.gsr = g.Mul(t.gs, t.r);
  t.sum_dy = b.Sum(t.dy);
  t.p = b.Sum(g.Mul(t.dy, t.xc));
  t.sum_gx_dy = b.Sum(g.Mul(t.gx, t.dy));
  if (g.attrs().Bool("is_training")) {
    FbnTrainingGradGrad(g, b, t);
  } else {
    FbnInferenceGradGrad(g, b, t);
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
  r.Add(Op("FusedBatchNormV3")
            .Inputs({"x", "scale", "offset", "mean", "variance"})
            .Outputs({"y", "batch_mean", "batch_variance", "reserve_space_1",
                      "reserve_space_2", "reserve_space_3"})
            .Attr("epsilon", 0.0001)
            .Attr("exponential_avg_factor", 1.0)
            .Attr("data_format", std::string("NHWC"))
            .Attr("is_training", true)
            .Forward(FusedBatchNormKernel)
            // FusedBatchNormGradV3 of dy (see FusedBatchNormBackward)
            .Backward(FusedBatchNormBackward)
            .SavesInputs({0, 1})
            .SavesOutputs({3, 4})
            // TensorFlow's gradient gives mean and variance none
            .NonDifferentiableInputs({3, 4})
            .Summary("batch normalization per channel, with the batch's "
                     "statistics (is_training) or the given ones, and the "
                     "running statistics (TensorFlow's CPU kernel)"));
  r.Add(Op("FusedBatchNormGradV3")
            .Inputs({"y_backprop", "x", "scale", "reserve_space_1",
                     "reserve_space_2", "reserve_space_3"})
            .Outputs({"x_backprop", "scale_backprop", "offset_backprop",
                      "reserve_space_4", "reserve_space_5"})
            .Attr("epsilon", 0.0001)
            .Attr("data_format", std::string("NHWC"))
            .Attr("is_training", true)
            .Forward(FusedBatchNormGradKernel)
            // exact partials, written in ops (see FusedBatchNormGradGrad)
            .Backward(FusedBatchNormGradGrad)
            .SavesInputs({0, 1, 2, 3, 4})
            // reserve_space_3 is a placeholder that is never read
            .NonDifferentiableInputs({5})
            .Summary("the gradient of FusedBatchNormV3 (reserve_space_4/5 "
                     "are empty placeholders)"));
}

}  // namespace gradtape
