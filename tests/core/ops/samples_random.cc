// Samples for the ops of core/ops/random_ops.cc. They are not
// differentiable; the samples run them through the generic checks (bad
// inputs, output dtype, coverage) with float64 outputs.
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

void AddRandomSamples(SampleList& s) {
  const AttrMap f64 = {{"dtype", DType::kFloat64}};
  const Tensor alg = Tensor::Scalar<int32_t>(1);
  s.Add("StatelessRandomUniformV2", "float64 [2, 3], Philox",
        {I32({2, 3}), I64({12345}), I64({0, 0}), alg}, f64);
  s.Add("StatelessRandomUniformV2", "float32 [5], auto select, int64 shape",
        {I64({5}), I64({-1}), I64({7, 1}), Tensor::Scalar<int32_t>(3)});
  s.Add("StatelessRandomNormalV2", "float64 [3]",
        {I32({3}), I64({12345}), I64({0, 0}), alg}, f64);
  s.Add("StatelessTruncatedNormalV2", "float64 [2, 2]",
        {I32({2, 2}), I64({42}), I64({3, 0}), alg}, f64);
  s.Add("StatelessRandomUniform", "float64 [4], int32 seed",
        {I32({4}), I32({1, 2})}, f64);
  s.Add("StatelessRandomNormal", "float64 [3], int64 seed",
        {I32({3}), I64({-3, 1})}, f64);
  s.Add("StatelessTruncatedNormal", "float64 [5], int32 seed",
        {I64({5}), I32({5, 6})}, f64);
}

}  // namespace gradtape::testing
