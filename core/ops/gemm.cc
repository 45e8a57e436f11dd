// Gemm: oneDNN for float32 products of kDnnlMinWork multiply-adds or more,
// OpenBLAS for the other products but the tiny ones, which stay on Eigen;
// large products are split in two (or more) blocks run at once by
// ParallelFor (core/ops/parallel.h), each a single-threaded library call.
//
// Why our own split rather than the libraries' threads: Debian 12's OpenBLAS
// (0.3.21) scales poorly from one thread to two at these sizes (at 256^3 often
// worse than one thread; one thread matches numpy's newer OpenBLAS, see
// docs/PERFORMANCE.md), its pthread build starts workers when it is loaded
// that busy-wait ~0.1 s after every multithreaded call (measured: 0.1 s of a
// second core burnt after one 1.7 ms 512^3 product, and bench/mlp_bench's
// remote step 30% slower for it), and in a server several sessions calling
// it at once would each start their own threads (oneDNN's OpenMP teams
// too). Split here, a product uses the cores that are free: if other
// sessions keep the pool busy, the caller simply runs every block itself.
//
// So OpenBLAS must run single-threaded: before main, while the process has
// one thread, kSingleThreaded sets OPENBLAS_NUM_THREADS=1 (the library reads
// it when loaded, and then starts no workers), and the library is opened
// with dlopen on the first product that needs it, not linked. oneDNN runs
// each block on the calling thread (SetDnnlThreads(1): no OpenMP team).
//
// Why both libraries: Debian 12's oneDNN (2.6) sgemm against OpenBLAS's
// sgemm (Cooperlake kernels), one thread, a throwaway program timing each
// on the character transformer's products and smaller ones (bench/
// kernel_bench --only=gemm times the transformer's as Gemm runs them,
// split between two threads: 1.15-1.47x): oneDNN 1.1-1.4x
// faster from 2^20 multiply-adds up (2048x64x64 1.40x, the weight
// gradients 64x256x2048 and 64x192x2048 1.30x and 1.33x; OpenBLAS spends
// part of its time zeroing c for beta = 0 and packing), about even at
// 2^18-2^19 (64^3 0.95x), and 2-5x slower below 2^16, where OpenBLAS's
// small-matrix kernels run (8^3 0.1 us against 0.3 us, 64x64x3 0.4 us
// against 1.2 us). oneDNN has no float64 or complex products.
#include "core/ops/gemm.h"

#include <cblas.h>  // declarations only: the library is opened at run time
#include <dlfcn.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <complex>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "Eigen/Core"
#include "core/base/cancellation.h"
#include "core/ops/dnnl_api.h"
#include "core/ops/parallel.h"

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

// Products of at least kParallelMinWork multiply-adds (and 64 rows or
// columns) are split between threads (ParallelBlasGemm). Median us per f32
// product, GRADTAPE_INTRA_OP_THREADS=1 vs 2, two runs, Haswell kernels:
// 96x96x96 (0.9M, not split) 14.8-15.0 vs 14.8; 64x64x256 (1.05M) 17.8-18.5
// vs 15.7-19.8; 128x128x64 (1.05M) 17.3-17.8 vs 14.9-15.4; 128x128x128
// 34.9-35.4 vs 24.6-26.0. 2^20 is about where splitting starts to pay.
constexpr double kParallelMinWork = 1 << 20;

// float32 library calls of at least kDnnlMinWork multiply-adds go to
// oneDNN (the top of the file says why), unless the library is
// GemmLibrary::kOpenBlas (GRADTAPE_GEMM=openblas) or oneDNN could not be
// opened. A split product is decided once, by its full blocks' size, so
// every block runs in the same library. (kernel_bench --only=gemm, 2
// threads, 256x64x64 in two blocks of 2^19, when such blocks went to
// oneDNN: 8.4 us OpenBLAS, 8.8 oneDNN.)
constexpr double kDnnlMinWork = 1 << 20;

GemmLibrary LibraryFromEnvironment() {
  const char* env = std::getenv("GRADTAPE_GEMM");
  return env != nullptr && std::string_view(env) == "openblas"
             ? GemmLibrary::kOpenBlas
             : GemmLibrary::kAuto;
}
std::atomic<GemmLibrary> library{LibraryFromEnvironment()};

bool UseDnnl(double work) {
  return work >= kDnnlMinWork &&
         library.load(std::memory_order_relaxed) == GemmLibrary::kAuto &&
         Dnnl().ok;
}

template <typename T>
using Matrix =
    Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMap = Eigen::Map<const Matrix<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using Map = Eigen::Map<Matrix<T>, 0, Eigen::OuterStride<>>;

// op(x) of a mapped matrix, passed to fn (each MatrixOp is its own Eigen
// expression type).
template <typename M, typename Fn>
void WithOp(const M& x, MatrixOp op, Fn&& fn) {
  switch (op) {
    case MatrixOp::kNone:
      fn(x);
      break;
    case MatrixOp::kTranspose:
      fn(x.transpose());
      break;
    case MatrixOp::kAdjoint:
      fn(x.adjoint());
      break;
  }
}

template <typename T>
void EigenGemm(MatrixOp op_a, MatrixOp op_b, int64_t m, int64_t n, int64_t k,
               const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
               int64_t ldc, T beta) {
  const bool ta = op_a != MatrixOp::kNone, tb = op_b != MatrixOp::kNone;
  ConstMap<T> ma(a, ta ? k : m, ta ? m : k, Eigen::OuterStride<>(lda));
  ConstMap<T> mb(b, tb ? n : k, tb ? k : n, Eigen::OuterStride<>(ldb));
  Map<T> mc(c, m, n, Eigen::OuterStride<>(ldc));
  if (beta != T(0) && beta != T(1)) mc *= beta;
  WithOp(ma, op_a, [&](const auto& x) {
    WithOp(mb, op_b, [&](const auto& y) {
      if (beta == T(0)) {
        mc.noalias() = x * y;
      } else {
        mc.noalias() += x * y;
      }
    });
  });
}

// OpenBLAS's integer type (blasint) is 32-bit in Debian's build.
bool FitsBlasInt(std::initializer_list<int64_t> values) {
  for (int64_t v : values) {
    if (v > std::numeric_limits<blasint>::max()) return false;
  }
  return true;
}

// Before main (see the top of the file). Overwrites a user's setting: Gemm
// does the threading, and OpenBLAS threads under it would oversubscribe.
const bool kSingleThreaded =
    setenv("OPENBLAS_NUM_THREADS", "1", /*overwrite=*/1) == 0;

// OpenBLAS (DYNAMIC_ARCH) picks its kernels by CPU family and model. A model
// newer than the library falls back to its Prescott (SSE3) kernels: Debian
// 12's 0.3.21 does so on an Emerald Rapids Xeon (family 6, model 207), where
// kernel_bench's f32 MatMul ran at 30-34 GFLOP/s with them and 190-260 with
// the AVX-512 ones (docs/PERFORMANCE.md, change 30). So, before main and
// only when the environment names no core type, OPENBLAS_CORETYPE is set
// from the CPU's features to the kernels 0.3.21 itself picks for the CPUs
// it knows with those features (CpuBlasCoreType; its source maps Skylake-X
// and Ice Lake to SkylakeX and Intel's AVX2 models to Haswell, and on the
// AVX-512 EPYC of the table below it chose Cooperlake).
// A user's setting is kept.
const bool kCoreTypeFromCpu = [] {
  const char* chosen = CpuBlasCoreType();
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || *chosen == '\0') {
    return false;
  }
  return setenv("OPENBLAS_CORETYPE", chosen, /*overwrite=*/0) == 0;
}();

// The OpenBLAS entry points Gemm uses; null if the library is missing (then
// every product runs on Eigen).
struct Blas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;
  decltype(&cblas_cgemm) cgemm = nullptr;  // complex<float>
  decltype(&cblas_zgemm) zgemm = nullptr;  // complex<double>
  decltype(&openblas_get_corename) corename = nullptr;
};

Blas LoadBlas() {
  Blas b;
  void* lib = dlopen(GRADTAPE_OPENBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return b;
  b.sgemm = reinterpret_cast<decltype(&cblas_sgemm)>(dlsym(lib, "cblas_sgemm"));
  b.dgemm = reinterpret_cast<decltype(&cblas_dgemm)>(dlsym(lib, "cblas_dgemm"));
  b.cgemm = reinterpret_cast<decltype(&cblas_cgemm)>(dlsym(lib, "cblas_cgemm"));
  b.zgemm = reinterpret_cast<decltype(&cblas_zgemm)>(dlsym(lib, "cblas_zgemm"));
  b.corename = reinterpret_cast<decltype(&openblas_get_corename)>(
      dlsym(lib, "openblas_get_corename"));
  // In case the library was loaded before main (kSingleThreaded) after all.
  if (auto set_threads = reinterpret_cast<decltype(&openblas_set_num_threads)>(
          dlsym(lib, "openblas_set_num_threads"))) {
    set_threads(1);
  }
  if (b.sgemm == nullptr || b.dgemm == nullptr || b.cgemm == nullptr ||
      b.zgemm == nullptr) {
    return Blas();
  }
  return b;
}

// Thread-safe (a function-local static); trivially destructible.
const Blas& GetBlas() {
  static const Blas blas = LoadBlas();
  return blas;
}

bool BlasAvailable() { return GetBlas().sgemm != nullptr; }

CBLAS_TRANSPOSE BlasOp(MatrixOp op) {
  switch (op) {
    case MatrixOp::kNone:
      return CblasNoTrans;
    case MatrixOp::kTranspose:
      return CblasTrans;
    case MatrixOp::kAdjoint:
      return CblasConjTrans;
  }
  return CblasNoTrans;
}

// dnnl_sgemm (float, dnnl true) or cblas_?gemm on row-major matrices; every
// size must fit blasint (FitsBlasInt). kAdjoint is kTranspose for the real
// types (Gemm maps it before calling). A status other than success from
// oneDNN (none is expected for these arguments), or OpenBLAS missing, runs
// the next of OpenBLAS and Eigen.
template <typename T>
void BlasGemm(MatrixOp op_a, MatrixOp op_b, int64_t m, int64_t n, int64_t k,
              const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
              int64_t ldc, T beta, bool dnnl) {
  if constexpr (std::is_same_v<T, float>) {
    if (dnnl) {
      SetDnnlThreads(1);
      if (Dnnl().sgemm(op_a == MatrixOp::kNone ? 'N' : 'T',
                       op_b == MatrixOp::kNone ? 'N' : 'T', m, n, k, 1.0f, a,
                       lda, b, ldb, beta, c, ldc) == dnnl_success) {
        return;
      }
    }
  }
  if (!BlasAvailable()) {
    EigenGemm(op_a, op_b, m, n, k, a, lda, b, ldb, c, ldc, beta);
    return;
  }
  const Blas& blas = GetBlas();
  const CBLAS_TRANSPOSE ta = BlasOp(op_a), tb = BlasOp(op_b);
  const blasint bm = static_cast<blasint>(m), bn = static_cast<blasint>(n),
                bk = static_cast<blasint>(k), blda = static_cast<blasint>(lda),
                bldb = static_cast<blasint>(ldb),
                bldc = static_cast<blasint>(ldc);
  if constexpr (std::is_same_v<T, float>) {
    blas.sgemm(CblasRowMajor, ta, tb, bm, bn, bk, 1.0f, a, blda, b, bldb, beta,
               c, bldc);
  } else if constexpr (std::is_same_v<T, double>) {
    blas.dgemm(CblasRowMajor, ta, tb, bm, bn, bk, 1.0, a, blda, b, bldb, beta,
               c, bldc);
  } else {  // the complex ones take alpha and beta by pointer
    const T one(1);
    auto gemm =
        std::is_same_v<T, std::complex<float>> ? blas.cgemm : blas.zgemm;
    gemm(CblasRowMajor, ta, tb, bm, bn, bk, &one, a, blda, b, bldb, &beta, c,
         bldc);
  }
}

// One BLAS product split into row blocks of c (m >= n) or column blocks,
// run by ParallelFor. Blocks are whole multiples of 32 rows or columns (the
// register blocking of the kernels divides 32). A product of more than
// ParallelismDegree() * kMaxBlockWork multiply-adds is cut into a grid of
// square-ish tiles of c instead (see BlockGrid), so that a cancelled product
// stops within one tile; each block first polls `cancel` (may be null) and
// is skipped once it is requested.
//
// kMaxBlockWork: 2^30 multiply-adds, ~20-40 ms on one core of the dev
// machine; a tile of 8192^3 is 352 x 352 x 8192. The tiles re-pack their
// panels of a and b (k * (rows + cols) elements per tile, under 1/150 of
// the tile's multiply-adds at these sizes).
constexpr double kMaxBlockWork = 1 << 30;

struct BlockGrid {
  int64_t row_block, col_block;  // multiples of 32 (or all of m / n)
  int64_t row_blocks, col_blocks;
};

BlockGrid GridFor(int64_t m, int64_t n, int64_t k) {
  const double work = static_cast<double>(m) * n * k;
  const int64_t degree = ParallelismDegree();
  BlockGrid g;
  if (work <= degree * kMaxBlockWork) {  // one split along the longer side
    const bool split_rows = m >= n;
    const int64_t extent = split_rows ? m : n;
    const int64_t parts =
        std::max<int64_t>(1, std::min<int64_t>(degree, extent / 32));
    const int64_t block = (extent / parts + 31) / 32 * 32;
    g.row_block = split_rows ? block : m;
    g.col_block = split_rows ? n : block;
  } else {  // square tiles of at most kMaxBlockWork, at least 256 wide
    const int64_t edge = std::max<int64_t>(
        256, static_cast<int64_t>(std::sqrt(kMaxBlockWork / k)) / 32 * 32);
    g.row_block = std::min(edge, m);
    g.col_block = std::min(edge, n);
  }
  g.row_blocks = (m + g.row_block - 1) / g.row_block;
  g.col_blocks = (n + g.col_block - 1) / g.col_block;
  return g;
}

template <typename T>
void ParallelBlasGemm(MatrixOp ta, MatrixOp tb, int64_t m, int64_t n, int64_t k,
                      const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                      int64_t ldc, T beta, Cancellation* cancel) {
  const BlockGrid g = GridFor(m, n, k);
  const bool dnnl = std::is_same_v<T, float> &&
                    UseDnnl(static_cast<double>(g.row_block) * g.col_block * k);
  ParallelFor(static_cast<int>(g.row_blocks * g.col_blocks), [&](int part) {
    if (cancel != nullptr && cancel->Poll()) return;
    const int64_t r0 = part / g.col_blocks * g.row_block;
    const int64_t c0 = part % g.col_blocks * g.col_block;
    const int64_t rows = std::min(g.row_block, m - r0);
    const int64_t cols = std::min(g.col_block, n - c0);
    if (rows <= 0 || cols <= 0) return;
    // rows [r0, r0 + rows) of op(a), columns [c0, c0 + cols) of op(b).
    const bool trans_a = ta != MatrixOp::kNone;
    const bool trans_b = tb != MatrixOp::kNone;
    BlasGemm(ta, tb, rows, cols, k, trans_a ? a + r0 : a + r0 * lda, lda,
             trans_b ? b + c0 * ldb : b + c0, ldb, c + r0 * ldc + c0, ldc, beta,
             dnnl);
  });
}

// A small float32 product with op(b) = b^T and a short inner dimension
// (the attention's q k^T per head: 64 x 64 x 16, and its gradient's
// dP = dO v^T) runs faster as b^T copied into scratch and OpenBLAS's
// non-transposed kernel than as its transposed one. Throwaway program, one
// thread, us per product, NT / copy + NN: 64x64x16 1.67 / 1.42, 32x32x32
// 1.16 / 0.83, 64x16x64 1.69 / 1.71, 64x64x64 5.77 / 5.84, 128x128x64
// 19.2 / 22.2; kernel_bench --only=transformer, 2 threads, BatchMatMulV2
// [32,4,64,16] x [32,4,64,16]^T: 144-151 -> 94-96 us. So: k <= 32 and m
// >= 32 (the copy, k * n elements, is paid back over m rows), below the
// products Gemm splits.
constexpr int64_t kTransposeBMaxK = 32;
constexpr int64_t kTransposeBMinRows = 32;

bool TransposeBFirst(int64_t m, int64_t n, int64_t k, double work) {
  return work < kParallelMinWork && k <= kTransposeBMaxK &&
         m >= kTransposeBMinRows && BlasAvailable();
}

// c = op(a) b^T + beta c, b [n, k], through b^T copied into per-thread
// scratch ([k, n]: under 2^15 elements, as m * n * k < 2^20 and m >= 32).
void TransposedBGemm(MatrixOp op_a, int64_t m, int64_t n, int64_t k,
                     const float* a, int64_t lda, const float* b, int64_t ldb,
                     float* c, int64_t ldc, float beta) {
  thread_local std::vector<float> bt;
  bt.resize(static_cast<size_t>(k * n));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t p = 0; p < k; ++p) bt[p * n + j] = b[j * ldb + p];
  }
  BlasGemm(op_a, MatrixOp::kNone, m, n, k, a, lda, bt.data(), n, c, ldc, beta,
           /*dnnl=*/false);
}

// A product with a long inner dimension and a small result (a weight
// gradient: [64, 256] summed over 2048 rows of a batch) is split along k
// instead: part p multiplies rows [k0, k1) of op(b) by columns [k0, k1) of
// op(a), part 0 into c (with beta), the others into scratch, then c +=
// each part's result in order. Each thread then reads the rows of both
// operands that it wrote itself in the steps before (parallel.h: the
// same share of rows every call), where a split of c's columns made each
// read every row. The parts follow the shape only, never the thread count,
// so the bits do not either. Per-step timing of the character
// transformer, 2 threads, us, column split / k split: docs/PERFORMANCE.md,
// change 36.
constexpr int64_t kKPart = 512;  // rows of k per part, at least
constexpr int64_t kMaxKParts = 8;
// The parts' results: a transient buffer outside the memory budget, so
// small (the transformer's largest: 3 x 64 x 256 floats, 192 KiB).
constexpr int64_t kMaxKScratchBytes = 1 << 20;

int64_t KParts(int64_t m, int64_t n, int64_t k, int64_t element_bytes) {
  if (k < 4 * std::max(m, n) || k < 2 * kKPart) return 1;
  int64_t parts = std::min(kMaxKParts, k / kKPart);
  while (parts > 1 && (parts - 1) * m * n * element_bytes > kMaxKScratchBytes) {
    --parts;
  }
  // A part is one block: no more than a tile of the grid (cancellation).
  if (static_cast<double>(m) * n * k / parts > kMaxBlockWork) return 1;
  return parts;
}

template <typename T>
void KSplitGemm(MatrixOp ta, MatrixOp tb, int64_t m, int64_t n, int64_t k,
                int64_t parts, const T* a, int64_t lda, const T* b, int64_t ldb,
                T* c, int64_t ldc, T beta, Cancellation* cancel) {
  const bool dnnl = std::is_same_v<T, float> &&
                    UseDnnl(static_cast<double>(m) * n * (k / parts));
  // Every element is written by its part (beta 0) before it is read.
  std::unique_ptr<T[]> scratch(new T[static_cast<size_t>((parts - 1) * m * n)]);
  ParallelFor(static_cast<int>(parts), [&](int part) {
    if (cancel != nullptr && cancel->Poll()) return;
    const int64_t k0 = k * part / parts, k1 = k * (part + 1) / parts;
    // Columns [k0, k1) of op(a): rows of a when it is transposed.
    const T* pa = ta != MatrixOp::kNone ? a + k0 * lda : a + k0;
    const T* pb = tb != MatrixOp::kNone ? b + k0 : b + k0 * ldb;
    if (part == 0) {
      BlasGemm(ta, tb, m, n, k1 - k0, pa, lda, pb, ldb, c, ldc, beta, dnnl);
    } else {
      BlasGemm(ta, tb, m, n, k1 - k0, pa, lda, pb, ldb,
               scratch.get() + (part - 1) * m * n, n, T(0), dnnl);
    }
  });
  // Parts skipped after a cancellation left their scratch unwritten; the
  // caller fails and drops c.
  if (cancel != nullptr && cancel->Requested()) return;
  for (int64_t i = 0; i < m; ++i) {
    T* row = c + i * ldc;
    for (int64_t part = 1; part < parts; ++part) {
      const T* add = scratch.get() + ((part - 1) * m + i) * n;
      for (int64_t j = 0; j < n; ++j) row[j] += add[j];
    }
  }
}

}  // namespace

template <typename T>
absl::Status Gemm(MatrixOp op_a, MatrixOp op_b, int64_t m, int64_t n, int64_t k,
                  const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                  int64_t ldc, T beta) {
  Cancellation* const cancel = CurrentCancellation();
  if (cancel != nullptr && cancel->Requested()) {
    return cancel->Check("matrix product");
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) {  // A sum of no products.
    for (int64_t i = 0; i < m; ++i) {
      T* row = c + i * ldc;
      if (beta == T(0)) {
        std::fill_n(row, n, T(0));
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] *= beta;
      }
    }
    return absl::OkStatus();
  }
  if constexpr (std::is_floating_point_v<T>) {  // no conjugate to take
    if (op_a == MatrixOp::kAdjoint) op_a = MatrixOp::kTranspose;
    if (op_b == MatrixOp::kAdjoint) op_b = MatrixOp::kTranspose;
  }
  const double work = static_cast<double>(m) * n * k;
  if (work >= kBlasMinWork && m > 1 && n > 1 &&
      FitsBlasInt({m, n, k, lda, ldb, ldc}) &&
      (BlasAvailable() || (std::is_same_v<T, float> && UseDnnl(work)))) {
    if constexpr (std::is_same_v<T, float>) {
      if (op_b != MatrixOp::kNone && TransposeBFirst(m, n, k, work)) {
        TransposedBGemm(op_a, m, n, k, a, lda, b, ldb, c, ldc, beta);
        return absl::OkStatus();
      }
    }
    const int64_t k_parts =
        work >= kParallelMinWork ? KParts(m, n, k, sizeof(T)) : 1;
    if (k_parts > 1) {
      KSplitGemm(op_a, op_b, m, n, k, k_parts, a, lda, b, ldb, c, ldc, beta,
                 cancel);
      if (cancel != nullptr) return cancel->Check("matrix product");
      return absl::OkStatus();
    }
    // One thread still cuts a product above one block, for cancellation.
    if (work >= kParallelMinWork && std::max(m, n) >= 64 &&
        (ParallelismDegree() > 1 || work > kMaxBlockWork)) {
      ParallelBlasGemm(op_a, op_b, m, n, k, a, lda, b, ldb, c, ldc, beta,
                       cancel);
      // Blocks skipped after a request leave c partly written.
      if (cancel != nullptr) return cancel->Check("matrix product");
    } else {
      BlasGemm(op_a, op_b, m, n, k, a, lda, b, ldb, c, ldc, beta,
               std::is_same_v<T, float> && UseDnnl(work));
    }
    return absl::OkStatus();
  }
  EigenGemm(op_a, op_b, m, n, k, a, lda, b, ldb, c, ldc, beta);
  return absl::OkStatus();
}

template absl::Status Gemm<float>(MatrixOp, MatrixOp, int64_t, int64_t, int64_t,
                                  const float*, int64_t, const float*, int64_t,
                                  float*, int64_t, float);
template absl::Status Gemm<double>(MatrixOp, MatrixOp, int64_t, int64_t,
                                   int64_t, const double*, int64_t,
                                   const double*, int64_t, double*, int64_t,
                                   double);
template absl::Status Gemm<std::complex<float>>(
    MatrixOp, MatrixOp, int64_t, int64_t, int64_t, const std::complex<float>*,
    int64_t, const std::complex<float>*, int64_t, std::complex<float>*, int64_t,
    std::complex<float>);
template absl::Status Gemm<std::complex<double>>(
    MatrixOp, MatrixOp, int64_t, int64_t, int64_t, const std::complex<double>*,
    int64_t, const std::complex<double>*, int64_t, std::complex<double>*,
    int64_t, std::complex<double>);

const char* CpuBlasCoreType() {
#if defined(__x86_64__)
  __builtin_cpu_init();  // runs before main, maybe before libgcc's own init
  // __builtin_cpu_supports also checks that the OS saves the registers.
  const bool avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (avx512) {
    // CPUID leaf 7, subleaf 1, EAX bit 5: AVX512_BF16.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool bf16 = __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 &&
                      (eax & (1u << 5)) != 0;
    return bf16 ? "Cooperlake" : "SkylakeX";
  }
  // Intel's AVX2 CPUs all get Haswell's; AMD's without AVX-512 (Zen 1-3)
  // are known to 0.3.21 and keep its Zen choice.
  if (__builtin_cpu_is("intel") && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma")) {
    return "Haswell";
  }
#endif
  return "";
}

bool BlasCoreTypeFromCpu() { return kCoreTypeFromCpu; }

void SetGemmLibrary(GemmLibrary l) { library.store(l); }
GemmLibrary GetGemmLibrary() { return library.load(); }

std::string GemmKernelsName() {
  std::string name = std::string("OpenBLAS ") + BlasCoreName();
  if (library.load() == GemmLibrary::kAuto && Dnnl().ok) {
    name = "oneDNN (float32, 2^20 multiply-adds and more), " + name;
  }
  return name;
}

const char* BlasCoreName() {
  if (!BlasAvailable()) return "none (OpenBLAS not found; Eigen)";
  return GetBlas().corename != nullptr ? GetBlas().corename() : "unknown";
}

}  // namespace gradtape
