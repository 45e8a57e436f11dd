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
#include "server/options.h"

namespace grpc {
class Server;
class ServerCredentials;
}  // namespace grpc

namespace gradtape::server {

class ApiKeys;
class AccessLog;
class Metrics;
class RpcObserver;
class SessionManager;
class TapeServiceImpl;
class WorkerPool;

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
  // The steps of Start, in order. Metrics, the access log and the
  // RpcObserver (options.metrics_address, options.access_log).
  absl::Status StartReporting(const ServerOptions& options);
  // The memory budget, sessions, worker pool and TapeService.
  void CreateService(const ServerOptions& options);
  // Builds and starts the gRPC server (and the health listener) on
  // options' addresses; sets port_ and address_. FailStart's UNAVAILABLE
  // when an address cannot be bound.
  absl::Status Listen(
      const ServerOptions& options,
      const std::shared_ptr<grpc::ServerCredentials>& credentials);
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
