// Thin-client training step: the C++ example MLP (client/examples/mlp.h,
// TrainMlp: 2-64-2 on a 2-arm spiral, float32, plain SGD) at batch 64,
// stepped through a gradtape server on 127.0.0.1 versus the same ops, in the
// same order, executed in-process on a core gradtape::Session (no gRPC, no
// protobuf). Prints the median time per step over --reps runs of --steps
// steps for both, and remote / in-process.
//
// Run: build-perf/bench/mlp_bench [--steps=300] [--reps=5]
//      [--mode=both|remote|local] [--client_batch_size=512]
// --mode=remote or local runs only one side (for profiling one of them).
// --tls_certs_dir=DIR (from tests/make_test_certs.sh DIR) adds remote runs
// over TLS, alternated with the plaintext ones in each rep.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "client/examples/mlp.h"
#include "core/ops/ops.h"
#include "core/session/session.h"
#include "server/server.h"

ABSL_FLAG(int, steps, 300, "training steps per run");
ABSL_FLAG(int, reps, 5, "runs; medians are printed");
ABSL_FLAG(int, client_batch_size, 512, "client commands per batch");
ABSL_FLAG(bool, mutex_deadlock_detection, false,
          "keep absl::Mutex deadlock detection on (Debian's Abseil is built "
          "without NDEBUG, so it is on unless turned off); gradtape-server "
          "turns it off in main(), and so does this benchmark by default");
ABSL_FLAG(int, worker_threads, -1,
          "the in-process server's --worker_threads (-1: its default; 0: "
          "batches inline on gRPC's threads, as before the worker pool)");
ABSL_FLAG(std::string, mode, "both",
          "both: remote and in-process; remote or local: only that one");
ABSL_FLAG(std::string, tls_certs_dir, "",
          "a directory made by tests/make_test_certs.sh: the remote side also "
          "runs over TLS, against a second in-process server, alternated "
          "with the plaintext runs (prints tls/plaintext)");

namespace gradtape {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kHidden = 64;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "mlp_bench: %s\n", what.c_str());
  std::exit(1);
}

void Check(const absl::Status& s) {
  if (!s.ok()) Die(s.ToString());
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// TrainMlp's op sequence on a core Session (ids chosen here, as a client
// would): per step push a tape, watch the parameters, forward, pop, the
// gradient, p <- p - lr * dp, release what the client's handles release.
double InProcessSeconds(const examples::Dataset& data, int steps) {
  Session session(DefaultRegistry(), SessionOptions());
  int64_t seq = 0, next_id = 0, next_tape = 0;
  auto id = [&] { return ++next_id; };
  auto run = [&](const char* op, std::vector<int64_t> in, AttrMap attrs = {},
                 int outputs = 1) {
    std::vector<int64_t> out;
    for (int i = 0; i < outputs; ++i) out.push_back(id());
    Check(session.ExecuteOp(++seq, op, in, out, std::move(attrs)));
    return out;
  };
  const Clock::time_point start = Clock::now();
  const int64_t n = data.num_points, k = data.num_classes;
  auto put = [&](std::vector<int64_t> shape, std::vector<float> values) {
    const int64_t i = id();
    Check(
        session.PutTensor(++seq, i, Tensor::FromVector<float>(shape, values)));
    return i;
  };
  const int64_t x = put(
      {n, 2}, std::vector<float>(data.features.begin(), data.features.end()));
  const int64_t y = id();
  Check(session.PutTensor(++seq, y,
                          Tensor::FromVector<int32_t>({n}, data.labels)));
  const int64_t lr = put({}, {1.0f});
  std::mt19937_64 gen(1);
  std::normal_distribution<float> normal(0, 0.1f);
  auto random = [&](int64_t count) {
    std::vector<float> v(count);
    for (float& f : v) f = normal(gen);
    return v;
  };
  std::vector<int64_t> params = {
      put({2, kHidden}, random(2 * kHidden)),
      put({kHidden}, std::vector<float>(kHidden, 0.0f)),
      put({kHidden, k}, random(kHidden * k)),
      put({k}, std::vector<float>(k, 0.0f))};
  const AttrMap matmul = {{"transpose_a", false}, {"transpose_b", false}};
  const AttrMap mean = {{"axis", std::vector<int64_t>{}}, {"keep_dims", false}};
  // Steps 0..steps-1 train; like TrainMlp, a last pass computes the loss of
  // the final parameters on a tape and fetches it (TrainMlp logs the last
  // step), then the logits below.
  for (int step = 0; step <= steps; ++step) {
    const int64_t tape = ++next_tape;
    Check(session.PushTape(++seq, tape, false, true));
    Check(session.Watch(++seq, tape, params));
    const int64_t h1 = run("MatMul", {x, params[0]}, matmul)[0];
    const int64_t h2 = run("BiasAdd", {h1, params[1]})[0];
    const int64_t h3 = run("Relu", {h2})[0];
    const int64_t l1 = run("MatMul", {h3, params[2]}, matmul)[0];
    const int64_t l2 = run("BiasAdd", {l1, params[3]})[0];
    const std::vector<int64_t> ce =
        run("SparseSoftmaxCrossEntropyWithLogits", {l2, y}, {}, 2);
    const int64_t loss = run("Mean", {ce[0]}, mean)[0];
    Check(session.ReleaseTensors(++seq, {h1, h2, h3, l1, l2, ce[0], ce[1]}));
    Check(session.PopTape(++seq, tape));
    if (step == steps) {
      Check(session.FetchTensor(++seq, loss).status());
      Check(session.ReleaseTensors(++seq, {loss}));
      Check(session.DeleteTape(++seq, tape));
      break;
    }
    GradientRequest request;
    request.tape = tape;
    request.targets = {loss};
    request.sources = params;
    for (size_t i = 0; i < params.size(); ++i) {
      request.result_ids.push_back(id());
    }
    Check(session.Gradient(++seq, request).status());
    std::vector<int64_t> released = {loss};
    for (size_t i = 0; i < params.size(); ++i) {
      const int64_t scaled = run("Mul", {lr, request.result_ids[i]})[0];
      const int64_t updated = run("Sub", {params[i], scaled})[0];
      released.insert(released.end(),
                      {params[i], scaled, request.result_ids[i]});
      params[i] = updated;
    }
    Check(session.ReleaseTensors(++seq, released));
    Check(session.DeleteTape(++seq, tape));
  }
  // TrainMlp ends with the logits of the final parameters.
  const int64_t h =
      run("Relu", {run("BiasAdd", {run("MatMul", {x, params[0]}, matmul)[0],
                                   params[1]})[0]})[0];
  const int64_t logits =
      run("BiasAdd", {run("MatMul", {h, params[2]}, matmul)[0], params[3]})[0];
  Check(session.FetchTensor(++seq, logits).status());
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) Die("cannot read " + path);
  return text.str();
}

double RemoteSeconds(const std::string& address, const examples::Dataset& data,
                     int steps, const std::string& tls_certs_dir = "") {
  client::SessionOptions options;
  options.batch_size = absl::GetFlag(FLAGS_client_batch_size);
  if (!tls_certs_dir.empty()) {
    client::TlsOptions tls;
    tls.root_certificates = ReadFile(tls_certs_dir + "/ca.pem");
    options.tls = tls;
  }
  auto session = client::Session::Connect(address, options);
  if (!session.ok()) Die(session.status().ToString());
  examples::MlpOptions mlp;
  mlp.hidden = kHidden;
  mlp.steps = steps;
  mlp.log_every = 0;
  const Clock::time_point start = Clock::now();
  auto report = examples::TrainMlp(**session, data, mlp);
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  if (!report.ok()) Die(report.status().ToString());
  Check((*session)->Close());
  return s;
}

}  // namespace
}  // namespace gradtape

int main(int argc, char** argv) {
  using namespace gradtape;
  absl::ParseCommandLine(argc, argv);
  // As server/main.cc: the in-process server (and the client, which shares
  // the process) run without the lock-order recording of a debug Abseil.
  if (!absl::GetFlag(FLAGS_mutex_deadlock_detection)) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  server::ServerOptions options;
  options.address = "127.0.0.1:0";
  options.worker_threads = absl::GetFlag(FLAGS_worker_threads);
  auto server = server::Server::Start(options);
  if (!server.ok()) Die(server.status().ToString());
  // 2 classes of 32 points: batch 64 (3 arms would not divide 64 evenly).
  const examples::Dataset data = examples::MakeSpiral(32, 2, 0.2, 1);
  const int steps = absl::GetFlag(FLAGS_steps);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "both" && mode != "remote" && mode != "local") {
    Die("--mode must be both, remote or local, got " + mode);
  }
  // TLS: a second server, so both transports run in the same process.
  const std::string tls_dir = absl::GetFlag(FLAGS_tls_certs_dir);
  std::unique_ptr<server::Server> tls_server;
  if (!tls_dir.empty() && mode != "local") {
    server::ServerOptions tls_options = options;
    tls_options.tls_cert_file = tls_dir + "/server.pem";
    tls_options.tls_key_file = tls_dir + "/server.key";
    auto started = server::Server::Start(tls_options);
    if (!started.ok()) Die(started.status().ToString());
    tls_server = *std::move(started);
  }
  std::vector<double> remote, remote_tls, local;
  for (int r = 0; r < absl::GetFlag(FLAGS_reps); ++r) {
    auto run_plaintext = [&] {
      if (mode != "local") {
        remote.push_back(RemoteSeconds((*server)->address(), data, steps) /
                         steps);
      }
    };
    auto run_tls = [&] {
      if (tls_server != nullptr) {
        remote_tls.push_back(
            RemoteSeconds(tls_server->address(), data, steps, tls_dir) / steps);
      }
    };
    // Alternate which transport goes first, so neither always runs cold.
    if (r % 2 == 0) {
      run_plaintext();
      run_tls();
    } else {
      run_tls();
      run_plaintext();
    }
    if (mode != "remote")
      local.push_back(InProcessSeconds(data, steps) / steps);
  }
  std::printf("mlp step (batch %lld, 2-%d-%d, float32):",
              static_cast<long long>(data.num_points), kHidden,
              data.num_classes);
  if (!remote.empty())
    std::printf(" remote %.1f us/step", Median(remote) * 1e6);
  if (!local.empty()) {
    std::printf("%s in-process %.1f us/step", remote.empty() ? "" : ",",
                Median(local) * 1e6);
  }
  if (!remote.empty() && !local.empty()) {
    std::printf(", remote/in-process %.2f", Median(remote) / Median(local));
  }
  if (!remote_tls.empty()) {
    std::printf(", remote over TLS %.1f us/step, tls/plaintext %.3f",
                Median(remote_tls) * 1e6, Median(remote_tls) / Median(remote));
  }
  std::printf("\n");
  (*server)->Shutdown();
  return 0;
}
