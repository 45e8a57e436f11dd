// Slicing: StridedSlice (numpy's basic indexing, x[1:-1:2, ..., tf.newaxis,
// 3]), its gradient StridedSliceGrad, and Slice (begin + size). As in
// TensorFlow, begin / end / strides / size are int32 or int64 input tensors
// (non-differentiable; a client sends them as small constants), and the
// masks are int attrs.
//
// How a StridedSlice spec is read (TensorFlow's ValidateStridedSliceOp):
//   1. The sparse spec: entry k of begin / end / strides with bit k of each
//      mask. At most one ellipsis; without one, an implicit ellipsis follows
//      the last entry.
//   2. The dense spec: one entry per input dim. The ellipsis expands to the
//      full range of as many dims as the other entries leave over; a
//      new-axis entry takes no input dim (it adds a 1 to the output shape);
//      a shrink entry takes one index of its dim and removes the dim.
//   3. Per input dim: negative indices count from the end; masked bounds
//      are the ends of the dim in the stride's direction; others are
//      clamped to [0, dim] (stride > 0) or [-1, dim - 1] (stride < 0). A
//      shrink index out of [-dim, dim) is an error; so is stride 0.
//   4. The processing shape has ceil((end - begin) / stride) elements per
//      dim (0 if the interval runs against the stride); the output shape is
//      the processing shape with the new axes inserted and the shrunk dims
//      removed.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/autodiff/forward_mode.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"
#include "core/ops/parallel.h"

namespace gradtape {
namespace {

// A StridedSlice spec resolved against an input shape: input element
// offset of output element o (in processing order) is
// base + sum_d index_d(o) * step[d].
struct ResolvedSlice {
  Shape begin;             // per input dim, the first index taken
  Shape strides;           // per input dim
  Shape processing_shape;  // per input dim, the number of indices taken
  Shape final_shape;       // the output's shape
};

// The masks of a spec: TensorFlow's int32 bit sets, held in 64 bits so that
// bit 32 (the implicit ellipsis after a 32-entry spec) can be set.
struct SliceMasks {
  uint64_t begin = 0, end = 0, ellipsis = 0, new_axis = 0, shrink = 0;
};

absl::StatusOr<SliceMasks> ReadMasks(const KernelContext& ctx) {
  SliceMasks m;
  const struct {
    const char* name;
    uint64_t* bits;
  } fields[] = {{"begin_mask", &m.begin},
                {"end_mask", &m.end},
                {"ellipsis_mask", &m.ellipsis},
                {"new_axis_mask", &m.new_axis},
                {"shrink_axis_mask", &m.shrink}};
  for (const auto& f : fields) {
    const int64_t v = ctx.attrs().Int(f.name);
    if (v < std::numeric_limits<int32_t>::min() ||
        v > std::numeric_limits<int32_t>::max()) {
      return ctx.InvalidArgument(f.name, " ", v, " is not an int32 bit mask");
    }
    *f.bits = static_cast<uint32_t>(static_cast<int32_t>(v));
  }
  if ((m.ellipsis & (m.ellipsis - 1)) != 0) {
    return ctx.InvalidArgument("ellipsis_mask ", m.ellipsis,
                               " has more than one bit set: multiple "
                               "ellipses in a slice spec are not allowed");
  }
  return m;
}

// Checks inputs 1..3 (begin, end, strides): int32 or int64, one dtype, 1-D
// of one length, at most 32 entries (the masks' width).
absl::Status CheckSpecInputs(const KernelContext& ctx) {
  for (int i = 1; i <= 3; ++i) RETURN_IF_ERROR(ctx.RequireIndexDType(i));
  RETURN_IF_ERROR(ctx.RequireSameDType(1, 2));
  RETURN_IF_ERROR(ctx.RequireSameDType(1, 3));
  const Tensor &b = ctx.input(1), &e = ctx.input(2), &s = ctx.input(3);
  if (b.rank() != 1 || e.rank() != 1 || s.rank() != 1 || b.dim(0) != e.dim(0) ||
      b.dim(0) != s.dim(0)) {
    return ctx.InvalidArgument(
        "begin, end and strides must be 1-D of one length, got shapes ",
        ShapeString(b.shape()), ", ", ShapeString(e.shape()), " and ",
        ShapeString(s.shape()));
  }
  if (b.dim(0) > 32) {
    return ctx.InvalidArgument("a slice spec has at most 32 entries, got ",
                               b.dim(0));
  }
  return absl::OkStatus();
}

// One entry of the dense spec (step 2).
struct DenseEntry {
  int64_t begin = 0, end = 0, stride = 1;
  bool begin_masked = true, end_masked = true, shrink = false;
  int sparse = -1;  // the spec entry it came from (-1: an ellipsis)
};

// Output dims of the dense spec, in order: an input dim, or a new axis.
constexpr int kNewAxis = -1;

absl::Status BuildDenseSpec(const KernelContext& ctx, const SliceMasks& m,
                            int rank, absl::string_view what,
                            std::vector<DenseEntry>* dense,
                            std::vector<int>* gather) {
  int sparse_dims = static_cast<int>(ctx.input(1).dim(0));
  uint64_t ellipsis = m.ellipsis;
  if (ellipsis == 0) {  // the implicit ellipsis after the last entry
    ellipsis = uint64_t{1} << sparse_dims;
    ++sparse_dims;
  }
  int new_axes_after_ellipsis = 0;
  for (int k = 0, seen = 0; k < sparse_dims; ++k) {
    if (seen && (m.new_axis >> k & 1)) ++new_axes_after_ellipsis;
    if (ellipsis >> k & 1) seen = 1;
  }
  dense->assign(rank, DenseEntry());
  int full = 0;
  for (int k = 0; k < sparse_dims; ++k) {
    if (ellipsis >> k & 1) {
      const int next = std::min(
          rank - (sparse_dims - k) + 1 + new_axes_after_ellipsis, rank);
      for (; full < next; ++full) gather->push_back(full);
    } else if (m.new_axis >> k & 1) {
      gather->push_back(kNewAxis);
    } else {
      if (full == rank) {
        return ctx.InvalidArgument("slice spec entry ", k,
                                   " is past the last dim of ", what, " (rank ",
                                   rank, ")");
      }
      DenseEntry& d = (*dense)[full];
      d = {IndexAt(ctx.input(1), k),
           IndexAt(ctx.input(2), k),
           IndexAt(ctx.input(3), k),
           (m.begin >> k & 1) != 0,
           (m.end >> k & 1) != 0,
           (m.shrink >> k & 1) != 0,
           k};
      if (!d.shrink) gather->push_back(full);
      ++full;
    }
  }
  return absl::OkStatus();
}

// Steps 3 and 4 for input dim i of size `dim`: sets r's begin, stride and
// processing size.
absl::Status ResolveDim(const KernelContext& ctx, const DenseEntry& d, int i,
                        int64_t dim, absl::string_view what, ResolvedSlice* r) {
  const int64_t s = d.stride;
  if (s == 0) {
    return ctx.InvalidArgument("strides[", d.sparse, "] is 0 (dim ", i, " of ",
                               what, "): a stride must be non-zero");
  }
  int64_t begin, end;
  if (d.shrink) {
    if (s < 0) {
      return ctx.InvalidArgument("strides[", d.sparse, "] is ", s,
                                 ": a shrink-axis entry needs a positive "
                                 "stride");
    }
    begin = d.begin < 0 ? dim + d.begin : d.begin;
    if (begin < 0 || begin >= dim) {
      return ctx.InvalidArgument("slice index ", d.begin, " (begin[", d.sparse,
                                 "]) of dim ", i, " is out of bounds for ",
                                 what);
    }
    end = begin + 1;
  } else {
    const int64_t lo = s > 0 ? 0 : -1, hi = s > 0 ? dim : dim - 1;
    auto canonical = [&](int64_t x, bool masked, bool is_end) {
      if (masked) return (s > 0) != is_end ? lo : hi;
      const int64_t fwd = x < 0 ? dim + x : x;
      return fwd < lo ? lo : fwd > hi ? hi : fwd;
    };
    begin = canonical(d.begin, d.begin_masked, false);
    end = canonical(d.end, d.end_masked, true);
  }
  const int64_t interval = end - begin;
  int64_t size = 0;
  if (interval != 0 && (interval < 0) == (s < 0)) {
    size = interval / s + (interval % s != 0 ? 1 : 0);
  }
  r->begin[i] = begin;
  // A dim that takes one index needs no stride: 1 keeps the offset
  // arithmetic in range for any int64 stride (with two or more indices,
  // |stride| < dim).
  r->strides[i] = size > 1 ? s : 1;
  r->processing_shape[i] = size;
  return absl::OkStatus();
}

// The whole spec (inputs 1..3 and the mask attrs) against `shape`; errors
// name the sliced tensor as `what`.
absl::StatusOr<ResolvedSlice> ResolveStridedSlice(
    const KernelContext& ctx, absl::Span<const int64_t> shape,
    absl::string_view what) {
  RETURN_IF_ERROR(CheckSpecInputs(ctx));
  ASSIGN_OR_RETURN(SliceMasks masks, ReadMasks(ctx));
  const int rank = static_cast<int>(shape.size());
  std::vector<DenseEntry> dense;
  std::vector<int> gather;
  RETURN_IF_ERROR(BuildDenseSpec(ctx, masks, rank, what, &dense, &gather));
  ResolvedSlice r{Shape(rank), Shape(rank), Shape(rank), Shape()};
  for (int i = 0; i < rank; ++i) {
    RETURN_IF_ERROR(ResolveDim(ctx, dense[i], i, shape[i], what, &r));
  }
  for (int g : gather) {
    r.final_shape.push_back(g == kNewAxis ? 1 : r.processing_shape[g]);
  }
  return r;
}

// The slice `r` of a row-major tensor of `shape` starts at element
// *base of it and steps through it by *step (in elements, per dim of the
// processing shape).
void SliceStrides(const ResolvedSlice& r, absl::Span<const int64_t> shape,
                  int64_t* base, Shape* step) {
  const Shape in_strides = RowMajorStrides(shape);
  *base = 0;
  step->resize(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    *base += r.begin[d] * in_strides[d];
    (*step)[d] = r.strides[d] * in_strides[d];
  }
}

// y = the slice `r` of x (a row-major tensor of `shape`), in the order of
// the processing shape: StridedCopy, by rows, in parallel.
template <typename T>
void CopyOutOfSlice(const ResolvedSlice& r, absl::Span<const int64_t> shape,
                    const T* x, T* y) {
  int64_t base;
  Shape step;
  SliceStrides(r, shape, &base, &step);
  StridedCopy<T>(r.processing_shape, step, x + base, y);
}

// The reverse of CopyOutOfSlice: writes dy (dense, in the order of the
// processing shape) into the slice `r` of dx. Row by row over the dims
// CollapseStrides leaves (a contiguous row is one copy), rows in parallel;
// a slice takes each element once, so rows never write the same element.
template <typename T>
void CopyIntoSlice(const ResolvedSlice& r, absl::Span<const int64_t> shape,
                   const T* dy, T* dx) {
  if (NumElements(r.processing_shape) == 0) return;
  int64_t base;
  Shape step;
  SliceStrides(r, shape, &base, &step);
  dx += base;
  const BroadcastLayout l = CollapseStrides(
      r.processing_shape, step, RowMajorStrides(r.processing_shape));
  const int64_t inner = l.inner(), st = l.sa.back(), sd = l.sb.back();
  ParallelRange(l.rows(), std::max<int64_t>(1, kElementwiseGrain / inner),
                [&](int64_t begin, int64_t end) {
                  RowCursor row(l, begin);
                  for (int64_t i = begin; i < end; ++i, row.Next()) {
                    T* to = dx + row.a();
                    const T* from = dy + row.b();
                    if (st == 1 && sd == 1) {
                      std::copy(from, from + inner, to);
                    } else {
                      for (int64_t k = 0; k < inner; ++k)
                        to[k * st] = from[k * sd];
                    }
                  }
                });
}

absl::Status StridedSliceKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(
      ResolvedSlice r,
      ResolveStridedSlice(ctx, x.shape(), "input " + x.DebugString()));
  ASSIGN_OR_RETURN(Tensor y, AllocateOutput(ctx, x.dtype(), r.final_shape));
  DispatchAny(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    CopyOutOfSlice(r, x.shape(), x.data<T>(), y.mutable_data<T>());
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// dx = zeros(shape) with dy written where StridedSlice took its elements.
absl::Status StridedSliceGradKernel(KernelContext& ctx) {
  ASSIGN_OR_RETURN(Shape shape, ShapeInput(ctx, 0));
  // Sizes first: a shape past the caps fails here, before the spec is
  // resolved against it.
  const Tensor& dy = ctx.input(4);
  // Zero-filled below, on every thread (a single memset was most of the
  // kernel on the transformer's q, k, v slices).
  ASSIGN_OR_RETURN(Tensor dx, AllocateOutput(ctx, dy.dtype(), shape));
  ASSIGN_OR_RETURN(
      ResolvedSlice r,
      ResolveStridedSlice(ctx, shape, "shape " + ShapeString(shape)));
  if (dy.shape() != r.final_shape) {
    return ctx.InvalidArgument("dy has shape ", ShapeString(dy.shape()),
                               ", but the slice of ", ShapeString(shape),
                               " has shape ", ShapeString(r.final_shape));
  }
  DispatchAny(dy.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* pdx = dx.mutable_data<T>();
    ParallelRange(dx.num_elements(), kElementwiseGrain,
                  [&](int64_t begin, int64_t end) {
                    std::fill(pdx + begin, pdx + end, zero);
                  });
    CopyIntoSlice(r, shape, dy.data<T>(), pdx);
  });
  ctx.set_output(0, std::move(dx));
  return absl::OkStatus();
}

// Slice: begin[i] in [0, dim], size[i] in [0, dim - begin[i]] or -1 (to the
// end). Sets *begin and *size (resolved).
absl::Status ResolveSlice(const KernelContext& ctx, Shape* begin, Shape* size) {
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  RETURN_IF_ERROR(ctx.RequireSameDType(1, 2));
  const Tensor &x = ctx.input(0), &b = ctx.input(1), &s = ctx.input(2);
  const int rank = x.rank();
  if (b.rank() != 1 || s.rank() != 1 || b.dim(0) != rank || s.dim(0) != rank) {
    return ctx.InvalidArgument("begin and size must be vectors of length ",
                               rank, " (the rank of input ", x.DebugString(),
                               "), got shapes ", ShapeString(b.shape()),
                               " and ", ShapeString(s.shape()));
  }
  begin->resize(rank);
  size->resize(rank);
  for (int i = 0; i < rank; ++i) {
    const int64_t dim = x.dim(i), bi = IndexAt(b, i);
    if (bi < 0 || bi > dim) {
      return ctx.InvalidArgument("begin[", i, "] is ", bi, ", not in [0, ", dim,
                                 "] (dim ", i, " of input ", x.DebugString(),
                                 ")");
    }
    int64_t si = IndexAt(s, i);
    if (si == -1) si = dim - bi;
    if (si < 0 || si > dim - bi) {
      return ctx.InvalidArgument("size[", i, "] is ", IndexAt(s, i),
                                 ", not in [0, ", dim - bi, "] or -1 (dim ", i,
                                 " of input ", x.DebugString(), ", begin ", bi,
                                 ")");
    }
    (*begin)[i] = bi;
    (*size)[i] = si;
  }
  return absl::OkStatus();
}

absl::Status SliceKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ResolvedSlice r;
  RETURN_IF_ERROR(ResolveSlice(ctx, &r.begin, &r.processing_shape));
  r.strides.assign(x.rank(), 1);
  r.final_shape = r.processing_shape;
  ASSIGN_OR_RETURN(Tensor y, AllocateOutput(ctx, x.dtype(), r.final_shape));
  DispatchAny(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    CopyOutOfSlice(r, x.shape(), x.data<T>(), y.mutable_data<T>());
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

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

// dx = StridedSliceGrad(shape(x), begin, end, strides, dy)
void StridedSliceBackward(GradContext& g) {
  Tensor shape = IndexVector(DType::kInt64, g.InputShape(0));
  g.SetGrad(0, g.Op("StridedSliceGrad",
                    {shape, g.Input(1), g.Input(2), g.Input(3), g.Grad(0)},
                    g.attrs()));
}

// ddy = StridedSlice(ddx, begin, end, strides)
void StridedSliceGradBackward(GradContext& g) {
  g.SetGrad(
      4, g.Op("StridedSlice", {g.Grad(0), g.Input(1), g.Input(2), g.Input(3)},
              g.attrs()));
}

// dx = StridedSliceGrad(shape(x), begin, begin + shape(y), ones, dy): the
// slice's output shape gives the resolved sizes (size -1 included).
void SliceBackward(GradContext& g) {
  const Tensor begin = g.Input(1);
  if (!g.ok()) return;
  const Shape& size = g.OutputShape(0);
  const int rank = static_cast<int>(size.size());
  Shape end(rank);
  for (int i = 0; i < rank; ++i) end[i] = IndexAt(begin, i) + size[i];
  const DType index = begin.dtype();
  Tensor shape = IndexVector(DType::kInt64, g.InputShape(0));
  g.SetGrad(0, g.Op("StridedSliceGrad",
                    {shape, begin, IndexVector(index, end),
                     IndexVector(index, Shape(rank, 1)), g.Grad(0)}));
}

// The five mask attrs of StridedSlice and StridedSliceGrad.
Op WithSliceMasks(Op op) {
  return std::move(op.Attr("begin_mask", int64_t{0})
                       .Attr("end_mask", int64_t{0})
                       .Attr("ellipsis_mask", int64_t{0})
                       .Attr("new_axis_mask", int64_t{0})
                       .Attr("shrink_axis_mask", int64_t{0}));
}

}  // namespace

void RegisterSliceOps(OpRegistry& r) {
  r.Add(std::move(
      WithSliceMasks(Op("StridedSlice"))
          .Inputs({"input", "begin", "end", "strides"})
          .Outputs({"output"})
          .Forward(StridedSliceKernel)
          // dx = StridedSliceGrad(shape(x), begin, end, strides, dy)
          .Backward(StridedSliceBackward)
          .SavesInputs({1, 2, 3})
          .NonDifferentiableInputs({1, 2, 3})
          // ty = StridedSlice(tx, begin, end, strides)
          .Jvp([](JvpContext& j) {
            j.SetTangent(
                0, j.Op("StridedSlice",
                        {j.Tangent(0), j.Input(1), j.Input(2), j.Input(3)},
                        j.attrs()));
          })
          .Summary("output = input[begin:end:strides] per dim, with "
                   "TensorFlow's begin / end / ellipsis / new-axis / "
                   "shrink-axis masks; begin, end, strides int32 or int64")));
  r.Add(std::move(
      WithSliceMasks(Op("StridedSliceGrad"))
          .Inputs({"shape", "begin", "end", "strides", "dy"})
          .Outputs({"output"})
          .OutputDType(DTypeRule::SameAsInput(4))
          .Forward(StridedSliceGradKernel)
          // ddy = StridedSlice(ddx, begin, end, strides)
          .Backward(StridedSliceGradBackward)
          .SavesInputs({1, 2, 3})
          .NonDifferentiableInputs({0, 1, 2, 3})
          .Summary("output = zeros(shape) with dy written where "
                   "StridedSlice(zeros(shape), begin, end, strides) takes "
                   "its elements (StridedSlice's gradient)")));
  r.Add(Op("Slice")
            .Inputs({"input", "begin", "size"})
            .Outputs({"output"})
            .Forward(SliceKernel)
            // dx = StridedSliceGrad(shape(x), begin, begin + size, 1, dy)
            .Backward(SliceBackward)
            .SavesInputs({1})
            .NonDifferentiableInputs({1, 2})
            // ty = Slice(tx, begin, size)
            .Jvp([](JvpContext& j) {
              j.SetTangent(
                  0, j.Op("Slice", {j.Tangent(0), j.Input(1), j.Input(2)}));
            })
            .Summary("output = input[begin[i] : begin[i] + size[i]] per dim "
                     "(size -1: to the end); begin, size int32 or int64"));
}

}  // namespace gradtape
