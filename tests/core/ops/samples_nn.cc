// Gradient-check samples for the ops of core/ops/nn_ops.cc.
#include "tests/core/ops/op_samples.h"

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
  s.Add("OneHot", "axis 0, int64 matrix of indices",
        {Tensor::FromVector<int64_t>({2, 2}, {0, 2, 1, 3})},
        {{"depth", int64_t{3}}, {"T", DType::kFloat64}, {"axis", int64_t{0}}});
  s.Add("BiasAddV1", "rank 3", {R({2, 2, 3}, 59), R({3}, 60)});
  s.Add("Relu6", "away from 0 and 6",
        {Tensor::FromVector<double>({2, 3}, {-1.5, 0.7, 3.2, 5.5, 6.8, -0.2})});
  s.Add("Relu6Grad", "features away from 0 and 6",
        {R({2, 3}, 61),
         Tensor::FromVector<double>({2, 3}, {-1.5, 0.7, 3.2, 5.5, 6.8, -0.2})});
  for (const char* op : {"Elu", "Selu", "Softplus", "Softsign"}) {
    s.Add(op, "away from 0", {RandomAwayFromZero({2, 3}, 2, 0.1, 62)});
  }
  s.Add("Softplus", "large |x|",
        {Tensor::FromVector<double>({4}, {-30, -8, 8, 30})});
  for (const char* op : {"EluGrad", "SeluGrad"}) {
    // outputs of Elu / Selu lie above -1 / -scale * alpha.
    s.Add(op, "outputs away from 0",
          {R({2, 3}, 63), RandomAwayFromZero({2, 3}, 0.9, 0.1, 64)});
  }
  s.Add("SoftplusGrad", "matrix",
        {R({2, 3}, 65), RandomTensor({2, 3}, -3, 3, 66)});
  s.Add("SoftsignGrad", "features away from 0",
        {R({2, 3}, 67), RandomAwayFromZero({2, 3}, 2, 0.1, 68)});
}

}  // namespace gradtape::testing
