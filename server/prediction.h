// What a command that returns data (Gradient, Jacobian, FetchJvp with
// return values) will put in the reply, known before it is applied, and the
// check of that against the reply budget (server/reply_budget.h). The
// shapes are the core's: the session's tensors (Session::Peek), the
// Jacobian's result shape (JacobianResultShape), a gradient's value specs
// (GradientRequest::before_compute, on the sources the command resolved).
#ifndef GRADTAPE_SERVER_PREDICTION_H_
#define GRADTAPE_SERVER_PREDICTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/session/session.h"
#include "gradtape/v1/tape_service.pb.h"
#include "server/reply_budget.h"

namespace gradtape::server {

// The returned values of a command, predicted before they are computed. No
// values (reply_bytes 0) when it returns none, or when a named id does not
// resolve (the command then fails by itself). Unconnected sources are
// counted at full size (the prediction may only be too large, never too
// small; a None value is smaller).
struct Prediction {
  const char* what = "";
  ResultSize size;
  std::vector<int64_t> output_ids;  // poisoned when refused
  std::string advice;
};

// Jacobian and FetchJvp, from the tensors they name (nothing changes). A
// Gradient is predicted by the session once it resolved its sources
// (PredictGradient); every other command returns no prediction.
Prediction Predict(Session& session, const v1::Command& cmd);

// A Gradient with return values, from its gradients' dtypes and shapes.
Prediction PredictGradient(int64_t seq, const v1::Gradient& cmd,
                           absl::Span<const ValueSpec> gradients);

// OK when the prediction has no values, or its values fit in what remains
// of `budget` and the server's memory budget takes their copies (reserved
// then). Otherwise RESOURCE_EXHAUSTED naming command `seq`, its values and
// the room, saying nothing was applied: the caller fails the command with
// it (its output ids poisoned).
absl::Status AdmitPrediction(const Prediction& prediction, int64_t seq,
                             ReplyBudget& budget);

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_PREDICTION_H_
