// Jacobian and batch Jacobian commands (core/autodiff/jacobian.h) through the
// session: they equal the per-row gradients stacked, honour unconnected NONE |
// ZERO, and reject bad batch shapes atomically.
#include "core/autodiff/jacobian.h"

#include "absl/strings/match.h"
#include "tests/core/autodiff/autodiff_fixture.h"

namespace gradtape::testing {
namespace {

using ::absl::StatusCode;

class JacobianTest : public AutodiffTest {};

// The result shapes the server sizes replies with (JacobianResultShape) are
// the ones Jacobian and BatchJacobian allocate (checked below by ShapeOf).
TEST(JacobianResultShapeTest, TargetThenSourceOrBatchFirst) {
  EXPECT_EQ(*JacobianResultShape({2, 1}, {2, 3}, false), (Shape{2, 1, 2, 3}));
  EXPECT_EQ(*JacobianResultShape({}, {3}, false), (Shape{3}));
  EXPECT_EQ(*JacobianResultShape({4, 2}, {4, 3}, true), (Shape{4, 2, 3}));
  EXPECT_EQ(*JacobianResultShape({4}, {4}, true), (Shape{4}));
  EXPECT_EQ(JacobianResultShape({4, 2}, {5, 3}, true).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(JacobianResultShape({}, {4}, true).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(JacobianResultShape({4}, {}, true).status().code(),
            StatusCode::kInvalidArgument);
}

// y = tanh(W x) with W [2,3], x [3,1]: J wrt W is [2,1,2,3], wrt x [2,1,3,1];
// row r of each equals the gradient seeded with the one-hot e_r.
TEST_F(JacobianTest, JacobianEqualsStackedRowGradients) {
  Put(1, {2, 3}, Wave(6, 1));  // W
  Put(2, {3, 1}, Wave(3, 2));  // x
  ASSERT_TRUE(Push(10, /*persistent=*/true).ok());
  ASSERT_TRUE(Watch(10, {1, 2}).ok());
  Exec("MatMul", {1, 2}, {3});
  Exec("Tanh", {3}, {4});
  ASSERT_TRUE(Pop(10).ok());
  auto jac = Jac(10, 4, {1, 2}, {20, 21});
  ASSERT_TRUE(jac.ok()) << jac.status();
  EXPECT_EQ(ShapeOf(20), (Shape{2, 1, 2, 3}));
  EXPECT_EQ(ShapeOf(21), (Shape{2, 1, 3, 1}));
  const std::vector<double> jw = Values(20), jx = Values(21);
  for (int r = 0; r < 2; ++r) {
    std::vector<double> seed(2, 0.0);
    seed[r] = 1.0;
    Put(30 + r, {2, 1}, seed);
    ASSERT_TRUE(Grad(10, {4}, {1, 2}, {40 + 2 * r, 41 + 2 * r},
                     Unconnected::kNone, {30 + r})
                    .ok());
    const std::vector<double> gw = Values(40 + 2 * r), gx = Values(41 + 2 * r);
    for (int k = 0; k < 6; ++k) EXPECT_DOUBLE_EQ(jw[r * 6 + k], gw[k]);
    for (int k = 0; k < 3; ++k) EXPECT_DOUBLE_EQ(jx[r * 3 + k], gx[k]);
  }
  // Spot check against the maths: dy_r/dx_j = (1 - y_r^2) W_rj.
  const std::vector<double> y = Values(4), w = Values(1);
  EXPECT_NEAR(jx[1 * 3 + 2], (1 - y[1] * y[1]) * w[1 * 3 + 2], 1e-12);
}

// y = tanh(x W) with x [4,3] (4 examples), W [3,2]: the batch Jacobian
// [4,2,3] holds the diagonal blocks of the full Jacobian [4,2,4,3].
TEST_F(JacobianTest, BatchJacobianEqualsPerExampleBlocks) {
  Put(1, {4, 3}, Wave(12, 3));
  Put(2, {3, 2}, Wave(6, 4));
  ASSERT_TRUE(Push(10, /*persistent=*/true).ok());
  ASSERT_TRUE(Watch(10, {1}).ok());
  Exec("MatMul", {1, 2}, {3});
  Exec("Tanh", {3}, {4});
  ASSERT_TRUE(Pop(10).ok());
  ASSERT_TRUE(Jac(10, 4, {1}, {20}, /*batch=*/true).ok());
  ASSERT_TRUE(Jac(10, 4, {1}, {21}).ok());
  EXPECT_EQ(ShapeOf(20), (Shape{4, 2, 3}));
  EXPECT_EQ(ShapeOf(21), (Shape{4, 2, 4, 3}));
  const std::vector<double> batch = Values(20), full = Values(21);
  for (int b = 0; b < 4; ++b) {
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 3; ++j) {
        EXPECT_DOUBLE_EQ(batch[(b * 2 + i) * 3 + j],
                         full[((b * 2 + i) * 4 + b) * 3 + j])
            << b << "," << i << "," << j;
      }
    }
  }
}

TEST_F(JacobianTest, UnconnectedSourceIsNoneOrZeros) {
  Put(1, {2}, {0.5, -0.25});
  Put(2, {3}, {1, 2, 3});
  ASSERT_TRUE(Push(10, /*persistent=*/true).ok());
  ASSERT_TRUE(Watch(10, {1, 2}).ok());
  Exec("Exp", {1}, {3});
  ASSERT_TRUE(Pop(10).ok());
  auto none = Jac(10, 3, {1, 2}, {20, 21});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE((*none)[1].valid());
  absl::StatusOr<Tensor> fetched = Fetch(21);
  EXPECT_EQ(fetched.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(fetched.status().message(), "None Jacobian"))
      << fetched.status();
  ASSERT_TRUE(Jac(10, 3, {2}, {22}, false, Unconnected::kZero).ok());
  EXPECT_EQ(ShapeOf(22), (Shape{2, 3}));
  EXPECT_EQ(Values(22), std::vector<double>(6, 0.0));
  // d exp(x) / dx is diagonal.
  const std::vector<double> j = Values(20);
  EXPECT_NEAR(j[0], std::exp(0.5), 1e-12);
  EXPECT_EQ(j[1], 0.0);
  EXPECT_EQ(j[2], 0.0);
  EXPECT_NEAR(j[3], std::exp(-0.25), 1e-12);
}

TEST_F(JacobianTest, BatchMismatchIsInvalidArgumentAndPoisonsResults) {
  Put(1, {4, 3}, Wave(12, 5));
  Put(2, {3, 3}, Wave(9, 6));
  ASSERT_TRUE(Push(10, /*persistent=*/true).ok());
  ASSERT_TRUE(Watch(10, {1, 2}).ok());
  Exec("MatMul", {1, 2}, {3});  // [4,3]
  ASSERT_TRUE(Pop(10).ok());
  auto bad = Jac(10, 3, {2}, {20}, /*batch=*/true);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  for (const char* part : {"BatchJacobian", "command", "[3,3]", "[4,3]"}) {
    EXPECT_TRUE(absl::StrContains(bad.status().message(), part))
        << part << ": " << bad.status();
  }
  EXPECT_EQ(Fetch(20).status().code(), StatusCode::kFailedPrecondition);
  // A scalar target has no batch dimension.
  Exec("Sum", {3}, {4});
  EXPECT_EQ(Jac(10, 4, {1}, {21}, true).status().code(),
            StatusCode::kInvalidArgument);
  // The session still works, and the tape too.
  ASSERT_TRUE(Jac(10, 3, {1}, {22}, true).ok());
  EXPECT_EQ(ShapeOf(22), (Shape{4, 3, 3}));
}

TEST_F(JacobianTest, NonPersistentTapeGivesOneJacobian) {
  Put(1, {3}, {0.1, 0.2, 0.3});
  ASSERT_TRUE(Push(10).ok());
  ASSERT_TRUE(Watch(10, {1}).ok());
  Exec("Square", {1}, {2});
  ASSERT_TRUE(Pop(10).ok());
  ASSERT_TRUE(Jac(10, 2, {1}, {20}).ok());
  EXPECT_EQ(Values(20), (std::vector<double>{0.2, 0, 0, 0, 0.4, 0, 0, 0, 0.6}));
  auto again = Jac(10, 2, {1}, {21});
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(again.status().message(), "persistent=true"));
}

// The Jacobian is computed with recording stopped: an outer tape that
// watches the source records nothing for it.
TEST_F(JacobianTest, RowsAreNotRecordedOnOtherTapes) {
  Put(1, {3}, {0.1, 0.2, 0.3});
  ASSERT_TRUE(Push(9, true).ok());
  ASSERT_TRUE(Watch(9, {1}).ok());
  ASSERT_TRUE(Push(10, true).ok());
  ASSERT_TRUE(Watch(10, {1}).ok());
  Exec("Exp", {1}, {2});
  ASSERT_TRUE(Pop(10).ok());
  const int64_t before = session_.Stats().tape_entries;
  ASSERT_TRUE(Jac(10, 2, {1}, {20}).ok());
  EXPECT_EQ(session_.Stats().tape_entries, before);
  ASSERT_TRUE(Pop(9).ok());
}

}  // namespace
}  // namespace gradtape::testing
