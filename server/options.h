// ServerOptions: everything gradtape-server's flags set (server/main.cc),
// read by Server::Start (server/server.h) and the transport settings
// (server/tls.h). A plain struct: no server code.
#ifndef GRADTAPE_SERVER_OPTIONS_H_
#define GRADTAPE_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace gradtape::server {

struct ServerOptions {
  std::string address = "127.0.0.1:50051";  // "127.0.0.1:0" picks a free port
  int max_sessions = 1024;
  // The server-wide memory budget (server/memory_budget.h): every charge in
  // the process must fit it (ProcessMemoryAccount's limit); 0 = none.
  int64_t memory_budget_bytes = 0;
  int64_t session_memory_limit_bytes = 0;  // 0 = unlimited
  int64_t keep_alive_seconds = 300;  // default lease when the client asks for 0
  // Directory of SaveCheckpoint / RestoreCheckpoint files, shared by all
  // sessions (created on the first save); empty disables checkpoints.
  std::string checkpoint_dir;
  // Captured programs: plan each one's gradient at its first call, and fuse
  // its elementwise steps (SessionOptions).
  bool plan_programs = true;
  bool fuse_programs = true;
  // Largest message received or sent (tensors travel inside messages). A
  // batch's reply holds at most this less kReplyMarginBytes of results: a
  // command whose returned values would not fit fails alone with
  // RESOURCE_EXHAUSTED (server/batch.h). At least kMinMessageBytes.
  int max_message_bytes = kDefaultMaxMessageBytes;

  // A second, plaintext listener that serves only grpc.health.v1 (the same
  // statuses as the main port, NOT_SERVING during a drain), for probes that
  // cannot speak TLS (Kubernetes' gRPC probes); empty: none. "host:0" picks
  // a free port (health_port()).
  std::string health_address;

  // Transport security and HTTP/2 keepalive (server/tls.h). No certificate:
  // plaintext. tls_cert_file + tls_key_file: TLS; + tls_client_ca_file:
  // mTLS (client certificates required and verified). The files are re-read
  // every tls_reload_interval_seconds.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  int tls_reload_interval_seconds = 60;
  int64_t keepalive_time_seconds = 60;
  int64_t keepalive_timeout_seconds = 20;
  int64_t keepalive_min_ping_interval_seconds = 10;
  bool keepalive_permit_without_calls = true;
  int max_ping_strikes = 2;
  // Graceful drain (Server::Drain; --shutdown_grace_seconds,
  // --checkpoint_on_drain). How long Shutdown lets calls run before it
  // cancels them; at least zero.
  absl::Duration shutdown_grace = absl::Seconds(25);
  // Save every open session's variables to checkpoint_dir (which must be
  // set) as "drain-<session id>" when the server drains or shuts down.
  bool checkpoint_on_drain = false;
  // API keys and tenants (server/api_keys.h): the keys file; empty means no
  // keys (any client may create sessions). When set, every call but ListOps
  // needs `authorization: Bearer <key>`, and sessions are bound to the key's
  // tenant and its quotas.
  std::string api_keys_file;
  // Scheduling and admission (server/worker_pool.h). Batches run on
  // `worker_threads` workers, a session's batches in order, sessions in
  // turn; 0 runs them inline on gRPC's callback threads (the old behaviour,
  // kept for comparison), -1 picks WorkerPool::DefaultThreads() (4 per
  // core, at least 8). At most `max_inflight_batches` batches are
  // queued or running at once (0 = unlimited): past it a Run fails with
  // RESOURCE_EXHAUSTED and a Stream's next batch waits.
  int worker_threads = -1;
  int64_t max_inflight_batches = kDefaultMaxInflightBatches;
  static constexpr int64_t kDefaultMaxInflightBatches = 1024;
  // Exactly-once application (server/result_cache.h): per session, the
  // results its client has not acknowledged are kept up to this many bytes
  // (oldest dropped first) to answer resent commands; 0 keeps none.
  int64_t result_cache_bytes = int64_t{64} << 20;
  // Metrics and access log (server/metrics.h, server/access_log.h).
  // host:port of the Prometheus endpoint (HTTP /metrics; port 0 picks a free
  // one, see metrics_port()); empty: no metrics.
  std::string metrics_address;
  // One JSON line per RPC to this file (appended; "-" = stdout); empty: off.
  std::string access_log;

  static constexpr int kDefaultMaxMessageBytes = 256 << 20;
  static constexpr int kMinMessageBytes = 16 << 10;
  // Kept for the fields of a BatchReply besides its results.
  static constexpr int kReplyMarginBytes = 4 << 10;
};

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_OPTIONS_H_
