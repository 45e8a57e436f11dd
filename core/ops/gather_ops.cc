// N-dimensional gather and scatter: GatherNd(params, indices) and
// ScatterNd(indices, updates, shape), TensorFlow's ops.
//
// indices has shape [..., K]: each of its N = prod(indices.shape[:-1]) rows
// is a K-index into the first K dims of params (GatherNd) or of the output
// (ScatterNd), and names a slice of the remaining dims. So
//   GatherNd:  output.shape = indices.shape[:-1] + params.shape[K:]
//   ScatterNd: updates.shape = indices.shape[:-1] + shape[K:], and the
//              output (zeros of `shape`) gets each update slice added at
//              its index: duplicates add up.
// Every index is checked before anything is written; one out of range is
// INVALID_ARGUMENT naming its position and value (TensorFlow's CPU
// behaviour). Each op's gradient is the other: dparams = ScatterNd(indices,
// dy, shape(params)), dupdates = GatherNd(dy, indices), so the pair closes
// under differentiation.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {
namespace {

// indices [N, K] against `shape`: the element offset of each row's slice,
// and the slice size.
struct NdLayout {
  std::vector<int64_t> offsets;  // per row
  int64_t slice = 1;
  Shape slices_shape;  // indices.shape[:-1] + shape[K:]
};

// "indices[1,0] = [2, 3]": row `row` of indices, named by its position in
// indices.shape[:-1], and its K values.
std::string RowString(const Tensor& indices, int64_t row, int64_t k) {
  const int outer = indices.rank() - 1;
  std::vector<int64_t> pos(outer);
  int64_t rest = row;
  for (int d = outer - 1; d >= 0; --d) {
    pos[d] = rest % indices.dim(d);
    rest /= indices.dim(d);
  }
  std::vector<int64_t> values(k);
  for (int64_t j = 0; j < k; ++j) values[j] = IndexAt(indices, row * k + j);
  return absl::StrCat("indices[", absl::StrJoin(pos, ","), "] = [",
                      absl::StrJoin(values, ", "), "]");
}

// Checks indices (int32 / int64, rank >= 1, K <= rank(shape)) and every
// row against `shape` (named `what` in messages).
absl::StatusOr<NdLayout> ResolveNd(const KernelContext& ctx, int indices_input,
                                   const Shape& shape, absl::string_view what) {
  RETURN_IF_ERROR(ctx.RequireIndexDType(indices_input));
  const Tensor& indices = ctx.input(indices_input);
  if (indices.rank() < 1) {
    return ctx.InvalidArgument("indices must be at least a vector, got shape ",
                               ShapeString(indices.shape()));
  }
  const int64_t k = indices.dim(indices.rank() - 1);
  const int rank = static_cast<int>(shape.size());
  if (k > rank) {
    return ctx.InvalidArgument("indices.shape[-1] = ", k, " must be <= the ",
                               "rank of ", what, " ", ShapeString(shape));
  }
  NdLayout l;
  l.slices_shape.assign(indices.shape().begin(), indices.shape().end() - 1);
  int64_t n = 1;
  for (int64_t d : l.slices_shape) n *= d;  // <= indices' element count
  for (int d = static_cast<int>(k); d < rank; ++d) {
    l.slice *= shape[d];  // shape is an allocated tensor's: no overflow
    l.slices_shape.push_back(shape[d]);
  }
  Shape strides(k);
  for (int64_t d = k - 1, s = l.slice; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d];
  }
  l.offsets.resize(n);
  for (int64_t row = 0; row < n; ++row) {
    int64_t offset = 0;
    for (int64_t d = 0; d < k; ++d) {
      const int64_t index = IndexAt(indices, row * k + d);
      if (index < 0 || index >= shape[d]) {
        return ctx.InvalidArgument(RowString(indices, row, k),
                                   " does not index into ", what, " ",
                                   ShapeString(shape));
      }
      offset += index * strides[d];
    }
    l.offsets[row] = offset;
  }
  return l;
}

absl::Status GatherNdKernel(KernelContext& ctx) {
  const Tensor& params = ctx.input(0);
  ASSIGN_OR_RETURN(NdLayout l, ResolveNd(ctx, 1, params.shape(), "params"));
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, params.dtype(), l.slices_shape));
  DispatchAny(params.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = params.data<T>();
    T* py = y.mutable_data<T>();
    for (size_t row = 0; row < l.offsets.size(); ++row) {
      const T* from = px + l.offsets[row];
      std::copy(from, from + l.slice, py + row * l.slice);
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

absl::Status ScatterNdKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 1, DTypes::kArithmetic));
  // shape: at least 1-D, of indices' dtype.
  ASSIGN_OR_RETURN(Shape shape, ShapeInput(ctx, 2, /*min_dims=*/1));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 2));
  const Tensor& updates = ctx.input(1);
  // Allocating first checks the shape's size, which ResolveNd relies on.
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, updates.dtype(), shape));
  ASSIGN_OR_RETURN(NdLayout l, ResolveNd(ctx, 0, shape, "shape"));
  if (updates.shape() != l.slices_shape) {
    return ctx.InvalidArgument("updates has shape ",
                               ShapeString(updates.shape()),
                               ", expected indices.shape[:-1] + shape[K:] = ",
                               ShapeString(l.slices_shape));
  }
  DispatchArithmetic(updates.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pu = updates.data<T>();
    T* py = y.mutable_data<T>();
    for (size_t row = 0; row < l.offsets.size(); ++row) {
      T* to = py + l.offsets[row];
      const T* from = pu + row * l.slice;
      for (int64_t i = 0; i < l.slice; ++i) to[i] += from[i];
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

Tensor IndexVector(DType dtype, const Shape& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  if (dtype == DType::kInt32) {
    return Tensor::FromVector<int32_t>(
        {n}, std::vector<int32_t>(values.begin(), values.end()));
  }
  return Tensor::FromVector<int64_t>(
      {n}, std::vector<int64_t>(values.begin(), values.end()));
}

}  // namespace

void RegisterGatherOps(OpRegistry& r) {
  r.Add(Op("GatherNd")
            .Inputs({"params", "indices"})
            .Outputs({"output"})
            .Forward(GatherNdKernel)
            // dparams = ScatterNd(indices, dy, shape(params))
            .Backward([](GradContext& g) {
              Tensor indices = g.Input(1);
              if (!g.ok()) return;
              g.SetGrad(0, g.Op("ScatterNd", {indices, g.Grad(0),
                                              IndexVector(indices.dtype(),
                                                          g.InputShape(0))}));
            })
            .SavesInputs({1})
            .NonDifferentiableInputs({1})
            .Summary("output[i...] = params[indices[i..., :]] (slices of "
                     "params at K-indices; indices int32 or int64, out of "
                     "range is an error)"));
  r.Add(Op("ScatterNd")
            .Inputs({"indices", "updates", "shape"})
            .Outputs({"output"})
            .OutputDType(DTypeRule::SameAsInput(1))
            .Forward(ScatterNdKernel)
            // dupdates = GatherNd(dy, indices)
            .Backward([](GradContext& g) {
              g.SetGrad(1, g.Op("GatherNd", {g.Grad(0), g.Input(0)}));
            })
            .SavesInputs({0})
            .NonDifferentiableInputs({0, 2})
            .Summary("zeros(shape) with updates[i...] added at "
                     "indices[i..., :] (duplicates add up); indices and "
                     "shape int32 or int64"));
}

}  // namespace gradtape
