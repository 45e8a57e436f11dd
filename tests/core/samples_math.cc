// Gradient-check samples for the ops of core/ops/math_ops.cc.
#include "tests/core/op_samples.h"

namespace gradtape::testing {

void AddMathSamples(SampleList& s) {
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
}

}  // namespace gradtape::testing
