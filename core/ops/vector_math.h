// Elementwise transcendental functions and arithmetic over float32 and
// float64 arrays, compiled for several instruction sets and picked at run
// time from the CPU (AVX-512, AVX2 + FMA, or the portable SSE2 baseline), so
// a portable binary still uses the wide units of the machine it runs on.
//
// The functions are plain loops with no Eigen, compiled per ISA through
// function target attributes; no template code is instantiated under a
// wider ISA than the translation unit's, so nothing with vague linkage can
// leak AVX-512 code to older CPUs.
#ifndef GRADTAPE_CORE_OPS_VECTOR_MATH_H_
#define GRADTAPE_CORE_OPS_VECTOR_MATH_H_

#include <cstdint>

namespace gradtape {

// y[i] = e^x[i] for i in [0, n); x and y must not overlap. Within 2 ulp of the
// exact result for float (the range reduction of Cephes' expf and a degree-7
// polynomial) and double (degree-13 polynomial); overflow gives +inf, underflow
// 0 through correctly scaled subnormals, -inf gives 0 and NaN stays NaN.
void VecExp(const float* x, float* y, int64_t n);
void VecExp(const double* x, double* y, int64_t n);

// y[i] = 1 / (1 + e^-x[i]) (the logistic sigmoid) with VecExp's exp, as
// e^x / (1 + e^x) for negative x (no overflow: tiny results stay accurate).
void VecSigmoid(const float* x, float* y, int64_t n);
void VecSigmoid(const double* x, double* y, int64_t n);

// y[i] = ln x[i]: within 2 ulp (Cephes' logf polynomial and log's rational
// function); ln 0 = -inf, ln of a negative number NaN, ln inf = inf.
void VecLog(const float* x, float* y, int64_t n);
void VecLog(const double* x, double* y, int64_t n);

// y[i] = erf(x[i]): float within 7 ulp (our own rational fit, in
// vector_math.cc), double through std::erf; erf(+-inf) = +-1, NaN stays NaN,
// the sign of zero is kept. x and y must not overlap.
void VecErf(const float* x, float* y, int64_t n);
void VecErf(const double* x, double* y, int64_t n);

// y[i] = the sum of row i of `rows` contiguous rows of `cols` elements at x,
// through 8 lanes combined in a fixed order (the softmax's row sum): the
// same bits on every ISA and at any alignment. Sum and Mean over the last
// axis (core/ops/reduction_ops.cc) and fused loops' row sums use it, so
// both give the same bits.
void VecRowSums(const float* x, int64_t rows, int64_t cols, float* y);
void VecRowSums(const double* x, int64_t rows, int64_t cols, double* y);

// y[j] += x[r * stride + j] for j in [0, cols), r = 0, 1, ..., rows - 1 in
// that order: each column summed row by row onto y, as a scalar loop would
// (the same bits on every ISA). The Sum kernel's column sums and fused
// loops' column sums (core/ops/reduction_ops.cc, fused_loop.cc) use it.
// y must not overlap x.
void VecAddRows(const float* x, int64_t rows, int64_t cols, int64_t stride,
                float* y);
void VecAddRows(const double* x, int64_t rows, int64_t cols, int64_t stride,
                double* y);

// The softmax (log false) or log-softmax (log true) of each of `rows`
// contiguous rows of `cols` >= 1 elements, x into y (Softmax and LogSoftmax,
// core/ops/nn_ops.cc): per row m = max, s = the sum of e^(x - m) (VecExp's
// exp, summed through 8 lanes in a fixed order), then y = e^(x - m) * (1 / s)
// or y = (x - m) - ln s. `shifted` is scratch of `cols` elements; none of x,
// y and shifted overlap. Each row's m and s go to row_max[i] and
// row_sum[i] when those are not null (SparseSoftmaxCrossEntropyWithLogits'
// loss: ln s - (x[label] - m)).
void VecSoftmaxRows(const float* x, float* y, float* shifted, int64_t rows,
                    int64_t cols, bool log, float* row_max = nullptr,
                    float* row_sum = nullptr);
void VecSoftmaxRows(const double* x, double* y, double* shifted, int64_t rows,
                    int64_t cols, bool log, double* row_max = nullptr,
                    double* row_sum = nullptr);

// z[i] = a[i * sa] op b[i * sb] for i in [0, n), each stride 0 (a scalar
// broadcast) or 1, not both 0; z must not overlap a or b. One IEEE
// operation per element, so the same bits as a scalar loop on every ISA:
// the wide loop of a binary kernel's row (BinaryRow, kernel_util.h). The
// comparisons give 1 or 0 (a comparison's bool cast to T: fused loops,
// core/ops/fused_loop.cc).
enum class VecArith {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kEqual,
  kNotEqual,
  kGreater,
  kGreaterEqual,
  kLess,
  kLessEqual
};
void VecBinary(VecArith op, const float* a, int64_t sa, const float* b,
               int64_t sb, float* z, int64_t n);
void VecBinary(VecArith op, const double* a, int64_t sa, const double* b,
               int64_t sb, double* z, int64_t n);

// The ops of VecLoopBlock that read one operand, numbered after VecArith's.
enum class VecUnary { kNeg = 10, kSquare, kExp, kErf, kCopy };

// One op of VecLoopBlock: z[i] = a[i * sa] op b[i * sb], or z[i] = f(a[i *
// sa]) for a unary op (b unused), each stride 0 or 1. With every read
// operand of stride 0 the op is computed once and that value fills z. code
// is a VecArith's or a VecUnary's value; Neg is -a, Square a * a, Exp and
// Erf are VecExp's and VecErf's, Copy is a.
template <typename T>
struct VecLoopOp {
  int code;
  const T* a;
  int64_t sa;
  const T* b;
  int64_t sb;
  T* z;
};

// A fused loop's block (core/ops/fused_loop.cc): every op over elements
// [0, n), in order. It runs them strip by strip, each op over a few dozen
// elements before the next op, so the values an op passes to the next stay
// in the core's first-level cache. An op may read any earlier op's z; no z
// may overlap another op's operands or z. Each element gets what the ops
// one at a time over [0, n) (VecBinary, VecExp, VecErf) give: the same bits.
void VecLoopBlock(const VecLoopOp<float>* ops, int num_ops, int64_t n);
void VecLoopBlock(const VecLoopOp<double>* ops, int num_ops, int64_t n);

// One Adam step over n elements (ResourceApplyAdam, core/ops/training_ops.cc),
// reading the old values and writing the new ones in one pass:
//   m' = m + (g - m) * one_minus_beta1
//   v' = v + (g * g - v) * one_minus_beta2
//   var' = var - (m' * alpha) / (sqrt(v') + epsilon), or with nesterov
//   var' = var - ((g * one_minus_beta1 + beta1 * m') * alpha) /
//                (sqrt(v') + epsilon)
// in that order of operations, each rounded once (no fused multiply-add):
// the same bits on every ISA. Outputs must not overlap inputs.
template <typename T>
struct AdamStep {
  T one_minus_beta1, one_minus_beta2, beta1, alpha, epsilon;
  bool nesterov = false;
};
void VecAdam(const AdamStep<float>& step, const float* var, const float* m,
             const float* v, const float* g, float* var_out, float* m_out,
             float* v_out, int64_t n);
void VecAdam(const AdamStep<double>& step, const double* var, const double* m,
             const double* v, const double* g, double* var_out, double* m_out,
             double* v_out, int64_t n);

// The instruction set the functions above run with on this CPU: "avx512",
// "avx2+fma" or "baseline" (SSE2 on x86-64), for benchmark reports.
const char* VectorMathIsa();

namespace vector_math_internal {

// The instruction sets the functions above are compiled for.
enum class Isa { kBaseline, kAvx2Fma, kAvx512 };
// The one the functions above use on this CPU.
Isa SelectedIsa();
// Whether this CPU (and OS) can run `isa`.
bool CpuSupports(Isa isa);
// The variant for `isa`, for tests that check each one; only call it if
// CpuSupports(isa).
void VecExpFor(Isa isa, const float* x, float* y, int64_t n);
void VecExpFor(Isa isa, const double* x, double* y, int64_t n);
void VecSigmoidFor(Isa isa, const float* x, float* y, int64_t n);
void VecSigmoidFor(Isa isa, const double* x, double* y, int64_t n);
void VecLogFor(Isa isa, const float* x, float* y, int64_t n);
void VecLogFor(Isa isa, const double* x, double* y, int64_t n);
void VecRowSumsFor(Isa isa, const float* x, int64_t rows, int64_t cols,
                   float* y);
void VecRowSumsFor(Isa isa, const double* x, int64_t rows, int64_t cols,
                   double* y);
void VecAddRowsFor(Isa isa, const float* x, int64_t rows, int64_t cols,
                   int64_t stride, float* y);
void VecAddRowsFor(Isa isa, const double* x, int64_t rows, int64_t cols,
                   int64_t stride, double* y);
void VecErfFor(Isa isa, const float* x, float* y, int64_t n);
void VecErfFor(Isa isa, const double* x, double* y, int64_t n);
void VecLoopBlockFor(Isa isa, const VecLoopOp<float>* ops, int num_ops,
                     int64_t n);
void VecLoopBlockFor(Isa isa, const VecLoopOp<double>* ops, int num_ops,
                     int64_t n);
void VecSoftmaxRowsFor(Isa isa, const float* x, float* y, float* shifted,
                       int64_t rows, int64_t cols, bool log,
                       float* row_max = nullptr, float* row_sum = nullptr);
void VecSoftmaxRowsFor(Isa isa, const double* x, double* y, double* shifted,
                       int64_t rows, int64_t cols, bool log,
                       double* row_max = nullptr, double* row_sum = nullptr);
void VecAdamFor(Isa isa, const AdamStep<float>& step, const float* var,
                const float* m, const float* v, const float* g, float* var_out,
                float* m_out, float* v_out, int64_t n);
void VecAdamFor(Isa isa, const AdamStep<double>& step, const double* var,
                const double* m, const double* v, const double* g,
                double* var_out, double* m_out, double* v_out, int64_t n);
void VecArithFor(Isa isa, VecArith op, const float* a, int64_t sa,
                 const float* b, int64_t sb, float* z, int64_t n);
void VecArithFor(Isa isa, VecArith op, const double* a, int64_t sa,
                 const double* b, int64_t sb, double* z, int64_t n);

}  // namespace vector_math_internal
}  // namespace gradtape

#endif  // GRADTAPE_CORE_OPS_VECTOR_MATH_H_
