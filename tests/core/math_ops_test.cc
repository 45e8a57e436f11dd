// Forward values of the math ops against std:: functions and naive reference
// implementations, their input checks, and gradients the generic check cannot
// reach (a product with a zero in it). The generic gradient check covers the
// backwards on its samples.
#include <cmath>
#include <functional>

#include "absl/strings/match.h"
#include "core/context.h"
#include "core/op_registry.h"
#include "gtest/gtest.h"

namespace gradtape {
namespace {

std::vector<double> Values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    v.push_back(t.ElementAsDouble(i));
  }
  return v;
}

class MathOpsTest : public ::testing::Test {
 protected:
  absl::StatusOr<Tensor> Run(absl::string_view op, std::vector<Tensor> in,
                             AttrMap attrs = {}) {
    Tensors out;
    absl::Status s = ctx_.Execute(op, in, std::move(attrs), &out);
    if (!s.ok()) return s;
    return out[0];
  }
  static Tensor D(Shape shape, std::vector<double> v) {
    return Tensor::FromVector<double>(shape, v);
  }
  static Tensor B(Shape shape, std::vector<bool> v) {
    return Tensor::FromVector<bool>(shape, v);
  }
  // Expects `op` to fail with INVALID_ARGUMENT mentioning the op and every
  // piece of `mentions`, and to record nothing on a tape watching `in`.
  void ExpectInvalid(absl::string_view op, std::vector<Tensor> in,
                     std::vector<std::string> mentions, AttrMap attrs = {}) {
    ASSERT_TRUE(ctx_.tapes().Push(99, false, false).ok());
    Tape* tape = *ctx_.tapes().Find(99);
    for (Tensor& t : in) {
      t = ctx_.Adopt(t);
      if (IsTrainable(t.dtype())) tape->Watch(t);
    }
    Tensors out;
    absl::Status s = ctx_.Execute(op, in, std::move(attrs), &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), op)) << s;
    for (const std::string& m : mentions) {
      EXPECT_TRUE(absl::StrContains(s.message(), m)) << s << " lacks " << m;
    }
    EXPECT_TRUE(tape->op_tape().empty());
    EXPECT_TRUE(out.empty());
    ASSERT_TRUE(ctx_.tapes().Pop(99).ok());
    ASSERT_TRUE(ctx_.tapes().Delete(99).ok());
  }
  Context ctx_{DefaultRegistry()};
};

TEST_F(MathOpsTest, ComparisonsBroadcastToBool) {
  Tensor x = D({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor y = D({3}, {2, 2, 7});
  struct Case {
    const char* op;
    std::vector<double> expected;
  };
  for (const Case& c : std::vector<Case>{
           {"Equal", {0, 1, 0, 0, 0, 0}},
           {"NotEqual", {1, 0, 1, 1, 1, 1}},
           {"Greater", {0, 0, 0, 1, 1, 0}},
           {"GreaterEqual", {0, 1, 0, 1, 1, 0}},
           {"Less", {1, 0, 1, 0, 0, 1}},
           {"LessEqual", {1, 1, 1, 0, 0, 1}},
       }) {
    absl::StatusOr<Tensor> z = Run(c.op, {x, y});
    ASSERT_TRUE(z.ok()) << z.status();
    EXPECT_EQ(z->dtype(), DType::kBool) << c.op;
    EXPECT_EQ(z->shape(), (Shape{2, 3})) << c.op;
    EXPECT_EQ(Values(*z), c.expected) << c.op;
  }
  // Outer broadcast, and a scalar on the left.
  absl::StatusOr<Tensor> z =
      Run("Less", {D({2, 1}, {1, 5}), D({1, 3}, {0, 3, 6})});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->shape(), (Shape{2, 3}));
  EXPECT_EQ(Values(*z), (std::vector<double>{0, 1, 1, 0, 0, 1}));
  z = Run("Greater", {D({}, {2}), D({3}, {1, 2, 3})});
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(Values(*z), (std::vector<double>{1, 0, 0}));
}

TEST_F(MathOpsTest, EqualTakesIntsBoolsAndComplex) {
  absl::StatusOr<Tensor> z =
      Run("Equal", {Tensor::FromVector<int64_t>({3}, {1, 2, 3}),
                    Tensor::Scalar<int64_t>(2)});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(Values(*z), (std::vector<double>{0, 1, 0}));
  z = Run("NotEqual", {B({2}, {true, false}), B({2}, {true, true})});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(Values(*z), (std::vector<double>{0, 1}));
  z = Run("Equal", {Tensor::FromVector<complex128>({2}, {{1, 2}, {1, 3}}),
                    Tensor::FromVector<complex128>({2}, {{1, 2}, {1, -3}})});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(Values(*z), (std::vector<double>{1, 0}));
}

TEST_F(MathOpsTest, ComparisonErrors) {
  ExpectInvalid("Equal",
                {D({2, 3}, std::vector<double>(6)), D({4}, {1, 2, 3, 4})},
                {"[2,3]", "[4]"});
  ExpectInvalid("Less",
                {D({2}, {1, 2}), Tensor::FromVector<int32_t>({2}, {1, 2})},
                {"float64", "int32"});
  ExpectInvalid("Greater", {B({1}, {true}), B({1}, {false})}, {"bool"});
  ExpectInvalid(
      "GreaterEqual",
      {Tensor::Scalar<complex64>({1, 1}), Tensor::Scalar<complex64>({1, 1})},
      {"complex64"});
}

TEST_F(MathOpsTest, SelectElementwiseScalarAndVectorConditions) {
  Tensor t = D({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor e = D({2, 3}, {-1, -2, -3, -4, -5, -6});
  absl::StatusOr<Tensor> z =
      Run("Select", {B({2, 3}, {true, false, true, false, false, true}), t, e});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(Values(*z), (std::vector<double>{1, -2, 3, -4, -5, 6}));
  z = Run("Select", {B({2}, {false, true}), t, e});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->shape(), (Shape{2, 3}));
  EXPECT_EQ(Values(*z), (std::vector<double>{-1, -2, -3, 4, 5, 6}));
  z = Run("Select", {Tensor::Scalar<bool>(false), t, e});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(Values(*z), Values(e));
  // Integers, and a rank-3 t chosen by rows.
  z = Run("Select", {B({2}, {true, false}),
                     Tensor::FromVector<int32_t>({2, 1, 2}, {1, 2, 3, 4}),
                     Tensor::FromVector<int32_t>({2, 1, 2}, {5, 6, 7, 8})});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->dtype(), DType::kInt32);
  EXPECT_EQ(Values(*z), (std::vector<double>{1, 2, 7, 8}));
}

TEST_F(MathOpsTest, SelectErrors) {
  Tensor t = D({2, 3}, std::vector<double>(6));
  ExpectInvalid("Select", {D({2, 3}, std::vector<double>(6)), t, t},
                {"condition", "bool", "float64[2,3]"});
  ExpectInvalid("Select", {B({3}, {true, true, true}), t, t},
                {"condition", "[3]", "[2,3]"});
  ExpectInvalid("Select", {B({1, 3}, {true, true, true}), t, t},
                {"[1,3]", "[2,3]"});
  ExpectInvalid("Select",
                {B({2}, {true, true}), t, D({3, 2}, std::vector<double>(6))},
                {"[2,3]", "[3,2]"});
  ExpectInvalid("Select",
                {B({2}, {true, true}), t,
                 Tensor::FromVector<int32_t>({2, 3}, std::vector<int32_t>(6))},
                {"float64", "int32"});
}

TEST_F(MathOpsTest, SelectGradientRoutesByCondition) {
  Tensor c = B({3}, {true, false, true});
  Tensor t = ctx_.Adopt(D({3}, {1, 2, 3}));
  Tensor e = ctx_.Adopt(D({3}, {4, 5, 6}));
  ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
  Tape* tape = *ctx_.tapes().Find(1);
  tape->Watch(t);
  tape->Watch(e);
  Tensors out;
  ASSERT_TRUE(ctx_.Execute("Select", {ctx_.Adopt(c), t, e}, {}, &out).ok());
  ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
  auto grads = ctx_.Gradient(*tape, {out[0]}, {t, e}, {D({3}, {10, 20, 30})},
                             Unconnected::kNone);
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_EQ(Values((*grads)[0]), (std::vector<double>{10, 0, 30}));
  EXPECT_EQ(Values((*grads)[1]), (std::vector<double>{0, 20, 0}));
}

}  // namespace
}  // namespace gradtape
