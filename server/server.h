// gradtape::server::Server: the TapeService on a gRPC server, with its
// sessions, standard health checking (grpc.health.v1) and server reflection.
//
//   ServerOptions options;
//   options.address = "127.0.0.1:0";  // a free port
//   absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
//   ... connect to (*server)->port() ...
//   (*server)->Drain(absl::Seconds(25));  // SIGTERM: a graceful drain
//   (*server)->Shutdown();            // the same with options.shutdown_grace
//                                     // (or let the destructor do it)
//
// Thread-safety: all methods may be called from any thread.
#ifndef GRADTAPE_SERVER_SERVER_H_
#define GRADTAPE_SERVER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace gradtape::server {

class ApiKeys;
class AccessLog;
class Metrics;
class RpcObserver;
class SessionManager;
class TapeServiceImpl;
class WorkerPool;

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

class Server {
 public:
  // Binds `options.address` (plaintext, TLS or mTLS: server/tls.h) and
  // starts serving. INVALID_ARGUMENT for bad options (unreadable or
  // mismatched certificate files among them), UNAVAILABLE if the address cannot
  // be bound.
  static absl::StatusOr<std::unique_ptr<Server>> Start(
      const ServerOptions& options);

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  // Shuts down.
  ~Server();

  int port() const;                                 // the bound port
  int health_port() const { return health_port_; }  // 0: no health_address
  // The host of options.address with the bound port, e.g. "127.0.0.1:40123".
  const std::string& address() const { return address_; }

  // A graceful drain, then the end of the server (SIGTERM). In order:
  //  1. health (grpc.health.v1, services "" and "gradtape.v1.TapeService",
  //     on the main port and the health_address port) turns NOT_SERVING;
  //  2. CreateSession fails with UNAVAILABLE; calls of existing sessions
  //     still work; open Streams end cleanly: the batch in progress is
  //     applied, the queued replies written, then the call finishes with
  //     UNAVAILABLE kStreamDrainMessage (server/drain.h); new Streams get
  //     that status at once;
  //  3. once no Run call is in flight and no Stream is open, or `grace`
  //     after the start, gRPC stops accepting calls; whatever still runs at
  //     `grace` is cancelled;
  //  4. with options.checkpoint_on_drain, every session's variables are
  //     saved (CheckpointSessions); then the sessions are freed.
  // Idempotent (later calls and Shutdown return at once); blocks until done.
  void Drain(absl::Duration grace);
  // Drain(options.shutdown_grace).
  void Shutdown();
  // Blocks until Shutdown has completed (from another thread).
  void Wait();

  // Open sessions (monitoring, tests).
  int num_sessions() const;
  // Batches queued or running on the worker pool (monitoring, tests).
  int64_t inflight_batches() const;
  // The bound port of the metrics endpoint; 0 when metrics are off.
  int metrics_port() const;

  // Re-reads options.api_keys_file (SIGHUP in gradtape-server). On error the
  // keys in force stay and the error (file:line, never a key) is returned;
  // FAILED_PRECONDITION when the server has no keys file.
  absl::Status ReloadApiKeys();

 private:
  Server() = default;
  // A failed Start after a gRPC server was built: stops and drops the gRPC
  // servers (the destructor's Drain then frees the rest); returns
  // UNAVAILABLE `message`.
  absl::Status FailStart(std::string message);
  // Health of "" and the service, on the main and the health port.
  void SetHealth(bool serving);

  int port_ = 0;
  std::string address_;
  // Graceful drain: options.shutdown_grace, checkpoint_on_drain and
  // checkpoint_dir.
  absl::Duration shutdown_grace_;
  bool checkpoint_on_drain_ = false;
  std::string checkpoint_dir_;
  std::unique_ptr<ApiKeys> api_keys_;  // null without a keys file
  // Metrics and access log: they outlive the sessions and the gRPC server,
  // which report to them.
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<AccessLog> access_log_;
  std::unique_ptr<RpcObserver> observer_;
  std::unique_ptr<SessionManager> sessions_;
  std::unique_ptr<WorkerPool> pool_;  // after grpc_server_ shut down
  std::unique_ptr<TapeServiceImpl> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int health_port_ = 0;
  std::unique_ptr<grpc::Server> health_server_;  // options.health_address
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_SERVER_H_
