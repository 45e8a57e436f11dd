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

// ---------------------------------------------------------------------------
// FusedBatchNormV3 and FusedBatchNormGradV3. x: 4 values per channel, 2
// channels: channel 0 = {1, 3, 5, 7} (mean 4, biased variance 5, unbiased
// 20/3), channel 1 = {1, 1, 1, 9} (mean 3, biased variance 12, unbiased
// 16); with epsilon 4, 1 / sqrt(v + epsilon) = 1/3 and 1/4.
const std::vector<double> kFbnNhwc = {1, 1, 3, 1, 5, 1, 7, 9};  // [4,1,1,2]
// The same values as NCHW [2, 2, 1, 2]: (n, c, w) at n*4 + c*2 + w.
const std::vector<double> kFbnNchw = {1, 3, 1, 1, 5, 7, 1, 9};
const std::vector<double> kFbnScale = {2, -1}, kFbnOffset = {0.5, 1};

AttrMap FbnAttrs(bool training, double factor, const char* format = "NHWC") {
  return {{"epsilon", 4.0},
          {"exponential_avg_factor", factor},
          {"data_format", std::string(format)},
          {"is_training", training}};
}

AttrMap FbnGradOpAttrs(bool training) {
  return {{"epsilon", 4.0},
          {"data_format", std::string("NHWC")},
          {"is_training", training}};
}

void ExpectValues(const Tensor& t, const std::vector<double>& want,
                  double tolerance, const std::string& what) {
  ASSERT_EQ(t.num_elements(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(t.ElementAsDouble(i), want[i], tolerance) << what << " " << i;
  }
}

template <typename T>
void CheckFusedTraining(NormOpsTest* test, double tol) {
  absl::StatusOr<Tensors> r =
      test->Run("FusedBatchNormV3",
                {Make<T>({4, 1, 1, 2}, kFbnNhwc), Make<T>({2}, kFbnScale),
                 Make<T>({2}, kFbnOffset), Make<T>({0}, {}), Make<T>({0}, {})},
                FbnAttrs(true, 1.0));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 6u);
  // y = (x - m) / sqrt(v + 4) * scale + offset, interleaved by channel.
  ExpectValues((*r)[0], {-1.5, 1.5, -1.0 / 6, 1.5, 7.0 / 6, 1.5, 2.5, -0.5},
               tol, "y");
  EXPECT_EQ((*r)[0].dtype(), DTypeOf<T>::value);
  EXPECT_EQ((*r)[0].shape(), (Shape{4, 1, 1, 2}));
  ExpectValues((*r)[1], {4, 3}, tol, "batch_mean");
  ExpectValues((*r)[2], {20.0 / 3, 16}, tol, "batch_variance (unbiased)");
  ExpectValues((*r)[3], {4, 3}, tol, "reserve_space_1");
  ExpectValues((*r)[4], {5, 12}, tol, "reserve_space_2 (biased)");
  EXPECT_EQ((*r)[5].shape(), Shape{});
  ExpectValues((*r)[5], {0}, 0, "reserve_space_3");
}

TEST_F(NormOpsTest, FusedTrainingUsesTheBatchStatistics) {
  CheckFusedTraining<double>(this, 1e-12);
  CheckFusedTraining<float>(this, 1e-5);
}

TEST_F(NormOpsTest, FusedTrainingBlendsTheRunningStatistics) {
  // f = 0.25, mean_in = (0, 1), variance_in = (1, 2):
  //   batch_mean = 0.75 (0, 1) + 0.25 (4, 3) = (1, 1.5)
  //   batch_variance = 0.75 (1, 2) + 0.25 (20/3, 16) = (29/12, 5.5)
  Tensors r = *Run("FusedBatchNormV3",
                   {Make<double>({4, 1, 1, 2}, kFbnNhwc),
                    Make<double>({2}, kFbnScale), Make<double>({2}, kFbnOffset),
                    Make<double>({2}, {0, 1}), Make<double>({2}, {1, 2})},
                   FbnAttrs(true, 0.25));
  ExpectValues(r[0], {-1.5, 1.5, -1.0 / 6, 1.5, 7.0 / 6, 1.5, 2.5, -0.5}, 1e-12,
               "y (batch statistics)");
  ExpectValues(r[1], {1, 1.5}, 1e-12, "batch_mean");
  ExpectValues(r[2], {29.0 / 12, 5.5}, 1e-12, "batch_variance");
  ExpectValues(r[3], {4, 3}, 1e-12, "reserve_space_1");
  ExpectValues(r[4], {5, 12}, 1e-12, "reserve_space_2");
}

TEST_F(NormOpsTest, FusedInferenceUsesTheGivenStatistics) {
  // mean (0, 1), variance (5, 12): ch0 (x / 3) 2 + 0.5, ch1 -(x - 1)/4 + 1.
  Tensors r = *Run("FusedBatchNormV3",
                   {Make<double>({4, 1, 1, 2}, kFbnNhwc),
                    Make<double>({2}, kFbnScale), Make<double>({2}, kFbnOffset),
                    Make<double>({2}, {0, 1}), Make<double>({2}, {5, 12})},
                   FbnAttrs(false, 0.25));
  ExpectValues(r[0], {7.0 / 6, 1, 2.5, 1, 23.0 / 6, 1, 31.0 / 6, -1}, 1e-12,
               "y");
  for (int i : {1, 3}) ExpectValues(r[i], {0, 1}, 0, "mean copies");
  for (int i : {2, 4}) ExpectValues(r[i], {5, 12}, 0, "variance copies");
}

TEST_F(NormOpsTest, FusedNchwNormalizesAxisOne) {
  Tensors r = *Run("FusedBatchNormV3",
                   {Make<double>({2, 2, 1, 2}, kFbnNchw),
                    Make<double>({2}, kFbnScale), Make<double>({2}, kFbnOffset),
                    Make<double>({0}, {}), Make<double>({0}, {})},
                   FbnAttrs(true, 1.0, "NCHW"));
  EXPECT_EQ(r[0].shape(), (Shape{2, 2, 1, 2}));
  ExpectValues(r[0], {-1.5, -1.0 / 6, 1.5, 1.5, 7.0 / 6, 2.5, 1.5, -0.5}, 1e-12,
               "y");
  ExpectValues(r[2], {20.0 / 3, 16}, 1e-12, "batch_variance");
  // 5-D channels-first: the same numbers with a unit depth dim.
  Tensors r5 =
      *Run("FusedBatchNormV3",
           {Make<double>({2, 2, 1, 1, 2}, kFbnNchw),
            Make<double>({2}, kFbnScale), Make<double>({2}, kFbnOffset),
            Make<double>({0}, {}), Make<double>({0}, {})},
           FbnAttrs(true, 1.0, "NCDHW"));
  EXPECT_EQ(Values(r5[0]), Values(r[0]));
}

TEST_F(NormOpsTest, FusedOfOneElementPerChannelAndOfAnEmptyX) {
  // N = 1: variance 0, Bessel's factor 1 (TensorFlow's rest_size_adjust).
  Tensors one =
      *Run("FusedBatchNormV3",
           {Make<double>({1, 1, 1, 2}, {3, -2}), Make<double>({2}, kFbnScale),
            Make<double>({2}, kFbnOffset), Make<double>({0}, {}),
            Make<double>({0}, {})},
           FbnAttrs(true, 1.0));
  ExpectValues(one[0], {0.5, 1}, 1e-12, "y = offset");
  ExpectValues(one[2], {0, 0}, 0, "batch_variance");
  // An empty x: empty y, NaN batch statistics.
  Tensors empty =
      *Run("FusedBatchNormV3",
           {Make<double>({0, 1, 1, 2}, {}), Make<double>({2}, kFbnScale),
            Make<double>({2}, kFbnOffset), Make<double>({0}, {}),
            Make<double>({0}, {})},
           FbnAttrs(true, 1.0));
  EXPECT_EQ(empty[0].shape(), (Shape{0, 1, 1, 2}));
  for (int i : {1, 2}) {
    for (int c = 0; c < 2; ++c) {
      EXPECT_TRUE(std::isnan(empty[i].ElementAsDouble(c))) << i;
    }
  }
  Tensors grad =
      *Run("FusedBatchNormGradV3",
           {Make<double>({0, 1, 1, 2}, {}), Make<double>({0, 1, 1, 2}, {}),
            Make<double>({2}, kFbnScale), Make<double>({2}, {0, 0}),
            Make<double>({2}, {1, 1}), Make<double>({}, {0})},
           FbnGradOpAttrs(true));
  ExpectValues(grad[1], {0, 0}, 0, "scale_backprop");
  ExpectValues(grad[2], {0, 0}, 0, "offset_backprop");
}

// dy: ch0 (0, 0, 0, 4), ch1 (0, 0, 0, 2), m = (4, 3), v = (5, 12), eps 4.
// Training, ch0: mean(dy) = 1, mean(dy xc) = 3, r^2 = 1/9:
//   dx = 2/3 (dy - 1 - xc/3) = (0, -4/9, -8/9, 4/3); dscale = 12/3 = 4.
// ch1: mean(dy) = 1/2, mean(dy xc) = 3, r^2 = 1/16:
//   dx = -1/4 (dy - 1/2 - 3 xc / 16) = (1/32, 1/32, 1/32, -3/32);
//   dscale = 12/4 = 3. offset_backprop = sum(dy) = (4, 2).
// Inference: dx = scale r dy = (0, 0, 0, 8/3) and (0, 0, 0, -1/2).
TEST_F(NormOpsTest, FusedGradMatchesTheFormulas) {
  const std::vector<double> dy = {0, 0, 0, 0, 0, 0, 4, 2};
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "inference");
    Tensors r = *Run(
        "FusedBatchNormGradV3",
        {Make<double>({4, 1, 1, 2}, dy), Make<double>({4, 1, 1, 2}, kFbnNhwc),
         Make<double>({2}, kFbnScale), Make<double>({2}, {4, 3}),
         Make<double>({2}, {5, 12}), Make<double>({}, {0})},
        FbnGradOpAttrs(training));
    ASSERT_EQ(r.size(), 5u);
    if (training) {
      ExpectValues(r[0],
                   {0, 1.0 / 32, -4.0 / 9, 1.0 / 32, -8.0 / 9, 1.0 / 32,
                    4.0 / 3, -3.0 / 32},
                   1e-12, "x_backprop");
    } else {
      ExpectValues(r[0], {0, 0, 0, 0, 0, 0, 8.0 / 3, -0.5}, 1e-12,
                   "x_backprop");
    }
    ExpectValues(r[1], {4, 3}, 1e-12, "scale_backprop");
    ExpectValues(r[2], {4, 2}, 1e-12, "offset_backprop");
    EXPECT_EQ(r[3].shape(), Shape{0});
    EXPECT_EQ(r[4].shape(), Shape{0});
  }
}

TEST_F(NormOpsTest, FusedTapeGradientIsTheGradOp) {
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "inference");
    std::vector<Tensor> in = {
        Make<double>({4, 1, 1, 2}, kFbnNhwc), Make<double>({2}, kFbnScale),
        Make<double>({2}, kFbnOffset), Make<double>({2}, {0, 1}),
        Make<double>({2}, {5, 12})};
    ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
    Tape* tape = *ctx_.tapes().Find(1);
    for (Tensor& t : in) {
      t = ctx_.Adopt(t);
      tape->Watch(t);
    }
    Tensors y = *Run("FusedBatchNormV3", in, FbnAttrs(training, 1.0));
    // Kept: x, scale and the two reserve spaces (4 + 3 vectors of 2).
    EXPECT_EQ(tape->SavedBytes(), (8 + 2 + 2 + 2) * 8);
    ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
    Tensor dy = Make<double>({4, 1, 1, 2}, {1, -2, 0.5, 3, 0, 1, -1, 2});
    auto grads = Gradient(ctx_, *tape, {y[0]}, in, {dy}, Unconnected::kNone);
    ASSERT_TRUE(grads.ok()) << grads.status();
    Tensors want = *Run("FusedBatchNormGradV3",
                        {dy, in[0], in[1], y[3], y[4], Make<double>({}, {0})},
                        {{"epsilon", 4.0},
                         {"data_format", std::string("NHWC")},
                         {"is_training", training}});
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(Values((*grads)[i]), Values(want[i])) << "input " << i;
    }
    // As in TensorFlow, mean and variance get none.
    EXPECT_FALSE((*grads)[3].valid());
    EXPECT_FALSE((*grads)[4].valid());
    ASSERT_TRUE(ctx_.tapes().Delete(1).ok());
  }
}

// Second order as TensorFlow's _FusedBatchNormGradGrad (which recomputes the
// statistics from x): with g(x) = FusedBatchNormGradV3(u, x, scale, mean(x),
// var(x)).x_backprop, d<g(x), w>/dx through two tapes matches central
// differences of g with the statistics recomputed, and TensorFlow's values.
TEST_F(NormOpsTest, FusedSecondOrderDifferentiatesThroughTheStatistics) {
  const std::vector<double> xv = {0.3, -1.2, 2.0, 0.7, -0.4, 1.1, 0.9, -0.8};
  const std::vector<double> uv = {1, -0.5, 0.25, 2, -1, 0.5, 1.5, -2};
  const std::vector<double> wv = {0.2, 1, -1, 0.5, 0.7, -0.3, 1.2, 0.1};
  const Tensor scale = Make<double>({2}, kFbnScale);
  const Tensor offset = Make<double>({2}, kFbnOffset);
  const Tensor none = Make<double>({0}, {});
  auto first_order = [&](const Tensor& x) {
    Tensors y = *Run("FusedBatchNormV3", {x, scale, offset, none, none},
                     FbnAttrs(true, 1.0));
    Tensor g =
        (*Run("FusedBatchNormGradV3",
              {Make<double>({4, 1, 1, 2}, uv), x, scale, y[3], y[4], y[5]},
              FbnGradOpAttrs(true)))[0];
    double dot = 0;
    for (int i = 0; i < 8; ++i) dot += g.ElementAsDouble(i) * wv[i];
    return dot;
  };
  Tensor x = ctx_.Adopt(Make<double>({4, 1, 1, 2}, xv));
  ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
  (*ctx_.tapes().Find(1))->Watch(x);
  ASSERT_TRUE(ctx_.tapes().Push(2, false, false).ok());
  (*ctx_.tapes().Find(2))->Watch(x);
  Tensors y = *Run("FusedBatchNormV3", {x, scale, offset, none, none},
                   FbnAttrs(true, 1.0));
  ASSERT_TRUE(ctx_.tapes().Pop(2).ok());
  auto dx = Gradient(ctx_, **ctx_.tapes().Find(2), {y[0]}, {x},
                     {Make<double>({4, 1, 1, 2}, uv)}, Unconnected::kNone);
  ASSERT_TRUE(dx.ok()) << dx.status();
  Tensor s = MustRun(
      "Sum", {MustRun("Mul", {(*dx)[0], Make<double>({4, 1, 1, 2}, wv)})});
  ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
  auto ddx =
      Gradient(ctx_, **ctx_.tapes().Find(1), {s}, {x}, {}, Unconnected::kNone);
  ASSERT_TRUE(ddx.ok()) << ddx.status();
  // TensorFlow 2.21 (float32) for the same nested tapes.
  const double kTensorFlow[] = {0.074765988,  0.053713582,  0.003599929,
                                -0.022452697, -0.107620604, -0.048992537,
                                0.029254684,  0.017731650};
  constexpr double kStep = 1e-6;
  for (int k = 0; k < 8; ++k) {
    std::vector<double> plus = xv, minus = xv;
    plus[k] += kStep;
    minus[k] -= kStep;
    const double numeric = (first_order(Make<double>({4, 1, 1, 2}, plus)) -
                            first_order(Make<double>({4, 1, 1, 2}, minus))) /
                           (2 * kStep);
    EXPECT_NEAR((*ddx)[0].ElementAsDouble(k), numeric, 1e-6) << k;
    EXPECT_NEAR((*ddx)[0].ElementAsDouble(k), kTensorFlow[k], 1e-6) << k;
  }
  ASSERT_TRUE(ctx_.tapes().Delete(1).ok());
  ASSERT_TRUE(ctx_.tapes().Delete(2).ok());
}

TEST_F(NormOpsTest, FusedBadInputsAreRejected) {
  const char* fbn = "FusedBatchNormV3";
  const char* grad = "FusedBatchNormGradV3";
  Tensor x = Make<double>({4, 1, 1, 2}, kFbnNhwc);
  Tensor c2 = Make<double>({2}, kFbnScale);
  Tensor c3 = Make<double>({3}, {1, 2, 3});
  Tensor none = Make<double>({0}, {});
  const AttrMap train = FbnAttrs(true, 1.0);
  ExpectInvalid(fbn, {Make<double>({4, 2}, kFbnNhwc), c2, c2, none, none},
                train, {"x float64[4,2]", "4-D or 5-D"});
  ExpectInvalid(fbn, {x, c3, c2, none, none}, train,
                {"scale float64[3]", "2 elements", "x float64[4,1,1,2]"});
  ExpectInvalid(fbn, {x, c2, Make<double>({1, 2}, {1, 2}), none, none}, train,
                {"offset float64[1,2]", "1-D"});
  ExpectInvalid(fbn, {x, c2, c2, Make<double>({}, {1}), none}, train,
                {"mean float64[]", "1-D"});
  // The running statistics must match the channels when they are read.
  ExpectInvalid(fbn, {x, c2, c2, none, none}, FbnAttrs(true, 0.5),
                {"exponential_avg_factor != 1", "mean float64[0]"});
  ExpectInvalid(fbn, {x, c2, c2, c2, c3}, FbnAttrs(false, 1.0),
                {"is_training", "variance float64[3]"});
  ExpectInvalid(fbn, {x, c2, c2, none, none}, FbnAttrs(true, 1.0, "NWHC"),
                {"data_format", "NWHC"});
  ExpectInvalid(fbn, {x, c2, c2, none, none}, FbnAttrs(true, 1.0, "NCHW"),
                {"scale float64[2]", "1 elements", "NCHW"});
  ExpectInvalid(fbn,
                {Make<int32_t>({4, 1, 1, 2}, kFbnNhwc), c2, c2, none, none},
                train, {"int32"});
  ExpectInvalid(fbn, {x, Make<float>({2}, kFbnScale), c2, none, none}, train,
                {"same dtype", "float32[2]"});
  const AttrMap gattrs = {{"epsilon", 0.1},
                          {"data_format", std::string("NHWC")},
                          {"is_training", true}};
  Tensor rs3 = Make<double>({}, {0});
  ExpectInvalid(grad,
                {Make<double>({2, 2, 1, 2}, kFbnNhwc), x, c2, c2, c2, rs3},
                gattrs, {"y_backprop float64[2,2,1,2]", "[4,1,1,2]"});
  ExpectInvalid(grad, {x, x, c2, c3, c2, rs3}, gattrs,
                {"reserve_space_1 float64[3]", "2 elements"});
  ExpectInvalid(grad, {x, x, c2, c2, Make<double>({1, 2}, {1, 2}), rs3}, gattrs,
                {"reserve_space_2 float64[1,2]"});
  ExpectInvalid(grad, {x, Make<double>({8}, kFbnNhwc), c2, c2, c2, rs3}, gattrs,
                {"x float64[8]"});
  ExpectInvalid(grad, {Make<float>({4, 1, 1, 2}, kFbnNhwc), x, c2, c2, c2, rs3},
                gattrs, {"same dtype"});
}

TEST_F(NormOpsTest, FusedBackwardsSaveOnlyWhatTheyRead) {
  const OpDef* fbn = DefaultRegistry().Find("FusedBatchNormV3");
  EXPECT_EQ(fbn->saved_inputs, (std::vector<int>{0, 1}));
  EXPECT_EQ(fbn->saved_outputs, (std::vector<int>{3, 4}));
  EXPECT_EQ(fbn->input_differentiable,
            (std::vector<bool>{true, true, true, false, false}));
  const OpDef* grad = DefaultRegistry().Find("FusedBatchNormGradV3");
  EXPECT_EQ(grad->saved_inputs, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_FALSE(grad->input_differentiable[5]);
}

}  // namespace
}  // namespace gradtape
