#include "bench/load_sessions.h"

#include <chrono>
#include <cstdio>

#include "grpcpp/grpcpp.h"

namespace gradtape::bench {

namespace v1 = gradtape::v1;

bool CreateSessions(v1::TapeService::Stub& stub, int count,
                    int64_t keep_alive_seconds,
                    std::vector<SessionCredentials>* sessions,
                    std::string* error, const std::string& api_key,
                    bool unsequenced) {
  for (int i = 0; i < count; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    if (!api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key);
    v1::CreateSessionRequest req;
    req.set_keep_alive_seconds(keep_alive_seconds);
    req.set_unsequenced(unsequenced);
    v1::CreateSessionResponse resp;
    const grpc::Status s = stub.CreateSession(&ctx, req, &resp);
    if (!s.ok()) {
      *error = "CreateSession: " + s.error_message();
      return false;
    }
    sessions->push_back({resp.session_id(), resp.token()});
  }
  return true;
}

SessionsCheck CheckSessions(v1::TapeService::Stub& stub,
                            const std::vector<SessionCredentials>& sessions,
                            const std::string& api_key) {
  SessionsCheck check;
  for (const SessionCredentials& session : sessions) {
    ++check.sessions;
    grpc::ClientContext ctx;
    ctx.AddMetadata("gradtape-session-id", session.id);
    ctx.AddMetadata("gradtape-session-token", session.token);
    if (!api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key);
    v1::CommandBatch batch;
    v1::Command* cmd = batch.add_commands();
    cmd->set_seq(kCheckSeq);
    cmd->mutable_stats();
    v1::BatchReply reply;
    const grpc::Status s = stub.Run(&ctx, batch, &reply);
    if (!s.ok() || reply.results_size() != 1 || !reply.results(0).has_stats()) {
      std::fprintf(stderr, "session %s: Stats failed: %s\n", session.id.c_str(),
                   s.error_message().c_str());
      ++check.unclean;
      continue;
    }
    const v1::SessionStats& stats = reply.results(0).stats();
    check.live_tensors += stats.live_tensors();
    if (stats.poisoned_ids() != 0 || stats.tapes() != 0) {
      std::fprintf(stderr,
                   "session %s: %lld poisoned ids, %lld tapes after the load "
                   "(expected none)\n",
                   session.id.c_str(),
                   static_cast<long long>(stats.poisoned_ids()),
                   static_cast<long long>(stats.tapes()));
      ++check.unclean;
    }
    if (stats.duplicate_commands() != 0) {
      std::fprintf(stderr,
                   "session %s: %lld duplicate commands (not applied; "
                   "expected none from a load on unsequenced sessions)\n",
                   session.id.c_str(),
                   static_cast<long long>(stats.duplicate_commands()));
      ++check.unclean;
    }
  }
  return check;
}

}  // namespace gradtape::bench
