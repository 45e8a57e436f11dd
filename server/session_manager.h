// Sessions of one server: creation, authentication, leases and reaping.
//
// A session is named by a 128-bit id (32 lowercase hex digits) and guarded by
// a secret token. Each SessionEntry owns its core Session behind its own
// mutex, so one session's commands are applied strictly one at a time, in
// the order callers acquire that mutex, while different sessions run in
// parallel.
//
// Leases: every authenticated call refreshes the session's last-used time
// (Authenticate does, and callers call Touch when they finish work). A
// reaper thread wakes every second and closes sessions idle for longer than
// their lease; a session with work in progress (see ActiveCall) is never
// reaped. An open Stream with no traffic does not hold the lease: clients
// send batches or KeepAlive.
//
// Lifetime: entries are shared. Close (explicit or by the reaper) removes
// the entry from the manager and frees its core Session; a call still
// holding the entry then sees closed() and fails with NOT_FOUND.
//
// Memory: glibc keeps freed memory in its arenas (a dead client's tensors
// would stay in the server's RSS). After sessions are freed the reaper
// thread calls malloc_trim(0) at its next wake (at most reap_interval
// later, off the calls' path), and Shutdown once at the end.
#ifndef GRADTAPE_SERVER_SESSION_MANAGER_H_
#define GRADTAPE_SERVER_SESSION_MANAGER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/registry/op_registry.h"
#include "core/session/session.h"
#include "server/api_keys.h"
#include "server/metrics.h"
#include "server/result_cache.h"

namespace gradtape::server {

class SessionEntry {
 public:
  SessionEntry(const OpRegistry& registry, SessionOptions options,
               std::string id, std::string token, absl::Duration lease);
  // Tenants: a session of `tenant` (null without API keys) holding one of
  // its session slots until Close.
  SessionEntry(const OpRegistry& registry, SessionOptions options,
               std::string id, std::string token, absl::Duration lease,
               std::shared_ptr<Tenant> tenant,
               std::unique_ptr<Tenant::SessionSlot> slot,
               ResultCache::Options results = {});
  SessionEntry(const SessionEntry&) = delete;
  SessionEntry& operator=(const SessionEntry&) = delete;

  const std::string& id() const { return id_; }
  absl::Duration lease() const { return lease_; }
  // The tenant whose key created the session; null without API keys.
  const std::shared_ptr<Tenant>& tenant() const { return tenant_; }

  // Runs fn(Session&) under the session's lock: commands of one session are
  // serialized. NOT_FOUND (and fn is not called) if the session was closed.
  template <typename Fn>
  absl::Status WithSession(Fn&& fn) {
    absl::MutexLock lock(&mu_);
    if (session_ == nullptr) return ClosedError();
    fn(*session_);
    return absl::OkStatus();
  }

  // The same with the session's exactly-once bookkeeping
  // (server/result_cache.h), under the same lock: fn(Session&, ResultCache&).
  template <typename Fn>
  absl::Status WithSessionAndResults(Fn&& fn) {
    absl::MutexLock lock(&mu_);
    if (session_ == nullptr) return ClosedError();
    fn(*session_, results_);
    return absl::OkStatus();
  }

  // The seq of the session's last applied command (0 before the first),
  // without waiting for a running batch. Thread-safe.
  int64_t last_applied_seq() const { return results_.last_applied(); }

  // Refreshes the lease. Thread-safe.
  void Touch() { last_used_ns_.store(NowNs(), std::memory_order_relaxed); }

  // Constant-time comparison with the token.
  bool TokenMatches(absl::string_view token) const;

  // Metrics: the session's memory now if its lock is free, else the figures
  // of the last time it was (a scrape never waits for a running batch).
  MemoryTotals MemoryForMetrics();

  // Marks a call in progress for its lifetime: the reaper skips the session.
  class ActiveCall {
   public:
    explicit ActiveCall(SessionEntry* entry);
    ~ActiveCall();
    ActiveCall(const ActiveCall&) = delete;
    ActiveCall& operator=(const ActiveCall&) = delete;

   private:
    SessionEntry* entry_;
  };

 private:
  friend class SessionManager;
  static int64_t NowNs();
  absl::Status ClosedError() const;
  bool IdleAt(int64_t now_ns) const;
  // Frees the core session; later WithSession calls fail.
  void Close();

  const std::string id_;
  const std::string token_;
  const absl::Duration lease_;
  const std::shared_ptr<Tenant> tenant_;
  std::atomic<int64_t> last_used_ns_;
  std::atomic<int> active_calls_{0};
  absl::Mutex mu_;
  std::unique_ptr<Session> session_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Tenant::SessionSlot> tenant_slot_ ABSL_GUARDED_BY(mu_);
  // Guarded by mu_, but for its last_applied() (atomic).
  ResultCache results_;
  // Metrics: the last MemoryForMetrics figures.
  std::atomic<int64_t> last_live_bytes_{0};
  std::atomic<int64_t> last_tape_saved_bytes_{0};
  std::atomic<int64_t> last_result_cache_bytes_{0};
};

// With API keys, a tenant's sessions read and write checkpoints in
// <checkpoint_dir>/tenant-<tenant name>/ (tenant names start with a letter or
// digit and hold only [A-Za-z0-9._-]); without keys, in checkpoint_dir.
inline constexpr char kTenantCheckpointPrefix[] = "tenant-";

struct SessionManagerOptions {
  int max_sessions = 1024;
  int64_t session_memory_limit_bytes = 0;  // 0: unlimited
  std::string checkpoint_dir;              // empty: checkpoints disabled
  bool plan_programs = true;               // SessionOptions
  bool fuse_programs = true;
  absl::Duration default_lease = absl::Seconds(300);
  absl::Duration reap_interval = absl::Seconds(1);
  // Exactly-once: the results a session keeps until the client acknowledges
  // them, in bytes (server/result_cache.h; --result_cache_mb).
  int64_t result_cache_bytes = ResultCache::kDefaultMaxBytes;
  // Metrics (server/metrics.h): sessions created, closed and reaped are
  // counted here when set. Must outlive the manager.
  Metrics* metrics = nullptr;
};

// Thread-safe. Starts the reaper thread in the constructor and stops it in
// Shutdown (also called by the destructor).
class SessionManager {
 public:
  SessionManager(const OpRegistry& registry, SessionManagerOptions options);
  SessionManager(const SessionManager&) = delete;
  SessionManager& operator=(const SessionManager&) = delete;
  ~SessionManager();

  struct Created {
    std::shared_ptr<SessionEntry> entry;
    std::string token;
  };
  // `id` empty: a random one. `lease` zero: the default lease.
  // INVALID_ARGUMENT for a malformed id or a negative lease, ALREADY_EXISTS,
  // RESOURCE_EXHAUSTED when max_sessions are open (server-wide, or the
  // tenant's max_sessions).
  //
  // Tenants: sessions are named by (tenant, id), tenant null without API
  // keys. A tenant sees only its own sessions: another tenant's id is
  // unknown to it (NOT_FOUND, or a free id at Create), so nothing says that
  // it exists elsewhere. The session's memory account has the tenant's as
  // parent.
  //
  // `unsequenced` (CreateSessionRequest.unsequenced): seqs are labels, every
  // command is applied (no exactly-once bookkeeping).
  absl::StatusOr<Created> Create(absl::string_view id, absl::Duration lease,
                                 const std::shared_ptr<Tenant>& tenant = {},
                                 bool unsequenced = false);

  // UNAUTHENTICATED if id or token is empty, NOT_FOUND for an id unknown to
  // `tenant`, PERMISSION_DENIED for a wrong token. Refreshes the lease on
  // success.
  absl::StatusOr<std::shared_ptr<SessionEntry>> Authenticate(
      absl::string_view id, absl::string_view token,
      const Tenant* tenant = nullptr);

  // Removes and frees the session. NOT_FOUND if it is already gone.
  absl::Status Close(const std::string& id, const Tenant* tenant = nullptr);

  int num_sessions() const;
  // The open sessions (graceful drain: server/drain.h).
  std::vector<std::shared_ptr<SessionEntry>> Entries() const;
  // Metrics: memory summed over the open sessions (MemoryForMetrics).
  MemoryTotals MemoryForMetrics() const;

  // Stops the reaper and closes every session. Idempotent.
  void Shutdown();

  // True for 32 lowercase hex digits.
  static bool IsValidSessionId(absl::string_view id);
  // The key of sessions_: the id, prefixed by "tenant/" with a tenant
  // (tenant names have no '/').
  static std::string MapKey(const Tenant* tenant, absl::string_view id);

 private:
  void ReaperLoop();
  // Closes sessions idle past their lease; returns how many.
  int ReapIdle();
  // malloc_trim(0) if a session was freed since the last one; returns its
  // time, or zero when there was nothing to do.
  absl::Duration ReturnFreedMemory();

  const OpRegistry& registry_;
  const SessionManagerOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<SessionEntry>> sessions_
      ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // A session was freed: the reaper returns memory to the OS.
  std::atomic<bool> freed_since_trim_{false};
  std::thread reaper_;
};

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_SESSION_MANAGER_H_
