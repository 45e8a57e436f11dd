// Tensors larger than one chunk through the C++ client (client/src/
// chunks.cc): a 1 GiB float32 round trip in bounded time, tensors that
// cross chunk boundaries at sizes that are not a multiple of the chunk,
// and the memory limit charged before the first chunk.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gradtape/client/client.h"
#include "gtest/gtest.h"
#include "server/server.h"

namespace gradtape::client {
namespace {

using ::testing::HasSubstr;

// A server on 127.0.0.1 with `options` (address set here); stopped by the
// caller's unique_ptr.
std::unique_ptr<server::Server> StartServer(server::ServerOptions options) {
  options.address = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<server::Server>> s =
      server::Server::Start(options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

std::unique_ptr<Session> Connect(const server::Server& server,
                                 SessionOptions options = {}) {
  options.rpc_timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<Session>> s =
      Session::Connect(absl::StrCat("127.0.0.1:", server.port()), options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

// float32 values that differ from one element to the next and from one
// chunk to the next: i mod 2^24, exact in float32.
HostTensor Pattern(int64_t n) {
  HostTensor t;
  t.dtype = DType::kFloat32;
  t.shape = {n};
  t.bytes.resize(static_cast<size_t>(n) * 4);
  float* f = reinterpret_cast<float*>(t.bytes.data());
  for (int64_t i = 0; i < n; ++i) {
    f[i] = static_cast<float>(i & 0xFFFFFF) - 1000.0f;
  }
  return t;
}

// The index of the first float that differs, or -1.
int64_t FirstDifference(const HostTensor& a, const HostTensor& b) {
  if (a.bytes.size() != b.bytes.size()) return 0;
  if (std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0) {
    return -1;
  }
  for (size_t i = 0; i < a.bytes.size(); ++i) {
    if (a.bytes[i] != b.bytes[i]) return static_cast<int64_t>(i / 4);
  }
  return -1;
}

TEST(ChunksClientTest, OneGibibyteFloat32RoundTrip) {
  std::unique_ptr<server::Server> server = StartServer({});
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Session> session = Connect(*server);  // 64 MiB chunks
  ASSERT_NE(session, nullptr);
  const int64_t n = int64_t{1} << 28;  // 2^28 floats: 1 GiB
  const HostTensor value = Pattern(n);
  const absl::Time start = absl::Now();
  Tensor t = session->Put(value);
  absl::StatusOr<HostTensor> back = session->Fetch(t);
  const absl::Duration elapsed = absl::Now() - start;
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->dtype, DType::kFloat32);
  EXPECT_EQ(back->shape, (std::vector<int64_t>{n}));
  EXPECT_EQ(FirstDifference(*back, value), -1);
  // Generous: about 2 s on an idle 2-core machine; the bound catches a
  // transfer that stalls or goes byte by byte.
  EXPECT_LT(elapsed, absl::Seconds(90)) << elapsed;
  std::printf("1 GiB float32 put + fetch: %s\n",
              absl::FormatDuration(elapsed).c_str());
  // 1 GiB is 16 chunks each way, each in its own batch.
  EXPECT_GE(session->counters().batches_sent, 32);
  ASSERT_TRUE(session->Close().ok());
}

// A server whose messages are at most 1 MiB: a 3 MiB tensor fits in none.
class SmallMessageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server::ServerOptions options;
    options.max_message_bytes = 1 << 20;
    options.session_memory_limit_bytes = 8 << 20;
    server_ = StartServer(options);
    ASSERT_NE(server_, nullptr);
  }
  std::unique_ptr<server::Server> server_;
};

TEST_F(SmallMessageTest, TensorsAboveOneChunkRoundTripAtOddSizes) {
  SessionOptions options;
  options.chunk_bytes = 256 << 10;
  std::unique_ptr<Session> session = Connect(*server_, options);
  ASSERT_NE(session, nullptr);
  // Not a multiple of the chunk; exactly one chunk; one byte more.
  for (int64_t n :
       {(int64_t{3} << 18) + 3, int64_t{1} << 16, (int64_t{1} << 16) + 1}) {
    SCOPED_TRACE(n);
    const HostTensor value = Pattern(n);
    const int64_t sent_before = session->counters().batches_sent;
    Tensor t = session->Put(value);
    absl::StatusOr<HostTensor> back = session->Fetch(t);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->shape, (std::vector<int64_t>{n}));
    EXPECT_EQ(FirstDifference(*back, value), -1);
    const int64_t chunks =
        (n * 4 + options.chunk_bytes - 1) / options.chunk_bytes;
    // One chunk: the plain put and one fetch, in one batch.
    EXPECT_GE(session->counters().batches_sent - sent_before,
              chunks == 1 ? 1 : 2 * chunks);
  }
  // Other dtypes go the same way (bool normalised on the server).
  HostTensor b;
  b.dtype = DType::kBool;
  b.shape = {600001};
  b.bytes.assign(600001, '\1');
  b.bytes[300000] = '\0';
  absl::StatusOr<HostTensor> back = session->Fetch(session->Put(b));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->bytes == b.bytes);
  // Ops read a chunked tensor like any other.
  absl::StatusOr<HostTensor> sum =
      session->Fetch(Sum(session->Put(Pattern(1 << 20))));
  ASSERT_TRUE(sum.ok()) << sum.status();
}

TEST_F(SmallMessageTest, BeginOverTheMemoryLimitFailsBeforeTheFirstChunk) {
  SessionOptions options;
  options.chunk_bytes = 256 << 10;
  std::unique_ptr<Session> session = Connect(*server_, options);
  ASSERT_NE(session, nullptr);
  Tensor t = session->Put(Pattern(int64_t{3} << 20));  // 12 MiB > 8 MiB
  absl::Status status = session->Sync();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr("PutTensorBegin"));
  EXPECT_THAT(status.message(), HasSubstr("session memory limit exceeded"));
  absl::StatusOr<SessionStats> stats = session->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->live_tensors, 0);
  EXPECT_LT(stats->bytes_in_use, 1 << 20);  // nothing was stored
  // Reading it quotes the refusal; the session works.
  EXPECT_EQ(session->Fetch(t).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<HostTensor> small = session->Fetch(session->Put(Pattern(5)));
  ASSERT_TRUE(small.ok()) << small.status();
}

TEST_F(SmallMessageTest, ChunkBytesBelowOneIsRefused) {
  SessionOptions options;
  options.chunk_bytes = 0;
  absl::StatusOr<std::unique_ptr<Session>> s =
      Session::Connect(absl::StrCat("127.0.0.1:", server_->port()), options);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("chunk_bytes"));
}

}  // namespace
}  // namespace gradtape::client
