// The C++ client resumes after a transport failure and never reports a false
// OK (client/src/resume.h): a fault test that cuts connections at random
// byte offsets while an MLP trains with Adam (bit-identical to a fault-free
// run, nothing applied twice), and the clear errors when a session cannot
// be resumed.
#include "client/src/resume.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/examples/adam_mlp.h"
#include "client/examples/mlp.h"
#include "gmock/gmock.h"
#include "gradtape/client/client.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/client/fault_proxy.h"

namespace gradtape::client {
namespace {

using ::gradtape::testing::CutPlan;
using ::gradtape::testing::FaultProxy;
using ::gradtape::testing::ProxyCounts;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::unique_ptr<server::Server> StartServer(
    server::ServerOptions options = {}) {
  options.address = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<server::Server>> s =
      server::Server::Start(options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

std::unique_ptr<FaultProxy> StartProxy(int upstream_port, CutPlan plan = {}) {
  absl::StatusOr<std::unique_ptr<FaultProxy>> p =
      FaultProxy::Start(upstream_port, plan);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

SessionOptions ResumeOptions(absl::Duration reconnect_timeout) {
  SessionOptions options;
  options.rpc_timeout = absl::Seconds(5);
  options.reconnect_timeout = reconnect_timeout;
  options.initial_backoff = absl::Milliseconds(10);
  options.max_backoff = absl::Milliseconds(200);
  return options;
}

std::unique_ptr<Session> ConnectTo(int port, const SessionOptions& options) {
  absl::StatusOr<std::unique_ptr<Session>> s =
      Session::Connect(absl::StrCat("127.0.0.1:", port), options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

// The bits of a double (so that equality is bit-identity, NaN included).
std::string Bits(double d) {
  return std::string(reinterpret_cast<const char*>(&d), sizeof(d));
}

struct TrainingRun {
  std::vector<std::string> losses;     // bits of every step's loss
  std::vector<std::string> variables;  // bytes of every variable at the end
  SessionStats stats;
  ClientCounters counters;
  int64_t last_seq = 0;
  double seconds = 0;
};

// Adam on a small MLP through `port`, fetching the loss every step.
absl::StatusOr<TrainingRun> Train(int port, int steps) {
  const examples::Dataset data = examples::MakeSpiral(40, 3, 0.15, 5);
  std::unique_ptr<Session> session =
      ConnectTo(port, ResumeOptions(absl::Seconds(20)));
  if (session == nullptr) return absl::UnavailableError("no session");
  TrainingRun run;
  const absl::Time start = absl::Now();
  {
    examples::AdamMlpOptions model_options;
    model_options.hidden = 16;
    model_options.seed = 7;
    examples::AdamMlp model(*session, data, model_options);
    absl::Status trained = model.Train(
        steps, /*log_every=*/1,
        [&](int, double loss) { run.losses.push_back(Bits(loss)); });
    if (!trained.ok()) return trained;
    for (const Variable& v : model.variables()) {
      absl::StatusOr<HostTensor> value = session->Fetch(v.Read());
      if (!value.ok()) return value.status();
      run.variables.push_back(value->bytes);
    }
  }
  absl::StatusOr<SessionStats> stats = session->Stats();
  if (!stats.ok()) return stats.status();
  run.stats = *stats;
  run.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  run.counters = session->counters();
  run.last_seq = session->last_seq();
  absl::Status closed = session->Close();
  if (!closed.ok()) return closed;
  return run;
}

// The fault test (docs/RELIABILITY.md "Resuming clients"): connections cut at
// random byte offsets, both directions, many in the middle of a message, while
// Adam trains; every fetched loss and every final variable equal the
// fault-free run's bit for bit, and the server applied exactly as many
// commands (none twice).
TEST(ResumeTest, CutConnectionsLeaveTrainingBitIdentical) {
  constexpr int kSteps = 2000;
  constexpr int kCuts = 30;
  std::unique_ptr<server::Server> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<FaultProxy> clean = StartProxy(server->port());
  CutPlan plan;
  plan.cuts = kCuts;
  plan.seed = 20261201;
  plan.client_min = 512;
  plan.client_max = 96 << 10;
  plan.server_min = 64;
  plan.server_max = 12 << 10;
  std::unique_ptr<FaultProxy> faulty = StartProxy(server->port(), plan);
  ASSERT_NE(clean, nullptr);
  ASSERT_NE(faulty, nullptr);

  absl::StatusOr<TrainingRun> reference = Train(clean->port(), kSteps);
  ASSERT_TRUE(reference.ok()) << reference.status();
  absl::StatusOr<TrainingRun> cut = Train(faulty->port(), kSteps);
  ASSERT_TRUE(cut.ok()) << cut.status();
  const ProxyCounts counts = faulty->counts();

  std::printf(
      "fault test: %d steps; %d cuts (%d client->server, %d server->client, "
      "%d in the middle of a read), %d connections\n"
      "  client: %lld transport failures, %lld resumes, %lld reconnect "
      "attempts, %lld batches / %lld commands resent, %lld duplicate "
      "results, %lld re-fetches\n"
      "  server: %lld commands applied (fault-free: %lld), %lld duplicates "
      "skipped (fault-free: %lld)\n"
      "  time: %.2f s with cuts, %.2f s without\n",
      kSteps, counts.cuts, counts.client_cuts, counts.server_cuts,
      counts.mid_chunk_cuts, counts.connections,
      static_cast<long long>(cut->counters.transport_failures),
      static_cast<long long>(cut->counters.resumes),
      static_cast<long long>(cut->counters.reconnect_attempts),
      static_cast<long long>(cut->counters.batches_resent),
      static_cast<long long>(cut->counters.commands_resent),
      static_cast<long long>(cut->counters.duplicate_results),
      static_cast<long long>(cut->counters.refetches),
      static_cast<long long>(cut->stats.commands_applied),
      static_cast<long long>(reference->stats.commands_applied),
      static_cast<long long>(cut->stats.duplicate_commands),
      static_cast<long long>(reference->stats.duplicate_commands), cut->seconds,
      reference->seconds);

  EXPECT_GE(counts.cuts, 20);
  EXPECT_GE(counts.client_cuts, 5);
  EXPECT_GE(counts.server_cuts, 5);
  EXPECT_GE(counts.mid_chunk_cuts, 1);
  // A cut may also fall on a reconnect's probe (retried, no resume).
  EXPECT_GE(cut->counters.resumes, counts.cuts / 2);
  EXPECT_LE(cut->counters.resumes, counts.cuts);
  EXPECT_GT(cut->counters.commands_resent, 0);
  EXPECT_GT(cut->stats.duplicate_commands, 0);
  EXPECT_EQ(reference->counters.resumes, 0);
  EXPECT_EQ(reference->stats.duplicate_commands, 0);
  // Nothing lost, nothing applied twice.
  EXPECT_EQ(cut->counters.refetches, 0);
  EXPECT_EQ(cut->last_seq, reference->last_seq);
  EXPECT_EQ(cut->stats.commands_applied, reference->stats.commands_applied);
  ASSERT_EQ(cut->losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(reference->losses.size(), static_cast<size_t>(kSteps));
  int differing = 0;
  for (int i = 0; i < kSteps; ++i) {
    if (cut->losses[i] != reference->losses[i]) ++differing;
  }
  EXPECT_EQ(differing, 0) << "steps whose loss differs from the fault-free run";
  EXPECT_EQ(cut->variables, reference->variables);
}

// A server that is gone (connections refused): the wait returns one clear
// UNAVAILABLE within reconnect_timeout, and every later wait the same error
// at once.
TEST(ResumeTest, UnreachableServerGivesOneClearErrorInBoundedTime) {
  std::unique_ptr<server::Server> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<FaultProxy> proxy = StartProxy(server->port());
  ASSERT_NE(proxy, nullptr);
  std::unique_ptr<Session> session =
      ConnectTo(proxy->port(), ResumeOptions(absl::Milliseconds(1500)));
  ASSERT_NE(session, nullptr);
  const Tensor x = session->Scalar(3.0);
  ASSERT_TRUE(session->Sync().ok());
  proxy->StopListening();
  const absl::Time start = absl::Now();
  absl::StatusOr<HostTensor> v = session->Fetch(x * x);
  const absl::Duration waited = absl::Now() - start;
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(v.status().message(),
              AllOf(HasSubstr(absl::StrCat("session ", session->id())),
                    HasSubstr(absl::StrCat("server 127.0.0.1:", proxy->port(),
                                           " unreachable for 1.")),
                    HasSubstr("reconnect attempts)")));
  EXPECT_GE(waited, absl::Milliseconds(1400));
  EXPECT_LT(waited, absl::Seconds(6));
  const absl::Time again = absl::Now();
  absl::Status s = session->Sync();
  EXPECT_EQ(s, v.status());
  EXPECT_EQ(session->Fetch(x).status(), v.status());
  EXPECT_EQ(session->KeepAlive(), v.status());
  EXPECT_LT(absl::Now() - again, absl::Milliseconds(500));
  const ClientCounters counters = session->counters();
  EXPECT_EQ(counters.transport_failures, 1);
  EXPECT_GE(counters.reconnect_attempts, 2);
  EXPECT_EQ(counters.resumes, 0);
  std::printf("%s\n", v.status().ToString().c_str());
  const absl::Time closing = absl::Now();
  session.reset();
  EXPECT_LT(absl::Now() - closing, absl::Seconds(2));
}

// During an outage, a flush does not wait for the reconnect (the batch joins
// the resend) and Close waits at most rpc_timeout; the loss names its
// reason as a payload (what the Python binding reports).
TEST(ResumeTest, FlushAndCloseDuringAnOutageDoNotWaitForTheReconnect) {
  std::unique_ptr<server::Server> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<FaultProxy> proxy = StartProxy(server->port());
  ASSERT_NE(proxy, nullptr);
  SessionOptions options = ResumeOptions(absl::Seconds(60));
  options.rpc_timeout = absl::Seconds(2);
  std::unique_ptr<Session> session = ConnectTo(proxy->port(), options);
  ASSERT_NE(session, nullptr);
  const Tensor x = session->Scalar(3.0);
  ASSERT_TRUE(session->Sync().ok());
  proxy->StopListening();
  // The reconnect starts once the stream has failed.
  for (int i = 0; i < 200 && session->counters().reconnect_attempts == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GE(session->counters().reconnect_attempts, 1);
  const int64_t sent = session->counters().batches_sent;
  const Tensor y = x * x;
  const absl::Time flushing = absl::Now();
  session->Flush();
  EXPECT_LT(absl::Now() - flushing, absl::Milliseconds(500));
  EXPECT_EQ(session->counters().batches_sent, sent + 1);  // kept for the resend
  const absl::Time closing = absl::Now();
  const absl::Status closed = session->Close();
  EXPECT_LT(absl::Now() - closing, absl::Seconds(8));
  EXPECT_EQ(closed.code(), absl::StatusCode::kDeadlineExceeded) << closed;
}

// The lost-session errors carry their reason for bindings.
TEST(ResumeTest, LostSessionErrorsNameTheirReason) {
  using internal::kLostReasonPayload;
  const absl::Status cause = absl::UnavailableError("down");
  EXPECT_EQ(internal::UnreachableError("s", "a", absl::Seconds(1), 3, cause)
                .GetPayload(kLostReasonPayload),
            absl::Cord("unreachable"));
  EXPECT_EQ(internal::ConnectionLostError("s", "a", cause)
                .GetPayload(kLostReasonPayload),
            absl::Cord("unreachable"));
  EXPECT_EQ(internal::FinalStreamError("s", "a", absl::NotFoundError("gone"))
                .GetPayload(kLostReasonPayload),
            absl::Cord("not_found"));
  EXPECT_EQ(internal::FinalStreamError("s", "a", cause)
                .GetPayload(kLostReasonPayload),
            absl::Cord("draining"));
  EXPECT_EQ(
      internal::FinalStreamError("s", "a", absl::PermissionDeniedError("key"))
          .GetPayload(kLostReasonPayload),
      absl::Cord("ended"));
  EXPECT_THAT(
      internal::UnreachableError("s", "a", absl::Seconds(1), 3,
                                 absl::DeadlineExceededError("KeepAlive"))
          .message(),
      HasSubstr("(3 reconnect attempts): DEADLINE_EXCEEDED: KeepAlive"));
}

// Reconnecting finds a server that does not know the session (a restarted
// server behind the same address): NOT_FOUND saying so, not retried.
TEST(ResumeTest, SessionGoneGivesNotFoundAtOnce) {
  std::unique_ptr<server::Server> first = StartServer();
  std::unique_ptr<server::Server> second = StartServer();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  std::unique_ptr<FaultProxy> proxy = StartProxy(first->port());
  ASSERT_NE(proxy, nullptr);
  std::unique_ptr<Session> session =
      ConnectTo(proxy->port(), ResumeOptions(absl::Seconds(20)));
  ASSERT_NE(session, nullptr);
  const Tensor x = session->Scalar(3.0);
  ASSERT_TRUE(session->Sync().ok());
  proxy->SetUpstream(second->port());
  proxy->CutAll();
  const absl::Time start = absl::Now();
  absl::StatusOr<HostTensor> v = session->Fetch(x * x);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(v.status().message(),
              AllOf(HasSubstr(absl::StrCat("session ", session->id())),
                    HasSubstr("the server no longer has this session")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(session->Sync(), v.status());
  // A probe may first meet the cut channel (UNAVAILABLE, retried); the
  // NOT_FOUND is not retried (it would be until reconnect_timeout, 20 s).
  EXPECT_GE(session->counters().reconnect_attempts, 1);
  EXPECT_LE(session->counters().reconnect_attempts, 3);
  std::printf("%s\n", v.status().ToString().c_str());
}

// A stand-in for the proxy in front of a replica that died: CreateSession
// succeeds (the replica was alive then), a Stream ends with a bare
// UNAVAILABLE once it read a batch (the reset of a stream open when the
// replica died), and every KeepAlive gets the proxy's UNAVAILABLE, with the
// verdict trailer if `verdict` (deploy/k8s/nginx/proxy.conf).
class DeadReplicaProxy final : public v1::TapeService::Service {
 public:
  explicit DeadReplicaProxy(bool verdict) : verdict_(verdict) {}

  grpc::Status CreateSession(grpc::ServerContext*,
                             const v1::CreateSessionRequest* request,
                             v1::CreateSessionResponse* response) override {
    response->set_session_id(request->session_id());
    response->set_token("token");
    response->set_keep_alive_seconds(60);
    return grpc::Status::OK;
  }
  grpc::Status Stream(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::BatchReply, v1::CommandBatch>* stream)
      override {
    v1::CommandBatch batch;
    stream->Read(&batch);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "upstream reset");
  }
  grpc::Status KeepAlive(grpc::ServerContext* context,
                         const v1::KeepAliveRequest*,
                         v1::KeepAliveResponse*) override {
    ++probes_;
    if (verdict_) {
      context->AddTrailingMetadata(internal::kProxyVerdictTrailer,
                                   internal::kReplicaUnreachableVerdict);
    }
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "gradtape-proxy: the replica of session s is "
                        "unreachable; create new sessions under a new id");
  }
  int probes() const { return probes_; }

 private:
  const bool verdict_;
  std::atomic<int> probes_{0};
};

// Starts `service` on 127.0.0.1; `*port` is its port.
std::unique_ptr<grpc::Server> StartFake(grpc::Service* service, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           port);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

// The time from the stream's failure to the session's loss behind a dead
// replica's proxy, and the loss.
struct LossBehindProxy {
  absl::Duration waited;
  absl::Status status;
  ClientCounters counters;
};

LossBehindProxy LoseBehindDeadReplica(DeadReplicaProxy& proxy,
                                      absl::Duration reconnect_timeout) {
  int port = 0;
  std::unique_ptr<grpc::Server> server = StartFake(&proxy, &port);
  EXPECT_NE(server, nullptr);
  SessionOptions options = ResumeOptions(reconnect_timeout);
  options.max_backoff = absl::Seconds(2);
  std::unique_ptr<Session> session = ConnectTo(port, options);
  if (session == nullptr) return {};
  const Tensor x = session->Scalar(3.0);
  const absl::Time start = absl::Now();
  LossBehindProxy loss;
  loss.status = session->Sync();
  loss.waited = absl::Now() - start;
  EXPECT_EQ(session->KeepAlive(), loss.status);  // every later call
  loss.counters = session->counters();
  session.reset();
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  return loss;
}

// The proxy's replica-unreachable verdict ends the session once probes
// have carried it for kReplicaUnreachableGrace, long before a 60 s
// reconnect budget, with the unreachable loss quoting the proxy.
TEST(ResumeTest, ProxyVerdictEndsTheSessionAfterItsGrace) {
  DeadReplicaProxy proxy(/*verdict=*/true);
  const LossBehindProxy loss = LoseBehindDeadReplica(proxy, absl::Seconds(60));
  EXPECT_EQ(loss.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(loss.status.message(),
              AllOf(HasSubstr("unreachable for 2."),
                    HasSubstr("gradtape-proxy: the replica of session")));
  EXPECT_EQ(loss.status.GetPayload(internal::kLostReasonPayload),
            absl::Cord("unreachable"));
  EXPECT_GE(loss.waited, internal::kReplicaUnreachableGrace);
  EXPECT_LT(loss.waited, absl::Seconds(4));
  EXPECT_GE(proxy.probes(), 2);
  EXPECT_EQ(loss.counters.reconnect_attempts, proxy.probes());
  std::printf("%s\n", loss.status.ToString().c_str());
}

// The same answer without the verdict (the client cannot tell a dead
// replica from a blip): retried for the whole reconnect budget.
TEST(ResumeTest, UnavailableWithoutTheVerdictKeepsTheBudget) {
  DeadReplicaProxy proxy(/*verdict=*/false);
  const LossBehindProxy loss = LoseBehindDeadReplica(proxy, absl::Seconds(4));
  EXPECT_EQ(loss.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(loss.status.message(), HasSubstr("unreachable for 4."));
  EXPECT_GE(loss.waited, absl::Milliseconds(3900));
  EXPECT_LT(loss.waited, absl::Seconds(7));
}

// The rule itself: two verdicts in a row, the grace apart; any probe
// without the verdict starts the count again.
TEST(ResumeTest, ReplicaVerdictsAreFinalOnlyWhenConsecutiveForTheGrace) {
  using internal::kReplicaUnreachableGrace;
  const absl::Time t0 = absl::UnixEpoch();
  internal::ReplicaVerdicts verdicts;
  EXPECT_EQ(verdicts.ProbeBy(), absl::InfiniteFuture());
  EXPECT_FALSE(verdicts.Record(true, t0));
  EXPECT_EQ(verdicts.ProbeBy(), t0 + kReplicaUnreachableGrace);
  EXPECT_FALSE(verdicts.Record(true, t0 + absl::Milliseconds(1999)));
  EXPECT_FALSE(verdicts.Record(false, t0 + absl::Seconds(3)));
  EXPECT_EQ(verdicts.ProbeBy(), absl::InfiniteFuture());
  const absl::Time t1 = t0 + absl::Seconds(4);
  EXPECT_FALSE(verdicts.Record(true, t1));
  EXPECT_FALSE(verdicts.Record(true, t1 + absl::Seconds(1)));
  EXPECT_TRUE(verdicts.Record(true, t1 + kReplicaUnreachableGrace));
  // One verdict, however late, is not final on its own.
  internal::ReplicaVerdicts once;
  EXPECT_FALSE(once.Record(true, t0 + absl::Hours(1)));
}

// Errors that are not transport failures are never retried: a command
// error stays a command error, and a draining server's UNAVAILABLE (it
// carries the server's trailer) is final at once, saying to restore the
// drain checkpoint.
TEST(ResumeTest, ServerErrorsAreNotRetried) {
  std::unique_ptr<server::Server> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Session> session =
      ConnectTo(server->port(), ResumeOptions(absl::Seconds(20)));
  ASSERT_NE(session, nullptr);
  const Tensor x = session->Scalar(3.0);
  const Tensor bad = session->Execute("NoSuchOp", {x})[0];
  absl::Status s = session->Sync();
  EXPECT_THAT(s.message(), HasSubstr("NoSuchOp"));
  EXPECT_TRUE(session->Sync().ok());

  std::thread drain([&] { server->Drain(absl::Seconds(5)); });
  const absl::Time start = absl::Now();
  absl::StatusOr<HostTensor> v;
  // Bounded: the drain ends the stream after at most the batch in flight.
  for (int i = 0; i < 200 && (v = session->Fetch(x)).ok(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  drain.join();
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(
      v.status().message(),
      AllOf(HasSubstr(absl::StrCat("session ", session->id())),
            HasSubstr("draining"), HasSubstr("restore the drain checkpoint")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  const ClientCounters counters = session->counters();
  EXPECT_EQ(counters.transport_failures, 0);
  EXPECT_EQ(counters.reconnect_attempts, 0);
  std::printf("%s\n", v.status().ToString().c_str());
}

// A cut in the middle of a large fetch's reply: the batch is resent, the
// server answers the duplicate from its kept result, the caller sees the
// value.
TEST(ResumeTest, CutInsideAReplyIsResumed) {
  std::unique_ptr<server::Server> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<FaultProxy> proxy = StartProxy(server->port());
  ASSERT_NE(proxy, nullptr);
  std::unique_ptr<Session> session =
      ConnectTo(proxy->port(), ResumeOptions(absl::Seconds(20)));
  ASSERT_NE(session, nullptr);
  std::vector<float> values(1 << 18);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * i;
  const Tensor big = session->Put<float>({1 << 18}, values);
  const Tensor doubled = big + big;
  ASSERT_TRUE(session->Sync().ok());
  const absl::Time clean_start = absl::Now();
  ASSERT_TRUE(session->Fetch(doubled).ok());
  const absl::Duration clean = absl::Now() - clean_start;
  proxy->ArmCut(/*server_to_client=*/true, 100 << 10);  // of about 1 MiB
  const absl::Time start = absl::Now();
  absl::StatusOr<HostTensor> v = session->Fetch(doubled);
  ASSERT_TRUE(v.ok()) << v.status();
  std::printf("1 MiB fetch: %.1f ms, %.1f ms with a cut inside its reply\n",
              absl::ToDoubleMilliseconds(clean),
              absl::ToDoubleMilliseconds(absl::Now() - start));
  const std::vector<double> got = v->ToDoubles();
  ASSERT_EQ(got.size(), values.size());
  for (size_t i = 0; i < values.size(); i += 4099) {
    ASSERT_EQ(got[i], 2.0 * values[i]) << i;
  }
  const ClientCounters counters = session->counters();
  EXPECT_EQ(counters.resumes, 1);
  EXPECT_GE(counters.duplicate_results, 1);
  EXPECT_EQ(proxy->counts().forced_cuts, 1);
  absl::StatusOr<SessionStats> stats = session->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->live_tensors, 2);
}

// The same cut with a server that keeps no results: the resent fetch is a
// duplicate answered ABORTED "no longer kept", and the client fetches again
// with a new seq; the caller sees only the value.
TEST(ResumeTest, AFetchWhoseResultWasNotKeptIsFetchedAgain) {
  server::ServerOptions options;
  options.result_cache_bytes = 0;
  std::unique_ptr<server::Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<FaultProxy> proxy = StartProxy(server->port());
  ASSERT_NE(proxy, nullptr);
  std::unique_ptr<Session> session =
      ConnectTo(proxy->port(), ResumeOptions(absl::Seconds(20)));
  ASSERT_NE(session, nullptr);
  const Tensor big =
      session->Put<float>({1 << 18}, std::vector<float>(1 << 18, 1.25f));
  ASSERT_TRUE(session->Sync().ok());
  proxy->ArmCut(/*server_to_client=*/true, 100 << 10);
  const int64_t applied_before = session->last_seq();
  absl::StatusOr<HostTensor> v = session->Fetch(big);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->at(0), 1.25);
  EXPECT_EQ(v->at((1 << 18) - 1), 1.25);
  const ClientCounters counters = session->counters();
  EXPECT_EQ(counters.resumes, 1);
  EXPECT_EQ(counters.refetches, 1);
  // The fetch went out twice with two seqs.
  EXPECT_EQ(session->last_seq(), applied_before + 2);
}

// CreateSession cut before its answer (the server may have created the
// session): retried with a new id, and the session works.
TEST(ResumeTest, CreateSessionIsRetriedInTransport) {
  std::unique_ptr<server::Server> server = StartServer();
  ASSERT_NE(server, nullptr);
  CutPlan plan;
  plan.cuts = 2;
  plan.only_direction = 1;
  // Past the server's SETTINGS, before CreateSession's answer ends.
  plan.server_min = 40;
  plan.server_max = 60;
  std::unique_ptr<FaultProxy> proxy = StartProxy(server->port(), plan);
  ASSERT_NE(proxy, nullptr);
  std::unique_ptr<Session> session =
      ConnectTo(proxy->port(), ResumeOptions(absl::Seconds(10)));
  ASSERT_NE(session, nullptr);
  EXPECT_EQ(proxy->counts().cuts, 2);
  const Tensor x = session->Scalar(4.0);
  absl::StatusOr<HostTensor> v = session->Fetch(x * x);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->at(0), 16.0);
}

// Batches sent without a wait go out reply_optional, yet what a resend
// needs stays bounded: past a quarter of max_unacked_bytes a batch asks for
// the reply that acknowledges it and everything before.
TEST(ResumeTest, UnacknowledgedBytesAreBounded) {
  std::unique_ptr<server::Server> server = StartServer();
  ASSERT_NE(server, nullptr);
  SessionOptions options = ResumeOptions(absl::Seconds(20));
  options.batch_size = 64;
  options.max_unacked_bytes = 64 << 10;
  std::unique_ptr<Session> session = ConnectTo(server->port(), options);
  ASSERT_NE(session, nullptr);
  constexpr int kOps = 10000;
  Tensor x = session->Scalar(0.0, DType::kFloat64);
  const Tensor one = session->Scalar(1.0, DType::kFloat64);
  for (int i = 0; i < kOps; ++i) x = x + one;
  absl::StatusOr<HostTensor> v = session->Fetch(x);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->at(0), kOps);
  const ClientCounters counters = session->counters();
  // About 60 bytes per op and its release: a reply every 16 KiB or so
  // (with the default limit, only the Fetch's batch is answered).
  EXPECT_GE(counters.batches_answered, 10);
  EXPECT_LT(counters.batches_answered, counters.batches_sent / 2);
}

TEST(ResumeTest, TransportFailuresAreTheUntrailedTransportCodes) {
  using internal::IsTransportFailure;
  EXPECT_TRUE(IsTransportFailure(absl::StatusCode::kUnavailable, false));
  EXPECT_TRUE(IsTransportFailure(absl::StatusCode::kInternal, false));
  EXPECT_TRUE(IsTransportFailure(absl::StatusCode::kUnknown, false));
  EXPECT_FALSE(IsTransportFailure(absl::StatusCode::kUnavailable, true));
  EXPECT_FALSE(IsTransportFailure(absl::StatusCode::kInternal, true));
  EXPECT_FALSE(IsTransportFailure(absl::StatusCode::kNotFound, false));
  EXPECT_FALSE(IsTransportFailure(absl::StatusCode::kCancelled, false));
  EXPECT_FALSE(IsTransportFailure(absl::StatusCode::kDeadlineExceeded, false));
  EXPECT_TRUE(IsTransportFailure(absl::StatusCode::kDeadlineExceeded, false,
                                 /*own_deadline=*/true));
  EXPECT_FALSE(IsTransportFailure(absl::StatusCode::kResourceExhausted, false));
}

}  // namespace
}  // namespace gradtape::client
