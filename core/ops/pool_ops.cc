// Average and max pooling, 2-D (NHWC or NCHW) and 3-D (NDHWC or NCDHW).
//
// How it works: every kernel is one walk over the pooling windows
// (ForEachWindow). A window is the box of input pixels an output pixel
// reads, already clipped to the input (SAME padding never reads padded
// cells), and the work per window is a loop over its pixels with the
// channels innermost, contiguous in memory. 2-D pooling is 3-D pooling with
// a depth of 1, so one geometry and one walk serve both.
//
// Semantics follow TensorFlow:
//  - ksize and strides have one entry per dim of the layout, 1 for batch and
//    channels; padding is "SAME" or "VALID", or "EXPLICIT" with
//    explicit_paddings for 2-D max pooling (MaxPool, MaxPoolGrad and, beyond
//    TensorFlow, MaxPoolGradGrad so that MaxPoolGrad has a gradient), each
//    side below ksize. data_format is NHWC / NDHWC (the default) or NCHW /
//    NCDHW, which run as the channels-last op on transposed copies
//    (channels_first.h); MaxPoolWithArgmax and its gradients are NHWC only,
//    as TensorFlow's.
//  - MaxPoolWithArgmax returns the flat index of each window's first max:
//    (y * width + x) * channels + c, plus batch * height * width * channels
//    with include_batch_in_index; its gradient ops read argmax.
//  - SAME averages over the valid (non-padded) elements of a window.
//  - Max pooling routes a gradient to the first maximum of its window in
//    row-major window order (TensorFlow's kernels): the first pixel equal to
//    orig_output (as TensorFlow's MaxPoolGradGrad and GPU MaxPoolGrad find
//    it; no max is recomputed). orig_input and orig_output only select the
//    routing: they are non-differentiable inputs of MaxPoolGrad and
//    MaxPoolGradGrad (TensorFlow returns zeros for them).
//  - AvgPoolGrad / AvgPool3DGrad take orig_input_shape as an attr (TensorFlow
//    passes it as a host int32 tensor input).
#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <vector>

#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/channels_first.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {
namespace {

// The spatial layout of one pooling: input and output extents, window size,
// strides and leading padding per spatial dim. 2-D pooling is stored as 3-D
// with a leading spatial extent of 1.
struct PoolGeometry {
  int spatial = 2;  // 2 (NHWC) or 3 (NDHWC)
  int64_t batch = 0;
  int64_t channels = 0;
  std::array<int64_t, 3> in{1, 1, 1};
  std::array<int64_t, 3> out{1, 1, 1};
  std::array<int64_t, 3> ksize{1, 1, 1};
  std::array<int64_t, 3> stride{1, 1, 1};
  std::array<int64_t, 3> pad{0, 0, 0};  // padding before each dim

  int64_t in_pixels() const { return in[0] * in[1] * in[2]; }
  Shape ShapeOf(const std::array<int64_t, 3>& spatial_dims) const {
    Shape s{batch};
    for (int d = 3 - spatial; d < 3; ++d) s.push_back(spatial_dims[d]);
    s.push_back(channels);
    return s;
  }
  Shape OutputShape() const { return ShapeOf(out); }
};

// The input pixels one output pixel reads: [lo, hi) per spatial dim, within
// the input. Pixels are numbered over (batch, spatial dims) in row-major
// order; a pixel's channels start at element pixel * channels.
struct Window {
  const PoolGeometry* g;
  int64_t first;  // pixel number of spatial (0, 0, 0) in this batch entry
  std::array<int64_t, 3> lo, hi;

  int64_t count() const {
    return (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]);
  }
  // fn(pixel) for each pixel of the window, in row-major order.
  template <typename Fn>
  void ForEachPixel(Fn&& fn) const {
    for (int64_t d = lo[0]; d < hi[0]; ++d) {
      for (int64_t h = lo[1]; h < hi[1]; ++h) {
        const int64_t row = first + (d * g->in[1] + h) * g->in[2];
        for (int64_t w = lo[2]; w < hi[2]; ++w) fn(row + w);
      }
    }
  }
};

// fn(out_pixel, window) for every output pixel in row-major order. Every
// window holds at least one pixel (guaranteed by MakePoolGeometry).
template <typename Fn>
void ForEachWindow(const PoolGeometry& g, Fn&& fn) {
  Window w{&g, 0, {}, {}};
  auto range = [&](int d, int64_t o) {
    const int64_t start = o * g.stride[d] - g.pad[d];
    w.lo[d] = std::max<int64_t>(start, 0);
    w.hi[d] = std::min(start + g.ksize[d], g.in[d]);
  };
  int64_t o = 0;
  for (int64_t b = 0; b < g.batch; ++b) {
    w.first = b * g.in_pixels();
    for (int64_t od = 0; od < g.out[0]; ++od) {
      range(0, od);
      for (int64_t oh = 0; oh < g.out[1]; ++oh) {
        range(1, oh);
        for (int64_t ow = 0; ow < g.out[2]; ++ow, ++o) {
          range(2, ow);
          fn(o, static_cast<const Window&>(w));
        }
      }
    }
  }
}

// explicit_paddings (MaxPool and its gradients): empty unless padding is
// EXPLICIT; then 8 entries (before, after per NHWC dim), 0 for batch and
// channels, and in [0, ksize) in the spatial dims, so that every window
// holds an input pixel.
absl::Status CheckExplicitPaddings(const KernelContext& ctx, bool is_explicit,
                                   const std::vector<int64_t>& p,
                                   const std::vector<int64_t>& ksize) {
  if (!is_explicit) {
    if (p.empty()) return absl::OkStatus();
    return ctx.InvalidArgument("explicit_paddings ", ShapeString(p),
                               " must be empty unless padding is EXPLICIT");
  }
  bool ok = p.size() == 8 && p[0] == 0 && p[1] == 0 && p[6] == 0 && p[7] == 0;
  for (int i = 2; ok && i < 6; ++i) ok = p[i] >= 0 && p[i] < ksize[i / 2];
  if (ok) return absl::OkStatus();
  return ctx.InvalidArgument(
      "explicit_paddings ", ShapeString(p),
      " must have 8 entries (before, after per dim), 0 for the batch and "
      "channel dims and below ksize ",
      ShapeString(ksize), " in the spatial dims");
}

// Checks `padding` (SAME, VALID, or EXPLICIT for an op with
// explicit_paddings) and sets *paddings to explicit_paddings (checked).
absl::Status ReadPoolPadding(const KernelContext& ctx,
                             const std::string& padding,
                             const std::vector<int64_t>& ksize,
                             std::vector<int64_t>* paddings) {
  const AttrValue* explicit_attr = ctx.attrs().Find("explicit_paddings");
  if (padding != "SAME" && padding != "VALID" &&
      (padding != "EXPLICIT" || explicit_attr == nullptr)) {
    return ctx.InvalidArgument(
        "padding '", padding, "' must be SAME",
        explicit_attr != nullptr ? ", VALID or EXPLICIT" : " or VALID");
  }
  if (explicit_attr == nullptr) return absl::OkStatus();
  *paddings = std::get<std::vector<int64_t>>(*explicit_attr);
  return CheckExplicitPaddings(ctx, padding == "EXPLICIT", *paddings, ksize);
}

// Sets input, window, stride, padding and output extents of spatial dim `i`
// (1-based, in the layout) of `g` from the checked attrs.
absl::Status SetPoolDim(const KernelContext& ctx, const std::string& padding,
                        const std::vector<int64_t>& paddings, int i,
                        absl::Span<const int64_t> input_shape,
                        absl::string_view what, PoolGeometry* pg) {
  PoolGeometry& g = *pg;
  const std::vector<int64_t>& ksize = ctx.attrs().IntList("ksize");
  const std::vector<int64_t>& strides = ctx.attrs().IntList("strides");
  const int d = 3 - g.spatial + i - 1;
  const int64_t in = input_shape[i], k = ksize[i], s = strides[i];
  g.in[d] = in;
  g.ksize[d] = k;
  g.stride[d] = s;
  if (padding == "EXPLICIT") {
    // Each side's padding is below k: every window overlaps the input.
    g.pad[d] = paddings[2 * i];
    const int64_t padded = in + paddings[2 * i] + paddings[2 * i + 1];
    if (k > padded) {
      return ctx.InvalidArgument("window ksize ", ShapeString(ksize),
                                 " is larger than the padded ", what, " ",
                                 ShapeString(input_shape), " in dim ", i);
    }
    g.out[d] = (padded - k) / s + 1;
  } else if (padding == "VALID") {
    if (k > in) {
      return ctx.InvalidArgument("window ksize ", ShapeString(ksize),
                                 " is larger than ", what, " ",
                                 ShapeString(input_shape), " in dim ", i, " (",
                                 k, " > ", in, ") with VALID padding");
    }
    g.out[d] = (in - k) / s + 1;
    g.pad[d] = 0;
  } else {
    // SAME: out = ceil(in / s). The padding is less than k, so every
    // window overlaps the input.
    g.out[d] = (in + s - 1) / s;
    g.pad[d] = std::max<int64_t>((g.out[d] - 1) * s + k - in, 0) / 2;
  }
  return absl::OkStatus();
}

// Reads ksize, strides, padding and data_format from the op's attrs and lays
// them against an input of `input_shape` (named `what` in messages).
// INVALID_ARGUMENT for a wrong rank, malformed ksize/strides (length, 1 in the
// batch and channel dims, positive), unknown padding, or a VALID window
// larger than the input. The attrs are channels-last ones (data_format is
// WithChannelsFirst's).
absl::StatusOr<PoolGeometry> MakePoolGeometry(
    const KernelContext& ctx, int spatial,
    absl::Span<const int64_t> input_shape, absl::string_view what) {
  const AttrMap& attrs = ctx.attrs();
  const int rank = spatial + 2;
  const char* layout = ChannelsLastName(spatial);
  if (static_cast<int>(input_shape.size()) != rank) {
    return ctx.InvalidArgument(what, " must have rank ", rank, " (", layout,
                               "), got shape ", ShapeString(input_shape));
  }
  const std::vector<int64_t>& ksize = attrs.IntList("ksize");
  const std::vector<int64_t>& strides = attrs.IntList("strides");
  for (const auto* list : {&ksize, &strides}) {
    const char* name = list == &ksize ? "ksize" : "strides";
    if (static_cast<int>(list->size()) != rank) {
      return ctx.InvalidArgument(name, " ", ShapeString(*list), " must have ",
                                 rank, " entries (", layout, ")");
    }
    if ((*list)[0] != 1 || (*list)[rank - 1] != 1) {
      return ctx.InvalidArgument(
          name, " ", ShapeString(*list),
          " must be 1 in the batch and channel dims (pooling across batch or "
          "channels is not supported)");
    }
    for (int64_t v : *list) {
      if (v < 1 || v > std::numeric_limits<int32_t>::max()) {
        return ctx.InvalidArgument(name, " ", ShapeString(*list), " has entry ",
                                   v, "; entries must be in [1, 2^31)");
      }
    }
  }
  const std::string& padding = attrs.Get<std::string>("padding");
  std::vector<int64_t> paddings;
  RETURN_IF_ERROR(ReadPoolPadding(ctx, padding, ksize, &paddings));
  // Dims up to 2^62 keep the window arithmetic below free of overflow.
  constexpr int64_t kMaxDim = int64_t{1} << 62;
  for (int64_t dim : input_shape) {
    if (dim < 0 || dim > kMaxDim) {
      return ctx.InvalidArgument(what, " ", ShapeString(input_shape),
                                 " has a dim outside [0, 2^62]");
    }
  }
  PoolGeometry g;
  g.spatial = spatial;
  g.batch = input_shape[0];
  g.channels = input_shape[rank - 1];
  for (int i = 1; i <= spatial; ++i) {
    RETURN_IF_ERROR(
        SetPoolDim(ctx, padding, paddings, i, input_shape, what, &g));
  }
  return g;
}

// The attrs of a pooling op without extras (orig_input_shape), to run the
// related pooling op in a backward.
AttrMap PoolAttrs(const AttrMap& attrs) {
  AttrMap out;
  for (const char* name : {"ksize", "strides", "padding", "data_format"}) {
    out.Set(name, *attrs.Find(name));
  }
  // explicit_paddings (MaxPool and its gradients), when set.
  const AttrValue* p = attrs.Find("explicit_paddings");
  if (p != nullptr && !std::get<std::vector<int64_t>>(*p).empty()) {
    out.Set("explicit_paddings", *p);
  }
  return out;
}

// Per-channel maximum of a window into best[0, channels).
template <typename T>
void WindowMax(const Window& w, const T* x, int64_t channels, T* best) {
  bool first = true;
  w.ForEachPixel([&](int64_t p) {
    const T* in = x + p * channels;
    if (first) {
      std::copy(in, in + channels, best);
      first = false;
      return;
    }
    for (int64_t c = 0; c < channels; ++c) {
      best[c] = in[c] > best[c] ? in[c] : best[c];
    }
  });
}

// AvgPool / AvgPool3D and MaxPool / MaxPool3D.
absl::Status PoolKernel(KernelContext& ctx, int spatial, bool max) {
  RETURN_IF_ERROR(ctx.RequireFloat(0));
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(PoolGeometry g,
                   MakePoolGeometry(ctx, spatial, x.shape(), "input"));
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, x.dtype(), g.OutputShape()));
  const int64_t channels = g.channels;
  DispatchFloat(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    ForEachWindow(g, [&](int64_t o, const Window& w) {
      T* out = py + o * channels;
      if (max) {
        WindowMax(w, px, channels, out);
        return;
      }
      std::fill(out, out + channels, T(0));
      w.ForEachPixel([&](int64_t p) {
        const T* in = px + p * channels;
        for (int64_t c = 0; c < channels; ++c) out[c] += in[c];
      });
      const T inv = T(1) / static_cast<T>(w.count());
      for (int64_t c = 0; c < channels; ++c) out[c] *= inv;
    });
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// AvgPoolGrad / AvgPool3DGrad: each output gradient is spread evenly over
// the valid pixels of its window.
absl::Status AvgPoolGradKernel(KernelContext& ctx, int spatial) {
  RETURN_IF_ERROR(ctx.RequireFloat(0));
  const Tensor& dy = ctx.input(0);
  const std::vector<int64_t>& orig = ctx.attrs().IntList("orig_input_shape");
  ASSIGN_OR_RETURN(PoolGeometry g,
                   MakePoolGeometry(ctx, spatial, orig, "orig_input_shape"));
  // A small grad can stand for a huge orig_input_shape (strides up to 2^31):
  // refuse sizes whose byte count overflows, and failed allocations.
  const int64_t n = NumElements(orig);
  if (n < 0 || n > std::numeric_limits<int64_t>::max() / 8) {
    return ctx.InvalidArgument("orig_input_shape ", ShapeString(orig),
                               " has too many elements");
  }
  if (dy.shape() != g.OutputShape()) {
    return ctx.InvalidArgument("grad ", dy.DebugString(),
                               " does not match the pooled shape ",
                               ShapeString(g.OutputShape()),
                               " of orig_input_shape ", ShapeString(orig));
  }
  ASSIGN_OR_RETURN(Tensor dx, Allocate(ctx, dy.dtype(), orig));
  const int64_t channels = g.channels;
  DispatchFloat(dy.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pdy = dy.data<T>();
    T* pdx = dx.mutable_data<T>();
    std::fill(pdx, pdx + n, T(0));
    ForEachWindow(g, [&](int64_t o, const Window& w) {
      const T inv = T(1) / static_cast<T>(w.count());
      const T* in = pdy + o * channels;
      w.ForEachPixel([&](int64_t p) {
        T* out = pdx + p * channels;
        for (int64_t c = 0; c < channels; ++c) out[c] += in[c] * inv;
      });
    });
  });
  ctx.set_output(0, std::move(dx));
  return absl::OkStatus();
}

// MaxPoolGrad (grad_grad = false): the output-shaped grad is routed to the
// first maximum of each window, giving an input-shaped result.
// MaxPoolGradGrad (grad_grad = true): each output pixel picks the
// input-shaped grad at the first maximum of its window.
// The first maximum is the first pixel (row-major) of the window equal to
// orig_output there; a window with no such pixel (orig_output is not the
// max pool of orig_input) routes nothing.
absl::Status MaxPoolGradKernel(KernelContext& ctx, int spatial,
                               bool grad_grad) {
  for (int i = 0; i < 3; ++i) {
    RETURN_IF_ERROR(ctx.RequireFloat(i));
  }
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 1));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 2));
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  const Tensor& grad = ctx.input(2);
  ASSIGN_OR_RETURN(PoolGeometry g,
                   MakePoolGeometry(ctx, spatial, x.shape(), "orig_input"));
  const Shape pooled = g.OutputShape();
  if (y.shape() != pooled) {
    return ctx.InvalidArgument(
        "orig_output ", y.DebugString(), " does not match the pooled shape ",
        ShapeString(pooled), " of orig_input ", x.DebugString());
  }
  const Shape& grad_shape = grad_grad ? x.shape() : pooled;
  if (grad.shape() != grad_shape) {
    return ctx.InvalidArgument("grad ", grad.DebugString(), " must have shape ",
                               ShapeString(grad_shape), " (",
                               grad_grad ? "orig_input" : "orig_output", ")");
  }
  ASSIGN_OR_RETURN(Tensor out,
                   Allocate(ctx, x.dtype(), grad_grad ? pooled : x.shape()));
  const int64_t channels = g.channels;
  DispatchFloat(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    const T* py = y.data<T>();
    const T* pg = grad.data<T>();
    T* pout = out.mutable_data<T>();
    // found[c] becomes 1 at the first pixel equal to the window's max, so
    // later ties are skipped. Written as 0/1 arithmetic and selects of
    // preloaded values (no argmax index, no branches) so that GCC vectorizes
    // the channel loops (an order of magnitude faster than an argmax).
    if (x.num_elements() == 0) return;  // `channels` may be huge
    std::vector<T> found(channels);
    ForEachWindow(g, [&](int64_t o, const Window& w) {
      const T* max = py + o * channels;
      std::fill(found.begin(), found.end(), T(0));
      if (grad_grad) {
        T* dst = pout + o * channels;
        std::fill(dst, dst + channels, T(0));
        w.ForEachPixel([&](int64_t p) {
          const T* in = px + p * channels;
          const T* src = pg + p * channels;
          for (int64_t c = 0; c < channels; ++c) {
            const T s = src[c], d = dst[c];
            const T hit = (in[c] == max[c] ? T(1) : T(0)) * (T(1) - found[c]);
            dst[c] = hit != T(0) ? s : d;
            found[c] += hit;
          }
        });
      } else {
        const T* src = pg + o * channels;
        w.ForEachPixel([&](int64_t p) {
          const T* in = px + p * channels;
          T* dst = pout + p * channels;
          for (int64_t c = 0; c < channels; ++c) {
            const T s = src[c];
            const T hit = (in[c] == max[c] ? T(1) : T(0)) * (T(1) - found[c]);
            dst[c] += hit != T(0) ? s : T(0);
            found[c] += hit;
          }
        });
      }
    });
  });
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

// An op with the pooling attrs common to the family; 2-D max pooling also
// has explicit_paddings (padding EXPLICIT), as TensorFlow's MaxPool and
// MaxPoolGrad.
Op PoolOp(Op op, int spatial, bool explicit_paddings = false) {
  op.Attr("ksize", AttrType::kIntList)
      .Attr("strides", AttrType::kIntList)
      .Attr("padding", AttrType::kString)
      .Attr("data_format", std::string(ChannelsLastName(spatial)));
  if (explicit_paddings) op.Attr("explicit_paddings", std::vector<int64_t>{});
  return op;
}

// AvgPool / AvgPool3D; `grad` names its gradient op.
Op AvgPool(Op op, int spatial, const char* grad) {
  return std::move(
      PoolOp(std::move(op), spatial)
          .Inputs({spatial == 2 ? "value" : "input"})
          .Outputs({"output"})
          .Forward(WithChannelsFirst({spatial, {0}},
                                     [spatial](KernelContext& ctx) {
                                       return PoolKernel(ctx, spatial,
                                                         /*max=*/false);
                                     }))
          // dx = AvgPoolGrad(shape(x), dy)
          .Backward([grad](GradContext& g) {
            AttrMap attrs = PoolAttrs(g.attrs());
            const Shape& in = g.InputShape(0);
            attrs.Set("orig_input_shape",
                      std::vector<int64_t>(in.begin(), in.end()));
            g.SetGrad(0, g.Op(grad, {g.Grad(0)}, std::move(attrs)));
          })
          .Summary(absl::StrCat("average pooling (", ChannelsLastName(spatial),
                                " or ", ChannelsFirstName(spatial),
                                "; SAME averages over valid cells only)")));
}

// AvgPoolGrad / AvgPool3DGrad, the gradient of `avg`.
Op AvgPoolGrad(Op op, int spatial, const char* avg) {
  return std::move(
      PoolOp(std::move(op), spatial)
          .Inputs({"grad"})
          .Outputs({"output"})
          .Attr("orig_input_shape", AttrType::kIntList)
          .Forward(WithChannelsFirst({spatial, {0}},
                                     [spatial](KernelContext& ctx) {
                                       return AvgPoolGradKernel(ctx, spatial);
                                     }))
          // linear in grad, the adjoint of AvgPool: dgrad = AvgPool(dz)
          .Backward([avg](GradContext& g) {
            g.SetGrad(0, g.Op(avg, {g.Grad(0)}, PoolAttrs(g.attrs())));
          })
          .Summary(absl::StrCat("the gradient of ", avg,
                                " (orig_input_shape is an attr; TensorFlow "
                                "takes a tensor)")));
}

// MaxPool / MaxPool3D; `grad` names its gradient op.
Op MaxPool(Op op, int spatial, const char* grad) {
  return std::move(
      PoolOp(std::move(op), spatial, /*explicit_paddings=*/spatial == 2)
          .Inputs({"input"})
          .Outputs({"output"})
          .Forward(WithChannelsFirst({spatial, {0}},
                                     [spatial](KernelContext& ctx) {
                                       return PoolKernel(ctx, spatial,
                                                         /*max=*/true);
                                     }))
          // dx = MaxPoolGrad(x, y, dy): dy to the first max of its window
          .Backward([grad](GradContext& g) {
            g.SetGrad(0, g.Op(grad, {g.Input(0), g.Output(0), g.Grad(0)},
                              PoolAttrs(g.attrs())));
          })
          .SavesInputs({0})
          .SavesOutputs({0})
          .Summary(absl::StrCat("max pooling (", ChannelsLastName(spatial),
                                " or ", ChannelsFirstName(spatial), ")",
                                spatial == 2 ? "; padding SAME, VALID or "
                                               "EXPLICIT (explicit_paddings)"
                                             : "")));
}

// MaxPoolGrad (grad_grad = false) or MaxPoolGradGrad (true), 2-D or 3-D:
// the gradient of `of`. Each is linear in grad, with the other one
// (`other`) as its gradient.
Op MaxPoolGradOp(Op op, int spatial, bool grad_grad, const char* of,
                 const char* other) {
  return std::move(
      PoolOp(std::move(op), spatial, /*explicit_paddings=*/spatial == 2)
          .Inputs({"orig_input", "orig_output", "grad"})
          .Outputs({"output"})
          .Forward(WithChannelsFirst({spatial, {0, 1, 2}},
                                     [spatial, grad_grad](KernelContext& ctx) {
                                       return MaxPoolGradKernel(ctx, spatial,
                                                                grad_grad);
                                     }))
          // linear in grad: dgrad = other(x, y, dz)
          .Backward([other](GradContext& g) {
            g.SetGrad(2, g.Op(other, {g.Input(0), g.Input(1), g.Grad(0)},
                              PoolAttrs(g.attrs())));
          })
          .SavesInputs({0, 1})
          .NonDifferentiableInputs({0, 1})
          .Summary(absl::StrCat(
              "the gradient of ", of,
              grad_grad ? ": per window, grad at the first max (== "
                          "orig_output) of orig_input"
                        : ": grad routed to the first max (== orig_output) "
                          "of each window of orig_input")));
}

// The flat input index of an argmax entry of output element o: argmax holds
// (y * width + x) * channels + c, plus batch * height * width * channels when
// include_batch_in_index (TensorFlow's flattening). INVALID_ARGUMENT for an
// entry outside the input.
absl::StatusOr<int64_t> ArgmaxTarget(const KernelContext& ctx,
                                     const PoolGeometry& g,
                                     const Tensor& argmax, bool with_batch,
                                     int64_t o) {
  const int64_t image = g.in_pixels() * g.channels;
  const int64_t pooled = g.out[0] * g.out[1] * g.out[2] * g.channels;
  const int64_t v = static_cast<int64_t>(argmax.ElementAsDouble(o));
  const int64_t limit = with_batch ? image * g.batch : image;
  if (v < 0 || v >= limit) {
    return ctx.InvalidArgument("argmax entry ", v, " at index ", o,
                               " is outside [0, ", limit, ")");
  }
  return with_batch ? v : v + (o / pooled) * image;
}

// MaxPoolWithArgmax: max pooling (NHWC) and, per output element, the flat
// index of the first maximum of its window (row-major window order).
absl::Status MaxPoolWithArgmaxKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(ctx.RequireFloat(0));
  const Tensor& x = ctx.input(0);
  const DType targmax = ctx.attrs().Type("Targmax");
  if (targmax != DType::kInt32 && targmax != DType::kInt64) {
    return ctx.InvalidArgument("Targmax must be int32 or int64, got ",
                               DTypeName(targmax));
  }
  ASSIGN_OR_RETURN(PoolGeometry g,
                   MakePoolGeometry(ctx, 2, x.shape(), "input"));
  const bool with_batch = ctx.attrs().Bool("include_batch_in_index");
  const int64_t limit =
      with_batch ? x.num_elements() : g.in_pixels() * g.channels;
  if (targmax == DType::kInt32 && limit > std::numeric_limits<int32_t>::max()) {
    return ctx.InvalidArgument("input ", x.DebugString(),
                               " is too large for Targmax int32");
  }
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, x.dtype(), g.OutputShape()));
  ASSIGN_OR_RETURN(Tensor arg, Allocate(ctx, targmax, g.OutputShape()));
  const int64_t channels = g.channels;
  DispatchFloat(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    if (x.num_elements() == 0) return;  // `channels` may be huge
    std::vector<int64_t> best(channels);
    ForEachWindow(g, [&](int64_t o, const Window& w) {
      T* out = py + o * channels;
      bool first = true;
      w.ForEachPixel([&](int64_t p) {
        const T* in = px + p * channels;
        for (int64_t c = 0; c < channels; ++c) {
          if (first || in[c] > out[c]) {
            out[c] = in[c];
            best[c] = p;
          }
        }
        first = false;
      });
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t pixel = with_batch ? best[c] : best[c] - w.first;
        const int64_t index = pixel * channels + c;
        if (targmax == DType::kInt32) {
          arg.mutable_data<int32_t>()[o * channels + c] =
              static_cast<int32_t>(index);
        } else {
          arg.mutable_data<int64_t>()[o * channels + c] = index;
        }
      }
    });
  });
  ctx.set_output(0, std::move(y));
  ctx.set_output(1, std::move(arg));
  return absl::OkStatus();
}

// MaxPoolGradWithArgmax (grad_grad = false): the pooled-shape grad added into
// zeros of input's shape at argmax. MaxPoolGradGradWithArgmax (true): the
// input-shaped grad read at argmax, giving the pooled shape.
absl::Status MaxPoolGradWithArgmaxKernel(KernelContext& ctx, bool grad_grad) {
  RETURN_IF_ERROR(ctx.RequireFloat(0));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 1));
  RETURN_IF_ERROR(ctx.RequireIndexDType(2));
  const Tensor& x = ctx.input(0);
  const Tensor& grad = ctx.input(1);
  const Tensor& argmax = ctx.input(2);
  ASSIGN_OR_RETURN(PoolGeometry g,
                   MakePoolGeometry(ctx, 2, x.shape(), "input"));
  const Shape pooled = g.OutputShape();
  if (argmax.shape() != pooled) {
    return ctx.InvalidArgument(
        "argmax ", argmax.DebugString(), " does not match the pooled shape ",
        ShapeString(pooled), " of input ", x.DebugString());
  }
  const Shape& grad_shape = grad_grad ? x.shape() : pooled;
  if (grad.shape() != grad_shape) {
    return ctx.InvalidArgument("grad ", grad.DebugString(), " must have shape ",
                               ShapeString(grad_shape));
  }
  const bool with_batch = ctx.attrs().Bool("include_batch_in_index");
  // Scratch as large as argmax: a tensor, so it is charged like one.
  ASSIGN_OR_RETURN(Tensor targets,
                   Allocate(ctx, DType::kInt64, {argmax.num_elements()}));
  int64_t* target = targets.mutable_data<int64_t>();
  for (int64_t o = 0; o < argmax.num_elements(); ++o) {
    ASSIGN_OR_RETURN(target[o], ArgmaxTarget(ctx, g, argmax, with_batch, o));
  }
  ASSIGN_OR_RETURN(Tensor out,
                   Allocate(ctx, x.dtype(), grad_grad ? pooled : x.shape()));
  DispatchFloat(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pg = grad.data<T>();
    T* po = out.mutable_data<T>();
    for (int64_t o = 0; o < argmax.num_elements(); ++o) {
      if (grad_grad) {
        po[o] = pg[target[o]];
      } else {
        po[target[o]] += pg[o];
      }
    }
  });
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

// The attrs MaxPoolWithArgmax passes on to its gradient ops.
AttrMap ArgmaxPoolAttrs(const AttrMap& attrs) {
  AttrMap out;
  for (const char* name :
       {"ksize", "strides", "padding", "include_batch_in_index"}) {
    out.Set(name, *attrs.Find(name));
  }
  return out;
}

// The argmax ops read their `input` only for its shape: a backward passes
// zeros of that shape instead of keeping the input on the tape.
Tensor InputStandIn(GradContext& g) {
  return g.Filled(g.InputDType(0), g.InputShape(0), 0.0);
}

// MaxPoolGradWithArgmax (grad_grad = false) or MaxPoolGradGradWithArgmax:
// each linear in grad, with the other as its gradient.
Op MaxPoolGradWithArgmaxOp(Op op, bool grad_grad) {
  const char* other =
      grad_grad ? "MaxPoolGradWithArgmax" : "MaxPoolGradGradWithArgmax";
  return std::move(
      op.Inputs({"input", "grad", "argmax"})
          .Outputs({"output"})
          .Attr("ksize", AttrType::kIntList)
          .Attr("strides", AttrType::kIntList)
          .Attr("padding", AttrType::kString)
          .Attr("include_batch_in_index", false)
          .Forward([grad_grad](KernelContext& ctx) {
            return MaxPoolGradWithArgmaxKernel(ctx, grad_grad);
          })
          // linear in grad: dgrad = other(input, dz, argmax)
          .Backward([other](GradContext& g) {
            g.SetGrad(1, g.Op(other, {InputStandIn(g), g.Grad(0), g.Input(2)},
                              ArgmaxPoolAttrs(g.attrs())));
          })
          .SavesInputs({2})
          .NonDifferentiableInputs({0, 2})
          .Summary(grad_grad ? "the gradient of MaxPoolGradWithArgmax: grad "
                               "(input-shaped) read at argmax"
                             : "the gradient of MaxPoolWithArgmax: grad added "
                               "into zeros shaped like input at argmax"));
}

}  // namespace

void RegisterPoolOps(OpRegistry& r) {
  r.Add(AvgPool(Op("AvgPool"), 2, "AvgPoolGrad"));
  r.Add(AvgPoolGrad(Op("AvgPoolGrad"), 2, "AvgPool"));
  r.Add(MaxPool(Op("MaxPool"), 2, "MaxPoolGrad"));
  r.Add(MaxPoolGradOp(Op("MaxPoolGrad"), 2, /*grad_grad=*/false, "MaxPool",
                      "MaxPoolGradGrad"));
  r.Add(MaxPoolGradOp(Op("MaxPoolGradGrad"), 2, /*grad_grad=*/true,
                      "MaxPoolGrad", "MaxPoolGrad"));
  r.Add(AvgPool(Op("AvgPool3D"), 3, "AvgPool3DGrad"));
  r.Add(AvgPoolGrad(Op("AvgPool3DGrad"), 3, "AvgPool3D"));
  r.Add(MaxPool(Op("MaxPool3D"), 3, "MaxPool3DGrad"));
  r.Add(MaxPoolGradOp(Op("MaxPool3DGrad"), 3, /*grad_grad=*/false, "MaxPool3D",
                      "MaxPool3DGradGrad"));
  r.Add(MaxPoolGradOp(Op("MaxPool3DGradGrad"), 3, /*grad_grad=*/true,
                      "MaxPool3DGrad", "MaxPool3DGrad"));
  r.Add(Op("MaxPoolWithArgmax")
            .Inputs({"input"})
            .Outputs({"output", "argmax"})
            .Attr("ksize", AttrType::kIntList)
            .Attr("strides", AttrType::kIntList)
            .Attr("Targmax", DType::kInt64)
            .Attr("padding", AttrType::kString)
            .Attr("include_batch_in_index", false)
            .OutputDTypes(
                {DTypeRule::SameAsInput(0), DTypeRule::FromAttr("Targmax")})
            .Forward(MaxPoolWithArgmaxKernel)
            // dinput = MaxPoolGradWithArgmax(input, doutput, argmax)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("MaxPoolGradWithArgmax",
                                {InputStandIn(g), g.Grad(0), g.Output(1)},
                                ArgmaxPoolAttrs(g.attrs())));
            })
            .SavesOutputs({1})
            .Summary("max pooling (NHWC) and the flat index of each "
                     "window's first max ((y * width + x) * channels + c, "
                     "plus the batch offset if include_batch_in_index)"));
  r.Add(MaxPoolGradWithArgmaxOp(Op("MaxPoolGradWithArgmax"), false));
  r.Add(MaxPoolGradWithArgmaxOp(Op("MaxPoolGradGradWithArgmax"), true));
}

}  // namespace gradtape
