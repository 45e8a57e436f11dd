// API keys, tenants and their quotas (gradtape-server --api_keys_file).
//
// The keys file has one key per line:
//
//   # comment; blank lines are skipped
//   <key>               <tenant> [max_sessions=N] [memory_mib=M]
//   [max_put_mib=P] sha256:<64 hex>     <tenant> [...]
//
// * <key>: 16 to 512 printable ASCII characters without spaces (and not
//   starting with "sha256:"), or "sha256:" and the 64 hex digits of the
//   SHA-256 of the key (`printf %s KEY | sha256sum`), so that the file need
//   not hold the key itself. Either way only the digest is kept in memory.
// * <tenant>: 1 to 64 of [A-Za-z0-9._-]. Several keys may name one tenant;
//   they must then give the same limits.
// * Limits (each at most once, positive integers; absent = no tenant limit,
//   the server-wide flags still apply): max_sessions (open sessions of the
//   tenant), memory_mib (tensor and tape memory across all of the tenant's
//   sessions), max_put_mib (data bytes of one PutTensor).
//
// A malformed line, an unknown field or a duplicate key refuses the whole
// file with "PATH:LINE: what is wrong"; no error or log line ever contains a
// key or any part of one.
//
// Tenants outlive reloads: a tenant is state (its open-session count, its
// memory account) keyed by name; a reload updates its limits in place, so
// changed limits apply to the next charge and the next CreateSession.
//
// Thread-safety: all methods may be called from any thread. The key table is
// immutable and swapped whole (shared_ptr under a mutex) by Reload.
#ifndef GRADTAPE_SERVER_API_KEYS_H_
#define GRADTAPE_SERVER_API_KEYS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/tensor/tensor.h"

namespace gradtape::server {

// 0 means no limit.
struct TenantLimits {
  int64_t max_sessions = 0;
  int64_t memory_bytes = 0;
  int64_t max_put_bytes = 0;

  bool operator==(const TenantLimits& o) const {
    return max_sessions == o.max_sessions && memory_bytes == o.memory_bytes &&
           max_put_bytes == o.max_put_bytes;
  }
};

// A tenant: its name, current limits, open sessions and memory account.
class Tenant {
 public:
  explicit Tenant(std::string name);
  Tenant(const Tenant&) = delete;
  Tenant& operator=(const Tenant&) = delete;

  const std::string& name() const { return name_; }
  int64_t max_sessions() const { return max_sessions_.load(); }
  int64_t max_put_bytes() const { return max_put_bytes_.load(); }
  int64_t memory_limit_bytes() const { return account_->limit(); }
  // The parent of every session account of the tenant (its limit is
  // memory_bytes): a charge must fit the session's and the tenant's limits.
  const std::shared_ptr<MemoryAccount>& account() const { return account_; }
  int open_sessions() const { return open_sessions_.load(); }

  // One open session of the tenant: released when destroyed.
  class SessionSlot {
   public:
    explicit SessionSlot(std::shared_ptr<Tenant> tenant)
        : tenant_(std::move(tenant)) {}
    ~SessionSlot() { tenant_->open_sessions_.fetch_sub(1); }
    SessionSlot(const SessionSlot&) = delete;
    SessionSlot& operator=(const SessionSlot&) = delete;

   private:
    std::shared_ptr<Tenant> tenant_;
  };
  // A slot, or RESOURCE_EXHAUSTED (naming the tenant and its max_sessions)
  // when the tenant holds its maximum. Atomic: concurrent callers never
  // take more slots than the limit in force.
  static absl::StatusOr<std::unique_ptr<SessionSlot>> AcquireSession(
      const std::shared_ptr<Tenant>& tenant);

  void SetLimits(const TenantLimits& limits);

 private:
  const std::string name_;
  std::atomic<int64_t> max_sessions_{0};
  std::atomic<int64_t> max_put_bytes_{0};
  std::atomic<int> open_sessions_{0};
  const std::shared_ptr<MemoryAccount> account_;
};

using KeyDigest = std::array<unsigned char, 32>;  // SHA-256

// One line of a keys file.
struct ApiKeyLine {
  KeyDigest digest;
  std::string tenant;
  TenantLimits limits;
  int line = 0;
};

// Parses a keys file's text (format above); `path` names it in errors
// (INVALID_ARGUMENT "PATH:LINE: ..."). An empty file (no keys) is an error:
// it would lock every client out.
absl::StatusOr<std::vector<ApiKeyLine>> ParseApiKeys(absl::string_view text,
                                                     absl::string_view path);

// SHA-256 of `key` (libcrypto).
KeyDigest DigestKey(absl::string_view key);

class ApiKeys {
 public:
  // Reads and parses `path`; INVALID_ARGUMENT (file:line) or NOT_FOUND.
  static absl::StatusOr<std::unique_ptr<ApiKeys>> Load(std::string path);

  // Re-reads the file. On success the new table is in force for every later
  // call; on error the old table stays and the error is returned.
  absl::Status Reload();

  // `authorization` is the call's metadata value, "Bearer <key>". The key's
  // tenant, or UNAUTHENTICATED with the same message whether the value is
  // missing, malformed or names no key.
  absl::StatusOr<std::shared_ptr<Tenant>> Authenticate(
      absl::string_view authorization) const;

  // Bumped by every successful Reload: a long call (Stream) that
  // authenticated before re-checks its key when this changed.
  uint64_t generation() const { return generation_.load(); }

  const std::string& path() const { return path_; }

 private:
  struct Table {
    // Keyed by the key's SHA-256 (see Authenticate for why that is safe).
    absl::flat_hash_map<std::string, std::shared_ptr<Tenant>> by_digest;
  };
  explicit ApiKeys(std::string path) : path_(std::move(path)) {}
  // Reads and parses the file, then (only once the whole file is valid)
  // creates or updates its tenants and puts the new table in force.
  absl::Status ReadTable();

  const std::string path_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const Table> table_ ABSL_GUARDED_BY(mu_);
  // Every tenant ever named, so that its counts survive reloads.
  absl::flat_hash_map<std::string, std::shared_ptr<Tenant>> tenants_
      ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> generation_{0};
};

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_API_KEYS_H_
