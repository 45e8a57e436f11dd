#include "server/prediction.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/jacobian.h"
#include "core/session/command.h"

namespace gradtape::server {
namespace {

// What to do instead of returning values that do not fit.
std::string FetchInsteadAdvice(absl::Span<const int64_t> ids) {
  return absl::StrCat(
      "run it with return_values=false and fetch the result ids ",
      ListForMessage(ids),
      " with FetchTensor, each in a batch of its own if needed");
}

// The tensor behind `id`, without applying a command. Invalid if the id
// does not resolve (the command itself then fails with the precise error).
Tensor Peek(Session& session, int64_t id) {
  absl::StatusOr<Tensor> t = session.Peek(id);
  return t.ok() ? *std::move(t) : Tensor();
}

// The size of a value of `dtype` and `shape` (an element count that
// overflows is counted as too large).
ValueSize SizeOfSpec(DType dtype, Shape shape) {
  const int64_t n = NumElements(shape);  // -1 on overflow
  return SizeOfValue(dtype, std::move(shape), n);
}

Prediction PredictJacobian(Session& session, int64_t seq,
                           const v1::Jacobian& j) {
  Prediction p;
  if (!j.return_values()) return p;
  Tensor target = Peek(session, j.target_id());
  if (!target.valid()) return p;
  if (j.batch() && target.rank() == 0) return p;  // fails by itself
  std::vector<ValueSize> values;
  for (int64_t id : j.source_ids()) {
    Tensor source = Peek(session, id);
    if (!source.valid()) return p;
    absl::StatusOr<Shape> shape =
        JacobianResultShape(target.shape(), ValueShape(source), j.batch());
    if (!shape.ok()) return p;  // fails by itself
    values.push_back(SizeOfSpec(ValueDType(source), *std::move(shape)));
  }
  p.what = j.batch() ? "BatchJacobian" : "Jacobian";
  p.output_ids.assign(j.result_ids().begin(), j.result_ids().end());
  p.size = SizeOfResult(seq, v1::CommandResult::kJacobianFieldNumber,
                        std::move(values), /*single_tensor=*/false);
  p.advice = FetchInsteadAdvice(p.output_ids);
  return p;
}

Prediction PredictFetchJvp(Session& session, int64_t seq,
                           const v1::FetchJvp& f) {
  Prediction p;
  if (!f.return_value()) return p;
  Tensor primal = Peek(session, f.id());
  if (!primal.valid()) return p;
  std::vector<ValueSize> values = {SizeOfTensor(primal)};
  p.what = "FetchJvp";
  p.output_ids = {f.result_id()};
  p.size = SizeOfResult(seq, v1::CommandResult::kJvpFieldNumber,
                        std::move(values), /*single_tensor=*/false);
  p.advice = absl::StrCat("run it with return_value=false and fetch result id ",
                          f.result_id(),
                          " with FetchTensor, in a batch of its own if needed");
  return p;
}

// RESOURCE_EXHAUSTED for a command refused before it was applied.
absl::Status Refuse(const Prediction& p, int64_t seq,
                    const ReplyBudget& budget) {
  int64_t data_bytes = 0;
  for (const ValueSize& v : p.size.values) {
    data_bytes = SaturatingAdd(data_bytes, v.data_bytes);
  }
  return Command{seq, p.what}.Error(
      absl::StatusCode::kResourceExhausted, "its returned values (",
      ValuesForMessage(p.size.values), ": ",
      data_bytes == kInt64Max ? std::string("more than 2^63")
                              : absl::StrCat(data_bytes),
      " bytes of data) do not fit in this reply: ",
      RoomForMessage(budget, p.size.reply_bytes),
      "; nothing was applied (result ids ", ListForMessage(p.output_ids),
      " are poisoned); ", p.advice, kChunkedLater);
}

}  // namespace

Prediction Predict(Session& session, const v1::Command& cmd) {
  switch (cmd.kind_case()) {
    case v1::Command::kJacobian:
      return PredictJacobian(session, cmd.seq(), cmd.jacobian());
    case v1::Command::kFetchJvp:
      return PredictFetchJvp(session, cmd.seq(), cmd.fetch_jvp());
    default:
      return Prediction();
  }
}

Prediction PredictGradient(int64_t seq, const v1::Gradient& cmd,
                           absl::Span<const ValueSpec> gradients) {
  Prediction p;
  if (!cmd.return_values()) return p;
  std::vector<ValueSize> values;
  for (const ValueSpec& g : gradients) {
    values.push_back(SizeOfSpec(g.dtype, g.shape));
  }
  p.what = "Gradient";
  p.output_ids.assign(cmd.result_ids().begin(), cmd.result_ids().end());
  p.size = SizeOfResult(seq, v1::CommandResult::kGradientFieldNumber,
                        std::move(values), /*single_tensor=*/false);
  p.advice = FetchInsteadAdvice(p.output_ids);
  return p;
}

absl::Status AdmitPrediction(const Prediction& prediction, int64_t seq,
                             ReplyBudget& budget) {
  const int64_t reply_bytes = prediction.size.reply_bytes;
  if (reply_bytes <= 0) return absl::OkStatus();
  if (!budget.Fits(reply_bytes)) return Refuse(prediction, seq, budget);
  return budget.ReserveMemory(
      seq, prediction.what,
      absl::StrCat("its returned values (",
                   ValuesForMessage(prediction.size.values), ")"),
      reply_bytes);
}

}  // namespace gradtape::server
