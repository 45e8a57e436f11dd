#include "server/memory_budget.h"

#include <malloc.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gradtape::server {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
// cgroup v1 writes "no limit" as LLONG_MAX rounded down to a page; anything
// this large is no limit.
constexpr int64_t kNoLimit = int64_t{1} << 60;
constexpr int64_t kMinBudgetBytes = 64 * kMiB;

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Join(absl::string_view root, absl::string_view path) {
  std::string out(absl::StripSuffix(root, "/"));
  if (!absl::StartsWith(path, "/")) out += "/";
  absl::StrAppend(&out, path);
  return out;
}

// A limit file's value: bytes, or nullopt for "max", a missing file or
// anything past kNoLimit.
std::optional<int64_t> ReadLimit(const std::string& path) {
  std::optional<std::string> text = ReadFile(path);
  if (!text.has_value()) return std::nullopt;
  int64_t value;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &value) ||
      value <= 0 || value >= kNoLimit) {
    return std::nullopt;
  }
  return value;
}

// The smallest limit in `file` of the cgroup at `path` under `mount` and its
// ancestors. A cgroup namespace (or a container's bind mount) can make
// `path` name a directory that does not exist under the mount: the
// ancestors that exist still count, down to the mount itself.
void MinOverAncestors(const std::string& mount, std::string path,
                      absl::string_view file, absl::string_view version,
                      MemoryLimit* best) {
  while (true) {
    const std::string dir = Join(mount, path);
    const std::string limit_path = Join(dir, file);
    if (std::optional<int64_t> limit = ReadLimit(limit_path);
        limit.has_value() && (best->bytes == 0 || *limit < best->bytes)) {
      best->bytes = *limit;
      best->source = absl::StrCat("cgroup ", version, " ", limit_path);
    }
    if (path.empty() || path == "/") return;
    const size_t slash = path.rfind('/');
    path = slash == std::string::npos || slash == 0 ? std::string("/")
                                                    : path.substr(0, slash);
  }
}

}  // namespace

absl::StatusOr<MemoryLimit> DetectMemoryLimit(absl::string_view root) {
  MemoryLimit best;
  if (std::optional<std::string> meminfo =
          ReadFile(Join(root, "proc/meminfo"))) {
    for (absl::string_view line : absl::StrSplit(*meminfo, '\n')) {
      if (!absl::ConsumePrefix(&line, "MemTotal:")) continue;
      line = absl::StripAsciiWhitespace(line);
      int64_t kib;
      if (absl::ConsumeSuffix(&line, "kB") &&
          absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib) && kib > 0) {
        best.bytes = kib * 1024;
        best.source = "MemTotal of /proc/meminfo";
      }
    }
  }
  // "0::/path" (v2), "4:memory:/path" (v1).
  if (std::optional<std::string> cgroups =
          ReadFile(Join(root, "proc/self/cgroup"))) {
    for (absl::string_view line : absl::StrSplit(*cgroups, '\n')) {
      std::vector<absl::string_view> parts = absl::StrSplit(line, ':');
      if (parts.size() < 3) continue;
      // The path may itself hold ':'.
      const std::string path(
          line.substr(parts[0].size() + parts[1].size() + 2));
      if (parts[0] == "0" && parts[1].empty()) {
        for (const char* mount : {"sys/fs/cgroup", "sys/fs/cgroup/unified"}) {
          MinOverAncestors(Join(root, mount), path, "memory.max", "v2", &best);
        }
      }
      for (absl::string_view controller : absl::StrSplit(parts[1], ',')) {
        if (controller != "memory") continue;
        MinOverAncestors(Join(root, "sys/fs/cgroup/memory"), path,
                         "memory.limit_in_bytes", "v1", &best);
      }
    }
  }
  if (best.bytes == 0) {
    return absl::NotFoundError(absl::StrCat(
        "cannot tell the machine's memory: no MemTotal in ", root,
        "proc/meminfo and no cgroup memory limit; set --memory_budget_mb"));
  }
  return best;
}

int64_t BufferPoolLimitFor(int64_t budget_bytes) {
  if (budget_bytes <= 0) return kMaxBufferPoolBytes;
  return std::min(budget_bytes / 8, kMaxBufferPoolBytes);
}

int64_t BudgetFor(int64_t limit_bytes) {
  const int64_t headroom = std::max(limit_bytes / 5, kMinHeadroomBytes);
  return std::max(limit_bytes - headroom, kMinBudgetBytes);
}

absl::StatusOr<MemorySettings> ResolveMemorySettings(
    int64_t budget_mb, int64_t session_mb, int64_t max_tensor_mb,
    const absl::StatusOr<MemoryLimit>& detected) {
  constexpr int64_t kMaxMb = int64_t{1} << 40;
  for (auto [name, value] : {std::pair{"--memory_budget_mb", budget_mb},
                             std::pair{"--session_memory_limit_mb", session_mb},
                             std::pair{"--max_tensor_mb", max_tensor_mb}}) {
    if (value < -1 || value > kMaxMb) {
      return absl::InvalidArgumentError(absl::StrCat(
          name,
          " must be -1 (derive it), 0 or a positive MiB count up to 2^40, "
          "got ",
          value));
    }
  }
  if (max_tensor_mb == 0) {
    return absl::InvalidArgumentError(
        "--max_tensor_mb must be -1 (derive it) or positive, got 0");
  }
  MemorySettings s;
  if (budget_mb == -1) {
    if (!detected.ok()) return detected.status();
    s.budget_bytes = BudgetFor(detected->bytes);
    s.budget_source =
        absl::StrCat("derived: ", detected->bytes / kMiB, " MiB from ",
                     detected->source, ", less headroom for the process");
  } else {
    s.budget_bytes = budget_mb * kMiB;
    s.budget_source =
        budget_mb == 0 ? "none: --memory_budget_mb=0" : "--memory_budget_mb";
  }
  if (session_mb == -1) {
    s.session_limit_bytes = s.budget_bytes / 4;
  } else {
    s.session_limit_bytes = session_mb * kMiB;
  }
  if (max_tensor_mb == -1) {
    // A default session's share, whatever --session_memory_limit_mb says
    // (past a smaller session limit, that limit's message is the clearer).
    s.max_tensor_bytes = s.budget_bytes > 0 ? std::min(s.budget_bytes / 4,
                                                       kMaxTensorDefaultBytes)
                                            : kMaxTensorDefaultBytes;
  } else {
    s.max_tensor_bytes = max_tensor_mb * kMiB;
  }
  return s;
}

void TrimFreedMemory(size_t bytes) {
  if (bytes >= kTrimFreedBytes) malloc_trim(0);
}

std::string DescribeMemorySettings(const MemorySettings& s) {
  const auto mib = [](int64_t bytes) {
    return bytes == 0 ? std::string("unlimited")
                      : absl::StrCat(bytes / kMiB, " MiB");
  };
  return absl::StrCat("memory budget ", mib(s.budget_bytes), " (",
                      s.budget_source, "), per session ",
                      mib(s.session_limit_bytes), ", per tensor ",
                      mib(s.max_tensor_bytes));
}

}  // namespace gradtape::server
