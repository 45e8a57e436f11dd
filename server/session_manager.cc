#include "server/session_manager.h"

#include <malloc.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/tensor/tensor.h"
#include "gradtape/v1/metadata.h"
#include "grpc/support/log.h"
#include "openssl/crypto.h"

namespace gradtape::server {
namespace {

// The tenant label of a session's metrics ("" without API keys).
absl::string_view TenantName(const SessionEntry& entry) {
  return entry.tenant() != nullptr ? absl::string_view(entry.tenant()->name())
                                   : absl::string_view();
}

constexpr int kSessionIdBytes = 16;  // 32 hex digits
constexpr int kTokenBytes = 32;      // 64 hex digits

// `n` bytes from the kernel's CSPRNG, as lowercase hex.
absl::StatusOr<std::string> RandomHex(size_t n) {
  std::string bytes(n, '\0');
  size_t filled = 0;
  while (filled < n) {
    ssize_t got = getrandom(bytes.data() + filled, n - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(
          absl::StrCat("getrandom failed: ", std::strerror(errno)));
    }
    filled += static_cast<size_t>(got);
  }
  return absl::BytesToHexString(bytes);
}

}  // namespace

SessionEntry::SessionEntry(const OpRegistry& registry, SessionOptions options,
                           std::string id, std::string token,
                           absl::Duration lease)
    : SessionEntry(registry, std::move(options), std::move(id),
                   std::move(token), lease, nullptr, nullptr) {}

SessionEntry::SessionEntry(const OpRegistry& registry, SessionOptions options,
                           std::string id, std::string token,
                           absl::Duration lease, std::shared_ptr<Tenant> tenant,
                           std::unique_ptr<Tenant::SessionSlot> slot,
                           ResultCache::Options results)
    : id_(std::move(id)),
      token_(std::move(token)),
      lease_(lease),
      tenant_(std::move(tenant)),
      last_used_ns_(NowNs()),
      session_(std::make_unique<Session>(registry, options)),
      tenant_slot_(std::move(slot)),
      results_(results) {}

int64_t SessionEntry::NowNs() { return absl::GetCurrentTimeNanos(); }

absl::Status SessionEntry::ClosedError() const {
  return absl::NotFoundError(absl::StrCat(
      "session ", id_,
      " was closed (CloseSession, or idle past its lease); create a new one"));
}

bool SessionEntry::TokenMatches(absl::string_view token) const {
  // The length of a token is not secret (always 64 hex digits): a wrong
  // length is refused at once. Its bytes are: CRYPTO_memcmp takes the same
  // time wherever they differ.
  return token.size() == token_.size() &&
         CRYPTO_memcmp(token.data(), token_.data(), token_.size()) == 0;
}

bool SessionEntry::IdleAt(int64_t now_ns) const {
  if (active_calls_.load(std::memory_order_acquire) > 0) return false;
  return now_ns - last_used_ns_.load(std::memory_order_relaxed) >
         absl::ToInt64Nanoseconds(lease_);
}

void SessionEntry::Close() {
  std::unique_ptr<Session> session;
  std::unique_ptr<Tenant::SessionSlot> slot;  // the tenant's count drops
  {
    absl::MutexLock lock(&mu_);
    session = std::move(session_);
    slot = std::move(tenant_slot_);
    results_.Clear();
  }
  // Freed outside the lock.
}

MemoryTotals SessionEntry::MemoryForMetrics() {
  if (mu_.TryLock()) {
    if (session_ != nullptr) {
      const SessionStats stats = session_->Stats();
      last_live_bytes_.store(stats.bytes_in_use, std::memory_order_relaxed);
      last_tape_saved_bytes_.store(stats.tape_saved_bytes,
                                   std::memory_order_relaxed);
    }
    last_result_cache_bytes_.store(results_.kept_bytes(),
                                   std::memory_order_relaxed);
    mu_.Unlock();
  }
  return {last_live_bytes_.load(std::memory_order_relaxed),
          last_tape_saved_bytes_.load(std::memory_order_relaxed),
          last_result_cache_bytes_.load(std::memory_order_relaxed)};
}

SessionEntry::ActiveCall::ActiveCall(SessionEntry* entry) : entry_(entry) {
  entry_->active_calls_.fetch_add(1, std::memory_order_acq_rel);
  entry_->Touch();
}

SessionEntry::ActiveCall::~ActiveCall() {
  entry_->Touch();
  entry_->active_calls_.fetch_sub(1, std::memory_order_acq_rel);
}

SessionManager::SessionManager(const OpRegistry& registry,
                               SessionManagerOptions options)
    : registry_(registry),
      options_(options),
      reaper_([this] { ReaperLoop(); }) {}

SessionManager::~SessionManager() { Shutdown(); }

bool SessionManager::IsValidSessionId(absl::string_view id) {
  if (id.size() != 2 * kSessionIdBytes) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string SessionManager::MapKey(const Tenant* tenant, absl::string_view id) {
  if (tenant == nullptr) return std::string(id);
  return absl::StrCat(tenant->name(), "/", id);
}

absl::StatusOr<SessionManager::Created> SessionManager::Create(
    absl::string_view id, absl::Duration lease,
    const std::shared_ptr<Tenant>& tenant, bool unsequenced) {
  if (!id.empty() && !IsValidSessionId(id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("session id '", id,
                     "' is not 32 lowercase hex digits (128 bits); leave it "
                     "empty to let the server choose"));
  }
  if (lease < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("keep_alive_seconds must not be negative, got ",
                     absl::ToInt64Seconds(lease)));
  }
  if (lease == absl::ZeroDuration()) lease = options_.default_lease;
  ASSIGN_OR_RETURN(std::string token, RandomHex(kTokenBytes));
  std::string session_id(id);
  if (session_id.empty()) {
    ASSIGN_OR_RETURN(session_id, RandomHex(kSessionIdBytes));
  }

  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return absl::UnavailableError("the server is shutting down");
  }
  const std::string key = MapKey(tenant.get(), session_id);
  if (sessions_.contains(key)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "session ", session_id, " already exists; choose another id"));
  }
  if (static_cast<int>(sessions_.size()) >= options_.max_sessions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the server holds its maximum of ", options_.max_sessions,
                     " sessions; close unused sessions or retry later"));
  }
  std::unique_ptr<Tenant::SessionSlot> slot;
  if (tenant != nullptr) {
    ASSIGN_OR_RETURN(slot, Tenant::AcquireSession(tenant));
  }
  SessionOptions session_options;
  session_options.memory_limit_bytes = options_.session_memory_limit_bytes;
  session_options.checkpoint_dir = options_.checkpoint_dir;
  session_options.plan_programs = options_.plan_programs;
  session_options.fuse_programs = options_.fuse_programs;
  if (tenant != nullptr) {
    session_options.parent_account = tenant->account();
    // Checkpoint names are a tenant's own: another tenant cannot restore or
    // overwrite them by name.
    if (!options_.checkpoint_dir.empty()) {
      session_options.checkpoint_dir =
          absl::StrCat(options_.checkpoint_dir, "/", kTenantCheckpointPrefix,
                       tenant->name());
    }
  }
  ResultCache::Options results;
  results.sequenced = !unsequenced;
  results.max_bytes = options_.result_cache_bytes;
  auto entry = std::make_shared<SessionEntry>(registry_, session_options,
                                              session_id, token, lease, tenant,
                                              std::move(slot), results);
  sessions_.emplace(key, entry);
  if (options_.metrics != nullptr) {
    options_.metrics->SessionCreated(TenantName(*entry));
  }
  return Created{std::move(entry), std::move(token)};
}

absl::StatusOr<std::shared_ptr<SessionEntry>> SessionManager::Authenticate(
    absl::string_view id, absl::string_view token, const Tenant* tenant) {
  if (id.empty() || token.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat("missing metadata ", v1::kSessionIdHeader, " / ",
                     v1::kSessionTokenHeader,
                     "; send the values returned by CreateSession"));
  }
  std::shared_ptr<SessionEntry> entry;
  {
    absl::MutexLock lock(&mu_);
    // Without keys, the id is the key: no string is built per call.
    auto it = tenant == nullptr ? sessions_.find(id)
                                : sessions_.find(MapKey(tenant, id));
    if (it == sessions_.end()) {
      return absl::NotFoundError(
          absl::StrCat("unknown session ", id,
                       " (never created, closed, or idle past its lease)"));
    }
    entry = it->second;
  }
  if (!entry->TokenMatches(token)) {
    return absl::PermissionDeniedError(
        absl::StrCat("wrong token for session ", id));
  }
  entry->Touch();
  return entry;
}

absl::Status SessionManager::Close(const std::string& id,
                                   const Tenant* tenant) {
  std::shared_ptr<SessionEntry> entry;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(MapKey(tenant, id));
    if (it == sessions_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown session ", id));
    }
    entry = std::move(it->second);
    sessions_.erase(it);
  }
  entry->Close();
  freed_since_trim_.store(true, std::memory_order_relaxed);
  if (options_.metrics != nullptr) {
    options_.metrics->SessionClosed(TenantName(*entry));
  }
  return absl::OkStatus();
}

MemoryTotals SessionManager::MemoryForMetrics() const {
  std::vector<std::shared_ptr<SessionEntry>> entries;
  {
    absl::MutexLock lock(&mu_);
    entries.reserve(sessions_.size());
    for (const auto& [id, entry] : sessions_) entries.push_back(entry);
  }
  MemoryTotals totals;
  for (const auto& entry : entries) {
    const MemoryTotals one = entry->MemoryForMetrics();
    totals.live_tensor_bytes += one.live_tensor_bytes;
    totals.tape_saved_bytes += one.tape_saved_bytes;
    totals.result_cache_bytes += one.result_cache_bytes;
  }
  return totals;
}

int SessionManager::num_sessions() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(sessions_.size());
}

std::vector<std::shared_ptr<SessionEntry>> SessionManager::Entries() const {
  std::vector<std::shared_ptr<SessionEntry>> entries;
  absl::MutexLock lock(&mu_);
  entries.reserve(sessions_.size());
  for (const auto& [id, entry] : sessions_) entries.push_back(entry);
  return entries;
}

void SessionManager::Shutdown() {
  std::vector<std::shared_ptr<SessionEntry>> entries;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [id, entry] : sessions_) entries.push_back(std::move(entry));
    sessions_.clear();
  }
  if (reaper_.joinable()) reaper_.join();
  for (auto& entry : entries) entry->Close();
  if (!entries.empty()) freed_since_trim_.store(true);
  ReturnFreedMemory();
}

absl::Duration SessionManager::ReturnFreedMemory() {
  if (!freed_since_trim_.exchange(false)) return absl::ZeroDuration();
  const absl::Time start = absl::Now();
  malloc_trim(0);
  return absl::Now() - start;
}

void SessionManager::ReaperLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.reap_interval);
      if (stopping_) return;
    }
    const int n = ReapIdle();
    // Buffers the pool kept that nothing took for a period go back too.
    if (TrimBufferPool() > 0) {
      freed_since_trim_.store(true, std::memory_order_relaxed);
    }
    const absl::Duration trim = ReturnFreedMemory();
    if (n > 0) {
      gpr_log(GPR_INFO,
              "gradtape: closed %d idle session(s); malloc_trim took %.1f ms",
              n, absl::ToDoubleMilliseconds(trim));
    }
  }
}

int SessionManager::ReapIdle() {
  const int64_t now = SessionEntry::NowNs();
  std::vector<std::shared_ptr<SessionEntry>> idle;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->second->IdleAt(now)) {
        idle.push_back(std::move(it->second));
        sessions_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  if (!idle.empty()) freed_since_trim_.store(true, std::memory_order_relaxed);
  for (auto& entry : idle) {
    entry->Close();
    if (options_.metrics != nullptr) {
      options_.metrics->SessionReaped(TenantName(*entry));
    }
  }
  return static_cast<int>(idle.size());
}

}  // namespace gradtape::server
