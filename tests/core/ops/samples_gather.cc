// Gradient-check samples for the ops of core/ops/gather_ops.cc.
#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {

void AddGatherSamples(SampleList& s) {
  s.Add("GatherNd", "K = 2 of 2, elements, repeated",
        {R({3, 4}, 501),
         Tensor::FromVector<int32_t>({3, 2}, {0, 1, 2, 3, 0, 1})});
  s.Add("GatherNd", "K = 1 of 3, rows of slices, 2-D batch, int64",
        {R({3, 2, 2}, 502),
         Tensor::FromVector<int64_t>({2, 2, 1}, {2, 0, 1, 2})});
  s.Add("ScatterNd", "K = 1, rows, duplicates add",
        {Tensor::FromVector<int32_t>({3, 1}, {2, 0, 2}), R({3, 4}, 503),
         Tensor::FromVector<int32_t>({2}, {4, 4})});
  s.Add("ScatterNd", "K = 2, elements, int64",
        {Tensor::FromVector<int64_t>({2, 2}, {1, 2, 0, 0}), R({2}, 504),
         Tensor::FromVector<int64_t>({2}, {2, 3})});
}

}  // namespace gradtape::testing
