// Forward values of the nn activations and their *Grad helpers against naive
// reference formulas, the input checks, TensorFlow's elision seed sets and
// second-order gradients (the generic check covers first-order backwards).
#include <cmath>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
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
  ExpectInvalid("BiasAdd", {value, bias}, {"NCHW", "not supported"},
                {{"data_format", std::string("NCHW")}});
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
    testing::CheckSecondOrder(s);
    ++checked;
  }
  EXPECT_GE(checked, static_cast<int>(ops.size()));
}

}  // namespace
}  // namespace gradtape
