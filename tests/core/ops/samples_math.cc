// Gradient-check samples for the ops of core/ops/math_ops.cc.
#include <initializer_list>
#include <string>

#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {
namespace {

Tensor I32(std::initializer_list<int32_t> v) {
  return Tensor::FromVector<int32_t>({static_cast<int64_t>(v.size())}, v);
}
Tensor I64(std::initializer_list<int64_t> v) {
  return Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size())}, v);
}

// Rsqrt .. ClipByValue (issue 16).
void AddMoreMathSamples(SampleList& s) {
  s.Add("Rsqrt", "positive", {Positive({2, 3}, 401)});
  s.Add("RsqrtGrad", "y positive", {Positive({2, 3}, 402), R({2, 3}, 403)});
  s.Add("Erf", "matrix", {RandomTensor({2, 3}, -2, 2, 404)});
  s.Add("Erfc", "matrix", {RandomTensor({2, 3}, -2, 2, 405)});
  // Not differentiable (TensorFlow: None): values away from integers and
  // halves, for the generic checks of the forward.
  const Tensor steps =
      Tensor::FromVector<double>({2, 3}, {-1.7, -0.2, 0.3, 1.2, 2.6, -2.4});
  for (const char* op : {"Floor", "Ceil", "Round"})
    s.Add(op, "matrix", {steps});
  // Atan2: x and y away from 0 (the origin and the branch cut at x < 0).
  s.Add("Atan2", "same shape",
        {RandomAwayFromZero({2, 3}, 2, 0.3, 406),
         RandomAwayFromZero({2, 3}, 2, 0.3, 407)});
  s.Add("Atan2", "outer broadcast",
        {RandomAwayFromZero({2, 1}, 2, 0.3, 408),
         RandomAwayFromZero({1, 3}, 2, 0.3, 409)});
  s.Add("Atan2", "scalar x",
        {RandomAwayFromZero({3}, 2, 0.3, 410), Tensor::Scalar<double>(-0.7)});
  // Max / Min: random values have no ties.
  for (const char* op : {"Max", "Min"}) {
    s.Add(op, "int32 scalar axis",
          {R({2, 3}, 411), Tensor::Scalar<int32_t>(1)});
    s.Add(op, "int64 axes 0,-1 keep_dims", {R({2, 3, 2}, 412), I64({0, -1})},
          {{"keep_dims", true}});
    s.Add(op, "all axes", {R({2, 3}, 413), I32({0, 1})});
    s.Add(op, "empty axis: no reduction", {R({2, 2}, 414), I32({})});
  }
  for (const char* op : {"ArgMax", "ArgMin"}) {
    s.Add(op, "int32 dimension", {R({2, 3}, 415), Tensor::Scalar<int32_t>(1)});
    s.Add(op, "int64 dimension -3, output_type int32",
          {R({2, 3, 2}, 416), Tensor::Scalar<int64_t>(-3)},
          {{"output_type", DType::kInt32}});
  }
  s.Add("SelectV2", "all three broadcast",
        {Tensor::FromVector<bool>({2, 1}, {true, false}), R({3}, 417),
         R({2, 3}, 418)});
  s.Add("SelectV2", "scalar condition, t broadcast",
        {Tensor::Scalar<bool>(false), R({1, 2}, 419), R({3, 2}, 420)});
  s.Add("SelectV2", "same shape",
        {Tensor::FromVector<bool>({2, 2}, {true, false, false, true}),
         R({2, 2}, 421), R({2, 2}, 422)});
  // ClipByValue: t away from the bounds (kinks), some of it clipped.
  s.Add("ClipByValue", "scalar bounds",
        {Tensor::FromVector<double>({2, 3}, {-1.5, -0.3, 0.2, 0.9, 1.6, -0.8}),
         Tensor::Scalar<double>(-0.5), Tensor::Scalar<double>(0.5)});
  s.Add("ClipByValue", "broadcast bounds",
        {Tensor::FromVector<double>({2, 3}, {-1.5, -0.3, 0.2, 0.9, 1.6, -0.8}),
         Tensor::FromVector<double>({3}, {-1.0, -0.6, -0.4}),
         Tensor::FromVector<double>({2, 1}, {0.1, 1.2})});
  s.Add("ClipByValue", "same shape bounds",
        {Tensor::FromVector<double>({4}, {-2.0, 0.0, 3.0, 1.0}),
         Tensor::FromVector<double>({4}, {-1.0, -1.0, -1.0, 1.5}),
         Tensor::FromVector<double>({4}, {1.0, 1.0, 2.0, 2.5})});
}

}  // namespace

void AddMathSamples(SampleList& s) {
  AddMoreMathSamples(s);
  for (const char* op : {"AddV2", "Add", "Sub", "Mul"}) {
    s.Add(op, "same shape", {R({2, 3}, 1), R({2, 3}, 2)});
    s.Add(op, "row broadcast", {R({2, 3}, 3), R({3}, 4)});
    s.Add(op, "outer broadcast", {R({2, 1}, 5), R({1, 3}, 6)});
    s.Add(op, "scalar", {R({}, 7), R({2, 2}, 8)});
  }
  for (const char* op : {"RealDiv", "Div"}) {
    s.Add(op, "same shape", {R({2, 3}, 9), Positive({2, 3}, 10)});
    s.Add(op, "broadcast", {R({3, 1}, 11), Positive({2}, 12)});
  }
  s.Add("Neg", "matrix", {R({2, 3}, 13)});
  s.Add("Square", "matrix", {R({2, 3}, 14)});
  s.Add("Sqrt", "positive", {Positive({2, 3}, 15)});
  s.Add("SqrtGrad", "y positive", {Positive({2, 3}, 16), R({2, 3}, 17)});
  s.Add("Exp", "matrix", {R({2, 3}, 18)});
  s.Add("Log", "positive", {Positive({2, 3}, 19)});
  s.Add("Tanh", "matrix", {R({2, 3}, 20)});
  s.Add("TanhGrad", "matrix", {R({2, 3}, 21), R({2, 3}, 22)});
  s.Add("Sigmoid", "matrix", {R({2, 3}, 23)});
  s.Add("SigmoidGrad", "matrix", {R({2, 3}, 24), R({2, 3}, 25)});
  s.Add("MatMul", "plain", {R({2, 3}, 26), R({3, 4}, 27)});
  s.Add("MatMul", "transpose_a", {R({3, 2}, 28), R({3, 4}, 29)},
        {{"transpose_a", true}});
  s.Add("MatMul", "transpose_b", {R({2, 3}, 30), R({4, 3}, 31)},
        {{"transpose_b", true}});
  s.Add("MatMul", "both transposed", {R({3, 2}, 32), R({4, 3}, 33)},
        {{"transpose_a", true}, {"transpose_b", true}});
  for (const char* op : {"Sum", "Mean"}) {
    s.Add(op, "all axes", {R({2, 3}, 34)});
    s.Add(op, "axis 1", {R({2, 3, 2}, 35)}, {{"axis", L({1})}});
    s.Add(op, "axes 0,-1 keep_dims", {R({2, 3, 2}, 36)},
          {{"axis", L({0, -1})}, {"keep_dims", true}});
  }
  for (const char* op :
       {"Equal", "NotEqual", "Greater", "GreaterEqual", "Less", "LessEqual"}) {
    s.Add(op, "broadcast", {R({2, 3}, 37), R({3}, 38)});
  }
  Tensor mask =
      Tensor::FromVector<bool>({2, 3}, {true, false, false, true, true, false});
  s.Add("Select", "elementwise condition",
        {mask, R({2, 3}, 39), R({2, 3}, 40)});
  s.Add("Select", "vector condition",
        {Tensor::FromVector<bool>({2}, {false, true}), R({2, 3}, 41),
         R({2, 3}, 42)});
  s.Add("Select", "scalar condition",
        {Tensor::Scalar<bool>(true), R({2, 2}, 43), R({2, 2}, 44)});
  s.Add("Abs", "away from 0", {RandomAwayFromZero({2, 3}, 1, 0.1, 45)});
  s.Add("Sign", "away from 0", {RandomAwayFromZero({2, 3}, 1, 0.1, 46)});
  s.Add("Expm1", "matrix", {R({2, 3}, 47)});
  s.Add("Log1p", "x > -0.5", {RandomTensor({2, 3}, -0.5, 2, 48)});
  s.Add("Sin", "matrix", {RandomTensor({2, 3}, -3, 3, 49)});
  s.Add("Cos", "matrix", {RandomTensor({2, 3}, -3, 3, 50)});
  s.Add("Tan", "|x| < 1.2", {RandomTensor({2, 3}, -1.2, 1.2, 51)});
  for (const char* op : {"Reciprocal", "Inv"}) {
    s.Add(op, "away from 0", {RandomAwayFromZero({2, 3}, 2, 0.5, 52)});
  }
  s.Add("ReciprocalGrad", "y away from 0",
        {RandomAwayFromZero({2, 3}, 2, 0.5, 53), R({2, 3}, 54)});
  for (const char* op : {"Maximum", "Minimum", "SquaredDifference"}) {
    s.Add(op, "same shape", {R({2, 3}, 55), R({2, 3}, 56)});
    s.Add(op, "row broadcast", {R({2, 3}, 57), R({3}, 58)});
    s.Add(op, "outer broadcast", {R({2, 1}, 59), R({1, 3}, 60)});
    s.Add(op, "scalar", {R({}, 61), R({2, 2}, 62)});
  }
  // Pow: bases kept positive (log(x) and a real x^y need x > 0).
  s.Add("Pow", "same shape", {Positive({2, 3}, 320), R({2, 3}, 321)});
  s.Add("Pow", "row broadcast", {Positive({2, 3}, 322), R({3}, 323)});
  s.Add("Pow", "scalar exponent",
        {Positive({2, 2}, 324), Tensor::Scalar<double>(2.5)});
  s.Add("Pow", "scalar base", {Tensor::Scalar<double>(1.7), R({3}, 325)});
  s.Add("L2Loss", "matrix", {R({2, 3}, 63)});
  s.Add("L2Loss", "scalar", {R({}, 64)});
  s.Add("Prod", "all axes", {RandomAwayFromZero({2, 3}, 1.5, 0.5, 65)});
  s.Add("Prod", "axis 1", {R({2, 3, 2}, 66)}, {{"axis", L({1})}});
  s.Add("Prod", "axes 0,-1 keep_dims", {R({2, 3, 2}, 67)},
        {{"axis", L({0, -1})}, {"keep_dims", true}});
  s.Add("Prod", "leading axis", {R({3, 2}, 68)}, {{"axis", L({0})}});
  for (const char* op : {"Cumsum", "Cumprod"}) {
    for (bool exclusive : {false, true}) {
      for (bool reverse : {false, true}) {
        std::string label = std::string("axis 1") +
                            (exclusive ? " exclusive" : "") +
                            (reverse ? " reverse" : "");
        s.Add(op, label, {RandomAwayFromZero({2, 3}, 1.5, 0.5, 69)},
              {{"axis", int64_t{1}},
               {"exclusive", exclusive},
               {"reverse", reverse}});
      }
    }
    s.Add(op, "axis 0 of rank 3",
          {RandomAwayFromZero({3, 2, 2}, 1.5, 0.5, 70)});
    s.Add(op, "axis -2 exclusive reverse",
          {RandomAwayFromZero({2, 3, 2}, 1.5, 0.5, 71)},
          {{"axis", int64_t{-2}}, {"exclusive", true}, {"reverse", true}});
  }
}

}  // namespace gradtape::testing
