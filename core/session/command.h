// Command: the name and sequence number of the session command being
// applied, and the one way its failures are worded:
//
//   <what> (command <seq>[, <where>]): <detail>
//
// where <what> is the op or command name, <where> the offending ids, tape or
// checkpoint when the detail does not already say, and <detail> what went
// wrong. Session::Run (core/session/session.h) hands one to each command's
// body; the server's batch decoder uses it for the failures it finds first.
#ifndef GRADTAPE_CORE_SESSION_COMMAND_H_
#define GRADTAPE_CORE_SESSION_COMMAND_H_

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gradtape {

struct Command {
  int64_t seq = 0;
  // The op's name (ExecuteOp, once the op was found) or the command's.
  absl::string_view what;

  // A failure of this command: "<what> (command <seq>): <pieces...>".
  template <typename... Pieces>
  absl::Status Error(absl::StatusCode code, const Pieces&... pieces) const {
    return absl::Status(code, absl::StrCat(Prefix(""), pieces...));
  }
  // A lower layer's failure `s` (a kernel's, a tape's, ...) as this
  // command's: "<what> (command <seq>[, <where>]): <detail>", where a detail
  // that already starts with "<what>: " (kernel messages do) loses that
  // prefix. OK stays OK, so a call can be wrapped whatever it returns.
  absl::Status Annotate(const absl::Status& s,
                        absl::string_view where = "") const;
  template <typename T>
  absl::StatusOr<T> Annotate(absl::StatusOr<T> s,
                             absl::string_view where = "") const {
    if (s.ok()) return s;
    return Annotate(s.status(), where);
  }
  // The same with <where> built only on failure (`where()` returns a
  // string): a command that succeeds pays nothing for its message.
  template <typename WhereFn,
            typename = std::enable_if_t<std::is_invocable_v<WhereFn>>>
  absl::Status Annotate(const absl::Status& s, WhereFn&& where) const {
    if (s.ok()) return s;
    return Annotate(s, absl::string_view(where()));
  }
  template <typename T, typename WhereFn,
            typename = std::enable_if_t<std::is_invocable_v<WhereFn>>>
  absl::StatusOr<T> Annotate(absl::StatusOr<T> s, WhereFn&& where) const {
    if (s.ok()) return s;
    return Annotate(s.status(), absl::string_view(where()));
  }

 private:
  std::string Prefix(absl::string_view where) const;
};

}  // namespace gradtape

#endif  // GRADTAPE_CORE_SESSION_COMMAND_H_
