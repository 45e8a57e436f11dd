// Gradient-check samples for the ops of core/ops/array_ops.cc.
#include "tests/core/op_samples.h"

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
}

}  // namespace gradtape::testing
