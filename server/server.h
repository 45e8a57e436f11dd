// gradtape::server::Server: the TapeService on a gRPC server, with its
// sessions, standard health checking (grpc.health.v1) and server reflection.
//
//   ServerOptions options;
//   options.address = "127.0.0.1:0";  // a free port
//   absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
//   ... connect to (*server)->port() ...
//   (*server)->Shutdown();            // or let the destructor do it
//
// Thread-safety: all methods may be called from any thread.
#ifndef GRADTAPE_SERVER_SERVER_H_
#define GRADTAPE_SERVER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace gradtape::server {

class AccessLog;
class Metrics;
class RpcObserver;
class SessionManager;
class TapeServiceImpl;

struct ServerOptions {
  std::string address = "127.0.0.1:50051";  // "127.0.0.1:0" picks a free port
  int max_sessions = 1024;
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
  // Binds `options.address` (plaintext) and starts serving. INVALID_ARGUMENT
  // for bad options, UNAVAILABLE if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Server>> Start(
      const ServerOptions& options);

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  // Shuts down.
  ~Server();

  int port() const;  // the bound port
  // The host of options.address with the bound port, e.g. "127.0.0.1:40123".
  const std::string& address() const { return address_; }

  // Stops accepting calls, cancels the calls still running after a short
  // grace period, stops the session reaper and frees every session.
  // Idempotent; blocks until done.
  void Shutdown();
  // Blocks until Shutdown has completed (from another thread).
  void Wait();

  // Open sessions (monitoring, tests).
  int num_sessions() const;
  // The bound port of the metrics endpoint; 0 when metrics are off.
  int metrics_port() const;

 private:
  Server() = default;

  int port_ = 0;
  std::string address_;
  // Metrics and access log: they outlive the sessions and the gRPC server,
  // which report to them.
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<AccessLog> access_log_;
  std::unique_ptr<RpcObserver> observer_;
  std::unique_ptr<SessionManager> sessions_;
  std::unique_ptr<TapeServiceImpl> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_SERVER_H_
