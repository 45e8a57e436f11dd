// Gradient-check samples for the ops of core/ops/complex_ops.cc and the
// other ops on complex128 inputs.
#include <string>
#include <vector>

#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {
namespace {

// re + i im, complex128.
Tensor MakeComplex(const Tensor& re, const Tensor& im) {
  Tensor z = Tensor::Empty(DType::kComplex128, re.shape()).value();
  for (int64_t i = 0; i < re.num_elements(); ++i) {
    z.mutable_data<complex128>()[i] =
        complex128(re.data<double>()[i], im.data<double>()[i]);
  }
  return z;
}

// Complex128 with real and imaginary parts uniform in [-1, 1] (seeds seed
// and seed + 1).
Tensor C(Shape shape, uint32_t seed) {
  return MakeComplex(R(shape, seed), R(shape, seed + 1));
}

// Complex128 with |Re| >= 0.5: away from 0, for the products whose
// backwards divide by the input where it is nonzero.
Tensor CAway(Shape shape, uint32_t seed) {
  return MakeComplex(RandomAwayFromZero(shape, 1.5, 0.5, seed),
                     R(shape, seed + 1));
}

// `z` with the elements at `at` set to 0 (the products' zero branches).
Tensor WithZeros(Tensor z, std::initializer_list<int64_t> at) {
  for (int64_t k : at) z.mutable_data<complex128>()[k] = 0;
  return z;
}

Tensor I32(Shape shape, std::vector<int32_t> v) {
  return Tensor::FromVector<int32_t>(shape, v);
}

// Products, scans and segment reductions on complex (the products'
// backwards conjugate; sums and means need no conj).
void AddComplexReductionSamples(SampleList& s) {
  s.Add("Prod", "complex, all axes", {CAway({2, 3}, 300)});
  s.Add("Prod", "complex, axis 1", {C({2, 3, 2}, 302)}, {{"axis", L({1})}});
  s.Add("Prod", "complex, axes 0,-1 keep_dims", {C({2, 3, 2}, 304)},
        {{"axis", L({0, -1})}, {"keep_dims", true}});
  s.Add("Prod", "complex, axis 0, a zero in a group",
        {WithZeros(C({3, 2}, 306), {2})}, {{"axis", L({0})}});
  for (bool exclusive : {false, true}) {
    for (bool reverse : {false, true}) {
      const std::string flags = std::string(exclusive ? " exclusive" : "") +
                                (reverse ? " reverse" : "");
      const AttrMap attrs = {
          {"axis", int64_t{1}}, {"exclusive", exclusive}, {"reverse", reverse}};
      s.Add("Cumprod", "complex, axis 1" + flags, {CAway({2, 3}, 308)}, attrs);
      // Row 0 holds one zero, row 1 two.
      s.Add("Cumprod", "complex, zeros" + flags,
            {WithZeros(CAway({2, 4}, 310), {1, 5, 6})}, attrs);
    }
  }
  for (const char* op : {"SegmentSum", "SegmentMean", "SegmentProd"}) {
    s.Add(op, "complex, segment 2 empty",
          {C({5, 2}, 312), I32({5}, {0, 0, 1, 3, 3})});
  }
  // Segment 0 holds one zero, segment 1 two.
  s.Add("SegmentProd", "complex, zeros in segments",
        {WithZeros(C({6}, 314), {1, 3, 4}), I32({6}, {0, 0, 0, 1, 1, 2})});
  s.Add("UnsortedSegmentSum", "complex, segment 3 empty, a negative id",
        {C({5, 2}, 316), I32({5}, {2, 0, -1, 1, 0})},
        {{"num_segments", int64_t{4}}});
  s.Add(
      "UnsortedSegmentProd", "complex, segment 3 empty, a negative id",
      {C({5, 2}, 318), I32({5}, {2, 0, -1, 1, 0}), Tensor::Scalar<int32_t>(4)});
  // Segment 0 holds one zero, segment 1 two.
  s.Add("UnsortedSegmentProd", "complex, zeros in segments",
        {WithZeros(C({6}, 320), {0, 2, 4}), I32({6}, {1, 0, 1, 2, 0, 0}),
         Tensor::Scalar<int32_t>(3)});
}

}  // namespace

void AddComplexSamples(SampleList& s) {
  s.Add("Complex", "same shape", {R({2, 3}, 201), R({2, 3}, 202)});
  s.Add("Complex", "broadcast", {R({2, 1}, 203), R({3}, 204)});
  s.Add("Real", "matrix", {MakeComplex(R({2, 3}, 205), R({2, 3}, 206))});
  s.Add("Imag", "matrix", {MakeComplex(R({2, 3}, 207), R({2, 3}, 208))});
  // Right half-plane: away from the origin and the branch cut of arg.
  s.Add("Angle", "right half-plane",
        {MakeComplex(Positive({2, 3}, 209), R({2, 3}, 210))});
  s.Add("Conj", "matrix", {MakeComplex(R({2, 3}, 211), R({2, 3}, 212))});
  // Arithmetic on complex tensors (backwards conjugate, as TensorFlow's).
  s.Add("Mul", "complex broadcast",
        {MakeComplex(R({2, 3}, 213), R({2, 3}, 214)),
         MakeComplex(R({3}, 215), R({3}, 216))});
  s.Add("RealDiv", "complex",
        {MakeComplex(R({2, 2}, 217), R({2, 2}, 218)),
         MakeComplex(Positive({2, 2}, 219), Positive({2, 2}, 220))});
  s.Add("AddV2", "complex",
        {MakeComplex(R({2}, 221), R({2}, 222)),
         MakeComplex(R({2}, 223), R({2}, 224))});
  s.Add("Neg", "complex", {MakeComplex(R({2}, 225), R({2}, 226))});
  // Right half-plane: away from the branch cut of log.
  s.Add("Log", "complex, right half-plane",
        {MakeComplex(Positive({2, 3}, 227), R({2, 3}, 228))});
  // Unary ops on complex (backwards conjugate, as TensorFlow's).
  s.Add("Square", "complex", {MakeComplex(R({2, 3}, 233), R({2, 3}, 234))});
  s.Add("Exp", "complex", {MakeComplex(R({2, 3}, 235), R({2, 3}, 236))});
  // |Im| < 1: away from tanh's poles at i pi / 2.
  s.Add("Tanh", "complex", {MakeComplex(R({2, 3}, 237), R({2, 3}, 238))});
  s.Add("TanhGrad", "complex",
        {MakeComplex(R({2, 3}, 239), R({2, 3}, 240)),
         MakeComplex(R({2, 3}, 241), R({2, 3}, 242))});
  // Right half-plane: away from the branch cut of sqrt.
  for (const char* op : {"Sqrt", "Rsqrt"}) {
    s.Add(op, "complex, right half-plane",
          {MakeComplex(Positive({2, 3}, 243), R({2, 3}, 244))});
  }
  for (const char* op : {"SqrtGrad", "RsqrtGrad"}) {
    s.Add(op, "complex, y in the right half-plane",
          {MakeComplex(Positive({2, 3}, 245), R({2, 3}, 246)),
           MakeComplex(R({2, 3}, 247), R({2, 3}, 248))});
  }
  // |z| < 1.5: away from tan's poles and log1p's branch point at -1.
  for (const char* op : {"Sin", "Cos", "Tan", "Expm1", "Log1p", "Sigmoid"}) {
    s.Add(op, "complex", {MakeComplex(R({2, 3}, 249), R({2, 3}, 250))});
  }
  s.Add("SigmoidGrad", "complex",
        {MakeComplex(R({2, 3}, 251), R({2, 3}, 252)),
         MakeComplex(R({2, 3}, 253), R({2, 3}, 254))});
  // Products: MatMul's transpose_* transposes, BatchMatMul's adj_* is the
  // adjoint (backwards conjugate, as TensorFlow's).
  uint32_t seed = 255;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Shape sa = ta ? Shape{3, 2} : Shape{2, 3};
      const Shape sb = tb ? Shape{4, 3} : Shape{3, 4};
      s.Add("MatMul",
            std::string("complex") + (ta ? ", transpose_a" : "") +
                (tb ? ", transpose_b" : ""),
            {C(sa, seed), C(sb, seed + 2)},
            {{"transpose_a", ta}, {"transpose_b", tb}});
      // The same operands with a batch dim of 2 on x, 1 on y (broadcast).
      Shape bx = sa, by = sb;
      bx.insert(bx.begin(), 2);
      by.insert(by.begin(), 1);
      s.Add("BatchMatMulV2",
            std::string("complex, y broadcast") + (ta ? ", adj_x" : "") +
                (tb ? ", adj_y" : ""),
            {C(bx, seed + 4), C(by, seed + 6)}, {{"adj_x", ta}, {"adj_y", tb}});
      seed += 8;
    }
  }
  s.Add("BatchMatMul", "complex, adj_x", {C({2, 3, 2}, 290), C({2, 3, 2}, 292)},
        {{"adj_x", true}});
  s.Add("BatchMatMulV3", "complex, adj_y",
        {C({2, 2, 3}, 294), C({2, 2, 3}, 296)},
        {{"Tout", DType::kComplex128}, {"adj_y", true}});
  // Einsum: the product conjugates the other operand in its backward
  // (TensorFlow's _EinsumGrad); a unary form is linear.
  auto einsum = [&](const char* equation, std::vector<Tensor> in) {
    const int64_t n = static_cast<int64_t>(in.size());
    s.Add("Einsum", std::string("complex ") + equation, std::move(in),
          {{"equation", std::string(equation)}, {"N", n}});
  };
  einsum("ij,jk->ik", {C({2, 3}, 300), C({3, 2}, 302)});
  einsum("...ij,jk->...ik", {C({2, 2, 3}, 304), C({3, 2}, 306)});
  einsum("ij,k->ik", {C({2, 3}, 308), C({2}, 310)});
  einsum("ii->i", {C({3, 3}, 312)});
  s.Add("BiasAdd", "complex, NCHW", {C({2, 3, 2}, 314), C({3}, 316)},
        {{"data_format", std::string("NCHW")}});
  s.Add("BiasAddV1", "complex", {C({2, 3}, 318), C({3}, 320)});
  s.Add("BiasAddGrad", "complex", {C({2, 3}, 322)});
  s.Add("SquaredDifference", "complex, broadcast",
        {C({2, 3}, 324), C({3}, 326)});
  s.Add("Pow", "complex, broadcast exponent",
        {MakeComplex(Positive({2, 3}, 229), R({2, 3}, 230)),
         MakeComplex(R({3}, 231), R({3}, 232))});
  AddComplexReductionSamples(s);
}

}  // namespace gradtape::testing
