// The C++ client against a real server on loopback: results match the core
// run in-process, errors surface at wait points with the server's code and
// message, batches pipeline, handles release, tapes behave like
// TensorFlow's.
#include "gradtape/client/client.h"

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/examples/mlp.h"
#include "core/registry/op_registry.h"
#include "core/session/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/client/core_mlp.h"
#include "tests/client/loopback_session_test.h"

namespace gradtape::client {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using ClientTest = LoopbackSessionTest;

TapeOptions Persistent() {
  TapeOptions options;
  options.persistent = true;
  return options;
}

std::vector<double> RandomValues(int64_t n, std::mt19937_64& gen) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = u(gen);
  return v;
}

TEST_F(ClientTest, ConnectGivesA128BitHexSessionId) {
  EXPECT_EQ(session_->id().size(), 32u);
  EXPECT_EQ(session_->id().find_first_not_of("0123456789abcdef"),
            std::string::npos);
  EXPECT_GT(session_->keep_alive_seconds(), 0);
  EXPECT_TRUE(session_->KeepAlive().ok());
}

TEST_F(ClientTest, ConnectToNothingFailsWithinTheTimeout) {
  SessionOptions options;
  options.rpc_timeout = absl::Milliseconds(300);
  // Port 1 on loopback: nothing listens there.
  absl::StatusOr<std::unique_ptr<Session>> s =
      Session::Connect("127.0.0.1:1", options);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("CreateSession"));
}

TEST_F(ClientTest, PutFetchRoundTripsEveryDtype) {
  const Tensor f = session_->Put<float>({2, 2}, {1.5f, -2, 3, 4});
  const Tensor d = session_->Put<double>({3}, {0.1, 0.2, 0.3});
  const Tensor i = session_->Put<int32_t>({2}, {7, -8});
  const Tensor l = session_->Put<int64_t>({}, {int64_t{1} << 40});
  absl::StatusOr<HostTensor> fv = session_->Fetch(f);
  ASSERT_TRUE(fv.ok()) << fv.status();
  EXPECT_EQ(fv->dtype, DType::kFloat32);
  EXPECT_EQ(fv->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(fv->ToDoubles(), (std::vector<double>{1.5, -2, 3, 4}));
  EXPECT_EQ(FetchValues(d), (std::vector<double>{0.1, 0.2, 0.3}));
  EXPECT_EQ(FetchValues(i), (std::vector<double>{7, -8}));
  EXPECT_EQ(FetchValues(l), (std::vector<double>{1099511627776.0}));
}

TEST_F(ClientTest, TypedOpsComputeOnTheServer) {
  const Tensor a = session_->Put<double>({2, 2}, {1, 2, 3, 4});
  const Tensor b = session_->Put<double>({2, 2}, {5, 6, 7, 8});
  EXPECT_EQ(FetchValues(a + b), (std::vector<double>{6, 8, 10, 12}));
  EXPECT_EQ(FetchValues(b - a), (std::vector<double>{4, 4, 4, 4}));
  EXPECT_EQ(FetchValues(a * b), (std::vector<double>{5, 12, 21, 32}));
  EXPECT_EQ(FetchValues(-a), (std::vector<double>{-1, -2, -3, -4}));
  EXPECT_EQ(FetchValues(MatMul(a, b)), (std::vector<double>{19, 22, 43, 50}));
  EXPECT_EQ(FetchValues(MatMul(a, b, /*transpose_a=*/true)),
            (std::vector<double>{26, 30, 38, 44}));
  EXPECT_EQ(FetchValues(Sum(a, {1})), (std::vector<double>{3, 7}));
  EXPECT_EQ(FetchValues(Mean(a)), (std::vector<double>{2.5}));
  EXPECT_EQ(FetchValues(Transpose(a, {1, 0})),
            (std::vector<double>{1, 3, 2, 4}));
  absl::StatusOr<HostTensor> r = session_->Fetch(Reshape(a, {4, 1}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape, (std::vector<int64_t>{4, 1}));
  absl::StatusOr<HostTensor> c = session_->Fetch(Cast(a, DType::kInt32));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->dtype, DType::kInt32);
  EXPECT_EQ(FetchValues(OnesLike(a)), (std::vector<double>{1, 1, 1, 1}));
  const std::vector<double> s = FetchValues(Softmax(a));
  ASSERT_EQ(s.size(), 4u);
  EXPECT_NEAR(s[0] + s[1], 1.0, 1e-12);
  // The generic entry point with explicit attrs.
  std::vector<Tensor> out =
      session_->Execute("Sum", {a}, {{"axis", {0}}, {"keep_dims", true}});
  absl::StatusOr<HostTensor> sum = session_->Fetch(out[0]);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(sum->ToDoubles(), (std::vector<double>{4, 6}));
}

TEST_F(ClientTest, ListOpsTakeAndReturnLists) {
  const Tensor a = session_->Put<double>({2, 2}, {1, 2, 3, 4});
  const Tensor b = session_->Put<double>({2, 1}, {5, 6});
  const Tensor one = session_->Put<int32_t>({}, {1});
  const Tensor zero = session_->Put<int32_t>({}, {0});
  const Tensor ab[] = {a, b, a};
  // [[1, 2, 5, 1, 2], [3, 4, 6, 3, 4]]
  EXPECT_EQ(FetchValues(ConcatV2(ab, one)),
            (std::vector<double>{1, 2, 5, 1, 2, 3, 4, 6, 3, 4}));
  const Tensor aa[] = {a, a};
  absl::StatusOr<HostTensor> p = session_->Fetch(Pack(aa, 1));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->shape, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(p->ToDoubles(), (std::vector<double>{1, 2, 1, 2, 3, 4, 3, 4}));
  std::vector<Tensor> cols = Unpack(a, 2, /*axis=*/1);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(FetchValues(cols[1]), (std::vector<double>{2, 4}));
  std::vector<Tensor> rows = Split(zero, a, 2);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(FetchValues(rows[1]), (std::vector<double>{3, 4}));
  const Tensor sizes = session_->Put<int32_t>({2}, {-1, 1});
  std::vector<Tensor> parts = SplitV(a, sizes, one, 2);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(FetchValues(parts[0]), (std::vector<double>{1, 3}));
}

// The same MLP, loss and gradients through the server and in-process with
// the core.
TEST_F(ClientTest, MlpLossAndGradientsMatchTheCoreInProcess) {
  constexpr int64_t kBatch = 8, kIn = 3, kHidden = 5, kClasses = 4;
  std::mt19937_64 gen(42);
  const std::vector<double> x = RandomValues(kBatch * kIn, gen);
  const std::vector<double> w1 = RandomValues(kIn * kHidden, gen);
  const std::vector<double> b1 = RandomValues(kHidden, gen);
  const std::vector<double> w2 = RandomValues(kHidden * kClasses, gen);
  const std::vector<double> b2 = RandomValues(kClasses, gen);
  const std::vector<int32_t> labels = {0, 1, 2, 3, 3, 2, 1, 0};

  // Through the client.
  std::vector<double> client_loss;
  std::vector<std::vector<double>> client_grads;
  {
    const Tensor tx = session_->Put<double>({kBatch, kIn}, x);
    const Tensor ty = session_->Put<int32_t>({kBatch}, labels);
    const std::vector<Tensor> params = {
        session_->Put<double>({kIn, kHidden}, w1),
        session_->Put<double>({kHidden}, b1),
        session_->Put<double>({kHidden, kClasses}, w2),
        session_->Put<double>({kClasses}, b2)};
    GradientTape tape(*session_);
    tape.Watch(params);
    const Tensor hidden = Tanh(BiasAdd(MatMul(tx, params[0]), params[1]));
    const Tensor logits = BiasAdd(MatMul(hidden, params[2]), params[3]);
    const Tensor loss =
        Mean(SparseSoftmaxCrossEntropyWithLogits(logits, ty).loss);
    tape.Stop();
    absl::StatusOr<std::vector<std::optional<HostTensor>>> grads =
        tape.GradientValues(loss, params);
    ASSERT_TRUE(grads.ok()) << grads.status();
    for (const std::optional<HostTensor>& g : *grads) {
      ASSERT_TRUE(g.has_value());
      client_grads.push_back(g->ToDoubles());
    }
    client_loss = FetchValues(loss);
  }

  // In-process, same ops and inputs, with the core's session.
  absl::StatusOr<testing::MlpResult> core = testing::CoreMlp(
      {kBatch, kIn, kHidden, kClasses, x, w1, b1, w2, b2, labels});
  ASSERT_TRUE(core.ok()) << core.status();

  ASSERT_EQ(client_loss.size(), 1u);
  EXPECT_NEAR(client_loss[0], core->loss, 1e-6);
  EXPECT_GT(client_loss[0], 0.0);
  ASSERT_EQ(client_grads.size(), core->grads.size());
  for (size_t i = 0; i < client_grads.size(); ++i) {
    const std::vector<double>& g = core->grads[i];
    ASSERT_EQ(client_grads[i].size(), g.size()) << "gradient " << i;
    double norm = 0;
    for (size_t j = 0; j < g.size(); ++j) {
      EXPECT_NEAR(client_grads[i][j], g[j], 1e-6)
          << "gradient " << i << " element " << j;
      norm += std::abs(g[j]);
    }
    EXPECT_GT(norm, 0.0) << "gradient " << i << " is all zeros";
  }
}

TEST_F(ClientTest, ShapeErrorSurfacesAtTheNextWaitPointAndPoisons) {
  const Tensor a = session_->Put<double>({2, 3}, std::vector<double>(6, 1.0));
  const Tensor b = session_->Put<double>({4, 5}, std::vector<double>(20, 1.0));
  const Tensor c = MatMul(a, b);  // returns at once: no round trip
  const int64_t matmul_seq = session_->last_seq();

  absl::Status s = session_->Sync();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("MatMul"),
                    HasSubstr(absl::StrCat("command ", matmul_seq)),
                    HasSubstr("[2,3]"), HasSubstr("[4,5]")));
  // Reported once.
  EXPECT_TRUE(session_->Sync().ok());

  // Using the poisoned output fails, quoting the first failure.
  const Tensor d = c + c;
  const int64_t add_seq = session_->last_seq();
  s = session_->Sync();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(
      s.message(),
      AllOf(HasSubstr(absl::StrCat("command ", add_seq)), HasSubstr("MatMul"),
            HasSubstr(absl::StrCat("command ", matmul_seq))));
  // Fetching either fails too.
  EXPECT_EQ(session_->Fetch(d).status().code(),
            absl::StatusCode::kFailedPrecondition);

  // The session keeps working.
  EXPECT_EQ(FetchValues(MatMul(a, Transpose(a))),
            (std::vector<double>{3, 3, 3, 3}));
  EXPECT_TRUE(session_->Sync().ok());
}

TEST_F(ClientTest, FetchReportsAnEarlierErrorFirst) {
  const Tensor a = session_->Put<double>({2}, {1, 2});
  const Tensor bad = session_->Execute("NoSuchOp", {a})[0];
  const int64_t bad_seq = session_->last_seq();
  absl::StatusOr<HostTensor> v = session_->Fetch(a);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(),
              AllOf(HasSubstr("NoSuchOp"),
                    HasSubstr(absl::StrCat("command ", bad_seq))));
  // The error was reported; fetching again works.
  EXPECT_EQ(FetchValues(a), (std::vector<double>{1, 2}));
}

TEST_F(ClientTest, NullHandlesAreRejectedNamingTheOp) {
  const Tensor a = session_->Put<double>({2}, {1, 2});
  const Tensor out = session_->Execute("AddV2", {a, Tensor()})[0];
  absl::Status s = session_->Sync();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("AddV2"), HasSubstr("null")));
  // Its output is poisoned on the server.
  EXPECT_EQ(session_->Fetch(out).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(session_->Fetch(Tensor()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Flush sends reply_optional batches; a wait right after one (nothing new
// buffered) must still get the reply that acknowledges it, and an error in
// one must still reach the next wait point.
TEST_F(ClientTest, WaitAfterFlushGetsItsReplyAndErrors) {
  const Tensor a = session_->Put<double>({2}, {1, 2});
  const Tensor b = session_->Execute("AddV2", {a, a})[0];
  session_->Flush();
  const ClientCounters before = session_->counters();
  EXPECT_TRUE(session_->Sync().ok());
  const ClientCounters after = session_->counters();
  // Nothing was buffered: one empty batch asked for the reply.
  EXPECT_EQ(after.batches_sent, before.batches_sent + 1);
  EXPECT_EQ(after.commands_sent, before.commands_sent);
  // Nothing new since: no batch at all.
  EXPECT_TRUE(session_->Sync().ok());
  EXPECT_EQ(session_->counters().batches_sent, after.batches_sent);

  const Tensor bad = session_->Execute("NoSuchOp", {b})[0];
  const int64_t bad_seq = session_->last_seq();
  session_->Flush();
  absl::Status status = session_->Sync();
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("NoSuchOp"),
                    HasSubstr(absl::StrCat("command ", bad_seq))));
  EXPECT_EQ(FetchValues(b), (std::vector<double>{2, 4}));
}

TEST_F(ClientTest, ManyBatchesInFlightThenOneFetch) {
  SessionOptions options;
  options.batch_size = 64;
  std::unique_ptr<Session> session = Connect(options);
  ASSERT_NE(session, nullptr);
  constexpr int kOps = 10000;
  Tensor x = session->Scalar(0.0, DType::kFloat64);
  const Tensor one = session->Scalar(1.0, DType::kFloat64);
  const absl::Time start = absl::Now();
  for (int i = 0; i < kOps; ++i) x = x + one;
  absl::StatusOr<HostTensor> v = session->Fetch(x);
  const absl::Duration elapsed = absl::Now() - start;
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->ToDoubles(), (std::vector<double>{kOps}));
  const ClientCounters counters = session->counters();
  // Every op and its handle's release: at least kOps / 64 batches, none
  // waited for before the Fetch. They went out reply_optional and had no
  // results, so the server answered only the Fetch's batch (and the empty
  // one that asks for a reply if the Fetch filled the buffer).
  EXPECT_GE(counters.batches_sent, kOps / 64);
  EXPECT_GE(counters.batches_answered, 1);
  EXPECT_LE(counters.batches_answered, 2);
  EXPECT_LT(elapsed, absl::Seconds(30));
  std::printf("%d ops in %lld batches: %.1f ms\n", kOps,
              static_cast<long long>(counters.batches_sent),
              absl::ToDoubleMilliseconds(elapsed));
  absl::StatusOr<SessionStats> stats = session->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->live_tensors, 2);  // x and one: the rest were released
}

TEST_F(ClientTest, ReleasedHandlesFreeServerTensors) {
  absl::StatusOr<SessionStats> baseline = session_->Stats();
  ASSERT_TRUE(baseline.ok()) << baseline.status();
  {
    const Tensor w = session_->Put<double>({3, 3}, std::vector<double>(9, 0.5));
    const Tensor x = session_->Put<double>({2, 3}, std::vector<double>(6, 1));
    GradientTape tape(*session_, Persistent());
    tape.Watch(w);
    std::vector<Tensor> keep;
    for (int i = 0; i < 10; ++i) keep.push_back(Tanh(MatMul(x, w)));
    const Tensor copy = keep[3];  // shared id: released once
    const Tensor loss = Sum(keep[9]);
    absl::StatusOr<std::vector<Tensor>> g = tape.Gradient(loss, {w});
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(session_->Sync().ok());
    absl::StatusOr<SessionStats> during = session_->Stats();
    ASSERT_TRUE(during.ok()) << during.status();
    EXPECT_GE(during->live_tensors, baseline->live_tensors + 14);
    EXPECT_EQ(during->tapes, baseline->tapes + 1);
    EXPECT_GT(during->tape_entries, 0);
  }
  ASSERT_TRUE(session_->Sync().ok());
  absl::StatusOr<SessionStats> after = session_->Stats();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->live_tensors, baseline->live_tensors);
  EXPECT_EQ(after->poisoned_ids, baseline->poisoned_ids);
  EXPECT_EQ(after->tapes, baseline->tapes);
  EXPECT_EQ(after->tape_entries, 0);
  EXPECT_EQ(after->tape_saved_bytes, 0);
}

TEST_F(ClientTest, PersistentTapeGivesManyGradients) {
  const Tensor x = session_->Scalar(3.0, DType::kFloat64);
  GradientTape tape(*session_, Persistent());
  tape.Watch(x);
  const Tensor y = x * x;
  const Tensor z = y * x;
  tape.Stop();
  auto dy = tape.GradientValues(y, {x});
  ASSERT_TRUE(dy.ok()) << dy.status();
  EXPECT_EQ((*dy)[0]->ToDoubles(), (std::vector<double>{6}));
  auto dz = tape.GradientValues(z, {x});
  ASSERT_TRUE(dz.ok()) << dz.status();
  EXPECT_EQ((*dz)[0]->ToDoubles(), (std::vector<double>{27}));
  // As handles, without waiting.
  absl::StatusOr<std::vector<Tensor>> g = tape.Gradient(z, {x});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(FetchValues((*g)[0]), (std::vector<double>{27}));
}

TEST_F(ClientTest, NonPersistentTapeRefusesASecondGradient) {
  const Tensor x = session_->Scalar(3.0, DType::kFloat64);
  GradientTape tape(*session_);
  tape.Watch(x);
  const Tensor y = x * x;
  tape.Stop();
  absl::StatusOr<std::vector<Tensor>> first = tape.Gradient(y, {x});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(FetchValues((*first)[0]), (std::vector<double>{6}));
  auto second = tape.GradientValues(y, {x});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("persistent"));
  // The session keeps working.
  EXPECT_EQ(FetchValues(y), (std::vector<double>{9}));
}

TEST_F(ClientTest, UnconnectedSourcesGetNoneOrZeros) {
  const Tensor x = session_->Put<double>({2}, {1, 2});
  const Tensor u = session_->Put<double>({2}, {5, 5});
  GradientTape tape(*session_, Persistent());
  tape.Watch({x, u});
  const Tensor y = Sum(x * x);
  tape.Stop();

  auto none = tape.GradientValues(y, {x, u});
  ASSERT_TRUE(none.ok()) << none.status();
  ASSERT_TRUE((*none)[0].has_value());
  EXPECT_EQ((*none)[0]->ToDoubles(), (std::vector<double>{2, 4}));
  EXPECT_FALSE((*none)[1].has_value());

  GradientOptions zeros;
  zeros.unconnected = Unconnected::kZero;
  auto zero = tape.GradientValues(y, {x, u}, zeros);
  ASSERT_TRUE(zero.ok()) << zero.status();
  ASSERT_TRUE((*zero)[1].has_value());
  EXPECT_EQ((*zero)[1]->ToDoubles(), (std::vector<double>{0, 0}));

  // A None gradient handle: using it fails, saying why.
  absl::StatusOr<std::vector<Tensor>> g = tape.Gradient(y, {u});
  ASSERT_TRUE(g.ok());
  absl::StatusOr<HostTensor> v = session_->Fetch((*g)[0]);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(v.status().message(), HasSubstr("None gradient"));
  EXPECT_TRUE(session_->Sync().ok());
}

TEST_F(ClientTest, OutputGradientsSeedTheTarget) {
  const Tensor x = session_->Put<double>({2}, {1, 2});
  GradientTape tape(*session_);
  tape.Watch(x);
  const Tensor y = x * x;
  tape.Stop();
  const Tensor seed = session_->Put<double>({2}, {10, 100});
  GradientOptions options;
  options.output_gradients = {seed};
  auto g = tape.GradientValues(y, {x}, options);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)[0]->ToDoubles(), (std::vector<double>{20, 400}));
}

TEST_F(ClientTest, NestedTapesGiveSecondDerivatives) {
  const Tensor x = session_->Scalar(2.0, DType::kFloat64);
  GradientTape outer(*session_);
  outer.Watch(x);
  GradientTape inner(*session_);
  inner.Watch(x);
  const Tensor y = x * x * x;
  inner.Stop();
  absl::StatusOr<std::vector<Tensor>> dy = inner.Gradient(y, {x});  // 3x^2
  ASSERT_TRUE(dy.ok());
  outer.Stop();
  auto d2y = outer.GradientValues((*dy)[0], {x});  // 6x
  ASSERT_TRUE(d2y.ok()) << d2y.status();
  EXPECT_EQ(FetchValues((*dy)[0]), (std::vector<double>{12}));
  EXPECT_EQ((*d2y)[0]->ToDoubles(), (std::vector<double>{12}));
}

TEST_F(ClientTest, RecordingPauseKeepsOpsOffTheTape) {
  const Tensor x = session_->Scalar(3.0, DType::kFloat64);
  GradientTape tape(*session_);
  tape.Watch(x);
  Tensor y;
  {
    RecordingPause pause(*session_);
    y = x * x;
  }
  tape.Stop();
  auto g = tape.GradientValues(y, {x});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FALSE((*g)[0].has_value());  // y is not connected to x on the tape
}

TEST_F(ClientTest, HandlesAndTapesMayOutliveTheSession) {
  std::unique_ptr<Session> session = Connect();
  ASSERT_NE(session, nullptr);
  const int sessions_before = server_->num_sessions();
  Tensor x = session->Scalar(1.0);
  auto tape = std::make_unique<GradientTape>(*session);
  ASSERT_TRUE(session->Close().ok());
  EXPECT_EQ(server_->num_sessions(), sessions_before - 1);
  EXPECT_EQ(session->Sync().code(), absl::StatusCode::kFailedPrecondition);
  tape.reset();
  session.reset();
  x = Tensor();  // releasing after the session is gone does nothing
}

TEST_F(ClientTest, WatchingANullHandleFailsTheWatch) {
  const Tensor x = session_->Scalar(1.0, DType::kFloat64);
  GradientTape tape(*session_);
  tape.Watch({x, Tensor()});
  absl::Status s = session_->Sync();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("Watch"), HasSubstr("null")));
  // Reported once, not again for the server's own error on the same command.
  EXPECT_TRUE(session_->Sync().ok());
}

TEST_F(ClientTest, LargePutsAreSentInSeparateBatches) {
  SessionOptions options;
  options.max_batch_bytes = 64 << 10;
  std::unique_ptr<Session> session = Connect(options);
  ASSERT_NE(session, nullptr);
  std::vector<Tensor> parts;
  for (int i = 0; i < 8; ++i) {
    parts.push_back(
        session->Put<double>({16384}, std::vector<double>(16384, i)));
  }
  EXPECT_GE(session->counters().batches_sent, 7);
  Tensor total = parts[0];
  for (int i = 1; i < 8; ++i) total = total + parts[i];
  absl::StatusOr<HostTensor> v = session->Fetch(Sum(total));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->ToDoubles(), (std::vector<double>{16384.0 * 28}));
}

TEST_F(ClientTest, ThreadsShareASessionInCallOrder) {
  SessionOptions options;
  options.batch_size = 16;
  std::unique_ptr<Session> session = Connect(options);
  ASSERT_NE(session, nullptr);
  constexpr int kThreads = 4, kOps = 500;
  std::vector<Tensor> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Tensor x = session->Scalar(t, DType::kFloat64);
      const Tensor one = session->Scalar(1.0, DType::kFloat64);
      for (int i = 0; i < kOps; ++i) x = x + one;
      results[t] = x;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    absl::StatusOr<HostTensor> v = session->Fetch(results[t]);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->ToDoubles(), (std::vector<double>{t + kOps * 1.0}));
  }
  results.clear();
  absl::StatusOr<SessionStats> stats = session->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->live_tensors, 0);
}

TEST_F(ClientTest, LosingTheServerFailsTheNextWaitPoint) {
  server::ServerOptions server_options;
  server_options.address = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<server::Server>> other =
      server::Server::Start(server_options);
  ASSERT_TRUE(other.ok()) << other.status();
  SessionOptions options;
  options.rpc_timeout = absl::Seconds(2);
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Connect(absl::StrCat("127.0.0.1:", (*other)->port()), options);
  ASSERT_TRUE(session.ok()) << session.status();
  const Tensor x = (*session)->Scalar(2.0);
  ASSERT_TRUE((*session)->Sync().ok());
  (*other)->Shutdown();
  const Tensor y = x * x;
  const absl::Time start = absl::Now();
  absl::StatusOr<HostTensor> v = (*session)->Fetch(y);
  EXPECT_FALSE(v.ok());
  absl::Status s = (*session)->Sync();
  EXPECT_FALSE(s.ok());
  std::printf("after the server left: Fetch: %s\nSync: %s\n",
              v.status().ToString().c_str(), s.ToString().c_str());
  session->reset();  // Close must not hang either
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST_F(ClientTest, MlpDemoTrainingReachesNinetyPercent) {
  const examples::Dataset data = examples::MakeSpiral(60, 3, 0.15, 1);
  examples::MlpOptions options;
  options.steps = 1500;
  options.hidden = 64;
  options.learning_rate = 1.0;
  options.log_every = 250;
  absl::StatusOr<examples::MlpReport> report =
      examples::TrainMlp(*session_, data, options);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_GE(report->losses.size(), 2u);
  EXPECT_LT(report->losses.back().second, report->losses.front().second / 3);
  EXPECT_GE(report->accuracy, 0.9);
  absl::StatusOr<SessionStats> stats = session_->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->tapes, 0);
  EXPECT_LT(stats->live_tensors, 10);  // only what TrainMlp still holds
}

}  // namespace
}  // namespace gradtape::client
