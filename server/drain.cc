#include "server/drain.h"

#include <cstdio>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/session/checkpoint.h"
#include "core/session/session.h"
#include "server/session_manager.h"

namespace gradtape::server {

bool DrainRegistry::Register(DrainableCall* call) {
  absl::MutexLock lock(&mu_);
  if (draining_) return false;
  calls_.emplace(call, Entry());
  return true;
}

bool DrainRegistry::Unregister(DrainableCall* call) {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(call);
  if (it == calls_.end()) return true;  // never registered
  if (it->second.pins > 0) {
    it->second.done = true;
    return false;
  }
  calls_.erase(it);
  return true;
}

DrainRegistry::InFlight::InFlight(DrainRegistry& registry)
    : registry_(registry) {
  absl::MutexLock lock(&registry_.mu_);
  ++registry_.in_flight_;
}

DrainRegistry::InFlight::~InFlight() {
  absl::MutexLock lock(&registry_.mu_);
  --registry_.in_flight_;
}

bool DrainRegistry::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

void DrainRegistry::BeginDrain() {
  std::vector<DrainableCall*> pinned;
  {
    absl::MutexLock lock(&mu_);
    if (draining_) return;
    draining_ = true;
    for (auto& [call, entry] : calls_) {
      ++entry.pins;
      pinned.push_back(call);
    }
  }
  // Outside the lock: BeginDrain may call Finish, and gRPC may run the
  // call's OnDone (which unregisters) before Finish returns. A pinned call
  // stays alive until it is unpinned here.
  for (DrainableCall* call : pinned) {
    call->BeginDrain();
    std::unique_ptr<DrainableCall> dead;
    {
      absl::MutexLock lock(&mu_);
      auto it = calls_.find(call);
      if (--it->second.pins == 0 && it->second.done) {
        calls_.erase(it);
        dead.reset(call);
      }
    }
  }
}

bool DrainRegistry::IdleLocked() const {
  return calls_.empty() && in_flight_ == 0;
}

bool DrainRegistry::AwaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(
      absl::Condition(this, &DrainRegistry::IdleLocked), deadline);
}

std::string DrainCheckpointName(absl::string_view session_id) {
  return absl::StrCat("drain-", session_id);
}

DrainCheckpointReport CheckpointSessions(SessionManager& sessions,
                                         const std::string& checkpoint_dir) {
  DrainCheckpointReport report;
  for (const std::shared_ptr<SessionEntry>& entry : sessions.Entries()) {
    ++report.sessions;
    const std::string name = DrainCheckpointName(entry->id());
    SessionEntry::ActiveCall active(entry.get());  // not reaped meanwhile
    bool has_variables = true;
    absl::StatusOr<CheckpointSummary> saved;
    absl::Status open = entry->WithSession([&](Session& session) {
      has_variables = session.HoldsVariables();
      if (!has_variables) return;
      // A command of the session's log, after its last one (the session is
      // freed right after, so the seq is never seen by a client).
      saved = session.SaveCheckpoint(session.last_seq() + 1, name, {});
    });
    if (open.ok() && !has_variables) {
      ++report.without_variables;
      continue;
    }
    absl::Status status = open.ok() ? saved.status() : open;
    if (!status.ok()) {
      ++report.failed;
      std::fprintf(stderr,
                   "gradtape-server: drain: checkpoint '%s' of session %s "
                   "failed: %s\n",
                   name.c_str(), entry->id().c_str(),
                   status.ToString().c_str());
      continue;
    }
    ++report.saved;
    report.variables += static_cast<int64_t>(saved->variables.size());
    report.bytes += saved->file_bytes;
  }
  std::fprintf(stderr,
               "gradtape-server: drain: saved %d checkpoint(s) (%lld "
               "variable(s), %lld bytes) to %s as drain-<session_id>; %d "
               "session(s) without variables, %d failed, of %d open\n",
               report.saved, static_cast<long long>(report.variables),
               static_cast<long long>(report.bytes), checkpoint_dir.c_str(),
               report.without_variables, report.failed, report.sessions);
  return report;
}

}  // namespace gradtape::server
