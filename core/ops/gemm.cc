// Gemm: OpenBLAS for every product but the tiny ones, which stay on Eigen.
//
// OpenBLAS is opened with dlopen on the first product that needs it, not
// linked: its pthread build starts its worker threads when it is loaded, and
// each worker busy-waits (sched_yield) for 2^OPENBLAS_THREAD_TIMEOUT cycles,
// default 2^28 (~0.1 s), after start and after every multithreaded call
// before it sleeps. Measured here, a 512^3 product (1.7 ms) cost 0.1 s of a
// second core afterwards, and the mere loading of the library made
// bench/mlp_bench's remote step (client and server threads on the 2 cores,
// all within that first 0.1 s) 30% slower. The library reads the variable
// once, when it is loaded; so before main, while the process has one thread,
// kThreadTimeoutSet puts 20 (~0.4 ms of spinning) into the environment
// unless it is already set, and the library is loaded only later.
#include "core/ops/gemm.h"

#include <cblas.h>  // declarations only: the library is opened at run time
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
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

// Before main: OpenBLAS's workers spin for 2^20 cycles, not 2^28 (see the
// top of the file), unless the environment says otherwise.
const bool kThreadTimeoutSet =
    setenv("OPENBLAS_THREAD_TIMEOUT", "20", /*overwrite=*/0) == 0;

// The OpenBLAS entry points Gemm uses; null if the library is missing (then
// every product runs on Eigen).
struct Blas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;
  decltype(&openblas_get_corename) corename = nullptr;
};

Blas LoadBlas() {
  Blas b;
  void* lib = dlopen(GRADTAPE_OPENBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return b;
  b.sgemm = reinterpret_cast<decltype(&cblas_sgemm)>(dlsym(lib, "cblas_sgemm"));
  b.dgemm = reinterpret_cast<decltype(&cblas_dgemm)>(dlsym(lib, "cblas_dgemm"));
  b.corename = reinterpret_cast<decltype(&openblas_get_corename)>(
      dlsym(lib, "openblas_get_corename"));
  if (b.sgemm == nullptr || b.dgemm == nullptr) return Blas();
  return b;
}

// Thread-safe (a function-local static); trivially destructible.
const Blas& GetBlas() {
  static const Blas blas = LoadBlas();
  return blas;
}

// false if OpenBLAS is not available.
bool BlasGemm(bool ta, bool tb, blasint m, blasint n, blasint k, const float* a,
              blasint lda, const float* b, blasint ldb, float* c, blasint ldc,
              float beta) {
  if (GetBlas().sgemm == nullptr) return false;
  GetBlas().sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                  tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb,
                  beta, c, ldc);
  return true;
}
bool BlasGemm(bool ta, bool tb, blasint m, blasint n, blasint k,
              const double* a, blasint lda, const double* b, blasint ldb,
              double* c, blasint ldc, double beta) {
  if (GetBlas().dgemm == nullptr) return false;
  GetBlas().dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                  tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0, a, lda, b, ldb,
                  beta, c, ldc);
  return true;
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
  if (static_cast<double>(m) * n * k >= kBlasMinWork && m > 1 && n > 1 &&
      FitsBlasInt({m, n, k, lda, ldb, ldc}) &&
      BlasGemm(trans_a, trans_b, static_cast<blasint>(m),
               static_cast<blasint>(n), static_cast<blasint>(k), a,
               static_cast<blasint>(lda), b, static_cast<blasint>(ldb), c,
               static_cast<blasint>(ldc), beta)) {
    return;
  }
  EigenGemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, beta);
}

template void Gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*,
                          int64_t, const float*, int64_t, float*, int64_t,
                          float);
template void Gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*,
                           int64_t, const double*, int64_t, double*, int64_t,
                           double);

const char* BlasCoreName() {
  const Blas& blas = GetBlas();
  if (blas.sgemm == nullptr) return "none (OpenBLAS not found; Eigen)";
  return blas.corename != nullptr ? blas.corename() : "unknown";
}

}  // namespace gradtape
