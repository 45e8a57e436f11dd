// Tape semantics through the session API (what a client sees), in-process.
#include "absl/strings/match.h"
#include "core/autodiff/elision_stats.h"
#include "core/registry/op_registry.h"
#include "core/session/session.h"
#include "gtest/gtest.h"
#include "tests/core/autodiff/autodiff_fixture.h"

namespace gradtape {
namespace {

// AutodiffTest's session and helpers, with values first in Put: a list of
// several values is a vector, one value a scalar, unless a shape is given.
class TapeTest : public testing::AutodiffTest {
 protected:
  void Put(int64_t id, std::vector<double> values, Shape shape = {}) {
    if (shape.empty() && values.size() != 1) {
      shape = {static_cast<int64_t>(values.size())};
    }
    ASSERT_TRUE(
        session_
            .PutTensor(++seq_, id, Tensor::FromVector<double>(shape, values))
            .ok());
  }
};

TEST_F(TapeTest, SquareGradient) {
  Put(1, {3.0});
  ASSERT_TRUE(session_.PushTape(++seq_, 10, false, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 10, {1}).ok());
  Exec("Mul", {1, 1}, {2});
  ASSERT_TRUE(session_.PopTape(++seq_, 10).ok());
  auto g = Grad(10, {2}, {1}, {3});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Values(3), std::vector<double>{6.0});
}

// Releasing the end of a long recorded chain frees every entry of it: that
// once recursed one stack frame per op and overflowed the stack (a client's
// chain of 40,000 AddV2, each intermediate released, crashed the server).
TEST_F(TapeTest, ReleasingALongChainFreesItWithoutRecursion) {
  constexpr int64_t kOps = 300000;
  Put(1, {1.0});
  Put(2, {1.0});
  ASSERT_TRUE(session_.PushTape(++seq_, 10, false, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 10, {1}).ok());
  int64_t last = 1;
  for (int64_t i = 0; i < kOps; ++i) {
    const int64_t next = 100 + i;
    Exec("AddV2", {last, 2}, {next});
    if (last != 1) ASSERT_TRUE(session_.ReleaseTensors(++seq_, {last}).ok());
    last = next;
  }
  EXPECT_EQ(session_.Stats().tape_entries, kOps);
  ASSERT_TRUE(session_.ReleaseTensors(++seq_, {last}).ok());
  EXPECT_EQ(session_.Stats().tape_entries, 0);
}

TEST_F(TapeTest, FanInAggregates) {
  // y = x*x + x + exp(x)  ->  dy/dx = 2x + 1 + exp(x)
  Put(1, {0.5, -1.0});
  ASSERT_TRUE(session_.PushTape(++seq_, 10, false, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 10, {1}).ok());
  Exec("Mul", {1, 1}, {2});
  Exec("AddV2", {2, 1}, {3});
  Exec("Exp", {1}, {4});
  Exec("AddV2", {3, 4}, {5});
  ASSERT_TRUE(Grad(10, {5}, {1}, {6}).ok());
  std::vector<double> g = Values(6);
  EXPECT_NEAR(g[0], 2 * 0.5 + 1 + std::exp(0.5), 1e-12);
  EXPECT_NEAR(g[1], 2 * -1.0 + 1 + std::exp(-1.0), 1e-12);
}

TEST_F(TapeTest, NestedTapesGiveSecondDerivatives) {
  // y = x^3: inner tape gives 3x^2, the outer tape differentiates that: 6x.
  Put(1, {2.0});
  ASSERT_TRUE(session_.PushTape(++seq_, 1, false, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 1, {1}).ok());
  ASSERT_TRUE(session_.PushTape(++seq_, 2, false, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 2, {1}).ok());
  Exec("Mul", {1, 1}, {2});
  Exec("Mul", {2, 1}, {3});
  ASSERT_TRUE(session_.PopTape(++seq_, 2).ok());
  ASSERT_TRUE(Grad(2, {3}, {1}, {4}).ok());  // recorded on tape 1
  ASSERT_TRUE(session_.PopTape(++seq_, 1).ok());
  EXPECT_EQ(Values(4), std::vector<double>{12.0});
  ASSERT_TRUE(Grad(1, {4}, {1}, {5}).ok());
  EXPECT_EQ(Values(5), std::vector<double>{12.0});  // 6x at x = 2
}

TEST_F(TapeTest, PersistentTapeComputesTwice) {
  Put(1, {1.5});
  ASSERT_TRUE(session_.PushTape(++seq_, 10, /*persistent=*/true, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 10, {1}).ok());
  Exec("Square", {1}, {2});
  Exec("Exp", {1}, {3});
  ASSERT_TRUE(Grad(10, {2}, {1}, {4}).ok());
  ASSERT_TRUE(Grad(10, {3}, {1}, {5}).ok());
  EXPECT_EQ(Values(4), std::vector<double>{3.0});
  EXPECT_NEAR(Values(5)[0], std::exp(1.5), 1e-12);
}

TEST_F(TapeTest, PersistentTapeRecordsItsOwnGradientWhilePushed) {
  // y = x^3 on a persistent tape; dy = 3x^2 taken while it records is
  // recorded on it (TensorFlow), so the tape differentiates it again: 6x.
  Put(1, {2.0});
  ASSERT_TRUE(session_.PushTape(++seq_, 10, /*persistent=*/true, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 10, {1}).ok());
  Exec("Mul", {1, 1}, {2});
  Exec("Mul", {2, 1}, {3});
  ASSERT_TRUE(Grad(10, {3}, {1}, {4}).ok());
  ASSERT_TRUE(session_.PopTape(++seq_, 10).ok());
  EXPECT_EQ(Values(4), std::vector<double>{12.0});
  ASSERT_TRUE(Grad(10, {4}, {1}, {5}).ok());
  EXPECT_EQ(Values(5), std::vector<double>{12.0});  // 6x at x = 2
  // Popped, it records nothing: a gradient taken now is a constant to it.
  ASSERT_TRUE(Grad(10, {3}, {1}, {6}).ok());
  auto none = Grad(10, {6}, {1}, {7});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE((*none)[0].valid());
}

TEST_F(TapeTest, PoppedTapePushedAgainRecordsAgain) {
  Put(1, {3.0});
  ASSERT_TRUE(session_.PushTape(++seq_, 10, true, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 10, {1}).ok());
  Exec("Mul", {1, 1}, {2});  // recorded
  ASSERT_TRUE(session_.PopTape(++seq_, 10).ok());
  Exec("Exp", {1}, {3});  // not recorded
  ASSERT_TRUE(session_.PushTape(++seq_, 10, true, false).ok());
  Exec("Sin", {1}, {4});  // recorded again, the watch kept
  auto g = Grad(10, {2, 3, 4}, {1}, {5});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_NEAR(Values(5)[0], 6.0 + std::cos(3.0), 1e-12);  // no Exp term
  // Pushed twice, or again with other flags: ALREADY_EXISTS.
  EXPECT_EQ(session_.PushTape(++seq_, 10, true, false).code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(session_.PopTape(++seq_, 10).ok());
  EXPECT_EQ(session_.PushTape(++seq_, 10, false, false).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_F(TapeTest, NonPersistentTapeRefusesASecondGradient) {
  Put(1, {1.5});
  ASSERT_TRUE(session_.PushTape(++seq_, 10, false, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 10, {1}).ok());
  Exec("Square", {1}, {2});
  ASSERT_TRUE(Grad(10, {2}, {1}, {3}).ok());
  auto again = Grad(10, {2}, {1}, {4});
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(again.status().message(), "persistent=true"))
      << again.status();
  // The first result is still there; the failed one is poisoned.
  EXPECT_EQ(Values(3), std::vector<double>{3.0});
  EXPECT_EQ(session_.FetchTensor(++seq_, 4).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(TapeTest, UnconnectedNoneVersusZero) {
  Put(1, {1.0, 2.0});
  Put(2, {3.0, 4.0});
  ASSERT_TRUE(session_.PushTape(++seq_, 10, true, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 10, {1, 2}).ok());
  Exec("Exp", {1}, {3});
  auto none = Grad(10, {3}, {1, 2}, {4, 5}, Unconnected::kNone);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE((*none)[0].valid());
  EXPECT_FALSE((*none)[1].valid());
  absl::StatusOr<Tensor> fetched = session_.FetchTensor(++seq_, 5);
  EXPECT_EQ(fetched.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(fetched.status().message(), "None gradient"));
  auto zero = Grad(10, {3}, {1, 2}, {6, 7}, Unconnected::kZero);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(Values(7), (std::vector<double>{0.0, 0.0}));
}

TEST_F(TapeTest, OutputGradientsWeightTheTargets) {
  // d/dx <v, x*x> = 2 x v
  Put(1, {1.0, 2.0});
  Put(2, {10.0, -1.0});
  ASSERT_TRUE(session_.PushTape(++seq_, 10, false, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 10, {1}).ok());
  Exec("Mul", {1, 1}, {3});
  ASSERT_TRUE(Grad(10, {3}, {1}, {4}, Unconnected::kNone, {2}).ok());
  EXPECT_EQ(Values(4), (std::vector<double>{20.0, -4.0}));
}

TEST_F(TapeTest, StopRecordingHidesOps) {
  Put(1, {2.0});
  ASSERT_TRUE(session_.PushTape(++seq_, 10, true, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 10, {1}).ok());
  ASSERT_TRUE(session_.StopRecording(++seq_).ok());
  Exec("Square", {1}, {2});
  ASSERT_TRUE(session_.StartRecording(++seq_).ok());
  Exec("Square", {1}, {3});
  EXPECT_EQ(session_.Stats().tape_entries, 1);
  auto g = Grad(10, {2, 3}, {1}, {4});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(Values(4), std::vector<double>{4.0});  // only the recorded one
}

TEST_F(TapeTest, IntegerTensorsAreNotRecorded) {
  Put(1, {2.7});
  ASSERT_TRUE(session_.PushTape(++seq_, 10, true, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 10, {1}).ok());
  Exec("Cast", {1}, {2}, {{"DstT", DType::kInt32}});
  const int64_t after_cast = session_.Stats().tape_entries;
  Exec("Mul", {2, 2}, {3});
  Exec("Cast", {3}, {4}, {{"DstT", DType::kFloat64}});
  EXPECT_EQ(session_.Stats().tape_entries, after_cast);
  auto g = Grad(10, {4}, {1}, {5});
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE((*g)[0].valid());
  // Watching an integer tensor is refused outright.
  absl::Status w = session_.Watch(++seq_, 10, {2});
  EXPECT_EQ(w.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(w.message(), "tensor id 2")) << w;
}

TEST_F(TapeTest, ReleasedTensorsLeaveTheTapeAndMemoryReturns) {
  Put(1, std::vector<double>(1000, 0.5));
  const int64_t baseline = session_.Stats().bytes_in_use;
  ASSERT_TRUE(session_.PushTape(++seq_, 10, true, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 10, {1}).ok());
  const int64_t with_tape = session_.Stats().bytes_in_use;
  EXPECT_GE(with_tape, baseline + Tape::kTapeBytes);
  Exec("Exp", {1}, {2});     // keeps its output
  Exec("Tanh", {2}, {3});    // keeps its output
  Exec("Mul", {3, 1}, {4});  // keeps both inputs
  SessionStats mid = session_.Stats();
  EXPECT_EQ(mid.tape_entries, 3);
  // Three tensors and their ids, and the tape's first chunk of entries.
  const int64_t tensors = 3 * (ChargedBytes(8000) + Session::kSlotBytes);
  EXPECT_GT(mid.bytes_in_use, with_tape + tensors);
  EXPECT_LT(mid.bytes_in_use, with_tape + tensors + (64 << 10));
  // Releasing the intermediates alone frees nothing the tape still needs.
  ASSERT_TRUE(session_.ReleaseTensors(++seq_, {2, 3}).ok());
  EXPECT_EQ(session_.Stats().tape_entries, 3);
  ASSERT_TRUE(session_.ReleaseTensors(++seq_, {4}).ok());
  SessionStats end = session_.Stats();
  EXPECT_EQ(end.tape_entries, 0);
  EXPECT_EQ(end.tape_saved_bytes, 0);
  EXPECT_EQ(end.bytes_in_use, mid.bytes_in_use - tensors);
  EXPECT_EQ(end.live_tensors, 1);
  ASSERT_TRUE(session_.DeleteTape(++seq_, 10).ok());
  EXPECT_EQ(session_.Stats().bytes_in_use, baseline);
}

TEST_F(TapeTest, NonPersistentTapeFreesItsStateAfterTheGradient) {
  Put(1, std::vector<double>(1000, 0.5));
  ASSERT_TRUE(session_.PushTape(++seq_, 10, false, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 10, {1}).ok());
  Exec("Exp", {1}, {2});
  Exec("Sum", {2}, {3});
  ASSERT_TRUE(session_.PopTape(++seq_, 10).ok());
  EXPECT_GT(session_.Stats().tape_saved_bytes, 0);
  ASSERT_TRUE(Grad(10, {3}, {1}, {4}).ok());
  EXPECT_EQ(session_.Stats().tape_entries, 0);
  EXPECT_EQ(session_.Stats().tape_saved_bytes, 0);
}

TEST_F(TapeTest, HigherOrderIntermediatesAreReleasedWithTheirResult) {
  Put(1, std::vector<double>(100, 0.3));
  ASSERT_TRUE(session_.PushTape(++seq_, 1, false, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 1, {1}).ok());
  ASSERT_TRUE(session_.PushTape(++seq_, 2, false, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 2, {1}).ok());
  Exec("Tanh", {1}, {2});
  Exec("Sum", {2}, {3});
  ASSERT_TRUE(session_.PopTape(++seq_, 2).ok());
  ASSERT_TRUE(Grad(2, {3}, {1}, {4}).ok());
  ASSERT_TRUE(session_.DeleteTape(++seq_, 2).ok());
  EXPECT_GT(session_.Stats().tape_entries, 0);
  ASSERT_TRUE(session_.ReleaseTensors(++seq_, {2, 3, 4}).ok());
  EXPECT_EQ(session_.Stats().tape_entries, 0);
}

// ElisionSavedBytesTotal counts, per recording, the bytes of the inputs and
// outputs the op's backward does not read, and nothing for an op no tape
// records.
TEST_F(TapeTest, ElisionSavedBytesCountsWhatRecordingLeftOut) {
  Put(1, {1.0, 2.0, 3.0});  // float64[3]: 24 bytes
  Put(2, {4.0, 5.0, 6.0});
  const int64_t before = ElisionSavedBytesTotal();
  Exec("Mul", {1, 2}, {3});  // no tape: nothing recorded, nothing counted
  EXPECT_EQ(ElisionSavedBytesTotal(), before);
  ASSERT_TRUE(session_.PushTape(++seq_, 10, false, false).ok());
  ASSERT_TRUE(session_.Watch(++seq_, 10, {1}).ok());
  Exec("Mul", {1, 2}, {4});  // keeps both inputs, not its output
  EXPECT_EQ(ElisionSavedBytesTotal() - before, 24);
  Exec("Sub", {4, 2}, {5});  // keeps nothing: two inputs and the output
  EXPECT_EQ(ElisionSavedBytesTotal() - before, 24 + 3 * 24);
}

}  // namespace
}  // namespace gradtape
