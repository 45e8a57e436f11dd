// gradtape::server::AccessLog: one JSON line per finished RPC.
//
//   {"time":"2026-12-01T15:04:05.123Z","peer":"ipv4:127.0.0.1:51234",
//    "tenant":"","session":"0f3c...","method":"Run","commands":12,
//    "code":"OK","duration_seconds":0.000412}
//
// (one line in the file). time is when the RPC's status was sent (RFC 3339,
// UTC, milliseconds); session is the call's gradtape-session-id (the one
// created, for CreateSession; "" if none); commands counts the commands of
// the call's batches (Run, Stream; 0 otherwise). Strings are JSON-escaped by
// nlohmann::json (invalid UTF-8 replaced), so a client cannot forge lines.
// Nothing that authenticates (session token, API key) is ever written.
//
// Thread-safety: Write may be called from any thread; lines never interleave
// (one writer under a lock) and each is flushed as written.
#ifndef GRADTAPE_SERVER_ACCESS_LOG_H_
#define GRADTAPE_SERVER_ACCESS_LOG_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gradtape::server {

struct AccessLogEntry {
  absl::Time time;
  absl::string_view peer;
  absl::string_view tenant;
  absl::string_view session;
  absl::string_view method;
  int64_t commands = 0;
  absl::string_view code;
  double duration_seconds = 0;
};

class AccessLog {
 public:
  // `path` "-" is stdout; otherwise the file is opened for appending
  // (created if missing). INVALID_ARGUMENT naming the path and the error if
  // it cannot be opened.
  static absl::StatusOr<std::unique_ptr<AccessLog>> Open(
      const std::string& path);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  // The entry as its JSON line (without the newline).
  static std::string Format(const AccessLogEntry& entry);
  void Write(const AccessLogEntry& entry);

 private:
  AccessLog(std::FILE* file, bool owned) : file_(file), owned_(owned) {}

  absl::Mutex mu_;
  std::FILE* const file_ ABSL_PT_GUARDED_BY(mu_);
  const bool owned_;
};

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_ACCESS_LOG_H_
