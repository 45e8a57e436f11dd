// gradtape::server::ResultCache: one session's bookkeeping for exactly-once
// application (proto/gradtape/v1/tape_service.proto, "Exactly-once
// application"): the last applied seq, the results a client has not
// acknowledged yet, and what is left of the ones it may no longer get.
//
// How it works. Seqs of a sequenced session strictly increase, so every
// record below is ordered by seq and appended at the back:
//   * runs: the seqs applied, as runs of consecutive seqs [first, last]
//     (one run for a client that numbers its commands 1, 2, 3, ...; a new
//     run after each gap: a seq never sent, or a command never applied, as
//     the rest of a batch stopped by a full reply). They tell a command at
//     or below the last applied seq that was applied (a duplicate) from one
//     that never was (out of order: a second writer on the session, or a
//     resend of a command its batch never reached). Bounded by max_runs,
//     oldest dropped first; the last seq of the last run dropped is the
//     `runs floor`: at or below it, outside the runs kept, the cache no
//     longer knows (kUnknown). Acknowledge leaves the runs alone: the
//     client's ack says nothing of another writer's seqs;
//   * kept: the results (errors and returned data) of applied commands
//     above the acknowledged seq, as they went into the reply. Their
//     encoded bytes are bounded by max_bytes; past it the oldest ones are
//     evicted, each leaving a tombstone (its seq, 8 bytes). A result larger
//     than max_bytes is never kept: it is a tombstone at once (no copy);
//   * tombstones: seqs whose result was evicted; bounded by max_tombstones,
//     oldest dropped first. The seq of the last tombstone dropped is the
//     `unknown floor`: for a duplicate at or below it (and above the
//     acknowledged seq) the cache no longer knows whether it had a result;
//   * Acknowledge(ack) drops every kept result and tombstone at or below
//     ack: the client holds those results.
// A duplicate (applied before) is then always answered: a kept result is
// copied (duplicate set); a tombstone, or a seq at or below the unknown
// floor, gets ABORTED (duplicate set, nothing poisoned); anything else (no
// result, or acknowledged) gets a mark: seq and duplicate, no kind.
//
// Memory: the kept results are NOT charged to the session's MemoryAccount.
// They are copies of results the client was sent; charging them would let
// results a client has not acknowledged (today's clients and raw callers
// never do) refuse the session's own puts and ops past its memory limit.
// They are bounded by max_bytes (--result_cache_mb) per session instead,
// and charged to KeptResultsAccount(), a child of the process's account
// (the server-wide budget) whose limit is a share of it
// (kKeptResultsShare): a result that does not fit is not kept (a
// tombstone at once). So kept results never refuse a command themselves,
// and they can take at most that share of the budget from the commands
// of all sessions, however many sessions never acknowledge.
//
// Unsequenced sessions (CreateSessionRequest.unsequenced): seqs are labels;
// Classify always says kApply, nothing is kept, only the counters move.
//
// Thread-safety: not thread-safe, the owner holds the session's lock;
// except last_applied(), which any thread may read at any time (KeepAlive).
#ifndef GRADTAPE_SERVER_RESULT_CACHE_H_
#define GRADTAPE_SERVER_RESULT_CACHE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/tensor/tensor.h"
#include "gradtape/v1/tape_service.pb.h"

namespace gradtape::server {

// What every session's kept results are charged to: a child of
// ProcessMemoryAccount (named "kept results"); its limit is set with the
// budget (SetKeptResultsLimit), 0 with none.
const std::shared_ptr<MemoryAccount>& KeptResultsAccount();
// A kKeptResultsShare of `budget_bytes` (0: no limit but the budget's).
inline constexpr int64_t kKeptResultsShare = 8;  // an eighth
void SetKeptResultsLimit(int64_t budget_bytes);

class ResultCache {
 public:
  static constexpr int64_t kDefaultMaxBytes = int64_t{64} << 20;
  // 32 KiB of seqs per session at most.
  static constexpr int64_t kDefaultMaxTombstones = 4096;
  // 64 KiB of runs of applied seqs per session at most.
  static constexpr int64_t kDefaultMaxRuns = 4096;
  // What a kept result costs besides its encoded bytes (its deque slot and
  // the message object).
  static constexpr int64_t kEntryOverheadBytes = 64;

  struct Options {
    bool sequenced = true;
    int64_t max_bytes = kDefaultMaxBytes;  // of kept results; 0: keep none
    int64_t max_tombstones = kDefaultMaxTombstones;
    int64_t max_runs = kDefaultMaxRuns;  // at least 1 is used
  };

  explicit ResultCache(Options options);
  ResultCache() : ResultCache(Options()) {}
  ~ResultCache() { Clear(); }
  ResultCache(const ResultCache&) = delete;
  ResultCache& operator=(const ResultCache&) = delete;

  bool sequenced() const { return options_.sequenced; }

  // What to do with a command of seq `seq`.
  enum class Verdict {
    kApply,       // above the last applied seq (or the session unsequenced)
    kDuplicate,   // applied before: answer with AnswerDuplicate
    kOutOfOrder,  // at or below the last applied seq, never applied:
                  // OutOfOrderError
    kUnknown,     // at or below the runs floor: UnknownError
    kBadSeq,      // below 1 in a sequenced session: BadSeqError
  };
  Verdict Classify(int64_t seq) const;

  // INVALID_ARGUMENT for a command of a sequenced session whose seq is
  // below 1: "<what> (command <seq>): ...".
  static absl::Status BadSeqError(int64_t seq, absl::string_view what);

  // FAILED_PRECONDITION for a kOutOfOrder command: "<what> (command <seq>):
  // seq <seq> is out of order (last applied <M>); not applied ...".
  absl::Status OutOfOrderError(int64_t seq, absl::string_view what) const;

  // ABORTED for a kUnknown command: whether it was applied is no longer
  // known; it is not applied now.
  absl::Status UnknownError(int64_t seq, absl::string_view what) const;

  // Counts a duplicate and answers it in `*result` (seq and duplicate
  // set): its kept result, the ABORTED "no longer kept" error, or nothing
  // more (a mark: no kind). `what` names the command in the ABORTED
  // messages ("MatMul", "FetchTensor").
  void AnswerDuplicate(int64_t seq, absl::string_view what,
                       v1::CommandResult* result);

  // A command applied (or failed): `seq` is the last applied seq from now
  // on (sequenced sessions). `result` (may be null: no result) is the one
  // the reply got; a sequenced session keeps a copy.
  void Applied(int64_t seq, const v1::CommandResult* result);

  // CommandBatch.ack_seq: the client holds every result up to `ack_seq`.
  // Never decreases; above the last applied seq it counts as that.
  void Acknowledge(int64_t ack_seq);

  // Drops everything kept (the session closed).
  void Clear();

  // The last applied seq (0 before the first). Any thread.
  int64_t last_applied() const {
    return last_applied_.load(std::memory_order_relaxed);
  }
  int64_t commands_applied() const { return commands_applied_; }
  int64_t duplicates() const { return duplicates_; }
  int64_t acknowledged() const { return acked_; }
  // Kept results: how many, and their bytes as max_bytes counts them.
  int64_t kept_results() const { return static_cast<int64_t>(kept_.size()); }
  int64_t kept_bytes() const { return kept_bytes_; }
  int64_t tombstones() const { return static_cast<int64_t>(evicted_.size()); }
  // Runs of applied seqs kept, and the runs floor (0: none dropped).
  int64_t runs() const { return static_cast<int64_t>(runs_.size()); }
  int64_t runs_floor() const { return runs_floor_; }

 private:
  struct Kept {
    int64_t seq;
    int64_t bytes;
    v1::CommandResult result;
  };
  // An applied range of seqs: first to last, all applied.
  struct AppliedRun {
    int64_t first;
    int64_t last;
  };
  bool WasApplied(int64_t seq) const;
  void AddApplied(int64_t seq);
  // Keeps a copy of `result` (`bytes` as max_bytes counts them) if the
  // process's budget fits it; else a tombstone.
  void Keep(int64_t seq, int64_t bytes, const v1::CommandResult& result);
  // Drops the oldest kept result and refunds its bytes.
  void PopOldest();
  void Evict();
  void AddTombstone(int64_t seq);
  void DropTombstonesUpTo(int64_t seq);

  const Options options_;
  std::atomic<int64_t> last_applied_{0};
  int64_t commands_applied_ = 0;
  int64_t duplicates_ = 0;
  int64_t acked_ = 0;
  // Duplicates at or below this (and above acked_) may have had a result
  // whose tombstone was dropped.
  int64_t unknown_floor_ = 0;
  std::deque<Kept> kept_;  // ascending seq
  int64_t kept_bytes_ = 0;
  std::deque<int64_t> evicted_;  // tombstones, ascending seq
  std::deque<AppliedRun> runs_;  // ascending, disjoint, not adjacent
  // At or below this, outside runs_, whether a seq was applied is unknown.
  int64_t runs_floor_ = 0;
};

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_RESULT_CACHE_H_
