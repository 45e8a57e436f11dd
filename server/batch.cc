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

// Jacobians, forward mode, custom gradients.
Unconnected UnconnectedFromProto(v1::UnconnectedGradients u) {
  return u == v1::UNCONNECTED_ZERO ? Unconnected::kZero : Unconnected::kNone;
}

void ValuesToProto(absl::Span<const Tensor> values, v1::GradientValues* out) {
  for (const Tensor& t : values) {
    v1::TensorValue* value = out->add_values();
    out->add_is_none(!t.valid());
    if (t.valid()) ToProto(t, value);
  }
}

absl::Status Jacobian(Session& session, int64_t seq, const v1::Jacobian& cmd,
                      v1::CommandResult* result) {
  JacobianRequest request;
  request.tape = cmd.tape_id();
  request.target = cmd.target_id();
  request.sources.assign(cmd.source_ids().begin(), cmd.source_ids().end());
  request.unconnected = UnconnectedFromProto(cmd.unconnected());
  request.batch = cmd.batch();
  request.result_ids.assign(cmd.result_ids().begin(), cmd.result_ids().end());
  absl::StatusOr<std::vector<Tensor>> jac = session.Jacobian(seq, request);
  if (!jac.ok()) return jac.status();
  if (cmd.return_values()) ValuesToProto(*jac, result->mutable_jacobian());
  return absl::OkStatus();
}

absl::Status FetchJvp(Session& session, int64_t seq, const v1::FetchJvp& cmd,
                      v1::CommandResult* result) {
  absl::StatusOr<Tensor> jvp =
      session.FetchJvp(seq, cmd.accumulator_id(), cmd.id(), cmd.result_id(),
                       UnconnectedFromProto(cmd.unconnected()));
  if (!jvp.ok()) return jvp.status();
  if (cmd.return_value()) {
    ValuesToProto(absl::MakeConstSpan(&*jvp, 1), result->mutable_jvp());
  }
  return absl::OkStatus();
}

absl::StatusOr<GradientRef> RefFromProto(const v1::GradientRef& ref,
                                         absl::string_view where) {
  GradientRef r;
  switch (ref.ref_case()) {
    case v1::GradientRef::kUpstream:
      r.kind = GradientRef::kUpstream;
      r.index = ref.upstream();
      return r;
    case v1::GradientRef::kInput:
      r.kind = GradientRef::kInput;
      r.index = ref.input();
      return r;
    case v1::GradientRef::kOutput:
      r.kind = GradientRef::kOutput;
      r.index = ref.output();
      return r;
    case v1::GradientRef::kStep:
      r.kind = GradientRef::kStep;
      r.index = ref.step().step();
      r.output = ref.step().output();
      return r;
    case v1::GradientRef::kTensorId:
      r.kind = GradientRef::kTensor;
      r.client_id = ref.tensor_id();
      return r;
    case v1::GradientRef::REF_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where,
                   " sets no reference (upstream, input, output, "
                   "step or tensor_id)"));
}

absl::Status ExecuteWithGradient(Session& session, int64_t seq,
                                 const v1::ExecuteWithGradient& cmd) {
  const v1::ExecuteOp& op = cmd.op();
  auto fail = [&](const absl::Status& s) {
    absl::Status failure = absl::InvalidArgumentError(
        absl::StrCat(op.op(), " (command ", seq, "): ", s.message()));
    session.Fail(seq, Ids(op.output_ids()), failure);
    return failure;
  };
  AttrMap attrs;
  for (const auto& [name, value] : op.attrs()) {
    absl::StatusOr<AttrValue> converted = FromProto(name, value);
    if (!converted.ok()) return fail(converted.status());
    attrs.Set(name, *std::move(converted));
  }
  GradientProgram program;
  for (int s = 0; s < cmd.steps_size(); ++s) {
    const v1::GradientStep& step = cmd.steps(s);
    GradientStep out;
    out.op = step.op();
    for (int j = 0; j < step.inputs_size(); ++j) {
      absl::StatusOr<GradientRef> ref =
          RefFromProto(step.inputs(j),
                       absl::StrCat("custom gradient step ", s, " input ", j));
      if (!ref.ok()) return fail(ref.status());
      out.inputs.push_back(*std::move(ref));
    }
    for (const auto& [name, value] : step.attrs()) {
      absl::StatusOr<AttrValue> converted = FromProto(name, value);
      if (!converted.ok()) {
        return fail(absl::InvalidArgumentError(absl::StrCat(
            "custom gradient step ", s, ": ", converted.status().message())));
      }
      out.attrs.Set(name, *std::move(converted));
    }
    program.steps.push_back(std::move(out));
  }
  for (int i = 0; i < cmd.input_gradients_size(); ++i) {
    const v1::InputGradient& g = cmd.input_gradients(i);
    if (!g.has_ref()) {
      program.input_grads.push_back(std::nullopt);
      continue;
    }
    absl::StatusOr<GradientRef> ref =
        RefFromProto(g.ref(), absl::StrCat("the custom gradient of input ", i));
    if (!ref.ok()) return fail(ref.status());
    program.input_grads.push_back(*std::move(ref));
  }
  return session.ExecuteOpWithGradient(seq, op.op(), Ids(op.input_ids()),
                                       Ids(op.output_ids()), std::move(attrs),
                                       std::move(program));
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
    // Jacobians, forward mode, custom gradients.
    case v1::Command::kJacobian:
      return Jacobian(session, seq, cmd.jacobian(), result);
    case v1::Command::kWatchedVariables: {
      absl::StatusOr<std::vector<int64_t>> ids =
          session.WatchedVariables(seq, cmd.watched_variables().tape_id());
      if (!ids.ok()) return ids.status();
      result->mutable_watched_variables()->mutable_ids()->Add(ids->begin(),
                                                              ids->end());
      return absl::OkStatus();
    }
    case v1::Command::kPushAccumulator:
      return session.PushAccumulator(seq,
                                     cmd.push_accumulator().accumulator_id());
    case v1::Command::kPopAccumulator:
      return session.PopAccumulator(seq,
                                    cmd.pop_accumulator().accumulator_id());
    case v1::Command::kDeleteAccumulator:
      return session.DeleteAccumulator(
          seq, cmd.delete_accumulator().accumulator_id());
    case v1::Command::kAccumulatorWatch:
      return session.AccumulatorWatch(
          seq, cmd.accumulator_watch().accumulator_id(),
          Ids(cmd.accumulator_watch().ids()),
          Ids(cmd.accumulator_watch().tangent_ids()));
    case v1::Command::kFetchJvp:
      return FetchJvp(session, seq, cmd.fetch_jvp(), result);
    case v1::Command::kExecuteWithGradient:
      return ExecuteWithGradient(session, seq, cmd.execute_with_gradient());
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
