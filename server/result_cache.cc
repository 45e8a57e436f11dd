#include "server/result_cache.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "core/session/command.h"
#include "core/tensor/tensor.h"
#include "server/convert.h"

namespace gradtape::server {
namespace {

// The ABORTED answer of a duplicate whose result is gone (or may be).
void Aborted(int64_t seq, absl::string_view what, absl::string_view why,
             v1::CommandResult* result) {
  result->Clear();
  result->set_seq(seq);
  result->set_duplicate(true);
  ToProto(Command{seq, what}.Error(absl::StatusCode::kAborted, why),
          result->mutable_error());
}

}  // namespace

const std::shared_ptr<MemoryAccount>& KeptResultsAccount() {
  // Never destroyed, like its parent.
  static const auto* const account = new std::shared_ptr<MemoryAccount>(
      std::make_shared<MemoryAccount>(ProcessMemoryAccount(), "kept results"));
  return *account;
}

void SetKeptResultsLimit(int64_t budget_bytes) {
  KeptResultsAccount()->set_limit(budget_bytes / kKeptResultsShare);
}

ResultCache::ResultCache(Options options) : options_(options) {}

ResultCache::Verdict ResultCache::Classify(int64_t seq) const {
  if (!options_.sequenced) return Verdict::kApply;
  if (seq < 1) return Verdict::kBadSeq;
  if (seq > last_applied()) return Verdict::kApply;
  if (WasApplied(seq)) return Verdict::kDuplicate;
  return seq <= runs_floor_ ? Verdict::kUnknown : Verdict::kOutOfOrder;
}

absl::Status ResultCache::BadSeqError(int64_t seq, absl::string_view what) {
  return Command{seq, what}.Error(
      absl::StatusCode::kInvalidArgument,
      "seq must be at least 1 (seqs strictly increase within a session); "
      "nothing was applied");
}

absl::Status ResultCache::OutOfOrderError(int64_t seq,
                                          absl::string_view what) const {
  const int64_t last = last_applied();
  return Command{seq, what}.Error(
      absl::StatusCode::kFailedPrecondition, "seq ", seq,
      " is out of order (last applied ", last,
      "); not applied: a session's seqs strictly increase (does a second "
      "writer use this session?); send it again with a seq above ",
      last);
}

absl::Status ResultCache::UnknownError(int64_t seq,
                                       absl::string_view what) const {
  const int64_t last = last_applied();
  return Command{seq, what}.Error(
      absl::StatusCode::kAborted, "seq ", seq,
      " is at or below the last applied seq ", last,
      ", and whether it was applied is no longer known (the server keeps ",
      std::max<int64_t>(options_.max_runs, 1),
      " runs of applied seqs per session; every gap in the seqs starts "
      "one); not applied now: if it never was, send it again with a seq "
      "above ",
      last);
}

void ResultCache::AnswerDuplicate(int64_t seq, absl::string_view what,
                                  v1::CommandResult* result) {
  ++duplicates_;
  result->Clear();
  result->set_seq(seq);
  result->set_duplicate(true);
  if (seq <= acked_) return;  // the client holds its result
  // Records are few per batch in flight; a binary search keeps a raw
  // caller's long backlog cheap too.
  auto kept =
      std::lower_bound(kept_.begin(), kept_.end(), seq,
                       [](const Kept& k, int64_t s) { return k.seq < s; });
  if (kept != kept_.end() && kept->seq == seq) {
    *result = kept->result;
    result->set_duplicate(true);
    return;
  }
  if (std::binary_search(evicted_.begin(), evicted_.end(), seq)) {
    Aborted(seq, what,
            "already applied; its result is no longer kept: fetch again "
            "(a read: send it again with a new seq; the results a client "
            "has not acknowledged are kept up to the server's "
            "--result_cache_mb per session)",
            result);
    return;
  }
  if (seq <= unknown_floor_) {
    Aborted(seq, what,
            "already applied; whether it had a result is no longer known "
            "(too many results were dropped unacknowledged: send "
            "CommandBatch.ack_seq): fetch again",
            result);
  }
  // Otherwise it had no result: the mark alone.
}

bool ResultCache::WasApplied(int64_t seq) const {
  // The first run that ends at or above seq.
  auto run = std::lower_bound(
      runs_.begin(), runs_.end(), seq,
      [](const AppliedRun& r, int64_t s) { return r.last < s; });
  return run != runs_.end() && run->first <= seq;
}

void ResultCache::AddApplied(int64_t seq) {
  if (!runs_.empty() && runs_.back().last == seq - 1) {
    runs_.back().last = seq;
    return;
  }
  runs_.push_back({seq, seq});
  while (static_cast<int64_t>(runs_.size()) >
         std::max<int64_t>(options_.max_runs, 1)) {
    runs_floor_ = std::max(runs_floor_, runs_.front().last);
    runs_.pop_front();
  }
}

void ResultCache::Applied(int64_t seq, const v1::CommandResult* result) {
  ++commands_applied_;
  last_applied_.store(seq, std::memory_order_relaxed);
  if (!options_.sequenced) return;
  AddApplied(seq);
  if (result == nullptr) return;
  const int64_t bytes =
      static_cast<int64_t>(result->ByteSizeLong()) + kEntryOverheadBytes;
  if (bytes > options_.max_bytes) {
    AddTombstone(seq);  // never copied
    return;
  }
  // Older results make room first, so the budget is asked for no more than
  // the bound keeps.
  while (!kept_.empty() && kept_bytes_ + bytes > options_.max_bytes) Evict();
  Keep(seq, bytes, *result);
}

void ResultCache::Keep(int64_t seq, int64_t bytes,
                       const v1::CommandResult& result) {
  if (!KeptResultsAccount()->TryCharge(bytes)) {
    AddTombstone(seq);  // no room in the budget's share: never copied
    return;
  }
  kept_.push_back({seq, bytes, result});
  kept_bytes_ += bytes;
}

void ResultCache::PopOldest() {
  kept_bytes_ -= kept_.front().bytes;
  KeptResultsAccount()->Add(-kept_.front().bytes);
  kept_.pop_front();
}

void ResultCache::Evict() {
  const int64_t seq = kept_.front().seq;
  PopOldest();
  AddTombstone(seq);
}

void ResultCache::AddTombstone(int64_t seq) {
  evicted_.push_back(seq);
  while (static_cast<int64_t>(evicted_.size()) > options_.max_tombstones) {
    unknown_floor_ = std::max(unknown_floor_, evicted_.front());
    evicted_.pop_front();
  }
}

void ResultCache::DropTombstonesUpTo(int64_t seq) {
  while (!evicted_.empty() && evicted_.front() <= seq) evicted_.pop_front();
}

void ResultCache::Acknowledge(int64_t ack_seq) {
  if (!options_.sequenced) return;
  ack_seq = std::min(ack_seq, last_applied());
  if (ack_seq <= acked_) return;
  acked_ = ack_seq;
  while (!kept_.empty() && kept_.front().seq <= acked_) PopOldest();
  DropTombstonesUpTo(acked_);
}

void ResultCache::Clear() {
  KeptResultsAccount()->Add(-kept_bytes_);
  std::deque<Kept>().swap(kept_);
  std::deque<int64_t>().swap(evicted_);
  std::deque<AppliedRun>().swap(runs_);
  runs_floor_ = last_applied();
  kept_bytes_ = 0;
}

}  // namespace gradtape::server
