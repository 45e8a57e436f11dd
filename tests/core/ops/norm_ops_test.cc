// Batch normalization ops: forward values of BatchNormWithGlobalNormalization
// and its gradient op against formulas evaluated here, what the backwards
// save, and the input checks.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace {

using testing::Values;

template <typename T>
Tensor Make(const Shape& shape, const std::vector<double>& v) {
  return Tensor::FromVector<T>(shape, std::vector<T>(v.begin(), v.end()));
}

AttrMap BnAttrs(double eps, bool scale) {
  return {{"variance_epsilon", eps}, {"scale_after_normalization", scale}};
}

class NormOpsTest : public testing::OpTest {
 public:
  using OpTest::Run;  // for the CheckForward helpers below
};

// x: [2, 1, 2, 3] (4 rows of 3 channels).
const Shape kShape{2, 1, 2, 3};
const std::vector<double> kX = {0.5, -1, 2, 1.5,  0, -0.5,
                                -2,  3,  1, 0.25, 1, -1};
const std::vector<double> kM = {0.1, -0.2, 0.3};
const std::vector<double> kV = {0.5, 2, 1.25};
const std::vector<double> kBeta = {1, -1, 0.5};
const std::vector<double> kGamma = {2, -0.5, 1.5};
const std::vector<double> kBp = {1, 2, -1, 0.5, -0.5, 3, 2, 1, 0, -1, 1, 2};
constexpr double kEps = 0.01;

template <typename T>
void CheckForward(NormOpsTest* test, double tolerance) {
  for (bool scale : {true, false}) {
    SCOPED_TRACE(scale ? "scaled" : "not scaled");
    absl::StatusOr<Tensors> r =
        test->Run("BatchNormWithGlobalNormalization",
                  {Make<T>(kShape, kX), Make<T>({3}, kM), Make<T>({3}, kV),
                   Make<T>({3}, kBeta), Make<T>({3}, kGamma)},
                  BnAttrs(kEps, scale));
    ASSERT_TRUE(r.ok()) << r.status();
    const Tensor& y = (*r)[0];
    ASSERT_EQ(y.shape(), kShape);
    ASSERT_EQ(y.dtype(), DTypeOf<T>::value);
    for (int64_t i = 0; i < 12; ++i) {
      const int c = i % 3;
      const double want = (kX[i] - kM[c]) / std::sqrt(kV[c] + kEps) *
                              (scale ? kGamma[c] : 1.0) +
                          kBeta[c];
      EXPECT_NEAR(y.ElementAsDouble(i), want, tolerance) << i;
    }
  }
}

TEST_F(NormOpsTest, ForwardMatchesTheFormula) {
  CheckForward<double>(this, 1e-12);
  CheckForward<float>(this, 1e-5);
}

TEST_F(NormOpsTest, GradOpMatchesTheFormulas) {
  for (bool scale : {true, false}) {
    SCOPED_TRACE(scale ? "scaled" : "not scaled");
    absl::StatusOr<Tensors> r = Run(
        "BatchNormWithGlobalNormalizationGrad",
        {Make<double>(kShape, kX), Make<double>({3}, kM), Make<double>({3}, kV),
         Make<double>({3}, kGamma), Make<double>(kShape, kBp)},
        BnAttrs(kEps, scale));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->size(), 5u);
    std::vector<double> db(3, 0), p(3, 0);
    for (int64_t i = 0; i < 12; ++i) {
      db[i % 3] += kBp[i];
      p[i % 3] += kBp[i] * (kX[i] - kM[i % 3]);
    }
    for (int64_t i = 0; i < 12; ++i) {
      const int c = i % 3;
      const double s = scale ? kGamma[c] : 1.0;
      EXPECT_NEAR((*r)[0].ElementAsDouble(i),
                  kBp[i] * s / std::sqrt(kV[c] + kEps), 1e-12);
    }
    for (int c = 0; c < 3; ++c) {
      const double rinv = 1 / std::sqrt(kV[c] + kEps);
      const double s = scale ? kGamma[c] : 1.0;
      EXPECT_NEAR((*r)[1].ElementAsDouble(c), -db[c] * rinv * s, 1e-12);
      EXPECT_NEAR((*r)[2].ElementAsDouble(c),
                  -0.5 * std::pow(kV[c] + kEps, -1.5) * s * p[c], 1e-12);
      EXPECT_NEAR((*r)[3].ElementAsDouble(c), db[c], 1e-12);
      EXPECT_NEAR((*r)[4].ElementAsDouble(c), scale ? rinv * p[c] : 0.0, 1e-12);
    }
  }
}

TEST_F(NormOpsTest, TapeGradientIsTheGradOp) {
  std::vector<Tensor> in = {Make<double>(kShape, kX), Make<double>({3}, kM),
                            Make<double>({3}, kV), Make<double>({3}, kBeta),
                            Make<double>({3}, kGamma)};
  ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
  Tape* tape = *ctx_.tapes().Find(1);
  for (Tensor& t : in) {
    t = ctx_.Adopt(t);
    tape->Watch(t);
  }
  auto y = Run("BatchNormWithGlobalNormalization", in, BnAttrs(kEps, true));
  ASSERT_TRUE(y.ok());
  // Only the inputs the backward reads are kept: not beta, no output.
  ASSERT_EQ(tape->num_entries(), 1u);
  int64_t bytes = 0;
  for (int i : {0, 1, 2, 4}) bytes += in[i].num_bytes();
  EXPECT_EQ(tape->SavedBytes(), bytes);
  ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
  Tensor bp = Make<double>(kShape, kBp);
  auto grads = Gradient(ctx_, *tape, {(*y)[0]}, in, {bp}, Unconnected::kNone);
  ASSERT_TRUE(grads.ok()) << grads.status();
  auto want = Run("BatchNormWithGlobalNormalizationGrad",
                  {in[0], in[1], in[2], in[4], bp}, BnAttrs(kEps, true));
  ASSERT_TRUE(want.ok());
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Values((*grads)[i]), Values((*want)[i])) << "input " << i;
  }
  ASSERT_TRUE(ctx_.tapes().Delete(1).ok());
}

TEST_F(NormOpsTest, BackwardsSaveOnlyWhatTheyRead) {
  const OpDef* bn = DefaultRegistry().Find("BatchNormWithGlobalNormalization");
  EXPECT_EQ(bn->saved_inputs, (std::vector<int>{0, 1, 2, 4}));
  EXPECT_TRUE(bn->saved_outputs.empty());  // TensorFlow's seed list agrees
  const OpDef* grad =
      DefaultRegistry().Find("BatchNormWithGlobalNormalizationGrad");
  EXPECT_TRUE(grad->differentiable());
  EXPECT_EQ(grad->saved_inputs, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(grad->saved_outputs.empty());
}

TEST_F(NormOpsTest, BadInputsAreRejected) {
  const char* bn = "BatchNormWithGlobalNormalization";
  const char* grad = "BatchNormWithGlobalNormalizationGrad";
  Tensor x = Make<double>(kShape, kX);
  Tensor c3 = Make<double>({3}, kM);
  Tensor v = Make<double>({3}, kV);
  const AttrMap attrs = BnAttrs(kEps, true);
  ExpectInvalid(bn, {Make<double>({4, 3}, kX), c3, v, c3, c3}, attrs,
                {"rank 4", "[4,3]"});
  ExpectInvalid(bn, {x, Make<double>({4}, {1, 2, 3, 4}), v, c3, c3}, attrs,
                {"m float64[4]", "vector of 3", "[2,1,2,3]"});
  ExpectInvalid(bn, {x, c3, Make<double>({1, 3}, kV), c3, c3}, attrs,
                {"v float64[1,3]"});
  ExpectInvalid(bn, {x, c3, v, Make<double>({2}, {1, 2}), c3}, attrs,
                {"beta float64[2]"});
  ExpectInvalid(bn, {x, c3, v, c3, Make<double>({}, {1})}, attrs,
                {"gamma float64[]"});
  ExpectInvalid(bn, {x, c3, v, c3, Make<float>({3}, kGamma)}, attrs,
                {"same dtype", "float32[3]"});
  ExpectInvalid(bn,
                {Make<int32_t>(kShape, std::vector<double>(12)), c3, v, c3, c3},
                attrs, {"int32"});
  ExpectInvalid(bn, {x, c3, v, c3, c3}, {{"variance_epsilon", 0.1}},
                {"scale_after_normalization"});
  ExpectInvalid(grad, {x, c3, v, c3, Make<double>({2, 2, 1, 3}, kBp)}, attrs,
                {"backprop float64[2,2,1,3]", "[2,1,2,3]"});
  ExpectInvalid(grad, {x, c3, v, Make<double>({4}, {1, 2, 3, 4}), x}, attrs,
                {"gamma float64[4]"});
  ExpectInvalid(grad, {x, c3, v, c3, Make<float>(kShape, kBp)}, attrs,
                {"same dtype"});
}

}  // namespace
}  // namespace gradtape
