#include "server/batch.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/cancellation.h"
#include "server/convert.h"
#include "server/exactly_once.h"
#include "server/prediction.h"

namespace gradtape::server {
namespace {

// Observes the batch's duration however it ends (also when it is stopped).
class BatchTimer {
 public:
  BatchTimer(Metrics* metrics, RpcMethod method)
      : metrics_(metrics),
        method_(method),
        start_ns_(metrics != nullptr ? absl::GetCurrentTimeNanos() : 0) {}
  ~BatchTimer() {
    if (metrics_ == nullptr) return;
    metrics_->ObserveBatch(
        method_,
        static_cast<double>(absl::GetCurrentTimeNanos() - start_ns_) * 1e-9);
  }
  BatchTimer(const BatchTimer&) = delete;
  BatchTimer& operator=(const BatchTimer&) = delete;

 private:
  Metrics* const metrics_;
  const RpcMethod method_;
  const int64_t start_ns_;
};

// The name of the command's kind ("gradient", "stats", ...).
std::string KindName(const v1::Command& cmd) {
  const google::protobuf::FieldDescriptor* field =
      v1::Command::descriptor()->FindFieldByNumber(cmd.kind_case());
  return field != nullptr ? field->name() : "no kind";
}

// One command's answer before it goes in the reply.
struct Answer {
  v1::CommandResult result;  // its error, its data, or nothing
  Prediction prediction;
  bool applied = false;  // now (not a duplicate, out of order, ...)
};

// Applies `cmd`: its predicted values are admitted first (a refused command
// fails, its output ids poisoned), then it is dispatched.
absl::Status RunCommand(Session& session, const v1::Command& cmd,
                        const CommandContext& context,
                        v1::CommandResult* result) {
  *context.prediction = Predict(session, cmd);
  absl::Status status =
      AdmitPrediction(*context.prediction, cmd.seq(), context.budget);
  if (!status.ok()) {
    session.Fail(cmd.seq(), context.prediction->output_ids, status);
    return status;
  }
  return ApplyCommand(session, cmd, context, result);
}

// Applies `cmd`, or answers it without applying it (exactly-once).
Answer AnswerCommand(Session& session, const v1::Command& cmd,
                     ExactlyOnce& once, ReplyBudget& budget, PutLimit put_limit,
                     Metrics::CommandTally& tally) {
  Answer answer;
  const ResultCache::Verdict verdict = once.Classify(cmd.seq());
  answer.applied = verdict == ResultCache::Verdict::kApply;
  if (!answer.applied) {
    once.AnswerUnapplied(verdict, cmd, &answer.result);
    return answer;
  }
  absl::Status status = RunCommand(
      session, cmd, {budget, put_limit, &answer.prediction}, &answer.result);
  tally.Count(cmd, status.code());
  if (!status.ok()) {
    answer.result.Clear();
    ToProto(status, answer.result.mutable_error());
  }
  once.CountInStats(&answer.result);
  return answer;
}

// A result larger than predicted, or without a prediction (stats,
// checkpoint info, watched variables), that does not fit in what remains:
// the error that says the command was applied.
v1::CommandResult TooLargeResult(const v1::Command& cmd,
                                 const Prediction& prediction,
                                 const ReplyBudget& budget, int64_t bytes,
                                 bool duplicate) {
  const int64_t seq = cmd.seq();
  const std::string what = absl::StrCat(
      "command ", seq, " (", KindName(cmd),
      "): it was applied, but its result (", bytes,
      " bytes) does not fit in this reply: ", RoomForMessage(budget, bytes),
      "; ");
  std::string advice =
      prediction.output_ids.empty()
          ? std::string("run it again in a batch of its own")
          : absl::StrCat("its values are stored at result ids ",
                         ListForMessage(prediction.output_ids),
                         ": fetch them with FetchTensor, each in a batch "
                         "of its own if needed");
  v1::CommandResult result;
  result.set_seq(seq);
  result.set_duplicate(duplicate);
  ToProto(absl::ResourceExhaustedError(absl::StrCat(what, advice)),
          result.mutable_error());
  return result;
}

// The error that ends a batch whose reply is full: the result of command
// `seq` (an error, `original`) does not fit, and the commands after it are
// not applied. Its message is bounded so that it fits in kStopReserve.
v1::CommandResult StopResult(int64_t seq, const v1::Error& original,
                             const ReplyBudget& budget,
                             const v1::CommandBatch& batch, int index) {
  constexpr size_t kQuoted = 200;
  absl::string_view quoted = original.message();
  const int rest = batch.commands_size() - index - 1;
  std::string not_applied =
      rest == 0
          ? std::string("it was the batch's last command")
          : absl::StrCat("the ", rest, " commands after it in this batch (seq ",
                         batch.commands(index + 1).seq(), " to ",
                         batch.commands(index + rest).seq(),
                         ") were not applied: send them again in a "
                         "new batch");
  absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
      "command ", seq, ": the reply is full (it may hold ", budget.limit(),
      " bytes): this error stands for the command's own (code ",
      original.code(), "), and ", not_applied, ". The command's error began: ",
      quoted.substr(0, kQuoted), quoted.size() > kQuoted ? "..." : ""));
  v1::CommandResult result;
  result.set_seq(seq);
  ToProto(status, result.mutable_error());
  return result;
}

// DEADLINE_EXCEEDED / CANCELLED for a batch stopped before commands[index]
// (index == size: after its last command, which a kernel's check stopped).
absl::Status StoppedError(const Cancellation& cancel, int64_t last_seq,
                          const v1::CommandBatch& batch, int index) {
  const absl::StatusCode code = cancel.StopCode();
  const int rest = batch.commands_size() - index;
  std::string not_applied =
      rest == 0 ? std::string("no command of the batch remained")
                : absl::StrCat("the ", rest, " commands from seq ",
                               batch.commands(index).seq(), " to ",
                               batch.commands(index + rest - 1).seq(),
                               " were not applied");
  return absl::Status(
      code, absl::StrCat(code == absl::StatusCode::kDeadlineExceeded
                             ? "the call's deadline passed"
                             : "the call was cancelled",
                         ": last applied seq ", last_seq,
                         " (applied commands stay applied; one stopped by the "
                         "deadline or cancellation failed with its outputs "
                         "poisoned); ",
                         not_applied));
}

// Puts the answer of commands[index] in the reply and records it
// (exactly-once: what the command's reply got is what its duplicates get).
// False when the reply is full: the answer became the error that stops the
// batch.
bool AddToReply(Answer& answer, const v1::CommandBatch& batch, int index,
                ReplyBudget& budget, ExactlyOnce& once, v1::BatchReply* reply) {
  const v1::Command& cmd = batch.commands(index);
  const int64_t seq = cmd.seq();
  v1::CommandResult& result = answer.result;
  const bool duplicate = result.duplicate();
  result.set_seq(seq);
  int64_t bytes = ReplyBytes(result);
  if (!budget.Fits(bytes) && result.kind_case() != v1::CommandResult::kError) {
    result = TooLargeResult(cmd, answer.prediction, budget, bytes, duplicate);
    bytes = ReplyBytes(result);
  }
  if (answer.applied) once.Applied(seq, &result);
  if (!budget.Fits(bytes)) {
    result = StopResult(seq, result.error(), budget, batch, index);
    result.set_duplicate(duplicate);
    bytes = ReplyBytes(result);
    if (budget.FitsInReserve(bytes)) {
      budget.Charge(bytes);
      *reply->add_results() = std::move(result);
    }
    return false;
  }
  budget.Charge(bytes);
  *reply->add_results() = std::move(result);
  return true;
}

}  // namespace

absl::Status ApplyBatch(Session& session, const v1::CommandBatch& batch,
                        int64_t max_reply_bytes, Cancellation* cancel,
                        v1::BatchReply* reply, PutLimit put_limit,
                        Metrics* metrics, RpcMethod method,
                        ResultCache* results, ReplyMemory* reply_memory) {
  ScopedCancellation cancel_scope(cancel);
  // Counted and timed however the batch ends (also when it is stopped).
  Metrics::CommandTally tally(metrics);
  BatchTimer timer(metrics, method);
  reply->set_batch_id(batch.batch_id());
  ReplyBudget budget(max_reply_bytes, reply_memory);
  ExactlyOnce once(session, results, metrics);
  once.Acknowledge(batch.ack_seq());
  const auto& commands = batch.commands();
  for (int i = 0; i < commands.size(); ++i) {
    if (cancel != nullptr && cancel->PollBetweenCommands()) {
      reply->set_last_seq(once.LastSeq());
      return StoppedError(*cancel, once.LastSeq(), batch, i);
    }
    Answer answer =
        AnswerCommand(session, commands[i], once, budget, put_limit, tally);
    // Applied now and OK without data: answered by the reply's last_seq.
    if (answer.result.kind_case() == v1::CommandResult::KIND_NOT_SET &&
        !answer.result.duplicate()) {
      if (answer.applied) once.Applied(commands[i].seq(), nullptr);
      continue;
    }
    if (!AddToReply(answer, batch, i, budget, once, reply)) break;
  }
  reply->set_last_seq(once.LastSeq());
  // A kernel that stopped for the request failed its command: say so.
  if (cancel != nullptr && cancel->Requested()) {
    return StoppedError(*cancel, once.LastSeq(), batch, commands.size());
  }
  return absl::OkStatus();
}

}  // namespace gradtape::server
