// Session plumbing shared by the load drivers (gradtape-ghz-sessions for
// tests/load/run_ghz.sh, and unary_load): open sessions, then check what a
// load left in them.
#ifndef GRADTAPE_BENCH_LOAD_SESSIONS_H_
#define GRADTAPE_BENCH_LOAD_SESSIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "gradtape/v1/tape_service.grpc.pb.h"

namespace gradtape::bench {

struct SessionCredentials {
  std::string id, token;
};

// Opens `count` sessions with the given lease. Stops at the first failure:
// false, and the reason in *error. A non-empty `api_key` is sent as
// `authorization: Bearer <key>` (servers with --api_keys_file).
// `unsequenced`: CreateSessionRequest.unsequenced, for loads that replay
// fixed seqs (ghz scenarios): every command is applied.
bool CreateSessions(gradtape::v1::TapeService::Stub& stub, int count,
                    int64_t keep_alive_seconds,
                    std::vector<SessionCredentials>* sessions,
                    std::string* error, const std::string& api_key = "",
                    bool unsequenced = false);

// What a Stats command on every session found after a load.
struct SessionsCheck {
  int sessions = 0;
  // Sessions whose Stats failed, or that hold a poisoned id (a command
  // failed inside an OK reply) or a tape, or that skipped a command as a
  // duplicate.
  int unclean = 0;
  int64_t live_tensors = 0;  // over all sessions
};

// Reports problems on stderr, one line per unclean session. Its Stats
// command's seq (kCheckSeq) is above any seq of a load.
inline constexpr int64_t kCheckSeq = int64_t{1} << 62;
SessionsCheck CheckSessions(gradtape::v1::TapeService::Stub& stub,
                            const std::vector<SessionCredentials>& sessions,
                            const std::string& api_key = "");

}  // namespace gradtape::bench

#endif  // GRADTAPE_BENCH_LOAD_SESSIONS_H_
