// unary_load: a light C++ load generator for unary calls, the companion of
// the ghz scenarios (tests/load/). ghz spends far more CPU per call than the
// server does (it builds every request from JSON templates through
// reflection), and on a 2-core machine it shares the cores with the server,
// so ghz's figure is bounded by ghz itself. This driver sends the same
// requests from compiled protobuf messages, so what it prints is closer to
// the server's own capacity on the cores that remain.
//
//   unary_load --address=127.0.0.1:PORT [--call=run|keepalive]
//              [--concurrency=50] [--connections=50] [--duration_s=10]
//              [--tls_ca_file=PEM --tls_server_name=localhost]
//
// --call=run sends run_unary.json's batch (put a float32[4], AddV2, Mul,
// fetch, release the intermediates) with distinct ids per call;
// --call=keepalive sends the cheapest authenticated call of the service,
// the baseline for what gRPC alone costs. It opens --concurrency sessions
// (call i uses session i mod --concurrency, like the ghz scenarios), keeps
// one call in flight per worker until --duration_s has passed, and then
// checks every session with a Stats command: no poisoned id, no tape, and
// for run one live result per successful call. Prints requests, req/s,
// p50/p99 latency and errors; exits 1 on any error.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/bench_tls.h"
#include "bench/load_sessions.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, address, "127.0.0.1:50051", "server (loopback)");
ABSL_FLAG(std::string, call, "run", "run | keepalive");
ABSL_FLAG(int, concurrency, 50, "calls in flight (one per worker)");
ABSL_FLAG(int, connections, 50, "TCP connections the workers share");
ABSL_FLAG(double, duration_s, 10, "seconds of load");
ABSL_FLAG(std::string, api_key, "",
          "API key of a server with --api_keys_file (sent on every call)");

namespace v1 = gradtape::v1;

namespace {

using Clock = std::chrono::steady_clock;
using gradtape::bench::SessionCredentials;

// The batch of tests/load/run_unary.json for call number `n`, with seqs
// that increase from call to call (a worker's calls on its session have
// increasing n): base + 1 to base + 5. ack_seq acknowledges every earlier
// call's results (the worker has their replies), as a client does.
void FillRunBatch(int64_t n, v1::CommandBatch& batch) {
  static const float kValues[4] = {0.5f, 1.5f, 2.0f, -1.0f};
  const int64_t base = n * 16;
  batch.Clear();
  batch.set_batch_id(n);
  batch.set_ack_seq(base);
  v1::Command* put = batch.add_commands();
  put->set_seq(base + 1);
  put->mutable_put()->set_id(base + 1);
  v1::TensorValue* value = put->mutable_put()->mutable_value();
  value->set_dtype(v1::DTYPE_FLOAT32);
  value->add_shape(4);
  value->set_data(kValues, sizeof(kValues));
  auto execute = [&](int64_t seq, const char* op, int64_t a, int64_t b,
                     int64_t out) {
    v1::Command* cmd = batch.add_commands();
    cmd->set_seq(base + seq);
    v1::ExecuteOp* e = cmd->mutable_execute();
    e->set_op(op);
    e->add_input_ids(a);
    e->add_input_ids(b);
    e->add_output_ids(out);
  };
  execute(2, "AddV2", base + 1, base + 1, base + 2);
  execute(3, "Mul", base + 2, base + 1, base + 3);
  v1::Command* fetch = batch.add_commands();
  fetch->set_seq(base + 4);
  fetch->mutable_fetch()->set_id(base + 3);
  v1::Command* release = batch.add_commands();
  release->set_seq(base + 5);
  release->mutable_release()->add_ids(base + 1);
  release->mutable_release()->add_ids(base + 2);
}

class Load {
 public:
  Load(std::vector<std::unique_ptr<v1::TapeService::Stub>> stubs,
       std::vector<SessionCredentials> sessions, bool run,
       Clock::time_point end, std::string api_key = "")
      : stubs_(std::move(stubs)),
        sessions_(std::move(sessions)),
        run_(run),
        end_(end),
        authorization_(api_key.empty() ? "" : "Bearer " + api_key),
        workers_(sessions_.size()) {}

  // Starts one call per worker and waits until every worker has stopped.
  void RunToEnd() {
    for (size_t w = 0; w < workers_.size(); ++w) Issue(w);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return stopped_ == workers_.size(); });
  }

  std::vector<double> Latencies() const {
    std::vector<double> all;
    for (const Worker& w : workers_) {
      all.insert(all.end(), w.latencies_ms.begin(), w.latencies_ms.end());
    }
    return all;
  }
  int64_t errors() const { return errors_.load(); }
  int64_t command_errors() const { return command_errors_.load(); }
  const std::string& first_error() const { return first_error_; }

 private:
  struct Worker {
    std::unique_ptr<grpc::ClientContext> ctx;
    v1::CommandBatch batch;
    v1::BatchReply reply;
    v1::KeepAliveRequest ka_request;
    v1::KeepAliveResponse ka_response;
    Clock::time_point sent;
    std::vector<double> latencies_ms;
  };

  void Issue(size_t w) {
    Worker& worker = workers_[w];
    if (Clock::now() >= end_) {
      Stop();
      return;
    }
    const int64_t n = next_call_.fetch_add(1);
    const SessionCredentials& session = sessions_[w];
    worker.ctx = std::make_unique<grpc::ClientContext>();
    worker.ctx->AddMetadata("gradtape-session-id", session.id);
    worker.ctx->AddMetadata("gradtape-session-token", session.token);
    if (!authorization_.empty()) {
      worker.ctx->AddMetadata("authorization", authorization_);
    }
    worker.ctx->set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(5));
    v1::TapeService::Stub& stub = *stubs_[w % stubs_.size()];
    worker.sent = Clock::now();
    auto done = [this, w](grpc::Status s) { Finished(w, s); };
    if (run_) {
      FillRunBatch(n, worker.batch);
      worker.reply.Clear();
      stub.async()->Run(worker.ctx.get(), &worker.batch, &worker.reply, done);
    } else {
      stub.async()->KeepAlive(worker.ctx.get(), &worker.ka_request,
                              &worker.ka_response, done);
    }
  }

  void Finished(size_t w, const grpc::Status& s) {
    Worker& worker = workers_[w];
    worker.latencies_ms.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - worker.sent)
            .count());
    if (!s.ok()) {
      // A failed call stops its worker (no storm of instant failures).
      Error("call failed: " + s.error_message());
      Stop();
      return;
    }
    if (run_) {
      for (const v1::CommandResult& r : worker.reply.results()) {
        if (r.has_error()) {
          ++command_errors_;
          Error("command failed: " + r.error().message());
        }
      }
    }
    Issue(w);
  }

  void Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    if (++stopped_ == workers_.size()) done_cv_.notify_all();
  }

  void Error(const std::string& what) {
    if (errors_.fetch_add(1) == 0) first_error_ = what;
  }

  std::vector<std::unique_ptr<v1::TapeService::Stub>> stubs_;
  std::vector<SessionCredentials> sessions_;
  const bool run_;
  const Clock::time_point end_;
  const std::string authorization_;  // "Bearer <key>", or empty
  std::vector<Worker> workers_;
  std::atomic<int64_t> next_call_{0};
  std::atomic<int64_t> errors_{0};
  std::atomic<int64_t> command_errors_{0};
  std::string first_error_;
  std::mutex mu_;
  std::condition_variable done_cv_;
  size_t stopped_ = 0;
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + i, v.end());
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string address = absl::GetFlag(FLAGS_address);
  const std::string call = absl::GetFlag(FLAGS_call);
  if (address.rfind("127.0.0.1:", 0) != 0 && address.rfind("[::1]:", 0) != 0) {
    std::fprintf(stderr, "unary_load: loopback addresses only, not %s\n",
                 address.c_str());
    return 2;
  }
  if (call != "run" && call != "keepalive") {
    std::fprintf(stderr, "unary_load: --call is run or keepalive\n");
    return 2;
  }
  const int concurrency = std::max(1, absl::GetFlag(FLAGS_concurrency));
  const int connections =
      std::clamp(absl::GetFlag(FLAGS_connections), 1, concurrency);

  // One channel per connection; a distinct channel arg keeps gRPC from
  // sharing one subchannel (one TCP connection) between them.
  std::vector<std::unique_ptr<v1::TapeService::Stub>> stubs;
  for (int c = 0; c < connections; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("gradtape.unary_load.connection", c);
    stubs.push_back(v1::TapeService::NewStub(
        gradtape::bench::MakeBenchChannel(address, args)));
  }
  std::vector<SessionCredentials> sessions;
  std::string error;
  const std::string api_key = absl::GetFlag(FLAGS_api_key);
  if (!gradtape::bench::CreateSessions(*stubs[0], concurrency, 600, &sessions,
                                       &error, api_key)) {
    std::fprintf(stderr, "unary_load: %s\n", error.c_str());
    return 1;
  }

  const Clock::time_point start = Clock::now();
  const auto duration = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(absl::GetFlag(FLAGS_duration_s)));
  Load load(std::move(stubs), sessions, call == "run", start + duration,
            api_key);
  load.RunToEnd();
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> latencies = load.Latencies();
  const int64_t count = static_cast<int64_t>(latencies.size());

  // Afterwards every session must be clean, and for run hold exactly one
  // result per successful call.
  auto stub = v1::TapeService::NewStub(
      gradtape::bench::MakeBenchChannel(address, grpc::ChannelArguments()));
  const gradtape::bench::SessionsCheck check =
      gradtape::bench::CheckSessions(*stub, sessions, api_key);
  for (const SessionCredentials& session : sessions) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("gradtape-session-id", session.id);
    ctx.AddMetadata("gradtape-session-token", session.token);
    if (!api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key);
    v1::CloseSessionResponse closed;
    stub->CloseSession(&ctx, v1::CloseSessionRequest(), &closed);
  }
  const int64_t errors = load.errors();
  const int64_t expected_live = call == "run" ? count - errors : 0;
  std::printf(
      "unary_load %s%s: %lld requests in %.1f s, %.0f req/s, p50 %.2f ms, "
      "p99 %.2f ms, errors %lld; sessions: %lld unclean, %lld results held "
      "(expected %lld)\n",
      call.c_str(), gradtape::bench::TlsEnabled() ? " (TLS)" : "",
      static_cast<long long>(count), seconds, count / seconds,
      Percentile(latencies, 0.50), Percentile(latencies, 0.99),
      static_cast<long long>(errors), static_cast<long long>(check.unclean),
      static_cast<long long>(check.live_tensors),
      static_cast<long long>(expected_live));
  if (errors != 0) {
    std::fprintf(stderr, "unary_load: first error: %s\n",
                 load.first_error().c_str());
  }
  return errors == 0 && check.unclean == 0 &&
                 check.live_tensors == expected_live
             ? 0
             : 1;
}
