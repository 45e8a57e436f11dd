// gradtape-server: serves TapeService until SIGINT or SIGTERM; SIGHUP
// re-reads --api_keys_file.
//
// Prints "gradtape-server listening on HOST:PORT" on stdout once it accepts
// calls (scripts wait for that line).
#include <pthread.h>
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
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
// API keys and tenants (server/api_keys.h, README "API keys and tenants").
ABSL_FLAG(std::string, api_keys_file, "",
          "file of API keys, one '<key or sha256:HEX> <tenant> "
          "[max_sessions=N] [memory_mib=M] [max_put_mib=P]' per line; when "
          "set, calls need 'authorization: Bearer <key>'; SIGHUP re-reads it");
ABSL_FLAG(int64_t, keep_alive_seconds, 300,
          "lease of a session whose client asks for 0: idle sessions are "
          "closed after this long");

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
  sigaddset(&stop_signals, SIGHUP);  // reload the API keys (below)
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  gradtape::server::ServerOptions options;
  options.address = absl::GetFlag(FLAGS_address);
  options.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  options.session_memory_limit_bytes =
      absl::GetFlag(FLAGS_session_memory_limit_mb) * (int64_t{1} << 20);
  options.keep_alive_seconds = absl::GetFlag(FLAGS_keep_alive_seconds);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.api_keys_file = absl::GetFlag(FLAGS_api_keys_file);
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
  std::printf("gradtape-server listening on %s\n",
              (*server)->address().c_str());
  std::fflush(stdout);

  int signal_number = 0;
  while (sigwait(&stop_signals, &signal_number) == 0 &&
         signal_number == SIGHUP) {
    // The message names the file and line of an error, never a key.
    absl::Status reloaded = (*server)->ReloadApiKeys();
    std::fprintf(stderr, "gradtape-server: SIGHUP: %s\n",
                 reloaded.ok()
                     ? "API keys reloaded"
                     : absl::StrCat("reload failed, the old keys stay "
                                    "in force: ",
                                    reloaded.ToString())
                           .c_str());
  }
  std::fprintf(stderr, "gradtape-server: signal %d, shutting down\n",
               signal_number);
  (*server)->Shutdown();
  return 0;
}
