// Gradient-check samples for the list ops of core/ops/concat_ops.cc. The
// list length attrs (N, num, num_split) are given as a client fills them.
#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {
namespace {

Tensor I32(std::initializer_list<int32_t> v) {
  return Tensor::FromVector<int32_t>({static_cast<int64_t>(v.size())}, v);
}
Tensor I64(std::initializer_list<int64_t> v) {
  return Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size())}, v);
}
Tensor S32(int32_t v) { return Tensor::Scalar<int32_t>(v); }
Tensor S64(int64_t v) { return Tensor::Scalar<int64_t>(v); }

}  // namespace

void AddConcatSamples(SampleList& s) {
  s.Add("ConcatV2", "3 values along axis 1, int32 axis",
        {R({2, 3}, 1001), R({2, 1}, 1002), R({2, 2}, 1003), S32(1)},
        {{"N", int64_t{3}}});
  s.Add("ConcatV2", "axis -2, int64 axis",
        {R({1, 3}, 1004), R({2, 3}, 1005), S64(-2)}, {{"N", int64_t{2}}});
  s.Add("ConcatV2", "rank 3 along axis 2",
        {R({2, 1, 2}, 1006), R({2, 1, 3}, 1007), S32(2)}, {{"N", int64_t{2}}});
  s.Add("Pack", "3 values, axis 0",
        {R({2, 3}, 1011), R({2, 3}, 1012), R({2, 3}, 1013)},
        {{"N", int64_t{3}}});
  s.Add("Pack", "axis 1 (middle)", {R({2, 3}, 1014), R({2, 3}, 1015)},
        {{"N", int64_t{2}}, {"axis", int64_t{1}}});
  s.Add("Pack", "axis -1 (last)", {R({3}, 1016), R({3}, 1017)},
        {{"N", int64_t{2}}, {"axis", int64_t{-1}}});
  s.Add("Pack", "one value", {R({2}, 1018)}, {{"N", int64_t{1}}});
  s.Add("Unpack", "axis 0", {R({3, 2}, 1021)}, {{"num", int64_t{3}}});
  s.Add("Unpack", "axis -1", {R({2, 4}, 1022)},
        {{"num", int64_t{4}}, {"axis", int64_t{-1}}});
  s.Add("Unpack", "rank 3, axis 1", {R({2, 3, 2}, 1023)},
        {{"num", int64_t{3}}, {"axis", int64_t{1}}});
  s.Add("Split", "3 pieces along 1, int32 split_dim", {S32(1), R({2, 6}, 1031)},
        {{"num_split", int64_t{3}}});
  s.Add("Split", "split_dim -2, int64", {S64(-2), R({4, 3}, 1032)},
        {{"num_split", int64_t{2}}});
  s.Add("Split", "one piece", {S32(0), R({2, 2}, 1033)},
        {{"num_split", int64_t{1}}});
  s.Add("SplitV", "sizes 2, -1, 1 along 0, int32",
        {R({5, 2}, 1041), I32({2, -1, 1}), S32(0)},
        {{"num_split", int64_t{3}}});
  s.Add("SplitV", "sizes 1, 3 along -1, int64",
        {R({2, 4}, 1042), I64({1, 3}), S64(-1)}, {{"num_split", int64_t{2}}});
  s.Add("SplitV", "an empty piece", {R({3, 2}, 1043), I32({0, 3}), S32(0)},
        {{"num_split", int64_t{2}}});
}

}  // namespace gradtape::testing
