// gradtape-server: serves TapeService until SIGINT or SIGTERM, which start
// a graceful drain (Server::Drain: --shutdown_grace_seconds,
// --checkpoint_on_drain); exits 0 once it is done. SIGHUP re-reads
// --api_keys_file.
//
// Prints "gradtape-server listening on HOST:PORT" on stdout once it accepts
// calls (scripts wait for that line); with --metrics_address, the line
// "gradtape-server metrics on port PORT" comes just before it.
#include <pthread.h>
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/ops/gemm.h"
#include "core/tensor/tensor.h"
#include "server/memory_budget.h"
#include "server/server.h"

ABSL_FLAG(std::string, address, "127.0.0.1:50051",
          "host:port to listen on; port 0 picks a free one");
ABSL_FLAG(int, max_sessions, 1024, "maximum number of open sessions");
// Memory (server/memory_budget.h): -1 derives a value from the machine's or
// the container's memory.
ABSL_FLAG(int64_t, memory_budget_mb, -1,
          "memory the whole server may hold in MiB (tensors, tapes' saved "
          "tensors, kept results, replies being sent); -1 = the cgroup's or "
          "the machine's memory less a fifth (at least 256 MiB) kept for the "
          "process; 0 = no budget");
ABSL_FLAG(int64_t, session_memory_limit_mb, -1,
          "memory limit per session in MiB; -1 = a quarter of the budget; "
          "0 = only the budget limits a session");
ABSL_FLAG(std::string, checkpoint_dir, "/tmp/gradtape-checkpoints",
          "directory of SaveCheckpoint / RestoreCheckpoint files (created on "
          "the first save); empty disables checkpoints");
ABSL_FLAG(bool, plan_programs, true,
          "plan a captured program's gradient at its first call: later calls "
          "run its backward ops with no tape (docs/CAPTURE.md)");
ABSL_FLAG(bool, fuse_programs, true,
          "run runs of elementwise steps of a planned program as one fused "
          "loop (same bits; docs/CAPTURE.md)");
ABSL_FLAG(int, max_message_mb, 256,
          "largest message received or sent, in MiB (a reply that would be "
          "larger refuses the commands whose values do not fit)");
ABSL_FLAG(int64_t, max_tensor_mb, -1,
          "largest tensor any command may create, in MiB (puts, op outputs, "
          "gradients, checkpoints); larger ones are refused before memory is "
          "touched; -1 = a quarter of the budget, at most 16384");
// API keys and tenants (server/api_keys.h; docs/OPERATING.md "API keys and
// tenants").
ABSL_FLAG(std::string, api_keys_file, "",
          "file of API keys, one '<key or sha256:HEX> <tenant> "
          "[max_sessions=N] [memory_mib=M] [max_put_mib=P]' per line; when "
          "set, calls need 'authorization: Bearer <key>'; SIGHUP re-reads it");
ABSL_FLAG(int64_t, keep_alive_seconds, 300,
          "lease of a session whose client asks for 0: idle sessions are "
          "closed after this long");
// Transport security and HTTP/2 keepalive (server/tls.h).
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain of the server; with --tls_key_file the "
          "server speaks TLS only (empty: plaintext)");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA bundle: when set, clients must present a certificate "
          "signed by it (mTLS)");
ABSL_FLAG(int, tls_reload_interval_seconds, 60,
          "how often the TLS files are re-read; renewed certificates are "
          "served to new connections without a restart");
ABSL_FLAG(int64_t, keepalive_time_seconds, 60,
          "ping a client connection after this long without activity");
ABSL_FLAG(int64_t, keepalive_timeout_seconds, 20,
          "close the connection when a keepalive ping is not answered within "
          "this long");
ABSL_FLAG(int64_t, keepalive_min_ping_interval_seconds, 10,
          "shortest interval between client pings the server accepts "
          "(faster pings count as strikes)");
ABSL_FLAG(bool, keepalive_permit_without_calls, true,
          "accept client keepalive pings on a connection with no call open "
          "(and ping such connections too)");
ABSL_FLAG(int, max_ping_strikes, 2,
          "too-frequent client pings tolerated before GOAWAY too_many_pings; "
          "0 = unlimited");
// Graceful drain (SIGTERM / SIGINT).
ABSL_FLAG(int, shutdown_grace_seconds, 25,
          "on SIGTERM or SIGINT: how long in-flight calls may run before "
          "they are cancelled (keep it under the pod's "
          "terminationGracePeriodSeconds)");
ABSL_FLAG(std::string, health_address, "",
          "host:port of a plaintext listener serving only grpc.health.v1 "
          "(for probes that cannot speak TLS); empty: none");
ABSL_FLAG(bool, checkpoint_on_drain, false,
          "on SIGTERM or SIGINT: save every open session's variables to "
          "--checkpoint_dir as drain-<session_id> before exiting");

// Deadlines, scheduling and admission (server/worker_pool.h).
ABSL_FLAG(int, worker_threads, -1,
          "threads that apply batches (sessions in turn, each session's "
          "batches in order); -1 = 4 per core, at least 8; 0 = "
          "inline on gRPC's callback threads (no pool, for comparison)");
ABSL_FLAG(int64_t, max_inflight_batches,
          gradtape::server::ServerOptions::kDefaultMaxInflightBatches,
          "batches queued or running across the server; past it a Run gets "
          "RESOURCE_EXHAUSTED and a Stream's next batch waits; 0 = unlimited");
// Exactly-once application (server/result_cache.h).
ABSL_FLAG(int64_t, result_cache_mb, 64,
          "per session, MiB of command results kept until the client "
          "acknowledges them (CommandBatch.ack_seq), to answer commands "
          "resent after a lost reply; oldest dropped first; 0 = keep none");
// Metrics and access log (server/metrics.h, server/access_log.h).
ABSL_FLAG(std::string, metrics_address, "",
          "host:port of the Prometheus endpoint (HTTP GET /metrics); empty = "
          "no metrics");
ABSL_FLAG(std::string, access_log, "",
          "file that gets one JSON line per RPC (appended; - = stdout); "
          "empty = no access log");

namespace {

using gradtape::server::MemorySettings;
using gradtape::server::ServerOptions;

// Blocks the stop signals (and SIGHUP: reload the API keys) in every thread
// (gRPC's threads inherit the mask); they are taken synchronously with
// sigwait.
sigset_t BlockSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Transport security and HTTP/2 keepalive (server/tls.h).
void TransportFromFlags(ServerOptions& options) {
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  options.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  options.tls_reload_interval_seconds =
      absl::GetFlag(FLAGS_tls_reload_interval_seconds);
  options.keepalive_time_seconds = absl::GetFlag(FLAGS_keepalive_time_seconds);
  options.keepalive_timeout_seconds =
      absl::GetFlag(FLAGS_keepalive_timeout_seconds);
  options.keepalive_min_ping_interval_seconds =
      absl::GetFlag(FLAGS_keepalive_min_ping_interval_seconds);
  options.keepalive_permit_without_calls =
      absl::GetFlag(FLAGS_keepalive_permit_without_calls);
  options.max_ping_strikes = absl::GetFlag(FLAGS_max_ping_strikes);
}

// The flags checked here rather than by Server::Start (their units are
// MiB and seconds): the first one out of range, as INVALID_ARGUMENT.
absl::Status CheckedFlagsToOptions(ServerOptions& options) {
  const int64_t result_cache_mb = absl::GetFlag(FLAGS_result_cache_mb);
  if (result_cache_mb < 0 || result_cache_mb > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--result_cache_mb must be 0 to 2^30, got ", result_cache_mb));
  }
  options.result_cache_bytes = result_cache_mb << 20;
  const int max_message_mb = absl::GetFlag(FLAGS_max_message_mb);
  if (max_message_mb <= 0 || max_message_mb > 2047) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_message_mb must be 1 to 2047, got ", max_message_mb));
  }
  options.max_message_bytes = max_message_mb << 20;
  // Graceful drain.
  const int shutdown_grace_seconds =
      absl::GetFlag(FLAGS_shutdown_grace_seconds);
  if (shutdown_grace_seconds < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shutdown_grace_seconds must be >= 0, got ", shutdown_grace_seconds));
  }
  options.shutdown_grace = absl::Seconds(shutdown_grace_seconds);
  return absl::OkStatus();
}

// The server's options from the flags, with `memory` (the resolved
// memory flags); an error says which flag is out of range.
absl::StatusOr<ServerOptions> OptionsFromFlags(const MemorySettings& memory) {
  ServerOptions options;
  options.address = absl::GetFlag(FLAGS_address);
  options.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  options.memory_budget_bytes = memory.budget_bytes;
  options.session_memory_limit_bytes = memory.session_limit_bytes;
  options.keep_alive_seconds = absl::GetFlag(FLAGS_keep_alive_seconds);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.plan_programs = absl::GetFlag(FLAGS_plan_programs);
  options.fuse_programs = absl::GetFlag(FLAGS_fuse_programs);
  TransportFromFlags(options);
  options.api_keys_file = absl::GetFlag(FLAGS_api_keys_file);
  options.worker_threads = absl::GetFlag(FLAGS_worker_threads);
  options.max_inflight_batches = absl::GetFlag(FLAGS_max_inflight_batches);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  options.access_log = absl::GetFlag(FLAGS_access_log);
  if (absl::Status s = CheckedFlagsToOptions(options); !s.ok()) return s;
  options.checkpoint_on_drain = absl::GetFlag(FLAGS_checkpoint_on_drain);
  options.health_address = absl::GetFlag(FLAGS_health_address);
  return options;
}

// Serves until SIGINT or SIGTERM (returned); SIGHUP re-reads the API keys.
int ServeUntilStopSignal(gradtape::server::Server& server,
                         const sigset_t& signals) {
  int signal_number = 0;
  while (sigwait(&signals, &signal_number) == 0 && signal_number == SIGHUP) {
    // The message names the file and line of an error, never a key.
    absl::Status reloaded = server.ReloadApiKeys();
    std::fprintf(stderr, "gradtape-server: SIGHUP: %s\n",
                 reloaded.ok()
                     ? "API keys reloaded"
                     : absl::StrCat("reload failed, the old keys stay "
                                    "in force: ",
                                    reloaded.ToString())
                           .c_str());
  }
  return signal_number;
}

// The graceful drain after stop signal `signal_number`. A second stop
// signal ends the process at once (no checkpoints); SIGHUP is ignored
// during the drain.
void Drain(gradtape::server::Server& server, const sigset_t& signals,
           int signal_number, absl::Duration grace) {
  std::fprintf(stderr, "gradtape-server: signal %d, draining (grace %d s)\n",
               signal_number, static_cast<int>(absl::ToInt64Seconds(grace)));
  std::thread([signals] {
    int second = 0;
    while (sigwait(&signals, &second) == 0 && second == SIGHUP) {
    }
    std::fprintf(stderr, "gradtape-server: signal %d again, exiting now\n",
                 second);
    std::_Exit(1);
  }).detach();
  const absl::Time start = absl::Now();
  server.Shutdown();  // Drain(options.shutdown_grace)
  std::fprintf(stderr, "gradtape-server: drained in %.2f s, exiting\n",
               absl::ToDoubleSeconds(absl::Now() - start));
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "gradtape-server: %s\n",
               std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gradtape-server: a gradient-tape gRPC service for remote eager "
      "clients.\nUsage: gradtape-server [--address=127.0.0.1:50051] ...");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built without NDEBUG, so absl::Mutex records every
  // lock order for deadlock detection (GraphCycles took ~4% of the server's
  // CPU under unary load: docs/PERFORMANCE.md). Our lock order is fixed by
  // design (manager, then one session); tests and sanitizer runs keep the
  // detector on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const sigset_t signals = BlockSignals();

  absl::StatusOr<MemorySettings> memory =
      gradtape::server::ResolveMemorySettings(
          absl::GetFlag(FLAGS_memory_budget_mb),
          absl::GetFlag(FLAGS_session_memory_limit_mb),
          absl::GetFlag(FLAGS_max_tensor_mb),
          gradtape::server::DetectMemoryLimit());
  if (!memory.ok()) return Fail(memory.status());
  absl::StatusOr<ServerOptions> options = OptionsFromFlags(*memory);
  if (!options.ok()) return Fail(options.status());
  gradtape::TensorLimits limits;
  limits.max_bytes = memory->max_tensor_bytes;
  gradtape::SetTensorLimits(limits);
  std::fprintf(stderr, "gradtape-server: %s\n",
               gradtape::server::DescribeMemorySettings(*memory).c_str());
  std::fprintf(stderr, "gradtape-server: GEMM kernels %s%s\n",
               gradtape::GemmKernelsName().c_str(),
               gradtape::BlasCoreTypeFromCpu()
                   ? " (OPENBLAS_CORETYPE from the CPU's features)"
                   : "");
  absl::StatusOr<std::unique_ptr<gradtape::server::Server>> server =
      gradtape::server::Server::Start(*options);
  if (!server.ok()) {
    std::fprintf(stderr, "gradtape-server: %s\n",
                 server.status().ToString().c_str());
    return 1;
  }
  if ((*server)->metrics_port() != 0) {
    std::printf("gradtape-server metrics on port %d\n",
                (*server)->metrics_port());
  }
  std::printf("gradtape-server listening on %s\n",
              (*server)->address().c_str());
  std::fflush(stdout);
  const int signal_number = ServeUntilStopSignal(**server, signals);
  Drain(**server, signals, signal_number, options->shutdown_grace);
  return 0;
}
