// Applies a CommandBatch to a core Session: the command semantics of the wire
// protocol, shared by Stream and Run.
#ifndef GRADTAPE_SERVER_BATCH_H_
#define GRADTAPE_SERVER_BATCH_H_

#include <cstdint>

#include "core/session/session.h"
#include "gradtape/v1/tape_service.pb.h"
#include "server/metrics.h"

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
// With `metrics`, every command is counted (kind, op, code) and the batch's
// duration observed under `method`.
//
// Not thread-safe for one session: the caller holds that session's lock.
void ApplyBatch(Session& session, const v1::CommandBatch& batch,
                int64_t max_reply_bytes, v1::BatchReply* reply,
                Metrics* metrics = nullptr, RpcMethod method = RpcMethod::kRun);

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_BATCH_H_
