// client::Function (gradtape/client/program.h) against an in-process server:
// a captured Adam training step equals the eager step bit for bit over 20
// steps (the first call builds the optimizer's slots, so capture happens on
// the second call); a body that reads a value runs eagerly with the reason;
// a wrong argument count is refused; a call with a wrong shape fails at the
// next wait point naming the program.
#include <cstring>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gradtape/client/client.h"
#include "gtest/gtest.h"
#include "tests/client/loopback_session_test.h"

namespace gradtape::client {
namespace {

using ::testing::HasSubstr;

class FunctionTest : public LoopbackSessionTest {};

HostTensor Wave(std::vector<int64_t> shape, int salt) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * (i + 1) + salt);
  return HostTensor::FromVector<float>(std::move(shape), v);
}

// A two-layer MLP trained with Adam on one session: loss = mean((tanh(x W1)
// W2 - y)^2). `captured` wraps the step in a Function. Returns the losses
// and the final weights.
struct TrainRun {
  std::vector<std::vector<float>> losses;
  std::vector<float> w1, w2;
  int traces = 0;
  bool captured = false;
};

TrainRun Train(Session& session, bool captured, int steps) {
  Variable w1 = Variable::Create(session, "w1", Wave({8, 16}, 1));
  Variable w2 = Variable::Create(session, "w2", Wave({16, 4}, 2));
  optimizers::Adam adam(session);
  auto step = [&](absl::Span<const Tensor> args) {
    GradientTape tape(session);
    Tensor h = Tanh(MatMul(args[0], w1.Read()));
    Tensor loss = Mean(Square(Sub(MatMul(h, w2.Read()), args[1])));
    tape.Stop();
    absl::StatusOr<std::vector<Tensor>> g =
        tape.Gradient(loss, {w1.handle(), w2.handle()});
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(adam.Apply({w1, w2}, *g).ok());
    return std::vector<Tensor>{loss};
  };
  Function fn(session, {{DType::kFloat32, {32, 8}}, {DType::kFloat32, {32, 4}}},
              step);
  TrainRun run;
  for (int s = 0; s < steps; ++s) {
    Tensor x = session.Put(Wave({32, 8}, 10 + s));
    Tensor y = session.Put(Wave({32, 4}, 100 + s));
    std::vector<Tensor> out;
    if (captured) {
      absl::StatusOr<std::vector<Tensor>> r = fn({x, y});
      EXPECT_TRUE(r.ok()) << r.status();
      out = *r;
    } else {
      Tensor args[] = {x, y};
      out = step(args);
    }
    absl::StatusOr<HostTensor> loss = session.Fetch(out[0]);
    EXPECT_TRUE(loss.ok()) << loss.status();
    if (!loss.ok()) break;
    std::vector<float> bits(1);
    std::memcpy(bits.data(), loss->bytes.data(), sizeof(float));
    run.losses.push_back(bits);
  }
  auto values = [&](const Variable& v) {
    absl::StatusOr<HostTensor> t = session.Fetch(v.Read());
    EXPECT_TRUE(t.ok()) << t.status();
    std::vector<float> out(t->bytes.size() / sizeof(float));
    std::memcpy(out.data(), t->bytes.data(), t->bytes.size());
    return out;
  };
  run.w1 = values(w1);
  run.w2 = values(w2);
  run.traces = fn.traces();
  run.captured = fn.captured();
  EXPECT_TRUE(fn.capture_status().ok()) << fn.capture_status();
  return run;
}

TEST_F(FunctionTest, CapturedAdamStepEqualsEagerBitForBit) {
  std::unique_ptr<Session> other = Connect();
  ASSERT_NE(other, nullptr);
  const TrainRun eager = Train(*session_, /*captured=*/false, 20);
  const TrainRun captured = Train(*other, /*captured=*/true, 20);
  EXPECT_TRUE(captured.captured);
  // Call 1 built Adam's slots (VarHandleOp): recorded again on call 2.
  EXPECT_EQ(captured.traces, 2);
  ASSERT_EQ(captured.losses.size(), 20u);
  EXPECT_EQ(captured.losses, eager.losses);
  EXPECT_EQ(captured.w1, eager.w1);
  EXPECT_EQ(captured.w2, eager.w2);
  EXPECT_NE(eager.losses.front(), eager.losses.back());  // it trained
}

TEST_F(FunctionTest, ABodyThatReadsAValueRunsEagerly) {
  int runs = 0;
  Function fn(*session_, {{DType::kFloat32, {2}}},
              [&](absl::Span<const Tensor> args) {
                ++runs;
                Tensor y = Neg(args[0]);
                EXPECT_TRUE(session_->Fetch(y).ok());
                return std::vector<Tensor>{y};
              });
  Tensor x = session_->Put(std::vector<int64_t>{2}, std::vector<float>{1, 2});
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::vector<Tensor>> out = fn({x});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(FetchValues((*out)[0]), (std::vector<double>{-1, -2}));
  }
  EXPECT_EQ(runs, 3);
  EXPECT_FALSE(fn.captured());
  EXPECT_THAT(fn.capture_status().message(), HasSubstr("it sends fetch"));
}

TEST_F(FunctionTest, WrongArgumentsAreRefused) {
  Function fn(*session_, {{DType::kFloat32, {2}}},
              [](absl::Span<const Tensor> args) {
                return std::vector<Tensor>{Exp(args[0])};
              });
  Tensor x = session_->Put(std::vector<int64_t>{2}, std::vector<float>{0, 1});
  EXPECT_EQ(fn({x, x}).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(fn({x}).ok());
  ASSERT_TRUE(fn.captured());
  Tensor wrong =
      session_->Put(std::vector<int64_t>{3}, std::vector<float>{0, 1, 2});
  absl::StatusOr<std::vector<Tensor>> out = fn({wrong});
  ASSERT_TRUE(out.ok());  // buffered: the server refuses it
  absl::Status s = session_->Sync();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("CallProgram"));
  EXPECT_THAT(s.message(), HasSubstr("input 0"));
  // The session goes on; the good call works.
  out = fn({x});
  ASSERT_TRUE(out.ok());
  const std::vector<double> v = FetchValues((*out)[0]);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_FLOAT_EQ(v[1], std::exp(1.0f));
}

}  // namespace
}  // namespace gradtape::client
