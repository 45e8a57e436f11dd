#include "tests/core/op_samples.h"

#include <random>

namespace gradtape::testing {

Tensor RandomTensor(Shape shape, double lo, double hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = Tensor::Empty(DType::kFloat64, shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    t.mutable_data<double>()[i] = dist(rng);
  }
  return t;
}

Tensor RandomAwayFromZero(Shape shape, double hi, double margin,
                          uint32_t seed) {
  Tensor t = RandomTensor(shape, margin, hi, seed);
  std::mt19937 rng(seed + 1);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (rng() % 2) t.mutable_data<double>()[i] *= -1;
  }
  return t;
}

namespace {

Tensor R(Shape shape, uint32_t seed) {
  return RandomTensor(shape, -1, 1, seed);
}
Tensor Positive(Shape shape, uint32_t seed) {
  return RandomTensor(shape, 0.5, 2.0, seed);
}
std::vector<int64_t> L(std::initializer_list<int64_t> v) { return v; }

std::vector<OpSample> MakeSamples() {
  std::vector<OpSample> s;
  auto add = [&](std::string op, std::string label, std::vector<Tensor> in,
                 AttrMap attrs = {}) {
    s.push_back(
        {std::move(op), std::move(label), std::move(in), std::move(attrs)});
  };
  for (const char* op : {"AddV2", "Add", "Sub", "Mul"}) {
    add(op, "same shape", {R({2, 3}, 1), R({2, 3}, 2)});
    add(op, "row broadcast", {R({2, 3}, 3), R({3}, 4)});
    add(op, "outer broadcast", {R({2, 1}, 5), R({1, 3}, 6)});
    add(op, "scalar", {R({}, 7), R({2, 2}, 8)});
  }
  for (const char* op : {"RealDiv", "Div"}) {
    add(op, "same shape", {R({2, 3}, 9), Positive({2, 3}, 10)});
    add(op, "broadcast", {R({3, 1}, 11), Positive({2}, 12)});
  }
  add("Neg", "matrix", {R({2, 3}, 13)});
  add("Square", "matrix", {R({2, 3}, 14)});
  add("Sqrt", "positive", {Positive({2, 3}, 15)});
  add("SqrtGrad", "y positive", {Positive({2, 3}, 16), R({2, 3}, 17)});
  add("Exp", "matrix", {R({2, 3}, 18)});
  add("Log", "positive", {Positive({2, 3}, 19)});
  add("Tanh", "matrix", {R({2, 3}, 20)});
  add("TanhGrad", "matrix", {R({2, 3}, 21), R({2, 3}, 22)});
  add("Sigmoid", "matrix", {R({2, 3}, 23)});
  add("SigmoidGrad", "matrix", {R({2, 3}, 24), R({2, 3}, 25)});
  add("MatMul", "plain", {R({2, 3}, 26), R({3, 4}, 27)});
  add("MatMul", "transpose_a", {R({3, 2}, 28), R({3, 4}, 29)},
      {{"transpose_a", true}});
  add("MatMul", "transpose_b", {R({2, 3}, 30), R({4, 3}, 31)},
      {{"transpose_b", true}});
  add("MatMul", "both transposed", {R({3, 2}, 32), R({4, 3}, 33)},
      {{"transpose_a", true}, {"transpose_b", true}});
  for (const char* op : {"Sum", "Mean"}) {
    add(op, "all axes", {R({2, 3}, 34)});
    add(op, "axis 1", {R({2, 3, 2}, 35)}, {{"axis", L({1})}});
    add(op, "axes 0,-1 keep_dims", {R({2, 3, 2}, 36)},
        {{"axis", L({0, -1})}, {"keep_dims", true}});
  }
  add("Identity", "matrix", {R({2, 3}, 37)});
  add("Reshape", "with -1", {R({2, 3}, 38)}, {{"shape", L({3, -1})}});
  add("Transpose", "perm 2,0,1", {R({2, 3, 2}, 39)}, {{"perm", L({2, 0, 1})}});
  add("Transpose", "default reverses", {R({2, 3}, 40)});
  add("Cast", "float64 to float64", {R({2, 3}, 41)},
      {{"DstT", DType::kFloat64}});
  add("Cast", "float64 to int32", {RandomTensor({2, 3}, 0.1, 5, 42)},
      {{"DstT", DType::kInt32}});
  add("BroadcastTo", "row to matrix", {R({3}, 43)}, {{"shape", L({2, 3})}});
  add("BroadcastTo", "column to matrix", {R({2, 1}, 44)},
      {{"shape", L({2, 3})}});
  add("ZerosLike", "matrix", {R({2, 3}, 45)});
  add("OnesLike", "matrix", {R({2, 3}, 46)});
  add("Relu", "away from 0", {RandomAwayFromZero({2, 3}, 1, 0.1, 47)});
  add("ReluGrad", "features away from 0",
      {R({2, 3}, 48), RandomAwayFromZero({2, 3}, 1, 0.1, 49)});
  add("BiasAdd", "matrix", {R({2, 3}, 50), R({3}, 51)});
  add("BiasAdd", "rank 3", {R({2, 2, 3}, 52), R({3}, 53)});
  add("BiasAddGrad", "rank 3", {R({2, 2, 3}, 54)});
  add("Softmax", "matrix", {R({2, 4}, 55)});
  add("LogSoftmax", "matrix", {R({2, 4}, 56)});
  add("SparseSoftmaxCrossEntropyWithLogits", "int32 labels",
      {R({3, 4}, 57), Tensor::FromVector<int32_t>({3}, {0, 3, 1})});
  add("SparseSoftmaxCrossEntropyWithLogits", "int64 labels",
      {R({2, 3}, 58), Tensor::FromVector<int64_t>({2}, {2, 0})});
  add("OneHot", "int32 indices", {Tensor::FromVector<int32_t>({3}, {0, 2, 1})},
      {{"depth", int64_t{3}}, {"T", DType::kFloat64}});
  return s;
}

}  // namespace

const std::vector<OpSample>& AllOpSamples() {
  static const auto* samples = new std::vector<OpSample>(MakeSamples());
  return *samples;
}

}  // namespace gradtape::testing
