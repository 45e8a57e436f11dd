// Gradient-check samples for the ops of core/ops/layout_ops.cc.
#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {
namespace {

Tensor I32(std::initializer_list<int32_t> v) {
  return Tensor::FromVector<int32_t>({static_cast<int64_t>(v.size())}, v);
}
Tensor I64(std::initializer_list<int64_t> v) {
  return Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size())}, v);
}
// A paddings matrix [rank, 2] from its rows flattened.
Tensor Pads32(std::initializer_list<int32_t> v) {
  return Tensor::FromVector<int32_t>({static_cast<int64_t>(v.size()) / 2, 2},
                                     v);
}
Tensor Pads64(std::initializer_list<int64_t> v) {
  return Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size()) / 2, 2},
                                     v);
}
AttrMap Mode(const char* mode) { return {{"mode", std::string(mode)}}; }

}  // namespace

void AddLayoutSamples(SampleList& s) {
  s.Add("ExpandDims", "dim 1, int32 scalar",
        {R({2, 3}, 401), Tensor::Scalar<int32_t>(1)});
  s.Add("ExpandDims", "dim -1, int64 [1]", {R({2, 3}, 402), I64({-1})});
  s.Add("ExpandDims", "of a scalar", {R({}, 403), Tensor::Scalar<int64_t>(0)});
  s.Add("Squeeze", "all size-1 dims", {R({2, 1, 3, 1}, 404)});
  s.Add("Squeeze", "squeeze_dims [-1]", {R({1, 3, 1}, 405)},
        {{"squeeze_dims", L({-1})}});
  s.Add("Tile", "[2,3] x [2,1], int32", {R({2, 3}, 406), I32({2, 1})});
  s.Add("Tile", "[2,1,3] x [1,3,2], int64",
        {R({2, 1, 3}, 407), I64({1, 3, 2})});
  s.Add("Fill", "dims int32 [2,3]", {I32({2, 3}), R({}, 408)});
  s.Add("Fill", "dims int64 [4]", {I64({4}), R({}, 409)});
  s.Add("Range", "float64",
        {Tensor::Scalar<double>(0.5), Tensor::Scalar<double>(3.0),
         Tensor::Scalar<double>(0.75)});
  s.Add("Range", "int64, negative delta",
        {Tensor::Scalar<int64_t>(5), Tensor::Scalar<int64_t>(-2),
         Tensor::Scalar<int64_t>(-3)});
  s.Add(
      "Reverse", "dims 0 and 2",
      {R({2, 3, 4}, 410), Tensor::FromVector<bool>({3}, {true, false, true})});
  s.Add("ReverseV2", "axis [-1], int32", {R({2, 3}, 411), I32({-1})});
  s.Add("ReverseV2", "axis [0, 1], int64", {R({3, 2}, 412), I64({0, 1})});
  s.Add("Pad", "int32 paddings", {R({2, 3}, 413), Pads32({1, 0, 2, 1})});
  s.Add("Pad", "int64 paddings, 3-D",
        {R({2, 1, 2}, 414), Pads64({0, 1, 1, 1, 0, 2})});
  s.Add("PadV2", "constant_values",
        {R({2, 3}, 415), Pads32({1, 2, 0, 1}), R({}, 416)});
  s.Add("MirrorPad", "REFLECT", {R({3, 4}, 417), Pads32({1, 2, 2, 0})},
        Mode("REFLECT"));
  s.Add("MirrorPad", "SYMMETRIC, int64", {R({2, 3}, 418), Pads64({2, 1, 0, 3})},
        Mode("SYMMETRIC"));
  s.Add("MirrorPadGrad", "REFLECT", {R({6, 6}, 419), Pads32({1, 2, 2, 0})},
        Mode("REFLECT"));
  s.Add("MirrorPadGrad", "SYMMETRIC, int64",
        {R({5, 6}, 420), Pads64({2, 1, 0, 3})}, Mode("SYMMETRIC"));
}

}  // namespace gradtape::testing
