#include "server/batch.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "server/convert.h"

namespace gradtape::server {
namespace {

template <typename Repeated>
absl::Span<const int64_t> Ids(const Repeated& ids) {
  return absl::MakeConstSpan(ids.data(), ids.size());
}

absl::Status Execute(Session& session, int64_t seq, const v1::ExecuteOp& cmd) {
  AttrMap attrs;
  for (const auto& [name, value] : cmd.attrs()) {
    absl::StatusOr<AttrValue> converted = FromProto(name, value);
    if (!converted.ok()) {
      absl::Status failure = absl::InvalidArgumentError(absl::StrCat(
          cmd.op(), " (command ", seq, "): ", converted.status().message()));
      session.Fail(seq, Ids(cmd.output_ids()), failure);
      return failure;
    }
    attrs.Set(name, *std::move(converted));
  }
  return session.ExecuteOp(seq, cmd.op(), Ids(cmd.input_ids()),
                           Ids(cmd.output_ids()), std::move(attrs));
}

absl::Status Gradient(Session& session, int64_t seq, const v1::Gradient& cmd,
                      v1::CommandResult* result) {
  GradientRequest request;
  request.tape = cmd.tape_id();
  request.targets.assign(cmd.target_ids().begin(), cmd.target_ids().end());
  request.sources.assign(cmd.source_ids().begin(), cmd.source_ids().end());
  request.output_gradients.assign(cmd.output_gradient_ids().begin(),
                                  cmd.output_gradient_ids().end());
  request.unconnected = cmd.unconnected() == v1::UNCONNECTED_ZERO
                            ? Unconnected::kZero
                            : Unconnected::kNone;
  request.result_ids.assign(cmd.result_ids().begin(), cmd.result_ids().end());
  absl::StatusOr<std::vector<Tensor>> grads = session.Gradient(seq, request);
  if (!grads.ok()) return grads.status();
  if (cmd.return_values()) {
    v1::GradientValues* values = result->mutable_gradient();
    for (const Tensor& grad : *grads) {
      v1::TensorValue* value = values->add_values();
      values->add_is_none(!grad.valid());
      if (grad.valid()) ToProto(grad, value);
    }
  }
  return absl::OkStatus();
}

// Training: SaveCheckpoint / RestoreCheckpoint answer a CheckpointInfo.
void CheckpointToProto(const CheckpointSummary& summary,
                       v1::CheckpointInfo* out) {
  out->set_name(summary.name);
  for (const std::string& name : summary.variables) {
    out->add_variable_names(name);
  }
  out->set_file_bytes(summary.file_bytes);
}

absl::Status Checkpoint(absl::StatusOr<CheckpointSummary> summary,
                        v1::CommandResult* result) {
  if (!summary.ok()) return summary.status();
  CheckpointToProto(*summary, result->mutable_checkpoint());
  return absl::OkStatus();
}

// Applies one command; fills `result` when the command returns something.
absl::Status Apply(Session& session, const v1::Command& cmd,
                   v1::CommandResult* result) {
  const int64_t seq = cmd.seq();
  switch (cmd.kind_case()) {
    case v1::Command::kExecute:
      return Execute(session, seq, cmd.execute());
    case v1::Command::kPut: {
      const v1::TensorValue& value = cmd.put().value();
      return session.PutTensor(seq, cmd.put().id(), FromProto(value.dtype()),
                               Ids(value.shape()), value.data());
    }
    case v1::Command::kFetch: {
      absl::StatusOr<Tensor> tensor =
          session.FetchTensor(seq, cmd.fetch().id());
      if (!tensor.ok()) return tensor.status();
      ToProto(*tensor, result->mutable_tensor());
      return absl::OkStatus();
    }
    case v1::Command::kRelease:
      return session.ReleaseTensors(seq, Ids(cmd.release().ids()));
    case v1::Command::kPushTape:
      return session.PushTape(seq, cmd.push_tape().tape_id(),
                              cmd.push_tape().persistent(),
                              cmd.push_tape().watch_accessed_variables());
    case v1::Command::kPopTape:
      return session.PopTape(seq, cmd.pop_tape().tape_id());
    case v1::Command::kDeleteTape:
      return session.DeleteTape(seq, cmd.delete_tape().tape_id());
    case v1::Command::kWatch:
      return session.Watch(seq, cmd.watch().tape_id(), Ids(cmd.watch().ids()));
    case v1::Command::kStopRecording:
      return session.StopRecording(seq);
    case v1::Command::kStartRecording:
      return session.StartRecording(seq);
    case v1::Command::kGradient:
      return Gradient(session, seq, cmd.gradient(), result);
    case v1::Command::kStats:
      ToProto(session.Stats(seq), result->mutable_stats());
      return absl::OkStatus();
    case v1::Command::kSaveCheckpoint:
      return Checkpoint(
          session.SaveCheckpoint(seq, cmd.save_checkpoint().name(),
                                 Ids(cmd.save_checkpoint().variable_ids())),
          result);
    case v1::Command::kRestoreCheckpoint:
      return Checkpoint(session.RestoreCheckpoint(
                            seq, cmd.restore_checkpoint().name(),
                            Ids(cmd.restore_checkpoint().variable_ids())),
                        result);
    case v1::Command::KIND_NOT_SET:
      break;
  }
  absl::Status failure = absl::InvalidArgumentError(absl::StrCat(
      "command ", seq, ": no command kind set (execute, put, fetch, ...)"));
  session.Fail(seq, {}, failure);
  return failure;
}

}  // namespace

void ApplyBatch(Session& session, const v1::CommandBatch& batch,
                v1::BatchReply* reply) {
  reply->set_batch_id(batch.batch_id());
  for (const v1::Command& cmd : batch.commands()) {
    v1::CommandResult result;
    absl::Status status = Apply(session, cmd, &result);
    if (!status.ok()) {
      result.Clear();
      ToProto(status, result.mutable_error());
    }
    if (result.kind_case() != v1::CommandResult::KIND_NOT_SET) {
      result.set_seq(cmd.seq());
      *reply->add_results() = std::move(result);
    }
  }
  reply->set_last_seq(session.last_seq());
}

}  // namespace gradtape::server
