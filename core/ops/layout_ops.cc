// Layout ops: ExpandDims, Squeeze, Tile, Fill, Range, Reverse, ReverseV2,
// Pad, PadV2, MirrorPad and MirrorPadGrad. As in TensorFlow, the static
// int parameters that TF takes as tensors (dim, multiples, dims, axis,
// paddings, Range's start / limit / delta) are input tensors here (int32 or
// int64, non-differentiable), and Squeeze's squeeze_dims and MirrorPad's
// mode are attrs. Every output size is checked (int64 overflow, then the
// caps and the memory limit through Allocate) before memory is touched.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {
namespace {

// A constant int vector of `dtype` (int32 or int64) on no tape.
Tensor IndexVector(DType dtype, const Shape& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  if (dtype == DType::kInt32) {
    return Tensor::FromVector<int32_t>(
        {n}, std::vector<int32_t>(values.begin(), values.end()));
  }
  return Tensor::FromVector<int64_t>(
      {n}, std::vector<int64_t>(values.begin(), values.end()));
}

// Calls fn(out_index, in_offset) for every element of `shape` in row-major
// order, where in_offset = sum over dims d of map(d, index_d): a per-dim
// index map (tiling, mirroring, reversing) computed on the fly, so no table
// the size of a dim is built.
template <typename Map, typename Fn>
void ForEachMapped(absl::Span<const int64_t> shape, Map&& map, Fn&& fn) {
  const int64_t n = NumElements(shape);
  if (n <= 0) return;
  const int rank = static_cast<int>(shape.size());
  if (rank == 0) {
    fn(0, 0);
    return;
  }
  Shape index(rank, 0);
  const int64_t inner = shape[rank - 1];
  for (int64_t out = 0; out < n;) {
    int64_t base = 0;
    for (int d = 0; d + 1 < rank; ++d) base += map(d, index[d]);
    for (int64_t k = 0; k < inner; ++k, ++out) fn(out, base + map(rank - 1, k));
    for (int d = rank - 2; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

// ExpandDims: a 1 inserted at `dim` in [-rank - 1, rank].
absl::Status ExpandDimsKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  const Tensor& x = ctx.input(0);
  const Tensor& dim = ctx.input(1);
  if (dim.num_elements() != 1) {
    return ctx.InvalidArgument("dim must hold a single value, got shape ",
                               ShapeString(dim.shape()));
  }
  const int64_t rank = x.rank();
  int64_t axis = IndexAt(dim, 0);
  if (axis < -rank - 1 || axis > rank) {
    return ctx.InvalidArgument("dim ", axis, " is out of range [", -rank - 1,
                               ", ", rank, "] for input ", x.DebugString());
  }
  if (rank + 1 > GetTensorLimits().max_rank) {
    return ctx.InvalidArgument("input ", x.DebugString(),
                               " has the largest rank the server allows (",
                               rank, "): no dim can be added");
  }
  if (axis < 0) axis += rank + 1;
  Shape shape = x.shape();
  shape.insert(shape.begin() + axis, 1);
  ctx.set_output(0, x.Reshaped(shape));
  return absl::OkStatus();
}

// Squeeze: removes the size-1 dims listed in squeeze_dims (all of them if
// empty); listing a dim that is not 1 is an error.
absl::Status SqueezeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::vector<int64_t>& dims = ctx.attrs().IntList("squeeze_dims");
  const int64_t rank = x.rank();
  std::vector<bool> squeeze(rank, dims.empty());
  for (int64_t d : dims) {
    if (d < -rank || d >= rank) {
      return ctx.InvalidArgument("squeeze_dims entry ", d, " is out of range [",
                                 -rank, ", ", rank, ") for input ",
                                 x.DebugString());
    }
    const int64_t a = d < 0 ? d + rank : d;
    if (x.dim(a) != 1) {
      return ctx.InvalidArgument("cannot squeeze dim ", a, " of input ",
                                 x.DebugString(),
                                 ": expected a dimension of 1, got ", x.dim(a));
    }
    squeeze[a] = true;
  }
  Shape shape;
  for (int64_t i = 0; i < rank; ++i) {
    if (!squeeze[i] || x.dim(i) != 1) shape.push_back(x.dim(i));
  }
  ctx.set_output(0, x.Reshaped(shape));
  return absl::OkStatus();
}

absl::Status TileKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  const Tensor& x = ctx.input(0);
  const Tensor& m = ctx.input(1);
  if (m.rank() != 1 || m.dim(0) != x.rank()) {
    return ctx.InvalidArgument("multiples must be a vector of length ",
                               x.rank(), " (the rank of input ",
                               x.DebugString(), "), got shape ",
                               ShapeString(m.shape()));
  }
  Shape shape(x.rank());
  for (int i = 0; i < x.rank(); ++i) {
    const int64_t k = IndexAt(m, i);
    if (k < 0) {
      return ctx.InvalidArgument("multiples[", i, "] is ", k,
                                 " (must be >= 0)");
    }
    if (__builtin_mul_overflow(x.dim(i), k, &shape[i])) {
      return ctx.InvalidArgument("dim ", i, " of input ", x.DebugString(),
                                 " times multiples[", i, "] = ", k,
                                 " overflows int64");
    }
  }
  ASSIGN_OR_RETURN(Tensor y, AllocateOutput(ctx, x.dtype(), shape));
  const Shape strides = RowMajorStrides(x.shape());
  DispatchAny(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    // A non-empty output has every input dim > 0.
    ForEachMapped(
        shape, [&](int d, int64_t o) { return (o % x.dim(d)) * strides[d]; },
        [&](int64_t o, int64_t i) { py[o] = px[i]; });
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// dx = Sum(Reshape(dy, [m0, d0, m1, d1, ...]), axes 0, 2, 4, ...): TF's
// _TileGrad. The multiples come from the shapes (an empty input dim takes
// multiple 1: dy has no element there), so nothing is saved.
void TileBackward(GradContext& g) {
  const Shape& in = g.InputShape(0);
  const Shape& out = g.OutputShape(0);
  Shape split;
  std::vector<int64_t> axes;
  for (size_t i = 0; i < in.size(); ++i) {
    axes.push_back(static_cast<int64_t>(split.size()));
    split.push_back(in[i] == 0 ? 1 : out[i] / in[i]);
    split.push_back(in[i]);
  }
  Tensor dy = g.Reshape(g.Grad(0), split);
  if (axes.empty()) {  // a scalar: Tile is the identity
    g.SetGrad(0, dy);
    return;
  }
  g.SetGrad(0, g.Op("Sum", {dy}, {{"axis", std::move(axes)}}));
}

absl::Status FillKernel(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Shape shape, ShapeInput(ctx, 0));
  const Tensor& value = ctx.input(1);
  if (value.rank() != 0) {
    return ctx.InvalidArgument("value must be a scalar, got ",
                               value.DebugString());
  }
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, value.dtype(), shape));
  DispatchAny(value.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* py = y.mutable_data<T>();
    std::fill(py, py + y.num_elements(), value.data<T>()[0]);
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// TF's size rule: ceil(|limit - start| / |delta|), after its checks (delta
// non-zero, limit on delta's side of start, a size within int64).
template <typename T>
absl::StatusOr<int64_t> RangeSize(const KernelContext& ctx, T start, T limit,
                                  T delta) {
  if (delta == T(0)) return ctx.InvalidArgument("delta must be non-zero");
  if (delta > T(0) && start > limit) {
    return ctx.InvalidArgument("start ", start, " > limit ", limit,
                               ": start <= limit is required when delta > 0");
  }
  if (delta < T(0) && start < limit) {
    return ctx.InvalidArgument("start ", start, " < limit ", limit,
                               ": start >= limit is required when delta < 0");
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if constexpr (std::is_integral_v<T>) {
    const __int128 span = static_cast<__int128>(limit) - start;
    const __int128 step = static_cast<__int128>(delta);
    const __int128 a = span < 0 ? -span : span, b = step < 0 ? -step : step;
    const __int128 size = (a + b - 1) / b;
    if (size > kMax) {
      return ctx.InvalidArgument("the range has more than ", kMax, " elements");
    }
    return static_cast<int64_t>(size);
  } else {
    const T size = std::ceil(std::abs((limit - start) / delta));
    // Also refuses NaN and infinity.
    if (!(static_cast<double>(size) < 9.2e18)) {
      return ctx.InvalidArgument("(limit - start) / delta is ", size,
                                 " for start ", start, ", limit ", limit,
                                 ", delta ", delta, ": not a finite size");
    }
    return static_cast<int64_t>(size);
  }
}

absl::Status RangeKernel(KernelContext& ctx) {
  const DType dtype = ctx.input(0).dtype();
  if (dtype != DType::kInt32 && dtype != DType::kInt64 &&
      dtype != DType::kFloat32 && dtype != DType::kFloat64) {
    return ctx.InvalidArgument(
        "start must be int32, int64, float32 or "
        "float64, got ",
        DTypeName(dtype));
  }
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 1));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 2));
  const DType tidx = ctx.attrs().Type("Tidx");
  if (tidx != DType::kInvalid && tidx != dtype) {
    return ctx.InvalidArgument("Tidx is ", DTypeName(tidx),
                               " but start, limit and delta are ",
                               DTypeName(dtype));
  }
  const char* names[] = {"start", "limit", "delta"};
  for (int i = 0; i < 3; ++i) {
    if (ctx.input(i).rank() != 0) {
      return ctx.InvalidArgument(names[i], " must be a scalar, got ",
                                 ctx.input(i).DebugString());
    }
  }
  absl::Status status;
  DispatchNumeric(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T start = ctx.input(0).data<T>()[0];
    const T delta = ctx.input(2).data<T>()[0];
    absl::StatusOr<int64_t> size =
        RangeSize<T>(ctx, start, ctx.input(1).data<T>()[0], delta);
    absl::StatusOr<Tensor> y =
        size.ok() ? Allocate(ctx, dtype, {*size}) : size.status();
    if (!y.ok()) {
      status = y.status();
      return;
    }
    T* py = y->mutable_data<T>();
    for (int64_t i = 0; i < *size; ++i) {
      if constexpr (std::is_integral_v<T>) {  // exact, with no overflow
        py[i] = static_cast<T>(static_cast<__int128>(start) +
                               static_cast<__int128>(i) * delta);
      } else {
        py[i] = start + static_cast<T>(i) * delta;
      }
    }
    ctx.set_output(0, *std::move(y));
  });
  return status;
}

// Out[o] = x[o with the dims in `reverse` reversed].
absl::Status ReverseDims(KernelContext& ctx, const std::vector<bool>& reverse) {
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, x.dtype(), x.shape()));
  const Shape strides = RowMajorStrides(x.shape());
  DispatchAny(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    ForEachMapped(
        x.shape(),
        [&](int d, int64_t o) {
          return (reverse[d] ? x.dim(d) - 1 - o : o) * strides[d];
        },
        [&](int64_t o, int64_t i) { py[o] = px[i]; });
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

absl::Status ReverseKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& dims = ctx.input(1);
  if (dims.dtype() != DType::kBool) {
    return ctx.InvalidArgument("dims must be bool, got ", dims.DebugString());
  }
  if (dims.rank() != 1 || dims.dim(0) != x.rank()) {
    return ctx.InvalidArgument("dims must be a bool vector of length ",
                               x.rank(), " (the rank of tensor ",
                               x.DebugString(), "), got shape ",
                               ShapeString(dims.shape()));
  }
  std::vector<bool> reverse(x.rank());
  for (int i = 0; i < x.rank(); ++i) reverse[i] = dims.data<bool>()[i];
  return ReverseDims(ctx, reverse);
}

absl::Status ReverseV2Kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  const Tensor& x = ctx.input(0);
  const Tensor& axis = ctx.input(1);
  if (axis.rank() != 1) {
    return ctx.InvalidArgument("axis must be a vector, got shape ",
                               ShapeString(axis.shape()));
  }
  const int64_t rank = x.rank();
  std::vector<bool> reverse(rank, false);
  for (int64_t i = 0; i < axis.dim(0); ++i) {
    const int64_t a = IndexAt(axis, i);
    if (a < -rank || a >= rank) {
      return ctx.InvalidArgument("axis[", i, "] is ", a, ", out of range [",
                                 -rank, ", ", rank, ") for tensor ",
                                 x.DebugString());
    }
    const int64_t d = a < 0 ? a + rank : a;
    if (reverse[d]) {
      return ctx.InvalidArgument("axis ", d, " is given more than once");
    }
    reverse[d] = true;
  }
  return ReverseDims(ctx, reverse);
}

using Paddings = std::vector<std::array<int64_t, 2>>;

// Input 1 as TF's paddings: an int32 / int64 matrix [rank, 2] (rank of
// input 0) of values >= 0.
absl::StatusOr<Paddings> ReadPaddings(const KernelContext& ctx) {
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  const Tensor& x = ctx.input(0);
  const Tensor& p = ctx.input(1);
  if (p.rank() != 2 || p.dim(0) != x.rank() || p.dim(1) != 2) {
    return ctx.InvalidArgument("paddings must be a matrix of shape [", x.rank(),
                               ",2] for input ", x.DebugString(),
                               ", got shape ", ShapeString(p.shape()));
  }
  Paddings pads(x.rank());
  for (int i = 0; i < x.rank(); ++i) {
    pads[i] = {IndexAt(p, 2 * i), IndexAt(p, 2 * i + 1)};
    if (pads[i][0] < 0 || pads[i][1] < 0) {
      return ctx.InvalidArgument("paddings[", i, "] is [", pads[i][0], ", ",
                                 pads[i][1], "]: paddings must be >= 0");
    }
  }
  return pads;
}

// The shape of input 0 padded by `pads`; INVALID_ARGUMENT on int64 overflow.
absl::StatusOr<Shape> PaddedShape(const KernelContext& ctx,
                                  const Paddings& pads) {
  const Tensor& x = ctx.input(0);
  Shape shape(x.rank());
  for (int i = 0; i < x.rank(); ++i) {
    if (__builtin_add_overflow(x.dim(i), pads[i][0], &shape[i]) ||
        __builtin_add_overflow(shape[i], pads[i][1], &shape[i])) {
      return ctx.InvalidArgument("dim ", i, " of input ", x.DebugString(),
                                 " padded by [", pads[i][0], ", ", pads[i][1],
                                 "] overflows int64");
    }
  }
  return shape;
}

// Pad and PadV2: input 0 inside a border of constant_values (input 2, a
// scalar of input 0's dtype) or zeros.
absl::Status PadKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const bool v2 = ctx.num_inputs() == 3;
  if (v2) {
    RETURN_IF_ERROR(ctx.RequireSameDType(2, 0));
    if (ctx.input(2).rank() != 0) {
      return ctx.InvalidArgument("constant_values must be a scalar, got ",
                                 ctx.input(2).DebugString());
    }
  }
  ASSIGN_OR_RETURN(Paddings pads, ReadPaddings(ctx));
  ASSIGN_OR_RETURN(Shape shape, PaddedShape(ctx, pads));
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, x.dtype(), shape));
  const Shape out_strides = RowMajorStrides(shape);
  int64_t base = 0;
  for (int i = 0; i < x.rank(); ++i) base += pads[i][0] * out_strides[i];
  DispatchAny(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    if (v2) {
      std::fill(py, py + y.num_elements(), ctx.input(2).data<T>()[0]);
    }
    ForEachStrided(
        x.shape(), out_strides, out_strides,
        [&](int64_t i, int64_t o, int64_t) { py[base + o] = px[i]; });
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// dx = Slice(dy, paddings[:, 0], shape(x)); PadV2's constant_values gets no
// gradient, as in TF's _PadGrad.
void PadBackward(GradContext& g) {
  const Tensor p = g.Input(1);
  if (!g.ok()) return;
  const Shape& in = g.InputShape(0);
  Shape begin(in.size());
  for (size_t i = 0; i < in.size(); ++i) begin[i] = IndexAt(p, 2 * i);
  g.SetGrad(0, g.Op("Slice", {g.Grad(0), IndexVector(DType::kInt64, begin),
                              IndexVector(DType::kInt64, in)}));
}

// MirrorPad's mode: the offset of the mirror (REFLECT 1: the edge is not
// repeated; SYMMETRIC 0: it is).
absl::StatusOr<int64_t> MirrorOffset(const KernelContext& ctx) {
  const std::string& mode = ctx.attrs().Get<std::string>("mode");
  if (mode == "REFLECT") return 1;
  if (mode == "SYMMETRIC") return 0;
  return ctx.InvalidArgument("mode must be REFLECT or SYMMETRIC, got '", mode,
                             "'");
}

// Checks that `pads` fit a dim of size `dims[i]` (the unpadded one) for the
// mirror offset: before, after <= dim - offset. `what` names the dims.
absl::Status CheckMirrorPads(const KernelContext& ctx, const Paddings& pads,
                             absl::Span<const int64_t> dims, int64_t offset,
                             absl::string_view what) {
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t most = dims[i] - offset;
    if (pads[i][0] > most || pads[i][1] > most) {
      return ctx.InvalidArgument(
          "paddings[", i, "] is [", pads[i][0], ", ", pads[i][1], "], but ",
          offset ? "REFLECT" : "SYMMETRIC", " mode allows at most ", most,
          " for dim ", i, " of size ", dims[i], " (", what, ")");
    }
  }
  return absl::OkStatus();
}

// Calls fn(padded_index, small_offset) for every element of `padded`, the
// mirror padding of a row-major tensor of shape `small` by `pads`.
template <typename Fn>
void ForEachMirrored(absl::Span<const int64_t> padded,
                     absl::Span<const int64_t> small, const Paddings& pads,
                     int64_t offset, Fn&& fn) {
  const Shape strides = RowMajorStrides(small);
  ForEachMapped(
      padded,
      [&](int d, int64_t o) {
        const int64_t n = small[d];
        int64_t i = o - pads[d][0];
        if (i < 0) {
          i = -i - 1 + offset;
        } else if (i >= n) {
          i = 2 * n - 1 - offset - i;
        }
        return i * strides[d];
      },
      fn);
}

absl::Status MirrorPadKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(int64_t offset, MirrorOffset(ctx));
  ASSIGN_OR_RETURN(Paddings pads, ReadPaddings(ctx));
  RETURN_IF_ERROR(CheckMirrorPads(ctx, pads, x.shape(), offset,
                                  "input " + x.DebugString()));
  ASSIGN_OR_RETURN(Shape shape, PaddedShape(ctx, pads));
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, x.dtype(), shape));
  DispatchAny(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    ForEachMirrored(shape, x.shape(), pads, offset,
                    [&](int64_t o, int64_t i) { py[o] = px[i]; });
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// MirrorPadGrad: input is the gradient of a MirrorPad output; each element
// is added to the element of the unpadded tensor it was mirrored from.
absl::Status MirrorPadGradKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kArithmetic));
  const Tensor& dy = ctx.input(0);
  ASSIGN_OR_RETURN(int64_t offset, MirrorOffset(ctx));
  ASSIGN_OR_RETURN(Paddings pads, ReadPaddings(ctx));
  Shape shape(dy.rank());
  for (int i = 0; i < dy.rank(); ++i) {
    if (pads[i][0] > dy.dim(i) || pads[i][1] > dy.dim(i) - pads[i][0]) {
      return ctx.InvalidArgument("paddings[", i, "] is [", pads[i][0], ", ",
                                 pads[i][1], "], more than dim ", i,
                                 " of input ", dy.DebugString());
    }
    shape[i] = dy.dim(i) - pads[i][0] - pads[i][1];
  }
  RETURN_IF_ERROR(CheckMirrorPads(ctx, pads, shape, offset,
                                  "output " + ShapeString(shape)));
  ASSIGN_OR_RETURN(Tensor dx, Allocate(ctx, dy.dtype(), shape));
  DispatchArithmetic(dy.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pdy = dy.data<T>();
    T* pdx = dx.mutable_data<T>();
    ForEachMirrored(dy.shape(), shape, pads, offset,
                    [&](int64_t o, int64_t i) { pdx[i] += pdy[o]; });
  });
  ctx.set_output(0, std::move(dx));
  return absl::OkStatus();
}

// dx = reshape(dy, shape(x)): ExpandDims' and Squeeze's backward.
void ReshapeBackward(GradContext& g) {
  g.SetGrad(0, g.Reshape(g.Grad(0), g.InputShape(0)));
}

}  // namespace

void RegisterLayoutOps(OpRegistry& r) {
  r.Add(Op("ExpandDims")
            .Inputs({"input", "dim"})
            .Outputs({"output"})
            .Forward(ExpandDimsKernel)
            // dx = reshape(dy, shape(x))
            .Backward(ReshapeBackward)
            .NonDifferentiableInputs({1})
            .Summary("input with a dim of 1 inserted at `dim` (int32 or "
                     "int64, in [-rank - 1, rank])"));
  r.Add(Op("Squeeze")
            .Inputs({"input"})
            .Outputs({"output"})
            .Attr("squeeze_dims", std::vector<int64_t>{})
            .Forward(SqueezeKernel)
            // dx = reshape(dy, shape(x))
            .Backward(ReshapeBackward)
            .Summary("input without the size-1 dims in squeeze_dims (empty: "
                     "all size-1 dims)"));
  r.Add(Op("Tile")
            .Inputs({"input", "multiples"})
            .Outputs({"output"})
            .Forward(TileKernel)
            // dx = sum(reshape(dy, [m0, d0, m1, d1, ...]), axes 0, 2, ...)
            .Backward(TileBackward)
            .NonDifferentiableInputs({1})
            .Summary("input repeated multiples[i] times along dim i "
                     "(multiples int32 or int64, >= 0)"));
  r.Add(Op("Fill")
            .Inputs({"dims", "value"})
            .Outputs({"output"})
            .OutputDType(DTypeRule::SameAsInput(1))
            .Forward(FillKernel)
            // dvalue = sum(dy) over all axes
            .Backward([](GradContext& g) {
              g.SetGrad(1, g.Op("Sum", {g.Grad(0)},
                                {{"axis", std::vector<int64_t>{}}}));
            })
            .NonDifferentiableInputs({0})
            .Summary("a tensor of shape dims (int32 or int64) with every "
                     "element the scalar value"));
  // Tidx left unset takes start's dtype (TF infers it from the inputs).
  r.Add(Op("Range")
            .Inputs({"start", "limit", "delta"})
            .Outputs({"output"})
            .Attr("Tidx", DType::kInvalid)
            .Forward(RangeKernel)
            .NotDifferentiable()
            .Summary("[start, start + delta, ...) up to limit: "
                     "ceil(|limit - start| / |delta|) elements; int32, int64, "
                     "float32 or float64 scalars"));
  r.Add(Op("Reverse")
            .Inputs({"tensor", "dims"})
            .Outputs({"output"})
            .Forward(ReverseKernel)
            // dx = reverse(dy, dims)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("Reverse", {g.Grad(0), g.Input(1)}));
            })
            .SavesInputs({1})
            .NonDifferentiableInputs({1})
            .Summary("tensor reversed along the dims where the bool vector "
                     "dims is true"));
  r.Add(Op("ReverseV2")
            .Inputs({"tensor", "axis"})
            .Outputs({"output"})
            .Forward(ReverseV2Kernel)
            // dx = reverse(dy, axis)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("ReverseV2", {g.Grad(0), g.Input(1)}));
            })
            .SavesInputs({1})
            .NonDifferentiableInputs({1})
            .Summary("tensor reversed along the dims listed in axis (int32 "
                     "or int64, in [-rank, rank), each at most once)"));
  r.Add(Op("Pad")
            .Inputs({"input", "paddings"})
            .Outputs({"output"})
            .Forward(PadKernel)
            // dx = slice(dy, paddings[:, 0], shape(x))
            .Backward(PadBackward)
            .SavesInputs({1})
            .NonDifferentiableInputs({1})
            .Summary("input with paddings[i] = [before, after] zeros added "
                     "along dim i (paddings int32 or int64 [rank, 2], >= 0)"));
  // As TF's _PadGrad, constant_values gets no gradient.
  r.Add(Op("PadV2")
            .Inputs({"input", "paddings", "constant_values"})
            .Outputs({"output"})
            .Forward(PadKernel)
            // dx = slice(dy, paddings[:, 0], shape(x))
            .Backward(PadBackward)
            .SavesInputs({1})
            .NonDifferentiableInputs({1, 2})
            .Summary("Pad with the scalar constant_values instead of zeros "
                     "(constant_values gets no gradient, as in TF)"));
  r.Add(Op("MirrorPad")
            .Inputs({"input", "paddings"})
            .Outputs({"output"})
            .Attr("mode", AttrType::kString)
            .Forward(MirrorPadKernel)
            // dx = MirrorPadGrad(dy, paddings, mode)
            .Backward([](GradContext& g) {
              g.SetGrad(
                  0, g.Op("MirrorPadGrad", {g.Grad(0), g.Input(1)}, g.attrs()));
            })
            .SavesInputs({1})
            .NonDifferentiableInputs({1})
            .Summary("input padded with its mirror image: mode REFLECT "
                     "(edge not repeated, pads < dim) or SYMMETRIC (edge "
                     "repeated, pads <= dim)"));
  r.Add(
      Op("MirrorPadGrad")
          .Inputs({"input", "paddings"})
          .Outputs({"output"})
          .Attr("mode", AttrType::kString)
          .Forward(MirrorPadGradKernel)
          // ddy = MirrorPad(ddx, paddings, mode)
          .Backward([](GradContext& g) {
            g.SetGrad(0, g.Op("MirrorPad", {g.Grad(0), g.Input(1)}, g.attrs()));
          })
          .SavesInputs({1})
          .NonDifferentiableInputs({1})
          .Summary("MirrorPad's gradient: input (the padded gradient) "
                   "folded back onto the unpadded shape, summing the "
                   "mirrored elements"));
}

}  // namespace gradtape
