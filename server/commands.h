// One command of a batch applied to a core Session: dispatch on the
// command's kind, the proto decoded at this boundary (server/convert.h),
// returned values measured against the reply budget before they are copied
// (server/reply_budget.h). ApplyBatch (server/batch.h) runs the batch and
// states the contract.
#ifndef GRADTAPE_SERVER_COMMANDS_H_
#define GRADTAPE_SERVER_COMMANDS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/session/session.h"
#include "gradtape/v1/tape_service.pb.h"
#include "server/prediction.h"
#include "server/reply_budget.h"

namespace gradtape::server {

// Tenants: a PutTensor whose data exceeds `put_limit.max_bytes` (> 0) fails
// alone with RESOURCE_EXHAUSTED naming the tenant, the put's seq and id, its
// bytes and the limit, before its tensor is built (its id is poisoned). For
// a PutTensorBegin the limit applies to the whole tensor's bytes.
struct PutLimit {
  absl::string_view tenant;
  int64_t max_bytes = 0;  // 0: none
};

// What a command is applied with besides the session.
struct CommandContext {
  ReplyBudget& budget;
  PutLimit put_limit;
  // Set by a Gradient with return values once the session resolved its
  // sources (PredictGradient); the caller's Predict for the others.
  Prediction* prediction;
};

// Applies `cmd`; fills `result` when the command returns something. A
// failure is the command's error (its outputs poisoned by the session).
// A Gradient with return values is refused (AdmitPrediction) after its
// checks and before it is computed.
absl::Status ApplyCommand(Session& session, const v1::Command& cmd,
                          const CommandContext& context,
                          v1::CommandResult* result);

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_COMMANDS_H_
