// Gradient-check samples for the ops of core/ops/array_ops.cc.
#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {

void AddArraySamples(SampleList& s) {
  s.Add("Identity", "matrix", {R({2, 3}, 37)});
  s.Add("Reshape", "with -1", {R({2, 3}, 38)}, {{"shape", L({3, -1})}});
  s.Add("Transpose", "perm 2,0,1", {R({2, 3, 2}, 39)},
        {{"perm", L({2, 0, 1})}});
  s.Add("Transpose", "default reverses", {R({2, 3}, 40)});
  s.Add("Cast", "float64 to float64", {R({2, 3}, 41)},
        {{"DstT", DType::kFloat64}});
  s.Add("Cast", "float64 to int32", {RandomTensor({2, 3}, 0.1, 5, 42)},
        {{"DstT", DType::kInt32}});
  s.Add("BroadcastTo", "row to matrix", {R({3}, 43)}, {{"shape", L({2, 3})}});
  s.Add("BroadcastTo", "column to matrix", {R({2, 1}, 44)},
        {{"shape", L({2, 3})}});
  s.Add("ZerosLike", "matrix", {R({2, 3}, 45)});
  s.Add("OnesLike", "matrix", {R({2, 3}, 46)});
  s.Add("Shape", "int32", {R({2, 3}, 47)});
  s.Add("Shape", "int64", {R({2, 1, 3}, 48)}, {{"out_type", DType::kInt64}});
  s.Add("GatherV2", "rows, int32, repeated index",
        {R({4, 3}, 49), Tensor::FromVector<int32_t>({3}, {2, 0, 2})});
  s.Add("GatherV2", "axis 1, int64 indices of rank 2",
        {R({2, 3, 2}, 50), Tensor::FromVector<int64_t>({2, 2}, {2, 0, 1, 2})},
        {{"axis", int64_t{1}}});
  s.Add("GatherV2", "axis -1",
        {R({2, 3}, 51), Tensor::FromVector<int32_t>({2}, {1, 1})},
        {{"axis", int64_t{-1}}});
  s.Add("GatherV2", "batch_dims 1, axis 1",
        {R({2, 3, 2}, 52), Tensor::FromVector<int32_t>({2, 2}, {2, 0, 1, 1})},
        {{"axis", int64_t{1}}, {"batch_dims", int64_t{1}}});
  s.Add("GatherV2", "batch_dims -1 (= 1), axis 2, int64",
        {R({2, 2, 3}, 53), Tensor::FromVector<int64_t>({2, 2}, {0, 2, 1, 1})},
        {{"axis", int64_t{2}}, {"batch_dims", int64_t{-1}}});
  s.Add("StopGradient", "matrix", {R({2, 3}, 52)});
  s.Add("PreventGradient", "with a message", {R({2, 3}, 53)},
        {{"message", std::string("no gradient here")}});
}

}  // namespace gradtape::testing
