#include "client/src/resume.h"

#include <algorithm>

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
  return absl::UnavailableError(absl::StrFormat(
      "session %s: server %s unreachable for %.1f s (%d reconnect attempts): "
      "%s",
      session_id, address, absl::ToDoubleSeconds(unreachable_for), attempts,
      last_error.message()));
}

absl::Status ConnectionLostError(absl::string_view session_id,
                                 absl::string_view address,
                                 const absl::Status& cause) {
  return absl::UnavailableError(absl::StrCat(
      "session ", session_id, ": the connection to server ", address,
      " was lost and reconnecting is off (SessionOptions::reconnect_timeout "
      "is 0): ",
      absl::StatusCodeToString(cause.code()), ": ", cause.message()));
}

absl::Status FinalStreamError(absl::string_view session_id,
                              absl::string_view address,
                              const absl::Status& cause) {
  switch (cause.code()) {
    case absl::StatusCode::kNotFound:
      return absl::NotFoundError(absl::StrCat(
          "session ", session_id,
          ": the server no longer has this session (it restarted, drained, "
          "or the session's lease ran out): ",
          cause.message()));
    case absl::StatusCode::kUnavailable:
      return absl::UnavailableError(absl::StrCat(
          "session ", session_id, ": server ", address,
          " is draining and ended the session's stream; restore the drain "
          "checkpoint (--checkpoint_on_drain) in a new session: ",
          cause.message()));
    default:
      return absl::Status(cause.code(), absl::StrCat("session ", session_id,
                                                     ": ", cause.message()));
  }
}

}  // namespace gradtape::client::internal
