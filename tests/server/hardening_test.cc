// Issue 11, classes 6 and 7 (server side): replies that would exceed the
// message limit, messages that are not CommandBatches, dtypes outside the
// enum, and status messages made safe for the wire. Each test asserts the
// precise status code and message and that the session still works.
#include <cmath>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "core/session/session.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/batch.h"
#include "server/convert.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"
#include "tests/temp_dir.h"

namespace gradtape::server {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

constexpr int kResourceExhausted =
    static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED);
constexpr int kInvalidArgument =
    static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT);
constexpr int kFailedPrecondition =
    static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION);
constexpr int kNotFound = static_cast<int>(grpc::StatusCode::NOT_FOUND);

std::vector<double> Iota(int n, double start = 0) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

// A server whose messages are at most 64 KiB: a reply holds 60 KiB of
// results.
class HardeningTest : public ServerTest {
 protected:
  static constexpr int kMaxMessage = 64 << 10;
  static constexpr int kReplyLimit =
      kMaxMessage - ServerOptions::kReplyMarginBytes;  // 61440
  // Tensors of 24 KiB, 40 KiB and 62.5 KiB: the first two do not fit in one
  // reply; the third fits in none.
  static constexpr int kSmall = 3072;  // doubles
  static constexpr int kLarge = 5120;  // doubles
  static constexpr int kHuge = 8000;   // doubles

  void SetUp() override {
    ServerOptions options;
    options.max_message_bytes = kMaxMessage;
    StartServer(options);
  }

  // Puts `n` doubles 0, 1, ... at `id` in a Run of its own.
  void PutDoubles(const SessionCreds& creds, int64_t seq, int64_t id, int n) {
    v1::BatchReply reply =
        Run(creds, Batch().Put(seq, id, Doubles({n}, Iota(n))));
    EXPECT_THAT(reply.results(), SizeIs(0)) << reply.ShortDebugString();
  }

  // a = 1 (kSmall), b = 2 (kLarge), c = 3 (4 doubles), seqs 1 to 3.
  void PutThree(const SessionCreds& creds) {
    PutDoubles(creds, 1, 1, kSmall);
    PutDoubles(creds, 2, 2, kLarge);
    PutDoubles(creds, 3, 3, 4);
  }

  static Batch ThreeFetches() {
    return std::move(Batch(7).Fetch(11, 1).Fetch(12, 2).Fetch(13, 3));
  }

  // The reply to ThreeFetches: the first and third answered, the second
  // RESOURCE_EXHAUSTED.
  static void ExpectSecondFetchRefused(const v1::BatchReply& reply) {
    EXPECT_EQ(reply.batch_id(), 7);
    EXPECT_EQ(reply.last_seq(), 13);
    ASSERT_THAT(reply.results(), SizeIs(3)) << reply.ShortDebugString();
    EXPECT_EQ(reply.results(0).seq(), 11);
    ASSERT_TRUE(reply.results(0).has_tensor());
    EXPECT_EQ(AsDoubles(reply.results(0).tensor()), Iota(kSmall));
    EXPECT_EQ(reply.results(1).seq(), 12);
    ASSERT_TRUE(reply.results(1).has_error());
    EXPECT_EQ(reply.results(1).error().code(), kResourceExhausted);
    EXPECT_THAT(reply.results(1).error().message(),
                AllOf(HasSubstr("FetchTensor (command 12)"),
                      HasSubstr("tensor id 2 (float64[5120], 40960 bytes)"),
                      HasSubstr("does not fit in this reply"),
                      HasSubstr(absl::StrCat("of the ", kReplyLimit,
                                             " bytes a reply may hold")),
                      HasSubstr("fetch it in a batch of its own"),
                      HasSubstr("chunked transfer")));
    EXPECT_EQ(reply.results(2).seq(), 13);
    ASSERT_TRUE(reply.results(2).has_tensor());
    EXPECT_EQ(AsDoubles(reply.results(2).tensor()), Iota(4));
    EXPECT_LE(reply.ByteSizeLong(), static_cast<size_t>(kMaxMessage));
  }

  // The refused tensor alone, then a stats command: the session works.
  void ExpectSessionWorks(const SessionCreds& creds, int64_t seq) {
    v1::BatchReply reply = Run(creds, Batch().Fetch(seq, 2).Stats(seq + 1));
    ASSERT_THAT(reply.results(), SizeIs(2)) << reply.ShortDebugString();
    ASSERT_TRUE(reply.results(0).has_tensor())
        << reply.results(0).ShortDebugString();
    EXPECT_EQ(AsDoubles(reply.results(0).tensor()), Iota(kLarge));
    EXPECT_TRUE(reply.results(1).has_stats());
    EXPECT_EQ(reply.last_seq(), seq + 1);
  }
};

TEST_F(HardeningTest, FetchThatDoesNotFitFailsAloneOverRun) {
  SessionCreds creds = NewSession();
  PutThree(creds);
  ExpectSecondFetchRefused(Run(creds, ThreeFetches()));
  ExpectSessionWorks(creds, 20);
}

TEST_F(HardeningTest, FetchThatDoesNotFitFailsAloneOverStream) {
  SessionCreds creds = NewSession();
  PutThree(creds);
  grpc::Status status;
  std::vector<v1::BatchReply> replies = StreamBatches(
      creds, {ThreeFetches(), std::move(Batch(8).Fetch(14, 3))}, &status);
  EXPECT_TRUE(status.ok()) << status.error_message();
  // The stream lives on: the next batch is answered too.
  ASSERT_THAT(replies, SizeIs(2));
  ExpectSecondFetchRefused(replies[0]);
  ASSERT_THAT(replies[1].results(), SizeIs(1));
  EXPECT_EQ(AsDoubles(replies[1].results(0).tensor()), Iota(4));
  ExpectSessionWorks(creds, 20);
}

TEST_F(HardeningTest, TensorLargerThanAnyReplyNamesTheLimit) {
  SessionCreds creds = NewSession();
  PutDoubles(creds, 1, 9, kHuge);
  v1::BatchReply reply = Run(creds, Batch().Fetch(2, 9));
  ASSERT_THAT(reply.results(), SizeIs(1));
  EXPECT_EQ(reply.results(0).error().code(), kResourceExhausted);
  EXPECT_THAT(reply.results(0).error().message(),
              AllOf(HasSubstr("FetchTensor (command 2): tensor id 9 "
                              "(float64[8000], 64000 bytes)"),
                    HasSubstr(absl::StrCat("larger than a whole reply (the "
                                           "reply limit is ",
                                           kReplyLimit, " bytes")),
                    HasSubstr("chunked transfer")));
  // The tensor is still there and usable.
  reply = Run(creds,
              Batch().Exec(3, "Neg", {9}, {10}).Release(4, {9, 10}).Stats(5));
  ASSERT_THAT(reply.results(), SizeIs(1)) << reply.ShortDebugString();
  EXPECT_EQ(reply.results(0).stats().live_tensors(), 0);
}

// The gradient is refused before it runs: a non-persistent tape stays
// unused, so the same gradient without return_values then succeeds.
TEST_F(HardeningTest, GradientWithValuesThatDoNotFitIsRefusedBeforeItRuns) {
  SessionCreds creds = NewSession();
  PutDoubles(creds, 1, 1, kSmall);
  PutDoubles(creds, 2, 2, kLarge);  // x
  Run(creds,
      Batch().PushTape(3, 100).Watch(4, 100, {2}).Exec(5, "Mul", {2, 2}, {3}));
  v1::BatchReply reply =
      Run(creds, Batch().Fetch(6, 1).Gradient(7, 100, {3}, {2}, {4}, true));
  ASSERT_THAT(reply.results(), SizeIs(2)) << reply.ShortDebugString();
  EXPECT_TRUE(reply.results(0).has_tensor());
  const v1::CommandResult& refused = reply.results(1);
  EXPECT_EQ(refused.seq(), 7);
  EXPECT_EQ(refused.error().code(), kResourceExhausted);
  EXPECT_THAT(
      refused.error().message(),
      AllOf(HasSubstr("Gradient (command 7): its returned values "
                      "(float64[5120]: 40960 bytes of data) do not "
                      "fit in this reply"),
            HasSubstr(absl::StrCat(kReplyLimit, " bytes")),
            HasSubstr("nothing was applied (result ids [4] are "
                      "poisoned)"),
            HasSubstr("return_values=false"), HasSubstr("FetchTensor")));
  EXPECT_EQ(reply.last_seq(), 7);

  // The poisoned result id quotes the refusal.
  reply = Run(creds, Batch().Fetch(8, 4));
  ASSERT_THAT(reply.results(), SizeIs(1));
  EXPECT_EQ(reply.results(0).error().code(), kFailedPrecondition);
  EXPECT_THAT(reply.results(0).error().message(),
              HasSubstr("Gradient (command 7): its returned values"));

  // The tape was not used: the gradient runs, and its value fetches alone.
  reply = Run(creds, Batch().Gradient(9, 100, {3}, {2}, {4}, false));
  EXPECT_THAT(reply.results(), SizeIs(0)) << reply.ShortDebugString();
  reply = Run(creds, Batch().Fetch(10, 4));
  ASSERT_THAT(reply.results(), SizeIs(1));
  ASSERT_TRUE(reply.results(0).has_tensor());
  std::vector<double> expected = Iota(kLarge);
  for (double& v : expected) v *= 2;
  EXPECT_EQ(AsDoubles(reply.results(0).tensor()), expected);
}

TEST_F(HardeningTest, JacobianWithValuesThatDoNotFitIsRefused) {
  SessionCreds creds = NewSession();
  PutDoubles(creds, 1, 1, kSmall);
  PutDoubles(creds, 2, 2, 80);  // x; the Jacobian of x*x is 80 x 80
  Run(creds, Batch()
                 .PushTape(3, 100, /*persistent=*/true)
                 .Watch(4, 100, {2})
                 .Exec(5, "Mul", {2, 2}, {3}));
  v1::BatchReply reply =
      Run(creds, Batch().Fetch(6, 1).Jacobian(7, 100, 3, {2}, {4}, true));
  ASSERT_THAT(reply.results(), SizeIs(2)) << reply.ShortDebugString();
  EXPECT_EQ(reply.results(1).error().code(), kResourceExhausted);
  EXPECT_THAT(
      reply.results(1).error().message(),
      AllOf(HasSubstr("Jacobian (command 7): its returned values "
                      "(float64[80,80]: 51200 bytes of data)"),
            HasSubstr("result ids [4]"), HasSubstr("return_values=false")));
  // Alone, it fits.
  reply = Run(creds, Batch().Jacobian(8, 100, 3, {2}, {4}, true));
  ASSERT_THAT(reply.results(), SizeIs(1)) << reply.ShortDebugString();
  ASSERT_THAT(reply.results(0).jacobian().values(), SizeIs(1));
  std::vector<double> jac = AsDoubles(reply.results(0).jacobian().values(0));
  ASSERT_THAT(jac, SizeIs(80 * 80));
  EXPECT_EQ(jac[5 * 80 + 5], 10.0);
  EXPECT_EQ(jac[5 * 80 + 6], 0.0);
}

TEST_F(HardeningTest, FetchJvpWithValueThatDoesNotFitIsRefused) {
  SessionCreds creds = NewSession();
  PutDoubles(creds, 1, 1, kSmall);
  PutDoubles(creds, 2, 2, kLarge);  // x
  PutDoubles(creds, 3, 3, kLarge);  // its tangent
  Run(creds, Batch().PushAccumulator(4, 7).AccumulatorWatch(5, 7, 2, 3));
  v1::BatchReply reply =
      Run(creds, Batch().Fetch(6, 1).FetchJvp(7, 7, 2, 50, true));
  ASSERT_THAT(reply.results(), SizeIs(2)) << reply.ShortDebugString();
  EXPECT_EQ(reply.results(1).error().code(), kResourceExhausted);
  EXPECT_THAT(
      reply.results(1).error().message(),
      AllOf(HasSubstr("FetchJvp (command 7): its returned values "
                      "(float64[5120]: 40960 bytes of data)"),
            HasSubstr("return_value=false"), HasSubstr("result id 50")));
  reply = Run(creds, Batch().FetchJvp(8, 7, 2, 50, false));
  EXPECT_THAT(reply.results(), SizeIs(0)) << reply.ShortDebugString();
  reply = Run(creds, Batch().Fetch(9, 50));
  ASSERT_THAT(reply.results(), SizeIs(1));
  EXPECT_EQ(AsDoubles(reply.results(0).tensor()), Iota(kLarge));
}

// A batch of a few bytes per command whose errors would not fit in any
// reply: it stops at the command whose error no longer fits.
TEST_F(HardeningTest, BatchWhoseErrorsFillTheReplyStops) {
  SessionCreds creds = NewSession();
  Batch batch;
  constexpr int kCommands = 5000;
  for (int seq = 1; seq <= kCommands; ++seq) batch.Empty(seq);
  v1::BatchReply reply = Run(creds, batch);
  EXPECT_LE(reply.ByteSizeLong(), static_cast<size_t>(kMaxMessage));
  ASSERT_GT(reply.results_size(), 100);
  ASSERT_LT(reply.results_size(), kCommands);
  const int n = reply.results_size();
  for (int i = 0; i + 1 < n; ++i) {
    ASSERT_EQ(reply.results(i).seq(), i + 1);
    ASSERT_THAT(reply.results(i).error().message(),
                HasSubstr("no command kind set"));
  }
  const v1::CommandResult& last = reply.results(n - 1);
  EXPECT_EQ(last.seq(), n);
  EXPECT_EQ(last.error().code(), kResourceExhausted);
  EXPECT_THAT(
      last.error().message(),
      AllOf(HasSubstr(absl::StrCat("command ", n, ": the reply is full")),
            HasSubstr(absl::StrCat(
                "the ", kCommands - n, " commands after it in this batch (seq ",
                n + 1, " to ", kCommands, ") were not applied")),
            HasSubstr("no command kind set")));
  EXPECT_EQ(reply.last_seq(), n);
  // The session goes on from there.
  reply = Run(
      creds,
      Batch().Put(kCommands + 1, 1, Doubles({1}, {4})).Fetch(kCommands + 2, 1));
  ASSERT_THAT(reply.results(), SizeIs(1));
  EXPECT_THAT(AsDoubles(reply.results(0).tensor()), ElementsAre(4));
}

TEST_F(HardeningTest, MaxMessageBytesIsValidated) {
  ServerOptions options;
  options.address = "127.0.0.1:0";
  options.max_message_bytes = 1000;
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("max_message_bytes must be at least 16384, got 1000"));
}

// ApplyBatch with its limit as a parameter, on a core Session.
// One bad command of every kind that takes ids or names, in one batch: each
// fails alone with a status that names its command, and the commands after
// it, and the session, go on.
TEST(ApplyBatchTest, EveryCommandKindRefusesABadInputAlone) {
  gradtape::testing::TempDir dir;
  SessionOptions options;
  options.checkpoint_dir = dir.path();
  Session session(DefaultRegistry(), options);
  v1::CommandBatch batch;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        commands {
          seq: 1
          put {
            id: 1
            value {
              dtype: DTYPE_FLOAT64
              shape: 1
              data: "\000\000\000\000\000\000\360?"
            }
          }
        }
        commands {
          seq: 2
          execute { op: "Exp" input_ids: 1 output_ids: 2 }
        }
        commands {
          seq: 3
          execute { op: "NoSuchOp" output_ids: 3 }
        }
        commands {
          seq: 4
          put {
            id: 4
            value {
              dtype: DTYPE_FLOAT32
              shape: 4611686018427387905
              data: "abcd"
            }
          }
        }
        commands {
          seq: 5
          fetch { id: 99 }
        }
        commands {
          seq: 6
          release { ids: 1 ids: 98 }
        }
        commands {
          seq: 7
          push_tape { tape_id: 0 }
        }
        commands {
          seq: 8
          pop_tape { tape_id: 55 }
        }
        commands {
          seq: 9
          delete_tape { tape_id: 55 }
        }
        commands {
          seq: 10
          watch { tape_id: 55 ids: 1 }
        }
        commands {
          seq: 11
          gradient { tape_id: 55 target_ids: 2 source_ids: 1 result_ids: 11 }
        }
        commands {
          seq: 12
          jacobian { tape_id: 55 target_id: 2 source_ids: 1 result_ids: 12 }
        }
        commands {
          seq: 13
          watched_variables { tape_id: 55 }
        }
        commands {
          seq: 14
          pop_accumulator { accumulator_id: 55 }
        }
        commands {
          seq: 15
          delete_accumulator { accumulator_id: 55 }
        }
        commands {
          seq: 16
          accumulator_watch { accumulator_id: 55 ids: 1 tangent_ids: 1 }
        }
        commands {
          seq: 17
          fetch_jvp { accumulator_id: 55 id: 1 result_id: 17 }
        }
        commands {
          seq: 18
          save_checkpoint { name: "../escape" }
        }
        commands {
          seq: 19
          restore_checkpoint { name: "missing" }
        }
        commands {
          seq: 20
          execute_with_gradient {
            op { op: "Exp" input_ids: 99 output_ids: 20 }
          }
        }
        commands { seq: 21 }
        commands {
          seq: 22
          execute { op: "Exp" input_ids: 2 output_ids: 22 }
        }
        commands {
          seq: 23
          fetch { id: 22 }
        }
        commands {
          seq: 24
          put_begin { id: 24 dtype: DTYPE_FLOAT32 shape: -2 }
        }
        commands {
          seq: 25
          put_chunk { id: 25 offset: 0 data: "abcd" }
        }
        commands {
          seq: 26
          fetch { id: 22 offset: -1 max_bytes: 8 }
        }
      )pb",
      &batch));
  v1::BatchReply reply;
  ASSERT_TRUE(ApplyBatch(session, batch, 1 << 20, nullptr, &reply).ok());
  EXPECT_EQ(reply.last_seq(), 26);
  for (int64_t seq = 3; seq <= 26; ++seq) {
    if (seq == 22 || seq == 23) continue;  // the good ones
    SCOPED_TRACE(seq);
    const v1::CommandResult* r = Find(reply, seq);
    ASSERT_NE(r, nullptr);
    ASSERT_TRUE(r->has_error());
    EXPECT_NE(r->error().code(), static_cast<int>(grpc::StatusCode::INTERNAL));
    EXPECT_NE(r->error().code(), static_cast<int>(grpc::StatusCode::UNKNOWN));
    EXPECT_THAT(r->error().message(), HasSubstr(absl::StrCat("command ", seq)));
  }
  EXPECT_EQ(Find(reply, 4)->error().code(), kResourceExhausted);
  EXPECT_EQ(Find(reply, 7)->error().code(), kInvalidArgument);
  EXPECT_EQ(Find(reply, 18)->error().code(), kInvalidArgument);
  EXPECT_EQ(Find(reply, 21)->error().code(), kInvalidArgument);
  // Nothing half-applied: the release of [1, 98] released nothing.
  EXPECT_TRUE(session.Peek(1).ok());
  const v1::CommandResult* last = Find(reply, 23);
  ASSERT_NE(last, nullptr);
  ASSERT_TRUE(last->has_tensor()) << last->ShortDebugString();
  double value = 0;
  std::memcpy(&value, last->tensor().data().data(), sizeof(value));
  EXPECT_NEAR(value, std::exp(std::exp(1.0)), 1e-12);
}

TEST(ApplyBatchTest, ReplyLimitIsAParameter) {
  Session session(DefaultRegistry(), SessionOptions());
  std::vector<double> big = Iota(700);  // 5600 bytes
  ASSERT_TRUE(session
                  .PutTensor(1, 1, DType::kFloat64, {700},
                             absl::string_view(
                                 reinterpret_cast<const char*>(big.data()),
                                 big.size() * sizeof(double)))
                  .ok());
  v1::CommandBatch batch;
  v1::Command* fetch = batch.add_commands();
  fetch->set_seq(2);
  fetch->mutable_fetch()->set_id(1);
  v1::BatchReply fits, refused;
  ASSERT_TRUE(ApplyBatch(session, batch, 8192, nullptr, &fits).ok());
  ASSERT_THAT(fits.results(), SizeIs(1));
  EXPECT_TRUE(fits.results(0).has_tensor());
  ASSERT_TRUE(ApplyBatch(session, batch, 4096, nullptr, &refused).ok());
  ASSERT_THAT(refused.results(), SizeIs(1));
  EXPECT_EQ(refused.results(0).error().code(), kResourceExhausted);
  EXPECT_THAT(refused.results(0).error().message(),
              HasSubstr("larger than a whole reply (the reply limit is 4096 "
                        "bytes"));
}

// A result without a prediction (stats) that no longer fits is replaced by an
// error saying it was applied; when that error does not fit either, the batch
// stops there and the commands after it are not applied.
TEST(ApplyBatchTest, FullReplyStopsTheBatch) {
  Session session(DefaultRegistry(), SessionOptions());
  // Find a fetch that leaves less room than a stats result takes.
  bool found = false;
  for (int n = 360; n < 400 && !found; ++n) {
    std::vector<double> values = Iota(n);
    ASSERT_TRUE(session
                    .PutTensor(n, n, DType::kFloat64, {n},
                               absl::string_view(
                                   reinterpret_cast<const char*>(values.data()),
                                   values.size() * sizeof(double)))
                    .ok());
    v1::CommandBatch batch;
    v1::Command* cmd = batch.add_commands();
    cmd->set_seq(1000);
    cmd->mutable_fetch()->set_id(n);
    cmd = batch.add_commands();
    cmd->set_seq(1001);
    cmd->mutable_stats();
    cmd = batch.add_commands();
    cmd->set_seq(1002);
    cmd->mutable_put()->set_id(5000 + n);  // put only when all fits
    *cmd->mutable_put()->mutable_value() = Doubles({1}, {1});
    v1::BatchReply reply;
    ASSERT_TRUE(ApplyBatch(session, batch, 4096, nullptr, &reply).ok());
    ASSERT_THAT(reply.results(), SizeIs(2)) << n;
    if (!reply.results(0).has_tensor()) break;  // past the interesting n
    if (reply.results(1).has_stats()) continue;
    found = true;
    EXPECT_LE(reply.ByteSizeLong(), 4096u);
    const v1::Error& error = reply.results(1).error();
    EXPECT_EQ(reply.results(1).seq(), 1001);
    EXPECT_EQ(error.code(), kResourceExhausted);
    EXPECT_THAT(error.message(),
                AllOf(HasSubstr("command 1001: the reply is full (it may "
                                "hold 4096 bytes)"),
                      HasSubstr("the 1 commands after it in this batch (seq "
                                "1002 to 1002) were not applied"),
                      HasSubstr("The command's error began: command 1001 "
                                "(stats): it was applied, but its result")));
    EXPECT_EQ(reply.last_seq(), 1001);
    EXPECT_EQ(session.FetchTensor(1003, 5000 + n).status().code(),
              absl::StatusCode::kNotFound);
  }
  EXPECT_TRUE(found);
}

// A Stream call on raw bytes (grpc::GenericStub), driven one operation at a
// time.
class RawStream {
 public:
  RawStream(const std::shared_ptr<grpc::Channel>& channel,
            const SessionCreds& creds)
      : stub_(channel) {
    context_.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    Authorize(creds, &context_);
    call_ =
        stub_.PrepareCall(&context_, "/gradtape.v1.TapeService/Stream", &cq_);
    call_->StartCall(this);
    EXPECT_TRUE(Wait());
  }
  ~RawStream() {
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  bool Write(const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer buffer(&slice, 1);
    call_->Write(buffer, this);
    return Wait();
  }
  bool Read(std::string* bytes) {
    grpc::ByteBuffer buffer;
    call_->Read(&buffer, this);
    if (!Wait()) return false;
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(buffer.Dump(&slices).ok());
    bytes->clear();
    for (const grpc::Slice& s : slices) {
      bytes->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    return true;
  }
  grpc::Status Finish() {
    call_->WritesDone(this);
    Wait();
    std::string ignored;
    while (Read(&ignored)) {
    }
    grpc::Status status;
    call_->Finish(&status, this);
    Wait();
    return status;
  }

 private:
  bool Wait() {
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq_.Next(&tag, &ok));
    EXPECT_EQ(tag, this);
    return ok;
  }

  grpc::GenericStub stub_;
  grpc::ClientContext context_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
};

// A CommandBatch cut short: field 2 (commands) says 16 bytes, 3 follow.
const std::string kTruncated(
    "\x12\x10"
    "abc",
    5);

TEST_F(HardeningTest, UnparsableStreamMessageEndsTheStreamWithInvalidArgument) {
  SessionCreds creds = NewSession();
  std::string reply_bytes;
  {
    RawStream stream(channel_, creds);
    ASSERT_TRUE(stream.Write(Batch(1)
                                 .Put(1, 1, Doubles({1}, {3}))
                                 .Fetch(2, 1)
                                 .proto()
                                 .SerializeAsString()));
    ASSERT_TRUE(stream.Read(&reply_bytes));
    v1::BatchReply reply;
    ASSERT_TRUE(reply.ParseFromString(reply_bytes));
    ASSERT_THAT(reply.results(), SizeIs(1));
    EXPECT_THAT(AsDoubles(reply.results(0).tensor()), ElementsAre(3));
    EXPECT_TRUE(stream.Write(kTruncated));
    // What follows the bad message is not applied (the write may fail once
    // the server finished).
    stream.Write(
        Batch(3).Put(3, 2, Doubles({1}, {5})).proto().SerializeAsString());
    grpc::Status status = stream.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(status.error_message(),
              "Stream: batch 2 (bytes 5) is not a valid "
              "gradtape.v1.CommandBatch");
  }
  // The session is untouched past batch 1, and a new stream works.
  grpc::Status status;
  std::vector<v1::BatchReply> replies = StreamBatches(
      creds, {std::move(Batch(4).Fetch(4, 2).Fetch(5, 1))}, &status);
  EXPECT_TRUE(status.ok()) << status.error_message();
  ASSERT_THAT(replies, SizeIs(1));
  ASSERT_THAT(replies[0].results(), SizeIs(2));
  EXPECT_EQ(replies[0].results(0).error().code(), kNotFound);
  EXPECT_THAT(AsDoubles(replies[0].results(1).tensor()), ElementsAre(3));
}

TEST_F(HardeningTest, FirstStreamMessageUnparsable) {
  SessionCreds creds = NewSession();
  RawStream stream(channel_, creds);
  // Proto3 strings must be UTF-8: an op name of one 0xff byte.
  v1::CommandBatch batch;
  v1::Command* cmd = batch.add_commands();
  cmd->set_seq(1);
  cmd->mutable_execute()->set_op("\xff");
  std::string bytes = batch.SerializePartialAsString();
  EXPECT_TRUE(stream.Write(bytes));
  grpc::Status status = stream.Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            absl::StrCat("Stream: batch 1 (bytes ", bytes.size(),
                         ") is not a valid gradtape.v1.CommandBatch"));
  EXPECT_EQ(Run(creds, Batch().Stats(2)).last_seq(), 2);
}

TEST_F(HardeningTest, UnparsableRunRequestIsInvalidArgument) {
  SessionCreds creds = NewSession();
  grpc::GenericStub stub(channel_);
  grpc::ClientContext context;
  SetDeadline(&context);
  Authorize(creds, &context);
  grpc::Slice slice(kTruncated);
  grpc::ByteBuffer request(&slice, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/gradtape.v1.TapeService/Run", grpc::StubOptions(),
                 &request, &response,
                 [&done](grpc::Status status) { done.set_value(status); });
  grpc::Status status = done.get_future().get();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "Run: the request (bytes 5) is not a valid "
            "gradtape.v1.CommandBatch");
  v1::BatchReply reply =
      Run(creds, Batch().Put(1, 1, Doubles({1}, {2})).Fetch(2, 1));
  ASSERT_THAT(reply.results(), SizeIs(1));
  EXPECT_THAT(AsDoubles(reply.results(0).tensor()), ElementsAre(2));
}

// Class 7: a dtype outside the enum is "unknown dtype 99", an unset one
// "dtype is not set", for puts and for attrs of type dtype.
TEST_F(HardeningTest, UnknownDTypeIsNamed) {
  SessionCreds creds = NewSession();
  v1::TensorValue unknown = Doubles({1}, {1});
  unknown.set_dtype(static_cast<v1::DType>(99));
  v1::TensorValue unset = Doubles({1}, {1});
  unset.set_dtype(v1::DTYPE_INVALID);
  v1::AttrValue attr99, attr0;
  attr99.set_type(static_cast<v1::DType>(99));
  attr0.set_type(v1::DTYPE_INVALID);
  v1::BatchReply reply =
      Run(creds, Batch()
                     .Put(1, 5, unknown)
                     .Put(2, 6, unset)
                     .Put(3, 7, Doubles({1}, {1}))
                     .Exec(4, "Cast", {7}, {8}, {{"DstT", attr99}})
                     .Exec(5, "Cast", {7}, {9}, {{"DstT", attr0}})
                     .Fetch(6, 5));
  ASSERT_THAT(reply.results(), SizeIs(5)) << reply.ShortDebugString();
  const v1::Error& put99 = Find(reply, 1)->error();
  EXPECT_EQ(put99.code(), kInvalidArgument);
  EXPECT_THAT(put99.message(),
              AllOf(HasSubstr("PutTensor (command 1, id 5): unknown dtype 99 "
                              "(known: 1 float32, 2 float64"),
                    Not(HasSubstr("not set"))));
  const v1::Error& put0 = Find(reply, 2)->error();
  EXPECT_EQ(put0.code(), kInvalidArgument);
  EXPECT_THAT(put0.message(), HasSubstr("dtype is not set"));
  const v1::Error& cast99 = Find(reply, 4)->error();
  EXPECT_EQ(cast99.code(), kInvalidArgument);
  EXPECT_THAT(cast99.message(),
              HasSubstr("Cast (command 4): attr 'DstT': unknown dtype 99"));
  const v1::Error& cast0 = Find(reply, 5)->error();
  EXPECT_EQ(cast0.code(), kInvalidArgument);
  EXPECT_THAT(cast0.message(),
              HasSubstr("Cast (command 5): attr 'DstT': dtype is not set"));
  // The put's id is poisoned with the reason.
  const v1::Error& fetch = Find(reply, 6)->error();
  EXPECT_EQ(fetch.code(), kFailedPrecondition);
  EXPECT_THAT(fetch.message(), HasSubstr("unknown dtype 99"));
  EXPECT_EQ(reply.last_seq(), 6);
  // The session still works.
  reply = Run(creds, Batch().Put(7, 5, Doubles({1}, {8})).Fetch(8, 5));
  ASSERT_THAT(reply.results(), SizeIs(1)) << reply.ShortDebugString();
  EXPECT_THAT(AsDoubles(reply.results(0).tensor()), ElementsAre(8));
}

TEST(ToGrpcStatusTest, MessageIsValidUtf8AndBounded) {
  grpc::Status bad = ToGrpcStatus(absl::InvalidArgumentError(
      "name '\xff\xfe' and \xc3\xa9 and a cut \xe2\x82"));
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad.error_message(),
            "name '?"
            "?' and \xc3\xa9 and a cut ?"
            "?");

  // Cut at a character boundary, saying how much was cut.
  std::string long_message;
  for (int i = 0; i < 10000; ++i) long_message += "\xc3\xa9";  // 20000 bytes
  grpc::Status cut = ToGrpcStatus(absl::InternalError(long_message), 101);
  EXPECT_EQ(cut.error_message(), absl::StrCat(long_message.substr(0, 100),
                                              "... (19900 more bytes cut)"));
  EXPECT_LE(
      ToGrpcStatus(absl::InternalError(long_message)).error_message().size(),
      kMaxCallMessageBytes + 40);

  v1::Error error;
  ToProto(absl::InternalError(long_message), &error);
  EXPECT_EQ(error.code(), static_cast<int>(grpc::StatusCode::INTERNAL));
  EXPECT_THAT(error.message(), HasSubstr("more bytes cut"));
  EXPECT_LE(error.message().size(), kMaxCommandMessageBytes + 40);
  v1::Error parsed;
  EXPECT_TRUE(parsed.ParseFromString(error.SerializeAsString()));
}

TEST(ConvertTest, TensorWithoutDataIsNotSerialised) {
  v1::TensorValue value;
  absl::Status status = ToProto(Tensor(), &value);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(status.message()), HasSubstr("has no data"));
  EXPECT_EQ(value.ByteSizeLong(), 0u);
  EXPECT_TRUE(ToProto(Tensor::Scalar<double>(2), &value).ok());
  EXPECT_EQ(value.dtype(), v1::DTYPE_FLOAT64);
  EXPECT_THAT(AsDoubles(value), ElementsAre(2));
}

}  // namespace
}  // namespace gradtape::server
