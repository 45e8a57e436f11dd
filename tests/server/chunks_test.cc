// Tensors larger than one message over the wire: PutTensorBegin /
// PutTensorChunk and FetchTensor with max_bytes, on Run and on Stream,
// every bad input failing alone, chunks measured exactly against the reply
// budget, and the memory limit charged before the first chunk.
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/ops/ops.h"
#include "core/session/session.h"
#include "core/tensor/tensor.h"
#include "gmock/gmock.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/batch.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"

namespace gradtape::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr int kInvalidArgument =
    static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT);
constexpr int kFailedPrecondition =
    static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION);
constexpr int kResourceExhausted =
    static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED);
constexpr int kAlreadyExists =
    static_cast<int>(grpc::StatusCode::ALREADY_EXISTS);
constexpr int kNotFound = static_cast<int>(grpc::StatusCode::NOT_FOUND);
constexpr int kOutOfRange = static_cast<int>(grpc::StatusCode::OUT_OF_RANGE);

// 40000 doubles (320000 bytes): five times a 64 KiB message.
constexpr int kCount = 40000;
constexpr int64_t kBytes = kCount * 8;
constexpr int64_t kChunk = 30000;  // not a divisor of kBytes

std::string PatternBytes() {
  std::vector<double> v(kCount);
  for (int i = 0; i < kCount; ++i) v[i] = 0.25 * i - 7;
  return std::string(reinterpret_cast<const char*>(v.data()), kBytes);
}

// A server whose messages are at most 64 KiB.
class ChunksTest : public ServerTest {
 protected:
  static constexpr int kMaxMessage = 64 << 10;

  void SetUp() override {
    ServerOptions options;
    options.max_message_bytes = kMaxMessage;
    StartServer(options);
  }

  // Begin at seq 1, then one chunk per batch (seqs 2, 3, ...): the batches.
  static std::vector<Batch> PutBatches(int64_t id, const std::string& bytes) {
    std::vector<Batch> batches;
    batches.push_back(std::move(Batch(1).PutBegin(
        1, id, v1::DTYPE_FLOAT64, {static_cast<int64_t>(bytes.size() / 8)})));
    int64_t seq = 1;
    for (int64_t at = 0; at < static_cast<int64_t>(bytes.size());
         at += kChunk) {
      ++seq;
      batches.push_back(std::move(
          Batch(seq).PutChunk(seq, id, at, bytes.substr(at, kChunk))));
    }
    return batches;
  }
};

TEST_F(ChunksTest, PutAndFetchLargerThanAMessageOverRun) {
  SessionCreds creds = NewSession();
  const std::string bytes = PatternBytes();
  int64_t seq = 0;
  for (const Batch& batch : PutBatches(5, bytes)) {
    v1::BatchReply reply = Run(creds, batch);
    EXPECT_THAT(reply.results(), SizeIs(0)) << reply.ShortDebugString();
    seq = reply.last_seq();
  }
  // Fetch: the first chunk tells the total; then the rest.
  std::string fetched;
  int64_t total = -1;
  while (total < 0 || static_cast<int64_t>(fetched.size()) < total) {
    v1::BatchReply reply =
        Run(creds, Batch().FetchChunk(
                       ++seq, 5, static_cast<int64_t>(fetched.size()), kChunk));
    ASSERT_THAT(reply.results(), SizeIs(1));
    ASSERT_TRUE(reply.results(0).has_chunk())
        << reply.results(0).ShortDebugString();
    const v1::TensorChunk& chunk = reply.results(0).chunk();
    EXPECT_EQ(chunk.dtype(), v1::DTYPE_FLOAT64);
    EXPECT_THAT(chunk.shape(), ::testing::ElementsAre(kCount));
    EXPECT_EQ(chunk.offset(), static_cast<int64_t>(fetched.size()));
    total = chunk.total_bytes();
    ASSERT_GT(chunk.data().size(), 0u);
    fetched += chunk.data();
    ASSERT_LT(seq, 100);  // bounded
  }
  EXPECT_EQ(total, kBytes);
  EXPECT_TRUE(fetched == bytes);
  // The whole tensor in one fetch does not fit a reply, and says so.
  v1::BatchReply whole = Run(creds, Batch().Fetch(++seq, 5));
  ASSERT_THAT(whole.results(), SizeIs(1));
  EXPECT_EQ(whole.results(0).error().code(), kResourceExhausted);
  EXPECT_THAT(whole.results(0).error().message(),
              HasSubstr("moves in chunks (chunked transfer: FetchTensor with "
                        "max_bytes)"));
}

TEST_F(ChunksTest, PutAndFetchLargerThanAMessageOverOneStream) {
  SessionCreds creds = NewSession();
  const std::string bytes = PatternBytes();
  std::vector<Batch> batches = PutBatches(5, bytes);
  int64_t seq = static_cast<int64_t>(batches.size());
  // Pipelined: every chunk fetch goes out before any reply is read.
  for (int64_t at = 0; at < kBytes; at += kChunk) {
    ++seq;
    batches.push_back(std::move(Batch(seq).FetchChunk(seq, 5, at, kChunk)));
  }
  grpc::Status status;
  std::vector<v1::BatchReply> replies = StreamBatches(creds, batches, &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::string fetched;
  for (const v1::BatchReply& reply : replies) {
    for (const v1::CommandResult& r : reply.results()) {
      ASSERT_TRUE(r.has_chunk()) << r.ShortDebugString();
      EXPECT_EQ(r.chunk().offset(), static_cast<int64_t>(fetched.size()));
      EXPECT_EQ(r.chunk().total_bytes(), kBytes);
      fetched += r.chunk().data();
    }
  }
  EXPECT_TRUE(fetched == bytes);
}

TEST_F(ChunksTest, BadChunkCommandsFailAloneAndChangeNothing) {
  SessionCreds creds = NewSession();
  Batch batch;
  const int64_t huge = int64_t{1} << 62;
  batch.PutBegin(1, 1, v1::DTYPE_FLOAT64, {4})
      .PutBegin(2, 1, v1::DTYPE_FLOAT64, {4})           // double Begin
      .PutBegin(3, 3, v1::DTYPE_FLOAT32, {huge, huge})  // overflows
      .PutBegin(4, 4, v1::DTYPE_FLOAT32, {-3})          // negative dim
      .PutBegin(5, 5, static_cast<v1::DType>(99), {1})  // unknown dtype
      .PutChunk(6, 1, 8, std::string(8, 'a'))           // wrong offset
      .PutChunk(7, 1, 0, std::string(40, 'a'))          // past the end
      .PutChunk(8, 42, 0, "abcd")                       // not pending
      .Exec(9, "Neg", {1}, {9})                         // pending input
      .Fetch(10, 1)                                     // pending read
      .PutChunk(11, 1, 0, std::string(16, '\0'))
      .PutChunk(12, 1, 16, std::string(16, '\0'))  // completes
      .FetchChunk(13, 1, -1, 8)                    // negative offset
      .FetchChunk(14, 1, 0, -8)                    // negative max
      .FetchChunk(15, 1, 33, 8)                    // past the end
      .FetchChunk(16, 1, 8, 0)                     // offset, no max
      .PutChunk(17, 1, 32, "x")                    // live now
      .FetchChunk(18, 1, 24, 100);                 // the last 8
  v1::BatchReply reply = Run(creds, batch);
  EXPECT_EQ(reply.last_seq(), 18);
  auto error = [&](int64_t seq) -> v1::Error {
    const v1::CommandResult* r = Find(reply, seq);
    return r != nullptr ? r->error() : v1::Error();
  };
  EXPECT_EQ(error(2).code(), kAlreadyExists);
  EXPECT_THAT(error(2).message(),
              HasSubstr("PutTensorBegin (command 2): output id 1: tensor 1 is "
                        "being put: 0 of 32 bytes received"));
  EXPECT_EQ(error(3).code(), kResourceExhausted);
  EXPECT_THAT(error(3).message(),
              HasSubstr("PutTensorBegin (command 3, id 3)"));
  EXPECT_EQ(error(4).code(), kInvalidArgument);
  EXPECT_EQ(error(5).code(), kInvalidArgument);
  EXPECT_THAT(error(5).message(), HasSubstr("unknown dtype 99"));
  EXPECT_EQ(error(6).code(), kInvalidArgument);
  EXPECT_THAT(error(6).message(),
              HasSubstr("PutTensorChunk (command 6): chunk at offset 8, but "
                        "tensor 1 is being put: 0 of 32 bytes received"));
  EXPECT_EQ(error(7).code(), kInvalidArgument);
  EXPECT_THAT(error(7).message(), HasSubstr("ends past the end"));
  EXPECT_EQ(error(8).code(), kNotFound);
  EXPECT_THAT(error(8).message(), HasSubstr("no put is pending at id 42"));
  EXPECT_EQ(error(9).code(), kFailedPrecondition);
  EXPECT_THAT(error(9).message(),
              HasSubstr("Neg (command 9): tensor 1 is being put: 0 of 32 "
                        "bytes received"));
  EXPECT_EQ(error(10).code(), kFailedPrecondition);
  EXPECT_EQ(error(13).code(), kInvalidArgument);
  EXPECT_THAT(error(13).message(), HasSubstr("offset -1"));
  EXPECT_EQ(error(14).code(), kInvalidArgument);
  EXPECT_THAT(error(14).message(), HasSubstr("max_bytes -8"));
  EXPECT_EQ(error(15).code(), kOutOfRange);
  EXPECT_THAT(error(15).message(),
              HasSubstr("offset 33 is past the end of tensor id 1"));
  EXPECT_EQ(error(16).code(), kInvalidArgument);
  EXPECT_EQ(error(17).code(), kFailedPrecondition);
  const v1::CommandResult* last = Find(reply, 18);
  ASSERT_NE(last, nullptr);
  ASSERT_TRUE(last->has_chunk()) << last->ShortDebugString();
  EXPECT_EQ(last->chunk().offset(), 24);
  EXPECT_EQ(last->chunk().data(), std::string(8, '\0'));
  // Only the failures above: 11, 12 had no result.
  for (const v1::CommandResult& r : reply.results()) {
    EXPECT_NE(r.seq(), 1);
    EXPECT_NE(r.seq(), 11);
    EXPECT_NE(r.seq(), 12);
  }
  // The session works; the refused ids are poisoned, the put is live.
  reply = Run(creds, Batch().Exec(20, "Neg", {1}, {2}).Fetch(21, 2).Stats(22));
  ASSERT_THAT(reply.results(), SizeIs(2)) << reply.ShortDebugString();
  EXPECT_TRUE(reply.results(0).has_tensor());
  EXPECT_EQ(reply.results(1).stats().live_tensors(), 2);
  // ids 3, 4, 5 and 9 (the output of the Neg that read the pending id)
  EXPECT_EQ(reply.results(1).stats().poisoned_ids(), 4);
}

// The chunk's size is predicted exactly: at every max_bytes around the
// point where the chunk stops fitting, it is either returned within the
// budget or refused before its bytes are copied; never replaced after the
// fact ("it was applied, but ..."), and the largest chunk that fits leaves
// less than a few bytes unused.
TEST(ChunkBudgetTest, ChunkFetchFitsTheReplyPrediction) {
  Session session(DefaultRegistry(), SessionOptions());
  const std::string bytes(20000, '\x01');
  ASSERT_TRUE(session.PutTensor(1, 1, DType::kInt32, {5000}, bytes).ok());
  constexpr int64_t kLimit = 8192;
  constexpr int64_t kResults = kLimit - 1024;  // less the stop reserve
  int64_t largest = 0;
  int64_t largest_bytes = 0;
  for (int64_t max_bytes = 7000; max_bytes < 7300; ++max_bytes) {
    v1::CommandBatch batch;
    v1::Command* fetch = batch.add_commands();
    fetch->set_seq(2);
    fetch->mutable_fetch()->set_id(1);
    fetch->mutable_fetch()->set_offset(100);
    fetch->mutable_fetch()->set_max_bytes(max_bytes);
    v1::BatchReply reply;
    ASSERT_TRUE(ApplyBatch(session, batch, kLimit, nullptr, &reply).ok());
    ASSERT_THAT(reply.results(), SizeIs(1));
    const v1::CommandResult& r = reply.results(0);
    if (r.has_chunk()) {
      EXPECT_EQ(static_cast<int64_t>(r.chunk().data().size()), max_bytes);
      const int64_t used = static_cast<int64_t>(reply.ByteSizeLong());
      EXPECT_LE(used, kResults + 16) << max_bytes;
      largest = max_bytes;
      largest_bytes = static_cast<int64_t>(r.ByteSizeLong()) + 3;
      continue;
    }
    EXPECT_EQ(r.error().code(), kResourceExhausted);
    EXPECT_THAT(r.error().message(),
                AllOf(HasSubstr("chunk of tensor id 1"),
                      HasSubstr("ask for a smaller max_bytes"),
                      ::testing::Not(HasSubstr("it was applied"))));
  }
  ASSERT_GT(largest, 7000);
  ASSERT_LT(largest, 7299);
  EXPECT_GE(largest_bytes, kResults - 2);
  EXPECT_LE(largest_bytes, kResults);
}

TEST_F(ChunksTest, PendingPutIsReleasedOrFreedWithItsSession) {
  SessionCreds creds = NewSession();
  const int64_t live_before = LiveTensorBytes();
  v1::BatchReply reply =
      Run(creds, Batch()
                     .PutBegin(1, 1, v1::DTYPE_FLOAT32, {4 << 20})
                     .PutChunk(2, 1, 0, std::string(1000, 'a'))
                     .Stats(3)
                     .Release(4, {1})
                     .Stats(5));
  ASSERT_THAT(reply.results(), SizeIs(2)) << reply.ShortDebugString();
  EXPECT_GE(reply.results(0).stats().bytes_in_use(), int64_t{16} << 20);
  EXPECT_LT(reply.results(1).stats().bytes_in_use(), int64_t{1} << 20);
  EXPECT_EQ(LiveTensorBytes(), live_before);
  // Mid-put when the session is closed.
  reply = Run(creds, Batch()
                         .PutBegin(6, 2, v1::DTYPE_FLOAT32, {4 << 20})
                         .PutChunk(7, 2, 0, std::string(1000, 'a')));
  EXPECT_THAT(reply.results(), SizeIs(0));
  EXPECT_GT(LiveTensorBytes(), live_before);
  grpc::ClientContext context;
  SetDeadline(&context);
  Authorize(creds, &context);
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(
      stub_->CloseSession(&context, v1::CloseSessionRequest(), &closed).ok());
  EXPECT_EQ(LiveTensorBytes(), live_before);
}

TEST_F(ChunksTest, PendingPutOfAReapedSessionIsFreed) {
  const int64_t live_before = LiveTensorBytes();
  SessionCreds creds = NewSession(/*keep_alive_seconds=*/1);
  v1::BatchReply reply =
      Run(creds, Batch()
                     .PutBegin(1, 1, v1::DTYPE_FLOAT32, {4 << 20})
                     .PutChunk(2, 1, 0, std::string(1000, 'a')));
  EXPECT_THAT(reply.results(), SizeIs(0));
  EXPECT_GT(LiveTensorBytes(), live_before);
  // The reaper wakes every second; wait (bounded) until it took the session.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (LiveTensorBytes() != live_before && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(LiveTensorBytes(), live_before);
  EXPECT_EQ(KeepAlive(creds).error_code(), grpc::StatusCode::NOT_FOUND);
}

// The session's memory limit refuses a Begin before any chunk is sent.
class ChunksMemoryTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.session_memory_limit_bytes = 1 << 20;
    StartServer(options);
  }
};

TEST_F(ChunksMemoryTest, BeginOverTheSessionLimitStoresNothing) {
  SessionCreds creds = NewSession();
  const int64_t live_before = LiveTensorBytes();
  ResetPeakTensorBytes();
  v1::BatchReply reply =
      Run(creds, Batch()
                     .PutBegin(1, 1, v1::DTYPE_FLOAT32, {512 << 10})  // 2 MiB
                     .PutChunk(2, 1, 0, std::string(4096, 'a'))
                     .Stats(3));
  ASSERT_THAT(reply.results(), SizeIs(3)) << reply.ShortDebugString();
  EXPECT_EQ(reply.results(0).error().code(), kResourceExhausted);
  EXPECT_THAT(reply.results(0).error().message(),
              AllOf(HasSubstr("PutTensorBegin (command 1, id 1)"),
                    HasSubstr("session memory limit exceeded"),
                    HasSubstr("limit 1048576")));
  // The chunk finds the refused (poisoned) id, not a put.
  EXPECT_EQ(reply.results(1).error().code(), kFailedPrecondition);
  EXPECT_EQ(reply.results(2).stats().live_tensors(), 0);
  EXPECT_LT(reply.results(2).stats().bytes_in_use(), 64 << 10);
  EXPECT_EQ(PeakTensorBytes(), live_before);  // never allocated
  // Half the limit is charged in full at Begin, before any data.
  reply = Run(creds,
              Batch().PutBegin(4, 2, v1::DTYPE_FLOAT32, {128 << 10}).Stats(5));
  ASSERT_THAT(reply.results(), SizeIs(1)) << reply.ShortDebugString();
  EXPECT_GE(reply.results(0).stats().bytes_in_use(), 512 << 10);
}

}  // namespace
}  // namespace gradtape::server
