// Reductions over the attr "axis" (TensorFlow's host int tensor; empty: all
// axes): Sum, Mean, Prod, and L2Loss; Max and Min over the int32 / int64
// input "axis" (TensorFlow's reduction_indices, named axis as in tf.raw_ops
// and Sum here; empty: no axis, as in TensorFlow), with TensorFlow's
// _MinOrMaxGrad; ArgMax and ArgMin over the scalar input "dimension".
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/autodiff/forward_mode.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"
#include "core/ops/parallel.h"
#include "core/ops/vector_math.h"

namespace gradtape {
namespace {

enum class Reduction { kSum, kMean, kProd };

// The input's dims with dims of 1 dropped and adjacent dims merged when both
// are reduced or both kept: sizes[i], reduced[i] alternate.
struct ReductionGroups {
  std::vector<int64_t> sizes;
  std::vector<bool> reduced;
};
ReductionGroups GroupDims(absl::Span<const int64_t> shape,
                          const std::vector<bool>& mask) {
  ReductionGroups g;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!g.sizes.empty() && g.reduced.back() == mask[d]) {
      g.sizes.back() *= shape[d];
    } else {
      g.sizes.push_back(shape[d]);
      g.reduced.push_back(mask[d]);
    }
  }
  return g;
}

// Elements summed (or multiplied) per block of a whole-tensor reduction:
// fixed, so the partial sums and their order do not depend on the thread
// count.
constexpr int64_t kReduceAllBlock = 64 * 1024;

// The fold of n contiguous elements (Eigen's vectorised sum or product).
template <typename T>
T Fold(const T* p, int64_t n, bool prod) {
  using Vec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
  return prod ? Vec(p, n).prod() : Vec(p, n).sum();
}

// Columns [begin, end) of an [R, K] block at p: y[k] = fold over r, row by
// row (vectorised across columns).
template <typename T>
void FoldColumns(const T* p, int64_t r_count, int64_t k_count, int64_t begin,
                 int64_t end, bool prod, T* y) {
  for (int64_t k = begin; k < end; ++k) y[k] = prod ? T(1) : T(0);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (!prod) {
      VecAddRows(p + begin, r_count, end - begin, k_count, y + begin);
      return;
    }
  }
  for (int64_t r = 0; r < r_count; ++r) {
    const T* row = p + r * k_count;
    if (prod) {
      for (int64_t k = begin; k < end; ++k) y[k] *= row[k];
    } else {
      for (int64_t k = begin; k < end; ++k) y[k] += row[k];
    }
  }
}

// y[k] = fold over r of an [R, K] x. With many rows of a few columns (a
// bias gradient: [batch, features] to [features]) blocks of rows fold into
// partial rows in parallel, each block reading contiguous memory, and the
// partials fold in block order; the blocks depend on K only, never on the
// thread count. With few rows, or long ones, threads take column ranges.
template <typename T>
void FoldRowsOf(const T* px, int64_t r_count, int64_t k_count, bool prod,
                T* py) {
  // Fused loops' column sums (core/registry/fused_loop.h) follow these
  // blocks: the same bits.
  static_assert(FusedLoop::kColumnBlock == kElementwiseGrain);
  const int64_t block_rows = FusedLoop::ColumnBlockRows(k_count);
  const int64_t blocks =
      block_rows < 8 ? 0 : (r_count + block_rows - 1) / block_rows;
  if (blocks < 2) {
    ParallelRange(k_count, std::max<int64_t>(64, kElementwiseGrain / r_count),
                  [&](int64_t begin, int64_t end) {
                    FoldColumns(px, r_count, k_count, begin, end, prod, py);
                  });
    return;
  }
  std::vector<T> partial(blocks * k_count);
  ParallelRange(blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t first = b * block_rows;
      FoldColumns(px + first * k_count, std::min(block_rows, r_count - first),
                  k_count, 0, k_count, prod, partial.data() + b * k_count);
    }
  });
  FoldColumns(partial.data(), blocks, k_count, 0, k_count, prod, py);
}

// All n elements into y[0]: fixed blocks in parallel, partials in order.
template <typename T>
void FoldAll(const T* px, int64_t n, bool prod, T* py) {
  const int64_t blocks = (n + kReduceAllBlock - 1) / kReduceAllBlock;
  std::vector<T> partial(blocks);
  ParallelFor(static_cast<int>(blocks), [&](int b) {
    const int64_t begin = b * kReduceAllBlock;
    partial[b] = Fold(px + begin, std::min(n - begin, kReduceAllBlock), prod);
  });
  T acc = prod ? T(1) : T(0);
  for (const T& p : partial) acc = prod ? acc * p : acc + p;
  py[0] = acc;
}

// Any layout: the strided loop over every element, single-threaded.
template <typename T>
void FoldStrided(const Tensor& x, const std::vector<bool>& mask, bool prod,
                 T* py, int64_t n_out) {
  const T* px = x.data<T>();
  std::fill(py, py + n_out, prod ? T(1) : T(0));
  Shape kept;
  for (int d = 0; d < x.rank(); ++d) kept.push_back(mask[d] ? 1 : x.dim(d));
  const Shape sy = BroadcastStrides(kept, x.rank());
  const Shape sx = RowMajorStrides(x.shape());
  if (prod) {
    ForEachStrided(x.shape(), sx, sy,
                   [&](int64_t, int64_t i, int64_t j) { py[j] *= px[i]; });
  } else {
    ForEachStrided(x.shape(), sx, sy,
                   [&](int64_t, int64_t i, int64_t j) { py[j] += px[i]; });
  }
}

// y[o] = fold of x over the reduced dims, each output's elements folded in
// one pass on one thread (results do not depend on the thread count). The
// common layouts after GroupDims get loops of their own: all reduced, [K, R]
// (rows), [R, K] (columns), [K1, R, K2]; others take the strided loop.
template <typename T>
void Reduce(const Tensor& x, const std::vector<bool>& mask, bool prod, T* py,
            int64_t n_out) {
  const T* px = x.data<T>();
  const ReductionGroups g = GroupDims(x.shape(), mask);
  const int groups = static_cast<int>(g.sizes.size());
  if (x.num_elements() == 0 || groups == 0 || (groups == 1 && !g.reduced[0])) {
    // Nothing to fold (an empty input: every output is the identity) or
    // nothing reduced but dims of 1: a copy.
    for (int64_t o = 0; o < n_out; ++o) {
      py[o] = x.num_elements() == 0 ? (prod ? T(1) : T(0)) : px[o];
    }
  } else if (groups == 1) {
    FoldAll(px, g.sizes[0], prod, py);
  } else if (groups == 2 && !g.reduced[0]) {  // [K, R]
    // Sums through VecRowSums (fused loops' row sums give the same bits).
    const int64_t r_count = g.sizes[1];
    ParallelRange(g.sizes[0], std::max<int64_t>(1, kElementwiseGrain / r_count),
                  [&](int64_t begin, int64_t end) {
                    if constexpr (std::is_floating_point_v<T>) {
                      if (!prod) {
                        VecRowSums(px + begin * r_count, end - begin, r_count,
                                   py + begin);
                        return;
                      }
                    }
                    for (int64_t k = begin; k < end; ++k) {
                      py[k] = Fold(px + k * r_count, r_count, prod);
                    }
                  });
  } else if (groups == 2) {  // [R, K]
    FoldRowsOf(px, g.sizes[0], g.sizes[1], prod, py);
  } else if (groups == 3 && !g.reduced[0]) {  // [K1, R, K2]
    const int64_t r_count = g.sizes[1], k2 = g.sizes[2];
    ParallelRange(g.sizes[0],
                  std::max<int64_t>(1, kElementwiseGrain / (r_count * k2)),
                  [&](int64_t begin, int64_t end) {
                    for (int64_t i = begin; i < end; ++i) {
                      FoldColumns(px + i * r_count * k2, r_count, k2, 0, k2,
                                  prod, py + i * k2);
                    }
                  });
  } else {
    FoldStrided(x, mask, prod, py, n_out);
  }
}

// Sum, Mean or Prod over the attr "axis" (empty: all axes), for real and
// complex dtypes (TensorFlow's CPU kernels).
absl::Status ReduceKernel(KernelContext& ctx, Reduction kind) {
  const bool prod = kind == Reduction::kProd;
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kArithmetic));
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(std::vector<bool> mask,
                   AxesMask(ctx, ctx.attrs().IntList("axis"), x.shape()));
  const bool keep_dims = ctx.attrs().Bool("keep_dims");
  Shape out_shape;
  int64_t count = 1;
  for (int i = 0; i < x.rank(); ++i) {
    if (mask[i]) count *= x.dim(i);
    if (!mask[i]) {
      out_shape.push_back(x.dim(i));
    } else if (keep_dims) {
      out_shape.push_back(1);
    }
  }
  ASSIGN_OR_RETURN(Tensor y, AllocateOutput(ctx, x.dtype(), out_shape));
  DispatchArithmetic(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* py = y.mutable_data<T>();
    Reduce<T>(x, mask, prod, py, y.num_elements());
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

// The shape of a reduction's input with the reduced dims as 1 (`kept`) and
// its output's shape (`out`: without them unless keep_dims).
void ReducedShapes(const Shape& in, const std::vector<bool>& mask,
                   bool keep_dims, Shape* kept, Shape* out) {
  for (size_t i = 0; i < in.size(); ++i) {
    kept->push_back(mask[i] ? 1 : in[i]);
    if (!mask[i] || keep_dims) out->push_back(kept->back());
  }
}

// Max's and Min's input 1 "axis" as a mask over input 0's dims: int32 or
// int64 of any shape (TensorFlow flattens it), distinct axes in
// [-rank, rank); empty reduces nothing, as in TensorFlow.
absl::StatusOr<std::vector<bool>> AxisInputMask(const KernelContext& ctx) {
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  const Tensor& a = ctx.input(1);
  const Tensor& x = ctx.input(0);
  if (a.num_elements() == 0) return std::vector<bool>(x.rank(), false);
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < a.num_elements(); ++i) axes.push_back(IndexAt(a, i));
  ASSIGN_OR_RETURN(std::vector<bool> mask, AxesMask(ctx, axes, x.shape()));
  const int64_t reduced = std::count(mask.begin(), mask.end(), true);
  if (reduced != static_cast<int64_t>(axes.size())) {  // as TensorFlow
    return ctx.InvalidArgument("axis ", a.DebugString(),
                               " contains a duplicate dimension (input ",
                               x.DebugString(), ")");
  }
  return mask;
}

// Max (max = true) or Min over input 1's axes; an empty group gives the
// reduction's identity (floating: -inf / +inf; integers: lowest / highest)
// and a NaN in a group gives NaN, as TensorFlow's kernels.
absl::Status MaxMinKernel(KernelContext& ctx, bool max) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kNumeric));
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(std::vector<bool> mask, AxisInputMask(ctx));
  Shape kept, out_shape;
  ReducedShapes(x.shape(), mask, ctx.attrs().Bool("keep_dims"), &kept,
                &out_shape);
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, x.dtype(), out_shape));
  DispatchNumeric(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Limits = std::numeric_limits<T>;
    T init;
    if constexpr (Limits::has_infinity) {
      init = max ? -Limits::infinity() : Limits::infinity();
    } else {
      init = max ? Limits::lowest() : Limits::max();
    }
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    std::fill(py, py + y.num_elements(), init);
    Shape sy = BroadcastStrides(kept, x.rank());
    Shape sx = RowMajorStrides(x.shape());
    ForEachStrided(x.shape(), sx, sy, [&](int64_t, int64_t i, int64_t j) {
      const T v = px[i];
      if ((max ? v > py[j] : v < py[j]) || v != v) py[j] = v;
    });
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// TensorFlow's _MinOrMaxGrad: dy split equally among the elements equal to
// the result in each group,
//   dx = (x == y) / sum(x == y over the group) * dy  (y, dy with kept dims).
void MaxMinBackward(GradContext& g) {
  Tensor axis = g.Input(1);
  if (!g.ok()) return;
  const Shape& in = g.InputShape(0);
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<bool> mask(rank, false);
  for (int64_t i = 0; i < axis.num_elements(); ++i) {
    const int64_t a = IndexAt(axis, i);  // the forward checked the range
    mask[a < 0 ? a + rank : a] = true;
  }
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < rank; ++i) {
    if (mask[i]) axes.push_back(i);
  }
  Shape kept, out;
  ReducedShapes(in, mask, /*keep_dims=*/false, &kept, &out);
  Tensor y = g.Reshape(g.Output(0), kept);
  Tensor indicators = g.Op("Cast", {g.Op("Equal", {y, g.Input(0)})},
                           {{"DstT", g.InputDType(0)}});
  // Sum with an empty axis attr sums everything: no axis, no sum.
  Tensor count = axes.empty() ? indicators
                              : g.Op("Sum", {indicators},
                                     {{"axis", axes}, {"keep_dims", true}});
  g.SetGrad(0, g.Mul(g.Div(indicators, count), g.Reshape(g.Grad(0), kept)));
}

Op MaxOrMin(Op op, bool max) {
  return std::move(
      op.Inputs({"input", "axis"})
          .Outputs({"output"})
          .Attr("keep_dims", false)
          .Forward([max](KernelContext& ctx) { return MaxMinKernel(ctx, max); })
          // dx = dy * (x == y) / count(x == y), per reduction group
          .Backward(MaxMinBackward)
          .SavesInputs({0, 1})
          .SavesOutputs({0})
          .NonDifferentiableInputs({1})
          .Summary(max ? "maximum over the int input `axis` (empty: none); "
                         "ties share the gradient"
                       : "minimum over the int input `axis` (empty: none); "
                         "ties share the gradient"));
}

// ArgMax (max = true) or ArgMin along the scalar input "dimension": the
// first index of the extreme value on ties, as TensorFlow's kernels.
absl::Status ArgKernel(KernelContext& ctx, bool max) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kNumeric));
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  const DType out_type = ctx.attrs().Type("output_type");
  if (out_type != DType::kInt32 && out_type != DType::kInt64) {
    return ctx.InvalidArgument("output_type must be int32 or int64, got ",
                               DTypeName(out_type));
  }
  const Tensor& x = ctx.input(0);
  const Tensor& d = ctx.input(1);
  if (d.rank() != 0) {
    return ctx.InvalidArgument("dimension must be a scalar, got ",
                               d.DebugString());
  }
  const int64_t rank = x.rank();
  int64_t dim = IndexAt(d, 0);
  if (dim < -rank || dim >= rank) {
    return ctx.InvalidArgument("dimension ", dim,
                               " is out of range [-rank, rank) for input ",
                               x.DebugString());
  }
  if (dim < 0) dim += rank;
  const int64_t n = x.dim(dim);
  if (n == 0) {
    return ctx.InvalidArgument("dimension ", dim, " of input ", x.DebugString(),
                               " is empty: no index");
  }
  if (out_type == DType::kInt32 && n > std::numeric_limits<int32_t>::max()) {
    return ctx.InvalidArgument("dimension ", dim, " of input ", x.DebugString(),
                               " is too long for int32");
  }
  Shape out_shape;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i) {
    if (i != dim) out_shape.push_back(x.dim(i));
    if (i < dim) outer *= x.dim(i);
    if (i > dim) inner *= x.dim(i);
  }
  ASSIGN_OR_RETURN(Tensor out, Allocate(ctx, out_type, out_shape));
  DispatchNumeric(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const T* p = px + o * n * inner + i;
        int64_t best = 0;
        for (int64_t k = 1; k < n; ++k) {
          if (max ? p[k * inner] > p[best * inner]
                  : p[k * inner] < p[best * inner]) {
            best = k;
          }
        }
        const int64_t at = o * inner + i;
        if (out_type == DType::kInt32) {
          out.mutable_data<int32_t>()[at] = static_cast<int32_t>(best);
        } else {
          out.mutable_data<int64_t>()[at] = best;
        }
      }
    }
  });
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

Op ArgMaxOrMin(Op op, bool max) {
  return std::move(
      op.Inputs({"input", "dimension"})
          .Outputs({"output"})
          .Attr("output_type", DType::kInt64)
          .OutputDType(DTypeRule::FromAttr("output_type"))
          .Forward([max](KernelContext& ctx) { return ArgKernel(ctx, max); })
          .NotDifferentiable()
          .Summary(max ? "index of the largest value along the scalar int "
                         "input `dimension` (the first on ties)"
                       : "index of the smallest value along the scalar int "
                         "input `dimension` (the first on ties)"));
}

}  // namespace

void RegisterReductionOps(OpRegistry& r) {
  r.Add(MaxOrMin(Op("Max"), /*max=*/true));
  r.Add(MaxOrMin(Op("Min"), /*max=*/false));
  r.Add(ArgMaxOrMin(Op("ArgMax"), /*max=*/true));
  r.Add(ArgMaxOrMin(Op("ArgMin"), /*max=*/false));
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
            // dx = broadcast(dy) * conj(product of the other elements of
            // x's group), by exclusive cumprods so zeros in x are handled;
            // conj for complex x, as TensorFlow's _ProdGrad
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Mul(g.Conj(ProdOthers(g)), ReductionGradKept(g)));
            })
            .SavesInputs({0})
            .Summary("product over `axis` (an attr; empty: all axes)"));
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
