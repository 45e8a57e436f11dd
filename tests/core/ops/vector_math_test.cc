// VecExp, VecSigmoid and VecLog (core/ops/vector_math.h) for every ISA
// variant this CPU runs: ulp error against libm over a dense sweep, exact
// results at the edges (overflow, underflow, infinities, zeros, NaN),
// subnormals, and the Exp, Sigmoid and Log ops on top of them; VecBinary's
// and VecAdam's bits against the scalar operators; VecLoopBlock's against
// its ops one at a time; VecSoftmaxRows against the exact softmax.
#include "core/ops/vector_math.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"

namespace gradtape {
namespace {

using vector_math_internal::CpuSupports;
using vector_math_internal::Isa;
using vector_math_internal::VecErfFor;
using vector_math_internal::VecExpFor;
using vector_math_internal::VecSigmoidFor;
using vector_math_internal::VecSoftmaxRowsFor;

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2Fma, Isa::kAvx512}) {
    if (CpuSupports(isa)) isas.push_back(isa);
  }
  return isas;
}

const char* Name(Isa isa) {
  switch (isa) {
    case Isa::kBaseline:
      return "baseline";
    case Isa::kAvx2Fma:
      return "avx2+fma";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

// |got - want| in units of the last place of T at want (want computed in a
// wider type); subnormal results count in units of the smallest subnormal.
template <typename T>
double UlpError(T got, long double want) {
  const T w = static_cast<T>(want);
  if (std::isinf(w) || std::isinf(got)) return got == w ? 0 : 1e30;
  const T a = std::fabs(w);
  const long double ulp =
      a < std::numeric_limits<T>::min()
          ? std::numeric_limits<T>::denorm_min()
          : static_cast<long double>(std::nextafter(a, T(INFINITY))) - a;
  return static_cast<double>(std::fabs(got - want) / ulp);
}

// The largest ulp error of vec(isa, x, y, n) against reference(x[i]) (a
// wider type), separately for normal and subnormal results, and the input
// with the largest normal error.
struct UlpErrors {
  double normal = 0;
  double subnormal = 0;
  long double worst_at = 0;
  double max() const { return std::max(normal, subnormal); }
};

template <typename T, typename Vec, typename Reference>
UlpErrors MeasureUlp(Isa isa, const std::vector<T>& x, Vec vec,
                     Reference reference) {
  std::vector<T> y(x.size());
  vec(isa, x.data(), y.data(), static_cast<int64_t>(x.size()));
  UlpErrors errors;
  for (size_t i = 0; i < x.size(); ++i) {
    const long double want = reference(x[i]);
    const double e = UlpError(y[i], want);
    if (std::fabs(want) < std::numeric_limits<T>::min()) {
      errors.subnormal = std::max(errors.subnormal, e);
    } else if (e > errors.normal) {
      errors.normal = e;
      errors.worst_at = x[i];
    }
  }
  return errors;
}

template <typename T>
void VecExp(Isa isa, const T* x, T* y, int64_t n) {
  VecExpFor(isa, x, y, n);
}
template <typename T>
void VecLog(Isa isa, const T* x, T* y, int64_t n) {
  vector_math_internal::VecLogFor(isa, x, y, n);
}
template <typename T>
void VecErf(Isa isa, const T* x, T* y, int64_t n) {
  vector_math_internal::VecErfFor(isa, x, y, n);
}
template <typename T>
void VecSigmoid(Isa isa, const T* x, T* y, int64_t n) {
  VecSigmoidFor(isa, x, y, n);
}

TEST(VectorMathTest, SelectsTheWidestSupportedIsa) {
  const std::vector<Isa> isas = SupportedIsas();
  EXPECT_EQ(vector_math_internal::SelectedIsa(), isas.back());
  std::printf("vector_math on this CPU: %s\n", Name(isas.back()));
}

// Every `step`th float32 bit pattern strictly between lo and hi.
std::vector<float> EveryNthFloat(uint32_t step, float lo, float hi) {
  std::vector<float> x;
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += step) {
    const uint32_t b = static_cast<uint32_t>(bits);
    float f;
    std::memcpy(&f, &b, sizeof(f));
    if (f > lo && f < hi) x.push_back(f);
  }
  return x;
}

// Every 37th float32 bit pattern with a finite, nonzero result: the normal
// range within 2 ulp, subnormal results within 1 ulp of the subnormal grid.
TEST(VectorMathTest, ExpFloatSweep) {
  const std::vector<float> x = EveryNthFloat(37, -104.0f, 88.8f);
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(Name(isa));
    const UlpErrors e = MeasureUlp(isa, x, VecExp<float>, [](float v) {
      return std::exp(static_cast<double>(v));
    });
    EXPECT_LE(e.normal, 2.0) << "at x = " << e.worst_at;
    EXPECT_LE(e.subnormal, 1.0);
    std::printf("%s: exp f32 max error %.3f ulp (%zu inputs), subnormal %.3f\n",
                Name(isa), e.normal, x.size(), e.subnormal);
  }
}

// Random doubles over the whole finite-result range and densely near 0,
// against long double exp.
TEST(VectorMathTest, ExpDoubleSweep) {
  std::mt19937_64 gen(42);
  std::uniform_real_distribution<double> wide(-745.2, 709.8), narrow(-2, 2);
  std::vector<double> x;
  for (int i = 0; i < 2000000; ++i) x.push_back(wide(gen));
  for (int i = 0; i < 500000; ++i) x.push_back(narrow(gen));
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(Name(isa));
    const UlpErrors e = MeasureUlp(isa, x, VecExp<double>, [](double v) {
      return std::exp(static_cast<long double>(v));
    });
    EXPECT_LE(e.normal, 2.0) << "at x = " << e.worst_at;
    EXPECT_LE(e.subnormal, 1.0);
    std::printf("%s: exp f64 max error %.3f ulp, subnormal %.3f\n", Name(isa),
                e.normal, e.subnormal);
  }
}

template <typename T>
void CheckExpEdges() {
  using L = std::numeric_limits<T>;
  const T inf = L::infinity();
  // ln of the largest finite value, rounded down and up.
  const T ln_max = std::log(L::max());
  const T above = std::nextafter(ln_max, inf);
  // Where the exact result is half the smallest subnormal (rounds to 0).
  const T ln_half_min = std::log(L::denorm_min()) - std::log(T(2));
  const std::vector<T> x = {
      0, -T(0), 1, -1, inf, -inf, ln_max, above, T(1e30), -T(1e30), L::lowest(),
      L::max(), std::log(L::min()), std::log(L::denorm_min()),
      ln_half_min - T(0.01),
      // Around the lower clamp (float -104, double -746) and a causal
      // mask's -1e9: lanes below the clamp take 0 without computing.
      std::nextafter(ln_half_min - T(0.01), T(0)), std::floor(ln_half_min),
      std::nextafter(std::floor(ln_half_min), -inf), -T(1e9), -T(2000)};
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(Name(isa));
    std::vector<T> y(x.size());
    VecExpFor(isa, x.data(), y.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const T want = std::exp(x[i]);
      if (std::isinf(want) || want == 0 || x[i] == 0) {
        EXPECT_EQ(y[i], want) << "exp(" << x[i] << ")";
      } else {
        EXPECT_LE(UlpError(y[i], std::exp(static_cast<long double>(x[i]))), 2.0)
            << "exp(" << x[i] << ") = " << y[i] << ", want " << want;
      }
    }
    const T nan[] = {L::quiet_NaN(), -L::quiet_NaN()};
    T out[2];
    VecExpFor(isa, nan, out, 2);
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_TRUE(std::isnan(out[1]));
  }
}

TEST(VectorMathTest, ExpEdgesFloat) { CheckExpEdges<float>(); }
TEST(VectorMathTest, ExpEdgesDouble) { CheckExpEdges<double>(); }

template <typename T>
void CheckSigmoid() {
  std::vector<T> x;
  // Steps of 1/2048 over [-110, 110], down into subnormal results.
  for (int i = -225280; i <= 225280; ++i) x.push_back(T(i) / T(2048));
  const T inf = std::numeric_limits<T>::infinity();
  x.insert(x.end(), {T(-120), T(-800), T(60), T(800), inf, -inf});
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(Name(isa));
    const UlpErrors e = MeasureUlp(isa, x, VecSigmoid<T>, [](T v) {
      return 1.0L / (1.0L + std::exp(-static_cast<long double>(v)));
    });
    EXPECT_LE(e.max(), 3.0);
    const T nan = std::numeric_limits<T>::quiet_NaN();
    T out;
    VecSigmoidFor(isa, &nan, &out, 1);
    EXPECT_TRUE(std::isnan(out));
  }
}

// VecSoftmaxRows on every ISA: each element within a few ulp of the exact
// softmax (or log-softmax) of its row, rows of every length class (shorter
// than the lanes, a multiple of them, with a tail), rows run together the
// same bits as rows run one at a time (so results never depend on how
// threads split them), no overflow from large logits, -inf logits 0 (log:
// -inf), and a NaN anywhere in a row makes that row NaN and only that row;
// each row's max and sum when asked for.
template <typename T>
void CheckSoftmaxRows(bool log) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(-20, 20);
  for (int64_t cols : {1, 5, 8, 16, 64, 1001}) {
    const int64_t rows = 3;
    std::vector<T> x(rows * cols);
    for (T& v : x) v = static_cast<T>(dist(rng));
    x[0] += T(5000);  // row 0: large logits, no overflow
    for (Isa isa : SupportedIsas()) {
      SCOPED_TRACE(testing::Message() << Name(isa) << " cols " << cols);
      std::vector<T> y(x.size()), one(x.size()), scratch(cols);
      VecSoftmaxRowsFor(isa, x.data(), y.data(), scratch.data(), rows, cols,
                        log);
      for (int64_t i = 0; i < rows; ++i) {
        VecSoftmaxRowsFor(isa, x.data() + i * cols, one.data() + i * cols,
                          scratch.data(), 1, cols, log);
      }
      EXPECT_EQ(std::memcmp(y.data(), one.data(), y.size() * sizeof(T)), 0);
      for (int64_t i = 0; i < rows; ++i) {
        // The exact softmax of the row's shifted logits x - max as T
        // rounds them (that rounding is the op's, as in TensorFlow).
        const T* row = x.data() + i * cols;
        T max = row[0];
        for (int64_t j = 0; j < cols; ++j) max = std::max(max, row[j]);
        long double sum = 0;
        for (int64_t j = 0; j < cols; ++j)
          sum += std::exp((long double)(row[j] - max));
        // Asked for, the row's max (exactly) and sum of e^(x - max), the
        // sum within the rounding of its additions, a few ulp per 8 terms
        // (SparseSoftmaxCrossEntropyWithLogits' loss is ln sum - (x[label]
        // - max)).
        T got_max = 0, got_sum = 0;
        VecSoftmaxRowsFor(isa, row, one.data(), scratch.data(), 1, cols, log,
                          &got_max, &got_sum);
        EXPECT_EQ(got_max, max) << "row " << i;
        EXPECT_LE(UlpError(got_sum, sum), 2.0 + cols / 4.0) << "row " << i;
        for (int64_t j = 0; j < cols; ++j) {
          const long double d = row[j] - max;
          const T got = y[i * cols + j];
          if (log) {
            const long double want = d - std::log(sum);
            ASSERT_LE(std::fabs(got - want),
                      4 * std::numeric_limits<T>::epsilon() *
                          std::max<long double>(1, std::fabs(want)))
                << "row " << i << " col " << j;
          } else {
            ASSERT_LE(UlpError(got, std::exp(d) / sum), 6.0)
                << "row " << i << " col " << j;
          }
        }
      }
    }
  }
  const T inf = std::numeric_limits<T>::infinity();
  const T nan = std::numeric_limits<T>::quiet_NaN();
  // Row 0: a -inf logit; row 1: a NaN; row 2: plain.
  std::vector<T> x(3 * 20, T(0.5));
  x[3] = -inf;
  x[20 + 17] = nan;
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(Name(isa));
    std::vector<T> y(x.size()), scratch(20);
    VecSoftmaxRowsFor(isa, x.data(), y.data(), scratch.data(), 3, 20, log);
    EXPECT_EQ(y[3], log ? -inf : T(0));
    for (int j = 0; j < 20; ++j) {
      EXPECT_TRUE(std::isnan(y[20 + j])) << j;
      EXPECT_FALSE(std::isnan(y[40 + j])) << j;
    }
  }
}

// VecRowSums on every ISA: the bits of the 8-lane fold written out below,
// for rows shorter than the lanes, at and around a multiple of them, and
// long; at every element offset (so never dependent on alignment).
template <typename T>
void CheckRowSums() {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<T> x(3 * 1000 + 8);
  for (T& v : x) v = static_cast<T>(dist(rng));
  for (int64_t cols : {1, 7, 8, 9, 64, 1000}) {
    for (int offset = 0; offset < 8; ++offset) {
      const T* rows = x.data() + offset;
      std::vector<T> want(3);
      for (int64_t i = 0; i < 3; ++i) {
        T lanes[8] = {};
        int64_t j = 0;
        for (; j + 8 <= cols; j += 8) {
          for (int l = 0; l < 8; ++l) lanes[l] += rows[i * cols + j + l];
        }
        T sum = 0;
        for (int l = 0; l < 8; ++l) sum += lanes[l];
        for (; j < cols; ++j) sum += rows[i * cols + j];
        want[i] = sum;
      }
      for (Isa isa : SupportedIsas()) {
        SCOPED_TRACE(testing::Message()
                     << Name(isa) << " cols " << cols << " offset " << offset);
        std::vector<T> got(3);
        vector_math_internal::VecRowSumsFor(isa, rows, 3, cols, got.data());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), 3 * sizeof(T)), 0);
      }
    }
  }
}

// VecAddRows on every ISA: each column summed row by row onto y's own
// value, bit for bit the scalar loop, for widths below one vector, at and
// around the 4-vector chunks and with a tail, rows from 1 to 170, packed
// and padded rows (stride > cols), at every element offset.
template <typename T>
void CheckAddRows() {
  std::mt19937 rng(12);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<T> x(170 * 320 + 16), y0(320 + 16);
  for (T& v : x) v = static_cast<T>(dist(rng));
  for (T& v : y0) v = static_cast<T>(dist(rng));
  for (int64_t cols : {1, 5, 16, 64, 100, 192, 256, 300}) {
    for (int64_t rows : {1, 3, 170}) {
      for (int64_t pad : {0, 7}) {
        for (int offset : {0, 1, 3}) {
          const int64_t stride = cols + pad;
          const T* in = x.data() + offset;
          std::vector<T> want(y0.begin() + offset, y0.begin() + offset + cols);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t j = 0; j < cols; ++j) want[j] += in[r * stride + j];
          }
          for (Isa isa : SupportedIsas()) {
            SCOPED_TRACE(testing::Message()
                         << Name(isa) << " cols " << cols << " rows " << rows
                         << " stride " << stride << " offset " << offset);
            std::vector<T> got(y0.begin() + offset, y0.begin() + offset + cols);
            vector_math_internal::VecAddRowsFor(isa, in, rows, cols, stride,
                                                got.data());
            EXPECT_EQ(std::memcmp(got.data(), want.data(), cols * sizeof(T)),
                      0);
          }
        }
      }
    }
  }
}

TEST(VectorMathTest, AddRowsFloat) { CheckAddRows<float>(); }
TEST(VectorMathTest, AddRowsDouble) { CheckAddRows<double>(); }

TEST(VectorMathTest, RowSumsFloat) { CheckRowSums<float>(); }
TEST(VectorMathTest, RowSumsDouble) { CheckRowSums<double>(); }

TEST(VectorMathTest, SoftmaxRowsFloat) { CheckSoftmaxRows<float>(false); }
TEST(VectorMathTest, SoftmaxRowsDouble) { CheckSoftmaxRows<double>(false); }
TEST(VectorMathTest, LogSoftmaxRowsFloat) { CheckSoftmaxRows<float>(true); }
TEST(VectorMathTest, LogSoftmaxRowsDouble) { CheckSoftmaxRows<double>(true); }

// VecErf on every ISA. float32: every 301st bit pattern of [-5, 5] (the
// tiny and subnormal inputs included) within 7 ulp of long double erf (the
// largest errors are just below |x| = 4, where erf is 1 - 1e-7); the
// edges exact: +-0 keep their sign, +-inf and |x| >= 4 give +-1, NaN stays
// NaN. float64: std::erf's bits.
TEST(VectorMathTest, ErfFloatSweepAndEdges) {
  const std::vector<float> x = EveryNthFloat(301, -5.0f, 5.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> edges = {0.0f,  -0.0f, inf,    -inf, 4.0f,
                                    -4.0f, 30.0f, -1e30f, NAN};
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(Name(isa));
    const UlpErrors e = MeasureUlp(isa, x, VecErf<float>, [](float v) {
      return std::erf(static_cast<long double>(v));
    });
    EXPECT_LE(e.max(), 7.0) << "at x = " << e.worst_at;
    std::printf("%s: erf f32 max error %.3f ulp (%zu inputs)\n", Name(isa),
                e.max(), x.size());
    std::vector<float> y(edges.size());
    VecErfFor(isa, edges.data(), y.data(), static_cast<int64_t>(edges.size()));
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_FALSE(std::signbit(y[0]));
    EXPECT_TRUE(std::signbit(y[1]));
    EXPECT_EQ(y[2], 1.0f);
    EXPECT_EQ(y[3], -1.0f);
    EXPECT_EQ(y[4], 1.0f);
    EXPECT_EQ(y[5], -1.0f);
    EXPECT_EQ(y[6], 1.0f);
    EXPECT_EQ(y[7], -1.0f);
    EXPECT_TRUE(std::isnan(y[8]));
  }
}

TEST(VectorMathTest, ErfDoubleIsStdErf) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> dist(-6, 6);
  std::vector<double> x(10000);
  for (double& v : x) v = dist(rng);
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(Name(isa));
    std::vector<double> y(x.size());
    VecErfFor(isa, x.data(), y.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], std::erf(x[i]));
  }
}

TEST(VectorMathTest, SigmoidFloat) { CheckSigmoid<float>(); }
TEST(VectorMathTest, SigmoidDouble) { CheckSigmoid<double>(); }

// Every 97th positive float32 bit pattern (subnormals included) and random
// doubles over all positive exponents plus [0.5, 2], within 2 ulp; exact
// special values.
TEST(VectorMathTest, LogFloatSweep) {
  std::vector<float> x;
  for (uint32_t bits = 1; bits < 0x7f800000u; bits += 97) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    x.push_back(f);
  }
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(Name(isa));
    const UlpErrors e = MeasureUlp(isa, x, VecLog<float>, [](float v) {
      return std::log(static_cast<double>(v));
    });
    EXPECT_LE(e.max(), 2.0) << "at x = " << e.worst_at;
    std::printf("%s: log f32 max error %.3f ulp (%zu inputs)\n", Name(isa),
                e.max(), x.size());
  }
}

TEST(VectorMathTest, LogDoubleSweep) {
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> near_one(0.5, 2);
  std::vector<double> x;
  for (int i = 0; i < 1000000; ++i) {
    const uint64_t bits = gen() & 0x7fefffffffffffffull;  // positive, finite
    double d;
    std::memcpy(&d, &bits, sizeof(d));
    x.push_back(d);
  }
  for (int i = 0; i < 500000; ++i) x.push_back(near_one(gen));
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(Name(isa));
    const UlpErrors e = MeasureUlp(isa, x, VecLog<double>, [](double v) {
      return std::log(static_cast<long double>(v));
    });
    EXPECT_LE(e.max(), 2.0) << "at x = " << e.worst_at;
    std::printf("%s: log f64 max error %.3f ulp\n", Name(isa), e.max());
  }
}

template <typename T>
void CheckLogEdges() {
  using L = std::numeric_limits<T>;
  const T x[] = {0,
                 -T(0),
                 1,
                 -1,
                 L::infinity(),
                 -L::infinity(),
                 L::denorm_min(),
                 L::min(),
                 L::max(),
                 L::quiet_NaN()};
  constexpr int n = sizeof(x) / sizeof(x[0]);
  for (Isa isa : SupportedIsas()) {
    SCOPED_TRACE(Name(isa));
    T y[n];
    vector_math_internal::VecLogFor(isa, x, y, n);
    for (int i = 0; i < n; ++i) {
      const T want = std::log(x[i]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[i])) << "log(" << x[i] << ") = " << y[i];
      } else {
        EXPECT_EQ(y[i], want) << "log(" << x[i] << ")";
      }
    }
  }
}

TEST(VectorMathTest, LogEdgesFloat) { CheckLogEdges<float>(); }
TEST(VectorMathTest, LogEdgesDouble) { CheckLogEdges<double>(); }

// The ops run the dispatched functions (lengths that leave vector tails).
TEST(VectorMathTest, ExpSigmoidAndLogOps) {
  OpExecutor ctx(DefaultRegistry());
  for (int64_t n : {1, 7, 33, 1000}) {
    std::vector<float> xf(n);
    std::vector<double> xd(n);
    for (int64_t i = 0; i < n; ++i) {
      xf[i] = static_cast<float>(i % 17) - 8.5f;
      xd[i] = xf[i];
    }
    for (const Tensor& x : {Tensor::FromVector<float>({n}, xf),
                            Tensor::FromVector<double>({n}, xd)}) {
      Tensors exp, sig, log;
      ASSERT_TRUE(ctx.Execute("Exp", {x}, AttrMap(), &exp).ok());
      ASSERT_TRUE(ctx.Execute("Sigmoid", {x}, AttrMap(), &sig).ok());
      ASSERT_TRUE(ctx.Execute("Log", {exp[0]}, AttrMap(), &log).ok());
      for (int64_t i = 0; i < n; ++i) {
        const double v = x.ElementAsDouble(i);
        EXPECT_NEAR(exp[0].ElementAsDouble(i), std::exp(v), 2e-7 * std::exp(v));
        EXPECT_NEAR(sig[0].ElementAsDouble(i), 1 / (1 + std::exp(-v)), 2e-7);
        EXPECT_NEAR(log[0].ElementAsDouble(i), v, 1e-5);
      }
    }
  }
}

// Whether two arrays hold the same bits (memcmp, which must not see the null
// data() of an empty vector).
template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() ||
          std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// VecBinary: every ISA gives the scalar operators' bits (one IEEE operation
// per element; a comparison's 1 or 0), for each stride case, lengths around the
// vector widths, and values with zeros, subnormals, infinities and NaN.
template <typename T>
void CheckArith() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<T> uniform(T(-4), T(4));
  const T special[] = {T(0),
                       -T(0),
                       std::numeric_limits<T>::denorm_min(),
                       std::numeric_limits<T>::min() / T(3),
                       std::numeric_limits<T>::max(),
                       std::numeric_limits<T>::infinity(),
                       -std::numeric_limits<T>::infinity(),
                       std::numeric_limits<T>::quiet_NaN()};
  const VecArith ops[] = {VecArith::kAdd,     VecArith::kSub,
                          VecArith::kMul,     VecArith::kDiv,
                          VecArith::kEqual,   VecArith::kNotEqual,
                          VecArith::kGreater, VecArith::kGreaterEqual,
                          VecArith::kLess,    VecArith::kLessEqual};
  auto scalar = [](VecArith op, T a, T b) {
    switch (op) {
      case VecArith::kAdd:
        return a + b;
      case VecArith::kSub:
        return a - b;
      case VecArith::kMul:
        return a * b;
      case VecArith::kDiv:
        return a / b;
      case VecArith::kEqual:
        return T(a == b);
      case VecArith::kNotEqual:
        return T(a != b);
      case VecArith::kGreater:
        return T(a > b);
      case VecArith::kGreaterEqual:
        return T(a >= b);
      case VecArith::kLess:
        return T(a < b);
      case VecArith::kLessEqual:
        return T(a <= b);
    }
    return T(0);
  };
  for (int64_t n : {0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 67, 1000}) {
    std::vector<T> a(n), b(n);
    for (int64_t i = 0; i < n; ++i) {
      a[i] = i % 5 == 0 ? special[(i / 5) % 8] : uniform(rng);
      b[i] = i % 7 == 3 ? special[(i / 7) % 8] : uniform(rng);
    }
    const int64_t strides[][2] = {{1, 1}, {1, 0}, {0, 1}};
    for (const auto& st : strides) {
      if (n == 0 && (st[0] == 0 || st[1] == 0)) continue;
      for (VecArith op : ops) {
        std::vector<T> want(n);
        for (int64_t i = 0; i < n; ++i)
          want[i] = scalar(op, a[i * st[0]], b[i * st[1]]);
        for (Isa isa : SupportedIsas()) {
          std::vector<T> got(n, T(-7));
          vector_math_internal::VecArithFor(isa, op, a.data(), st[0], b.data(),
                                            st[1], got.data(), n);
          ASSERT_TRUE(SameBits(got, want))
              << Name(isa) << " op " << static_cast<int>(op) << " n " << n
              << " strides " << st[0] << "," << st[1];
        }
      }
    }
  }
}
TEST(VectorMathTest, ArithFloatIsBitExact) { CheckArith<float>(); }
TEST(VectorMathTest, ArithDoubleIsBitExact) { CheckArith<double>(); }

// VecLoopBlock: every ISA gives, element for element, the bits of its ops
// run one at a time over the whole block (VecArithFor, VecExpFor, VecErfFor
// of the same ISA; Neg, Square and Copy as scalar operators), for lengths
// around the strip and vector widths, every op code, full-size and
// one-value operands (a value op a value fills the result), and inputs with
// zeros, infinities and NaN.
template <typename T>
void CheckLoopBlock() {
  std::mt19937 rng(11);
  std::uniform_real_distribution<T> uniform(T(-3), T(3));
  const T special[] = {T(0), -T(0), std::numeric_limits<T>::infinity(),
                       std::numeric_limits<T>::quiet_NaN(), T(30)};
  constexpr int kNeg = static_cast<int>(VecUnary::kNeg);
  constexpr int kSquare = static_cast<int>(VecUnary::kSquare);
  constexpr int kExp = static_cast<int>(VecUnary::kExp);
  constexpr int kErf = static_cast<int>(VecUnary::kErf);
  constexpr int kCopy = static_cast<int>(VecUnary::kCopy);
  auto arith = [](VecArith op) { return static_cast<int>(op); };
  // Operands: 0 and 1 full-size inputs, 2 and 3 one value each; k >= 4 is
  // op k - 4's result.
  struct Step {
    int code, a, b;
  };
  const Step steps[] = {
      {arith(VecArith::kMul), 0, 2},
      {kErf, 4, 4},
      {arith(VecArith::kAdd), 5, 3},
      {kSquare, 1, 1},
      {kNeg, 7, 7},
      {kExp, 8, 8},
      {arith(VecArith::kDiv), 9, 6},
      {arith(VecArith::kSub), 2, 10},
      {arith(VecArith::kGreaterEqual), 0, 1},
      {kCopy, 12, 12},
      {arith(VecArith::kLess), 2, 11},
      {arith(VecArith::kMul), 2, 3},
      {kExp, 3, 3},
      {arith(VecArith::kEqual), 0, 0},
      {arith(VecArith::kNotEqual), 1, 11},
      {arith(VecArith::kGreater), 14, 5},
      {arith(VecArith::kLessEqual), 6, 3},
      {kErf, 2, 2},
  };
  const int num_ops = sizeof(steps) / sizeof(steps[0]);
  for (int64_t n : {1, 5, 16, 127, 128, 129, 300, 1024}) {
    std::vector<std::vector<T>> in(4);
    for (int k = 0; k < 4; ++k) {
      in[k].resize(k < 2 ? n : 1);
      for (size_t i = 0; i < in[k].size(); ++i) {
        in[k][i] = i % 9 == 4 ? special[(i / 9) % 5] : uniform(rng);
      }
    }
    for (Isa isa : SupportedIsas()) {
      std::vector<std::vector<T>> want(num_ops, std::vector<T>(n));
      std::vector<std::vector<T>> got(num_ops, std::vector<T>(n, T(-7)));
      std::vector<VecLoopOp<T>> ops;
      auto operand = [&](int k, std::vector<std::vector<T>>& results) {
        return k < 4 ? std::make_pair(in[k].data(), in[k].size() == 1 ? 0 : 1)
                     : std::make_pair(results[k - 4].data(), 1);
      };
      for (int r = 0; r < num_ops; ++r) {
        const Step& st = steps[r];
        auto [a, sa] = operand(st.a, want);
        auto [b, sb] = operand(st.b, want);
        T* z = want[r].data();
        const bool one = sa == 0 && (st.code >= kNeg || sb == 0);
        const int64_t len = one ? 1 : n;
        if (st.code == kNeg || st.code == kSquare || st.code == kCopy) {
          for (int64_t i = 0; i < len; ++i) {
            z[i] = st.code == kNeg    ? -a[i * sa]
                   : st.code == kCopy ? a[i * sa]
                                      : a[i * sa] * a[i * sa];
          }
        } else if (st.code == kExp) {
          VecExpFor(isa, a, z, len);
        } else if (st.code == kErf) {
          VecErfFor(isa, a, z, len);
        } else {
          vector_math_internal::VecArithFor(isa, static_cast<VecArith>(st.code),
                                            a, one ? 1 : sa, b, one ? 1 : sb, z,
                                            len);
        }
        std::fill(z + len, z + n, z[0]);
        auto [ga, gsa] = operand(st.a, got);
        auto [gb, gsb] = operand(st.b, got);
        ops.push_back({st.code, ga, gsa, gb, gsb, got[r].data()});
      }
      vector_math_internal::VecLoopBlockFor(isa, ops.data(), num_ops, n);
      for (int r = 0; r < num_ops; ++r) {
        ASSERT_TRUE(SameBits(got[r], want[r]))
            << Name(isa) << " op " << r << " n " << n;
      }
    }
  }
}
TEST(VectorMathTest, LoopBlockFloatIsTheOpsOneAtATime) {
  CheckLoopBlock<float>();
}
TEST(VectorMathTest, LoopBlockDoubleIsTheOpsOneAtATime) {
  CheckLoopBlock<double>();
}

// VecAdam: every ISA gives the scalar formulas' bits (each operation rounded
// once, the square root correctly rounded), with and without nesterov, for
// lengths around the vector widths and gradients with zeros, subnormals and
// large values.
template <typename T>
void CheckAdam() {
  std::mt19937 rng(11);
  std::uniform_real_distribution<T> uniform(T(-1), T(1));
  for (bool nesterov : {false, true}) {
    AdamStep<T> step;
    step.one_minus_beta1 = T(1) - T(0.9);
    step.one_minus_beta2 = T(1) - T(0.999);
    step.beta1 = T(0.9);
    step.alpha = T(1e-3) * std::sqrt(T(1) - T(0.998)) / (T(1) - T(0.81));
    step.epsilon = T(1e-7);
    step.nesterov = nesterov;
    for (int64_t n : {0, 1, 7, 16, 17, 33, 67, 1000}) {
      std::vector<T> var(n), m(n), v(n), g(n);
      for (int64_t i = 0; i < n; ++i) {
        var[i] = uniform(rng);
        m[i] = uniform(rng) * T(1e-2);
        v[i] = std::abs(uniform(rng)) * T(1e-4);
        g[i] = i % 9 == 0   ? T(0)
               : i % 9 == 4 ? std::numeric_limits<T>::denorm_min() * T(i)
               : i % 9 == 7 ? T(1e30)
                            : uniform(rng) * T(1e-2);
      }
      std::vector<T> want_var(n), want_m(n), want_v(n);
      for (int64_t i = 0; i < n; ++i) {
        const T c1 = step.one_minus_beta1, c2 = step.one_minus_beta2;
        want_m[i] = m[i] + (g[i] - m[i]) * c1;
        want_v[i] = v[i] + (g[i] * g[i] - v[i]) * c2;
        const T num = nesterov
                          ? (g[i] * c1 + step.beta1 * want_m[i]) * step.alpha
                          : want_m[i] * step.alpha;
        want_var[i] = var[i] - num / (std::sqrt(want_v[i]) + step.epsilon);
      }
      for (Isa isa : SupportedIsas()) {
        std::vector<T> got_var(n, T(-7)), got_m(n, T(-7)), got_v(n, T(-7));
        vector_math_internal::VecAdamFor(isa, step, var.data(), m.data(),
                                         v.data(), g.data(), got_var.data(),
                                         got_m.data(), got_v.data(), n);
        EXPECT_TRUE(SameBits(got_m, want_m))
            << Name(isa) << " m, n " << n << " nesterov " << nesterov;
        EXPECT_TRUE(SameBits(got_v, want_v))
            << Name(isa) << " v, n " << n << " nesterov " << nesterov;
        EXPECT_TRUE(SameBits(got_var, want_var))
            << Name(isa) << " var, n " << n << " nesterov " << nesterov;
      }
    }
  }
}
TEST(VectorMathTest, AdamFloatIsBitExact) { CheckAdam<float>(); }
TEST(VectorMathTest, AdamDoubleIsBitExact) { CheckAdam<double>(); }

}  // namespace
}  // namespace gradtape
