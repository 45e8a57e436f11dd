// Forward values of the nn activations and their *Grad helpers against naive
// reference formulas, the input checks, TensorFlow's elision seed sets and
// second-order gradients (the generic check covers first-order backwards).
#include <cmath>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_samples.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace testing {
// Defined in math_ops_test.cc.
void CheckSecondOrder(const OpSample& s);
}  // namespace testing

namespace {

constexpr double kScale = 1.0507009873554804934193349852946;
constexpr double kAlpha = 1.6732632423543772848170429916717;

class NnOpsTest : public testing::OpTest {
 protected:
  static Tensor D(Shape shape, std::vector<double> v) {
    return Tensor::FromVector<double>(shape, v);
  }
  // ExpectInvalid with the mentions before the attrs (this file's calls).
  void ExpectInvalid(absl::string_view op, std::vector<Tensor> in,
                     std::vector<std::string> mentions, AttrMap attrs = {}) {
    OpTest::ExpectInvalid(op, std::move(in), std::move(attrs),
                          std::move(mentions));
  }
};

const std::vector<double> kX = {-40, -3, -0.5, -1e-8, 0, 0.25, 2, 5.9, 6.5, 40};

TEST_F(NnOpsTest, ActivationsMatchReferenceFormulas) {
  struct Case {
    const char* op;
    std::function<double(double)> f;
  };
  for (const Case& c : std::vector<Case>{
           {"Relu6", [](double x) { return std::min(std::max(x, 0.0), 6.0); }},
           {"Elu", [](double x) { return x > 0 ? x : std::exp(x) - 1; }},
           {"Selu",
            [](double x) {
              return x > 0 ? kScale * x : kScale * kAlpha * (std::exp(x) - 1);
            }},
           {"Softplus", [](double x) { return std::log(1 + std::exp(x)); }},
           {"Softsign", [](double x) { return x / (1 + std::abs(x)); }},
       }) {
    absl::StatusOr<Tensor> y = Run1(c.op, {D({10}, kX)});
    ASSERT_TRUE(y.ok()) << y.status();
    for (size_t i = 0; i < kX.size(); ++i) {
      EXPECT_NEAR(y->ElementAsDouble(i), c.f(kX[i]),
                  1e-15 * (1 + std::abs(c.f(kX[i]))))
          << c.op << "(" << kX[i] << ")";
    }
  }
}

TEST_F(NnOpsTest, SoftplusIsFiniteForLargeInputs) {
  absl::StatusOr<Tensor> y = Run1("Softplus", {D({3}, {-1000, 1000, 800})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->ElementAsDouble(0), 0);
  EXPECT_EQ(y->ElementAsDouble(1), 1000);
  EXPECT_EQ(y->ElementAsDouble(2), 800);
  y = Run1("Softplus", {Tensor::FromVector<float>({1}, {100.f})});
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->data<float>()[0], 100.f);
}

TEST_F(NnOpsTest, GradHelpersMatchReferenceFormulas) {
  const std::vector<double> dy = {1, -2, 0.5, 3, -1, 2, 0.25, -4, 1.5, 2};
  struct Case {
    const char* op;
    std::function<double(double, double)> f;  // (dy, features or outputs)
  };
  auto sigmoid = [](double x) { return 1 / (1 + std::exp(-x)); };
  for (const Case& c : std::vector<Case>{
           {"Relu6Grad",
            [](double g, double x) { return x > 0 && x < 6 ? g : 0; }},
           {"EluGrad",
            [](double g, double y) { return y < 0 ? g * (y + 1) : g; }},
           {"SeluGrad",
            [](double g, double y) {
              return y < 0 ? g * (y + kScale * kAlpha) : g * kScale;
            }},
           {"SoftplusGrad",
            [sigmoid](double g, double x) { return g * sigmoid(x); }},
           {"SoftsignGrad",
            [](double g, double x) {
              return g / ((1 + std::abs(x)) * (1 + std::abs(x)));
            }},
       }) {
    absl::StatusOr<Tensor> z = Run1(c.op, {D({10}, dy), D({10}, kX)});
    ASSERT_TRUE(z.ok()) << z.status();
    for (size_t i = 0; i < kX.size(); ++i) {
      EXPECT_NEAR(z->ElementAsDouble(i), c.f(dy[i], kX[i]), 1e-14)
          << c.op << "(" << dy[i] << ", " << kX[i] << ")";
    }
  }
}

TEST_F(NnOpsTest, ActivationErrors) {
  for (const char* op : {"Relu6", "Elu", "Selu", "Softplus", "Softsign"}) {
    ExpectInvalid(op, {Tensor::FromVector<int32_t>({2}, {1, 2})},
                  {"int32[2]", "float32 or float64"});
  }
  for (const char* op : {"Relu6Grad", "SoftplusGrad", "SoftsignGrad"}) {
    ExpectInvalid(op, {D({2, 3}, std::vector<double>(6)), D({3}, {1, 2, 3})},
                  {"gradients", "[2,3]", "features", "[3]"});
    ExpectInvalid(op, {D({1}, {1}), Tensor::FromVector<float>({1}, {1})},
                  {"float64", "float32"});
  }
  for (const char* op : {"EluGrad", "SeluGrad"}) {
    ExpectInvalid(op, {D({2}, {1, 2}), D({2, 1}, {1, 2})},
                  {"gradients", "[2]", "outputs", "[2,1]"});
  }
}

// tf.one_hot([[0, 2], [1, 5]], depth=3, axis=a): the depth dim goes at
// position a of the output (-1: last); 5 is out of range, all off_value.
TEST_F(NnOpsTest, OneHotAxis) {
  const Tensor idx = Tensor::FromVector<int32_t>({2, 2}, {0, 2, 1, 5});
  struct Case {
    int64_t axis;
    Shape shape;
    std::vector<double> values;
  } cases[] = {
      // output[i, j, k] = idx[i, j] == k
      {-1, {2, 2, 3}, {1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0}},
      {2, {2, 2, 3}, {1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0}},
      // output[k, i, j] = idx[i, j] == k
      {0, {3, 2, 2}, {1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0}},
      // output[i, k, j] = idx[i, j] == k
      {1, {2, 3, 2}, {1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0}},
  };
  for (const Case& c : cases) {
    Tensor y = MustRun("OneHot", {idx},
                       {{"depth", int64_t{3}},
                        {"axis", c.axis},
                        {"on_value", 1.0},
                        {"off_value", 0.0}});
    EXPECT_EQ(y.shape(), c.shape) << c.axis;
    EXPECT_EQ(testing::Values(y), c.values) << c.axis;
  }
  ExpectInvalid("OneHot", {idx}, {"axis 3", "[0, 2]"},
                {{"depth", int64_t{3}}, {"axis", int64_t{3}}});
  ExpectInvalid("OneHot", {idx}, {"axis -2"},
                {{"depth", int64_t{3}}, {"axis", int64_t{-2}}});
}

TEST_F(NnOpsTest, BiasAddV1MatchesBiasAdd) {
  Tensor value = D({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor bias = D({3}, {10, 20, 30});
  absl::StatusOr<Tensor> a = Run1("BiasAddV1", {value, bias});
  absl::StatusOr<Tensor> b = Run1("BiasAdd", {value, bias});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(a->ElementAsDouble(i), b->ElementAsDouble(i));
    EXPECT_EQ(a->ElementAsDouble(i),
              value.ElementAsDouble(i) + 10 * (i % 3 + 1));
  }
  ExpectInvalid("BiasAddV1", {value, D({2}, {1, 2})}, {"[2]", "[2,3]"});
  ExpectInvalid("BiasAddV1", {value, D({1, 3}, {1, 2, 3})}, {"[1,3]"});
  ExpectInvalid("BiasAddV1", {value, bias}, {"unknown attr", "data_format"},
                {{"data_format", std::string("NHWC")}});
  ExpectInvalid("BiasAdd", {value, bias}, {"NCDHW", "NHWC or NCHW"},
                {{"data_format", std::string("NCDHW")}});
}

// NCHW: the bias runs along dim 1 (TensorFlow's CPU kernels, any rank >= 2);
// BiasAddGrad sums over every other dim.
TEST_F(NnOpsTest, BiasAddNchw) {
  const AttrMap nchw = {{"data_format", std::string("NCHW")}};
  // value [2, 3, 2]: element (n, c, w) = 100 n + 10 c + w.
  std::vector<double> v;
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 3; ++c) {
      for (int w = 0; w < 2; ++w) v.push_back(100 * n + 10 * c + w);
    }
  }
  Tensor value = D({2, 3, 2}, v);
  absl::StatusOr<Tensor> y =
      Run1("BiasAdd", {value, D({3}, {1000, 2000, 3000})}, nchw);
  ASSERT_TRUE(y.ok()) << y.status();
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(y->ElementAsDouble(i), v[i] + 1000 * ((i / 2) % 3 + 1)) << i;
  }
  absl::StatusOr<Tensor> db = Run1("BiasAddGrad", {value}, nchw);
  ASSERT_TRUE(db.ok()) << db.status();
  // channel c: sum over n, w of 100 n + 10 c + w = 200 + 40 c + 2
  EXPECT_EQ(testing::Values(*db), (std::vector<double>{202, 242, 282}));
  // Rank 2: channels are the last dim, as NHWC; integer dtypes work.
  y = Run1("BiasAdd",
           {Tensor::FromVector<int32_t>({2, 2}, {1, 2, 3, 4}),
            Tensor::FromVector<int32_t>({2}, {10, 20})},
           nchw);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(testing::Values(*y), (std::vector<double>{11, 22, 13, 24}));
  // The gradient of BiasAdd NCHW is BiasAddGrad NCHW.
  Tensor x = ctx_.Adopt(value), b = ctx_.Adopt(D({3}, {1, 2, 3}));
  ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
  Tape* tape = *ctx_.tapes().Find(1);
  tape->Watch(b);
  Tensor out = MustRun("BiasAdd", {x, b}, nchw);
  ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
  auto g = Gradient(ctx_, *tape, {out}, {b}, {value}, Unconnected::kZero);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(testing::Values((*g)[0]), (std::vector<double>{202, 242, 282}));
  ExpectInvalid("BiasAdd", {value, D({2}, {1, 2})}, {"bias", "[2]", "dim 1"},
                nchw);
  ExpectInvalid("BiasAdd", {D({3}, {1, 2, 3}), D({3}, {1, 2, 3})},
                {"value", "rank >= 2", "NCHW"}, nchw);
  ExpectInvalid("BiasAddGrad", {D({3}, {1, 2, 3})},
                {"out_backprop", "rank >= 2"}, nchw);
  ExpectInvalid("BiasAddGrad", {value}, {"NWHC"},
                {{"data_format", std::string("NWHC")}});
}

// TensorFlow's hand-written elision sets: these activations' backwards need
// no outputs / no inputs, and keep none here either.
TEST(NnOpsElision, MatchesTensorFlowSeedSets) {
  for (const char* name : {"Relu6", "Softplus", "SoftplusGrad", "Softsign",
                           "ReluGrad", "Relu6Grad", "SoftsignGrad"}) {
    const OpDef* op = DefaultRegistry().Find(name);
    ASSERT_NE(op, nullptr) << name;
    EXPECT_TRUE(op->saved_outputs.empty()) << name;
  }
  for (const char* name : {"Relu", "Elu", "Selu", "Softmax", "LogSoftmax",
                           "BiasAdd", "BiasAddV1"}) {
    const OpDef* op = DefaultRegistry().Find(name);
    ASSERT_NE(op, nullptr) << name;
    EXPECT_TRUE(op->saved_inputs.empty()) << name;
  }
  // Relu6Grad reads only the features.
  EXPECT_EQ(DefaultRegistry().Find("Relu6Grad")->saved_inputs,
            std::vector<int>{1});
}

TEST(NnOpsSecondOrder, BackwardsAreDifferentiable) {
  const absl::flat_hash_set<std::string> ops = {
      "Relu6",    "Relu6Grad",    "Elu",      "EluGrad",
      "Selu",     "SeluGrad",     "Softplus", "SoftplusGrad",
      "Softsign", "SoftsignGrad", "BiasAddV1"};
  int checked = 0;
  for (const testing::OpSample& s : testing::AllOpSamples()) {
    if (!ops.contains(s.op)) continue;
    // CheckSecondOrder is real; complex samples have the first-order check.
    if (IsComplex(s.inputs[0].dtype())) continue;
    testing::CheckSecondOrder(s);
    ++checked;
  }
  EXPECT_GE(checked, static_cast<int>(ops.size()));
}

// Two rows by hand: softmax([0, 0]) = [1/2, 1/2] and softmax([0, ln 3]) =
// [1/4, 3/4]; loss = -sum labels * log softmax, backprop = softmax - labels
// (TensorFlow's kernel, also for labels that do not sum to 1).
TEST_F(NnOpsTest, SoftmaxCrossEntropyWithLogitsValues) {
  absl::StatusOr<Tensors> out = Run("SoftmaxCrossEntropyWithLogits",
                                    {D({3, 2}, {0, 0, 0, std::log(3.0), 0, 0}),
                                     D({3, 2}, {0.25, 0.75, 1, 0, 1, 1})});
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<double> loss = testing::Values((*out)[0]);
  const std::vector<double> bp = testing::Values((*out)[1]);
  const std::vector<double> want_loss = {std::log(2.0), std::log(4.0),
                                         2 * std::log(2.0)};
  const std::vector<double> want_bp = {0.25, -0.25, -0.75, 0.75, -0.5, -0.5};
  ASSERT_EQ((*out)[0].shape(), Shape({3}));
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(loss[i], want_loss[i], 1e-15);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(bp[i], want_bp[i], 1e-15);
  // Large logits stay finite; float32 works; an empty batch is empty.
  out = Run("SoftmaxCrossEntropyWithLogits",
            {D({1, 2}, {1000, 0}), D({1, 2}, {0, 1})});
  ASSERT_TRUE(out.ok());
  EXPECT_NEAR((*out)[0].ElementAsDouble(0), 1000, 1e-12);
  out = Run("SoftmaxCrossEntropyWithLogits",
            {Tensor::FromVector<float>({1, 2}, {0, 0}),
             Tensor::FromVector<float>({1, 2}, {1, 0})});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].dtype(), DType::kFloat32);
  EXPECT_NEAR((*out)[0].ElementAsDouble(0), std::log(2.0), 1e-6);
  out = Run("SoftmaxCrossEntropyWithLogits", {D({0, 3}, {}), D({0, 3}, {})});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].shape(), Shape({0}));
  EXPECT_EQ((*out)[1].shape(), Shape({0, 3}));
}

TEST_F(NnOpsTest, SoftmaxCrossEntropyWithLogitsErrors) {
  const char* op = "SoftmaxCrossEntropyWithLogits";
  ExpectInvalid(
      op,
      {D({2, 3}, std::vector<double>(6)), D({3, 2}, std::vector<double>(6))},
      {"labels", "[3,2]", "features", "[2,3]"});
  ExpectInvalid(op, {D({3}, {1, 2, 3}), D({3}, {1, 0, 0})}, {"rank", "2"});
  ExpectInvalid(op,
                {D({1, 2}, {1, 2}), Tensor::FromVector<float>({1, 2}, {1, 0})},
                {"float64", "float32"});
  ExpectInvalid(op,
                {Tensor::FromVector<int32_t>({1, 2}, {1, 2}),
                 Tensor::FromVector<int32_t>({1, 2}, {1, 0})},
                {"int32"});
}

// dlabels = dloss * -log_softmax(features) (TensorFlow's rule): with
// features [0, ln 3], log_softmax = [ln 1/4, ln 3/4].
TEST_F(NnOpsTest, SoftmaxCrossEntropyWithLogitsLabelGradient) {
  Tensor x = ctx_.Adopt(D({1, 2}, {0, std::log(3.0)}));
  Tensor labels = ctx_.Adopt(D({1, 2}, {0.5, 0.5}));
  ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
  Tape* tape = *ctx_.tapes().Find(1);
  tape->Watch(x);
  tape->Watch(labels);
  absl::StatusOr<Tensors> out =
      Run("SoftmaxCrossEntropyWithLogits", {x, labels});
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
  auto g = Gradient(ctx_, *tape, {(*out)[0]}, {x, labels}, {D({1}, {2})},
                    Unconnected::kZero);
  ASSERT_TRUE(g.ok()) << g.status();
  const std::vector<double> dx = testing::Values((*g)[0]);
  const std::vector<double> dl = testing::Values((*g)[1]);
  EXPECT_NEAR(dx[0], 2 * (0.25 - 0.5), 1e-15);
  EXPECT_NEAR(dx[1], 2 * (0.75 - 0.5), 1e-15);
  EXPECT_NEAR(dl[0], -2 * std::log(0.25), 1e-14);
  EXPECT_NEAR(dl[1], -2 * std::log(0.75), 1e-14);
}

// input [1, 2, 3]: with depth_radius 1 the windows' sums of squares are 5,
// 14, 13; with the default radius 5 every window holds all three (14).
TEST_F(NnOpsTest, LrnValues) {
  Tensor x = D({1, 1, 1, 3}, {1, 2, 3});
  absl::StatusOr<Tensor> y = Run1("LRN", {x}, {{"depth_radius", int64_t{1}}});
  ASSERT_TRUE(y.ok()) << y.status();
  const std::vector<double> want = {1 / std::sqrt(6.0), 2 / std::sqrt(15.0),
                                    3 / std::sqrt(14.0)};
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(y->ElementAsDouble(i), want[i], 1e-15);
  }
  y = Run1("LRN", {x});
  ASSERT_TRUE(y.ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(y->ElementAsDouble(i), (i + 1) / std::sqrt(15.0), 1e-15);
  }
  // bias 2, alpha 0.5, beta 1, radius 0: x / (2 + x^2 / 2).
  y = Run1("LRN", {x},
           {{"depth_radius", int64_t{0}},
            {"bias", 2.0},
            {"alpha", 0.5},
            {"beta", 1.0}});
  ASSERT_TRUE(y.ok());
  for (int i = 0; i < 3; ++i) {
    const double v = i + 1;
    EXPECT_NEAR(y->ElementAsDouble(i), v / (2 + v * v / 2), 1e-15);
  }
}

// LRNGrad with grads [1, 0, 0] is d(x0 / sqrt(1 + x0^2 + x1^2))/dx:
//   [1/sqrt6 - 1/(6 sqrt6), -2/(6 sqrt6), 0] at x = [1, 2, 3], radius 1.
TEST_F(NnOpsTest, LrnGradValuesAndNoGradient) {
  const AttrMap attrs = {{"depth_radius", int64_t{1}}};
  Tensor x = D({1, 1, 1, 3}, {1, 2, 3});
  Tensor y = MustRun("LRN", {x}, attrs);
  Tensor dx = MustRun("LRNGrad", {D({1, 1, 1, 3}, {1, 0, 0}), x, y}, attrs);
  const double r6 = std::sqrt(6.0);
  const std::vector<double> want = {1 / r6 - 1 / (6 * r6), -2 / (6 * r6), 0};
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(dx.ElementAsDouble(i), want[i], 1e-15);
  const OpDef* grad = DefaultRegistry().Find("LRNGrad");
  ASSERT_NE(grad, nullptr);
  EXPECT_FALSE(grad->backward_supported());
  EXPECT_EQ(DefaultRegistry().Find("LRN")->saved_inputs, std::vector<int>{0});
  EXPECT_EQ(DefaultRegistry().Find("LRN")->saved_outputs, std::vector<int>{0});
}

TEST_F(NnOpsTest, LrnErrors) {
  ExpectInvalid("LRN", {D({1, 3}, {1, 2, 3})}, {"rank", "4", "[1,3]"});
  ExpectInvalid("LRN", {D({1, 1, 1, 3}, {1, 2, 3})}, {"depth_radius", "-1"},
                {{"depth_radius", int64_t{-1}}});
  ExpectInvalid("LRN", {Tensor::FromVector<int32_t>({1, 1, 1, 1}, {1})},
                {"int32"});
  Tensor a = D({1, 1, 1, 3}, {1, 2, 3});
  ExpectInvalid("LRNGrad", {a, D({1, 1, 1, 2}, {1, 2}), a},
                {"input_image", "[1,1,1,2]"});
  ExpectInvalid("LRNGrad", {a, a, D({1, 1, 3}, {1, 2, 3})},
                {"output_image", "rank"});
}

Tensor I32(std::vector<int32_t> v, Shape shape) {
  return Tensor::FromVector<int32_t>(shape, v);
}

// Ties: the lower index first (TensorFlow); integer inputs; rank 2 rows.
TEST_F(NnOpsTest, TopKValuesIndicesAndTies) {
  absl::StatusOr<Tensors> out =
      Run("TopKV2",
          {D({2, 4}, {1, 3, 3, 2, -1, -5, 0, 4}), Tensor::Scalar<int32_t>(2)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), Shape({2, 2}));
  EXPECT_EQ(testing::Values((*out)[0]), std::vector<double>({3, 3, 4, 0}));
  EXPECT_EQ((*out)[1].dtype(), DType::kInt32);
  EXPECT_EQ(testing::Values((*out)[1]), std::vector<double>({1, 2, 3, 2}));
  out = Run("TopKV2", {I32({5, -1, 7, 7}, {4}), Tensor::Scalar<int64_t>(3)},
            {{"index_type", DType::kInt64}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dtype(), DType::kInt32);
  EXPECT_EQ(testing::Values((*out)[0]), std::vector<double>({7, 7, 5}));
  EXPECT_EQ((*out)[1].dtype(), DType::kInt64);
  EXPECT_EQ(testing::Values((*out)[1]), std::vector<double>({2, 3, 0}));
  // k = 0 and an empty batch.
  out = Run("TopKV2",
            {D({2, 3}, {1, 2, 3, 4, 5, 6}), Tensor::Scalar<int32_t>(0)});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].shape(), Shape({2, 0}));
  out = Run("TopKV2", {D({0, 3}, {}), Tensor::Scalar<int32_t>(2)});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[1].shape(), Shape({0, 2}));
}

TEST_F(NnOpsTest, TopKErrors) {
  Tensor x = D({2, 3}, {1, 2, 3, 4, 5, 6});
  ExpectInvalid("TopKV2", {x, Tensor::Scalar<int32_t>(4)}, {"k 4", "[0, 3]"});
  ExpectInvalid("TopKV2", {x, Tensor::Scalar<int32_t>(-1)}, {"k -1"});
  ExpectInvalid("TopKV2", {x, I32({1, 2}, {2})}, {"k", "rank"});
  ExpectInvalid("TopKV2", {D({}, {1}), Tensor::Scalar<int32_t>(0)},
                {"input", "rank >= 1"});
  ExpectInvalid("TopKV2", {x, Tensor::Scalar<double>(1)}, {"k", "float64"});
  ExpectInvalid("TopKV2", {x, Tensor::Scalar<int32_t>(1)}, {"index_type"},
                {{"index_type", DType::kFloat32}});
}

// dinput: dvalues scattered to the indices (TensorFlow's _TopKGrad).
TEST_F(NnOpsTest, TopKGradientScattersToTheIndices) {
  Tensor x = ctx_.Adopt(D({1, 4}, {1, 3, 3, 2}));
  ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
  Tape* tape = *ctx_.tapes().Find(1);
  tape->Watch(x);
  absl::StatusOr<Tensors> out = Run("TopKV2", {x, Tensor::Scalar<int32_t>(3)});
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
  auto g = Gradient(ctx_, *tape, {(*out)[0]}, {x}, {D({1, 3}, {10, 20, 30})},
                    Unconnected::kZero);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(testing::Values((*g)[0]), std::vector<double>({0, 10, 20, 30}));
  EXPECT_EQ(DefaultRegistry().Find("TopKV2")->saved_outputs,
            std::vector<int>{1});
}

TEST(NnOpsSecondOrder, NewOpsBackwardsAreDifferentiable) {
  // Every new op TensorFlow has a second order for (LRNGrad has no gradient
  // in TensorFlow, so LRN has none).
  const absl::flat_hash_set<std::string> ops = {
      "SoftmaxCrossEntropyWithLogits",
      "TopKV2",
      "BatchMatMulV3",
      "BiasAdd",
      "MaxPoolWithArgmax",
      "MaxPoolGradWithArgmax",
      "SegmentProd",
      "UnsortedSegmentProd",
      "UnsortedSegmentMin",
      "UnsortedSegmentSum",
      "SparseSegmentMeanWithNumSegments",
      "SparseSegmentSqrtNWithNumSegments"};
  int checked = 0;
  for (const testing::OpSample& s : testing::AllOpSamples()) {
    if (!ops.contains(s.op)) continue;
    // CheckSecondOrder is real; complex samples have the first-order check.
    if (IsComplex(s.inputs[0].dtype())) continue;
    testing::CheckSecondOrder(s);
    ++checked;
  }
  EXPECT_GE(checked, static_cast<int>(ops.size()));
}

}  // namespace
}  // namespace gradtape
