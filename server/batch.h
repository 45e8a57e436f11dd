// Applies a CommandBatch to a core Session: the command semantics of the wire
// protocol, shared by Stream and Run.
#ifndef GRADTAPE_SERVER_BATCH_H_
#define GRADTAPE_SERVER_BATCH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/base/cancellation.h"
#include "core/session/session.h"
#include "gradtape/v1/tape_service.pb.h"
#include "server/metrics.h"
#include "server/result_cache.h"

namespace gradtape::server {

// Applies the commands of `batch` to `session` in order and fills `reply`:
// batch_id echoed, one CommandResult per command that failed (its error) or
// returns something (fetch, gradient with return_values, stats), and
// last_seq. A failed command does not stop the batch: the core poisons its
// outputs and the next command runs.
//
// The reply's results take at most `max_reply_bytes` (encoded; at least
// 4096 is used): the caller passes its max message size less a margin for
// batch_id and last_seq. A command that returns data (FetchTensor; Gradient,
// Jacobian, FetchJvp with return values) is checked before it is applied:
// if its values would not fit in what remains, it fails alone with
// RESOURCE_EXHAUSTED (naming seq, ids, dtypes/shapes, bytes, the limit, and
// how to fetch them instead), changes nothing but last_seq and the poisoned
// result ids, and the batch goes on. A result that is larger than predicted
// (or has no prediction: stats, checkpoint info, watched variables) is
// replaced by a RESOURCE_EXHAUSTED error that says the command was applied.
// Only when even an error no longer fits does the batch stop: that command
// gets one short RESOURCE_EXHAUSTED error naming the commands that were not
// applied, and last_seq says where the session stands.
//
// A chunked FetchTensor (max_bytes > 0) is measured the same way: the
// chunk's exact encoded size against what remains.
//
// Tenants: a PutTensor whose data exceeds `put_limit.max_bytes` (> 0) fails
// alone with RESOURCE_EXHAUSTED naming the tenant, the put's seq and id, its
// bytes and the limit, before its tensor is built (its id is poisoned). For
// a PutTensorBegin the limit applies to the whole tensor's bytes.
struct PutLimit {
  absl::string_view tenant;
  int64_t max_bytes = 0;  // 0: none
};

// Memory: a reply's results are charged to the process's account (the
// server-wide budget, ProcessMemoryAccount) from before their data is
// copied until the reply is written, at twice their encoded bytes (the
// reply message and its serialised copy). A command that returns data
// (FetchTensor, chunk or whole; Gradient, Jacobian, FetchJvp with return
// values) reserves them first and, if the budget cannot fit them, fails
// alone with RESOURCE_EXHAUSTED "server memory budget exceeded" (nothing
// applied; its result ids poisoned). The caller holds the ReplyMemory with
// the serialised reply and lets it go once the reply is written.
class ReplyMemory {
 public:
  ReplyMemory() = default;
  ~ReplyMemory() { ShrinkTo(0); }
  ReplyMemory(ReplyMemory&& other) noexcept : bytes_(other.bytes_) {
    other.bytes_ = 0;
  }
  ReplyMemory& operator=(ReplyMemory&& other) noexcept;
  ReplyMemory(const ReplyMemory&) = delete;
  ReplyMemory& operator=(const ReplyMemory&) = delete;

  // Charges `bytes` unless the budget cannot fit them: then the account
  // that refused (nothing charged).
  const MemoryAccount* TryReserve(int64_t bytes);
  // Charges `bytes` without a check (data already in memory).
  void Add(int64_t bytes);
  // Refunds all but `bytes` (the message is gone, the serialised copy
  // stays).
  void ShrinkTo(int64_t bytes);
  int64_t bytes() const { return bytes_; }
  // Over every ReplyMemory in the process (metrics).
  static int64_t TotalBytes();

 private:
  void Charge(int64_t delta);

  int64_t bytes_ = 0;
};

// Deadlines and cancellation: `cancel` (may be null) is polled before each
// command and made current while the commands run, so long kernels check it
// at block boundaries (core/base/cancellation.h). Once it is requested the
// batch stops before the next command: the commands before stay applied
// (a kernel stopped mid-way fails like any failed command: its outputs are
// poisoned, and its seq counts as processed), reply->last_seq says where
// the session stands, and ApplyBatch returns DEADLINE_EXCEEDED or CANCELLED
// naming the last applied seq and the seqs not applied (the reply's results
// are then not sent: the call ends with that status). OK otherwise.
//
// With `metrics`, every command is counted (kind, op, code) and the batch's
// duration observed under `method`.
//
// Exactly-once (server/result_cache.h): with `results` (the session's; null
// applies every command as an unsequenced session does, without counts),
// batch.ack_seq is acknowledged first; then every command of the batch is
// answered (but for the ones a full reply's stop or a deadline accounts
// for) by exactly one of:
//   * applied now: its result (error or data), or none at all when it
//     succeeded without data (reply->last_seq covers it);
//   * a duplicate (applied before): not applied, counted (also in
//     `metrics`), answered with duplicate set: its kept result, the ABORTED
//     "no longer kept" error, or a mark with no kind
//     (ResultCache::AnswerDuplicate);
//   * out of order (at or below the last applied seq, never applied):
//     FAILED_PRECONDITION "<command> (command N): seq N is out of order
//     (last applied M); not applied ...", its free output ids poisoned with
//     that error, nothing else changed;
//   * at or below the runs floor (ResultCache::UnknownError): ABORTED,
//     nothing applied, nothing poisoned;
//   * a seq below 1: INVALID_ARGUMENT (nothing applied, nothing poisoned).
// Those answers count against the reply's bytes like any result. Every
// applied command's result, as the reply got it, is kept.
// reply->last_seq is the last applied seq. Stats results get
// commands_applied and duplicate_commands.
//
// Not thread-safe for one session: the caller holds that session's lock
// (which also guards `results`).
absl::Status ApplyBatch(Session& session, const v1::CommandBatch& batch,
                        int64_t max_reply_bytes, Cancellation* cancel,
                        v1::BatchReply* reply, PutLimit put_limit = {},
                        Metrics* metrics = nullptr,
                        RpcMethod method = RpcMethod::kRun,
                        ResultCache* results = nullptr,
                        ReplyMemory* reply_memory = nullptr);

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_BATCH_H_
