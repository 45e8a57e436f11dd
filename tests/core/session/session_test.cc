// Session command semantics: atomic failures, poisoning, id checks, limits.
#include "core/session/session.h"

#include "absl/strings/match.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"

namespace gradtape {
namespace {

using ::absl::StatusCode;

Tensor Matrix(int64_t rows, int64_t cols) {
  return Tensor::Filled(DType::kFloat64, {rows, cols}, 1.0).value();
}

TEST(SessionTest, ShapeErrorPoisonsOutputsAndSessionKeepsWorking) {
  Session s(DefaultRegistry(), {});
  ASSERT_TRUE(s.PutTensor(1, 1, Matrix(2, 3)).ok());
  ASSERT_TRUE(s.PutTensor(2, 2, Matrix(4, 5)).ok());
  absl::Status bad = s.ExecuteOp(3, "MatMul", {1, 2}, {3}, {});
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  for (const char* part :
       {"MatMul", "command 3", "[2,3]", "[4,5]", "ids [1,2]"}) {
    EXPECT_TRUE(absl::StrContains(bad.message(), part)) << part << ": " << bad;
  }
  absl::Status later = s.ExecuteOp(4, "Exp", {3}, {4}, {});
  EXPECT_EQ(later.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(later.message(), "tensor id 3 is poisoned"));
  EXPECT_TRUE(absl::StrContains(later.message(), "command 3")) << later;
  EXPECT_TRUE(absl::StrContains(later.message(), "command 4")) << later;
  // Poison propagates: 4 is poisoned too.
  EXPECT_EQ(s.FetchTensor(5, 4).status().code(),
            StatusCode::kFailedPrecondition);
  // Independent work still succeeds, and a poisoned id can be reused.
  ASSERT_TRUE(
      s.ExecuteOp(6, "MatMul", {1, 1}, {3}, {{"transpose_b", true}}).ok());
  absl::StatusOr<Tensor> t = s.FetchTensor(7, 3);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ElementAsDouble(0), 3.0);
  EXPECT_EQ(s.last_seq(), 7);
}

TEST(SessionTest, PoisonRefusedPoisonsOnlyFreeIdsAndKeepsLastSeq) {
  // A command refused as out of order (server/result_cache.h) was never
  // processed: its free output ids quote the refusal, a live one keeps its
  // tensor, and the session's last seq does not move back.
  Session s(DefaultRegistry(), {});
  ASSERT_TRUE(s.PutTensor(5, 1, Matrix(2, 2)).ok());
  const absl::Status refused = absl::FailedPreconditionError(
      "Exp (command 3): seq 3 is out of order (last applied 5); not applied");
  s.PoisonRefused(3, {1, 2}, refused);
  EXPECT_EQ(s.last_seq(), 5);
  absl::StatusOr<Tensor> live = s.FetchTensor(6, 1);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_EQ(live->ElementAsDouble(0), 1.0);
  absl::Status reader = s.ExecuteOp(7, "Exp", {2}, {3}, {});
  EXPECT_EQ(reader.code(), StatusCode::kFailedPrecondition);
  for (const char* part : {"tensor id 2 is poisoned", "command 3",
                           "seq 3 is out of order (last applied 5)"}) {
    EXPECT_TRUE(absl::StrContains(reader.message(), part))
        << part << ": " << reader;
  }
  EXPECT_EQ(s.last_seq(), 7);
}

TEST(SessionTest, UnknownOpUnknownIdDuplicateOutput) {
  Session s(DefaultRegistry(), {});
  ASSERT_TRUE(s.PutTensor(1, 1, Matrix(2, 2)).ok());
  absl::Status op = s.ExecuteOp(2, "MatMull", {1, 1}, {2}, {});
  EXPECT_EQ(op.code(), StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(op.message(), "'MatMull'")) << op;
  absl::Status id = s.ExecuteOp(3, "Exp", {99}, {3}, {});
  EXPECT_EQ(id.code(), StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(id.message(), "unknown tensor id 99")) << id;
  EXPECT_TRUE(absl::StrContains(id.message(), "Exp (command 3)")) << id;
  absl::Status dup = s.ExecuteOp(4, "Exp", {1}, {1}, {});
  EXPECT_EQ(dup.code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(absl::StrContains(dup.message(), "output id 1")) << dup;
  // Nothing was half-applied: id 1 still holds its tensor.
  absl::StatusOr<Tensor> one = s.FetchTensor(5, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->shape(), (Shape{2, 2}));
  EXPECT_EQ(s.ExecuteOp(6, "Exp", {1}, {7, 7}, {}).code(),
            StatusCode::kInvalidArgument);  // Exp has one output
  EXPECT_EQ(s.ExecuteOp(7, "Exp", {1}, {0}, {}).code(),
            StatusCode::kInvalidArgument);  // id 0 is reserved
}

TEST(SessionTest, PutChecksBytes) {
  Session s(DefaultRegistry(), {});
  absl::Status bad = s.PutTensor(1, 5, DType::kFloat32, {2, 2}, "abc");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.message(), "16 bytes")) << bad;
  EXPECT_TRUE(absl::StrContains(bad.message(), "id 5")) << bad;
}

TEST(SessionTest, ReleaseIsAllOrNothing) {
  Session s(DefaultRegistry(), {});
  ASSERT_TRUE(s.PutTensor(1, 1, Matrix(1, 1)).ok());
  absl::Status r = s.ReleaseTensors(2, {1, 42});
  EXPECT_EQ(r.code(), StatusCode::kNotFound);
  EXPECT_TRUE(s.FetchTensor(3, 1).ok());
  EXPECT_TRUE(s.ReleaseTensors(4, {1}).ok());
  EXPECT_EQ(s.FetchTensor(5, 1).status().code(), StatusCode::kNotFound);
}

TEST(SessionTest, MemoryLimitRefusesAndRecovers) {
  // Two 5000-byte tensors and their ids' slots: at the limit.
  const int64_t limit = 2 * (ChargedBytes(5000) + Session::kSlotBytes);
  Session s(DefaultRegistry(), {.memory_limit_bytes = limit});
  ASSERT_TRUE(s.PutTensor(1, 1, Matrix(25, 25)).ok());  // 5000 bytes
  absl::Status big = s.ExecuteOp(2, "MatMul", {1, 1}, {2}, {});
  ASSERT_TRUE(big.ok());
  const int64_t live = LiveTensorBytes();
  absl::Status over = s.ExecuteOp(3, "Exp", {1}, {3}, {});
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.message(), absl::StrCat("limit ", limit)))
      << over;
  // Refused before anything was allocated.
  EXPECT_EQ(LiveTensorBytes(), live);
  // The poisoned id 3 and its reason count too, until released.
  EXPECT_GT(s.Stats().bytes_in_use, limit);
  ASSERT_TRUE(s.ReleaseTensors(4, {3}).ok());
  EXPECT_EQ(s.Stats().bytes_in_use, limit);
  ASSERT_TRUE(s.ReleaseTensors(4, {2}).ok());
  EXPECT_TRUE(s.ExecuteOp(5, "Exp", {1}, {3}, {}).ok());
  // Puts count too, and a refused put leaves nothing behind.
  absl::Status put = s.PutTensor(6, 9, Matrix(10, 10));
  EXPECT_EQ(put.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(put.message(), "PutTensor (command 6, id 9)"))
      << put;
  EXPECT_EQ(s.FetchTensor(7, 9).status().code(),
            StatusCode::kFailedPrecondition);
  // Only the poisoned id's slot and reason are left of it.
  ASSERT_TRUE(s.ReleaseTensors(8, {9}).ok());
  EXPECT_EQ(s.Stats().bytes_in_use, limit);
}

TEST(SessionTest, SizesFromAttrsAreRefusedNotAllocated) {
  Session s(DefaultRegistry(), {.memory_limit_bytes = 1 << 20});
  ASSERT_TRUE(
      s.PutTensor(1, 1, Tensor::Filled(DType::kFloat32, {1}, 1).value()).ok());
  // 2^61 elements: past what any machine allocates.
  absl::Status huge = s.ExecuteOp(
      2, "BroadcastTo", {1}, {2},
      {{"shape", std::vector<int64_t>{int64_t{1} << 31, int64_t{1} << 30}}});
  EXPECT_EQ(huge.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(huge.message(), "BroadcastTo")) << huge;
  // Over the session's limit: refused before allocating.
  absl::Status over =
      s.ExecuteOp(3, "OneHot", {1}, {3},
                  {{"depth", int64_t{1} << 20}});  // needs 4 MiB, limit 1 MiB
  EXPECT_EQ(over.code(), StatusCode::kInvalidArgument);  // indices: float
  ASSERT_TRUE(s.PutTensor(4, 4, Tensor::FromVector<int32_t>({1}, {0})).ok());
  over = s.ExecuteOp(5, "OneHot", {4}, {5}, {{"depth", int64_t{1} << 20}});
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(over.message(), "memory limit")) << over;
  EXPECT_LT(s.Stats().bytes_in_use, 1 << 20);
  EXPECT_TRUE(s.ExecuteOp(6, "OneHot", {4}, {6}, {{"depth", int64_t{4}}}).ok());
}

TEST(SessionTest, TapeCommandErrors) {
  Session s(DefaultRegistry(), {});
  EXPECT_EQ(s.PopTape(1, 7).code(), StatusCode::kNotFound);
  ASSERT_TRUE(s.PushTape(2, 7, false, false).ok());
  EXPECT_EQ(s.PushTape(3, 7, false, false).code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(s.PopTape(4, 7).ok());
  EXPECT_EQ(s.PopTape(5, 7).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.Watch(6, 7, {1}).code(), StatusCode::kNotFound);
  ASSERT_TRUE(s.DeleteTape(7, 7).ok());
  GradientRequest r{
      .tape = 7, .targets = {1}, .sources = {1}, .result_ids = {2}};
  absl::StatusOr<std::vector<Tensor>> g = s.Gradient(8, r);
  EXPECT_EQ(g.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(g.status().message(), "tape 7")) << g.status();
}

// GradientRequest::before_compute sees each gradient's dtype and shape once
// every check passed; its error fails the command before anything is
// computed: the result ids are poisoned with it and the tape is not used up.
TEST(SessionTest, GradientBeforeComputeSeesTheGradientsAndMayRefuse) {
  Session s(DefaultRegistry(), {});
  ASSERT_TRUE(s.PutTensor(1, 1, Matrix(2, 3)).ok());
  ASSERT_TRUE(s.PushTape(2, 7, /*persistent=*/false, false).ok());
  ASSERT_TRUE(s.Watch(3, 7, {1}).ok());
  ASSERT_TRUE(s.ExecuteOp(4, "Mul", {1, 1}, {2}, {}).ok());
  ASSERT_TRUE(s.PopTape(5, 7).ok());
  std::vector<ValueSpec> seen;
  GradientRequest r{
      .tape = 7, .targets = {2}, .sources = {1}, .result_ids = {3}};
  r.before_compute = [&](absl::Span<const ValueSpec> gradients) {
    seen.assign(gradients.begin(), gradients.end());
    return absl::ResourceExhaustedError("no room");
  };
  absl::StatusOr<std::vector<Tensor>> g = s.Gradient(6, r);
  EXPECT_EQ(g.status().code(), StatusCode::kResourceExhausted);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].dtype, DType::kFloat64);
  EXPECT_EQ(seen[0].shape, (Shape{2, 3}));
  absl::StatusOr<Tensor> poisoned = s.FetchTensor(7, 3);
  EXPECT_EQ(poisoned.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(poisoned.status().message(), "no room"))
      << poisoned.status();
  // Not called when a check fails first (result id 1 holds a tensor).
  seen.clear();
  r.result_ids = {1};
  EXPECT_EQ(s.Gradient(8, r).status().code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(seen.empty());
  // The tape was not used: the gradient runs.
  r.result_ids = {4};
  r.before_compute = nullptr;
  g = s.Gradient(9, r);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)[0].shape(), (Shape{2, 3}));
}

}  // namespace
}  // namespace gradtape
