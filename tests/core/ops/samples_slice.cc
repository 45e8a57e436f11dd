// Gradient-check samples for the ops of core/ops/slice_ops.cc.
#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {
namespace {

Tensor I32(std::initializer_list<int32_t> v) {
  return Tensor::FromVector<int32_t>({static_cast<int64_t>(v.size())}, v);
}
Tensor I64(std::initializer_list<int64_t> v) {
  return Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size())}, v);
}

}  // namespace

void AddSliceSamples(SampleList& s) {
  s.Add("StridedSlice", "x[1:3, ::2], int32",
        {R({4, 5}, 301), I32({1, 0}), I32({3, 0}), I32({1, 2})},
        {{"begin_mask", int64_t{2}}, {"end_mask", int64_t{2}}});
  s.Add("StridedSlice", "x[3:0:-1, 1:], negative stride",
        {R({4, 3}, 302), I32({3, 1}), I32({0, 0}), I32({-1, 1})},
        {{"end_mask", int64_t{2}}});
  s.Add("StridedSlice", "x[::-2], both masked",
        {R({5, 2}, 303), I64({0}), I64({0}), I64({-2})},
        {{"begin_mask", int64_t{1}}, {"end_mask", int64_t{1}}});
  s.Add("StridedSlice", "x[..., newaxis, 1], ellipsis new axis shrink",
        {R({2, 3, 4}, 304), I32({0, 0, 1}), I32({0, 0, 2}), I32({1, 1, 1})},
        {{"ellipsis_mask", int64_t{1}},
         {"new_axis_mask", int64_t{2}},
         {"shrink_axis_mask", int64_t{4}}});
  s.Add("StridedSlice", "x[-1, 1:], int64, negative shrink index",
        {R({3, 4}, 305), I64({-1, 1}), I64({0, 0}), I64({1, 1})},
        {{"shrink_axis_mask", int64_t{1}}, {"end_mask", int64_t{2}}});
  s.Add("StridedSlice", "x[-10:10, 0:5:3], clamped, implicit ellipsis",
        {R({3, 5, 2}, 306), I32({-10, 0}), I32({10, 5}), I32({1, 3})});
  s.Add("StridedSliceGrad", "of x[1:3, ::2]",
        {I32({4, 5}), I32({1, 0}), I32({3, 0}), I32({1, 2}), R({2, 3}, 307)},
        {{"begin_mask", int64_t{2}}, {"end_mask", int64_t{2}}});
  s.Add("StridedSliceGrad", "of x[..., newaxis, 1], int64",
        {I64({2, 3, 4}), I64({0, 0, 1}), I64({0, 0, 2}), I64({1, 1, 1}),
         R({2, 3, 1}, 308)},
        {{"ellipsis_mask", int64_t{1}},
         {"new_axis_mask", int64_t{2}},
         {"shrink_axis_mask", int64_t{4}}});
  s.Add("Slice", "x[1:3, 1:], size -1",
        {R({4, 3}, 309), I32({1, 1}), I32({2, -1})});
  s.Add("Slice", "3-D, int64",
        {R({2, 3, 4}, 310), I64({0, 1, 1}), I64({2, 2, 2})});
}

}  // namespace gradtape::testing
