// Gemm (core/ops/gemm.h) against a naive product, on both sides of its
// Eigen / OpenBLAS threshold, and MatMul from several threads at once (the
// server runs sessions on several threads, each of which may call OpenBLAS).
#include "core/ops/gemm.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <complex>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/autodiff/op_executor.h"
#include "core/base/cancellation.h"
#include "core/ops/dnnl_api.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"

namespace gradtape {
namespace {

template <typename T>
std::vector<T> Random(int64_t size, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> v(size);
  for (T& x : v) {
    if constexpr (kIsComplex<T>) {
      const double re = u(gen);
      x = T(re, u(gen));
    } else {
      x = static_cast<T>(u(gen));
    }
  }
  return v;
}

// Element (i, j) of op(x), x row-major with leading dimension ld, widened to
// complex<double>.
template <typename T>
std::complex<double> OpAt(MatrixOp op, const std::vector<T>& x, int64_t ld,
                          int64_t i, int64_t j) {
  if (op == MatrixOp::kNone) return std::complex<double>(x[i * ld + j]);
  const std::complex<double> v(x[j * ld + i]);
  return op == MatrixOp::kAdjoint ? std::conj(v) : v;
}

// c = op(a) op(b) + beta * c in complex<double>, with Gemm's layout
// conventions.
template <typename T>
std::vector<std::complex<double>> Naive(MatrixOp ta, MatrixOp tb, int64_t m,
                                        int64_t n, int64_t k,
                                        const std::vector<T>& a, int64_t lda,
                                        const std::vector<T>& b, int64_t ldb,
                                        const std::vector<T>& c, int64_t ldc,
                                        T beta) {
  std::vector<std::complex<double>> out(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      std::complex<double> sum = beta == T(0)
                                     ? 0
                                     : std::complex<double>(beta) *
                                           std::complex<double>(c[i * ldc + j]);
      for (int64_t p = 0; p < k; ++p) {
        sum += OpAt(ta, a, lda, i, p) * OpAt(tb, b, ldb, p, j);
      }
      out[i * n + j] = sum;
    }
  }
  return out;
}

template <typename T>
void CheckGemm(MatrixOp ta, MatrixOp tb, int64_t m, int64_t n, int64_t k,
               T beta, int64_t pad) {
  SCOPED_TRACE(testing::Message() << "m=" << m << " n=" << n << " k=" << k
                                  << " op_a=" << static_cast<int>(ta)
                                  << " op_b=" << static_cast<int>(tb)
                                  << " beta=" << beta << " pad=" << pad);
  const bool trans_a = ta != MatrixOp::kNone, trans_b = tb != MatrixOp::kNone;
  // Leading dimensions `pad` elements wider than the rows.
  const int64_t lda = (trans_a ? m : k) + pad, ldb = (trans_b ? k : n) + pad;
  const int64_t ldc = n + pad;
  const std::vector<T> a = Random<T>((trans_a ? k : m) * lda, 1);
  const std::vector<T> b = Random<T>((trans_b ? n : k) * ldb, 2);
  std::vector<T> c = Random<T>(m * ldc, 3);
  if (beta == T(0)) {  // c must not be read
    using R = decltype(std::real(T()));
    std::fill(c.begin(), c.end(), T(std::numeric_limits<R>::quiet_NaN()));
  }
  const std::vector<std::complex<double>> want =
      Naive(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, beta);
  ASSERT_TRUE(Gemm<T>(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, c.data(),
                      ldc, beta)
                  .ok());
  const bool single =
      std::is_same_v<T, float> || std::is_same_v<T, std::complex<float>>;
  const double tol =
      (single ? 1e-5 : 1e-13) * (k + 1) * (kIsComplex<T> ? 2 : 1);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_LE(
          std::abs(std::complex<double>(c[i * ldc + j]) - want[i * n + j]), tol)
          << i << "," << j;
    }
  }
}

template <typename T>
void CheckAllShapes() {
  // Below the OpenBLAS threshold, at it, matrix-vector, the MLP's shapes,
  // and above the threshold where Gemm splits the product between threads:
  // by rows (m >= n) and by columns, in blocks that do not divide evenly.
  // Every MatrixOp on each side (kAdjoint is kTranspose for the real types).
  // With op(b) transposed, 64 x 64 x 2, 33 x 17 x 9 and 64 x 48 x 16 (an
  // attention head's q k^T) take float's copy of b^T (gemm.cc,
  // TransposeBFirst).
  const int64_t shapes[][3] = {{2, 3, 4},      {8, 8, 8},     {1, 64, 64},
                               {64, 1, 64},    {64, 64, 2},   {64, 3, 64},
                               {33, 17, 9},    {64, 48, 16},  {96, 80, 112},
                               {130, 70, 129}, {70, 200, 100}};
  const MatrixOp ops[] = {MatrixOp::kNone, MatrixOp::kTranspose,
                          MatrixOp::kAdjoint};
  for (const auto& s : shapes) {
    for (MatrixOp ta : ops) {
      for (MatrixOp tb : ops) {
        CheckGemm<T>(ta, tb, s[0], s[1], s[2], T(0), 0);
      }
    }
    CheckGemm<T>(MatrixOp::kNone, MatrixOp::kTranspose, s[0], s[1], s[2], T(1),
                 3);
    CheckGemm<T>(MatrixOp::kAdjoint, MatrixOp::kNone, s[0], s[1], s[2], T(0.5),
                 1);
  }
}

TEST(GemmTest, FloatMatchesNaive) { CheckAllShapes<float>(); }

// float32 products whose blocks reach 2^20 multiply-adds run in oneDNN
// (when it could be opened; not in sanitizer builds), the same products
// with GemmLibrary::kOpenBlas in OpenBLAS: each against the naive sum, with
// every transpose, c read (beta 1, 0.5) and padded leading dimensions. The
// shapes split by rows and by columns (300 x 150 x 100: blocks of 160 rows,
// 2.4M multiply-adds; 64 x 256 x 300, a weight gradient's: 128 columns)
// and stay whole on one thread.
TEST(GemmTest, FloatProductsMatchNaiveInEitherLibrary) {
  const GemmLibrary before = GetGemmLibrary();
  const int64_t shapes[][3] = {{300, 150, 100}, {64, 256, 300}};
  for (GemmLibrary library : {GemmLibrary::kAuto, GemmLibrary::kOpenBlas}) {
    SetGemmLibrary(library);
    SCOPED_TRACE(GemmKernelsName());
    for (const auto& s : shapes) {
      for (MatrixOp ta : {MatrixOp::kNone, MatrixOp::kTranspose}) {
        for (MatrixOp tb : {MatrixOp::kNone, MatrixOp::kTranspose}) {
          CheckGemm<float>(ta, tb, s[0], s[1], s[2], 0.0f, 0);
        }
      }
      CheckGemm<float>(MatrixOp::kNone, MatrixOp::kTranspose, s[0], s[1], s[2],
                       1.0f, 3);
      CheckGemm<float>(MatrixOp::kTranspose, MatrixOp::kNone, s[0], s[1], s[2],
                       0.5f, 1);
    }
  }
  SetGemmLibrary(before);
}

// A long inner dimension and a small result (k >= 4 * max(m, n), 1024 or
// more) is split along k into parts of at least 512 (gemm.cc, KParts):
// here 2 parts (k 1100), 3 (k 1536) and 8 (k 4100, which 8 does not
// divide), each against the naive sum with every transpose, c read (beta
// 1 and 0.5) and padded leading dimensions; float32 in either library and
// float64.
template <typename T>
void CheckKSplitShapes() {
  const int64_t shapes[][3] = {{40, 30, 1100}, {64, 96, 1536}, {24, 40, 4100}};
  for (const auto& s : shapes) {
    for (MatrixOp ta : {MatrixOp::kNone, MatrixOp::kTranspose}) {
      for (MatrixOp tb : {MatrixOp::kNone, MatrixOp::kTranspose}) {
        CheckGemm<T>(ta, tb, s[0], s[1], s[2], T(0), 0);
      }
    }
    CheckGemm<T>(MatrixOp::kNone, MatrixOp::kTranspose, s[0], s[1], s[2], T(1),
                 3);
    CheckGemm<T>(MatrixOp::kTranspose, MatrixOp::kNone, s[0], s[1], s[2],
                 T(0.5), 1);
  }
}

TEST(GemmTest, LongInnerDimensionsSplitAlongKMatchNaive) {
  const GemmLibrary before = GetGemmLibrary();
  for (GemmLibrary library : {GemmLibrary::kAuto, GemmLibrary::kOpenBlas}) {
    SetGemmLibrary(library);
    SCOPED_TRACE(GemmKernelsName());
    CheckKSplitShapes<float>();
  }
  SetGemmLibrary(before);
  CheckKSplitShapes<double>();
}

// The kernels' name says which libraries run: oneDNN only when it could be
// opened and the library is kAuto.
TEST(GemmTest, KernelsNameFollowsTheLibrary) {
  const GemmLibrary before = GetGemmLibrary();
  auto names = [](const char* library) {
    return GemmKernelsName().find(library) != std::string::npos;
  };
  SetGemmLibrary(GemmLibrary::kOpenBlas);
  EXPECT_FALSE(names("oneDNN")) << GemmKernelsName();
  EXPECT_TRUE(names("OpenBLAS")) << GemmKernelsName();
  SetGemmLibrary(GemmLibrary::kAuto);
  EXPECT_EQ(names("oneDNN"), Dnnl().ok) << GemmKernelsName();
  SetGemmLibrary(before);
}
TEST(GemmTest, DoubleMatchesNaive) { CheckAllShapes<double>(); }
TEST(GemmTest, Complex64MatchesNaive) { CheckAllShapes<std::complex<float>>(); }
TEST(GemmTest, Complex128MatchesNaive) {
  CheckAllShapes<std::complex<double>>();
}

// The flag form is the MatrixOp form with kTranspose for true.
TEST(GemmTest, FlagsAreTransposes) {
  const std::vector<double> a = {1, 2, 3, 4, 5, 6};  // [2, 3]
  std::vector<double> c(4), want(4);
  ASSERT_TRUE(
      Gemm<double>(false, true, 2, 2, 3, a.data(), 3, a.data(), 3, c.data(), 2)
          .ok());
  ASSERT_TRUE(Gemm<double>(MatrixOp::kNone, MatrixOp::kTranspose, 2, 2, 3,
                           a.data(), 3, a.data(), 3, want.data(), 2)
                  .ok());
  EXPECT_EQ(c, want);
  EXPECT_EQ(c, (std::vector<double>{14, 32, 32, 77}));
}

// OpenBLAS falls back to its SSE3 (Prescott) kernels on a CPU model newer
// than it; gemm.cc names the kernels the CPU's features call for before the
// library loads, unless the environment named them (then they are the
// user's, whatever they are).
TEST(GemmTest, OpenBlasRunsTheKernelsTheCpuCallsFor) {
  const std::string chosen = CpuBlasCoreType();
  const std::string loaded = BlasCoreName();
  if (loaded.rfind("none", 0) == 0) GTEST_SKIP() << loaded;
  if (!BlasCoreTypeFromCpu()) {
    GTEST_SKIP() << "OPENBLAS_CORETYPE came from the environment or the CPU "
                    "calls for no kernels in particular ("
                 << chosen << "); OpenBLAS runs " << loaded;
  }
  EXPECT_EQ(loaded, chosen);
  EXPECT_NE(loaded, "Prescott");
}

TEST(GemmTest, EmptyInnerDimensionScalesC) {
  std::vector<float> c = {1, std::numeric_limits<float>::quiet_NaN(), 3, 4};
  ASSERT_TRUE(
      Gemm<float>(false, false, 2, 2, 0, nullptr, 1, nullptr, 2, c.data(), 2)
          .ok());
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
  c = {1, 2, 3, 4};
  ASSERT_TRUE(
      Gemm<float>(false, false, 2, 2, 0, nullptr, 1, nullptr, 2, c.data(), 2, 2)
          .ok());
  EXPECT_EQ(c, (std::vector<float>{2, 4, 6, 8}));
  ASSERT_TRUE(
      Gemm<float>(false, false, 0, 2, 3, nullptr, 3, nullptr, 2, nullptr, 2)
          .ok());
}

// Four threads run MatMul on 256 x 256 float32 (OpenBLAS, multithreaded
// inside each call) at the same time, each on its own OpExecutor and inputs,
// and compare every result with a reference computed before.
TEST(GemmTest, ConcurrentMatMulMatchesReference) {
  constexpr int kThreads = 4;
  constexpr int kIterations = 20;
  constexpr int64_t n = 256;
  std::vector<Tensor> as, bs;
  std::vector<std::vector<std::complex<double>>> want;
  for (int t = 0; t < kThreads; ++t) {
    const std::vector<float> a = Random<float>(n * n, 10 + t);
    const std::vector<float> b = Random<float>(n * n, 20 + t);
    as.push_back(Tensor::FromVector<float>({n, n}, a));
    bs.push_back(Tensor::FromVector<float>({n, n}, b));
    want.push_back(Naive(MatrixOp::kNone, MatrixOp::kNone, n, n, n, a, n, b, n,
                         a, n, 0.0f));
  }
  std::vector<double> max_error(kThreads, 0);
  std::vector<bool> ok(kThreads, true);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      OpExecutor ctx(DefaultRegistry());
      for (int i = 0; i < kIterations; ++i) {
        Tensors out;
        const Tensor in[] = {as[t], bs[t]};
        if (!ctx.Execute("MatMul", in, AttrMap(), &out).ok()) {
          ok[t] = false;
          return;
        }
        const float* c = out[0].data<float>();
        for (int64_t e = 0; e < n * n; ++e) {
          max_error[t] = std::max(max_error[t],
                                  std::abs(double{c[e]} - want[t][e].real()));
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(ok[t]) << "thread " << t;
    EXPECT_LT(max_error[t], 1e-3) << "thread " << t;
  }
}

// Above 2 * 2^30 multiply-adds Gemm cuts c into a grid of tiles (here 3 x 2,
// the last ones partial): sampled entries against the naive sum.
TEST(GemmTest, TiledProductMatchesNaiveOnSampledEntries) {
  constexpr int64_t m = 1100, n = 700, k = 4096;
  const std::vector<float> a = Random<float>(m * k, 4);
  const std::vector<float> b = Random<float>(k * n, 5);
  std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
  ASSERT_TRUE(
      Gemm<float>(false, false, m, n, k, a.data(), k, b.data(), n, c.data(), n)
          .ok());
  std::mt19937 gen(6);
  for (int s = 0; s < 300; ++s) {
    const int64_t i = gen() % m, j = gen() % n;
    double want = 0;
    for (int64_t p = 0; p < k; ++p) want += double{a[i * k + p]} * b[p * n + j];
    ASSERT_NEAR(c[i * n + j], want, 1e-2) << i << "," << j;
  }
}

// A cancellation requested before the product: CANCELLED, c untouched.
TEST(GemmCancellationTest, PresetCancellationReturnsBeforeComputing) {
  constexpr int64_t n = 256;
  const std::vector<float> a = Random<float>(n * n, 7);
  std::vector<float> c(n * n, -7.0f);
  Cancellation cancel;
  cancel.Cancel(absl::StatusCode::kCancelled);
  ScopedCancellation scope(&cancel);
  absl::Status status =
      Gemm<float>(false, false, n, n, n, a.data(), n, a.data(), n, c.data(), n);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  for (float x : c) ASSERT_EQ(x, -7.0f);
}

// A passed deadline counts as a request: DEADLINE_EXCEEDED, named after the
// op when it comes from a kernel.
TEST(GemmCancellationTest, PassedDeadlineFailsMatMulNamingTheOp) {
  constexpr int64_t n = 2048;  // split into blocks, each polls the deadline
  const Tensor a = Tensor::FromVector<float>({n, n}, Random<float>(n * n, 8));
  Cancellation cancel(absl::Now() - absl::Seconds(1));
  ScopedCancellation scope(&cancel);
  OpExecutor ctx(DefaultRegistry());
  Tensors out;
  const Tensor in[] = {a, a};
  absl::Status status = ctx.Execute("MatMul", in, AttrMap(), &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("MatMul"), absl::string_view::npos) << status;
}

// The same for a product split along k (a weight gradient's shape): each
// part polls the deadline and skips, and c is not summed from the parts.
TEST(GemmCancellationTest, PassedDeadlineStopsAProductSplitAlongK) {
  constexpr int64_t m = 64, n = 64, k = 4096;
  const std::vector<float> a = Random<float>(k * m, 9);
  std::vector<float> c(m * n, -7.0f);
  Cancellation cancel(absl::Now() - absl::Seconds(1));
  ScopedCancellation scope(&cancel);
  absl::Status status =
      Gemm<float>(true, false, m, n, k, a.data(), m, a.data(), n, c.data(), n);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  for (float x : c) ASSERT_EQ(x, -7.0f);  // part 0 skipped too
}

// An 8192^3 float MatMul (5.5e11 multiply-adds: seconds on any core) is
// cancelled from another thread 300 ms after it started: it returns
// CANCELLED within one block (a block is at most 2^30 multiply-adds, tens of
// ms), far below the full product; the bound is generous for loaded and
// sanitizer runs.
TEST(GemmCancellationTest, CancelledBigMatMulStopsWithinABlock) {
  constexpr int64_t n = 8192;
  const Tensor a =
      Tensor::FromVector<float>({n, n}, std::vector<float>(n * n, 0.5f));
  Cancellation cancel;
  std::atomic<bool> done{false};
  absl::Time cancelled_at;
  std::thread canceller([&] {
    for (int i = 0; i < 30 && !done.load(); ++i)
      absl::SleepFor(absl::Milliseconds(10));
    cancelled_at = absl::Now();
    cancel.Cancel(absl::StatusCode::kCancelled);
  });
  absl::Status status;
  {
    ScopedCancellation scope(&cancel);
    OpExecutor ctx(DefaultRegistry());
    Tensors out;
    const Tensor in[] = {a, a};
    status = ctx.Execute("MatMul", in, AttrMap(), &out);
  }
  const absl::Time returned_at = absl::Now();
  done = true;
  canceller.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_NE(status.message().find("MatMul"), absl::string_view::npos) << status;
  EXPECT_LT(returned_at - cancelled_at, absl::Seconds(1.5));
  std::printf("8192^3 MatMul returned %.1f ms after the cancellation\n",
              absl::ToDoubleMilliseconds(returned_at - cancelled_at));
}

// A client gone (CancelBetweenCommands): the product in progress is left to
// finish (a resuming client's resend is answered with its result), the loop
// over commands sees the request at once, and kernels see it only after
// the grace, so a huge product still stops.
TEST(GemmCancellationTest, BetweenCommandsLetsTheProductFinishThenEscalates) {
  constexpr int64_t n = 256;
  const std::vector<float> a = Random<float>(n * n, 9);
  std::vector<float> c(n * n, -7.0f);
  Cancellation cancel;
  cancel.CancelBetweenCommands(absl::StatusCode::kCancelled);
  EXPECT_TRUE(cancel.PollBetweenCommands());
  EXPECT_EQ(cancel.StopCode(), absl::StatusCode::kCancelled);
  {
    ScopedCancellation scope(&cancel);
    absl::Status status = Gemm<float>(false, false, n, n, n, a.data(), n,
                                      a.data(), n, c.data(), n);
    EXPECT_TRUE(status.ok()) << status;
  }
  EXPECT_NE(c[0], -7.0f);
  EXPECT_FALSE(cancel.Requested());
  const absl::Time give_up =
      absl::Now() + Cancellation::kBetweenCommandsGrace + absl::Seconds(5);
  while (!cancel.Poll() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(cancel.Requested());
  EXPECT_EQ(cancel.Check("MatMul").code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace gradtape
