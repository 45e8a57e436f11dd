// Applies a CommandBatch to a core Session: the command semantics of the wire
// protocol, shared by Stream and Run. The batch loop is here; one command's
// dispatch is server/commands.h, the reply's room server/reply_budget.h and
// server/prediction.h, exactly-once server/exactly_once.h.
#ifndef GRADTAPE_SERVER_BATCH_H_
#define GRADTAPE_SERVER_BATCH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/base/cancellation.h"
#include "core/session/session.h"
#include "gradtape/v1/tape_service.pb.h"
#include "server/commands.h"
#include "server/metrics.h"
#include "server/reply_budget.h"
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
// Jacobian, FetchJvp with return values) is checked before it is applied
// (a Gradient once its checks passed, on the sources it resolved): if its
// values would not fit in what remains, it fails alone with
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
// Tenants: `put_limit` (server/commands.h) refuses a put larger than the
// tenant's max_put_mib alone. Memory: the reply's results are charged to
// `reply_memory` (server/reply_budget.h), which the caller holds until the
// reply is written.
//
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
