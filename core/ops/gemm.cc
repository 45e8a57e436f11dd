// Gemm: OpenBLAS for every product but the tiny ones, which stay on Eigen.
#include "core/ops/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <limits>

#include "Eigen/Core"

namespace gradtape {
namespace {

// Products below kBlasMinWork multiply-adds (m * n * k), and matrix-vector
// products (m or n is 1), run on Eigen: there a cblas call costs more than it
// saves. Measured on the AMD EPYC (AVX-512) dev machine, Debian's OpenBLAS
// 0.3.21, f32, ns per product, Eigen (SSE2 build) vs cblas_sgemm:
//
//   shape m x k x n    Eigen   OpenBLAS auto (Cooperlake)   CORETYPE=Haswell
//   4x4x4                 14                21                     63
//   8x8x8                 57                24                     83
//   10x10x10             113                31                    120
//   16x16x16             230                65                    159
//   64x2x64 (MLP)        825               131                    450
//   64x64x3 (MLP)       1150               266                   1032
//   1x256x256           2800              2600                  14400
//   256x256x1           2500              2050                   9300
//
// (f64 alike, Eigen about 2x slower, OpenBLAS a little.) The CPU's own
// kernels have a ~15 ns fixed cost; the Haswell ones (which an
// OPENBLAS_CORETYPE=Haswell environment forces, as on that machine) ~60 ns
// and a slow matrix-vector path. 512 (8x8x8) is about where the two lines
// cross in either setting.
constexpr int64_t kBlasMinWork = 512;

template <typename T>
using Matrix =
    Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMap = Eigen::Map<const Matrix<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using Map = Eigen::Map<Matrix<T>, 0, Eigen::OuterStride<>>;

template <typename T>
void EigenGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
               int64_t ldc, T beta) {
  ConstMap<T> ma(a, trans_a ? k : m, trans_a ? m : k,
                 Eigen::OuterStride<>(lda));
  ConstMap<T> mb(b, trans_b ? n : k, trans_b ? k : n,
                 Eigen::OuterStride<>(ldb));
  Map<T> mc(c, m, n, Eigen::OuterStride<>(ldc));
  auto product = [&](auto&& assign) {
    if (!trans_a && !trans_b) assign(ma * mb);
    if (!trans_a && trans_b) assign(ma * mb.transpose());
    if (trans_a && !trans_b) assign(ma.transpose() * mb);
    if (trans_a && trans_b) assign(ma.transpose() * mb.transpose());
  };
  if (beta == T(0)) {
    product([&](auto&& p) { mc.noalias() = p; });
  } else {
    if (beta != T(1)) mc *= beta;
    product([&](auto&& p) { mc.noalias() += p; });
  }
}

// OpenBLAS's integer type (blasint) is 32-bit in Debian's build.
bool FitsBlasInt(std::initializer_list<int64_t> values) {
  for (int64_t v : values) {
    if (v > std::numeric_limits<blasint>::max()) return false;
  }
  return true;
}

void BlasGemm(bool ta, bool tb, blasint m, blasint n, blasint k, const float* a,
              blasint lda, const float* b, blasint ldb, float* c, blasint ldc,
              float beta) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb,
              beta, c, ldc);
}
void BlasGemm(bool ta, bool tb, blasint m, blasint n, blasint k,
              const double* a, blasint lda, const double* b, blasint ldb,
              double* c, blasint ldc, double beta) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0, a, lda, b, ldb,
              beta, c, ldc);
}

}  // namespace

template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc,
          T beta) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // A sum of no products.
    for (int64_t i = 0; i < m; ++i) {
      T* row = c + i * ldc;
      if (beta == T(0)) {
        std::fill_n(row, n, T(0));
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] *= beta;
      }
    }
    return;
  }
  if (static_cast<double>(m) * n * k < kBlasMinWork || m == 1 || n == 1 ||
      !FitsBlasInt({m, n, k, lda, ldb, ldc})) {
    EigenGemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, beta);
    return;
  }
  BlasGemm(trans_a, trans_b, static_cast<blasint>(m), static_cast<blasint>(n),
           static_cast<blasint>(k), a, static_cast<blasint>(lda), b,
           static_cast<blasint>(ldb), c, static_cast<blasint>(ldc), beta);
}

template void Gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*,
                          int64_t, const float*, int64_t, float*, int64_t,
                          float);
template void Gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*,
                           int64_t, const double*, int64_t, double*, int64_t,
                           double);

const char* BlasCoreName() { return openblas_get_corename(); }

}  // namespace gradtape
