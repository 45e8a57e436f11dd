// End-to-end tests of gradtape-server over a real channel with the generated
// stubs: an in-process Server on 127.0.0.1, a free port.
#include "server/server.h"

#include <cmath>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/session/session.h"
#include "gmock/gmock.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/server/server_test_util.h"

namespace gradtape::server {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

TEST_F(ServerTest, CreateKeepAliveAndCloseSession) {
  SessionCreds creds = NewSession();
  EXPECT_THAT(creds.id, SizeIs(32));
  EXPECT_EQ(creds.id.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_GE(creds.token.size(), 32u);
  EXPECT_EQ(server_->num_sessions(), 1);
  EXPECT_EQ(KeepAlive(creds).error_code(), kOk);

  grpc::ClientContext context;
  SetDeadline(&context);
  Authorize(creds, &context);
  v1::CloseSessionResponse response;
  grpc::Status status =
      stub_->CloseSession(&context, v1::CloseSessionRequest(), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(server_->num_sessions(), 0);
  EXPECT_EQ(KeepAlive(creds).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServerTest, ClientProposedSessionId) {
  const std::string id = "0123456789abcdef0123456789abcdef";
  v1::CreateSessionRequest request;
  request.set_session_id(id);
  request.set_keep_alive_seconds(7);
  grpc::ClientContext context;
  SetDeadline(&context);
  context.AddMetadata("gradtape-session-id", id);
  v1::CreateSessionResponse response;
  ASSERT_TRUE(stub_->CreateSession(&context, request, &response).ok());
  EXPECT_EQ(response.session_id(), id);
  EXPECT_EQ(response.keep_alive_seconds(), 7);

  EXPECT_EQ(CreateSession(request, nullptr).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  for (const char* bad : {"0123", "0123456789ABCDEF0123456789ABCDEF",
                          "0123456789abcdef0123456789abcdeg",
                          "0123456789abcdef0123456789abcdef0"}) {
    request.set_session_id(bad);
    EXPECT_EQ(CreateSession(request, nullptr).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << bad;
  }
  // The routing header alone proposes the id; a different one is refused.
  {
    const std::string routed = "00000000000000000000000000000001";
    grpc::ClientContext header_only;
    SetDeadline(&header_only);
    header_only.AddMetadata("gradtape-session-id", routed);
    ASSERT_TRUE(
        stub_
            ->CreateSession(&header_only, v1::CreateSessionRequest(), &response)
            .ok());
    EXPECT_EQ(response.session_id(), routed);
    grpc::ClientContext mismatch;
    SetDeadline(&mismatch);
    mismatch.AddMetadata("gradtape-session-id", routed);
    request.set_session_id("00000000000000000000000000000002");
    EXPECT_EQ(stub_->CreateSession(&mismatch, request, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  request.set_session_id("");
  request.set_keep_alive_seconds(-1);
  EXPECT_EQ(CreateSession(request, nullptr).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(server_->num_sessions(), 2);
}

TEST_F(ServerTest, AuthFailures) {
  SessionCreds creds = NewSession();
  Batch batch;
  batch.Stats(1);
  v1::BatchReply reply;
  EXPECT_EQ(RunStatus(nullptr, batch, &reply).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  SessionCreds no_token{creds.id, ""};
  EXPECT_EQ(RunStatus(&no_token, batch, &reply).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  SessionCreds wrong_token = creds;
  wrong_token.token[0] = wrong_token.token[0] == 'a' ? 'b' : 'a';
  EXPECT_EQ(RunStatus(&wrong_token, batch, &reply).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(KeepAlive(wrong_token).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  SessionCreds unknown{"ffffffffffffffffffffffffffffffff", creds.token};
  EXPECT_EQ(RunStatus(&unknown, batch, &reply).error_code(),
            grpc::StatusCode::NOT_FOUND);

  // A Stream is authenticated when it opens.
  grpc::Status stream_status;
  std::vector<v1::BatchReply> replies =
      StreamBatches(wrong_token, {batch}, &stream_status);
  EXPECT_THAT(replies, SizeIs(0));
  EXPECT_EQ(stream_status.error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // The right credentials still work.
  EXPECT_THAT(Run(creds, batch).results(), SizeIs(1));
}

TEST_F(ServerTest, MaxSessions) {
  ServerOptions options;
  options.max_sessions = 2;
  StartServer(options);
  SessionCreds a = NewSession();
  NewSession();
  v1::CreateSessionRequest request;
  EXPECT_EQ(CreateSession(request, nullptr).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  grpc::ClientContext context;
  SetDeadline(&context);
  Authorize(a, &context);
  v1::CloseSessionResponse response;
  ASSERT_TRUE(
      stub_->CloseSession(&context, v1::CloseSessionRequest(), &response).ok());
  EXPECT_EQ(CreateSession(request, nullptr).error_code(), kOk);
}

TEST_F(ServerTest, PutFetchRoundTripEveryDType) {
  SessionCreds creds = NewSession();
  std::vector<v1::TensorValue> values = {
      Value<float>(v1::DTYPE_FLOAT32, {2, 2}, {1.5f, -2.f, 3.25f, 1e-7f}),
      Value<double>(v1::DTYPE_FLOAT64, {3}, {M_PI, -0.0, 1e300}),
      Value<int32_t>(v1::DTYPE_INT32, {1, 3}, {-7, 0, 2147483647}),
      Value<int64_t>(v1::DTYPE_INT64, {2}, {-(int64_t{1} << 62), 42}),
      Value<uint8_t>(v1::DTYPE_BOOL, {4}, {1, 0, 0, 1}),
      Value<double>(v1::DTYPE_FLOAT64, {}, {2.5}),  // scalar
      Value<float>(v1::DTYPE_FLOAT32, {0, 3}, {}),  // empty
  };
  Batch batch;
  for (size_t i = 0; i < values.size(); ++i) {
    batch.Put(2 * i + 1, 100 + i, values[i]).Fetch(2 * i + 2, 100 + i);
  }
  v1::BatchReply reply = Run(creds, batch);
  ASSERT_THAT(reply.results(), SizeIs(values.size()));
  EXPECT_EQ(reply.last_seq(), static_cast<int64_t>(2 * values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    const v1::CommandResult& result = reply.results(i);
    EXPECT_EQ(result.seq(), static_cast<int64_t>(2 * i + 2));
    ASSERT_EQ(result.kind_case(), v1::CommandResult::kTensor)
        << result.ShortDebugString();
    EXPECT_EQ(result.tensor().SerializeAsString(),
              values[i].SerializeAsString())
        << "dtype " << values[i].dtype();
  }
}

TEST_F(ServerTest, BadPutIsPerCommandError) {
  SessionCreds creds = NewSession();
  v1::TensorValue short_data = Doubles({2, 2}, {1, 2, 3});
  v1::TensorValue no_dtype = Doubles({1}, {1});
  no_dtype.set_dtype(v1::DTYPE_INVALID);
  v1::TensorValue bad_dtype = Doubles({1}, {1});
  bad_dtype.set_dtype(static_cast<v1::DType>(42));
  Batch batch;
  batch.Put(1, 1, short_data)
      .Put(2, 2, no_dtype)
      .Put(3, 3, bad_dtype)
      .Fetch(4, 1);
  v1::BatchReply reply = Run(creds, batch);
  ASSERT_THAT(reply.results(), SizeIs(4));
  for (int seq = 1; seq <= 3; ++seq) {
    EXPECT_EQ(reply.results(seq - 1).error().code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_THAT(reply.results(0).error().message(), HasSubstr("32 bytes"));
  // The failed put poisoned its id.
  EXPECT_EQ(reply.results(3).error().code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

// x [2,3], w [3,2]: e = exp(x @ w / 10), s = sum(e); fetches e and s.
TEST_F(ServerTest, OpChainOverStreamAndRunAgree) {
  auto chain = [](int part) {
    Batch batch(part);
    if (part == 0) {
      batch.Put(1, 1, Doubles({2, 3}, {1, 2, 3, 4, 5, 6}))
          .Put(2, 2, Doubles({3, 2}, {0.1, -0.2, 0.3, 0.4, -0.5, 0.6}))
          .Put(3, 3, Doubles({}, {10}));
    } else if (part == 1) {
      batch.Exec(4, "MatMul", {1, 2}, {4})
          .Exec(5, "RealDiv", {4, 3}, {5})
          .Exec(6, "Exp", {5}, {6});
    } else {
      batch.Exec(7, "Sum", {6}, {7}).Fetch(8, 6).Fetch(9, 7);
    }
    return batch;
  };
  SessionCreds run_session = NewSession();
  std::vector<v1::BatchReply> run_replies;
  for (int part = 0; part < 3; ++part) {
    run_replies.push_back(Run(run_session, chain(part)));
  }
  SessionCreds stream_session = NewSession();
  grpc::Status status;
  std::vector<v1::BatchReply> stream_replies =
      StreamBatches(stream_session, {chain(0), chain(1), chain(2)}, &status);
  EXPECT_TRUE(status.ok()) << status.error_message();
  ASSERT_THAT(stream_replies, SizeIs(3));
  for (int part = 0; part < 3; ++part) {
    EXPECT_EQ(stream_replies[part].batch_id(), part);
    EXPECT_EQ(stream_replies[part].SerializeAsString(),
              run_replies[part].SerializeAsString())
        << stream_replies[part].ShortDebugString() << "\nvs\n"
        << run_replies[part].ShortDebugString();
  }
  const v1::BatchReply& last = run_replies[2];
  EXPECT_EQ(last.last_seq(), 9);
  ASSERT_THAT(last.results(), SizeIs(2));
  // x @ w = [[-0.8, 2.4], [-1.1, 4.8]].
  std::vector<double> e = AsDoubles(last.results(0).tensor());
  std::vector<double> expected = {std::exp(-0.08), std::exp(0.24),
                                  std::exp(-0.11), std::exp(0.48)};
  ASSERT_THAT(e, SizeIs(4));
  double sum = 0;
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(e[i], expected[i], 1e-12);
    sum += expected[i];
  }
  EXPECT_THAT(last.results(0).tensor().shape(), ElementsAre(2, 2));
  EXPECT_NEAR(AsDoubles(last.results(1).tensor())[0], sum, 1e-12);
}

TEST_F(ServerTest, GradientReturnsValues) {
  SessionCreds creds = NewSession();
  Batch batch;
  batch.Put(1, 1, Doubles({3}, {1, -2, 3.5}))
      .PushTape(2, 1)
      .Watch(3, 1, {1})
      .Exec(4, "Mul", {1, 1}, {2})
      .Exec(5, "Sum", {2}, {3})
      .Gradient(6, 1, {3}, {1}, {4}, /*return_values=*/true)
      .Fetch(7, 4);
  v1::BatchReply reply = Run(creds, batch);
  ASSERT_THAT(reply.results(), SizeIs(2)) << reply.ShortDebugString();
  const v1::CommandResult* grad = Find(reply, 6);
  ASSERT_NE(grad, nullptr);
  ASSERT_EQ(grad->kind_case(), v1::CommandResult::kGradient)
      << grad->ShortDebugString();
  ASSERT_THAT(grad->gradient().values(), SizeIs(1));
  EXPECT_THAT(grad->gradient().is_none(), ElementsAre(false));
  EXPECT_THAT(AsDoubles(grad->gradient().values(0)), ElementsAre(2, -4, 7));
  const v1::CommandResult* fetched = Find(reply, 7);
  ASSERT_NE(fetched, nullptr);
  EXPECT_THAT(AsDoubles(fetched->tensor()), ElementsAre(2, -4, 7));
}

TEST_F(ServerTest, UnconnectedGradientIsNone) {
  SessionCreds creds = NewSession();
  Batch batch;
  batch.Put(1, 1, Doubles({2}, {1, 2}))
      .Put(2, 2, Doubles({2}, {3, 4}))
      .PushTape(3, 1)
      .Watch(4, 1, {1, 2})
      .Exec(5, "Exp", {1}, {3})
      .Gradient(6, 1, {3}, {1, 2}, {4, 5}, /*return_values=*/true);
  v1::BatchReply reply = Run(creds, batch);
  const v1::CommandResult* grad = Find(reply, 6);
  ASSERT_NE(grad, nullptr);
  ASSERT_EQ(grad->kind_case(), v1::CommandResult::kGradient)
      << grad->ShortDebugString();
  EXPECT_THAT(grad->gradient().is_none(), ElementsAre(false, true));
  EXPECT_THAT(AsDoubles(grad->gradient().values(0)),
              ElementsAre(DoubleNear(std::exp(1.0), 1e-12),
                          DoubleNear(std::exp(2.0), 1e-12)));
}

TEST_F(ServerTest, ShapeMismatchPoisonsAndSessionKeepsWorking) {
  SessionCreds creds = NewSession();
  Batch batch;
  batch.Put(1, 1, Doubles({2, 3}, {1, 2, 3, 4, 5, 6}))
      .Put(2, 2, Doubles({4, 5}, std::vector<double>(20, 1.0)))
      .Exec(17, "MatMul", {1, 2}, {3})
      .Exec(18, "Exp", {3}, {4})
      .Exec(19, "Neg", {1}, {5})
      .Fetch(20, 5);
  v1::BatchReply reply = Run(creds, batch);
  EXPECT_EQ(reply.last_seq(), 20);
  ASSERT_THAT(reply.results(), SizeIs(3)) << reply.ShortDebugString();

  const v1::CommandResult* matmul = Find(reply, 17);
  ASSERT_NE(matmul, nullptr);
  EXPECT_EQ(matmul->error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(matmul->error().message(), HasSubstr("MatMul"));
  EXPECT_THAT(matmul->error().message(), HasSubstr("17"));
  EXPECT_THAT(matmul->error().message(), HasSubstr("[2,3]"));
  EXPECT_THAT(matmul->error().message(), HasSubstr("[4,5]"));

  const v1::CommandResult* exp = Find(reply, 18);
  ASSERT_NE(exp, nullptr);
  EXPECT_EQ(exp->error().code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(exp->error().message(), HasSubstr("Exp"));
  EXPECT_THAT(exp->error().message(), HasSubstr("18"));
  EXPECT_THAT(exp->error().message(), HasSubstr("MatMul (command 17"));

  const v1::CommandResult* fetched = Find(reply, 20);
  ASSERT_NE(fetched, nullptr);
  EXPECT_THAT(AsDoubles(fetched->tensor()),
              ElementsAre(-1, -2, -3, -4, -5, -6));

  // A later batch, too.
  Batch later;
  later.Exec(21, "MatMul", {1, 1}, {6}, {{"transpose_b", BoolAttr(true)}})
      .Fetch(22, 6);
  v1::BatchReply later_reply = Run(creds, later);
  ASSERT_THAT(later_reply.results(), SizeIs(1));
  EXPECT_THAT(AsDoubles(later_reply.results(0).tensor()),
              ElementsAre(14, 32, 32, 77));
}

TEST_F(ServerTest, PerCommandErrorCodes) {
  SessionCreds creds = NewSession();
  Batch batch;
  batch.Put(1, 1, Doubles({2}, {1, 2}))
      .Exec(2, "NoSuchOp", {1}, {2})
      .Exec(3, "Exp", {999}, {3})
      .Exec(4, "Exp", {1}, {1})
      .Empty(5)
      .Fetch(6, 12345)
      .Exec(7, "Exp", {1}, {7})
      .Fetch(8, 7);
  v1::BatchReply reply = Run(creds, batch);
  ASSERT_THAT(reply.results(), SizeIs(6)) << reply.ShortDebugString();
  struct Expected {
    int64_t seq;
    grpc::StatusCode code;
    std::string text;
  };
  for (const Expected& e : std::vector<Expected>{
           {2, grpc::StatusCode::NOT_FOUND, "NoSuchOp"},
           {3, grpc::StatusCode::NOT_FOUND, "999"},
           {4, grpc::StatusCode::ALREADY_EXISTS, "output id 1"},
           {5, grpc::StatusCode::INVALID_ARGUMENT, "command 5"},
           {6, grpc::StatusCode::NOT_FOUND, "12345"}}) {
    const v1::CommandResult* result = Find(reply, e.seq);
    ASSERT_NE(result, nullptr);
    EXPECT_EQ(result->error().code(), e.code) << result->ShortDebugString();
    EXPECT_THAT(result->error().message(), HasSubstr(e.text));
  }
  const v1::CommandResult* fetched = Find(reply, 8);
  ASSERT_NE(fetched, nullptr);
  EXPECT_THAT(AsDoubles(fetched->tensor()),
              ElementsAre(DoubleNear(std::exp(1.0), 1e-12),
                          DoubleNear(std::exp(2.0), 1e-12)));
}

TEST_F(ServerTest, MemoryLimitThenRelease) {
  ServerOptions options;
  options.session_memory_limit_bytes = 5000;
  StartServer(options);
  SessionCreds creds = NewSession();
  // 256 float64 = 2048 bytes per tensor: two fit, three do not.
  Batch batch;
  batch.Put(1, 1, Doubles({256}, std::vector<double>(256, 0.5)))
      .Exec(2, "Exp", {1}, {2})
      .Exec(3, "Exp", {2}, {3})
      .Stats(4);
  v1::BatchReply reply = Run(creds, batch);
  ASSERT_THAT(reply.results(), SizeIs(2)) << reply.ShortDebugString();
  const v1::CommandResult* exhausted = Find(reply, 3);
  ASSERT_NE(exhausted, nullptr);
  EXPECT_EQ(exhausted->error().code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(exhausted->error().message(), HasSubstr("limit 5000"));
  const v1::CommandResult* stats = Find(reply, 4);
  ASSERT_NE(stats, nullptr);
  EXPECT_EQ(stats->stats().live_tensors(), 2);
  EXPECT_EQ(stats->stats().poisoned_ids(), 1);
  // Two tensors, three ids' slots and the poisoned id's shared reason.
  const int64_t two =
      2 * (gradtape::ChargedBytes(2048) + gradtape::Session::kSlotBytes);
  EXPECT_GT(stats->stats().bytes_in_use(), two + gradtape::Session::kSlotBytes);
  EXPECT_LT(stats->stats().bytes_in_use(),
            two + gradtape::Session::kSlotBytes + 2048);

  Batch after;
  after.Release(5, {1, 3}).Exec(6, "Exp", {2}, {4}).Fetch(7, 4).Stats(8);
  v1::BatchReply after_reply = Run(creds, after);
  ASSERT_THAT(after_reply.results(), SizeIs(2))
      << after_reply.ShortDebugString();
  std::vector<double> values = AsDoubles(Find(after_reply, 7)->tensor());
  ASSERT_THAT(values, SizeIs(256));
  EXPECT_NEAR(values[0], std::exp(std::exp(0.5)), 1e-12);
  EXPECT_EQ(Find(after_reply, 8)->stats().bytes_in_use(), two);
}

TEST_F(ServerTest, IdleSessionIsReaped) {
  SessionCreds idle = NewSession(/*keep_alive_seconds=*/1);
  SessionCreds kept = NewSession(/*keep_alive_seconds=*/1);
  const absl::Time start = absl::Now();
  // Poll through the server, not through calls (a call refreshes the lease).
  while (server_->num_sessions() == 2 &&
         absl::Now() - start < absl::Seconds(5)) {
    ASSERT_EQ(KeepAlive(kept).error_code(), kOk);
    absl::SleepFor(absl::Milliseconds(250));
  }
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Seconds(1));
  EXPECT_LT(waited, absl::Seconds(3));
  EXPECT_EQ(server_->num_sessions(), 1);
  EXPECT_EQ(KeepAlive(idle).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(KeepAlive(kept).error_code(), kOk);
}

TEST_F(ServerTest, StreamEndsWhenItsSessionCloses) {
  SessionCreds creds = NewSession();
  grpc::ClientContext context;
  SetDeadline(&context);
  Authorize(creds, &context);
  auto stream = stub_->Stream(&context);
  Batch first(1);
  first.Put(1, 1, Doubles({1}, {1}));
  ASSERT_TRUE(stream->Write(first.proto()));
  v1::BatchReply reply;
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_EQ(reply.batch_id(), 1);
  EXPECT_EQ(reply.last_seq(), 1);

  grpc::ClientContext close_context;
  SetDeadline(&close_context);
  Authorize(creds, &close_context);
  v1::CloseSessionResponse close_response;
  ASSERT_TRUE(stub_
                  ->CloseSession(&close_context, v1::CloseSessionRequest(),
                                 &close_response)
                  .ok());

  Batch second(2);
  second.Fetch(2, 1);
  stream->Write(second.proto());
  EXPECT_FALSE(stream->Read(&reply));
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("closed"));
}

TEST_F(ServerTest, CancelledStreamLeavesSessionUsable) {
  SessionCreds creds = NewSession();
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    Authorize(creds, &context);
    auto stream = stub_->Stream(&context);
    // Replies pile up unread, then the client cancels.
    for (int i = 1; i <= 20; ++i) {
      Batch batch(i);
      batch.Put(i, i, Doubles({64}, std::vector<double>(64, i))).Fetch(i, i);
      if (!stream->Write(batch.proto())) break;
    }
    context.TryCancel();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  Batch batch;
  batch.Put(100, 100, Doubles({1}, {7})).Fetch(101, 100);
  v1::BatchReply reply = Run(creds, batch);
  ASSERT_THAT(reply.results(), SizeIs(1));
  EXPECT_THAT(AsDoubles(reply.results(0).tensor()), ElementsAre(7));
}

TEST_F(ServerTest, ShutdownEndsOpenStreams) {
  SessionCreds creds = NewSession();
  grpc::ClientContext context;
  SetDeadline(&context);
  Authorize(creds, &context);
  auto stream = stub_->Stream(&context);
  Batch batch(1);
  batch.Put(1, 1, Doubles({1}, {1}));
  ASSERT_TRUE(stream->Write(batch.proto()));
  v1::BatchReply reply;
  ASSERT_TRUE(stream->Read(&reply));
  const absl::Time start = absl::Now();
  server_->Shutdown();  // the stream stays open: cancelled after the grace
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_FALSE(stream->Finish().ok());
}

TEST_F(ServerTest, ManyPipelinedBatchesKeepOrder) {
  SessionCreds creds = NewSession();
  std::vector<Batch> batches;
  batches.emplace_back(0);
  batches.back().Put(1, 1, Doubles({}, {0}));
  batches.back().Put(2, 2, Doubles({}, {1}));
  // Each batch adds one to a running counter; 100 batches > the queue bound.
  for (int i = 1; i <= 100; ++i) {
    Batch batch(i);
    int64_t prev = i == 1 ? 1 : 1000 + i - 1;
    batch.Exec(10 * i, "AddV2", {prev, 2}, {1000 + i})
        .Fetch(10 * i + 1, 1000 + i);
    batches.push_back(std::move(batch));
  }
  grpc::Status status;
  std::vector<v1::BatchReply> replies = StreamBatches(creds, batches, &status);
  EXPECT_TRUE(status.ok()) << status.error_message();
  ASSERT_THAT(replies, SizeIs(101));
  for (int i = 1; i <= 100; ++i) {
    EXPECT_EQ(replies[i].batch_id(), i);
    EXPECT_EQ(replies[i].last_seq(), 10 * i + 1);
    ASSERT_THAT(replies[i].results(), SizeIs(1));
    EXPECT_EQ(AsDoubles(replies[i].results(0).tensor())[0], i);
  }
}

TEST_F(ServerTest, ReplyOptionalBatchesAreAnsweredOnlyWithResults) {
  SessionCreds creds = NewSession();
  std::vector<Batch> batches;
  // 1: reply_optional, no result: no reply.
  batches.push_back(
      std::move(Batch(1).Put(1, 1, Doubles({}, {2})).ReplyOptional()));
  // 2: reply_optional with a fetched value: answered.
  batches.push_back(std::move(
      Batch(2).Exec(2, "AddV2", {1, 1}, {2}).Fetch(3, 2).ReplyOptional()));
  // 3: reply_optional, no result: no reply.
  batches.push_back(
      std::move(Batch(3).Exec(4, "Mul", {2, 2}, {3}).ReplyOptional()));
  // 4: reply_optional with an error (input 99 does not exist): answered.
  batches.push_back(
      std::move(Batch(4).Exec(5, "Neg", {99}, {4}).ReplyOptional()));
  // 5, 6: reply_optional, no result, then an ordinary empty batch:
  // the reply to 6 acknowledges 5.
  batches.push_back(std::move(Batch(5).Release(6, {1}).ReplyOptional()));
  batches.emplace_back(6);
  grpc::Status status;
  std::vector<v1::BatchReply> replies = StreamBatches(creds, batches, &status);
  EXPECT_TRUE(status.ok()) << status.error_message();
  ASSERT_THAT(replies, SizeIs(3));
  EXPECT_EQ(replies[0].batch_id(), 2);
  ASSERT_THAT(replies[0].results(), SizeIs(1));
  EXPECT_EQ(AsDoubles(replies[0].results(0).tensor())[0], 4);
  EXPECT_EQ(replies[1].batch_id(), 4);
  ASSERT_THAT(replies[1].results(), SizeIs(1));
  EXPECT_EQ(replies[1].results(0).seq(), 5);
  EXPECT_TRUE(replies[1].results(0).has_error());
  EXPECT_EQ(replies[2].batch_id(), 6);
  EXPECT_EQ(replies[2].last_seq(), 6);
  EXPECT_THAT(replies[2].results(), SizeIs(0));
  // Every unanswered batch was applied: 3 = 4 * 4 lives, 1 was released.
  Batch check;
  check.Fetch(7, 3).Stats(8);
  v1::BatchReply reply = Run(creds, check);
  ASSERT_THAT(reply.results(), SizeIs(2));
  EXPECT_EQ(AsDoubles(reply.results(0).tensor())[0], 16);
  EXPECT_EQ(reply.results(1).stats().live_tensors(), 2);
}

TEST_F(ServerTest, RunAnswersReplyOptionalBatches) {
  SessionCreds creds = NewSession();
  v1::BatchReply reply = Run(
      creds, std::move(Batch(7).Put(1, 1, Doubles({}, {2})).ReplyOptional()));
  EXPECT_EQ(reply.batch_id(), 7);
  EXPECT_EQ(reply.last_seq(), 1);
  EXPECT_THAT(reply.results(), SizeIs(0));
}

TEST_F(ServerTest, ConcurrentRunsOnOneSessionAreSerialized) {
  // Threads that race on one session cannot keep its seqs increasing in
  // arrival order: an unsequenced session applies them all.
  v1::CreateSessionRequest request;
  request.set_unsequenced(true);
  SessionCreds creds;
  ASSERT_TRUE(CreateSession(request, &creds).ok());
  constexpr int kThreads = 4, kBatches = 20;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int b = 0; b < kBatches; ++b) {
        int64_t id = 1 + t * kBatches + b;
        Batch batch;
        batch.Put(id, id, Doubles({2}, {1, 2}));
        v1::BatchReply reply = Run(creds, batch);
        EXPECT_THAT(reply.results(), SizeIs(0));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  Batch stats;
  stats.Stats(1000);
  v1::BatchReply reply = Run(creds, stats);
  ASSERT_THAT(reply.results(), SizeIs(1));
  EXPECT_EQ(reply.results(0).stats().live_tensors(), kThreads * kBatches);
}

TEST_F(ServerTest, ListOpsHasElisionInfo) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ListOpsResponse response;
  ASSERT_TRUE(stub_->ListOps(&context, v1::ListOpsRequest(), &response).ok());
  const v1::OpInfo* matmul = nullptr;
  const v1::OpInfo* exp = nullptr;
  for (const v1::OpInfo& op : response.ops()) {
    if (op.name() == "MatMul") matmul = &op;
    if (op.name() == "Exp") exp = &op;
  }
  ASSERT_NE(matmul, nullptr);
  ASSERT_NE(exp, nullptr);
  EXPECT_THAT(matmul->saved_inputs(), ElementsAre(0, 1));
  EXPECT_THAT(matmul->saved_outputs(), ElementsAre());
  EXPECT_TRUE(matmul->differentiable());
  EXPECT_THAT(matmul->input_names(), SizeIs(2));
  bool has_transpose_a = false;
  for (const v1::AttrDef& attr : matmul->attrs()) {
    if (attr.name() != "transpose_a") continue;
    has_transpose_a = true;
    EXPECT_EQ(attr.type(), "bool");
    EXPECT_FALSE(attr.required());
    EXPECT_EQ(attr.default_value().value_case(), v1::AttrValue::kB);
    EXPECT_FALSE(attr.default_value().b());
  }
  EXPECT_TRUE(has_transpose_a);
  EXPECT_THAT(exp->saved_inputs(), ElementsAre());
  EXPECT_THAT(exp->saved_outputs(), ElementsAre(0));
}

TEST_F(ServerTest, ListOpsDeclaresListArguments) {
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ListOpsResponse response;
  ASSERT_TRUE(stub_->ListOps(&context, v1::ListOpsRequest(), &response).ok());
  const v1::OpInfo* concat = nullptr;
  const v1::OpInfo* split = nullptr;
  const v1::OpInfo* exp = nullptr;
  for (const v1::OpInfo& op : response.ops()) {
    if (op.name() == "ConcatV2") concat = &op;
    if (op.name() == "Split") split = &op;
    if (op.name() == "Exp") exp = &op;
  }
  ASSERT_NE(concat, nullptr);
  ASSERT_NE(split, nullptr);
  ASSERT_NE(exp, nullptr);
  // ConcatV2(values: N * T, axis): declared positions, list at 0.
  ASSERT_TRUE(concat->has_list_input());
  EXPECT_EQ(concat->list_input().index(), 0);
  EXPECT_EQ(concat->list_input().length_attr(), "N");
  EXPECT_EQ(concat->list_input().min_length(), 2);
  EXPECT_FALSE(concat->has_list_output());
  EXPECT_THAT(concat->input_names(), ElementsAre("values", "axis"));
  EXPECT_THAT(concat->saved_inputs(), ElementsAre(1));
  EXPECT_THAT(concat->non_differentiable_inputs(), ElementsAre(1));
  // Split(split_dim, value) -> num_split * T, dtype of value.
  EXPECT_FALSE(split->has_list_input());
  ASSERT_TRUE(split->has_list_output());
  EXPECT_EQ(split->list_output().length_attr(), "num_split");
  EXPECT_EQ(split->list_output().min_length(), 1);
  ASSERT_THAT(split->output_dtypes(), SizeIs(1));
  EXPECT_EQ(split->output_dtypes(0).same_as_input(), 1);
  EXPECT_FALSE(exp->has_list_input());
  EXPECT_FALSE(exp->has_list_output());
}

TEST_F(ServerTest, HealthCheckServing) {
  // grpc.health.v1.Health/Check with an empty HealthCheckRequest (service
  // ""); the reply HealthCheckResponse{status: SERVING} is field 1 = 1.
  grpc::GenericStub stub(channel_);
  grpc::ClientContext context;
  SetDeadline(&context);
  grpc::ByteBuffer request, response;
  grpc::Slice empty;
  request = grpc::ByteBuffer(&empty, 1);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response,
                 [&done](grpc::Status status) { done.set_value(status); });
  grpc::Status status = done.get_future().get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

TEST_F(ServerTest, ShutdownIsIdempotentAndRefusesCalls) {
  SessionCreds creds = NewSession();
  server_->Shutdown();
  server_->Shutdown();
  EXPECT_EQ(server_->num_sessions(), 0);
  grpc::ClientContext context;
  context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Milliseconds(500)));
  Authorize(creds, &context);
  v1::KeepAliveResponse response;
  EXPECT_FALSE(
      stub_->KeepAlive(&context, v1::KeepAliveRequest(), &response).ok());
}

}  // namespace
}  // namespace gradtape::server
