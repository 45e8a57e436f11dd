#include "core/session/command.h"

#include "absl/strings/match.h"

namespace gradtape {

std::string Command::Prefix(absl::string_view where) const {
  return absl::StrCat(what, " (command ", seq, where.empty() ? "" : ", ", where,
                      "): ");
}

absl::Status Command::Annotate(const absl::Status& s,
                               absl::string_view where) const {
  if (s.ok()) return s;
  absl::string_view detail = s.message();
  const std::string own = absl::StrCat(what, ": ");
  if (absl::StartsWith(detail, own)) detail.remove_prefix(own.size());
  return absl::Status(s.code(), absl::StrCat(Prefix(where), detail));
}

}  // namespace gradtape
