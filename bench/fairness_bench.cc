// fairness_bench: does one session's long ops stall another session's small
// ones? --long_sessions sessions each run MatMul [n, n] x [n, n] (float32,
// ~2 s at the default n on a 2-core machine) back to back with Run, while
// one small session does small-op round trips (Run: put a float32[4],
// AddV2, fetch, release) one after the other. Prints, per mode, the small
// session's round trips and their p50 / p99 / max latency, and the long ops
// done with their median duration.
//
//   fairness_bench [--modes=pool,inline] [--rounds=1] [--duration_s=10]
//                  [--long_sessions=1] [--n=4096] [--address=HOST:PORT]
//
// Without --address each mode starts an in-process server on 127.0.0.1:
// "pool" with the default --worker_threads (server/worker_pool.h), "inline"
// with worker_threads = 0 (batches on gRPC's callback threads: the behaviour
// before the pool), "pool:N" with N workers; modes alternate, --rounds
// times. With --address it drives that server once (its own flags decide).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/ops/parallel.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/server.h"

ABSL_FLAG(std::string, address, "", "server to drive; empty: in-process");
ABSL_FLAG(std::string, modes, "pool,inline",
          "in-process server configurations: pool | pool:N | inline");
ABSL_FLAG(int, rounds, 1, "times each mode runs (alternating)");
ABSL_FLAG(double, duration_s, 10, "seconds of load per run");
ABSL_FLAG(int, long_sessions, 1, "sessions running long MatMuls");
ABSL_FLAG(int, n, 4096, "the long MatMul is [n, n] x [n, n] float32");

namespace v1 = gradtape::v1;

namespace {

using Clock = std::chrono::steady_clock;

struct Creds {
  std::string id, token;
};

struct Client {
  std::unique_ptr<v1::TapeService::Stub> stub;
  Creds creds;
  int64_t seq = 0;

  grpc::Status Run(const v1::CommandBatch& batch, v1::BatchReply* reply) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
    context.AddMetadata("gradtape-session-id", creds.id);
    context.AddMetadata("gradtape-session-token", creds.token);
    return stub->Run(&context, batch, reply);
  }
  v1::Command* Add(v1::CommandBatch& batch) {
    v1::Command* cmd = batch.add_commands();
    cmd->set_seq(++seq);
    return cmd;
  }
};

bool Connect(const std::string& address, Client* client) {
  // One channel per session, as separate clients would have.
  grpc::ChannelArguments args;
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  client->stub = v1::TapeService::NewStub(grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext context;
  v1::CreateSessionRequest request;
  v1::CreateSessionResponse response;
  grpc::Status s = client->stub->CreateSession(&context, request, &response);
  if (!s.ok()) {
    std::fprintf(stderr, "CreateSession: %s\n", s.error_message().c_str());
    return false;
  }
  client->creds = {response.session_id(), response.token()};
  return true;
}

v1::TensorValue Floats(std::vector<int64_t> shape, std::vector<float> v) {
  v1::TensorValue value;
  value.set_dtype(v1::DTYPE_FLOAT32);
  for (int64_t d : shape) value.add_shape(d);
  value.set_data(reinterpret_cast<const char*>(v.data()),
                 v.size() * sizeof(float));
  return value;
}

v1::ExecuteOp* Exec(Client& c, v1::CommandBatch& batch, const char* op,
                    std::vector<int64_t> in, int64_t out) {
  v1::ExecuteOp* exec = c.Add(batch)->mutable_execute();
  exec->set_op(op);
  for (int64_t id : in) exec->add_input_ids(id);
  exec->add_output_ids(out);
  return exec;
}

bool CheckReply(const char* what, const grpc::Status& s,
                const v1::BatchReply& reply) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.error_message().c_str());
    return false;
  }
  for (const v1::CommandResult& r : reply.results()) {
    if (r.has_error()) {
      std::fprintf(stderr, "%s: %s\n", what, r.error().message().c_str());
      return false;
    }
  }
  return true;
}

// Runs MatMul [n, n] x [n, n] until `stop`; durations in seconds.
void LongLoop(Client& c, int n, const std::atomic<bool>& stop,
              std::vector<double>* durations, std::atomic<bool>* failed) {
  v1::CommandBatch setup;
  c.Add(setup)->mutable_put()->set_id(1);
  *setup.mutable_commands(0)->mutable_put()->mutable_value() =
      Floats({1, 1}, {0.5f});
  v1::AttrValue shape;
  shape.mutable_ints()->add_values(n);
  shape.mutable_ints()->add_values(n);
  (*Exec(c, setup, "BroadcastTo", {1}, 2)->mutable_attrs())["shape"] = shape;
  v1::BatchReply reply;
  if (!CheckReply("long setup", c.Run(setup, &reply), reply)) {
    *failed = true;
    return;
  }
  while (!stop.load()) {
    v1::CommandBatch batch;
    Exec(c, batch, "MatMul", {2, 2}, 3);
    c.Add(batch)->mutable_release()->add_ids(3);
    const auto start = Clock::now();
    if (!CheckReply("long MatMul", c.Run(batch, &reply), reply)) {
      *failed = true;
      return;
    }
    durations->push_back(
        std::chrono::duration<double>(Clock::now() - start).count());
  }
}

// Small-op round trips until `stop`; latencies in ms.
void SmallLoop(Client& c, const std::atomic<bool>& stop,
               std::vector<double>* latencies, std::atomic<bool>* failed) {
  v1::BatchReply reply;
  while (!stop.load()) {
    v1::CommandBatch batch;
    v1::Command* put = c.Add(batch);
    put->mutable_put()->set_id(1);
    *put->mutable_put()->mutable_value() = Floats({4}, {1, 2, 3, 4});
    Exec(c, batch, "AddV2", {1, 1}, 2);
    c.Add(batch)->mutable_fetch()->set_id(2);
    v1::ReleaseTensors* release = c.Add(batch)->mutable_release();
    release->add_ids(1);
    release->add_ids(2);
    const auto start = Clock::now();
    if (!CheckReply("small round trip", c.Run(batch, &reply), reply)) {
      *failed = true;
      return;
    }
    latencies->push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - start)
            .count());
  }
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * v.size()));
  return v[i];
}

// One measurement against `address`; false on any error.
bool Measure(const std::string& label, const std::string& address) {
  const int long_sessions = absl::GetFlag(FLAGS_long_sessions);
  std::vector<Client> longs(long_sessions);
  Client small;
  for (Client& c : longs) {
    if (!Connect(address, &c)) return false;
  }
  if (!Connect(address, &small)) return false;
  std::atomic<bool> stop{false}, failed{false};
  std::vector<std::vector<double>> long_durations(long_sessions);
  std::vector<double> latencies;
  std::vector<std::thread> threads;
  for (int i = 0; i < long_sessions; ++i) {
    threads.emplace_back([&, i] {
      LongLoop(longs[i], absl::GetFlag(FLAGS_n), stop, &long_durations[i],
               &failed);
    });
  }
  // Let the long ops start (the setup allocates the input) before timing.
  absl::SleepFor(absl::Milliseconds(500));
  std::thread small_thread(
      [&] { SmallLoop(small, stop, &latencies, &failed); });
  absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_duration_s)));
  stop = true;
  small_thread.join();
  for (std::thread& t : threads) t.join();
  std::vector<double> all_long;
  for (const auto& d : long_durations) {
    all_long.insert(all_long.end(), d.begin(), d.end());
  }
  std::printf(
      "%-10s small round trips %6zu  p50 %8.2f ms  p99 %8.2f ms  max %8.2f "
      "ms | long MatMul %d^3 done %3zu  median %.2f s\n",
      label.c_str(), latencies.size(), Quantile(latencies, 0.5),
      Quantile(latencies, 0.99), Quantile(latencies, 1.0),
      absl::GetFlag(FLAGS_n), all_long.size(), Quantile(all_long, 0.5));
  std::fflush(stdout);
  return !failed.load();
}

bool MeasureInProcess(const std::string& mode) {
  gradtape::server::ServerOptions options;
  options.address = "127.0.0.1:0";
  if (mode == "inline") {
    options.worker_threads = 0;
  } else if (absl::StartsWith(mode, "pool:")) {
    if (!absl::SimpleAtoi(mode.substr(5), &options.worker_threads)) {
      std::fprintf(stderr, "bad mode %s\n", mode.c_str());
      return false;
    }
  } else if (mode != "pool") {
    std::fprintf(stderr, "unknown mode %s (pool | pool:N | inline)\n",
                 mode.c_str());
    return false;
  }
  auto server = gradtape::server::Server::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return false;
  }
  return Measure(mode, (*server)->address());
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::printf(
      "fairness_bench: %d long session(s) of MatMul %d^3 float32 vs one "
      "small session's round trips, %.0f s per run, %u hardware threads, "
      "intra-op degree %d\n",
      absl::GetFlag(FLAGS_long_sessions), absl::GetFlag(FLAGS_n),
      absl::GetFlag(FLAGS_duration_s), std::thread::hardware_concurrency(),
      gradtape::ParallelismDegree());
  const std::string address = absl::GetFlag(FLAGS_address);
  if (!address.empty()) return Measure(address, address) ? 0 : 1;
  const std::vector<std::string> modes =
      absl::StrSplit(absl::GetFlag(FLAGS_modes), ',');
  bool ok = true;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (const std::string& mode : modes) ok = MeasureInProcess(mode) && ok;
  }
  return ok ? 0 : 1;
}
