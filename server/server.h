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

class SessionManager;
class TapeServiceImpl;
class WorkerPool;

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

  // Scheduling and admission (server/worker_pool.h). Batches run on
  // `worker_threads` workers, a session's batches in order, sessions in
  // turn; 0 runs them inline on gRPC's callback threads (the old behaviour,
  // kept for comparison), -1 picks WorkerPool::DefaultThreads() (hardware
  // concurrency, at least 2). At most `max_inflight_batches` batches are
  // queued or running at once (0 = unlimited): past it a Run fails with
  // RESOURCE_EXHAUSTED and a Stream's next batch waits.
  int worker_threads = -1;
  int64_t max_inflight_batches = kDefaultMaxInflightBatches;
  static constexpr int64_t kDefaultMaxInflightBatches = 1024;

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

 private:
  Server() = default;

  int port_ = 0;
  std::string address_;
  std::unique_ptr<SessionManager> sessions_;
  std::unique_ptr<WorkerPool> pool_;  // after grpc_server_ shut down
  std::unique_ptr<TapeServiceImpl> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_SERVER_H_
