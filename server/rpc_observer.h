// gradtape::server::RpcObserver: per-RPC metrics and the access log, from a
// gRPC server interceptor (grpc::experimental::ServerInterceptorFactory-
// Interface), so the service's handlers stay as they are.
//
// For every call the interceptor counts the bytes of each message received
// (TapeService methods: the raw Stream/Run batches, the typed requests of
// the others) and sent (every method, serialised) as it passes, and
// measures the time from the call's start to its status being sent. When
// the status is sent it reports the call to Metrics::ObserveRpc and writes
// one access-log line. The commands of a call are not visible to an interceptor
// (Run and Stream carry raw bytes that the service parses): the service reports
// them with AddCommands, keyed by the call's context.
//
// The interceptor also adds the trailer `gradtape-server-status: 1`
// (kServerStatusTrailer, server/tape_service.h) to every non-OK status the
// server sends, so it is installed on every server, with or without metrics
// and access log.
//
// Works with the callback API and raw (ByteBuffer) methods of gRPC 1.51
// (tests/server/metrics_test.cc checks the bytes and codes it sees).
//
// Thread-safety: all methods may be called from any thread. The observer,
// its Metrics and its AccessLog must outlive the grpc::Server.
#ifndef GRADTAPE_SERVER_RPC_OBSERVER_H_
#define GRADTAPE_SERVER_RPC_OBSERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/server_interceptor.h"
#include "server/access_log.h"
#include "server/metrics.h"

namespace gradtape::server {

class RpcObserver {
 public:
  // Either may be null (that output is off).
  RpcObserver(Metrics* metrics, AccessLog* access_log)
      : metrics_(metrics), access_log_(access_log) {}
  RpcObserver(const RpcObserver&) = delete;
  RpcObserver& operator=(const RpcObserver&) = delete;

  Metrics* metrics() const { return metrics_; }

  // A factory for ServerBuilder::experimental().SetInterceptorCreators.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  NewInterceptorFactory();

  // Adds `commands` to the running call of `context` (Run, Stream), and
  // names the call's tenant, for the access log: no-ops without one, and for
  // a call the observer does not track.
  void AddCommands(const grpc::ServerContextBase* context, int64_t commands);
  void SetTenant(const grpc::ServerContextBase* context,
                 absl::string_view tenant);

 private:
  class Interceptor;
  class Factory;
  // What the service reports about a call (for its access-log line).
  struct CallInfo {
    int64_t commands = 0;
    std::string tenant;
  };
  // Called by the interceptor.
  void Track(const grpc::ServerContextBase* context);
  CallInfo Untrack(const grpc::ServerContextBase* context);

  Metrics* const metrics_;
  AccessLog* const access_log_;
  absl::Mutex mu_;
  // The running calls (with an access log only).
  absl::flat_hash_map<const grpc::ServerContextBase*, CallInfo> calls_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_RPC_OBSERVER_H_
