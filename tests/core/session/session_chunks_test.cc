// Chunked puts and fetches (core/session/session_chunks.cc): the whole
// tensor is charged before any data is stored, chunks arrive in order, a
// pending id cannot be read or overwritten, and release or the session's
// end frees a pending put with its charge.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "core/session/session.h"
#include "gtest/gtest.h"

namespace gradtape {
namespace {

using ::absl::StatusCode;

std::string DoubleBytes(const std::vector<double>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(double));
}

std::vector<double> Iota(int n) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = 0.5 + i;
  return v;
}

// `status` has `code` and its message contains `text`.
::testing::AssertionResult HasStatus(const absl::Status& status,
                                     StatusCode code, absl::string_view text) {
  if (status.code() == code && absl::StrContains(status.message(), text)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << status << " is not " << absl::StatusCodeToString(code)
         << " containing \"" << text << "\"";
}
#define EXPECT_STATUS(status, code, text) \
  EXPECT_TRUE(HasStatus((status), (code), (text)))

// The rule the issue asks for: Begin charges the whole tensor (refusing it
// past the limit) before a single data byte is stored.
TEST(SessionChunksTest, BeginChargesTheWholeTensorBeforeAnyData) {
  SessionOptions options;
  options.memory_limit_bytes = 8 << 20;
  Session s(DefaultRegistry(), options);
  const int64_t before = s.Stats().bytes_in_use;
  ResetPeakTensorBytes();
  const int64_t live_before = LiveTensorBytes();

  // 16 MiB of float64: over the limit. Nothing is allocated or stored.
  absl::Status over = s.PutTensorBegin(1, 7, DType::kFloat64, {2 << 20});
  EXPECT_STATUS(over, StatusCode::kResourceExhausted,
                "PutTensorBegin (command 1, id 7)");
  EXPECT_TRUE(absl::StrContains(over.message(), "memory limit exceeded"))
      << over;
  EXPECT_EQ(PeakTensorBytes(), live_before);
  EXPECT_EQ(s.Stats().live_tensors, 0);
  // The id is poisoned with the refusal: a chunk finds no pending put.
  EXPECT_EQ(s.PutTensorChunk(2, 7, 0, "12345678").code(),
            StatusCode::kFailedPrecondition);
  EXPECT_STATUS(s.FetchTensor(3, 7).status(), StatusCode::kFailedPrecondition,
                "memory limit exceeded");

  // 4 MiB fits: charged in full at Begin, before any chunk.
  ASSERT_TRUE(s.PutTensorBegin(4, 8, DType::kFloat64, {512 << 10}).ok());
  const int64_t charged = s.Stats().bytes_in_use - before;
  EXPECT_GE(charged, int64_t{4} << 20);
  EXPECT_EQ(s.Stats().live_tensors, 0);  // pending, not live
  // Another 4 MiB no longer fits beside it.
  EXPECT_EQ(s.PutTensorBegin(5, 9, DType::kFloat64, {512 << 10}).code(),
            StatusCode::kResourceExhausted);
  // Chunks add no charge.
  const int64_t in_use = s.Stats().bytes_in_use;
  const std::string chunk(1 << 20, '\0');
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(s.PutTensorChunk(6 + i, 8, int64_t{i} << 20, chunk).ok()) << i;
  }
  EXPECT_EQ(s.Stats().bytes_in_use, in_use);
  EXPECT_EQ(s.Stats().live_tensors, 1);
}

TEST(SessionChunksTest, ChunksInOrderMakeTheTensorLive) {
  Session s(DefaultRegistry(), {});
  const std::vector<double> values = Iota(10);  // 80 bytes
  const std::string bytes = DoubleBytes(values);
  ASSERT_TRUE(s.PutTensorBegin(1, 1, DType::kFloat64, {2, 5}).ok());
  ASSERT_TRUE(s.PutTensorChunk(2, 1, 0, bytes.substr(0, 24)).ok());
  // Reading a pending id fails, naming the progress.
  EXPECT_STATUS(s.FetchTensor(3, 1).status(), StatusCode::kFailedPrecondition,
                "FetchTensor (command 3): tensor 1 is being put: 24 of 80 "
                "bytes received");
  // So does using it as an op input, and the op's output is poisoned.
  EXPECT_STATUS(s.ExecuteOp(4, "Neg", {1}, {2}, {}),
                StatusCode::kFailedPrecondition,
                "tensor 1 is being put: 24 of 80 bytes received");
  // A wrong offset changes nothing.
  EXPECT_STATUS(s.PutTensorChunk(5, 1, 16, bytes.substr(16, 8)),
                StatusCode::kInvalidArgument,
                "PutTensorChunk (command 5): chunk at offset 16, but tensor 1 "
                "is being put: 24 of 80 bytes received: the next chunk starts "
                "at offset 24");
  EXPECT_STATUS(s.PutTensorChunk(6, 1, -8, "x"), StatusCode::kInvalidArgument,
                "chunk at offset -8");
  // A chunk past the end changes nothing.
  EXPECT_STATUS(s.PutTensorChunk(7, 1, 24, bytes.substr(24) + "12345678"),
                StatusCode::kInvalidArgument,
                "chunk of 64 bytes at offset 24 ends past the end of "
                "float64[2,5] at id 1 (80 bytes)");
  ASSERT_TRUE(s.PutTensorChunk(8, 1, 24, bytes.substr(24, 40)).ok());
  ASSERT_TRUE(s.PutTensorChunk(9, 1, 64, bytes.substr(64)).ok());
  absl::StatusOr<Tensor> t = s.FetchTensor(10, 1);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape(), (Shape{2, 5}));
  EXPECT_EQ(0, std::memcmp(t->raw_data(), bytes.data(), bytes.size()));
  // It is an ordinary tensor now: ops read it, chunks are refused.
  ASSERT_TRUE(s.ExecuteOp(11, "Neg", {1}, {3}, {}).ok());
  EXPECT_STATUS(s.PutTensorChunk(12, 1, 80, ""),
                StatusCode::kFailedPrecondition,
                "no put is pending at id 1 (it holds float64[2,5]");
}

TEST(SessionChunksTest, PendingIdsAreNeitherFreeNorReadable) {
  Session s(DefaultRegistry(), {});
  ASSERT_TRUE(s.PutTensorBegin(1, 1, DType::kFloat32, {4}).ok());
  // A second Begin, a put or an op output at the id: ALREADY_EXISTS, and
  // the pending put survives the failed command.
  EXPECT_STATUS(s.PutTensorBegin(2, 1, DType::kFloat32, {4}),
                StatusCode::kAlreadyExists,
                "output id 1: tensor 1 is being put: 0 of 16 bytes received");
  EXPECT_EQ(s.PutTensor(3, 1, DType::kFloat32, {1}, "abcd").code(),
            StatusCode::kAlreadyExists);
  ASSERT_TRUE(s.PutTensor(4, 2, DType::kFloat32, {4}, std::string(16, 0)).ok());
  EXPECT_EQ(s.ExecuteOp(5, "Neg", {2}, {1}, {}).code(),
            StatusCode::kAlreadyExists);
  ASSERT_TRUE(s.PutTensorChunk(6, 1, 0, std::string(16, 1)).ok());
  EXPECT_TRUE(s.FetchTensor(7, 1).ok());
  // A chunk for an id that never had a put.
  EXPECT_STATUS(s.PutTensorChunk(8, 42, 0, "abcd"), StatusCode::kNotFound,
                "no put is pending at id 42");
}

TEST(SessionChunksTest, BeginRefusesBadDTypesAndShapes) {
  Session s(DefaultRegistry(), {});
  EXPECT_STATUS(s.PutTensorBegin(1, 1, DType::kInvalid, {2}),
                StatusCode::kInvalidArgument, "dtype is not set");
  EXPECT_STATUS(s.PutTensorBegin(2, 2, DType::kResource, {}),
                StatusCode::kInvalidArgument, "resource tensors");
  EXPECT_STATUS(s.PutTensorBegin(3, 3, DType::kFloat32, {-1, 4}),
                StatusCode::kInvalidArgument,
                "PutTensorBegin (command 3, id 3)");
  // 2^62 * 2^62 elements: refused by the size rule, never multiplied out.
  const int64_t huge = int64_t{1} << 62;
  EXPECT_EQ(s.PutTensorBegin(4, 4, DType::kFloat32, {huge, huge}).code(),
            StatusCode::kResourceExhausted);
  EXPECT_STATUS(s.PutTensorBegin(5, 0, DType::kFloat32, {1}),
                StatusCode::kInvalidArgument, "output id 0 is reserved");
  EXPECT_EQ(s.Stats().live_tensors, 0);
  EXPECT_EQ(s.Stats().poisoned_ids, 4);  // ids 1 to 4
}

TEST(SessionChunksTest, ZeroByteTensorIsLiveAtBegin) {
  Session s(DefaultRegistry(), {});
  ASSERT_TRUE(s.PutTensorBegin(1, 1, DType::kFloat64, {3, 0}).ok());
  absl::StatusOr<Tensor> t = s.FetchTensor(2, 1);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape(), (Shape{3, 0}));
}

TEST(SessionChunksTest, BoolChunksStoreZeroOrOne) {
  Session s(DefaultRegistry(), {});
  ASSERT_TRUE(s.PutTensorBegin(1, 1, DType::kBool, {3}).ok());
  ASSERT_TRUE(s.PutTensorChunk(2, 1, 0, std::string("\x00\x07", 2)).ok());
  ASSERT_TRUE(s.PutTensorChunk(3, 1, 2, "\xff").ok());
  absl::StatusOr<Tensor> t = s.FetchTensor(4, 1);
  ASSERT_TRUE(t.ok());
  const bool* b = t->data<bool>();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b), 3),
            std::string("\x00\x01\x01", 3));
}

TEST(SessionChunksTest, ReleaseAndSessionEndFreeAPendingPut) {
  auto parent = std::make_shared<MemoryAccount>();
  const int64_t live_before = LiveTensorBytes();
  {
    SessionOptions options;
    options.parent_account = parent;  // a tenant's account sees the charge
    Session s(DefaultRegistry(), options);
    const int64_t base = parent->bytes();
    ASSERT_TRUE(s.PutTensorBegin(1, 1, DType::kFloat32, {1 << 20}).ok());
    EXPECT_GE(parent->bytes() - base, int64_t{4} << 20);
    ASSERT_TRUE(s.PutTensorChunk(2, 1, 0, std::string(1000, 'a')).ok());
    ASSERT_TRUE(s.ReleaseTensors(3, {1}).ok());
    EXPECT_EQ(parent->bytes(), base);
    EXPECT_EQ(LiveTensorBytes(), live_before);
    EXPECT_EQ(s.PutTensorChunk(4, 1, 1000, "b").code(), StatusCode::kNotFound);
    // Mid-put when the session ends (closed or reaped).
    ASSERT_TRUE(s.PutTensorBegin(5, 2, DType::kFloat32, {1 << 20}).ok());
    ASSERT_TRUE(s.PutTensorChunk(6, 2, 0, std::string(1000, 'a')).ok());
    EXPECT_GT(LiveTensorBytes(), live_before);
  }
  EXPECT_EQ(parent->bytes(), 0);
  EXPECT_EQ(LiveTensorBytes(), live_before);
}

TEST(SessionChunksTest, FetchChunkSlicesAndChecksItsRange) {
  Session s(DefaultRegistry(), {});
  ASSERT_TRUE(
      s.PutTensor(1, 1, DType::kFloat64, {10}, DoubleBytes(Iota(10))).ok());
  absl::StatusOr<Session::TensorSlice> first = s.FetchTensorChunk(2, 1, 0, 32);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->offset, 0);
  EXPECT_EQ(first->length, 32);
  absl::StatusOr<Session::TensorSlice> last = s.FetchTensorChunk(3, 1, 64, 32);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->length, 16);  // fewer at the end
  absl::StatusOr<Session::TensorSlice> end = s.FetchTensorChunk(4, 1, 80, 32);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->length, 0);
  EXPECT_STATUS(s.FetchTensorChunk(5, 1, 81, 32).status(),
                StatusCode::kOutOfRange,
                "FetchTensor (command 5): offset 81 is past the end of tensor "
                "id 1 (float64[10], 80 bytes)");
  EXPECT_STATUS(s.FetchTensorChunk(6, 1, -1, 32).status(),
                StatusCode::kInvalidArgument, "offset -1");
  EXPECT_STATUS(s.FetchTensorChunk(7, 1, 0, -5).status(),
                StatusCode::kInvalidArgument, "max_bytes -5");
  EXPECT_EQ(s.FetchTensorChunk(8, 99, 0, 8).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(s.last_seq(), 8);
}

}  // namespace
}  // namespace gradtape
