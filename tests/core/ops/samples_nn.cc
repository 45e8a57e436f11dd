// Gradient-check samples for the ops of core/ops/nn_ops.cc.
#include <string>

#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {

void AddNnSamples(SampleList& s) {
  s.Add("Relu", "away from 0", {RandomAwayFromZero({2, 3}, 1, 0.1, 47)});
  s.Add("ReluGrad", "features away from 0",
        {R({2, 3}, 48), RandomAwayFromZero({2, 3}, 1, 0.1, 49)});
  s.Add("BiasAdd", "matrix", {R({2, 3}, 50), R({3}, 51)});
  s.Add("BiasAdd", "rank 3", {R({2, 2, 3}, 52), R({3}, 53)});
  s.Add("BiasAddGrad", "rank 3", {R({2, 2, 3}, 54)});
  const AttrMap nchw = {{"data_format", std::string("NCHW")}};
  s.Add("BiasAdd", "NCHW rank 4", {R({2, 3, 2, 2}, 76), R({3}, 77)}, nchw);
  s.Add("BiasAdd", "NCHW rank 3", {R({2, 3, 2}, 78), R({3}, 79)}, nchw);
  s.Add("BiasAddGrad", "NCHW rank 4", {R({2, 3, 2, 2}, 80)}, nchw);
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
  s.Add("LeakyRelu", "away from 0", {RandomAwayFromZero({2, 3}, 2, 0.1, 430)});
  s.Add("LeakyRelu", "alpha 0.5", {RandomAwayFromZero({2, 3}, 2, 0.1, 431)},
        {{"alpha", 0.5}});
  s.Add("LeakyReluGrad", "features away from 0",
        {R({2, 3}, 432), RandomAwayFromZero({2, 3}, 2, 0.1, 433)});
  s.Add("LeakyReluGrad", "alpha 0.3",
        {R({2, 3}, 434), RandomAwayFromZero({2, 3}, 2, 0.1, 435)},
        {{"alpha", 0.3}});
  s.Add("SoftsignGrad", "features away from 0",
        {R({2, 3}, 67), RandomAwayFromZero({2, 3}, 2, 0.1, 68)});
  // Label rows are distributions (TensorFlow's gradient assumes they sum
  // to 1).
  s.Add("SoftmaxCrossEntropyWithLogits", "label distributions",
        {R({2, 3}, 69),
         Tensor::FromVector<double>({2, 3}, {0.2, 0.5, 0.3, 0.7, 0.1, 0.2})});
  s.Add("SoftmaxCrossEntropyWithLogits", "one-hot labels, 4 classes",
        {R({3, 4}, 70), Tensor::FromVector<double>(
                            {3, 4}, {0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1})});
  s.Add("LRN", "defaults", {R({1, 2, 2, 7}, 71)});
  s.Add("LRN", "depth_radius 1, bias alpha beta", {R({2, 1, 2, 4}, 72)},
        {{"depth_radius", int64_t{1}},
         {"bias", 2.0},
         {"alpha", 0.3},
         {"beta", 0.75}});
  s.Add("LRNGrad", "depth_radius 2",
        {R({1, 1, 2, 5}, 73), R({1, 1, 2, 5}, 74), R({1, 1, 2, 5}, 75)},
        {{"depth_radius", int64_t{2}}, {"alpha", 0.5}});
  // Distinct values 0.1 apart: a 1e-6 step never reorders them.
  s.Add("TopKV2", "k 2 of 4, rank 2",
        {Tensor::FromVector<double>({2, 4},
                                    {0.3, -0.5, 0.9, 0.1, -0.2, 0.4, 0.0, 0.6}),
         Tensor::Scalar<int32_t>(2)});
  s.Add("TopKV2", "k 3 of 3, int64 k and indices, unsorted",
        {Tensor::FromVector<double>({3}, {0.2, 0.7, -0.4}),
         Tensor::Scalar<int64_t>(3)},
        {{"sorted", false}, {"index_type", DType::kInt64}});
}

}  // namespace gradtape::testing
