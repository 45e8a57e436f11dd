// Convolutions (NHWC / NDHWC, or NCHW / NCDHW through WithChannelsFirst),
// depthwise convolution and grayscale morphological dilation (NHWC), with
// the backprop ops their gradients run.
//
// How it works. Every op here is a window op over 2 or 3 spatial dims. A 2-D
// op runs as a 3-D one whose leading spatial dim has size 1
// (WindowGeometry), so one traversal (ForEachTap) serves them all:
//  - Convolution: im2col copies the receptive field of every output position
//    into a row of a patch matrix P [positions, taps * C]; with the filter
//    viewed as F [taps * C, O], y = P * F is one GEMM (core/ops/gemm.h).
//    Backprop input is dP = dy * F^T followed by col2im (scatter-add of the
//    rows of dP back into the image); backprop filter is dF = P^T * dy.
//    Images go in chunks so that P stays under kPatchBudget elements; a 1x1
//    filter with stride 1 uses the input itself as P.
//  - Depthwise: the same P, one Eigen GEMM per channel c on strided views
//    (not plain row-major matrices, so not for BLAS):
//    y[:, c, :] = P[:, taps, c] * F[taps, c, :].
//  - Dilation: y = max over taps of (x + filter); the backprops route each
//    output gradient to the first maximizing tap, as TensorFlow does (see
//    ForEachDilationMax for windows without a maximum).
//
// float32 Conv2D and its backprops run on oneDNN instead (dnnl_conv.h,
// TryDnnl below) when it takes them; this file's path is the fallback and
// serves float64, Conv3D, depthwise convolution, small convolutions and
// what oneDNN declines.
//
// Where TensorFlow passes input_sizes / filter_sizes as a host int tensor
// (an input of the backprop ops), gradtape takes an attr of that name; the
// other inputs keep TensorFlow's order.
//
// Output sizes are TensorFlow's: VALID: ceil((in - (k - 1) * d) / s), and
// the effective filter (k - 1) * d + 1 may not exceed the input; SAME:
// ceil(in / s), padded by max((out - 1) * s + (k - 1) * d + 1 - in, 0) of
// which the smaller half goes before; EXPLICIT (Conv2D, DepthwiseConv2dNative
// and their backprops, as in TensorFlow): explicit_paddings gives the before
// and after padding of each dim, out = (in + before + after - (k - 1) * d -
// 1) / s + 1. Taps in the padding read zeros
// (convolutions) or are skipped (dilation).
#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "Eigen/Core"
#include "core/autodiff/grad_context.h"
#include "core/base/cancellation.h"
#include "core/base/status_macros.h"
#include "core/ops/channels_first.h"
#include "core/ops/dnnl_conv.h"
#include "core/ops/gemm.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {
namespace {

constexpr int kMaxSpatial = 3;
// Elements of the patch matrix of one chunk of images (at least one image).
constexpr int64_t kPatchBudget = int64_t{1} << 22;
// Largest tensor (in elements) a kernel here allocates.
constexpr int64_t kMaxElements = int64_t{1} << 56;

using Dims = std::array<int64_t, kMaxSpatial>;

template <typename T>
using Matrix =
    Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using DynamicStride = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;
template <typename T>
using StridedMap = Eigen::Map<Matrix<T>, 0, DynamicStride>;
template <typename T>
using ConstStridedMap = Eigen::Map<const Matrix<T>, 0, DynamicStride>;

enum class FilterLayout {
  kConv,       // [k..., C, O]
  kDepthwise,  // [KH, KW, C, M]; output channel c * M + m
  kDilation,   // [KH, KW, C]
};

// What distinguishes the window ops of this file.
struct WindowKind {
  int spatial;  // 2 or 3
  FilterLayout layout;
  const char* dilation_attr;  // "dilations", or "rates" for Dilation2D
  // The channels-last data_format (the default; channels-first runs through
  // WithChannelsFirst); nullptr: no such attr.
  const char* data_format;
  // Has explicit_paddings and accepts padding "EXPLICIT" (TensorFlow's 2-D
  // convolutions and depthwise convolutions).
  bool explicit_padding = false;
};
constexpr WindowKind kConv2DKind{2, FilterLayout::kConv, "dilations", "NHWC",
                                 true};
constexpr WindowKind kConv3DKind{3, FilterLayout::kConv, "dilations", "NDHWC"};
constexpr WindowKind kDepthwiseKind{2, FilterLayout::kDepthwise, "dilations",
                                    "NHWC", true};
constexpr WindowKind kDilationKind{2, FilterLayout::kDilation, "rates",
                                   nullptr};

// The layouts of the input and the filter, for messages.
const char* InputLayout(const WindowKind& kind) {
  return kind.spatial == 3 ? "[N,D,H,W,C]" : "[N,H,W,C]";
}
const char* FilterLayoutName(const WindowKind& kind) {
  switch (kind.layout) {
    case FilterLayout::kConv:
      return kind.spatial == 3 ? "[KD,KH,KW,C,O]" : "[KH,KW,C,O]";
    case FilterLayout::kDepthwise:
      return "[KH,KW,C,M]";
    case FilterLayout::kDilation:
      return "[KH,KW,C]";
  }
  return "";
}

// The sizes of one window op, lifted to 3 spatial dims (a 2-D op has a
// leading spatial dim of 1 everywhere). Invariants (MakeGeometry): every
// product below fits in int64, k, stride, dilation >= 1.
struct WindowGeometry {
  const WindowKind* kind = nullptr;
  int64_t batch = 0;
  int64_t in_channels = 0;
  int64_t out_channels = 0;  // conv: O; depthwise: C * M; dilation: C
  int64_t multiplier = 1;    // depthwise M
  Dims in{1, 1, 1}, k{1, 1, 1}, out{1, 1, 1};
  Dims stride{1, 1, 1}, dilation{1, 1, 1}, pad{0, 0, 0};

  int64_t InPositions() const { return in[0] * in[1] * in[2]; }
  int64_t OutPositions() const { return out[0] * out[1] * out[2]; }
  int64_t Taps() const { return k[0] * k[1] * k[2]; }
  int64_t PatchCols() const { return Taps() * in_channels; }
  int64_t InImage() const { return InPositions() * in_channels; }
  int64_t OutImage() const { return OutPositions() * out_channels; }
  // P is the input itself: 1x1 filter, stride 1 and no padding (EXPLICIT
  // padding may pad a 1x1 filter).
  bool PointWise() const {
    return Taps() == 1 && stride == Dims{1, 1, 1} && pad == Dims{0, 0, 0} &&
           out == in;
  }
  Shape OutputShape() const { return Batched(out, out_channels); }

 private:
  Shape Batched(const Dims& spatial, int64_t channels) const {
    Shape s{batch};
    for (int i = kMaxSpatial - kind->spatial; i < kMaxSpatial; ++i) {
      s.push_back(spatial[i]);
    }
    s.push_back(channels);
    return s;
  }
};

// Reads the strides / dilations attr `name`: spatial + 2 entries, 1 in the
// batch and channel dims, in [1, 2^31) in the spatial dims.
absl::Status ReadWindowAttr(const KernelContext& ctx, const char* name,
                            int spatial, Dims* dims) {
  const std::vector<int64_t>& v = ctx.attrs().IntList(name);
  bool ok = static_cast<int>(v.size()) == spatial + 2 && v.front() == 1 &&
            v.back() == 1;
  for (int i = 1; ok && i <= spatial; ++i) {
    ok = v[i] >= 1 && v[i] < (int64_t{1} << 31);
  }
  if (!ok) {
    return ctx.InvalidArgument(
        name, " ", ShapeString(v), " must have ", spatial + 2,
        " entries, 1 in the batch and channel dims and in [1, 2^31) in the "
        "spatial dims");
  }
  for (int i = 0; i < spatial; ++i) {
    (*dims)[kMaxSpatial - spatial + i] = v[i + 1];
  }
  return absl::OkStatus();
}

// Checks that `shape` (possibly from an attr) has non-negative dims and that
// the product of its non-zero dims fits in kMaxElements, which bounds every
// partial product the kernels form.
absl::Status CheckDims(const KernelContext& ctx, absl::string_view what,
                       absl::Span<const int64_t> shape) {
  int64_t product = 1;
  bool ok = true;
  for (int64_t d : shape) {
    ok = ok && d >= 0 &&
         (d == 0 || !__builtin_mul_overflow(product, d, &product)) &&
         product <= kMaxElements;
  }
  if (ok) return absl::OkStatus();
  return ctx.InvalidArgument(what, " ", ShapeString(shape),
                             " has a negative dim or too many elements");
}

// The padding attrs: SAME, VALID, or EXPLICIT with explicit_paddings
// (before and after per dim of the layout).
struct PaddingSpec {
  bool same = false;
  bool is_explicit = false;
  std::vector<int64_t> explicit_paddings;
};

// Checks explicit_paddings (the kind has it): empty unless padding is
// EXPLICIT; then 2 * (spatial + 2) entries, 0 for batch and channels, in
// [0, 2^31) (TensorFlow's CheckValidPadding, bounded).
absl::Status CheckExplicitPaddings(const KernelContext& ctx,
                                   const WindowKind& kind,
                                   const PaddingSpec& p) {
  const std::vector<int64_t>& v = p.explicit_paddings;
  if (!p.is_explicit) {
    if (v.empty()) return absl::OkStatus();
    return ctx.InvalidArgument("explicit_paddings ", ShapeString(v),
                               " must be empty unless padding is EXPLICIT");
  }
  const int n = 2 * (kind.spatial + 2);
  bool ok = static_cast<int>(v.size()) == n && v[0] == 0 && v[1] == 0 &&
            v[n - 2] == 0 && v[n - 1] == 0;
  for (int i = 0; ok && i < n; ++i) {
    ok = v[i] >= 0 && v[i] < (int64_t{1} << 31);
  }
  if (ok) return absl::OkStatus();
  return ctx.InvalidArgument(
      "explicit_paddings ", ShapeString(v), " must have ", n,
      " entries (before, after per dim), 0 for the batch and channel dims "
      "and in [0, 2^31) for the spatial dims");
}

// Checks the padding attrs (data_format is WithChannelsFirst's: the kernels
// here see channels-last data).
absl::StatusOr<PaddingSpec> ReadPadding(const KernelContext& ctx,
                                        const WindowKind& kind) {
  const AttrMap& attrs = ctx.attrs();
  const std::string& padding = attrs.Get<std::string>("padding");
  PaddingSpec p;
  p.same = padding == "SAME";
  p.is_explicit = kind.explicit_padding && padding == "EXPLICIT";
  if (!p.same && !p.is_explicit && padding != "VALID") {
    return ctx.InvalidArgument("padding \"", padding, "\" must be \"SAME\"",
                               kind.explicit_padding
                                   ? ", \"VALID\" or \"EXPLICIT\""
                                   : " or \"VALID\"");
  }
  if (kind.explicit_padding) {
    p.explicit_paddings = attrs.IntList("explicit_paddings");
    RETURN_IF_ERROR(CheckExplicitPaddings(ctx, kind, p));
  }
  return p;
}

// Checks the ranks and dims of the input and the filter.
absl::Status CheckWindowShapes(const KernelContext& ctx, const WindowKind& kind,
                               absl::Span<const int64_t> input,
                               absl::string_view input_what,
                               absl::Span<const int64_t> filter,
                               absl::string_view filter_what) {
  const int spatial = kind.spatial;
  if (static_cast<int>(input.size()) != spatial + 2) {
    return ctx.InvalidArgument(input_what, " must have rank ", spatial + 2, " ",
                               InputLayout(kind), ", got shape ",
                               ShapeString(input));
  }
  const int filter_rank =
      kind.layout == FilterLayout::kDilation ? spatial + 1 : spatial + 2;
  if (static_cast<int>(filter.size()) != filter_rank) {
    return ctx.InvalidArgument(filter_what, " must have rank ", filter_rank,
                               " ", FilterLayoutName(kind), ", got shape ",
                               ShapeString(filter));
  }
  RETURN_IF_ERROR(CheckDims(ctx, input_what, input));
  RETURN_IF_ERROR(CheckDims(ctx, filter_what, filter));
  if (filter[spatial] != input[spatial + 1]) {
    return ctx.InvalidArgument(filter_what, " ", ShapeString(filter),
                               " expects ", filter[spatial],
                               " input channels but ", input_what, " ",
                               ShapeString(input), " has ", input[spatial + 1]);
  }
  return absl::OkStatus();
}

// Sets the filter size, padding and output size of spatial dim `d` (lifted
// to kMaxSpatial dims) of `g` from `input` / `filter` dim `i`, with g's
// stride and dilation already read.
absl::Status SetSpatialDim(const KernelContext& ctx, const PaddingSpec& padding,
                           int i, int d, absl::Span<const int64_t> input,
                           absl::string_view input_what,
                           absl::Span<const int64_t> filter,
                           absl::string_view filter_what, WindowGeometry* g) {
  g->in[d] = input[i + 1];
  g->k[d] = filter[i];
  if (g->k[d] < 1) {
    return ctx.InvalidArgument(filter_what, " ", ShapeString(filter),
                               " must have spatial dims >= 1");
  }
  int64_t span;  // (k - 1) * dilation: the effective filter size - 1
  if (__builtin_mul_overflow(g->k[d] - 1, g->dilation[d], &span) ||
      span >= (int64_t{1} << 62)) {
    return ctx.InvalidArgument(filter_what, " ", ShapeString(filter), " with ",
                               g->kind->dilation_attr, " ", g->dilation[d],
                               " is too large");
  }
  if (padding.same) {
    g->out[d] = g->in[d] / g->stride[d] + (g->in[d] % g->stride[d] != 0);
    const int64_t needed = std::max<int64_t>(
        (g->out[d] - 1) * g->stride[d] + span + 1 - g->in[d], 0);
    g->pad[d] = needed / 2;
    return absl::OkStatus();
  }
  // VALID, or EXPLICIT: the input padded by before + after (each < 2^31).
  int64_t padded = g->in[d];
  if (padding.is_explicit) {
    g->pad[d] = padding.explicit_paddings[2 * (i + 1)];
    padded += g->pad[d] + padding.explicit_paddings[2 * (i + 1) + 1];
  }
  if (span >= padded) {
    return ctx.InvalidArgument(
        "with padding ", padding.is_explicit ? "EXPLICIT" : "VALID",
        " the effective filter size ", span + 1, " (filter ",
        ShapeString(filter), ", ", g->kind->dilation_attr, " ", g->dilation[d],
        ") exceeds the ", padding.is_explicit ? "padded " : "", "size ", padded,
        " of spatial dim ", i, " of ", input_what, " ", ShapeString(input));
  }
  g->out[d] = (padded - span - 1) / g->stride[d] + 1;
  return absl::OkStatus();
}

// Validates the attrs and the input / filter shapes of a window op of
// `kind` and computes its geometry. `input_what` / `filter_what` name where
// the shapes come from ("input" or the attr "input_sizes", ...).
absl::StatusOr<WindowGeometry> MakeGeometry(const KernelContext& ctx,
                                            const WindowKind& kind,
                                            absl::Span<const int64_t> input,
                                            absl::string_view input_what,
                                            absl::Span<const int64_t> filter,
                                            absl::string_view filter_what) {
  ASSIGN_OR_RETURN(const PaddingSpec padding, ReadPadding(ctx, kind));
  WindowGeometry g;
  g.kind = &kind;
  const int spatial = kind.spatial;
  RETURN_IF_ERROR(ReadWindowAttr(ctx, "strides", spatial, &g.stride));
  RETURN_IF_ERROR(
      ReadWindowAttr(ctx, kind.dilation_attr, spatial, &g.dilation));
  RETURN_IF_ERROR(
      CheckWindowShapes(ctx, kind, input, input_what, filter, filter_what));
  g.batch = input[0];
  g.in_channels = input[spatial + 1];
  switch (kind.layout) {
    case FilterLayout::kConv:
      g.out_channels = filter[spatial + 1];
      break;
    case FilterLayout::kDepthwise:
      g.multiplier = filter[spatial + 1];
      g.out_channels = g.in_channels * g.multiplier;  // <= filter elements
      break;
    case FilterLayout::kDilation:
      g.out_channels = g.in_channels;
      break;
  }
  for (int i = 0; i < spatial; ++i) {
    RETURN_IF_ERROR(SetSpatialDim(ctx, padding, i, kMaxSpatial - spatial + i,
                                  input, input_what, filter, filter_what, &g));
  }
  if (NumElements({g.OutPositions(), g.PatchCols()}) < 0 ||
      NumElements(g.OutputShape()) < 0) {
    return ctx.InvalidArgument(input_what, " ", ShapeString(input),
                               " and filter ", ShapeString(filter),
                               " are too large");
  }
  return g;
}

// Checks that out_backprop (input `i`) has the output shape of `g`.
absl::Status CheckOutBackprop(const KernelContext& ctx, int i,
                              const WindowGeometry& g,
                              absl::Span<const int64_t> input,
                              absl::Span<const int64_t> filter) {
  const Tensor& dy = ctx.input(i);
  if (dy.shape() == g.OutputShape()) return absl::OkStatus();
  return ctx.InvalidArgument(
      ctx.op().input_names[i], " ", ShapeString(dy.shape()),
      " does not match the output shape ", ShapeString(g.OutputShape()),
      " of input ", ShapeString(input), " with filter ", ShapeString(filter),
      " (strides, padding and ", g.kind->dilation_attr, " as given)");
}

// Checks that the inputs are floating, all of one dtype.
absl::Status CheckFloatInputs(const KernelContext& ctx) {
  RETURN_IF_ERROR(ctx.RequireFloat(0));
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    RETURN_IF_ERROR(ctx.RequireSameDType(0, i));
  }
  return absl::OkStatus();
}

// Images per chunk: a chunk's patch matrix holds at most kPatchBudget
// elements, or one image.
int64_t ImagesPerChunk(const WindowGeometry& g) {
  const int64_t per_image = g.OutPositions() * g.PatchCols();
  const int64_t batch = std::max<int64_t>(g.batch, 1);
  if (per_image == 0) return batch;
  return std::clamp<int64_t>(kPatchBudget / per_image, 1, batch);
}

// Scratch for the patch matrix of one chunk (empty when PointWise).
absl::StatusOr<Tensor> AllocatePatches(const KernelContext& ctx,
                                       const WindowGeometry& g, DType dtype) {
  if (g.PointWise()) return Tensor();
  return Allocate(ctx, dtype,
                  {ImagesPerChunk(g) * g.OutPositions(), g.PatchCols()});
}

// Calls fn(row, tap, pos) for every output position `row` of one image
// (row-major over out) and every filter tap (row-major over k), in that
// order, where pos is the input position (row-major over in) the tap reads,
// or -1 where it falls in the padding.
template <typename Fn>
void ForEachTap(const WindowGeometry& g, Fn&& fn) {
  int64_t row = 0;
  for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
    for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
      for (int64_t o2 = 0; o2 < g.out[2]; ++o2, ++row) {
        int64_t tap = 0;
        for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
          const int64_t i0 = o0 * g.stride[0] - g.pad[0] + k0 * g.dilation[0];
          const bool in0 = i0 >= 0 && i0 < g.in[0];
          for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
            const int64_t i1 = o1 * g.stride[1] - g.pad[1] + k1 * g.dilation[1];
            const bool in1 = in0 && i1 >= 0 && i1 < g.in[1];
            for (int64_t k2 = 0; k2 < g.k[2]; ++k2, ++tap) {
              const int64_t i2 =
                  o2 * g.stride[2] - g.pad[2] + k2 * g.dilation[2];
              const bool inside = in1 && i2 >= 0 && i2 < g.in[2];
              fn(row, tap, inside ? (i0 * g.in[1] + i1) * g.in[2] + i2 : -1);
            }
          }
        }
      }
    }
  }
}

// cols [OutPositions, PatchCols] = the patches of one image.
template <typename T>
void Im2Col(const WindowGeometry& g, const T* image, T* cols) {
  const int64_t c = g.in_channels, width = g.PatchCols();
  ForEachTap(g, [&](int64_t row, int64_t tap, int64_t pos) {
    T* dst = cols + row * width + tap * c;
    if (pos < 0) {
      std::fill_n(dst, c, T(0));
    } else {
      std::copy_n(image + pos * c, c, dst);
    }
  });
}

// image += the patches in cols scattered back (the transpose of Im2Col).
template <typename T>
void Col2Im(const WindowGeometry& g, const T* cols, T* image) {
  const int64_t c = g.in_channels, width = g.PatchCols();
  ForEachTap(g, [&](int64_t row, int64_t tap, int64_t pos) {
    if (pos < 0) return;
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(image + pos * c, c) +=
        Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(
            cols + row * width + tap * c, c);
  });
}

// A [rows, cols] view of p with the given row and column strides, const
// or mutable as p is.
template <typename Ptr>
auto StridedView(Ptr p, int64_t rows, int64_t cols, int64_t row_stride,
                 int64_t col_stride) {
  using Element = std::remove_pointer_t<Ptr>;
  using T = std::remove_const_t<Element>;
  using Map = std::conditional_t<std::is_const_v<Element>, ConstStridedMap<T>,
                                 StridedMap<T>>;
  return Map(p, rows, cols, DynamicStride(row_stride, col_stride));
}

// Depthwise views of channel c: P[:, taps, c] of a patch matrix with `rows`
// rows, F[taps, c, :] of the filter and Y[:, c, :] of an output.
template <typename Ptr>
auto PatchChannel(const WindowGeometry& g, Ptr p, int64_t rows, int64_t c) {
  return StridedView(p + c, rows, g.Taps(), g.PatchCols(), g.in_channels);
}
template <typename Ptr>
auto FilterChannel(const WindowGeometry& g, Ptr f, int64_t c) {
  return StridedView(f + c * g.multiplier, g.Taps(), g.multiplier,
                     g.out_channels, 1);
}
template <typename Ptr>
auto OutputChannel(const WindowGeometry& g, Ptr y, int64_t rows, int64_t c) {
  return StridedView(y + c * g.multiplier, rows, g.multiplier, g.out_channels,
                     1);
}

// OK, or the current cancellation's error once it is requested: checked
// before each chunk of images (the convolutions' tiles), as Gemm checks
// before each of its blocks.
absl::Status CheckChunkCancelled() {
  Cancellation* cancel = CurrentCancellation();
  if (cancel == nullptr || !cancel->Poll()) return absl::OkStatus();
  return cancel->Check("convolution");
}

// Runs fn(b, nb, patches) for each chunk of nb images starting at image b,
// with patches the [nb * OutPositions, PatchCols] patch matrix of the chunk;
// stops at the first chunk whose fn fails, or once cancelled.
template <typename T, typename Fn>
absl::Status ForEachChunk(const WindowGeometry& g, const T* x, T* scratch,
                          Fn&& fn) {
  const int64_t chunk = ImagesPerChunk(g);
  const int64_t patch_image = g.OutPositions() * g.PatchCols();
  for (int64_t b = 0; b < g.batch; b += chunk) {
    RETURN_IF_ERROR(CheckChunkCancelled());
    const int64_t nb = std::min(chunk, g.batch - b);
    const T* patches = x + b * g.InImage();
    if (!g.PointWise()) {
      for (int64_t i = 0; i < nb; ++i) {
        Im2Col(g, x + (b + i) * g.InImage(), scratch + i * patch_image);
      }
      patches = scratch;
    }
    RETURN_IF_ERROR(fn(b, nb, patches));
  }
  return absl::OkStatus();
}

// y = conv(x, f).
template <typename T>
absl::Status ConvForward(const WindowGeometry& g, const T* x, const T* f, T* y,
                         T* scratch) {
  return ForEachChunk<T>(g, x, scratch, [&](int64_t b, int64_t nb, const T* p) {
    const int64_t rows = nb * g.OutPositions();
    T* out = y + b * g.OutImage();
    if (g.kind->layout == FilterLayout::kConv) {
      return Gemm<T>(false, false, rows, g.out_channels, g.PatchCols(), p,
                     g.PatchCols(), f, g.out_channels, out, g.out_channels);
    }
    for (int64_t c = 0; c < g.in_channels; ++c) {
      OutputChannel(g, out, rows, c).noalias() =
          PatchChannel(g, p, rows, c) * FilterChannel(g, f, c);
    }
    return absl::OkStatus();
  });
}

// dx = the gradient of conv(x, f) wrt x for output gradient dy.
template <typename T>
absl::Status ConvBackpropInput(const WindowGeometry& g, const T* f, const T* dy,
                               T* dx, T* scratch) {
  const int64_t chunk = ImagesPerChunk(g);
  for (int64_t b = 0; b < g.batch; b += chunk) {
    RETURN_IF_ERROR(CheckChunkCancelled());
    const int64_t nb = std::min(chunk, g.batch - b);
    const int64_t rows = nb * g.OutPositions();
    const T* grad = dy + b * g.OutImage();
    T* image = dx + b * g.InImage();
    // dP = dy * F^T, straight into dx when P is x.
    T* dp = g.PointWise() ? image : scratch;
    if (g.kind->layout == FilterLayout::kConv) {
      RETURN_IF_ERROR(Gemm<T>(false, true, rows, g.PatchCols(), g.out_channels,
                              grad, g.out_channels, f, g.out_channels, dp,
                              g.PatchCols()));
    } else {
      for (int64_t c = 0; c < g.in_channels; ++c) {
        PatchChannel(g, dp, rows, c).noalias() =
            OutputChannel(g, grad, rows, c) *
            FilterChannel(g, f, c).transpose();
      }
    }
    if (g.PointWise()) continue;
    std::fill_n(image, nb * g.InImage(), T(0));
    for (int64_t i = 0; i < nb; ++i) {
      Col2Im(g, dp + i * g.OutPositions() * g.PatchCols(),
             image + i * g.InImage());
    }
  }
  return absl::OkStatus();
}

// df = the gradient of conv(x, f) wrt f for output gradient dy.
template <typename T>
absl::Status ConvBackpropFilter(const WindowGeometry& g, const T* x,
                                const T* dy, T* df, T* scratch) {
  const int64_t filter_size = g.kind->layout == FilterLayout::kConv
                                  ? g.PatchCols() * g.out_channels
                                  : g.Taps() * g.out_channels;
  std::fill_n(df, filter_size, T(0));
  return ForEachChunk<T>(g, x, scratch, [&](int64_t b, int64_t nb, const T* p) {
    const int64_t rows = nb * g.OutPositions();
    const T* grad = dy + b * g.OutImage();
    if (g.kind->layout == FilterLayout::kConv) {
      return Gemm<T>(true, false, g.PatchCols(), g.out_channels, rows, p,
                     g.PatchCols(), grad, g.out_channels, df, g.out_channels,
                     T(1));
    }
    for (int64_t c = 0; c < g.in_channels; ++c) {
      FilterChannel(g, df, c).noalias() +=
          PatchChannel(g, p, rows, c).transpose() *
          OutputChannel(g, grad, rows, c);
    }
    return absl::OkStatus();
  });
}

// Conv2D and its backprops on float32 through oneDNN (dnnl_conv.h): the
// output, or an invalid Tensor when the op is not one of those or oneDNN
// declines (then the im2col + GEMM path below runs).
absl::StatusOr<Tensor> TryDnnl(const KernelContext& ctx,
                               const WindowGeometry& g, DnnlConvOp op,
                               const Tensor& a, const Tensor& b) {
  if (g.kind->spatial != 2 || g.kind->layout != FilterLayout::kConv) {
    return Tensor();
  }
  DnnlConvGeometry d;
  d.batch = g.batch;
  d.in_channels = g.in_channels;
  d.out_channels = g.out_channels;
  for (int i = 0; i < 2; ++i) {
    d.in[i] = g.in[i + 1];
    d.k[i] = g.k[i + 1];
    d.out[i] = g.out[i + 1];
    d.stride[i] = g.stride[i + 1];
    d.dilation[i] = g.dilation[i + 1];
    d.pad_before[i] = g.pad[i + 1];
  }
  return DnnlConv2D(ctx, op, d, a, b);
}

// Conv2D, Conv3D, DepthwiseConv2dNative: (input, filter) -> output.
absl::Status ConvKernel(KernelContext& ctx, const WindowKind& kind) {
  RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const Tensor& x = ctx.input(0);
  const Tensor& f = ctx.input(1);
  ASSIGN_OR_RETURN(WindowGeometry g, MakeGeometry(ctx, kind, x.shape(), "input",
                                                  f.shape(), "filter"));
  ASSIGN_OR_RETURN(Tensor fast, TryDnnl(ctx, g, DnnlConvOp::kForward, x, f));
  if (fast.valid()) {
    ctx.set_output(0, std::move(fast));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, x.dtype(), g.OutputShape()));
  ASSIGN_OR_RETURN(Tensor scratch, AllocatePatches(ctx, g, x.dtype()));
  absl::Status status;
  DispatchFloat(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    status =
        ConvForward<T>(g, x.data<T>(), f.data<T>(), y.mutable_data<T>(),
                       scratch.valid() ? scratch.mutable_data<T>() : nullptr);
  });
  RETURN_IF_ERROR(ctx.Annotate(status));
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// The *BackpropInput ops: (filter, out_backprop) -> the input gradient of
// shape attr input_sizes.
absl::Status BackpropInputKernel(KernelContext& ctx, const WindowKind& kind) {
  RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const Tensor& f = ctx.input(0);
  const Tensor& dy = ctx.input(1);
  const std::vector<int64_t>& sizes = ctx.attrs().IntList("input_sizes");
  ASSIGN_OR_RETURN(
      WindowGeometry g,
      MakeGeometry(ctx, kind, sizes, "input_sizes", f.shape(), "filter"));
  RETURN_IF_ERROR(CheckOutBackprop(ctx, 1, g, sizes, f.shape()));
  ASSIGN_OR_RETURN(Tensor fast,
                   TryDnnl(ctx, g, DnnlConvOp::kBackpropInput, f, dy));
  if (fast.valid()) {
    ctx.set_output(0, std::move(fast));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Tensor dx, Allocate(ctx, f.dtype(), sizes));
  ASSIGN_OR_RETURN(Tensor scratch, AllocatePatches(ctx, g, f.dtype()));
  absl::Status status;
  DispatchFloat(f.dtype(), [&](auto zero) {
    using T = decltype(zero);
    status = ConvBackpropInput<T>(
        g, f.data<T>(), dy.data<T>(), dx.mutable_data<T>(),
        scratch.valid() ? scratch.mutable_data<T>() : nullptr);
  });
  RETURN_IF_ERROR(ctx.Annotate(status));
  ctx.set_output(0, std::move(dx));
  return absl::OkStatus();
}

// The *BackpropFilter ops: (input, out_backprop) -> the filter gradient of
// shape attr filter_sizes.
absl::Status BackpropFilterKernel(KernelContext& ctx, const WindowKind& kind) {
  RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const Tensor& x = ctx.input(0);
  const Tensor& dy = ctx.input(1);
  const std::vector<int64_t>& sizes = ctx.attrs().IntList("filter_sizes");
  ASSIGN_OR_RETURN(WindowGeometry g, MakeGeometry(ctx, kind, x.shape(), "input",
                                                  sizes, "filter_sizes"));
  RETURN_IF_ERROR(CheckOutBackprop(ctx, 1, g, x.shape(), sizes));
  ASSIGN_OR_RETURN(Tensor fast,
                   TryDnnl(ctx, g, DnnlConvOp::kBackpropFilter, x, dy));
  if (fast.valid()) {
    ctx.set_output(0, std::move(fast));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Tensor df, Allocate(ctx, x.dtype(), sizes));
  ASSIGN_OR_RETURN(Tensor scratch, AllocatePatches(ctx, g, x.dtype()));
  absl::Status status;
  DispatchFloat(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    status = ConvBackpropFilter<T>(
        g, x.data<T>(), dy.data<T>(), df.mutable_data<T>(),
        scratch.valid() ? scratch.mutable_data<T>() : nullptr);
  });
  RETURN_IF_ERROR(ctx.Annotate(status));
  ctx.set_output(0, std::move(df));
  return absl::OkStatus();
}

// Calls fn(out_index, in_index, tap_index, max) for every element of the
// Dilation2D output, with the input element and tap of its maximum
// x + filter and the maximum itself. As in TensorFlow the maximum starts at
// lowest() and a tap wins only by exceeding it, so ties go to the first tap
// and NaN never wins; a window where no tap wins (all in the padding, or all
// NaN) has max = lowest(), a constant, and in_index = -1: no gradient.
template <typename T, typename Fn>
void ForEachDilationMax(const WindowGeometry& g, const T* x, const T* f,
                        Fn&& fn) {
  const int64_t c = g.in_channels, last = g.Taps() - 1;
  // An empty input has no maximum (and `c` may be huge: no scratch for it).
  if (g.batch * g.InImage() == 0) return;
  std::vector<T> best(c);
  std::vector<int64_t> best_pos(c), best_tap(c);
  for (int64_t b = 0; b < g.batch; ++b) {
    const T* image = x + b * g.InImage();
    ForEachTap(g, [&](int64_t row, int64_t tap, int64_t pos) {
      if (tap == 0) {
        std::fill(best.begin(), best.end(), std::numeric_limits<T>::lowest());
        std::fill(best_pos.begin(), best_pos.end(), -1);
      }
      if (pos >= 0) {
        for (int64_t j = 0; j < c; ++j) {
          const T v = image[pos * c + j] + f[tap * c + j];
          if (v > best[j]) {
            best[j] = v;
            best_pos[j] = pos;
            best_tap[j] = tap;
          }
        }
      }
      if (tap != last) return;
      const int64_t out = (b * g.OutPositions() + row) * c;
      for (int64_t j = 0; j < c; ++j) {
        fn(out + j,
           best_pos[j] < 0 ? -1 : (b * g.InPositions() + best_pos[j]) * c + j,
           best_tap[j] * c + j, best[j]);
      }
    });
  }
}

// The Dilation2D ops, all with inputs (input, filter, ...).
enum class DilationMode {
  kForward,             // y = max(x + f)
  kBackpropInput,       // (.., dy): dx, dy routed to the argmax input
  kBackpropFilter,      // (.., dy): df, dy routed to the argmax tap
  kBackpropInputGrad,   // (.., gx [x's shape]): gx read at the argmax input
  kBackpropFilterGrad,  // (.., gf [f's shape]): gf read at the argmax tap
};

absl::Status DilationKernel(KernelContext& ctx, DilationMode mode) {
  RETURN_IF_ERROR(CheckFloatInputs(ctx));
  const Tensor& x = ctx.input(0);
  const Tensor& f = ctx.input(1);
  ASSIGN_OR_RETURN(WindowGeometry g,
                   MakeGeometry(ctx, kDilationKind, x.shape(), "input",
                                f.shape(), "filter"));
  Shape out_shape = g.OutputShape();
  switch (mode) {
    case DilationMode::kForward:
      break;
    case DilationMode::kBackpropInput:
    case DilationMode::kBackpropFilter:
      RETURN_IF_ERROR(CheckOutBackprop(ctx, 2, g, x.shape(), f.shape()));
      out_shape = mode == DilationMode::kBackpropInput ? x.shape() : f.shape();
      break;
    case DilationMode::kBackpropInputGrad:
    case DilationMode::kBackpropFilterGrad: {
      const Tensor& like = mode == DilationMode::kBackpropInputGrad ? x : f;
      if (ctx.input(2).shape() != like.shape()) {
        return ctx.InvalidArgument(
            ctx.op().input_names[2], " ", ShapeString(ctx.input(2).shape()),
            " must have the shape ", ShapeString(like.shape()), " of ",
            mode == DilationMode::kBackpropInputGrad ? "input" : "filter");
      }
      break;
    }
  }
  // Zero-filled, as the backprop modes' scatter-adds need.
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, x.dtype(), out_shape));
  DispatchFloat(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* out = y.mutable_data<T>();
    const T* third =
        mode == DilationMode::kForward ? nullptr : ctx.input(2).data<T>();
    ForEachDilationMax<T>(g, x.data<T>(), f.data<T>(),
                          [&](int64_t o, int64_t in, int64_t tap, T best) {
                            switch (mode) {
                              case DilationMode::kForward:
                                out[o] = best;
                                break;
                              case DilationMode::kBackpropInput:
                                if (in >= 0) out[in] += third[o];
                                break;
                              case DilationMode::kBackpropFilter:
                                if (in >= 0) out[tap] += third[o];
                                break;
                              case DilationMode::kBackpropInputGrad:
                                out[o] = in >= 0 ? third[in] : T(0);
                                break;
                              case DilationMode::kBackpropFilterGrad:
                                out[o] = in >= 0 ? third[tap] : T(0);
                                break;
                            }
                          });
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

std::vector<int64_t> Sizes(const Shape& s) {
  return std::vector<int64_t>(s.begin(), s.end());
}

// The attrs of the op whose backward runs, for another op of its family:
// all but input_sizes / filter_sizes, then `extra`.
AttrMap FamilyAttrs(
    const GradContext& g,
    std::initializer_list<std::pair<std::string, AttrValue>> extra = {}) {
  AttrMap attrs;
  for (const auto& [name, value] : g.attrs()) {
    if (name != "input_sizes" && name != "filter_sizes") attrs.Set(name, value);
  }
  for (const auto& [name, value] : extra) attrs.Set(name, value);
  return attrs;
}

// An op of `kind` with its window attrs: strides (required), padding
// (required), dilations / rates, data_format.
Op WindowOp(Op op, const WindowKind& kind, std::vector<std::string> inputs,
            const char* output) {
  op.Inputs(std::move(inputs))
      .Outputs({output})
      .Attr("strides", AttrType::kIntList)
      .Attr("padding", AttrType::kString);
  if (kind.layout == FilterLayout::kDilation) {
    op.Attr(kind.dilation_attr, AttrType::kIntList);  // required, as in TF
  } else {
    op.Attr(kind.dilation_attr, std::vector<int64_t>(kind.spatial + 2, 1));
  }
  if (kind.data_format != nullptr) {
    op.Attr("data_format", std::string(kind.data_format));
  }
  if (kind.explicit_padding) {
    op.Attr("explicit_paddings", std::vector<int64_t>{});
  }
  return op;
}

// The names of one convolution family (each op's backward runs the other
// two).
struct ConvNames {
  const char* conv;
  const char* backprop_input;
  const char* backprop_filter;
  const char* what;  // for summaries
};
constexpr ConvNames kConv2DNames{
    "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter",
    "2-D convolution of input [N,H,W,C] with filter [KH,KW,C,O]"};
constexpr ConvNames kDepthwiseNames{
    "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
    "DepthwiseConv2dNativeBackpropFilter",
    "depthwise 2-D convolution of input [N,H,W,C] with filter [KH,KW,C,M] "
    "into C*M channels"};
constexpr ConvNames kConv3DNames{
    "Conv3D", "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2",
    "3-D convolution of input [N,D,H,W,C] with filter [KD,KH,KW,C,O]"};

// One convolution family: conv(input, filter), its BackpropInput(filter,
// out_backprop) and BackpropFilter(input, out_backprop). All three are
// bilinear, so each backward runs the other two.
Op Conv(Op op, const WindowKind& kind, const ConvNames& n) {
  const WindowKind* k = &kind;
  return std::move(
      WindowOp(std::move(op), kind, {"input", "filter"}, "output")
          .Forward(WithChannelsFirst(
              {kind.spatial, {0}, /*output_is_activation=*/true},
              [k](KernelContext& ctx) { return ConvKernel(ctx, *k); }))
          // dinput = BackpropInput(filter, dy), dfilter =
          // BackpropFilter(input, dy)
          .Backward([n](GradContext& g) {
            Tensor dy = g.Grad(0);
            if (g.NeedsGrad(0)) {
              g.SetGrad(0, g.Op(n.backprop_input, {g.Input(1), dy},
                                FamilyAttrs(g, {{"input_sizes",
                                                 Sizes(g.InputShape(0))}})));
            }
            if (g.NeedsGrad(1)) {
              g.SetGrad(1, g.Op(n.backprop_filter, {g.Input(0), dy},
                                FamilyAttrs(g, {{"filter_sizes",
                                                 Sizes(g.InputShape(1))}})));
            }
          })
          .SavesInputs({0, 1})
          .Summary(absl::StrCat(
              n.what, " (", kind.data_format, "; or ",
              ChannelsFirstName(kind.spatial),
              ", run on transposed copies), padding SAME or VALID",
              kind.explicit_padding ? " or EXPLICIT (explicit_paddings)"
                                    : "")));
}

Op ConvBackpropInput(Op op, const WindowKind& kind, const ConvNames& n) {
  const WindowKind* k = &kind;
  return std::move(
      WindowOp(std::move(op), kind, {"filter", "out_backprop"}, "output")
          .Attr("input_sizes", AttrType::kIntList)
          .Forward(WithChannelsFirst(
              {kind.spatial, {1}, /*output_is_activation=*/true},
              [k](KernelContext& ctx) { return BackpropInputKernel(ctx, *k); }))
          // z = BackpropInput(f, dy) is linear in each:
          // df = BackpropFilter(dz, dy), d(dy) = conv(dz, f)
          .Backward([n](GradContext& g) {
            Tensor dz = g.Grad(0);
            if (g.NeedsGrad(0)) {
              g.SetGrad(0, g.Op(n.backprop_filter, {dz, g.Input(1)},
                                FamilyAttrs(g, {{"filter_sizes",
                                                 Sizes(g.InputShape(0))}})));
            }
            if (g.NeedsGrad(1)) {
              g.SetGrad(1, g.Op(n.conv, {dz, g.Input(0)}, FamilyAttrs(g)));
            }
          })
          .SavesInputs({0, 1})
          .Summary(absl::StrCat(
              "the gradient of ", n.conv,
              " wrt its input; TensorFlow's input_sizes tensor is an "
              "attr")));
}

Op ConvBackpropFilter(Op op, const WindowKind& kind, const ConvNames& n) {
  const WindowKind* k = &kind;
  return std::move(
      WindowOp(std::move(op), kind, {"input", "out_backprop"}, "output")
          .Attr("filter_sizes", AttrType::kIntList)
          .Forward(WithChannelsFirst(
              {kind.spatial, {0, 1}, /*output_is_activation=*/false},
              [k](KernelContext& ctx) {
                return BackpropFilterKernel(ctx, *k);
              }))
          // w = BackpropFilter(x, dy) is linear in each:
          // dx = BackpropInput(dw, dy), d(dy) = conv(x, dw)
          .Backward([n](GradContext& g) {
            Tensor dw = g.Grad(0);
            if (g.NeedsGrad(0)) {
              g.SetGrad(0, g.Op(n.backprop_input, {dw, g.Input(1)},
                                FamilyAttrs(g, {{"input_sizes",
                                                 Sizes(g.InputShape(0))}})));
            }
            if (g.NeedsGrad(1)) {
              g.SetGrad(1, g.Op(n.conv, {g.Input(0), dw}, FamilyAttrs(g)));
            }
          })
          .SavesInputs({0, 1})
          .Summary(absl::StrCat(
              "the gradient of ", n.conv,
              " wrt its filter; TensorFlow's filter_sizes tensor is an "
              "attr")));
}

Op DilationOp(Op op, std::vector<std::string> inputs, const char* output,
              DilationMode mode) {
  return std::move(
      WindowOp(std::move(op), kDilationKind, std::move(inputs), output)
          .Forward([mode](KernelContext& ctx) {
            return DilationKernel(ctx, mode);
          }));
}

}  // namespace

void RegisterConvOps(OpRegistry& r) {
  r.Add(Conv(Op("Conv2D"), kConv2DKind, kConv2DNames));
  r.Add(
      ConvBackpropInput(Op("Conv2DBackpropInput"), kConv2DKind, kConv2DNames));
  r.Add(ConvBackpropFilter(Op("Conv2DBackpropFilter"), kConv2DKind,
                           kConv2DNames));
  r.Add(Conv(Op("DepthwiseConv2dNative"), kDepthwiseKind, kDepthwiseNames));
  r.Add(ConvBackpropInput(Op("DepthwiseConv2dNativeBackpropInput"),
                          kDepthwiseKind, kDepthwiseNames));
  r.Add(ConvBackpropFilter(Op("DepthwiseConv2dNativeBackpropFilter"),
                           kDepthwiseKind, kDepthwiseNames));
  r.Add(Conv(Op("Conv3D"), kConv3DKind, kConv3DNames));
  r.Add(ConvBackpropInput(Op("Conv3DBackpropInputV2"), kConv3DKind,
                          kConv3DNames));
  r.Add(ConvBackpropFilter(Op("Conv3DBackpropFilterV2"), kConv3DKind,
                           kConv3DNames));

  r.Add(DilationOp(Op("Dilation2D"), {"input", "filter"}, "output",
                   DilationMode::kForward)
            // dinput = Dilation2DBackpropInput(x, f, dy),
            // dfilter = Dilation2DBackpropFilter(x, f, dy)
            .Backward([](GradContext& g) {
              Tensor x = g.Input(0), f = g.Input(1), dy = g.Grad(0);
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.Op("Dilation2DBackpropInput", {x, f, dy},
                                  FamilyAttrs(g)));
              }
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, g.Op("Dilation2DBackpropFilter", {x, f, dy},
                                  FamilyAttrs(g)));
              }
            })
            .SavesInputs({0, 1})
            .Summary("grayscale morphological dilation: max over the window "
                     "of input [N,H,W,C] + filter [KH,KW,C]; rates dilate "
                     "the window"));
  r.Add(DilationOp(Op("Dilation2DBackpropInput"),
                   {"input", "filter", "out_backprop"}, "in_backprop",
                   DilationMode::kBackpropInput)
            // z = scatter of dy to the argmax inputs: d(dy) = dz gathered at
            // the argmax inputs; input, filter: zero a.e.
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(2)) {
                g.SetGrad(2, g.Op("Dilation2DBackpropInputGrad",
                                  {g.Input(0), g.Input(1), g.Grad(0)},
                                  FamilyAttrs(g)));
              }
            })
            .SavesInputs({0, 1})
            .NonDifferentiableInputs({0, 1})  // zero a.e.
            .Summary("the gradient of Dilation2D wrt its input: "
                     "out_backprop routed to the maximizing input elements"));
  r.Add(DilationOp(Op("Dilation2DBackpropFilter"),
                   {"input", "filter", "out_backprop"}, "filter_backprop",
                   DilationMode::kBackpropFilter)
            // z = scatter of dy to the argmax taps: d(dy) = dz gathered at
            // the argmax taps; input, filter: zero a.e.
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(2)) {
                g.SetGrad(2, g.Op("Dilation2DBackpropFilterGrad",
                                  {g.Input(0), g.Input(1), g.Grad(0)},
                                  FamilyAttrs(g)));
              }
            })
            .SavesInputs({0, 1})
            .NonDifferentiableInputs({0, 1})  // zero a.e.
            .Summary("the gradient of Dilation2D wrt its filter: "
                     "out_backprop summed into the maximizing taps"));
  r.Add(DilationOp(Op("Dilation2DBackpropInputGrad"),
                   {"input", "filter", "grad"}, "output",
                   DilationMode::kBackpropInputGrad)
            // z = grad gathered at the argmax inputs (the transpose of
            // Dilation2DBackpropInput): d(grad) =
            // Dilation2DBackpropInput(x, f, dz); input, filter: zero a.e.
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(2)) {
                g.SetGrad(2, g.Op("Dilation2DBackpropInput",
                                  {g.Input(0), g.Input(1), g.Grad(0)},
                                  FamilyAttrs(g)));
              }
            })
            .SavesInputs({0, 1})
            .NonDifferentiableInputs({0, 1})  // zero a.e.
            .Summary("gradtape-only (like MaxPoolGradGrad): grad [N,H,W,C] "
                     "read at each output's maximizing input element; the "
                     "gradient of Dilation2DBackpropInput wrt out_backprop"));
  r.Add(DilationOp(Op("Dilation2DBackpropFilterGrad"),
                   {"input", "filter", "grad"}, "output",
                   DilationMode::kBackpropFilterGrad)
            // z = grad gathered at the argmax taps (the transpose of
            // Dilation2DBackpropFilter): d(grad) =
            // Dilation2DBackpropFilter(x, f, dz); input, filter: zero a.e.
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(2)) {
                g.SetGrad(2, g.Op("Dilation2DBackpropFilter",
                                  {g.Input(0), g.Input(1), g.Grad(0)},
                                  FamilyAttrs(g)));
              }
            })
            .SavesInputs({0, 1})
            .NonDifferentiableInputs({0, 1})  // zero a.e.
            .Summary("gradtape-only (like MaxPoolGradGrad): grad [KH,KW,C] "
                     "read at each output's maximizing tap; the gradient of "
                     "Dilation2DBackpropFilter wrt out_backprop"));
}

}  // namespace gradtape
