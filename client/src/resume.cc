#include "client/src/resume.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gradtape::client::internal {

bool IsTransportFailure(absl::StatusCode code, bool has_server_trailer,
                        bool own_deadline) {
  if (has_server_trailer) return false;
  switch (code) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
      return true;
    case absl::StatusCode::kDeadlineExceeded:
      return own_deadline;
    default:
      return false;
  }
}

bool ReplicaVerdicts::Record(bool verdict, absl::Time now) {
  if (!verdict) {
    count_ = 0;
    first_ = absl::InfiniteFuture();
    return false;
  }
  if (count_++ == 0) first_ = now;
  return count_ >= 2 && now - first_ >= kReplicaUnreachableGrace;
}

absl::Time ReplicaVerdicts::ProbeBy() const {
  return count_ == 0 ? absl::InfiniteFuture()
                     : first_ + kReplicaUnreachableGrace;
}

ReconnectBackoff::ReconnectBackoff(absl::Duration initial, absl::Duration max,
                                   uint64_t seed)
    : current_(std::max(initial, absl::Milliseconds(1))),
      max_(std::max(max, current_)),
      gen_(seed) {}

absl::Duration ReconnectBackoff::Next() {
  const absl::Duration d = current_;
  current_ = std::min(current_ * 2, max_);
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  return d * jitter(gen_);
}

absl::Status UnreachableError(absl::string_view session_id,
                              absl::string_view address,
                              absl::Duration unreachable_for, int64_t attempts,
                              const absl::Status& last_error) {
  absl::Status status = absl::UnavailableError(absl::StrFormat(
      "session %s: server %s unreachable for %.1f s (%d reconnect attempts): "
      "%s: %s",
      session_id, address, absl::ToDoubleSeconds(unreachable_for), attempts,
      absl::StatusCodeToString(last_error.code()), last_error.message()));
  status.SetPayload(kLostReasonPayload, absl::Cord("unreachable"));
  status.SetPayload(kLostAttemptsPayload, absl::Cord(absl::StrCat(attempts)));
  status.SetPayload(
      kLostSecondsPayload,
      absl::Cord(absl::StrCat(absl::ToDoubleSeconds(unreachable_for))));
  return status;
}

absl::Status ConnectionLostError(absl::string_view session_id,
                                 absl::string_view address,
                                 const absl::Status& cause) {
  // Worded as UnreachableError after no attempt (as the Python client).
  absl::Status status = absl::UnavailableError(absl::StrCat(
      "session ", session_id, ": server ", address,
      " unreachable for 0.0 s (0 reconnect attempts): ",
      absl::StatusCodeToString(cause.code()), ": ", cause.message(),
      " (reconnecting is off: SessionOptions::reconnect_timeout is 0)"));
  status.SetPayload(kLostReasonPayload, absl::Cord("unreachable"));
  return status;
}

absl::Status FinalStreamError(absl::string_view session_id,
                              absl::string_view address,
                              const absl::Status& cause) {
  absl::Status status;
  absl::string_view reason = "ended";
  switch (cause.code()) {
    case absl::StatusCode::kNotFound:
      reason = "not_found";
      status = absl::NotFoundError(absl::StrCat(
          "session ", session_id,
          ": the server no longer has this session (it restarted, drained, "
          "or the session's lease ran out): ",
          cause.message()));
      break;
    case absl::StatusCode::kUnavailable:
      reason = "draining";
      status = absl::UnavailableError(absl::StrCat(
          "session ", session_id, ": server ", address,
          " is draining and ended the session's stream; restore the drain "
          "checkpoint (--checkpoint_on_drain) in a new session: ",
          cause.message()));
      break;
    default:
      status = absl::Status(cause.code(), absl::StrCat("session ", session_id,
                                                       ": ", cause.message()));
  }
  status.SetPayload(kLostReasonPayload, absl::Cord(reason));
  return status;
}

}  // namespace gradtape::client::internal
