#include "server/access_log.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gradtape::server {

absl::StatusOr<std::unique_ptr<AccessLog>> AccessLog::Open(
    const std::string& path) {
  if (path == "-") {
    return std::unique_ptr<AccessLog>(new AccessLog(stdout, false));
  }
  std::FILE* file = std::fopen(path.c_str(), "ae");
  if (file == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot open access_log '", path, "': ", std::strerror(errno)));
  }
  return std::unique_ptr<AccessLog>(new AccessLog(file, true));
}

AccessLog::~AccessLog() {
  absl::MutexLock lock(&mu_);
  if (owned_) {
    std::fclose(file_);
  } else {
    std::fflush(file_);
  }
}

std::string AccessLog::Format(const AccessLogEntry& entry) {
  // nlohmann::json rather than hand-written escaping: it escapes control
  // characters and quotes, and with error_handler_t::replace turns invalid
  // UTF-8 (a peer or metadata value is any bytes) into U+FFFD instead of
  // throwing.
  nlohmann::ordered_json line;
  line["time"] =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", entry.time, absl::UTCTimeZone());
  line["peer"] = std::string(entry.peer);
  line["tenant"] = std::string(entry.tenant);
  line["session"] = std::string(entry.session);
  line["method"] = std::string(entry.method);
  line["commands"] = entry.commands;
  line["code"] = std::string(entry.code);
  line["duration_seconds"] = entry.duration_seconds;
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void AccessLog::Write(const AccessLogEntry& entry) {
  std::string line = Format(entry);
  line.push_back('\n');
  absl::MutexLock lock(&mu_);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace gradtape::server
