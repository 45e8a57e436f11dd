// How it works. e^x = 2^n * e^r with n = round(x / ln 2) and
// r = x - n ln 2 in [-ln2/2, ln2/2] (Cody-Waite: ln 2 split in a high part
// whose product with n is exact and a low part). e^r is a polynomial; 2^n is
// built in the exponent bits. n is found without a float-to-int conversion:
// adding 1.5 * 2^mantissa_bits rounds x / ln 2 to an integer that then sits
// in the low bits of the sum. The scale is applied as 2^n1 * 2^n2 with
// n1 = round(n / 2), so that both factors stay normal from the overflow
// threshold down to results in the subnormal range (which are then rounded
// once, by the last multiplication). Inputs are clamped so that n stays in
// range: above the clamp the result is +inf, below it 0; NaN is restored at
// the end.
//
// Each loop is written once (always_inline templates) and instantiated in
// functions compiled for AVX-512, AVX2 + FMA and the baseline; GCC
// vectorizes it for each. The polynomial uses fused multiply-adds where the
// ISA has them, so results may differ by an ulp between CPUs. VecBinary's
// single operations are correctly rounded on every ISA: the same bits.
#include "core/ops/vector_math.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace gradtape {
namespace {

#define GRADTAPE_INLINE inline __attribute__((always_inline))

// a * b + c, fused (one rounding) where the ISA has FMA.
template <bool kFma, typename T>
GRADTAPE_INLINE T MulAdd(T a, T b, T c) {
  if constexpr (!kFma) {
    return a * b + c;
  } else if constexpr (std::is_same_v<T, float>) {
    return __builtin_fmaf(a, b, c);
  } else {
    return __builtin_fma(a, b, c);
  }
}

template <typename T>
struct ExpConstants;

template <>
struct ExpConstants<float> {
  using Bits = uint32_t;
  static constexpr int kMantissaBits = 23;
  static constexpr Bits kBias = 127;
  // e^89 overflows; e^-104 is below half the smallest subnormal.
  static constexpr float kHi = 89.0f, kLo = -104.0f;
  static constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  static constexpr float kLog2e = 1.44269504088896341f;
  static constexpr float kLn2Hi = 0.693359375f;  // 9 bits: n * kLn2Hi exact
  static constexpr float kLn2Lo = -2.12194440e-4f;
};

template <>
struct ExpConstants<double> {
  using Bits = uint64_t;
  static constexpr int kMantissaBits = 52;
  static constexpr Bits kBias = 1023;
  static constexpr double kHi = 710.0, kLo = -746.0;
  static constexpr double kMagic = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr double kLog2e = 1.4426950408889634074;
  static constexpr double kLn2Hi = 6.93147180369123816490e-01;  // fdlibm
  static constexpr double kLn2Lo = 1.90821492927058770002e-10;
};

// e^r for |r| <= ln2/2 (a little beyond is fine).
template <bool kFma>
GRADTAPE_INLINE float ExpReduced(float r) {
  // Cephes expf: relative error below 1 ulp on the interval.
  float p = 1.9875691500e-4f;
  p = MulAdd<kFma>(p, r, 1.3981999507e-3f);
  p = MulAdd<kFma>(p, r, 8.3334519073e-3f);
  p = MulAdd<kFma>(p, r, 4.1665795894e-2f);
  p = MulAdd<kFma>(p, r, 1.6666665459e-1f);
  p = MulAdd<kFma>(p, r, 5.0000001201e-1f);
  return MulAdd<kFma>(p, r * r, r) + 1.0f;
}
template <bool kFma>
GRADTAPE_INLINE double ExpReduced(double r) {
  // Taylor series to r^13: the truncation error is below 1e-17 relative.
  double p = 1.0 / 6227020800.0;              // 1/13!
  p = MulAdd<kFma>(p, r, 1.0 / 479001600.0);  // 1/12!
  p = MulAdd<kFma>(p, r, 1.0 / 39916800.0);   // 1/11!
  p = MulAdd<kFma>(p, r, 1.0 / 3628800.0);    // 1/10!
  p = MulAdd<kFma>(p, r, 1.0 / 362880.0);     // 1/9!
  p = MulAdd<kFma>(p, r, 1.0 / 40320.0);      // 1/8!
  p = MulAdd<kFma>(p, r, 1.0 / 5040.0);       // 1/7!
  p = MulAdd<kFma>(p, r, 1.0 / 720.0);        // 1/6!
  p = MulAdd<kFma>(p, r, 1.0 / 120.0);        // 1/5!
  p = MulAdd<kFma>(p, r, 1.0 / 24.0);         // 1/4!
  p = MulAdd<kFma>(p, r, 1.0 / 6.0);          // 1/3!
  p = MulAdd<kFma>(p, r, 0.5);
  return MulAdd<kFma>(p, r * r, r) + 1.0;
}

// 2^k for an integer k in the normal exponent range, given as the bits of
// k + C::kMagic.
template <typename T>
GRADTAPE_INLINE T Pow2FromMagic(T k_plus_magic) {
  using C = ExpConstants<T>;
  using Bits = typename C::Bits;
  const Bits k = __builtin_bit_cast(Bits, k_plus_magic) -
                 __builtin_bit_cast(Bits, C::kMagic);
  return __builtin_bit_cast(T, (k + C::kBias) << C::kMantissaBits);
}

// Below kLo the result is 0. Those lanes compute on 0 instead and take 0 at
// the end: computed from kLo, the last product underflows to 0, and an
// underflowing multiply costs a microcode assist of ~100 cycles on x86. A
// causal attention mask makes half a softmax's inputs -1e9, and that made
// VecExp 10x slower on such rows (docs/PERFORMANCE.md, change 31).
template <bool kFma, typename T>
GRADTAPE_INLINE T Exp(T x) {
  using C = ExpConstants<T>;
  const bool zero = x < C::kLo;
  T xc = x < C::kHi ? x : C::kHi;  // NaN -> kHi; fixed below
  xc = zero ? T(0) : xc;
  const T t = MulAdd<kFma>(xc, C::kLog2e, C::kMagic);
  const T n = t - C::kMagic;  // round(x / ln 2)
  T r = MulAdd<kFma>(n, -C::kLn2Hi, xc);
  r = MulAdd<kFma>(n, -C::kLn2Lo, r);
  const T n1_magic = MulAdd<kFma>(n, T(0.5), C::kMagic);
  const T n1 = n1_magic - C::kMagic;
  const T n2_magic = (n - n1) + C::kMagic;
  const T y =
      ExpReduced<kFma>(r) * Pow2FromMagic(n1_magic) * Pow2FromMagic(n2_magic);
  return x == x ? (zero ? T(0) : y) : x;
}

// ln x = e ln 2 + ln m with x = m 2^e, m in [sqrt(1/2), sqrt(2)): ln m =
// f - f^2/2 + f^3 R(f) for f = m - 1 (Cephes logf's polynomial, log's
// rational function for double), e ln 2 added in two parts as for exp.
// Subnormal inputs are scaled into the normal range first.
template <typename T>
struct LogConstants;

template <>
struct LogConstants<float> {
  using Bits = uint32_t;
  static constexpr Bits kMantissaMask = 0x007fffff;
  static constexpr Bits kHalfExponent = 0x3f000000;    // bits of 0.5
  static constexpr Bits kTwoPowMantissa = 0x4b000000;  // bits of 2^23
  static constexpr int kMantissaBits = 23;
  static constexpr float kBias = 126;  // exponent of m in [0.5, 1)
  static constexpr float kSubnormalScale = 8388608.0f;  // 2^23
};

template <>
struct LogConstants<double> {
  using Bits = uint64_t;
  static constexpr Bits kMantissaMask = 0x000fffffffffffff;
  static constexpr Bits kHalfExponent = 0x3fe0000000000000;
  static constexpr Bits kTwoPowMantissa = 0x4330000000000000;
  static constexpr int kMantissaBits = 52;
  static constexpr double kBias = 1022;
  static constexpr double kSubnormalScale = 4503599627370496.0;  // 2^52
};

// f^3 R(f): ln(1 + f) = f - f^2 / 2 + LogTail(f, f^2).
template <bool kFma>
GRADTAPE_INLINE float LogTail(float f, float z) {
  float p = 7.0376836292e-2f;
  p = MulAdd<kFma>(p, f, -1.1514610310e-1f);
  p = MulAdd<kFma>(p, f, 1.1676998740e-1f);
  p = MulAdd<kFma>(p, f, -1.2420140846e-1f);
  p = MulAdd<kFma>(p, f, 1.4249322787e-1f);
  p = MulAdd<kFma>(p, f, -1.6668057665e-1f);
  p = MulAdd<kFma>(p, f, 2.0000714765e-1f);
  p = MulAdd<kFma>(p, f, -2.4999993993e-1f);
  p = MulAdd<kFma>(p, f, 3.3333331174e-1f);
  return p * f * z;
}
template <bool kFma>
GRADTAPE_INLINE double LogTail(double f, double z) {
  double p = 1.01875663804580931796e-4;
  p = MulAdd<kFma>(p, f, 4.97494994976747001425e-1);
  p = MulAdd<kFma>(p, f, 4.70579119878881725854e0);
  p = MulAdd<kFma>(p, f, 1.44989225341610930846e1);
  p = MulAdd<kFma>(p, f, 1.79368678507819816313e1);
  p = MulAdd<kFma>(p, f, 7.70838733755885391666e0);
  double q = f + 1.12873587189167450590e1;
  q = MulAdd<kFma>(q, f, 4.52279145837532221105e1);
  q = MulAdd<kFma>(q, f, 8.29875266912776603211e1);
  q = MulAdd<kFma>(q, f, 7.11544750618563894466e1);
  q = MulAdd<kFma>(q, f, 2.31251620126765340583e1);
  return f * (z * p / q);
}

template <bool kFma, typename T>
GRADTAPE_INLINE T Log(T x) {
  using C = LogConstants<T>;
  const bool subnormal = x < std::numeric_limits<T>::min();
  const T xs = subnormal ? x * C::kSubnormalScale : x;
  const typename C::Bits bits = __builtin_bit_cast(typename C::Bits, xs);
  // The biased exponent as a T without an int-to-float conversion (there is
  // no vector one for 64-bit ints before AVX-512DQ): the bits of
  // 2^mantissa_bits + k are those of 2^mantissa_bits with k in the mantissa.
  const T two_p = __builtin_bit_cast(T, C::kTwoPowMantissa);
  const T biased =
      __builtin_bit_cast(T, C::kTwoPowMantissa | (bits >> C::kMantissaBits)) -
      two_p;
  // m in [0.5, 1); below sqrt(1/2) take 2m and e - 1.
  const T m =
      __builtin_bit_cast(T, (bits & C::kMantissaMask) | C::kHalfExponent);
  const bool low = m < T(0.707106781186547524);
  const T f = (low ? m + m : m) - T(1);
  const T fe =
      biased - (C::kBias + (subnormal ? C::kMantissaBits : 0) + (low ? 1 : 0));
  const T z = f * f;
  T y = MulAdd<kFma>(fe, T(-2.121944400546905827679e-4), LogTail<kFma>(f, z));
  y = MulAdd<kFma>(T(-0.5), z, y);
  T r = MulAdd<kFma>(fe, T(0.693359375), f + y);
  const T inf = std::numeric_limits<T>::infinity();
  r = x == inf ? inf : r;
  r = x > T(0) ? r : (x == T(0) ? -inf : std::numeric_limits<T>::quiet_NaN());
  return r;
}

template <bool kFma, typename T>
GRADTAPE_INLINE void LogLoop(const T* __restrict x, T* __restrict y,
                             int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Log<kFma>(x[i]);
}

template <bool kFma, typename T>
GRADTAPE_INLINE void ExpLoop(const T* __restrict x, T* __restrict y,
                             int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Exp<kFma>(x[i]);
}

// The max and the sum of x[0, n) through kRowLanes partial results (one
// dependency chain per lane, vectorised), combined in a fixed order: the
// same result on every ISA. A NaN in a row makes its sum NaN.
constexpr int kRowLanes = 8;
template <typename T>
GRADTAPE_INLINE T RowMax(const T* x, int64_t n) {
  T max = x[0];
  int64_t j = 1;
  if (n >= 2 * kRowLanes) {
    T lanes[kRowLanes];
    for (int l = 0; l < kRowLanes; ++l) lanes[l] = x[l];
    for (j = kRowLanes; j + kRowLanes <= n; j += kRowLanes) {
      for (int l = 0; l < kRowLanes; ++l) {
        lanes[l] = lanes[l] < x[j + l] ? x[j + l] : lanes[l];
      }
    }
    max = lanes[0];
    for (int l = 1; l < kRowLanes; ++l) max = max < lanes[l] ? lanes[l] : max;
  }
  for (; j < n; ++j) max = max < x[j] ? x[j] : max;
  return max;
}
template <typename T>
GRADTAPE_INLINE T RowSum(const T* x, int64_t n) {
  T lanes[kRowLanes] = {};
  int64_t j = 0;
  for (; j + kRowLanes <= n; j += kRowLanes) {
    for (int l = 0; l < kRowLanes; ++l) lanes[l] += x[j + l];
  }
  T sum = 0;
  for (int l = 0; l < kRowLanes; ++l) sum += lanes[l];
  for (; j < n; ++j) sum += x[j];
  return sum;
}

// VecAddRows' loop: 64-byte vectors (GCC's vector extension: one zmm
// register under AVX-512, two ymm or four xmm below), four of them held
// across the rows for each 256 bytes of columns, so y is read and written
// once, not once a row.
template <typename T>
GRADTAPE_INLINE void AddRowsLoop(const T* x, int64_t rows, int64_t cols,
                                 int64_t stride, T* __restrict y) {
  typedef T V __attribute__((vector_size(64)));
  constexpr int64_t kLanes = 64 / sizeof(T);
  // By reference: a vector returned by value would take another ABI in the
  // baseline and AVX2 variants.
  auto load = [](V& v, const T* p) { __builtin_memcpy(&v, p, sizeof(V)); };
  auto add = [](V& v, const T* p) {
    V w;
    __builtin_memcpy(&w, p, sizeof(V));
    v += w;
  };
  auto store = [](T* p, const V& v) { __builtin_memcpy(p, &v, sizeof(V)); };
  int64_t j = 0;
  for (; j + 4 * kLanes <= cols; j += 4 * kLanes) {
    V a0, a1, a2, a3;
    load(a0, y + j);
    load(a1, y + j + kLanes);
    load(a2, y + j + 2 * kLanes);
    load(a3, y + j + 3 * kLanes);
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * stride + j;
      add(a0, row);
      add(a1, row + kLanes);
      add(a2, row + 2 * kLanes);
      add(a3, row + 3 * kLanes);
    }
    store(y + j, a0);
    store(y + j + kLanes, a1);
    store(y + j + 2 * kLanes, a2);
    store(y + j + 3 * kLanes, a3);
  }
  for (; j + kLanes <= cols; j += kLanes) {
    V a;
    load(a, y + j);
    for (int64_t r = 0; r < rows; ++r) add(a, x + r * stride + j);
    store(y + j, a);
  }
  if (j < cols) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * stride;
      for (int64_t i = j; i < cols; ++i) y[i] += row[i];
    }
  }
}

// VecRowSums' loop.
template <typename T>
GRADTAPE_INLINE void RowSumsLoop(const T* x, int64_t rows, int64_t cols,
                                 T* __restrict y) {
  for (int64_t i = 0; i < rows; ++i) y[i] = RowSum(x + i * cols, cols);
}

// VecSoftmaxRows' loop: per row, x - max into `shifted`, e^ that into y,
// then y * (1 / sum) (TensorFlow's order: the reciprocal once per row), or
// for log, shifted - ln sum; the max and sum into row_max and row_sum when
// they are not null.
template <bool kFma, typename T>
GRADTAPE_INLINE void SoftmaxLoop(const T* x, T* __restrict y,
                                 T* __restrict shifted, int64_t rows,
                                 int64_t cols, bool log, T* row_max,
                                 T* row_sum) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* in = x + i * cols;
    T* out = y + i * cols;
    const T max = RowMax(in, cols);
    for (int64_t j = 0; j < cols; ++j) shifted[j] = in[j] - max;
    ExpLoop<kFma>(shifted, out, cols);
    const T sum = RowSum(out, cols);
    if (row_max != nullptr) row_max[i] = max;
    if (row_sum != nullptr) row_sum[i] = sum;
    if (log) {
      const T log_sum = std::log(sum);
      for (int64_t j = 0; j < cols; ++j) out[j] = shifted[j] - log_sum;
    } else {
      const T inverse = T(1) / sum;
      for (int64_t j = 0; j < cols; ++j) out[j] *= inverse;
    }
  }
}

// erf in float32, our own fit (Eigen's erf cannot be compiled per ISA
// here, see the header; scripts/fit_erf.py refits it): x P(x^2) / Q(x^2)
// with P of degree 6 and Q of degree 5, a rational least-squares fit of erf
// on [0, 4] (relative error 2.5e-9 in exact arithmetic), x clamped to
// [-4, 4] (erf(4) rounds to 1 in float32). One division and no exp, so the
// loop vectorizes cheaply. Within 7 ulp of the exact erf over a sweep
// (vector_math_test; 5 with FMA), the largest errors just below |x| = 4,
// where erf is 1 - 1e-7.
// float64 keeps std::erf, as Eigen's erf does.
template <bool kFma>
GRADTAPE_INLINE float Erf(float x) {
  const float a = x < 0.0f ? (x > -4.0f ? -x : 4.0f) : (x < 4.0f ? x : 4.0f);
  const float t = a * a;
  // Horner's rule written out: a loop over coefficient arrays here is not
  // unrolled, and the element loop then does not vectorize.
  float p = MulAdd<kFma>(-1.33602391e-08f, t, 4.71511021e-06f);
  p = MulAdd<kFma>(p, t, 3.80858983e-04f);
  p = MulAdd<kFma>(p, t, 3.85647803e-03f);
  p = MulAdd<kFma>(p, t, 5.43540046e-02f);
  p = MulAdd<kFma>(p, t, 1.85279995e-01f);
  p = MulAdd<kFma>(p, t, 1.12837923e+00f);
  float q = MulAdd<kFma>(6.34034877e-05f, t, 1.31069112e-03f);
  q = MulAdd<kFma>(q, t, 1.54798431e-02f);
  q = MulAdd<kFma>(q, t, 1.14014015e-01f);
  q = MulAdd<kFma>(q, t, 4.97533530e-01f);
  q = MulAdd<kFma>(q, t, 1.0f);
  // NaN: a is 4 (the comparisons are false), so restore it.
  return x != x ? x : __builtin_copysignf(a * p / q, x);
}

template <bool kFma>
GRADTAPE_INLINE void ErfLoop(const float* __restrict x, float* __restrict y,
                             int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Erf<kFma>(x[i]);
}
template <bool kFma>
GRADTAPE_INLINE void ErfLoop(const double* __restrict x, double* __restrict y,
                             int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::erf(x[i]);
}

// 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below: e^-|x| never
// overflows, so results down to the subnormals keep their precision.
template <bool kFma, typename T>
GRADTAPE_INLINE void SigmoidLoop(const T* __restrict x, T* __restrict y,
                                 int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    const T e = Exp<kFma>(v < T(0) ? v : -v);  // NaN stays NaN
    y[i] = (v < T(0) ? e : T(1)) / (T(1) + e);
  }
}

// z[i] = a[i * sa] op b[i * sb] with sa, sb in {0, 1}, not both 0: each
// stride case its own loop, so the compiler vectorizes all three.
template <VecArith kOp, typename T>
GRADTAPE_INLINE T Arith(T a, T b) {
  if constexpr (kOp == VecArith::kAdd) return a + b;
  if constexpr (kOp == VecArith::kSub) return a - b;
  if constexpr (kOp == VecArith::kMul) return a * b;
  if constexpr (kOp == VecArith::kDiv) return a / b;
  if constexpr (kOp == VecArith::kEqual) return a == b ? T(1) : T(0);
  if constexpr (kOp == VecArith::kNotEqual) return a != b ? T(1) : T(0);
  if constexpr (kOp == VecArith::kGreater) return a > b ? T(1) : T(0);
  if constexpr (kOp == VecArith::kGreaterEqual) return a >= b ? T(1) : T(0);
  if constexpr (kOp == VecArith::kLess) return a < b ? T(1) : T(0);
  if constexpr (kOp == VecArith::kLessEqual) return a <= b ? T(1) : T(0);
}

template <VecArith kOp, typename T>
GRADTAPE_INLINE void ArithLoop(const T* a, int64_t sa, const T* b, int64_t sb,
                               T* __restrict z, int64_t n) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) z[i] = Arith<kOp>(a[i], b[i]);
  } else if (sa == 1) {
    const T s = b[0];
    for (int64_t i = 0; i < n; ++i) z[i] = Arith<kOp>(a[i], s);
  } else {
    const T s = a[0];
    for (int64_t i = 0; i < n; ++i) z[i] = Arith<kOp>(s, b[i]);
  }
}

template <typename T>
GRADTAPE_INLINE void ArithSwitch(VecArith op, const T* a, int64_t sa,
                                 const T* b, int64_t sb, T* z, int64_t n) {
  switch (op) {
    case VecArith::kAdd:
      return ArithLoop<VecArith::kAdd>(a, sa, b, sb, z, n);
    case VecArith::kSub:
      return ArithLoop<VecArith::kSub>(a, sa, b, sb, z, n);
    case VecArith::kMul:
      return ArithLoop<VecArith::kMul>(a, sa, b, sb, z, n);
    case VecArith::kDiv:
      return ArithLoop<VecArith::kDiv>(a, sa, b, sb, z, n);
    case VecArith::kEqual:
      return ArithLoop<VecArith::kEqual>(a, sa, b, sb, z, n);
    case VecArith::kNotEqual:
      return ArithLoop<VecArith::kNotEqual>(a, sa, b, sb, z, n);
    case VecArith::kGreater:
      return ArithLoop<VecArith::kGreater>(a, sa, b, sb, z, n);
    case VecArith::kGreaterEqual:
      return ArithLoop<VecArith::kGreaterEqual>(a, sa, b, sb, z, n);
    case VecArith::kLess:
      return ArithLoop<VecArith::kLess>(a, sa, b, sb, z, n);
    case VecArith::kLessEqual:
      return ArithLoop<VecArith::kLessEqual>(a, sa, b, sb, z, n);
  }
}

// z[i] = a[i * sa] op b[i * sb] for a VecLoopOp's code (VecLoopBlock).
template <bool kFma, typename T>
GRADTAPE_INLINE void LoopOpRun(int code, const T* a, int64_t sa, const T* b,
                               int64_t sb, T* z, int64_t n) {
  switch (code) {
    case static_cast<int>(VecUnary::kNeg):
      for (int64_t i = 0; i < n; ++i) z[i] = -a[i];
      return;
    case static_cast<int>(VecUnary::kSquare):
      return ArithLoop<VecArith::kMul>(a, 1, a, 1, z, n);
    case static_cast<int>(VecUnary::kExp):
      return ExpLoop<kFma>(a, z, n);
    case static_cast<int>(VecUnary::kErf):
      return ErfLoop<kFma>(a, z, n);
    case static_cast<int>(VecUnary::kCopy):
      for (int64_t i = 0; i < n; ++i) z[i] = a[i];
      return;
    default:
      return ArithSwitch(static_cast<VecArith>(code), a, sa, b, sb, z, n);
  }
}

// One op of a loop block over n elements from element o (VecLoopBlock).
template <bool kFma, typename T>
GRADTAPE_INLINE void LoopOp(const VecLoopOp<T>& op, int64_t o, int64_t n) {
  const bool unary = op.code >= static_cast<int>(VecUnary::kNeg);
  if (op.sa == 0 && (unary || op.sb == 0)) {
    T v;  // one value for the whole strip
    LoopOpRun<kFma>(op.code, op.a, 1, op.b, 1, &v, 1);
    for (int64_t i = 0; i < n; ++i) op.z[o + i] = v;
    return;
  }
  LoopOpRun<kFma>(op.code, op.a + o * op.sa, op.sa, op.b + o * op.sb, op.sb,
                  op.z + o, n);
}

// Elements per strip of VecLoopBlock: a strip of each op's values stays in
// the first-level cache between the ops.
constexpr int64_t kLoopStrip = 128;

template <bool kFma, typename T>
GRADTAPE_INLINE void LoopBlock(const VecLoopOp<T>* ops, int num_ops,
                               int64_t n) {
  for (int64_t o = 0; o < n; o += kLoopStrip) {
    const int64_t len = n - o < kLoopStrip ? n - o : kLoopStrip;
    for (int r = 0; r < num_ops; ++r) LoopOp<kFma>(ops[r], o, len);
  }
}

// VecAdam's loop. No contraction into fused multiply-adds, which clang
// does within an expression by default (GCC's ISO mode does not): the AVX2
// and AVX-512 variants must round as the baseline does.
template <typename T>
GRADTAPE_INLINE void AdamLoop(const AdamStep<T>& step, const T* var, const T* m,
                              const T* v, const T* g, T* __restrict var_out,
                              T* __restrict m_out, T* __restrict v_out,
                              int64_t n) {
#ifdef __clang__
#pragma clang fp contract(off)
#endif
  const T c1 = step.one_minus_beta1, c2 = step.one_minus_beta2;
  const T beta1 = step.beta1, alpha = step.alpha, eps = step.epsilon;
  if (step.nesterov) {
    for (int64_t i = 0; i < n; ++i) {
      const T gi = g[i];
      const T mi = m[i] + (gi - m[i]) * c1;
      const T vi = v[i] + (gi * gi - v[i]) * c2;
      m_out[i] = mi;
      v_out[i] = vi;
      var_out[i] =
          var[i] - ((gi * c1 + beta1 * mi) * alpha) / (std::sqrt(vi) + eps);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const T gi = g[i];
      const T mi = m[i] + (gi - m[i]) * c1;
      const T vi = v[i] + (gi * gi - v[i]) * c2;
      m_out[i] = mi;
      v_out[i] = vi;
      var_out[i] = var[i] - (mi * alpha) / (std::sqrt(vi) + eps);
    }
  }
}

// One set of entry points per ISA.
#define GRADTAPE_VECTOR_MATH_VARIANTS(Suffix, kFma, Attr)                      \
  Attr void Adam##Suffix(const AdamStep<float>& step, const float* var,        \
                         const float* m, const float* v, const float* g,       \
                         float* var_out, float* m_out, float* v_out,           \
                         int64_t n) {                                          \
    AdamLoop(step, var, m, v, g, var_out, m_out, v_out, n);                    \
  }                                                                            \
  Attr void Adam##Suffix(const AdamStep<double>& step, const double* var,      \
                         const double* m, const double* v, const double* g,    \
                         double* var_out, double* m_out, double* v_out,        \
                         int64_t n) {                                          \
    AdamLoop(step, var, m, v, g, var_out, m_out, v_out, n);                    \
  }                                                                            \
  Attr void Arith##Suffix(VecArith op, const float* a, int64_t sa,             \
                          const float* b, int64_t sb, float* z, int64_t n) {   \
    ArithSwitch(op, a, sa, b, sb, z, n);                                       \
  }                                                                            \
  Attr void Arith##Suffix(VecArith op, const double* a, int64_t sa,            \
                          const double* b, int64_t sb, double* z, int64_t n) { \
    ArithSwitch(op, a, sa, b, sb, z, n);                                       \
  }                                                                            \
  Attr void Exp##Suffix(const float* x, float* y, int64_t n) {                 \
    ExpLoop<kFma>(x, y, n);                                                    \
  }                                                                            \
  Attr void Exp##Suffix(const double* x, double* y, int64_t n) {               \
    ExpLoop<kFma>(x, y, n);                                                    \
  }                                                                            \
  Attr void Sigmoid##Suffix(const float* x, float* y, int64_t n) {             \
    SigmoidLoop<kFma>(x, y, n);                                                \
  }                                                                            \
  Attr void Sigmoid##Suffix(const double* x, double* y, int64_t n) {           \
    SigmoidLoop<kFma>(x, y, n);                                                \
  }                                                                            \
  Attr void Log##Suffix(const float* x, float* y, int64_t n) {                 \
    LogLoop<kFma>(x, y, n);                                                    \
  }                                                                            \
  Attr void Log##Suffix(const double* x, double* y, int64_t n) {               \
    LogLoop<kFma>(x, y, n);                                                    \
  }                                                                            \
  Attr void RowSums##Suffix(const float* x, int64_t rows, int64_t cols,        \
                            float* y) {                                        \
    RowSumsLoop(x, rows, cols, y);                                             \
  }                                                                            \
  Attr void RowSums##Suffix(const double* x, int64_t rows, int64_t cols,       \
                            double* y) {                                       \
    RowSumsLoop(x, rows, cols, y);                                             \
  }                                                                            \
  Attr void AddRows##Suffix(const float* x, int64_t rows, int64_t cols,        \
                            int64_t stride, float* y) {                        \
    AddRowsLoop(x, rows, cols, stride, y);                                     \
  }                                                                            \
  Attr void AddRows##Suffix(const double* x, int64_t rows, int64_t cols,       \
                            int64_t stride, double* y) {                       \
    AddRowsLoop(x, rows, cols, stride, y);                                     \
  }                                                                            \
  Attr void Erf##Suffix(const float* x, float* y, int64_t n) {                 \
    ErfLoop<kFma>(x, y, n);                                                    \
  }                                                                            \
  Attr void Erf##Suffix(const double* x, double* y, int64_t n) {               \
    ErfLoop<kFma>(x, y, n);                                                    \
  }                                                                            \
  Attr void LoopBlock##Suffix(const VecLoopOp<float>* ops, int num_ops,        \
                              int64_t n) {                                     \
    LoopBlock<kFma>(ops, num_ops, n);                                          \
  }                                                                            \
  Attr void LoopBlock##Suffix(const VecLoopOp<double>* ops, int num_ops,       \
                              int64_t n) {                                     \
    LoopBlock<kFma>(ops, num_ops, n);                                          \
  }                                                                            \
  Attr void Softmax##Suffix(const float* x, float* y, float* shifted,          \
                            int64_t rows, int64_t cols, bool log,              \
                            float* row_max, float* row_sum) {                  \
    SoftmaxLoop<kFma>(x, y, shifted, rows, cols, log, row_max, row_sum);       \
  }                                                                            \
  Attr void Softmax##Suffix(const double* x, double* y, double* shifted,       \
                            int64_t rows, int64_t cols, bool log,              \
                            double* row_max, double* row_sum) {                \
    SoftmaxLoop<kFma>(x, y, shifted, rows, cols, log, row_max, row_sum);       \
  }

GRADTAPE_VECTOR_MATH_VARIANTS(Baseline, false, )
#if defined(__x86_64__)
#define GRADTAPE_X86_DISPATCH 1
GRADTAPE_VECTOR_MATH_VARIANTS(Avx2Fma, true,
                              __attribute__((target("avx2,fma"))))
GRADTAPE_VECTOR_MATH_VARIANTS(
    Avx512, true,
    __attribute__((target("avx512f,avx2,fma,prefer-vector-width=512"))))
#endif
#undef GRADTAPE_VECTOR_MATH_VARIANTS

}  // namespace

namespace vector_math_internal {

bool CpuSupports(Isa isa) {
#ifdef GRADTAPE_X86_DISPATCH
  __builtin_cpu_init();
  const bool avx2_fma =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  switch (isa) {
    case Isa::kBaseline:
      return true;
    case Isa::kAvx2Fma:
      return avx2_fma;
    case Isa::kAvx512:
      return avx2_fma && __builtin_cpu_supports("avx512f");
  }
  return false;
#else
  return isa == Isa::kBaseline;
#endif
}

Isa SelectedIsa() {
  static const Isa isa = CpuSupports(Isa::kAvx512)    ? Isa::kAvx512
                         : CpuSupports(Isa::kAvx2Fma) ? Isa::kAvx2Fma
                                                      : Isa::kBaseline;
  return isa;
}

// Calls Fn's variant for `isa` with the given arguments.
#ifdef GRADTAPE_X86_DISPATCH
#define GRADTAPE_DISPATCH(Fn, ...)     \
  switch (isa) {                       \
    case Isa::kAvx512:                 \
      return Fn##Avx512(__VA_ARGS__);  \
    case Isa::kAvx2Fma:                \
      return Fn##Avx2Fma(__VA_ARGS__); \
    case Isa::kBaseline:               \
      break;                           \
  }                                    \
  return Fn##Baseline(__VA_ARGS__)
#else
#define GRADTAPE_DISPATCH(Fn, ...) return Fn##Baseline(__VA_ARGS__)
#endif

void VecExpFor(Isa isa, const float* x, float* y, int64_t n) {
  GRADTAPE_DISPATCH(Exp, x, y, n);
}
void VecExpFor(Isa isa, const double* x, double* y, int64_t n) {
  GRADTAPE_DISPATCH(Exp, x, y, n);
}
void VecSigmoidFor(Isa isa, const float* x, float* y, int64_t n) {
  GRADTAPE_DISPATCH(Sigmoid, x, y, n);
}
void VecSigmoidFor(Isa isa, const double* x, double* y, int64_t n) {
  GRADTAPE_DISPATCH(Sigmoid, x, y, n);
}
void VecLogFor(Isa isa, const float* x, float* y, int64_t n) {
  GRADTAPE_DISPATCH(Log, x, y, n);
}
void VecLogFor(Isa isa, const double* x, double* y, int64_t n) {
  GRADTAPE_DISPATCH(Log, x, y, n);
}
void VecAdamFor(Isa isa, const AdamStep<float>& step, const float* var,
                const float* m, const float* v, const float* g, float* var_out,
                float* m_out, float* v_out, int64_t n) {
  GRADTAPE_DISPATCH(Adam, step, var, m, v, g, var_out, m_out, v_out, n);
}
void VecAdamFor(Isa isa, const AdamStep<double>& step, const double* var,
                const double* m, const double* v, const double* g,
                double* var_out, double* m_out, double* v_out, int64_t n) {
  GRADTAPE_DISPATCH(Adam, step, var, m, v, g, var_out, m_out, v_out, n);
}
void VecArithFor(Isa isa, VecArith op, const float* a, int64_t sa,
                 const float* b, int64_t sb, float* z, int64_t n) {
  GRADTAPE_DISPATCH(Arith, op, a, sa, b, sb, z, n);
}
void VecArithFor(Isa isa, VecArith op, const double* a, int64_t sa,
                 const double* b, int64_t sb, double* z, int64_t n) {
  GRADTAPE_DISPATCH(Arith, op, a, sa, b, sb, z, n);
}
void VecRowSumsFor(Isa isa, const float* x, int64_t rows, int64_t cols,
                   float* y) {
  GRADTAPE_DISPATCH(RowSums, x, rows, cols, y);
}
void VecRowSumsFor(Isa isa, const double* x, int64_t rows, int64_t cols,
                   double* y) {
  GRADTAPE_DISPATCH(RowSums, x, rows, cols, y);
}
void VecAddRowsFor(Isa isa, const float* x, int64_t rows, int64_t cols,
                   int64_t stride, float* y) {
  GRADTAPE_DISPATCH(AddRows, x, rows, cols, stride, y);
}
void VecAddRowsFor(Isa isa, const double* x, int64_t rows, int64_t cols,
                   int64_t stride, double* y) {
  GRADTAPE_DISPATCH(AddRows, x, rows, cols, stride, y);
}
void VecErfFor(Isa isa, const float* x, float* y, int64_t n) {
  GRADTAPE_DISPATCH(Erf, x, y, n);
}
void VecErfFor(Isa isa, const double* x, double* y, int64_t n) {
  GRADTAPE_DISPATCH(Erf, x, y, n);
}
void VecLoopBlockFor(Isa isa, const VecLoopOp<float>* ops, int num_ops,
                     int64_t n) {
  GRADTAPE_DISPATCH(LoopBlock, ops, num_ops, n);
}
void VecLoopBlockFor(Isa isa, const VecLoopOp<double>* ops, int num_ops,
                     int64_t n) {
  GRADTAPE_DISPATCH(LoopBlock, ops, num_ops, n);
}
void VecSoftmaxRowsFor(Isa isa, const float* x, float* y, float* shifted,
                       int64_t rows, int64_t cols, bool log, float* row_max,
                       float* row_sum) {
  GRADTAPE_DISPATCH(Softmax, x, y, shifted, rows, cols, log, row_max, row_sum);
}
void VecSoftmaxRowsFor(Isa isa, const double* x, double* y, double* shifted,
                       int64_t rows, int64_t cols, bool log, double* row_max,
                       double* row_sum) {
  GRADTAPE_DISPATCH(Softmax, x, y, shifted, rows, cols, log, row_max, row_sum);
}
#undef GRADTAPE_DISPATCH

}  // namespace vector_math_internal

using vector_math_internal::SelectedIsa;

void VecExp(const float* x, float* y, int64_t n) {
  vector_math_internal::VecExpFor(SelectedIsa(), x, y, n);
}
void VecExp(const double* x, double* y, int64_t n) {
  vector_math_internal::VecExpFor(SelectedIsa(), x, y, n);
}
void VecSigmoid(const float* x, float* y, int64_t n) {
  vector_math_internal::VecSigmoidFor(SelectedIsa(), x, y, n);
}
void VecSigmoid(const double* x, double* y, int64_t n) {
  vector_math_internal::VecSigmoidFor(SelectedIsa(), x, y, n);
}
void VecLog(const float* x, float* y, int64_t n) {
  vector_math_internal::VecLogFor(SelectedIsa(), x, y, n);
}
void VecLog(const double* x, double* y, int64_t n) {
  vector_math_internal::VecLogFor(SelectedIsa(), x, y, n);
}

void VecRowSums(const float* x, int64_t rows, int64_t cols, float* y) {
  vector_math_internal::VecRowSumsFor(SelectedIsa(), x, rows, cols, y);
}
void VecRowSums(const double* x, int64_t rows, int64_t cols, double* y) {
  vector_math_internal::VecRowSumsFor(SelectedIsa(), x, rows, cols, y);
}
void VecAddRows(const float* x, int64_t rows, int64_t cols, int64_t stride,
                float* y) {
  vector_math_internal::VecAddRowsFor(SelectedIsa(), x, rows, cols, stride, y);
}
void VecAddRows(const double* x, int64_t rows, int64_t cols, int64_t stride,
                double* y) {
  vector_math_internal::VecAddRowsFor(SelectedIsa(), x, rows, cols, stride, y);
}
void VecErf(const float* x, float* y, int64_t n) {
  vector_math_internal::VecErfFor(SelectedIsa(), x, y, n);
}
void VecErf(const double* x, double* y, int64_t n) {
  vector_math_internal::VecErfFor(SelectedIsa(), x, y, n);
}
void VecLoopBlock(const VecLoopOp<float>* ops, int num_ops, int64_t n) {
  vector_math_internal::VecLoopBlockFor(SelectedIsa(), ops, num_ops, n);
}
void VecLoopBlock(const VecLoopOp<double>* ops, int num_ops, int64_t n) {
  vector_math_internal::VecLoopBlockFor(SelectedIsa(), ops, num_ops, n);
}
void VecSoftmaxRows(const float* x, float* y, float* shifted, int64_t rows,
                    int64_t cols, bool log, float* row_max, float* row_sum) {
  vector_math_internal::VecSoftmaxRowsFor(SelectedIsa(), x, y, shifted, rows,
                                          cols, log, row_max, row_sum);
}
void VecSoftmaxRows(const double* x, double* y, double* shifted, int64_t rows,
                    int64_t cols, bool log, double* row_max, double* row_sum) {
  vector_math_internal::VecSoftmaxRowsFor(SelectedIsa(), x, y, shifted, rows,
                                          cols, log, row_max, row_sum);
}

void VecAdam(const AdamStep<float>& step, const float* var, const float* m,
             const float* v, const float* g, float* var_out, float* m_out,
             float* v_out, int64_t n) {
  vector_math_internal::VecAdamFor(SelectedIsa(), step, var, m, v, g, var_out,
                                   m_out, v_out, n);
}
void VecAdam(const AdamStep<double>& step, const double* var, const double* m,
             const double* v, const double* g, double* var_out, double* m_out,
             double* v_out, int64_t n) {
  vector_math_internal::VecAdamFor(SelectedIsa(), step, var, m, v, g, var_out,
                                   m_out, v_out, n);
}

void VecBinary(VecArith op, const float* a, int64_t sa, const float* b,
               int64_t sb, float* z, int64_t n) {
  vector_math_internal::VecArithFor(SelectedIsa(), op, a, sa, b, sb, z, n);
}
void VecBinary(VecArith op, const double* a, int64_t sa, const double* b,
               int64_t sb, double* z, int64_t n) {
  vector_math_internal::VecArithFor(SelectedIsa(), op, a, sa, b, sb, z, n);
}

const char* VectorMathIsa() {
  switch (SelectedIsa()) {
    case vector_math_internal::Isa::kAvx512:
      return "avx512";
    case vector_math_internal::Isa::kAvx2Fma:
      return "avx2+fma";
    case vector_math_internal::Isa::kBaseline:
      break;
  }
  return "baseline";
}

}  // namespace gradtape
