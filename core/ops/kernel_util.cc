#include "core/ops/kernel_util.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/gemm.h"

namespace gradtape {

Shape RowMajorStrides(absl::Span<const int64_t> shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Shape BroadcastStrides(absl::Span<const int64_t> in, int out_rank) {
  Shape own = RowMajorStrides(in);
  Shape strides(out_rank, 0);
  const int pad = out_rank - static_cast<int>(in.size());
  for (int i = 0; i < static_cast<int>(in.size()); ++i) {
    strides[pad + i] = in[i] == 1 ? 0 : own[i];
  }
  return strides;
}

absl::StatusOr<Shape> BroadcastShapes(const KernelContext& ctx,
                                      absl::Span<const int64_t> a,
                                      absl::Span<const int64_t> b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      return ctx.InvalidArgument("shapes ", ShapeString(a), " and ",
                                 ShapeString(b), " do not broadcast");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

absl::StatusOr<Tensor> Transposed(const KernelContext& ctx, const Tensor& x,
                                  absl::Span<const int64_t> perm) {
  const int rank = x.rank();
  Shape out_shape(rank), in_strides = RowMajorStrides(x.shape());
  Shape strides(rank);  // input stride of each output dim
  for (int i = 0; i < rank; ++i) {
    out_shape[i] = x.dim(perm[i]);
    strides[i] = in_strides[perm[i]];
  }
  ASSIGN_OR_RETURN(Tensor y, AllocateOutput(ctx, x.dtype(), out_shape));
  DispatchAny(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    StridedCopy(out_shape, strides, px, py);
  });
  return y;
}

int64_t BroadcastLayout::rows() const {
  int64_t n = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) n *= shape[d];
  return n;
}

RowCursor::RowCursor(const BroadcastLayout& l, int64_t first)
    : l_(l), index_(l.shape.size() - 1, 0) {
  for (int d = static_cast<int>(index_.size()) - 1; d >= 0 && first > 0; --d) {
    index_[d] = first % l.shape[d];
    first /= l.shape[d];
    a_ += index_[d] * l.sa[d];
    b_ += index_[d] * l.sb[d];
  }
}

BroadcastLayout CollapseBroadcast(absl::Span<const int64_t> out,
                                  absl::Span<const int64_t> a,
                                  absl::Span<const int64_t> b) {
  const int rank = static_cast<int>(out.size());
  return CollapseStrides(out, BroadcastStrides(a, rank),
                         BroadcastStrides(b, rank));
}

BroadcastLayout CollapseStrides(absl::Span<const int64_t> out,
                                absl::Span<const int64_t> sa,
                                absl::Span<const int64_t> sb) {
  const int rank = static_cast<int>(out.size());
  BroadcastLayout l;
  for (int d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    if (!l.shape.empty() && l.sa.back() == sa[d] * out[d] &&
        l.sb.back() == sb[d] * out[d]) {
      // The previous dim steps exactly over this one in both: merge.
      l.shape.back() *= out[d];
      l.sa.back() = sa[d];
      l.sb.back() = sb[d];
      continue;
    }
    l.shape.push_back(out[d]);
    l.sa.push_back(sa[d]);
    l.sb.push_back(sb[d]);
  }
  if (l.shape.empty()) {
    l.shape = {1};
    l.sa = {0};
    l.sb = {0};
  }
  return l;
}

absl::StatusOr<Tensor> AllocateOutput(const KernelContext& ctx, DType dtype,
                                      absl::Span<const int64_t> shape) {
  absl::StatusOr<Tensor> t = Tensor::Uninitialized(dtype, shape);
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(ctx.op().name, ": ",
                                                        t.status().message()));
  }
  return t;
}

absl::StatusOr<Tensor> Allocate(const KernelContext& ctx, DType dtype,
                                absl::Span<const int64_t> shape) {
  return AllocateFilled(ctx, dtype, shape, 0.0);
}

absl::StatusOr<Tensor> AllocateFilled(const KernelContext& ctx, DType dtype,
                                      absl::Span<const int64_t> shape,
                                      double value) {
  // Filled with 0 is Empty: buffers start zeroed.
  absl::StatusOr<Tensor> t = Tensor::Filled(dtype, shape, value);
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(ctx.op().name, ": ",
                                                        t.status().message()));
  }
  return t;
}

absl::Status RequireDTypes(const KernelContext& ctx, int i, DTypes kinds) {
  const DType dtype = ctx.input(i).dtype();
  auto any = [](auto) {};
  bool ok = false;
  const char* names = "";
  switch (kinds) {
    case DTypes::kFloating:
      ok = DispatchKinds<DTypes::kFloating>(dtype, any);
      names = "float32 or float64";
      break;
    case DTypes::kInexact:
      ok = DispatchKinds<DTypes::kInexact>(dtype, any);
      names = "float32, float64, complex64 or complex128";
      break;
    case DTypes::kNumeric:
      ok = DispatchKinds<DTypes::kNumeric>(dtype, any);
      names = "float32, float64, int32 or int64";
      break;
    case DTypes::kArithmetic:
      ok = DispatchKinds<DTypes::kArithmetic>(dtype, any);
      names = "float32, float64, int32, int64, complex64 or complex128";
      break;
  }
  if (ok) return absl::OkStatus();
  return ctx.InvalidArgument("input ", i, " (", ctx.op().input_names[i],
                             ") must be ", names, ", got ",
                             ctx.input(i).DebugString());
}

absl::StatusOr<std::vector<bool>> AxesMask(const KernelContext& ctx,
                                           absl::Span<const int64_t> axes,
                                           absl::Span<const int64_t> shape) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<bool> mask(rank, axes.empty());
  for (int64_t axis : axes) {
    if (axis < -rank || axis >= rank) {
      return ctx.InvalidArgument("axis ", axis, " is out of range for shape ",
                                 ShapeString(shape));
    }
    mask[axis < 0 ? axis + rank : axis] = true;
  }
  return mask;
}

absl::StatusOr<ProductDims> MatrixDims(const KernelContext& ctx, bool tx,
                                       bool ty, const char* tx_name,
                                       const char* ty_name) {
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  const int64_t xr = x.dim(x.rank() - 2), xc = x.dim(x.rank() - 1);
  const int64_t yr = y.dim(y.rank() - 2), yc = y.dim(y.rank() - 1);
  ProductDims d{tx ? xc : xr, tx ? xr : xc, ty ? yr : yc};
  const int64_t ky = ty ? yc : yr;
  if (d.k != ky) {
    return ctx.InvalidArgument(
        "inner dimensions do not match: ", ctx.op().input_names[0], " is ",
        ShapeString(x.shape()), tx ? absl::StrCat(" (", tx_name, ")") : "",
        ", ", ctx.op().input_names[1], " is ", ShapeString(y.shape()),
        ty ? absl::StrCat(" (", ty_name, ")") : "", "; ", d.k, " != ", ky);
  }
  return d;
}

absl::StatusOr<Shape> ShapeInput(const KernelContext& ctx, int i,
                                 int64_t min_dims) {
  RETURN_IF_ERROR(ctx.RequireIndexDType(i));
  const Tensor& t = ctx.input(i);
  const std::string& name = ctx.op().input_names[i];
  const int64_t max_dims = GetTensorLimits().max_rank;
  if (t.rank() != 1 || t.dim(0) < min_dims || t.dim(0) > max_dims) {
    return ctx.InvalidArgument(name, " must be a vector of ", min_dims, " to ",
                               max_dims, " dims, got shape ",
                               ShapeString(t.shape()));
  }
  Shape shape(t.dim(0));
  for (int64_t d = 0; d < t.dim(0); ++d) {
    shape[d] = IndexAt(t, d);
    if (shape[d] < 0) {
      return ctx.InvalidArgument(name, "[", d, "] is ", shape[d],
                                 " (dims must be >= 0)");
    }
  }
  return shape;
}

absl::Status MatMulKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kInexact));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 1));
  RETURN_IF_ERROR(ctx.RequireRank(0, 2));
  RETURN_IF_ERROR(ctx.RequireRank(1, 2));
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const bool ta = ctx.attrs().Bool("transpose_a");
  const bool tb = ctx.attrs().Bool("transpose_b");
  ASSIGN_OR_RETURN(ProductDims d,
                   MatrixDims(ctx, ta, tb, "transpose_a", "transpose_b"));
  // Gemm writes every element of c (beta 0).
  ASSIGN_OR_RETURN(Tensor c, AllocateOutput(ctx, a.dtype(), {d.m, d.n}));
  absl::Status status;
  DispatchInexact(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    // transpose_* transposes (no conjugate, as TensorFlow's MatMul).
    status = Gemm<T>(ta, tb, d.m, d.n, d.k, a.data<T>(), a.dim(1), b.data<T>(),
                     b.dim(1), c.mutable_data<T>(), d.n);
  });
  RETURN_IF_ERROR(ctx.Annotate(status));
  ctx.set_output(0, std::move(c));
  return absl::OkStatus();
}

}  // namespace gradtape
