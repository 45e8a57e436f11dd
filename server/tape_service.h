// TapeService on gRPC's callback API: a thin adapter from RPCs to the
// SessionManager and ApplyBatch.
//
// Metadata: every call except CreateSession and ListOps carries
// `gradtape-session-id` and `gradtape-session-token`. CreateSession may carry
// `gradtape-session-id` (for routing): it proposes the id when the request's
// session_id is empty, and must equal it otherwise (INVALID_ARGUMENT).
//
// Thread-safety: all methods may run concurrently; the service keeps no
// mutable state of its own. Batches run on the gRPC callback thread that
// delivered them, under their session's lock.
#ifndef GRADTAPE_SERVER_TAPE_SERVICE_H_
#define GRADTAPE_SERVER_TAPE_SERVICE_H_

#include "absl/time/time.h"
#include "core/op_registry.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "server/session_manager.h"

namespace gradtape::server {

inline constexpr char kSessionIdHeader[] = "gradtape-session-id";
inline constexpr char kSessionTokenHeader[] = "gradtape-session-token";

class TapeServiceImpl final : public v1::TapeService::CallbackService {
 public:
  // `registry` and `sessions` must outlive the service (and every call).
  TapeServiceImpl(const OpRegistry& registry, SessionManager& sessions)
      : registry_(registry), sessions_(sessions) {}

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
  grpc::ServerBidiReactor<v1::CommandBatch, v1::BatchReply>* Stream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* context,
                                const v1::CommandBatch* request,
                                v1::BatchReply* response) override;
  grpc::ServerUnaryReactor* ListOps(grpc::CallbackServerContext* context,
                                    const v1::ListOpsRequest* request,
                                    v1::ListOpsResponse* response) override;

 private:
  // The session named by the call's metadata (see SessionManager).
  absl::StatusOr<std::shared_ptr<SessionEntry>> Authenticate(
      const grpc::CallbackServerContext& context);

  const OpRegistry& registry_;
  SessionManager& sessions_;
};

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_TAPE_SERVICE_H_
