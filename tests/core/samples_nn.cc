// Gradient-check samples for the ops of core/ops/nn_ops.cc.
#include "tests/core/op_samples.h"

namespace gradtape::testing {

void AddNnSamples(SampleList& s) {
  s.Add("Relu", "away from 0", {RandomAwayFromZero({2, 3}, 1, 0.1, 47)});
  s.Add("ReluGrad", "features away from 0",
        {R({2, 3}, 48), RandomAwayFromZero({2, 3}, 1, 0.1, 49)});
  s.Add("BiasAdd", "matrix", {R({2, 3}, 50), R({3}, 51)});
  s.Add("BiasAdd", "rank 3", {R({2, 2, 3}, 52), R({3}, 53)});
  s.Add("BiasAddGrad", "rank 3", {R({2, 2, 3}, 54)});
  s.Add("Softmax", "matrix", {R({2, 4}, 55)});
  s.Add("LogSoftmax", "matrix", {R({2, 4}, 56)});
  s.Add("SparseSoftmaxCrossEntropyWithLogits", "int32 labels",
        {R({3, 4}, 57), Tensor::FromVector<int32_t>({3}, {0, 3, 1})});
  s.Add("SparseSoftmaxCrossEntropyWithLogits", "int64 labels",
        {R({2, 3}, 58), Tensor::FromVector<int64_t>({2}, {2, 0})});
  s.Add("OneHot", "int32 indices",
        {Tensor::FromVector<int32_t>({3}, {0, 2, 1})},
        {{"depth", int64_t{3}}, {"T", DType::kFloat64}});
}

}  // namespace gradtape::testing
