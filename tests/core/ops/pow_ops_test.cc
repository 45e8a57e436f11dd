// Pow (core/ops/binary_ops.cc): forward values for every dtype family,
// TensorFlow's gradient conventions at x <= 0, second order, and bad inputs.
// The generic checks (Jacobian, elision, forward mode) run on its samples.
#include <cmath>
#include <complex>
#include <limits>
#include <vector>

#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_samples.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace testing {
void CheckSecondOrder(const OpSample& s);  // math_ops_test.cc
}  // namespace testing
namespace {

using testing::Values;

class PowTest : public testing::OpTest {
 protected:
  // Gradients of sum(dz * Pow(x, y)) w.r.t. x and y.
  std::vector<Tensor> Grads(Tensor x, Tensor y) {
    x = ctx_.Adopt(x);
    y = ctx_.Adopt(y);
    EXPECT_TRUE(ctx_.tapes().Push(1, false, false).ok());
    Tape* tape = *ctx_.tapes().Find(1);
    tape->Watch(x);
    tape->Watch(y);
    Tensor z = MustRun("Pow", {x, y});
    EXPECT_TRUE(ctx_.tapes().Pop(1).ok());
    auto g = Gradient(ctx_, *tape, {z}, {x, y}, {}, Unconnected::kZero);
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(ctx_.tapes().Delete(1).ok());
    return g.ok() ? *g : std::vector<Tensor>(2);
  }
};

TEST_F(PowTest, FloatValuesWithBroadcasting) {
  Tensor z = MustRun("Pow", {Tensor::FromVector<float>({2, 2}, {2, 3, 4, 9}),
                             Tensor::FromVector<float>({2}, {2, 0.5})});
  EXPECT_EQ(z.dtype(), DType::kFloat32);
  EXPECT_EQ(z.shape(), (Shape{2, 2}));
  const std::vector<double> expected = {4, std::sqrt(3.0), 16, 3};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(z.ElementAsDouble(i), expected[i], 1e-6) << i;
  }
  // A negative base with an integer-valued exponent is real; with a
  // fractional one NaN, as in C and TensorFlow.
  z = MustRun("Pow", {Tensor::FromVector<double>({2}, {-2, -2}),
                      Tensor::FromVector<double>({2}, {3, 0.5})});
  EXPECT_EQ(z.ElementAsDouble(0), -8);
  EXPECT_TRUE(std::isnan(z.ElementAsDouble(1)));
}

TEST_F(PowTest, IntegersBySquaringAndNegativeExponentsRefused) {
  Tensor z = MustRun("Pow", {Tensor::FromVector<int32_t>({4}, {2, -3, 0, 7}),
                             Tensor::FromVector<int32_t>({4}, {10, 3, 0, 1})});
  EXPECT_EQ(z.dtype(), DType::kInt32);
  EXPECT_EQ(Values(z), (std::vector<double>{1024, -27, 1, 7}));
  z = MustRun("Pow", {Tensor::Scalar<int64_t>(3), Tensor::Scalar<int64_t>(39)});
  EXPECT_EQ(z.data<int64_t>()[0], 4052555153018976267);
  // 2^31 wraps in int32, as TensorFlow's CPU kernel.
  z = MustRun("Pow", {Tensor::Scalar<int32_t>(2), Tensor::Scalar<int32_t>(31)});
  EXPECT_EQ(z.data<int32_t>()[0], std::numeric_limits<int32_t>::min());
  ExpectInvalid("Pow",
                {Tensor::FromVector<int32_t>({2}, {2, 2}),
                 Tensor::FromVector<int32_t>({2}, {1, -1})},
                {},
                {"integers to negative integer powers are not allowed",
                 "y[1] = -1", "int32[2]"});
}

TEST_F(PowTest, ComplexValues) {
  using C = std::complex<double>;
  Tensor x = Tensor::FromVector<C>({2}, {C(0, 1), C(-1, 0)});
  Tensor y = Tensor::FromVector<C>({2}, {C(2, 0), C(0.5, 0)});
  Tensor z = MustRun("Pow", {x, y});
  ASSERT_EQ(z.dtype(), DType::kComplex128);
  EXPECT_NEAR(z.data<C>()[0].real(), -1, 1e-12);
  EXPECT_NEAR(z.data<C>()[0].imag(), 0, 1e-12);
  EXPECT_NEAR(z.data<C>()[1].real(), 0, 1e-12);  // principal sqrt(-1) = i
  EXPECT_NEAR(z.data<C>()[1].imag(), 1, 1e-12);
}

TEST_F(PowTest, GradientAtNonPositiveBasesFollowsTensorFlow) {
  // TF's _PowGrad: dy = z * log(x) only where x > 0, else 0; dx as the
  // formula (0^0 = 1, so d/dx x^1 at 0 is 1).
  std::vector<Tensor> g = Grads(Tensor::FromVector<double>({3}, {-2, 0, 2}),
                                Tensor::FromVector<double>({3}, {3, 1, 3}));
  EXPECT_EQ(Values(g[0]), (std::vector<double>{12, 1, 12}));
  EXPECT_EQ(g[1].ElementAsDouble(0), 0);
  EXPECT_EQ(g[1].ElementAsDouble(1), 0);
  EXPECT_NEAR(g[1].ElementAsDouble(2), 8 * std::log(2.0), 1e-12);
  // Broadcast exponent: dy sums over the broadcast axis.
  g = Grads(Tensor::FromVector<double>({2}, {2, 3}), Tensor::Scalar<double>(2));
  EXPECT_EQ(Values(g[0]), (std::vector<double>{4, 6}));
  EXPECT_EQ(g[1].shape(), Shape{});
  EXPECT_NEAR(g[1].ElementAsDouble(0), 4 * std::log(2.0) + 9 * std::log(3.0),
              1e-12);
}

TEST_F(PowTest, DTypesMustMatch) {
  ExpectInvalid("Pow",
                {Tensor::FromVector<double>({1}, {2}),
                 Tensor::FromVector<float>({1}, {2})},
                {}, {"same dtype", "float32[1]"});
  ExpectInvalid("Pow",
                {Tensor::FromVector<bool>({1}, {true}),
                 Tensor::FromVector<bool>({1}, {true})},
                {}, {"bool"});
  ExpectInvalid("Pow",
                {Tensor::FromVector<double>({2}, {2, 2}),
                 Tensor::FromVector<double>({3}, {1, 2, 3})},
                {}, {"[2]", "[3]"});
}

// Pow's and the slicing ops' backwards, differentiated again (slicing is
// linear: its second-order check runs the backward ops through a tape).
TEST(PowAndSliceSecondOrder, BackwardsAreDifferentiable) {
  int checked = 0;
  for (const testing::OpSample& s : testing::AllOpSamples()) {
    if (s.op != "Pow" && s.op != "StridedSlice" && s.op != "StridedSliceGrad" &&
        s.op != "Slice") {
      continue;
    }
    if (IsComplex(s.inputs[0].dtype())) continue;
    testing::CheckSecondOrder(s);
    ++checked;
  }
  EXPECT_GE(checked, 14);
}

}  // namespace
}  // namespace gradtape
