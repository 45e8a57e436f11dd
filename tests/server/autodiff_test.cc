// Jacobians, forward mode, watched variables, stop_gradient and custom
// gradients end to end: the C++ client against an in-process gradtape
// server on 127.0.0.1 (a free port), over gRPC.
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gradtape/client/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/client/loopback_session_test.h"

namespace gradtape::client {
namespace {

using ::testing::HasSubstr;

class AutodiffServerTest : public LoopbackSessionTest {
 protected:
  Tensor Put(std::vector<int64_t> shape, std::vector<double> values) {
    return session_->Put<double>(std::move(shape), values);
  }
  std::vector<int64_t> ShapeOf(const Tensor& t) {
    absl::StatusOr<HostTensor> v = session_->Fetch(t);
    return v.ok() ? v->shape : std::vector<int64_t>{-1};
  }
};

std::vector<double> Wave(int n, int salt) {
  std::vector<double> v(n);
  for (int k = 0; k < n; ++k) v[k] = 0.9 * std::sin(1.3 * k + 0.41 * salt);
  return v;
}

TapeOptions Persistent() {
  TapeOptions options;
  options.persistent = true;
  return options;
}

// y = tanh(x W), x [3,4] (3 examples), W [4,2]: the Jacobians equal the
// gradients seeded with one-hot output gradients, stacked; the batch
// Jacobian is the diagonal blocks.
TEST_F(AutodiffServerTest, JacobiansEqualStackedRowGradients) {
  Tensor x = Put({3, 4}, Wave(12, 1));
  Tensor w = Put({4, 2}, Wave(8, 2));
  GradientTape tape(*session_, Persistent());
  tape.Watch({x, w});
  Tensor y = Tanh(MatMul(x, w));
  tape.Stop();
  auto jac = tape.Jacobian(y, {x, w});
  ASSERT_TRUE(jac.ok()) << jac.status();
  auto batch = tape.BatchJacobian(y, {x});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(ShapeOf((*jac)[0]), (std::vector<int64_t>{3, 2, 3, 4}));
  EXPECT_EQ(ShapeOf((*jac)[1]), (std::vector<int64_t>{3, 2, 4, 2}));
  EXPECT_EQ(ShapeOf((*batch)[0]), (std::vector<int64_t>{3, 2, 4}));
  const std::vector<double> jx = FetchValues((*jac)[0]),
                            jw = FetchValues((*jac)[1]),
                            bx = FetchValues((*batch)[0]);
  for (int r = 0; r < 6; ++r) {
    std::vector<double> seed(6, 0.0);
    seed[r] = 1.0;
    GradientOptions options;
    options.output_gradients = {Put({3, 2}, seed)};
    auto rows = tape.GradientValues(y, {x, w}, options);
    ASSERT_TRUE(rows.ok()) << rows.status();
    const std::vector<double> gx = (*rows)[0]->ToDoubles(),
                              gw = (*rows)[1]->ToDoubles();
    for (int k = 0; k < 12; ++k) EXPECT_DOUBLE_EQ(jx[r * 12 + k], gx[k]);
    for (int k = 0; k < 8; ++k) EXPECT_DOUBLE_EQ(jw[r * 8 + k], gw[k]);
    const int b = r / 2, i = r % 2;
    for (int j = 0; j < 4; ++j) {
      EXPECT_DOUBLE_EQ(bx[(b * 2 + i) * 4 + j], gx[b * 4 + j]);
    }
  }
  // A batch mismatch is INVALID_ARGUMENT at the next wait point; the
  // session keeps working.
  auto bad = tape.BatchJacobian(y, {w});
  ASSERT_TRUE(bad.ok());
  absl::Status status = session_->Sync();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("BatchJacobian"));
  EXPECT_EQ(FetchValues(Sum(y)).size(), 1u);
}

// Forward mode over the wire: JVP = J v, and H v by forward-over-reverse.
TEST_F(AutodiffServerTest, ForwardAccumulatorGivesJvpAndHvp) {
  const std::vector<double> xv = Wave(3, 3), v = {0.5, -1.0, 0.25};
  Tensor w = Put({2, 3}, Wave(6, 4));
  Tensor x = Put({3, 1}, xv);
  Tensor tangent = Put({3, 1}, v);
  std::optional<HostTensor> jvp, hvp;
  std::vector<double> jac;
  {
    ForwardAccumulator acc(*session_);
    acc.Watch(x, tangent);
    GradientTape tape(*session_, Persistent());
    tape.Watch(x);
    Tensor y = Tanh(MatMul(w, x));  // [2,1]
    Tensor loss = Sum(y);
    tape.Stop();
    auto g = tape.Gradient(loss, {x});
    ASSERT_TRUE(g.ok());
    auto j = tape.Jacobian(y, {x});
    ASSERT_TRUE(j.ok());
    acc.Stop();
    auto jv = acc.JvpValue(y);
    ASSERT_TRUE(jv.ok()) << jv.status();
    jvp = *jv;
    auto hv = acc.JvpValue((*g)[0]);
    ASSERT_TRUE(hv.ok()) << hv.status();
    hvp = *hv;
    jac = FetchValues((*j)[0]);
    // No tangent: None, or zeros on request.
    Tensor unrelated = Exp(w);
    auto none = acc.JvpValue(unrelated);
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(none->has_value());
    auto zeros = acc.JvpValue(unrelated, Unconnected::kZero);
    ASSERT_TRUE(zeros.ok());
    EXPECT_EQ((*zeros)->ToDoubles(), std::vector<double>(6, 0.0));
    // StopGradient blocks tangents too.
    auto stopped = acc.JvpValue(StopGradient(y));
    ASSERT_TRUE(stopped.ok());
    EXPECT_FALSE(stopped->has_value());
  }
  ASSERT_TRUE(jvp.has_value());
  const std::vector<double> got = jvp->ToDoubles();
  ASSERT_EQ(got.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    double expected = 0;
    for (int k = 0; k < 3; ++k) expected += jac[r * 3 + k] * v[k];
    EXPECT_NEAR(got[r], expected, 1e-12);
  }
  // H v against central differences of the gradient, computed in-process
  // by formula: g(x) = W^T (1 - tanh(W x)^2).
  const std::vector<double> wv = Wave(6, 4);
  auto grad_at = [&](const std::vector<double>& at) {
    std::vector<double> g(3, 0.0);
    for (int r = 0; r < 2; ++r) {
      double z = 0;
      for (int k = 0; k < 3; ++k) z += wv[r * 3 + k] * at[k];
      const double t = std::tanh(z);
      for (int k = 0; k < 3; ++k) g[k] += wv[r * 3 + k] * (1 - t * t);
    }
    return g;
  };
  constexpr double kStep = 1e-6;
  std::vector<double> plus = xv, minus = xv;
  for (int k = 0; k < 3; ++k) {
    plus[k] += kStep * v[k];
    minus[k] -= kStep * v[k];
  }
  const std::vector<double> gp = grad_at(plus), gm = grad_at(minus);
  ASSERT_TRUE(hvp.has_value());
  const std::vector<double> h = hvp->ToDoubles();
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(h[k], (gp[k] - gm[k]) / (2 * kStep), 1e-7) << k;
  }
  EXPECT_TRUE(session_->Sync().ok());
}

TEST_F(AutodiffServerTest, WatchedVariables) {
  auto variable = [&](std::vector<double> value) {
    Tensor handle = session_->Execute(
        "VarHandleOp", {},
        {{"dtype", DType::kFloat64},
         {"shape", std::vector<int64_t>{static_cast<int64_t>(value.size())}}},
        1)[0];
    session_->Execute(
        "AssignVariableOp",
        {handle, Put({static_cast<int64_t>(value.size())}, value)}, {}, 0);
    return handle;
  };
  Tensor a = variable({1, 2}), b = variable({3});
  {
    GradientTape tape(*session_);  // watch_accessed_variables = true
    session_->Execute("ReadVariableOp", {b});
    session_->Execute("ReadVariableOp", {a});
    auto ids = tape.WatchedVariableIds();
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, (std::vector<int64_t>{b.id(), a.id()}));
  }
  {
    TapeOptions options;
    options.watch_accessed_variables = false;
    GradientTape tape(*session_, options);
    session_->Execute("ReadVariableOp", {a});
    auto none = tape.WatchedVariableIds();
    ASSERT_TRUE(none.ok());
    EXPECT_TRUE(none->empty());
    tape.Watch(a);
    auto ids = tape.WatchedVariableIds();
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, std::vector<int64_t>{a.id()});
  }
}

// Gradient clipping inside a model through a custom gradient; a gradient
// through PreventGradient is UNIMPLEMENTED at the wait point.
TEST_F(AutodiffServerTest, CustomGradientClipsAndPreventGradientFails) {
  Tensor x = Put({4}, {1, 2, 3, 4});
  Tensor c = Put({4}, {-5, -0.5, 0.25, 7});
  Tensor lo = session_->Scalar(-1, DType::kFloat64);
  Tensor hi = session_->Scalar(1, DType::kFloat64);
  using Ref = GradientProgram::Ref;
  GradientProgram clip;
  int s = clip.AddStep("Maximum", {Ref::Upstream(0), Ref::Captured(lo)});
  s = clip.AddStep("Minimum", {Ref::Step(s), Ref::Captured(hi)});
  clip.SetInputGradient(0, Ref::Step(s));
  GradientTape tape(*session_, Persistent());
  tape.Watch(x);
  Tensor h = ExecuteWithGradient("Identity", {x}, {}, 1, clip)[0];
  Tensor y = Sum(Mul(c, h));
  Tensor z = Sum(Exp(Execute("PreventGradient", {x})[0]));
  tape.Stop();
  auto g = tape.GradientValues(y, {x});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)[0]->ToDoubles(), (std::vector<double>{-1, -0.5, 0.25, 1}));
  auto blocked = tape.GradientValues(z, {x});
  ASSERT_FALSE(blocked.ok());
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(blocked.status().message()),
              HasSubstr("PreventGradient"));
  // A malformed program poisons the outputs; the session works.
  GradientProgram bad;
  bad.SetInputGradient(0, Ref::Step(3));
  Tensor poisoned = ExecuteWithGradient("Identity", {x}, {}, 1, bad)[0];
  absl::Status status = session_->Sync();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("step 3"));
  EXPECT_EQ(FetchValues(Sum(x)), std::vector<double>{10});
}

// Prints what one Jacobian command saves over one GradientValues round trip
// per row (the client-side way), and checks both agree. The figures are
// informational (loopback, this machine): see the test's output.
TEST_F(AutodiffServerTest, JacobianCommandVersusRowRoundTrips) {
  constexpr int kRows = 64, kCols = 32;
  Tensor w = Put({kRows, kCols}, Wave(kRows * kCols, 5));
  Tensor x = Put({kCols, 1}, Wave(kCols, 6));
  GradientTape tape(*session_, Persistent());
  tape.Watch(x);
  Tensor y = Tanh(MatMul(w, x));
  tape.Stop();
  ASSERT_TRUE(session_->Sync().ok());

  const absl::Time t0 = absl::Now();
  auto jac = tape.Jacobian(y, {x});
  ASSERT_TRUE(jac.ok());
  const std::vector<double> j = FetchValues((*jac)[0]);
  const absl::Duration one_command = absl::Now() - t0;

  std::vector<Tensor> seeds;
  for (int r = 0; r < kRows; ++r) {
    std::vector<double> seed(kRows, 0.0);
    seed[r] = 1.0;
    seeds.push_back(Put({kRows, 1}, seed));
  }
  ASSERT_TRUE(session_->Sync().ok());
  const absl::Time t1 = absl::Now();
  std::vector<double> rows;
  for (int r = 0; r < kRows; ++r) {
    GradientOptions options;
    options.output_gradients = {seeds[r]};
    auto g = tape.GradientValues(y, {x}, options);
    ASSERT_TRUE(g.ok());
    for (double v : (*g)[0]->ToDoubles()) rows.push_back(v);
  }
  const absl::Duration round_trips = absl::Now() - t1;
  EXPECT_EQ(j, rows);
  std::printf(
      "[ figures  ] Jacobian [%d,1] wrt [%d,1] over loopback: one Jacobian "
      "command + fetch %.2f ms; %d GradientValues round trips %.2f ms\n",
      kRows, kCols, absl::ToDoubleMilliseconds(one_command), kRows,
      absl::ToDoubleMilliseconds(round_trips));
}

}  // namespace
}  // namespace gradtape::client
