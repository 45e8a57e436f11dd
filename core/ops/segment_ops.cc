// Segment reductions (TensorFlow's math_ops segment family).
//
// data is viewed as rows: data.shape = ids.shape + inner, and each id names
// the output row its data row is reduced into. The sorted ops (Segment*,
// SparseSegment*) take a non-negative, non-decreasing id vector and have
// last id + 1 output rows (num_segments rows for the *WithNumSegments ops);
// empty segments are 0 (1 for SegmentProd). The unsorted ops take ids in any
// order and the segment count num_segments: an attr for UnsortedSegmentSum
// and UnsortedSegmentMax (older ops here), an int32/int64 scalar input as in
// TensorFlow for UnsortedSegmentMin and UnsortedSegmentProd; a negative id
// drops its row (TensorFlow's CPU kernels), in the forward and the gradient.
// Every id is checked before anything is written: a bad one is an
// INVALID_ARGUMENT naming its position and value.
// Sum, Mean and Prod (sorted and unsorted) take real and complex data; Min
// and Max real only; the SparseSegment ops real only (TensorFlow's CPU
// kernels, which register no complex for them).
//
// The backwards are written with GatherV2 (its own gradient is
// UnsortedSegmentSum, so the pair closes under differentiation) and, for Min
// and Max, with TensorFlow's "share dy among the rows that attained the
// extreme" rule, which reads the forward output.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>

#include "Eigen/Core"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {
namespace {

enum class Reduction { kSum, kMean, kSqrtN, kMin, kMax, kProd };

template <typename T>
using ConstRows = Eigen::Map<
    const Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <typename T>
using Rows = Eigen::Map<
    Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// Min and Max need an order: real dtypes only (TensorFlow's CPU kernels);
// Sum, Mean and Prod also take complex.
absl::Status RequireDataDType(const KernelContext& ctx, Reduction reduction) {
  const bool ordered =
      reduction == Reduction::kMin || reduction == Reduction::kMax;
  return RequireDTypes(ctx, 0,
                       ordered ? DTypes::kNumeric : DTypes::kArithmetic);
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

// The segment count: the attr num_segments (input < 0) or the int32/int64
// scalar input `input` (TensorFlow's form), >= 0.
absl::StatusOr<int64_t> NumSegments(const KernelContext& ctx, int input) {
  int64_t n = 0;
  if (input < 0) {
    n = ctx.attrs().Int("num_segments");
  } else {
    RETURN_IF_ERROR(ctx.RequireIndexDType(input));
    RETURN_IF_ERROR(ctx.RequireRank(input, 0));
    n = IndexAt(ctx.input(input), 0);
  }
  if (n < 0) {
    return ctx.InvalidArgument("num_segments must be >= 0, got ", n);
  }
  return n;
}

// SegmentSum, SegmentMean, SegmentMin, SegmentMax, SegmentProd.
absl::Status SegmentKernel(KernelContext& ctx, Reduction reduction) {
  RETURN_IF_ERROR(RequireDataDType(ctx, reduction));
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
  DispatchArithmetic(data.dtype(), [&](auto zero) {
    using T = decltype(zero);
    ConstRows<T> x(data.data<T>(), n, inner);
    Rows<T> out(y.mutable_data<T>(), num_segments, inner);
    // Empty segments: 0, or 1 for a product (TensorFlow).
    if (reduction == Reduction::kProd) {
      out.setOnes();
    } else {
      out.setZero();
    }
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
          if constexpr (!kIsComplex<T>) out.row(s) = run.colwise().minCoeff();
          break;
        case Reduction::kMax:
          if constexpr (!kIsComplex<T>) out.row(s) = run.colwise().maxCoeff();
          break;
        case Reduction::kProd:
          out.row(s) = run.colwise().prod();
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

// UnsortedSegmentSum, UnsortedSegmentMax (num_segments an attr:
// num_segments_input < 0), UnsortedSegmentMin, UnsortedSegmentProd (the
// input num_segments_input). Rows with a negative id are dropped
// (TensorFlow's CPU kernels).
absl::Status UnsortedSegmentKernel(KernelContext& ctx, Reduction reduction,
                                   int num_segments_input) {
  RETURN_IF_ERROR(RequireDataDType(ctx, reduction));
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  const Tensor& data = ctx.input(0);
  const Tensor& ids = ctx.input(1);
  ASSIGN_OR_RETURN(const int64_t num_segments,
                   NumSegments(ctx, num_segments_input));
  const Shape& ds = data.shape();
  if (ids.rank() > data.rank() ||
      !std::equal(ids.shape().begin(), ids.shape().end(), ds.begin())) {
    return ctx.InvalidArgument("segment_ids ", ShapeString(ids.shape()),
                               " must be a prefix of the shape of data ",
                               ShapeString(ds));
  }
  for (int64_t k = 0; k < ids.num_elements(); ++k) {
    const int64_t id = IndexAt(ids, k);
    if (id >= num_segments) {
      return ctx.InvalidArgument("segment_ids[", k, "] = ", id,
                                 " is out of range [0, ", num_segments,
                                 ") (negative ids drop their row)");
    }
  }
  ASSIGN_OR_RETURN(Shape shape, OutputShape(ctx, num_segments, ids.rank()));
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, data.dtype(), shape));
  const int64_t inner = InnerSize(ds, ids.rank());
  const int64_t n = ids.num_elements();
  DispatchArithmetic(data.dtype(), [&](auto zero) {
    using T = decltype(zero);
    ConstRows<T> x(data.data<T>(), n, inner);
    Rows<T> out(y.mutable_data<T>(), num_segments, inner);
    // Empty segments: the identity of the reduction (TensorFlow).
    if (reduction == Reduction::kProd) {
      out.setOnes();
    } else {
      out.setZero();
    }
    if constexpr (!kIsComplex<T>) {
      if (reduction == Reduction::kMax) {
        out.setConstant(std::numeric_limits<T>::lowest());
      } else if (reduction == Reduction::kMin) {
        out.setConstant(std::numeric_limits<T>::max());
      }
    }
    for (int64_t k = 0; k < n; ++k) {
      const int64_t s = IndexAt(ids, k);
      if (s < 0) continue;
      if (reduction == Reduction::kProd) {
        out.row(s) *= x.row(k);
      } else if (reduction == Reduction::kSum) {
        out.row(s) += x.row(k);
      } else if constexpr (!kIsComplex<T>) {
        if (reduction == Reduction::kMax) {
          out.row(s) = out.row(s).max(x.row(k));
        } else {
          out.row(s) = out.row(s).min(x.row(k));
        }
      }
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// SparseSegmentSum, SparseSegmentMean, SparseSegmentSqrtN and (with_num:
// the input num_segments sets the output rows) their *WithNumSegments.
absl::Status SparseSegmentKernel(KernelContext& ctx, Reduction reduction,
                                 bool with_num = false) {
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
  if (with_num) {
    ASSIGN_OR_RETURN(const int64_t given, NumSegments(ctx, 3));
    if (num_segments > given) {
      return ctx.InvalidArgument("segment_ids has id ", num_segments - 1,
                                 ", not below num_segments ", given);
    }
    num_segments = given;
  }
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

// max(ids, 0): ids an unsorted op dropped read row 0 instead (masked after).
Tensor ClipIds(GradContext& g, Tensor ids) {
  return g.Op("Maximum", {ids, g.Const(0, g.InputDType(1))});
}

// params[ids] along axis 0, with the rows of negative ids `fill` instead
// (TensorFlow's _GatherDropNegatives; fill 0 for gradients).
Tensor GatherDropNegatives(GradContext& g, Tensor params, Tensor ids,
                           double fill) {
  if (!g.ok()) return Tensor();
  Tensor gathered = g.Op("GatherV2", {params, ClipIds(g, ids)});
  if (!g.ok()) return Tensor();
  const Shape shape = gathered.shape();
  const int64_t n = ids.num_elements();
  const int64_t inner = n == 0 ? 0 : NumElements(shape) / n;
  Tensor rows = g.Reshape(gathered, {n, inner});
  Tensor keep =
      g.Reshape(g.Op("GreaterEqual", {ids, g.Const(0, g.InputDType(1))}), {n});
  Tensor filled = g.Filled(g.InputDType(0), {n, inner}, fill);
  return g.Reshape(g.Op("Select", {keep, rows, filled}), shape);
}

// How a backward runs the op's sum over segments: "SegmentSum" (sorted),
// or "UnsortedSegmentSum" with num_segments (and negative ids dropped).
struct SegmentSum {
  bool sorted;
  int64_t num_segments = 0;
  Tensor Run(GradContext& g, Tensor data, Tensor ids) const {
    return sorted ? g.Op("SegmentSum", {data, ids})
                  : g.Op("UnsortedSegmentSum", {data, ids},
                         {{"num_segments", num_segments}});
  }
  // x[ids] along axis 0; rows of dropped ids `fill`.
  Tensor Gather(GradContext& g, Tensor x, Tensor ids, double fill) const {
    return sorted ? g.Op("GatherV2", {x, ids})
                  : GatherDropNegatives(g, x, ids, fill);
  }
};

// The gradient of Segment{Min,Max} and UnsortedSegment{Min,Max}: dy of a
// segment is shared equally among the data entries equal to the extreme
// (TensorFlow's rule); rows of dropped ids get 0.
void MinOrMaxGrad(GradContext& g, const SegmentSum& sum) {
  Tensor data = g.Input(0), ids = g.Input(1), dy = g.Grad(0);
  const DType dtype = g.InputDType(0);
  // A dropped row compares with NaN: never selected.
  Tensor is_selected =
      g.Op("Equal", {data, sum.Gather(g, g.Output(0), ids, std::nan(""))});
  Tensor selected = g.Op("Cast", {is_selected}, {{"DstT", dtype}});
  // At least 1, so that no division below makes a NaN (an empty segment
  // is read by no row).
  Tensor num_selected =
      g.Op("Maximum", {sum.Run(g, selected, ids), g.Const(1.0, dtype)});
  Tensor gather_ids = sum.sorted ? ids : ClipIds(g, ids);
  Tensor shared = g.Div(g.Op("GatherV2", {dy, gather_ids}),
                        g.Op("GatherV2", {num_selected, gather_ids}));
  g.SetGrad(0,
            g.Op("Select", {is_selected, shared, g.Op("ZerosLike", {shared})}));
}

// The gradient of SegmentProd and UnsortedSegmentProd (TensorFlow's
// _SegmentProdGrad / _UnsortedSegmentProdGrad): for a segment with no zero,
// d/dx_i = prod / x_i; with one zero, the zero gets the product of the
// others and the rest 0; with more, all 0. `prod` runs the forward op. For
// complex data the partial derivative is conjugated (the gradient of a
// holomorphic op is conj(dy/dx) dy; TensorFlow 2.21's rules miss that conj).
void ProdGrad(GradContext& g, const SegmentSum& sum,
              const std::function<Tensor(Tensor)>& prod) {
  Tensor data = g.Input(0), ids = g.Input(1), dy = g.Grad(0);
  const DType dtype = g.InputDType(0);
  Tensor is_zero = g.Op("Equal", {data, g.Const(0.0, dtype)});
  // Counted in int32 (as TensorFlow): Greater has no complex kernel.
  Tensor num_zeros =
      sum.Run(g, g.Op("Cast", {is_zero}, {{"DstT", DType::kInt32}}), ids);
  Tensor grad =
      g.Op("Select", {g.Op("Greater", {num_zeros, g.Const(1.0, DType::kInt32)}),
                      g.Op("ZerosLike", {dy}), dy});
  Tensor non_zero_data =
      g.Op("Select", {is_zero, g.Op("OnesLike", {data}), data});
  Tensor non_zero_prod = prod(non_zero_data);
  Tensor gather_ids = sum.sorted ? ids : ClipIds(g, ids);
  Tensor gathered_prod = g.Op("GatherV2", {g.Output(0), gather_ids});
  Tensor gathered_non_zero_prod = g.Op("GatherV2", {non_zero_prod, gather_ids});
  // Divided by non_zero_data (not data, as TensorFlow's unsorted rule does):
  // no inf in the branch Select drops, so no NaN in a second order.
  Tensor partial = g.Op("Select", {is_zero, gathered_non_zero_prod,
                                   g.Div(gathered_prod, non_zero_data)});
  g.SetGrad(0, g.Mul(sum.Gather(g, grad, ids, 0.0), g.Conj(partial)));
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

// SparseSegment{Sum,Mean,SqrtN}WithNumSegments.
Op SparseSegmentWithNumSegments(Op op, Reduction reduction) {
  return std::move(op.Inputs({"data", "indices", "segment_ids", "num_segments"})
                       .Outputs({"output"})
                       .NonDifferentiableInputs({1, 2, 3})
                       .SavesInputs({1, 2})
                       .Forward([reduction](KernelContext& ctx) {
                         return SparseSegmentKernel(ctx, reduction,
                                                    /*with_num=*/true);
                       })
                       // as without num_segments (the rows past the last id get
                       // no gradient to pass on)
                       .Backward([reduction](GradContext& g) {
                         SparseSegmentGrad(g, reduction);
                       }));
}

// UnsortedSegmentMin and UnsortedSegmentProd: num_segments is an input, as
// in TensorFlow.
Op UnsortedSegmentWithInput(Op op, Reduction reduction) {
  return std::move(
      op.Inputs({"data", "segment_ids", "num_segments"})
          .Outputs({"output"})
          .NonDifferentiableInputs({1, 2})
          .Forward([reduction](KernelContext& ctx) {
            return UnsortedSegmentKernel(ctx, reduction, 2);
          })
          .Backward([reduction](GradContext& g) {
            const int64_t n = g.OutputShape(0)[0];
            const SegmentSum sum{false, n};
            if (reduction == Reduction::kMin) {
              MinOrMaxGrad(g, sum);
              return;
            }
            ProdGrad(g, sum, [&g, n](Tensor x) {
              return g.Op("UnsortedSegmentProd",
                          {x, g.Input(1),
                           g.Const(static_cast<double>(n), DType::kInt64)});
            });
          })
          .SavesInputs({0, 1})
          .SavesOutputs({0}));
}

// SegmentMin and SegmentMax.
Op SegmentMinOrMax(Op op, Reduction reduction) {
  return std::move(
      SegmentOp(std::move(op))
          .Forward([reduction](KernelContext& ctx) {
            return SegmentKernel(ctx, reduction);
          })
          // ddata = data == output[ids] ? dy[ids] / #ties : 0
          .Backward([](GradContext& g) { MinOrMaxGrad(g, {true}); })
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
              return UnsortedSegmentKernel(ctx, Reduction::kSum, -1);
            })
            // ddata = dy[segment_ids] (0 for a dropped row)
            .Backward([](GradContext& g) {
              g.SetGrad(0, GatherDropNegatives(g, g.Grad(0), g.Input(1), 0.0));
            })
            .SavesInputs({1})
            .Summary("output[s] = sum of data[i...] with segment_ids[i...] "
                     "== s; ids in any order, < num_segments, negative ids "
                     "drop their row (TF's num_segments input is an attr "
                     "here)"));
  r.Add(SegmentOp(Op("UnsortedSegmentMax"))
            .Attr("num_segments", AttrType::kInt)
            .Forward([](KernelContext& ctx) {
              return UnsortedSegmentKernel(ctx, Reduction::kMax, -1);
            })
            // ddata = data == output[ids] ? dy[ids] / #ties : 0
            .Backward([](GradContext& g) {
              MinOrMaxGrad(g, {false, g.attrs().Int("num_segments")});
            })
            .SavesInputs({0, 1})
            .SavesOutputs({0})
            .Summary("output[s] = max of data[i...] with segment_ids[i...] "
                     "== s; ids in any order, < num_segments, negative ids "
                     "drop their row; empty segments are the lowest value of "
                     "the dtype (TF's num_segments input is an attr here)"));
  r.Add(UnsortedSegmentWithInput(Op("UnsortedSegmentMin"), Reduction::kMin)
            // ddata = data == output[ids] ? dy[ids] / #ties : 0
            .Summary("output[s] = min of data[i...] with segment_ids[i...] "
                     "== s; ids in any order, < num_segments, negative ids "
                     "drop their row; empty segments are the highest value "
                     "of the dtype"));
  r.Add(UnsortedSegmentWithInput(Op("UnsortedSegmentProd"), Reduction::kProd)
            // TensorFlow's _UnsortedSegmentProdGrad (zeros handled)
            .Summary("output[s] = product of data[i...] with "
                     "segment_ids[i...] == s; ids in any order, < "
                     "num_segments, negative ids drop their row; empty "
                     "segments 1"));
  r.Add(SegmentOp(Op("SegmentProd"))
            .Forward([](KernelContext& ctx) {
              return SegmentKernel(ctx, Reduction::kProd);
            })
            // TensorFlow's _SegmentProdGrad (zeros handled)
            .Backward([](GradContext& g) {
              ProdGrad(g, {true}, [&g](Tensor x) {
                return g.Op("SegmentProd", {x, g.Input(1)});
              });
            })
            .SavesInputs({0, 1})
            .SavesOutputs({0})
            .Summary("output[s] = product of data[i] with segment_ids[i] == "
                     "s (ids sorted, >= 0; empty segments 1)"));
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
  r.Add(SparseSegmentWithNumSegments(Op("SparseSegmentSumWithNumSegments"),
                                     Reduction::kSum)
            .Summary("SparseSegmentSum with num_segments output rows (ids "
                     "sorted, in [0, num_segments))"));
  r.Add(SparseSegmentWithNumSegments(Op("SparseSegmentMeanWithNumSegments"),
                                     Reduction::kMean)
            .Summary("SparseSegmentMean with num_segments output rows (ids "
                     "sorted, in [0, num_segments); empty segments 0)"));
  r.Add(SparseSegmentWithNumSegments(Op("SparseSegmentSqrtNWithNumSegments"),
                                     Reduction::kSqrtN)
            .Summary("SparseSegmentSqrtN with num_segments output rows (ids "
                     "sorted, in [0, num_segments); empty segments 0)"));
}

}  // namespace gradtape
