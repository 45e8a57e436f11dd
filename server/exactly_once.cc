#include "server/exactly_once.h"

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/convert.h"

namespace gradtape::server {

std::string CommandName(const v1::Command& cmd) {
  if (cmd.has_execute()) return cmd.execute().op();
  if (cmd.has_execute_with_gradient()) {
    return cmd.execute_with_gradient().op().op();
  }
  const google::protobuf::FieldDescriptor* field =
      v1::Command::descriptor()->FindFieldByNumber(cmd.kind_case());
  return field != nullptr && field->message_type() != nullptr
             ? field->message_type()->name()
             : "command";
}

std::vector<int64_t> OutputIds(const v1::Command& cmd) {
  const auto list = [](absl::Span<const int64_t> ids) {
    return std::vector<int64_t>(ids.begin(), ids.end());
  };
  switch (cmd.kind_case()) {
    case v1::Command::kExecute:
      return list(Ids(cmd.execute().output_ids()));
    case v1::Command::kExecuteWithGradient:
      return list(Ids(cmd.execute_with_gradient().op().output_ids()));
    case v1::Command::kPut:
      return {cmd.put().id()};
    case v1::Command::kPutBegin:
      return {cmd.put_begin().id()};
    case v1::Command::kGradient:
      return list(Ids(cmd.gradient().result_ids()));
    case v1::Command::kJacobian:
      return list(Ids(cmd.jacobian().result_ids()));
    case v1::Command::kFetchJvp:
      return {cmd.fetch_jvp().result_id()};
    case v1::Command::kCallProgram:
      return list(Ids(cmd.call_program().output_ids()));
    default:
      return {};
  }
}

void ExactlyOnce::Acknowledge(int64_t ack_seq) {
  if (results_ != nullptr) results_->Acknowledge(ack_seq);
}

ResultCache::Verdict ExactlyOnce::Classify(int64_t seq) const {
  return results_ != nullptr ? results_->Classify(seq)
                             : ResultCache::Verdict::kApply;
}

void ExactlyOnce::AnswerUnapplied(ResultCache::Verdict verdict,
                                  const v1::Command& cmd,
                                  v1::CommandResult* result) {
  const int64_t seq = cmd.seq();
  absl::Status status;
  switch (verdict) {
    case ResultCache::Verdict::kDuplicate:
      if (metrics_ != nullptr) metrics_->CountDuplicate();
      results_->AnswerDuplicate(seq, CommandName(cmd), result);
      return;
    case ResultCache::Verdict::kOutOfOrder:
      status = results_->OutOfOrderError(seq, CommandName(cmd));
      session_.PoisonRefused(seq, OutputIds(cmd), status);
      break;
    case ResultCache::Verdict::kUnknown:
      // It may have been applied: its ids may be live, nothing is poisoned.
      status = results_->UnknownError(seq, CommandName(cmd));
      break;
    case ResultCache::Verdict::kBadSeq:
    case ResultCache::Verdict::kApply:  // not called for it
      status = ResultCache::BadSeqError(seq, CommandName(cmd));
      break;
  }
  result->Clear();
  result->set_seq(seq);
  ToProto(status, result->mutable_error());
}

void ExactlyOnce::CountInStats(v1::CommandResult* result) const {
  if (results_ == nullptr || !result->has_stats()) return;
  // This command counts itself.
  result->mutable_stats()->set_commands_applied(results_->commands_applied() +
                                                1);
  result->mutable_stats()->set_duplicate_commands(results_->duplicates());
}

void ExactlyOnce::Applied(int64_t seq, const v1::CommandResult* result) {
  if (results_ != nullptr) results_->Applied(seq, result);
}

int64_t ExactlyOnce::LastSeq() const {
  return results_ != nullptr && results_->sequenced() ? results_->last_applied()
                                                      : session_.last_seq();
}

}  // namespace gradtape::server
