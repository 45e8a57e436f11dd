// Applies a CommandBatch to a core Session: the command semantics of the wire
// protocol, shared by Stream and Run.
#ifndef GRADTAPE_SERVER_BATCH_H_
#define GRADTAPE_SERVER_BATCH_H_

#include "core/session.h"
#include "gradtape/v1/tape_service.pb.h"

namespace gradtape::server {

// Applies the commands of `batch` to `session` in order and fills `reply`:
// batch_id echoed, one CommandResult per command that failed (its error) or
// returns something (fetch, gradient with return_values, stats), and
// last_seq. A failed command does not stop the batch: the core poisons its
// outputs and the next command runs.
//
// Not thread-safe for one session: the caller holds that session's lock.
void ApplyBatch(Session& session, const v1::CommandBatch& batch,
                v1::BatchReply* reply);

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_BATCH_H_
