// Resume after a transport failure: which stream endings are transport
// failures, the reconnect backoff, and the one clear error a caller sees
// when a session cannot be resumed (see "Exactly-once application" and
// "Which statuses are the server's" at the top of
// proto/gradtape/v1/tape_service.proto).
//
// How the client resumes (SessionCore: client/src/session.cc, the threads and
// the reconnect in client/src/session_resume.cc):
//  * every batch sent is kept (SentBatch) until a reply acknowledges it: a
//    reply acknowledges its batch and every earlier one. Batches sent
//    reply_optional get no reply of their own, so once the bytes sent since
//    the last reply-wanted batch pass a quarter of
//    SessionOptions::max_unacked_bytes, the next batch asks for a reply, and
//    a flush waits while the unacknowledged bytes exceed the whole limit;
//  * each batch carries ack_seq, the last seq of the last acknowledged
//    batch, so the server can forget the results the client holds;
//  * when the stream ends in transport (IsTransportFailure), a supervisor
//    thread probes the session with KeepAlive (exponential backoff with
//    jitter, ReconnectBackoff), opens a new Stream on the same session and
//    sends every kept batch again, same seqs, in order, before any new one:
//    the server skips what it applied and answers from its kept results;
//  * a probe the proxy answers with its replica-unreachable verdict
//    (kProxyVerdictTrailer) is still retried, but once consecutive probes
//    have carried that verdict for kReplicaUnreachableGrace the session is
//    lost (ReplicaVerdicts), whatever remains of reconnect_timeout;
//  * anything else ends the session: every wait returns the same error.
#ifndef GRADTAPE_CLIENT_SRC_RESUME_H_
#define GRADTAPE_CLIENT_SRC_RESUME_H_

#include <cstdint>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gradtape/client/session.h"
#include "gradtape/v1/metadata.h"

namespace gradtape::client::internal {

// The trailing metadata on every non-OK status the gradtape server sends
// (gradtape/v1/metadata.h).
using ::gradtape::v1::kServerStatusTrailer;
// Payloads of a lost session's status: why ("unreachable", "not_found",
// "draining", "ended"), the reconnect attempts and the seconds they took.
inline constexpr char kLostReasonPayload[] = "gradtape-lost-reason";
inline constexpr char kLostAttemptsPayload[] = "gradtape-lost-attempts";
inline constexpr char kLostSecondsPayload[] = "gradtape-lost-seconds";

// The proxy's verdict on a session's replica (deploy/k8s/nginx/proxy.conf;
// docs/RELIABILITY.md "A replica lost behind the proxy"): a status the proxy
// answers because it cannot reach the replica the session id routes to carries
// the trailer `gradtape-proxy-verdict: replica-unreachable`. Like any status
// without the server's trailer it is a transport failure.
using ::gradtape::v1::kProxyVerdictTrailer;
using ::gradtape::v1::kReplicaUnreachableVerdict;
// How long consecutive reconnect probes must carry that verdict before the
// session is lost. Waiting longer does not help: a replica that restarts
// comes back without the session (NOT_FOUND), and one the proxy cannot
// reach for this long is taken as gone. A failure without the verdict (the
// client cannot reach the proxy) keeps the whole reconnect_timeout.
inline constexpr absl::Duration kReplicaUnreachableGrace = absl::Seconds(2);

// The consecutive reconnect probes that carried the proxy's
// replica-unreachable verdict. Not thread-safe (one reconnect loop).
class ReplicaVerdicts {
 public:
  // Records a probe that failed in transport at `now`, with the verdict or
  // without (which starts the count again). True once the verdict is final:
  // at least two probes in a row carried it, the first at least
  // kReplicaUnreachableGrace before the last.
  bool Record(bool verdict, absl::Time now);
  // When the next probe is due at the latest so that the grace's end is
  // probed: the first verdict plus the grace, InfiniteFuture with none.
  absl::Time ProbeBy() const;

 private:
  absl::Time first_ = absl::InfiniteFuture();
  int count_ = 0;
};

// True when a call that ended with `code` failed in transport (a dropped
// connection, a proxy's RST_STREAM or 502): UNAVAILABLE, INTERNAL or
// UNKNOWN without the server's trailer. DEADLINE_EXCEEDED counts too when
// `own_deadline` (the client's deadline on a reconnect probe fired).
bool IsTransportFailure(absl::StatusCode code, bool has_server_trailer,
                        bool own_deadline = false);

// Exponential backoff with jitter: Next() is the delay before the next
// attempt, uniform in [d/2, d] with d doubling from `initial` up to `max`.
class ReconnectBackoff {
 public:
  ReconnectBackoff(absl::Duration initial, absl::Duration max, uint64_t seed);
  absl::Duration Next();

 private:
  absl::Duration current_;
  const absl::Duration max_;
  std::mt19937_64 gen_;
};

// The errors a wait returns once a session is lost. `session_id` and
// `address` name it; `cause` is the status that ended it.
//
// UNAVAILABLE "session <id>: server <addr> unreachable for <T> s (<N>
// reconnect attempts): <last transport error>".
absl::Status UnreachableError(absl::string_view session_id,
                              absl::string_view address,
                              absl::Duration unreachable_for, int64_t attempts,
                              const absl::Status& last_error);
// UNAVAILABLE for a transport failure with reconnecting turned off: "...
// unreachable for 0.0 s (0 reconnect attempts): <cause> (reconnecting is
// off: ...)".
absl::Status ConnectionLostError(absl::string_view session_id,
                                 absl::string_view address,
                                 const absl::Status& cause);
// A final status of the server (it carried the trailer, or is not a
// transport code), worded for the caller: NOT_FOUND says the server no
// longer has the session, UNAVAILABLE says it is draining (restore the
// drain checkpoint in a new session); others keep their code, prefixed
// with the session.
absl::Status FinalStreamError(absl::string_view session_id,
                              absl::string_view address,
                              const absl::Status& cause);

}  // namespace gradtape::client::internal

#endif  // GRADTAPE_CLIENT_SRC_RESUME_H_
