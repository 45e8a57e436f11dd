// Graceful drain (Server::Drain, server/drain.h) on an in-process Server on
// 127.0.0.1: health turns NOT_SERVING at once, CreateSession is refused
// while existing sessions keep working, a batch in flight finishes, open
// Streams end promptly with UNAVAILABLE, a stuck call is cancelled at the
// grace, and --checkpoint_on_drain writes checkpoints a new server restores.
#include "server/drain.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gradtape/client/client.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/server/server_test_util.h"
#include "tests/temp_dir.h"

namespace gradtape::server {
namespace {

using ::testing::HasSubstr;

// grpc.health.v1.Health/Check for `service`; the reply's status enum
// (1 SERVING, 2 NOT_SERVING), or -1 if the call failed.
int HealthStatus(const std::shared_ptr<grpc::Channel>& channel,
                 const std::string& service) {
  // HealthCheckRequest{service = 1}: tag 0x0a, length, bytes.
  std::string request_bytes;
  if (!service.empty()) {
    request_bytes =
        std::string("\x0a", 1) + static_cast<char>(service.size()) + service;
  }
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response,
                 [&done](grpc::Status status) { done.set_value(status); });
  if (!done.get_future().get().ok()) return -1;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return -1;
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  // HealthCheckResponse{status = 1}: tag 0x08, the enum (0 is omitted).
  if (bytes.empty()) return 0;
  if (bytes.size() != 2 || bytes[0] != '\x08') return -1;
  return bytes[1];
}

constexpr int kHealthServing = 1;
constexpr int kHealthNotServing = 2;
constexpr char kServiceName[] = "gradtape.v1.TapeService";

// A batch of float64 MatMuls of n x n matrices, `count` of them chained
// (ids 1..), the last reduced to a scalar and fetched at `seq` + count + 2.
// Returns the fetch's seq.
int64_t LongMatMuls(Batch& batch, int64_t n, int count, int64_t* seq) {
  std::vector<double> eye(n * n, 0.0);
  for (int64_t i = 0; i < n; ++i) eye[i * n + i] = 1.0;
  batch.Put(++*seq, 1, Doubles({n, n}, eye));
  for (int k = 0; k < count; ++k) {
    batch.Exec(++*seq, "MatMul", {1 + k, 1}, {2 + k});
  }
  // The sum of the identity over both axes: n.
  batch.Exec(++*seq, "Sum", {1 + count}, {901});  // all axes
  batch.Fetch(++*seq, 901);
  return *seq;
}

class DrainTest : public ServerTest {
 protected:
  void SetUp() override {}  // each test starts its server

  void StartWith(absl::Duration grace, const std::string& dir = "",
                 bool checkpoint = false) {
    ServerOptions options;
    options.shutdown_grace = grace;
    options.checkpoint_dir = dir;
    options.checkpoint_on_drain = checkpoint;
    StartServer(options);
  }

  // Runs Drain(grace) on a thread; the future gives its duration.
  std::future<absl::Duration> DrainAsync(absl::Duration grace) {
    return std::async(std::launch::async, [this, grace] {
      const absl::Time start = absl::Now();
      server_->Drain(grace);
      return absl::Now() - start;
    });
  }

  // How many chained 512 x 512 MatMuls take about `target` on this machine
  // (measured on a session of its own), at least 4.
  int MatMulsLasting(absl::Duration target) {
    SessionCreds creds = NewSession();
    Batch batch;
    int64_t seq = 0;
    LongMatMuls(batch, 512, 4, &seq);
    const absl::Time start = absl::Now();
    Run(creds, batch);
    const absl::Duration each = (absl::Now() - start) / 4;
    const double count = absl::FDivDuration(target, each);
    return static_cast<int>(std::clamp(count, 4.0, 2000.0));
  }

  // Polls the health of "" on `channel` (default: the main port's) until it
  // is `want` (at most 2 s).
  bool HealthBecomes(int want, std::shared_ptr<grpc::Channel> channel = {}) {
    if (channel == nullptr) channel = channel_;
    const absl::Time deadline = absl::Now() + absl::Seconds(2);
    while (absl::Now() < deadline) {
      if (HealthStatus(channel, "") == want) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }
};

TEST_F(DrainTest, BothHealthNamesServeBeforeTheDrain) {
  StartWith(absl::Seconds(5));
  EXPECT_EQ(HealthStatus(channel_, ""), kHealthServing);
  EXPECT_EQ(HealthStatus(channel_, kServiceName), kHealthServing);
}

// health_address: a plaintext listener with grpc.health.v1 only, for probes
// that cannot speak TLS: the same statuses as the main port (NOT_SERVING
// once the drain starts), and no TapeService.
TEST_F(DrainTest, HealthAddressServesOnlyHealthAndFollowsTheDrain) {
  ServerOptions options;
  options.shutdown_grace = absl::Seconds(20);
  options.health_address = "127.0.0.1:0";
  StartServer(options);
  ASSERT_GT(server_->health_port(), 0);
  ASSERT_NE(server_->health_port(), server_->port());
  auto health =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->health_port()),
                          grpc::InsecureChannelCredentials());
  EXPECT_EQ(HealthStatus(health, ""), kHealthServing);
  EXPECT_EQ(HealthStatus(health, kServiceName), kHealthServing);
  {
    auto stub = v1::TapeService::NewStub(health);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::CreateSessionResponse response;
    EXPECT_EQ(
        stub->CreateSession(&context, v1::CreateSessionRequest(), &response)
            .error_code(),
        grpc::StatusCode::UNIMPLEMENTED);
  }
  // A long batch holds the drain open while health is checked.
  SessionCreds busy = NewSession();
  Batch long_batch;
  int64_t seq = 0;
  LongMatMuls(long_batch, 512, MatMulsLasting(absl::Seconds(2)), &seq);
  auto long_run = std::async(std::launch::async, [&] {
    v1::BatchReply reply;
    return RunStatus(&busy, long_batch, &reply);
  });
  absl::SleepFor(absl::Milliseconds(200));
  auto drained = DrainAsync(absl::Seconds(20));
  EXPECT_TRUE(HealthBecomes(kHealthNotServing, health));
  EXPECT_EQ(HealthStatus(health, kServiceName), kHealthNotServing);
  EXPECT_TRUE(long_run.get().ok());
  EXPECT_LT(drained.get(), absl::Seconds(15));
}

// An address that cannot be bound (192.0.2.1 is TEST-NET, never local) fails
// Start with UNAVAILABLE naming it, for the main and the health listener,
// and the half-built server shuts down cleanly (its destructor once
// drained a null gRPC server).
TEST(ServerStartTest, UnbindableAddressesFailCleanly) {
  ServerOptions options;
  options.address = "192.0.2.1:0";
  absl::StatusOr<std::unique_ptr<Server>> main_port = Server::Start(options);
  ASSERT_FALSE(main_port.ok());
  EXPECT_EQ(main_port.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(main_port.status().message()),
              HasSubstr("192.0.2.1:0"));
  options.address = "127.0.0.1:0";
  options.health_address = "192.0.2.1:0";
  absl::StatusOr<std::unique_ptr<Server>> health = Server::Start(options);
  ASSERT_FALSE(health.ok());
  EXPECT_THAT(std::string(health.status().message()),
              HasSubstr("health_address 192.0.2.1:0"));
}

// While a long batch holds the drain open: health is NOT_SERVING for both
// names, CreateSession is refused with UNAVAILABLE, another existing
// session's Run still works, and the long batch completes with its result.
TEST_F(DrainTest, InFlightBatchFinishesWhileNewSessionsAreRefused) {
  StartWith(absl::Seconds(20));
  SessionCreds busy = NewSession();
  SessionCreds other = NewSession();
  Batch long_batch;
  int64_t seq = 0;
  const int64_t n = 512;
  const int64_t fetch =
      LongMatMuls(long_batch, n, MatMulsLasting(absl::Seconds(2)), &seq);
  std::atomic<bool> long_done{false};
  auto long_run = std::async(std::launch::async, [&] {
    v1::BatchReply reply;
    grpc::Status status = RunStatus(&busy, long_batch, &reply);
    long_done = true;
    return std::make_pair(status, reply);
  });
  absl::SleepFor(absl::Milliseconds(200));  // the batch is running
  ASSERT_FALSE(long_done) << "the batch is too short to hold the drain open";
  auto drained = DrainAsync(absl::Seconds(20));

  ASSERT_TRUE(HealthBecomes(kHealthNotServing));
  EXPECT_EQ(HealthStatus(channel_, kServiceName), kHealthNotServing);
  SessionCreds refused;
  grpc::Status create = CreateSession(v1::CreateSessionRequest(), &refused);
  EXPECT_EQ(create.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(create.error_message(), HasSubstr("server is draining"));
  v1::BatchReply quick =
      Run(other, Batch().Put(1, 1, Doubles({1}, {2.0})).Fetch(2, 1));
  ASSERT_NE(Find(quick, 2), nullptr);
  EXPECT_EQ(AsDoubles(Find(quick, 2)->tensor()), std::vector<double>{2.0});
  EXPECT_FALSE(long_done) << "checks ran after the long batch: make it longer";

  auto [status, reply] = long_run.get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(reply.last_seq(), fetch);
  const v1::CommandResult* result = Find(reply, fetch);
  ASSERT_NE(result, nullptr);
  ASSERT_FALSE(result->has_error()) << result->error().message();
  EXPECT_EQ(AsDoubles(result->tensor()), std::vector<double>{double(n)});
  EXPECT_LT(drained.get(), absl::Seconds(15));
}

// An idle Stream (its read outstanding) ends at once with UNAVAILABLE and
// the drain message; Drain returns well before its grace.
TEST_F(DrainTest, IdleStreamEndsPromptlyWithUnavailable) {
  StartWith(absl::Seconds(20));
  SessionCreds creds = NewSession();
  grpc::ClientContext context;
  SetDeadline(&context);
  Authorize(creds, &context);
  auto stream = stub_->Stream(&context);
  ASSERT_TRUE(stream->Write(Batch(1).Put(1, 1, Doubles({1}, {3.0})).proto()));
  v1::BatchReply reply;
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_EQ(reply.last_seq(), 1);

  auto drained = DrainAsync(absl::Seconds(20));
  const absl::Time start = absl::Now();
  EXPECT_FALSE(stream->Read(&reply));
  const absl::Duration ended = absl::Now() - start;
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(status.error_message(), kStreamDrainMessage);
  EXPECT_LT(ended, absl::Seconds(2));
  EXPECT_LT(drained.get(), absl::Seconds(3));
}

// A Stream batch being applied when the drain starts is applied and
// answered; then the stream ends with UNAVAILABLE.
TEST_F(DrainTest, StreamBatchInProgressIsAnsweredBeforeTheEnd) {
  StartWith(absl::Seconds(20));
  SessionCreds creds = NewSession();
  grpc::ClientContext context;
  SetDeadline(&context);
  Authorize(creds, &context);
  auto stream = stub_->Stream(&context);
  Batch batch(7);
  int64_t seq = 0;
  const int64_t fetch =
      LongMatMuls(batch, 512, MatMulsLasting(absl::Seconds(1)), &seq);
  ASSERT_TRUE(stream->Write(batch.proto()));
  absl::SleepFor(absl::Milliseconds(200));  // the batch is running
  auto drained = DrainAsync(absl::Seconds(20));

  v1::BatchReply reply;
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_EQ(reply.batch_id(), 7);
  EXPECT_EQ(reply.last_seq(), fetch);
  const v1::CommandResult* result = Find(reply, fetch);
  ASSERT_NE(result, nullptr);
  ASSERT_FALSE(result->has_error()) << result->error().message();
  EXPECT_EQ(AsDoubles(result->tensor()), std::vector<double>{512.0});
  EXPECT_FALSE(stream->Read(&reply));
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("server draining"));
  EXPECT_LT(drained.get(), absl::Seconds(15));
}

// A Stream whose client never reads its (large) replies cannot end: it is
// cancelled at the grace, and Drain returns then (not 1 s in, as the old
// hard-coded Shutdown did, nor never).
TEST_F(DrainTest, StuckStreamIsCancelledAtTheGrace) {
  const absl::Duration grace = absl::Seconds(3);
  StartWith(grace);
  SessionCreds creds = NewSession();
  grpc::ClientContext context;
  SetDeadline(&context);
  Authorize(creds, &context);
  auto stream = stub_->Stream(&context);
  const int64_t elements = 1 << 20;  // 8 MiB of float64 per reply
  ASSERT_TRUE(stream->Write(
      Batch(1)
          .Put(1, 1, Doubles({elements}, std::vector<double>(elements)))
          .proto()));
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(stream->Write(Batch(2 + i).Fetch(2 + i, 1).proto()));
  }
  absl::SleepFor(absl::Milliseconds(500));  // replies pile up unread
  const absl::Duration took = DrainAsync(grace).get();
  EXPECT_GE(took, grace - absl::Milliseconds(200));
  EXPECT_LT(took, grace + absl::Seconds(3));
  context.TryCancel();
  v1::BatchReply reply;
  while (stream->Read(&reply)) {
  }
  EXPECT_FALSE(stream->Finish().ok());
}

// The C++ client's wait points report the drain: UNAVAILABLE with the
// server's message.
TEST_F(DrainTest, CppClientReportsTheDrain) {
  StartWith(absl::Seconds(20));
  absl::StatusOr<std::unique_ptr<client::Session>> session =
      client::Session::Connect(server_->address());
  ASSERT_TRUE(session.ok()) << session.status();
  client::Tensor x = (*session)->Put<double>({1}, {1.0});
  ASSERT_TRUE((*session)->Sync().ok());
  auto drained = DrainAsync(absl::Seconds(20));
  absl::Status status;
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  while (status.ok() && absl::Now() < deadline) {
    (*session)->Put<double>({1}, {2.0});
    status = (*session)->Sync();
    if (status.ok()) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("server draining; reconnect"));
  EXPECT_LT(drained.get(), absl::Seconds(3));
}

TEST_F(DrainTest, CheckpointOnDrainNeedsACheckpointDir) {
  ServerOptions options;
  options.address = "127.0.0.1:0";
  options.checkpoint_on_drain = true;
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("checkpoint_dir"));
}

// Variable commands of a batch: VarHandleOp `name` (float64 [n]) at
// `handle`.
void Declare(Batch& batch, int64_t* seq, int64_t handle,
             const std::string& name, int64_t n) {
  batch.Exec(++*seq, "VarHandleOp", {}, {handle},
             {{"dtype", TypeAttr(v1::DTYPE_FLOAT64)},
              {"shape", IntsAttr({n})},
              {"shared_name", StringAttr(name)}});
}

TEST_F(DrainTest, CheckpointOnDrainIsRestoredByANewServer) {
  testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  StartWith(absl::Seconds(10), dir.path(), /*checkpoint=*/true);
  SessionCreds trained = NewSession();
  SessionCreds empty = NewSession();  // no variables: writes nothing
  Batch setup;
  int64_t seq = 0;
  Declare(setup, &seq, 1, "w", 3);
  setup.Put(++seq, 11, Doubles({3}, {1.5, -2.0, 0.25}));
  setup.Exec(++seq, "AssignVariableOp", {1, 11}, {});
  Declare(setup, &seq, 2, "b", 1);
  setup.Put(++seq, 12, Doubles({1}, {7.0}));
  setup.Exec(++seq, "AssignVariableOp", {2, 12}, {});
  v1::BatchReply reply = Run(trained, setup);
  for (const v1::CommandResult& r : reply.results()) {
    EXPECT_FALSE(r.has_error()) << r.ShortDebugString();
  }
  Run(empty, Batch().Put(1, 1, Doubles({1}, {1.0})));

  server_->Drain(absl::Seconds(10));
  const std::string name = DrainCheckpointName(trained.id);
  EXPECT_EQ(name, "drain-" + trained.id);
  EXPECT_EQ(dir.Files(), std::vector<std::string>{name});

  StartWith(absl::Seconds(10), dir.path());
  SessionCreds restored = NewSession();
  Batch declare;
  seq = 0;
  Declare(declare, &seq, 1, "w", 3);
  Declare(declare, &seq, 2, "b", 1);
  v1::CommandBatch restore = declare.proto();
  v1::Command* cmd = restore.add_commands();
  cmd->set_seq(++seq);
  cmd->mutable_restore_checkpoint()->set_name(name);
  const int64_t restore_seq = seq;
  Batch read;
  read.Exec(seq + 1, "ReadVariableOp", {1}, {21}).Fetch(seq + 2, 21);
  const int64_t fetch_w = seq + 2;
  read.Exec(seq + 3, "ReadVariableOp", {2}, {22}).Fetch(seq + 4, 22);
  const int64_t fetch_b = seq + 4;
  restore.MergeFrom(read.proto());
  grpc::ClientContext context;
  SetDeadline(&context);
  Authorize(restored, &context);
  grpc::Status status = stub_->Run(&context, restore, &reply);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const v1::CommandResult* r = Find(reply, restore_seq);
  ASSERT_NE(r, nullptr);
  ASSERT_FALSE(r->has_error()) << r->error().message();
  EXPECT_EQ(AsDoubles(Find(reply, fetch_w)->tensor()),
            (std::vector<double>{1.5, -2.0, 0.25}));
  EXPECT_EQ(AsDoubles(Find(reply, fetch_b)->tensor()),
            std::vector<double>{7.0});
}

}  // namespace
}  // namespace gradtape::server
