// Row-major matrix products for the float and complex kernels (MatMul,
// BatchMatMul, Einsum, the convolution GEMMs): one entry point in front of
// OpenBLAS.
#ifndef GRADTAPE_CORE_OPS_GEMM_H_
#define GRADTAPE_CORE_OPS_GEMM_H_

#include <complex>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace gradtape {

// How a product reads an operand: as stored, transposed, or conjugate-
// transposed (the adjoint; for a real T the same as kTranspose).
enum class MatrixOp { kNone, kTranspose, kAdjoint };

// c = op(a) * op(b) + beta * c, T float, double, std::complex<float> or
// std::complex<double>, every matrix row-major: op(a) is [m, k] (a is [k, m]
// in memory when op_a is not kNone), op(b) is [k, n] (b is [n, k] when op_b
// is not kNone), c is [m, n]; lda, ldb, ldc are the distances in elements
// between consecutive rows in memory. With beta == 0, c is only written (it
// may hold anything, NaN included). k == 0 gives beta * c.
//
// float32 products of 2^20 multiply-adds or more go to oneDNN's dnnl_sgemm,
// the others to OpenBLAS's cblas_?gemm (each library opened on first use,
// with kernels picked for the CPU at run time, and run single-threaded; see
// gemm.cc, which says why two); large products are split into blocks run at
// once on the threads of core/ops/parallel.h; tiny products and
// matrix-vector ones stay on Eigen (see kBlasMinWork in gemm.cc), as does
// everything the missing libraries would run. Thread-safe: several threads
// may call it at once (tests/core/ops/gemm_test.cc).
//
// Bits: a product gives the same bits run after run for the same shapes,
// strides and thread count (GRADTAPE_INTRA_OP_THREADS). The blocks a large
// product is split into follow the thread count, and oneDNN's order of
// summation can follow a block's shape: between thread counts, some
// float32 products can differ in the last bits (a few shapes in a sweep
// of 400; OpenBLAS's order does not depend on the block). A product with a
// long inner dimension and a small result (k >= 4 * max(m, n), 1024 or
// more: a weight gradient) is instead split along k into parts that follow
// its shape only, their results added in order: its bits do not depend on
// the thread count, but differ from the same product in one call.
//
// Cancellation: with a cancellation current on the calling thread
// (core/base/cancellation.h), Gemm returns its CANCELLED / DEADLINE_EXCEEDED
// ("matrix product: ...") at once if it is already requested, and a split
// product polls it before each block or part (large products are cut into
// blocks of at most 2^30 multiply-adds, see gemm.cc), so it stops within one
// block. c is then partly written: the caller fails and drops it. OK
// otherwise; the check on a small product is one relaxed atomic load.
template <typename T>
[[nodiscard]] absl::Status Gemm(MatrixOp op_a, MatrixOp op_b, int64_t m,
                                int64_t n, int64_t k, const T* a, int64_t lda,
                                const T* b, int64_t ldb, T* c, int64_t ldc,
                                T beta = T(0));

// The same with transposes as flags (real callers).
template <typename T>
[[nodiscard]] absl::Status Gemm(bool trans_a, bool trans_b, int64_t m,
                                int64_t n, int64_t k, const T* a, int64_t lda,
                                const T* b, int64_t ldb, T* c, int64_t ldc,
                                T beta = T(0)) {
  return Gemm<T>(trans_a ? MatrixOp::kTranspose : MatrixOp::kNone,
                 trans_b ? MatrixOp::kTranspose : MatrixOp::kNone, m, n, k, a,
                 lda, b, ldb, c, ldc, beta);
}

extern template absl::Status Gemm<float>(MatrixOp, MatrixOp, int64_t, int64_t,
                                         int64_t, const float*, int64_t,
                                         const float*, int64_t, float*, int64_t,
                                         float);
extern template absl::Status Gemm<double>(MatrixOp, MatrixOp, int64_t, int64_t,
                                          int64_t, const double*, int64_t,
                                          const double*, int64_t, double*,
                                          int64_t, double);
extern template absl::Status Gemm<std::complex<float>>(
    MatrixOp, MatrixOp, int64_t, int64_t, int64_t, const std::complex<float>*,
    int64_t, const std::complex<float>*, int64_t, std::complex<float>*, int64_t,
    std::complex<float>);
extern template absl::Status Gemm<std::complex<double>>(
    MatrixOp, MatrixOp, int64_t, int64_t, int64_t, const std::complex<double>*,
    int64_t, const std::complex<double>*, int64_t, std::complex<double>*,
    int64_t, std::complex<double>);

// Which library float32 products of 2^20 multiply-adds or more use: kAuto,
// oneDNN when it could be opened (else OpenBLAS); kOpenBlas, OpenBLAS. The
// environment variable GRADTAPE_GEMM=openblas sets kOpenBlas when the
// process starts (for comparisons); SetGemmLibrary is for tests and
// benchmarks (products already running keep the library they started
// with).
enum class GemmLibrary { kAuto, kOpenBlas };
void SetGemmLibrary(GemmLibrary library);
GemmLibrary GetGemmLibrary();

// The kernels products use, for logs and benchmark reports, e.g. "oneDNN
// (float32, 2^20 multiply-adds and more), OpenBLAS Cooperlake". Opens the
// libraries.
std::string GemmKernelsName();

// OpenBLAS's name for the kernels it chose ("SkylakeX", "Haswell", ...), for
// benchmark reports; says so if the library could not be opened (every
// product then runs on Eigen). Loads the library.
const char* BlasCoreName();

// The OpenBLAS core type this CPU's features call for ("Cooperlake" for
// AVX-512 with BF16, "SkylakeX" for AVX-512 F/CD/BW/DQ/VL, "Haswell" for an
// Intel CPU with AVX2 and FMA, "" otherwise): what gemm.cc sets
// OPENBLAS_CORETYPE to before main when the environment does not, because
// OpenBLAS falls back to its SSE3 kernels on a CPU model newer than it.
// BlasCoreTypeFromCpu(): whether it did (false when the environment named a
// core type or the CPU calls for none).
const char* CpuBlasCoreType();
bool BlasCoreTypeFromCpu();

}  // namespace gradtape

#endif  // GRADTAPE_CORE_OPS_GEMM_H_
