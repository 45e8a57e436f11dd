// gradtape-server: serves TapeService until SIGINT or SIGTERM.
//
// Prints "gradtape-server listening on HOST:PORT" on stdout once it accepts
// calls (scripts wait for that line); with --metrics_address, the line
// "gradtape-server metrics on port PORT" comes just before it.
#include <pthread.h>
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "core/tensor/tensor.h"
#include "server/server.h"

ABSL_FLAG(std::string, address, "127.0.0.1:50051",
          "host:port to listen on; port 0 picks a free one");
ABSL_FLAG(int, max_sessions, 1024, "maximum number of open sessions");
ABSL_FLAG(int64_t, session_memory_limit_mb, 0,
          "tensor memory limit per session in MiB; 0 = unlimited");
ABSL_FLAG(std::string, checkpoint_dir, "/tmp/gradtape-checkpoints",
          "directory of SaveCheckpoint / RestoreCheckpoint files (created on "
          "the first save); empty disables checkpoints");
ABSL_FLAG(int, max_message_mb, 256,
          "largest message received or sent, in MiB (a reply that would be "
          "larger refuses the commands whose values do not fit)");
ABSL_FLAG(int64_t, max_tensor_mb, 16384,
          "largest tensor any command may create, in MiB (puts, op outputs, "
          "gradients, checkpoints); larger ones are refused before memory is "
          "touched");
ABSL_FLAG(int64_t, keep_alive_seconds, 300,
          "lease of a session whose client asks for 0: idle sessions are "
          "closed after this long");
// Metrics and access log (server/metrics.h, server/access_log.h).
ABSL_FLAG(std::string, metrics_address, "",
          "host:port of the Prometheus endpoint (HTTP GET /metrics); empty = "
          "no metrics");
ABSL_FLAG(std::string, access_log, "",
          "file that gets one JSON line per RPC (appended; - = stdout); "
          "empty = no access log");

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

  // Block the stop signals in every thread (gRPC's threads inherit the mask)
  // and take them synchronously below with sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  gradtape::server::ServerOptions options;
  options.address = absl::GetFlag(FLAGS_address);
  options.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  options.session_memory_limit_bytes =
      absl::GetFlag(FLAGS_session_memory_limit_mb) * (int64_t{1} << 20);
  options.keep_alive_seconds = absl::GetFlag(FLAGS_keep_alive_seconds);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  options.access_log = absl::GetFlag(FLAGS_access_log);
  const int max_message_mb = absl::GetFlag(FLAGS_max_message_mb);
  if (max_message_mb <= 0 || max_message_mb > 2047) {
    std::fprintf(stderr,
                 "gradtape-server: --max_message_mb must be 1 to 2047, got "
                 "%d\n",
                 max_message_mb);
    return 1;
  }
  options.max_message_bytes = max_message_mb << 20;
  const int64_t max_tensor_mb = absl::GetFlag(FLAGS_max_tensor_mb);
  if (max_tensor_mb <= 0 || max_tensor_mb > (int64_t{1} << 30)) {
    std::fprintf(stderr,
                 "gradtape-server: --max_tensor_mb must be 1 to 2^30, got "
                 "%lld\n",
                 static_cast<long long>(max_tensor_mb));
    return 1;
  }
  gradtape::TensorLimits limits;
  limits.max_bytes = max_tensor_mb << 20;
  gradtape::SetTensorLimits(limits);
  absl::StatusOr<std::unique_ptr<gradtape::server::Server>> server =
      gradtape::server::Server::Start(options);
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

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  std::fprintf(stderr, "gradtape-server: signal %d, shutting down\n",
               signal_number);
  (*server)->Shutdown();
  return 0;
}
