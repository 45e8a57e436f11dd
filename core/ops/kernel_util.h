// Building blocks shared by the kernels of every op family: numpy
// broadcasting, strided iteration, axis normalization, and the generic
// elementwise kernels.
#ifndef GRADTAPE_CORE_OPS_KERNEL_UTIL_H_
#define GRADTAPE_CORE_OPS_KERNEL_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/status_macros.h"
#include "core/ops/parallel.h"
#include "core/ops/vector_math.h"
#include "core/registry/op_registry.h"
#include "core/tensor/tensor.h"

namespace gradtape {

// Row-major strides (in elements) of `shape`.
Shape RowMajorStrides(absl::Span<const int64_t> shape);

// Strides of `in` laid against an output of rank `out_rank` (aligned to the
// right, numpy style): 0 where `in` has no dim or a dim of 1.
Shape BroadcastStrides(absl::Span<const int64_t> in, int out_rank);

// The numpy broadcast of two shapes, or INVALID_ARGUMENT naming both.
absl::StatusOr<Shape> BroadcastShapes(const KernelContext& ctx,
                                      absl::Span<const int64_t> a,
                                      absl::Span<const int64_t> b);

// Calls fn(out_index, a_offset, b_offset) for every element of `shape`, in
// row-major order, with offsets following strides `sa` and `sb`.
template <typename Fn>
void ForEachStrided(absl::Span<const int64_t> shape,
                    absl::Span<const int64_t> sa, absl::Span<const int64_t> sb,
                    Fn&& fn) {
  const int rank = static_cast<int>(shape.size());
  const int64_t n = NumElements(shape);
  if (n == 0) return;
  if (rank == 0) {
    fn(0, 0, 0);
    return;
  }
  Shape index(rank, 0);
  int64_t a = 0, b = 0;
  const int64_t inner = shape[rank - 1];
  const int64_t ia = sa[rank - 1], ib = sb[rank - 1];
  for (int64_t out = 0; out < n;) {
    int64_t ai = a, bi = b;
    for (int64_t k = 0; k < inner; ++k, ++out, ai += ia, bi += ib) {
      fn(out, ai, bi);
    }
    // Advance the odometer over the outer dims.
    for (int d = rank - 2; d >= 0; --d) {
      a += sa[d];
      b += sb[d];
      if (++index[d] < shape[d]) break;
      a -= sa[d] * shape[d];
      b -= sb[d] * shape[d];
      index[d] = 0;
    }
  }
}

// The broadcast of two operands against an output, with dims of 1 dropped
// and adjacent dims merged wherever both operands step through them as one
// (rank >= 1; a scalar output is [1]). The last dim is the inner loop.
struct BroadcastLayout {
  Shape shape, sa, sb;
  int64_t inner() const { return shape.back(); }
  int64_t rows() const;  // elements / inner()
};

// The offsets into a and b of the first element of consecutive rows of a
// layout, from row `first` on. The constructor divides `first` by the outer
// dims once; Next steps their index (an odometer). Dividing for every row
// cost more than the row itself on rows of 16 to 64 elements (transposes
// and broadcasts of rank 3 and up).
class RowCursor {
 public:
  RowCursor(const BroadcastLayout& l, int64_t first);
  int64_t a() const { return a_; }
  int64_t b() const { return b_; }
  // To the next row.
  void Next() {
    for (int d = static_cast<int>(index_.size()) - 1; d >= 0; --d) {
      a_ += l_.sa[d];
      b_ += l_.sb[d];
      if (++index_[d] < l_.shape[d]) return;
      a_ -= l_.sa[d] * l_.shape[d];
      b_ -= l_.sb[d] * l_.shape[d];
      index_[d] = 0;
    }
  }

 private:
  const BroadcastLayout& l_;
  Shape index_;  // of dims [0, rank - 1)
  int64_t a_ = 0, b_ = 0;
};
BroadcastLayout CollapseBroadcast(absl::Span<const int64_t> out,
                                  absl::Span<const int64_t> a,
                                  absl::Span<const int64_t> b);
// The same from the operands' strides against `out` (0 where they
// broadcast).
BroadcastLayout CollapseStrides(absl::Span<const int64_t> out,
                                absl::Span<const int64_t> sa,
                                absl::Span<const int64_t> sb);

// y[o] = x[offset(o)] for every element o of `shape` in row-major order,
// with the offset following `strides` (0 along a broadcast dim): a
// transpose or a broadcast, in parallel over rows.
template <typename T>
void StridedCopy(absl::Span<const int64_t> shape,
                 absl::Span<const int64_t> strides, const T* x, T* y) {
  if (NumElements(shape) == 0) return;
  const BroadcastLayout l = CollapseStrides(shape, strides, strides);
  const int64_t inner = l.inner(), stride = l.sa.back();
  ParallelRange(l.rows(), std::max<int64_t>(1, kElementwiseGrain / inner),
                [&](int64_t begin, int64_t end) {
                  RowCursor cursor(l, begin);
                  for (int64_t row = begin; row < end; ++row, cursor.Next()) {
                    const T* src = x + cursor.a();
                    T* dst = y + row * inner;
                    if (stride == 1) {
                      std::copy(src, src + inner, dst);
                    } else if (stride == 0) {  // a broadcast along the row
                      std::fill(dst, dst + inner, *src);
                    } else {
                      for (int64_t k = 0; k < inner; ++k)
                        dst[k] = src[k * stride];
                    }
                  }
                });
}

// The four arithmetic operations as BinaryKernel functions: on float32 and
// float64 rows of unit or broadcast stride they run as VecBinary, the loop
// compiled for the CPU's widest vectors (this file is built for the
// baseline ISA); other dtypes and strides use the operator. (vector_math.cc
// has its own copy of this switch: a template shared with the per-ISA
// functions could be emitted with AVX-512 code and linked into baseline
// callers.)
template <VecArith kOp>
struct ArithFn {
  static constexpr VecArith kVec = kOp;
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (kOp == VecArith::kAdd) return a + b;
    if constexpr (kOp == VecArith::kSub) return a - b;
    if constexpr (kOp == VecArith::kMul) return a * b;
    if constexpr (kOp == VecArith::kDiv) return a / b;
  }
};
template <typename F>
struct IsArithFn : std::false_type {};
template <VecArith kOp>
struct IsArithFn<ArithFn<kOp>> : std::true_type {};

// z[i] = f(a[i * sa], b[i * sb]) for i in [0, n), with the unit-stride and
// broadcast-scalar cases as separate loops the compiler vectorizes.
template <typename T, typename F>
void BinaryRow(int64_t n, const T* a, int64_t sa, const T* b, int64_t sb, T* z,
               F f) {
  if constexpr (IsArithFn<F>::value &&
                (std::is_same_v<T, float> || std::is_same_v<T, double>)) {
    if ((sa == 0 || sa == 1) && (sb == 0 || sb == 1) && sa + sb > 0) {
      VecBinary(F::kVec, a, sa, b, sb, z, n);
      return;
    }
  }
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) z[i] = f(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const T s = b[0];
    for (int64_t i = 0; i < n; ++i) z[i] = f(a[i], s);
  } else if (sa == 0 && sb == 1) {
    const T s = a[0];
    for (int64_t i = 0; i < n; ++i) z[i] = f(s, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) z[i] = f(a[i * sa], b[i * sb]);
  }
}

// The dtype sets a kernel accepts.
enum class DTypes {
  kFloating,    // float32, float64
  kInexact,     // floating + complex64, complex128
  kNumeric,     // floating + int32, int64
  kArithmetic,  // numeric + complex
};
// INVALID_ARGUMENT naming the op, input i and the accepted dtypes.
absl::Status RequireDTypes(const KernelContext& ctx, int i, DTypes kinds);
// Calls fn(T{}) for dtype if it is in kKinds (only those T are compiled).
template <DTypes kKinds, typename Fn>
bool DispatchKinds(DType dtype, Fn&& fn) {
  if constexpr (kKinds == DTypes::kFloating) {
    return DispatchFloat(dtype, fn);
  } else if constexpr (kKinds == DTypes::kInexact) {
    return DispatchInexact(dtype, fn);
  } else if constexpr (kKinds == DTypes::kNumeric) {
    return DispatchNumeric(dtype, fn);
  } else {
    return DispatchArithmetic(dtype, fn);
  }
}

// Element i of an int32 or int64 tensor (the caller checked the dtype).
inline int64_t IndexAt(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kInt32 ? t.data<int32_t>()[i]
                                    : t.data<int64_t>()[i];
}

// Input i as a shape (Fill's dims, ScatterNd's shape, a random op's shape,
// StridedSliceGrad's shape): an int32 / int64 vector of min_dims to
// max_rank (core/tensor/tensor.h) entries, each >= 0. INVALID_ARGUMENT
// naming the op and the input otherwise.
absl::StatusOr<Shape> ShapeInput(const KernelContext& ctx, int i,
                                 int64_t min_dims = 0);

// Tensor::Empty (checked, charged, zero-filled) with the op's name in front
// of an error.
absl::StatusOr<Tensor> Allocate(const KernelContext& ctx, DType dtype,
                                absl::Span<const int64_t> shape);
// Tensor::Uninitialized with the op's name in front of an error: for an
// output the kernel writes in full (every element, whatever the shapes and
// attrs), which tests/core/ops/poison_test.cc checks for every op sample.
absl::StatusOr<Tensor> AllocateOutput(const KernelContext& ctx, DType dtype,
                                      absl::Span<const int64_t> shape);
// Same, every element `value`.
absl::StatusOr<Tensor> AllocateFilled(const KernelContext& ctx, DType dtype,
                                      absl::Span<const int64_t> shape,
                                      double value);

// x with its dims permuted: dim i of the result is dim perm[i] of x (perm
// is a permutation of x's dims, checked by the caller).
absl::StatusOr<Tensor> Transposed(const KernelContext& ctx, const Tensor& x,
                                  absl::Span<const int64_t> perm);

// Axes in [-rank, rank) -> a mask of length rank; empty `axes` selects all.
// INVALID_ARGUMENT naming the op, the axis and the shape when out of range.
absl::StatusOr<std::vector<bool>> AxesMask(const KernelContext& ctx,
                                           absl::Span<const int64_t> axes,
                                           absl::Span<const int64_t> shape);

// The matrix dims of a product: op(x) is [m, k], op(y) is [k, n].
struct ProductDims {
  int64_t m, k, n;
};

// Checks that op(x) op(y) is defined for the trailing two dims of inputs 0
// and 1 (transposed per tx, ty, attrs named tx_name, ty_name) and returns
// its dims; INVALID_ARGUMENT naming both inputs and shapes otherwise.
absl::StatusOr<ProductDims> MatrixDims(const KernelContext& ctx, bool tx,
                                       bool ty, const char* tx_name,
                                       const char* ty_name);

// product = op(a) @ op(b) for 2-D a, b of one floating or complex dtype,
// per the bool attrs transpose_a and transpose_b (a transpose, never a
// conjugate, as TF's MatMul): MatMul's and SparseMatMul's forward
// (SparseMatMul refuses complex before).
absl::Status MatMulKernel(KernelContext& ctx);

// y = f(x) elementwise (f is a generic lambda on Eigen arrays:
// [](const auto& x) { return x.exp(); }), for inputs of the dtypes `kinds`.
template <DTypes kKinds, typename F>
absl::Status UnaryKernel(KernelContext& ctx, F f) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, kKinds));
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(Tensor y, AllocateOutput(ctx, x.dtype(), x.shape()));
  DispatchKinds<kKinds>(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    auto in = x.flat<T>();
    auto out = y.flat<T>();
    ParallelRange(
        x.num_elements(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
          out.segment(begin, end - begin) = f(in.segment(begin, end - begin));
        });
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}
template <typename F>
absl::Status UnaryFloatKernel(KernelContext& ctx, F f) {
  return UnaryKernel<DTypes::kFloating>(ctx, f);
}

// z = f(x, y) elementwise with numpy broadcasting; both inputs of one dtype
// from kKinds. f is a generic scalar lambda: [](auto a, auto b) { return a +
// b; }.
template <DTypes kKinds, typename F>
absl::Status BinaryKernel(KernelContext& ctx, F f) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, kKinds));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 1));
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(ctx, a.shape(), b.shape()));
  ASSIGN_OR_RETURN(Tensor z, AllocateOutput(ctx, a.dtype(), shape));
  if (z.num_elements() == 0) {
    ctx.set_output(0, std::move(z));
    return absl::OkStatus();
  }
  const BroadcastLayout l = CollapseBroadcast(shape, a.shape(), b.shape());
  const int64_t inner = l.inner(), rows = l.rows();
  const int64_t ia = l.sa.back(), ib = l.sb.back();
  DispatchKinds<kKinds>(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pz = z.mutable_data<T>();
    if (rows == 1) {
      ParallelRange(inner, kElementwiseGrain, [&](int64_t begin, int64_t end) {
        BinaryRow(end - begin, pa + begin * ia, ia, pb + begin * ib, ib,
                  pz + begin, f);
      });
      return;
    }
    ParallelRange(rows, std::max<int64_t>(1, kElementwiseGrain / inner),
                  [&](int64_t begin, int64_t end) {
                    RowCursor cursor(l, begin);
                    for (int64_t row = begin; row < end; ++row, cursor.Next()) {
                      BinaryRow(inner, pa + cursor.a(), ia, pb + cursor.b(), ib,
                                pz + row * inner, f);
                    }
                  });
  });
  ctx.set_output(0, std::move(z));
  return absl::OkStatus();
}

}  // namespace gradtape

#endif  // GRADTAPE_CORE_OPS_KERNEL_UTIL_H_
