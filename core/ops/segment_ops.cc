// Segment reductions (TensorFlow's math_ops segment family).
//
// data is viewed as rows: data.shape = ids.shape + inner, and each id names
// the output row its data row is reduced into. The sorted ops (Segment*,
// SparseSegment*) take a non-negative, non-decreasing id vector and have
// last id + 1 output rows; empty segments are 0. The unsorted ops take ids in
// any order and the segment count as the attr num_segments (an input tensor
// in TensorFlow). Every id is checked before anything is written: a bad one
// is an INVALID_ARGUMENT naming its position and value.
//
// The backwards are written with GatherV2 (its own gradient is
// UnsortedSegmentSum, so the pair closes under differentiation) and, for Min
// and Max, with TensorFlow's "share dy among the rows that attained the
// extreme" rule, which reads the forward output.
#include <algorithm>
#include <cmath>
#include <limits>

#include "Eigen/Core"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {
namespace {

enum class Reduction { kSum, kMean, kSqrtN, kMin, kMax };

template <typename T>
using ConstRows = Eigen::Map<
    const Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <typename T>
using Rows = Eigen::Map<
    Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// Element i of an int32 or int64 tensor (the caller checked the dtype).
int64_t IndexAt(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kInt32 ? t.data<int32_t>()[i]
                                    : t.data<int64_t>()[i];
}

// Checks that input i is a vector of non-negative, non-decreasing int ids
// and sets *num_segments to last id + 1 (0 when there are none).
absl::Status CheckSortedIds(const KernelContext& ctx, int i,
                            int64_t* num_segments) {
  RETURN_IF_ERROR(ctx.RequireIndexDType(i));
  RETURN_IF_ERROR(ctx.RequireRank(i, 1));
  const Tensor& ids = ctx.input(i);
  const std::string& name = ctx.op().input_names[i];
  int64_t previous = 0;
  for (int64_t k = 0; k < ids.num_elements(); ++k) {
    const int64_t id = IndexAt(ids, k);
    if (id < 0) {
      return ctx.InvalidArgument(name, "[", k, "] = ", id, " is negative");
    }
    if (id < previous) {
      return ctx.InvalidArgument(name, " are not sorted: ", name, "[", k,
                                 "] = ", id, " < ", name, "[", k - 1,
                                 "] = ", previous);
    }
    previous = id;
  }
  *num_segments = ids.num_elements() == 0 ? 0 : previous + 1;
  return absl::OkStatus();
}

// [num_segments] + data.shape[skip:], or INVALID_ARGUMENT if it overflows.
absl::StatusOr<Shape> OutputShape(const KernelContext& ctx,
                                  int64_t num_segments, int skip) {
  const Shape& data = ctx.input(0).shape();
  Shape shape = {num_segments};
  shape.insert(shape.end(), data.begin() + skip, data.end());
  if (NumElements(shape) < 0) {
    return ctx.InvalidArgument("output shape ", ShapeString(shape),
                               " is too large");
  }
  return shape;
}

// Product of the dims of `shape` from `from` on.
int64_t InnerSize(const Shape& shape, int from) {
  int64_t n = 1;
  for (int i = from; i < static_cast<int>(shape.size()); ++i) n *= shape[i];
  return n;
}

// SegmentSum, SegmentMean, SegmentMin, SegmentMax.
absl::Status SegmentKernel(KernelContext& ctx, Reduction reduction) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kNumeric));
  const Tensor& data = ctx.input(0);
  const Tensor& ids = ctx.input(1);
  if (data.rank() < 1) {
    return ctx.InvalidArgument("data must have rank >= 1, got ",
                               data.DebugString());
  }
  int64_t num_segments = 0;
  RETURN_IF_ERROR(CheckSortedIds(ctx, 1, &num_segments));
  if (ids.num_elements() != data.dim(0)) {
    return ctx.InvalidArgument("segment_ids ", ShapeString(ids.shape()),
                               " must have one id per row of data ",
                               ShapeString(data.shape()));
  }
  ASSIGN_OR_RETURN(Shape shape, OutputShape(ctx, num_segments, 1));
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, data.dtype(), shape));
  const int64_t inner = InnerSize(data.shape(), 1);
  const int64_t n = data.dim(0);
  DispatchNumeric(data.dtype(), [&](auto zero) {
    using T = decltype(zero);
    ConstRows<T> x(data.data<T>(), n, inner);
    Rows<T> out(y.mutable_data<T>(), num_segments, inner);
    out.setZero();
    // Ids are sorted: each segment is one run of rows.
    for (int64_t start = 0; start < n;) {
      const int64_t s = IndexAt(ids, start);
      int64_t end = start + 1;
      while (end < n && IndexAt(ids, end) == s) ++end;
      auto run = x.middleRows(start, end - start);
      switch (reduction) {
        case Reduction::kSum:
          out.row(s) = run.colwise().sum();
          break;
        case Reduction::kMean:
          out.row(s) = run.colwise().sum() / static_cast<T>(end - start);
          break;
        case Reduction::kMin:
          out.row(s) = run.colwise().minCoeff();
          break;
        case Reduction::kMax:
          out.row(s) = run.colwise().maxCoeff();
          break;
        case Reduction::kSqrtN:
          break;  // Not a Segment* op.
      }
      start = end;
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// UnsortedSegmentSum, UnsortedSegmentMax.
absl::Status UnsortedSegmentKernel(KernelContext& ctx, Reduction reduction) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kNumeric));
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  const Tensor& data = ctx.input(0);
  const Tensor& ids = ctx.input(1);
  const int64_t num_segments = ctx.attrs().Int("num_segments");
  if (num_segments < 0) {
    return ctx.InvalidArgument("num_segments must be >= 0, got ", num_segments);
  }
  const Shape& ds = data.shape();
  if (ids.rank() > data.rank() ||
      !std::equal(ids.shape().begin(), ids.shape().end(), ds.begin())) {
    return ctx.InvalidArgument("segment_ids ", ShapeString(ids.shape()),
                               " must be a prefix of the shape of data ",
                               ShapeString(ds));
  }
  for (int64_t k = 0; k < ids.num_elements(); ++k) {
    const int64_t id = IndexAt(ids, k);
    if (id < 0 || id >= num_segments) {
      return ctx.InvalidArgument("segment_ids[", k, "] = ", id,
                                 " is out of range [0, ", num_segments, ")");
    }
  }
  ASSIGN_OR_RETURN(Shape shape, OutputShape(ctx, num_segments, ids.rank()));
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, data.dtype(), shape));
  const int64_t inner = InnerSize(ds, ids.rank());
  const int64_t n = ids.num_elements();
  DispatchNumeric(data.dtype(), [&](auto zero) {
    using T = decltype(zero);
    ConstRows<T> x(data.data<T>(), n, inner);
    Rows<T> out(y.mutable_data<T>(), num_segments, inner);
    if (reduction == Reduction::kMax) {
      out.setConstant(std::numeric_limits<T>::lowest());
      for (int64_t k = 0; k < n; ++k) {
        const int64_t s = IndexAt(ids, k);
        out.row(s) = out.row(s).max(x.row(k));
      }
    } else {
      out.setZero();
      for (int64_t k = 0; k < n; ++k) out.row(IndexAt(ids, k)) += x.row(k);
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// SparseSegmentSum, SparseSegmentMean, SparseSegmentSqrtN.
absl::Status SparseSegmentKernel(KernelContext& ctx, Reduction reduction) {
  const DTypes kinds =
      reduction == Reduction::kSum ? DTypes::kNumeric : DTypes::kFloating;
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, kinds));
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  RETURN_IF_ERROR(ctx.RequireRank(1, 1));
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const Tensor& ids = ctx.input(2);
  if (data.rank() < 1) {
    return ctx.InvalidArgument("data must have rank >= 1, got ",
                               data.DebugString());
  }
  int64_t num_segments = 0;
  RETURN_IF_ERROR(CheckSortedIds(ctx, 2, &num_segments));
  const int64_t n = indices.num_elements();
  if (ids.num_elements() != n) {
    return ctx.InvalidArgument("indices ", ShapeString(indices.shape()),
                               " and segment_ids ", ShapeString(ids.shape()),
                               " must have the same length");
  }
  const int64_t rows = data.dim(0);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t index = IndexAt(indices, k);
    if (index < 0 || index >= rows) {
      return ctx.InvalidArgument(
          "indices[", k, "] = ", index, " is out of range [0, ", rows,
          ") (the rows of data ", ShapeString(data.shape()), ")");
    }
  }
  ASSIGN_OR_RETURN(Shape shape, OutputShape(ctx, num_segments, 1));
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, data.dtype(), shape));
  const int64_t inner = InnerSize(data.shape(), 1);
  DispatchNumeric(data.dtype(), [&](auto zero) {
    using T = decltype(zero);
    ConstRows<T> x(data.data<T>(), rows, inner);
    Rows<T> out(y.mutable_data<T>(), num_segments, inner);
    out.setZero();
    for (int64_t start = 0; start < n;) {
      const int64_t s = IndexAt(ids, start);
      int64_t end = start;
      for (; end < n && IndexAt(ids, end) == s; ++end) {
        out.row(s) += x.row(IndexAt(indices, end));
      }
      const double count = static_cast<double>(end - start);
      if (reduction == Reduction::kMean) {
        out.row(s) /= static_cast<T>(count);
      } else if (reduction == Reduction::kSqrtN) {
        out.row(s) /= static_cast<T>(std::sqrt(count));
      }
      start = end;
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// For sorted `ids` of n elements: the size of the segment of each id, as a
// tensor [n, 1, ..., 1] of `rank` dims and `dtype` (so it broadcasts against
// rows of data). Always >= 1, so it can be divided by.
Tensor SegmentSizes(GradContext& g, Tensor ids, int rank, DType dtype) {
  if (!g.ok()) return Tensor();
  const int64_t n = ids.num_elements();
  Tensor ones = g.Filled(dtype, {n}, 1.0);  // a constant
  Tensor sizes = g.Op("GatherV2", {g.Op("SegmentSum", {ones, ids}), ids});
  Shape shape(rank, 1);
  shape[0] = n;
  return g.Reshape(sizes, shape);
}

// The gradient of Segment{Min,Max} (sum = "SegmentSum") and
// UnsortedSegmentMax (sum = "UnsortedSegmentSum"): dy of a segment is shared
// equally among the data entries equal to the extreme (TensorFlow's rule).
void MinOrMaxGrad(GradContext& g, const char* sum, AttrMap sum_attrs) {
  Tensor data = g.Input(0), ids = g.Input(1), dy = g.Grad(0);
  const DType dtype = g.InputDType(0);
  Tensor is_selected =
      g.Op("Equal", {data, g.Op("GatherV2", {g.Output(0), ids})});
  Tensor selected = g.Op("Cast", {is_selected}, {{"DstT", dtype}});
  Tensor num_selected = g.Op(sum, {selected, ids}, std::move(sum_attrs));
  // Gathered, every count is >= 1: the extreme of a segment is attained.
  Tensor shared =
      g.Div(g.Op("GatherV2", {dy, ids}), g.Op("GatherV2", {num_selected, ids}));
  g.SetGrad(0,
            g.Op("Select", {is_selected, shared, g.Op("ZerosLike", {shared})}));
}

Op SegmentOp(Op op) {
  return std::move(op.Inputs({"data", "segment_ids"})
                       .Outputs({"output"})
                       .NonDifferentiableInputs({1}));
}

Op SparseSegmentOp(Op op) {
  return std::move(op.Inputs({"data", "indices", "segment_ids"})
                       .Outputs({"output"})
                       .NonDifferentiableInputs({1, 2})
                       .SavesInputs({1, 2}));
}

// The data gradient of SparseSegment{Sum,Mean,SqrtN}: the rows of dy for
// each segment id, scaled by 1, 1/size or 1/sqrt(size), summed back into the
// rows of data the indices picked.
void SparseSegmentGrad(GradContext& g, Reduction reduction) {
  Tensor indices = g.Input(1), ids = g.Input(2);
  const int rank = static_cast<int>(g.InputShape(0).size());
  Tensor rows = g.Op("GatherV2", {g.Grad(0), ids});
  if (reduction != Reduction::kSum) {
    Tensor sizes = SegmentSizes(g, ids, rank, g.InputDType(0));
    if (reduction == Reduction::kSqrtN) sizes = g.Op("Sqrt", {sizes});
    rows = g.Div(rows, sizes);
  }
  g.SetGrad(0, g.Op("UnsortedSegmentSum", {rows, indices},
                    {{"num_segments", g.InputShape(0)[0]}}));
}

// SegmentMin and SegmentMax.
Op SegmentMinOrMax(Op op, Reduction reduction) {
  return std::move(
      SegmentOp(std::move(op))
          .Forward([reduction](KernelContext& ctx) {
            return SegmentKernel(ctx, reduction);
          })
          // ddata = data == output[ids] ? dy[ids] / #ties : 0
          .Backward([](GradContext& g) { MinOrMaxGrad(g, "SegmentSum", {}); })
          // TensorFlow's seed set lists Segment{Min,Max} among the ops
          // whose gradient needs no outputs; it reads output 0.
          .SavesInputs({0, 1})
          .SavesOutputs({0}));
}

}  // namespace

void RegisterSegmentOps(OpRegistry& r) {
  r.Add(SegmentOp(Op("SegmentSum"))
            .Forward([](KernelContext& ctx) {
              return SegmentKernel(ctx, Reduction::kSum);
            })
            // ddata = dy[segment_ids]
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("GatherV2", {g.Grad(0), g.Input(1)}));
            })
            .SavesInputs({1})
            .Summary("output[s] = sum of data[i] with segment_ids[i] == s "
                     "(ids sorted, >= 0; empty segments 0)"));
  r.Add(SegmentOp(Op("SegmentMean"))
            .Forward([](KernelContext& ctx) {
              return SegmentKernel(ctx, Reduction::kMean);
            })
            // ddata = dy[segment_ids] / size(segment_ids)
            .Backward([](GradContext& g) {
              Tensor ids = g.Input(1);
              const int rank = static_cast<int>(g.InputShape(0).size());
              g.SetGrad(0, g.Div(g.Op("GatherV2", {g.Grad(0), ids}),
                                 SegmentSizes(g, ids, rank, g.InputDType(0))));
            })
            .SavesInputs({1})
            .Summary("output[s] = mean of data[i] with segment_ids[i] == s "
                     "(ids sorted, >= 0; empty segments 0)"));
  r.Add(SegmentMinOrMax(Op("SegmentMin"), Reduction::kMin)
            .Summary("output[s] = min of data[i] with segment_ids[i] == s "
                     "(ids sorted, >= 0; empty segments 0)"));
  r.Add(SegmentMinOrMax(Op("SegmentMax"), Reduction::kMax)
            .Summary("output[s] = max of data[i] with segment_ids[i] == s "
                     "(ids sorted, >= 0; empty segments 0)"));
  r.Add(SegmentOp(Op("UnsortedSegmentSum"))
            .Attr("num_segments", AttrType::kInt)
            .Forward([](KernelContext& ctx) {
              return UnsortedSegmentKernel(ctx, Reduction::kSum);
            })
            // ddata = dy[segment_ids]
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("GatherV2", {g.Grad(0), g.Input(1)}));
            })
            .SavesInputs({1})
            .Summary("output[s] = sum of data[i...] with segment_ids[i...] "
                     "== s; ids in any order, in [0, num_segments) (TF's "
                     "num_segments input is an attr here; TF drops negative "
                     "ids, here they are an error)"));
  r.Add(SegmentOp(Op("UnsortedSegmentMax"))
            .Attr("num_segments", AttrType::kInt)
            .Forward([](KernelContext& ctx) {
              return UnsortedSegmentKernel(ctx, Reduction::kMax);
            })
            // ddata = data == output[ids] ? dy[ids] / #ties : 0
            .Backward([](GradContext& g) {
              MinOrMaxGrad(g, "UnsortedSegmentSum",
                           {{"num_segments", g.attrs().Int("num_segments")}});
            })
            .SavesInputs({0, 1})
            .SavesOutputs({0})
            .Summary("output[s] = max of data[i...] with segment_ids[i...] "
                     "== s; ids in any order, in [0, num_segments); empty "
                     "segments are the lowest value of the dtype (TF's "
                     "num_segments input is an attr here)"));
  r.Add(SparseSegmentOp(Op("SparseSegmentSum"))
            .Forward([](KernelContext& ctx) {
              return SparseSegmentKernel(ctx, Reduction::kSum);
            })
            // ddata = UnsortedSegmentSum(dy[segment_ids], indices)
            .Backward(
                [](GradContext& g) { SparseSegmentGrad(g, Reduction::kSum); })
            .Summary("output[s] = sum of data[indices[i]] with "
                     "segment_ids[i] == s (ids sorted, >= 0)"));
  r.Add(SparseSegmentOp(Op("SparseSegmentMean"))
            .Forward([](KernelContext& ctx) {
              return SparseSegmentKernel(ctx, Reduction::kMean);
            })
            // ddata = UnsortedSegmentSum(dy[segment_ids] / size, indices)
            .Backward(
                [](GradContext& g) { SparseSegmentGrad(g, Reduction::kMean); })
            .Summary("output[s] = mean of data[indices[i]] with "
                     "segment_ids[i] == s (ids sorted, >= 0)"));
  r.Add(SparseSegmentOp(Op("SparseSegmentSqrtN"))
            .Forward([](KernelContext& ctx) {
              return SparseSegmentKernel(ctx, Reduction::kSqrtN);
            })
            // ddata = UnsortedSegmentSum(dy[segment_ids] / sqrt(size),
            //                            indices)
            .Backward(
                [](GradContext& g) { SparseSegmentGrad(g, Reduction::kSqrtN); })
            .Summary("output[s] = sum of data[indices[i]] with "
                     "segment_ids[i] == s, over sqrt(segment size)"));
}

}  // namespace gradtape
