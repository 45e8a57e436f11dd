// TapeService on gRPC's callback API: a thin adapter from RPCs to the
// SessionManager and ApplyBatch.
//
// Metadata: every call except CreateSession and ListOps carries
// `gradtape-session-id` and `gradtape-session-token`. CreateSession may carry
// `gradtape-session-id` (for routing): it proposes the id when the request's
// session_id is empty, and must equal it otherwise (INVALID_ARGUMENT).
//
// Stream and Run take their batches as raw bytes and parse them here (into a
// per-call arena), so that a message that is not a CommandBatch ends the call
// with INVALID_ARGUMENT naming the batch and its size (gRPC's typed callback
// API reports a Stream message that fails to parse like a half-close: the
// call would end OK and drop what follows). Their replies are serialised here
// too. The wire format is the generated one: clients, reflection, grpcurl
// and ghz see the service of tape_service.proto.
//
// Thread-safety: all methods may run concurrently; the service's only
// mutable state is its DrainRegistry (thread-safe). Batches run on the
// WorkerPool (server/worker_pool.h: per-session FIFO, sessions round-robin),
// under their session's lock; in the pool's inline mode, on the gRPC callback
// thread that delivered them.
//
// Exactly-once (server/result_cache.h): every session but an unsequenced one
// (CreateSessionRequest.unsequenced) skips commands whose seq it already
// applied and answers them from its kept results; KeepAlive answers the
// session's last applied seq. Every non-OK status carries the trailer
// v1::kServerStatusTrailer (gradtape/v1/metadata.h, like every metadata
// name).
//
// Deadlines and cancellation: a Run or Stream batch stops before its next
// command once the call's deadline passed or the call was cancelled (long
// kernels stop at their next block); the call then ends with
// DEADLINE_EXCEEDED / CANCELLED naming the last applied seq, which is also
// sent as the trailing metadata v1::kLastAppliedSeqTrailer.
#ifndef GRADTAPE_SERVER_TAPE_SERVICE_H_
#define GRADTAPE_SERVER_TAPE_SERVICE_H_

#include <cstdint>

#include "absl/time/time.h"
#include "core/registry/op_registry.h"
#include "gradtape/v1/metadata.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/api_keys.h"
#include "server/drain.h"
#include "server/rpc_observer.h"
#include "server/session_manager.h"

namespace gradtape::server {

class WorkerPool;

// The generated callback service with Stream and Run on raw bytes.
using TapeServiceBase = v1::TapeService::WithCallbackMethod_CreateSession<
    v1::TapeService::WithCallbackMethod_CloseSession<
        v1::TapeService::WithCallbackMethod_KeepAlive<
            v1::TapeService::WithRawCallbackMethod_Stream<
                v1::TapeService::WithRawCallbackMethod_Run<
                    v1::TapeService::WithCallbackMethod_ListOps<
                        v1::TapeService::Service>>>>>>;

class TapeServiceImpl final : public TapeServiceBase {
 public:
  // `registry` and `sessions` must outlive the service (and every call).
  // A batch's reply holds at most `max_reply_bytes` of results (ApplyBatch);
  // the server passes its max message size less a margin.
  //
  // `api_keys` (null: none; else it must outlive the service): every call
  // but ListOps needs a key (UNAUTHENTICATED), CreateSession binds the
  // session to the key's tenant, later calls need a key of that tenant: with
  // another tenant's key a session is unknown (NOT_FOUND), as if it did not
  // exist. A Stream re-checks its key at its next batch after a reload.
  //
  // Batches run on `pool`, which must outlive every call. `observer`
  // (metrics, access log; may be null) must outlive the service.
  TapeServiceImpl(const OpRegistry& registry, SessionManager& sessions,
                  int64_t max_reply_bytes, const ApiKeys* api_keys,
                  WorkerPool& pool, RpcObserver* observer = nullptr)
      : registry_(registry),
        sessions_(sessions),
        max_reply_bytes_(max_reply_bytes),
        api_keys_(api_keys),
        pool_(pool),
        observer_(observer) {}

  grpc::ServerUnaryReactor* CreateSession(
      grpc::CallbackServerContext* context,
      const v1::CreateSessionRequest* request,
      v1::CreateSessionResponse* response) override;
  grpc::ServerUnaryReactor* CloseSession(
      grpc::CallbackServerContext* context,
      const v1::CloseSessionRequest* request,
      v1::CloseSessionResponse* response) override;
  grpc::ServerUnaryReactor* KeepAlive(grpc::CallbackServerContext* context,
                                      const v1::KeepAliveRequest* request,
                                      v1::KeepAliveResponse* response) override;
  // gradtape.v1.CommandBatch in, gradtape.v1.BatchReply out.
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Stream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* context,
                                const grpc::ByteBuffer* request,
                                grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListOps(grpc::CallbackServerContext* context,
                                    const v1::ListOpsRequest* request,
                                    v1::ListOpsResponse* response) override;

  // Graceful drain (server/drain.h): refuses CreateSession (UNAVAILABLE),
  // ends open Streams, counts Run calls in flight.
  DrainRegistry& drain() { return drain_; }

 private:
  // The session named by the call's metadata (see SessionManager).
  absl::StatusOr<std::shared_ptr<SessionEntry>> Authenticate(
      const grpc::CallbackServerContext& context);
  // The tenant of the call's API key; null when the server has no keys.
  absl::StatusOr<std::shared_ptr<Tenant>> AuthenticateKey(
      const grpc::CallbackServerContext& context) const;

  const OpRegistry& registry_;
  SessionManager& sessions_;
  const int64_t max_reply_bytes_;
  DrainRegistry drain_;
  const ApiKeys* const api_keys_;
  WorkerPool& pool_;
  RpcObserver* const observer_;  // metrics and access log; may be null
};

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_TAPE_SERVICE_H_
