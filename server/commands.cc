#include "server/commands.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/base/status_macros.h"
#include "core/session/command.h"
#include "server/convert.h"

namespace gradtape::server {
namespace {

// A command whose op or attrs do not convert fails before it reaches the
// core: INVALID_ARGUMENT "<op> (command <seq>): <why>", its outputs
// poisoned.
absl::Status FailOp(Session& session, int64_t seq, const v1::ExecuteOp& op,
                    const absl::Status& why) {
  absl::Status failure = Command{seq, op.op()}.Error(
      absl::StatusCode::kInvalidArgument, why.message());
  session.Fail(seq, Ids(op.output_ids()), failure);
  return failure;
}

absl::Status Execute(Session& session, int64_t seq, const v1::ExecuteOp& cmd) {
  absl::StatusOr<AttrMap> attrs = AttrsFromProto(cmd.attrs());
  if (!attrs.ok()) return FailOp(session, seq, cmd, attrs.status());
  return session.ExecuteOp(seq, cmd.op(), Ids(cmd.input_ids()),
                           Ids(cmd.output_ids()), *std::move(attrs));
}

// Returned values into `out`. A value that cannot be serialised (a core bug)
// is an INTERNAL error that says the command was applied.
absl::Status ReturnValues(int64_t seq, absl::string_view what,
                          absl::Span<const Tensor> values,
                          v1::GradientValues* out) {
  if (absl::Status s = ToProto(values, out); !s.ok()) {
    return Command{seq, what}.Error(absl::StatusCode::kInternal,
                                    "it was applied, but ", s.message());
  }
  return absl::OkStatus();
}

// With return values, the session hands over what the gradients will be
// once its checks passed (before_compute): they are predicted and admitted
// then, on the sources it resolved.
absl::Status Gradient(Session& session, int64_t seq, const v1::Gradient& cmd,
                      const CommandContext& context,
                      v1::CommandResult* result) {
  GradientRequest request = FromProto(cmd);
  if (cmd.return_values()) {
    request.before_compute = [&](absl::Span<const ValueSpec> gradients) {
      *context.prediction = PredictGradient(seq, cmd, gradients);
      return AdmitPrediction(*context.prediction, seq, context.budget);
    };
  }
  ASSIGN_OR_RETURN(std::vector<Tensor> grads, session.Gradient(seq, request));
  if (!cmd.return_values()) return absl::OkStatus();
  return ReturnValues(seq, "Gradient", grads, result->mutable_gradient());
}

// Training: SaveCheckpoint / RestoreCheckpoint answer a CheckpointInfo.
absl::Status Checkpoint(absl::StatusOr<CheckpointSummary> summary,
                        v1::CommandResult* result) {
  RETURN_IF_ERROR(summary.status());
  ToProto(*summary, result->mutable_checkpoint());
  return absl::OkStatus();
}

// Jacobians, forward mode, custom gradients.
absl::Status Jacobian(Session& session, int64_t seq, const v1::Jacobian& cmd,
                      v1::CommandResult* result) {
  ASSIGN_OR_RETURN(std::vector<Tensor> jac,
                   session.Jacobian(seq, FromProto(cmd)));
  if (!cmd.return_values()) return absl::OkStatus();
  return ReturnValues(seq, cmd.batch() ? "BatchJacobian" : "Jacobian", jac,
                      result->mutable_jacobian());
}

absl::Status FetchJvp(Session& session, int64_t seq, const v1::FetchJvp& cmd,
                      v1::CommandResult* result) {
  ASSIGN_OR_RETURN(Tensor jvp, session.FetchJvp(seq, cmd.accumulator_id(),
                                                cmd.id(), cmd.result_id(),
                                                FromProto(cmd.unconnected())));
  if (!cmd.return_value()) return absl::OkStatus();
  return ReturnValues(seq, "FetchJvp", absl::MakeConstSpan(&jvp, 1),
                      result->mutable_jvp());
}

absl::Status ExecuteWithGradient(Session& session, int64_t seq,
                                 const v1::ExecuteWithGradient& cmd) {
  const v1::ExecuteOp& op = cmd.op();
  absl::StatusOr<AttrMap> attrs = AttrsFromProto(op.attrs());
  if (!attrs.ok()) return FailOp(session, seq, op, attrs.status());
  absl::StatusOr<GradientProgram> program = GradientProgramFromProto(cmd);
  if (!program.ok()) return FailOp(session, seq, op, program.status());
  return session.ExecuteOpWithGradient(seq, op.op(), Ids(op.input_ids()),
                                       Ids(op.output_ids()), *std::move(attrs),
                                       *std::move(program));
}

// Captured steps. A definition that does not convert fails before it
// reaches the core: INVALID_ARGUMENT "DefineProgram (command <seq>): <why>".
absl::Status DefineProgram(Session& session, int64_t seq,
                           const v1::DefineProgram& cmd) {
  absl::StatusOr<ProgramDefinition> def =
      ProgramFromProto(cmd, ProgramLimits().max_steps);
  if (!def.ok()) {
    absl::Status failure = Command{seq, "DefineProgram"}.Error(
        absl::StatusCode::kInvalidArgument, "program ", cmd.program_id(), ": ",
        def.status().message());
    session.Fail(seq, {}, failure);
    return failure;
  }
  return session.DefineProgram(seq, cmd.program_id(), *std::move(def));
}

absl::Status ApplyProgramCommand(Session& session, const v1::Command& cmd,
                                 v1::CommandResult* result) {
  const int64_t seq = cmd.seq();
  switch (cmd.kind_case()) {
    case v1::Command::kDefineProgram:
      return DefineProgram(session, seq, cmd.define_program());
    case v1::Command::kCallProgram:
      return session.CallProgram(seq, cmd.call_program().program_id(),
                                 Ids(cmd.call_program().input_ids()),
                                 Ids(cmd.call_program().output_ids()));
    case v1::Command::kDeleteProgram:
      return session.DeleteProgram(seq, cmd.delete_program().program_id());
    case v1::Command::kListPrograms:
      ToProto(session.ListPrograms(seq), result->mutable_programs());
      return absl::OkStatus();
    default:
      return absl::InternalError("not a program command");
  }
}

// A put (`what`: PutTensor, PutTensorBegin) of `bytes` at `id` past the
// tenant's put limit fails before anything is built, its id poisoned.
absl::Status CheckPutLimit(Session& session, int64_t seq,
                           absl::string_view what, int64_t id, int64_t bytes,
                           PutLimit limit) {
  if (limit.max_bytes <= 0 || bytes <= limit.max_bytes) {
    return absl::OkStatus();
  }
  absl::Status failure = Command{seq, what}.Error(
      absl::StatusCode::kResourceExhausted, "id ", id, ": ", bytes,
      " bytes exceed tenant '", limit.tenant, "''s max_put_mib limit of ",
      limit.max_bytes,
      " bytes; send smaller tensors (ConcatV2 joins them on the server)");
  const int64_t ids[] = {id};
  session.Fail(seq, ids, failure);
  return failure;
}

// The dtype of a put's value, or its failure (INVALID_ARGUMENT naming the
// id; the id poisoned).
absl::StatusOr<DType> PutDType(Session& session, int64_t seq,
                               absl::string_view what, int64_t id,
                               v1::DType wire) {
  absl::StatusOr<DType> dtype = FromProto(wire);
  if (dtype.ok()) return dtype;
  absl::Status failure = Command{seq, what}.Annotate(
      absl::InvalidArgumentError(dtype.status().message()),
      absl::StrCat("id ", id));
  const int64_t ids[] = {id};
  session.Fail(seq, ids, failure);
  return failure;
}

absl::Status Put(Session& session, int64_t seq, const v1::PutTensor& cmd,
                 PutLimit limit) {
  const v1::TensorValue& value = cmd.value();
  const int64_t bytes = static_cast<int64_t>(value.data().size());
  RETURN_IF_ERROR(
      CheckPutLimit(session, seq, "PutTensor", cmd.id(), bytes, limit));
  ASSIGN_OR_RETURN(DType dtype, PutDType(session, seq, "PutTensor", cmd.id(),
                                         value.dtype()));
  return session.PutTensor(seq, cmd.id(), dtype, Ids(value.shape()),
                           value.data());
}

// The tenant's put limit applies to the whole tensor, before it is charged.
// A shape that does not pass the size rule goes on to the session, which
// fails it with the rule's message.
absl::Status PutBegin(Session& session, int64_t seq,
                      const v1::PutTensorBegin& cmd, PutLimit limit) {
  ASSIGN_OR_RETURN(DType dtype, PutDType(session, seq, "PutTensorBegin",
                                         cmd.id(), cmd.dtype()));
  absl::StatusOr<TensorSize> size = CheckedTensorSize(dtype, Ids(cmd.shape()));
  if (size.ok()) {
    RETURN_IF_ERROR(CheckPutLimit(session, seq, "PutTensorBegin", cmd.id(),
                                  size->bytes, limit));
  }
  return session.PutTensorBegin(seq, cmd.id(), dtype, Ids(cmd.shape()));
}

// A chunked fetch (max_bytes > 0), measured like a whole one: the chunk's
// exact encoded size is checked against what remains of the reply before
// its bytes are copied.
absl::Status FetchChunk(Session& session, int64_t seq,
                        const v1::FetchTensor& cmd, ReplyBudget& budget,
                        v1::CommandResult* result) {
  ASSIGN_OR_RETURN(
      Session::TensorSlice slice,
      session.FetchTensorChunk(seq, cmd.id(), cmd.offset(), cmd.max_bytes()));
  ValueSize chunk = SizeOfChunk(slice);
  const int64_t data_bytes = chunk.data_bytes;
  ResultSize size = SizeOfResult(seq, v1::CommandResult::kChunkFieldNumber,
                                 {std::move(chunk)}, /*single_tensor=*/true);
  if (!budget.Fits(size.reply_bytes)) {
    return Command{seq, "FetchTensor"}.Error(
        absl::StatusCode::kResourceExhausted, "chunk of tensor id ", cmd.id(),
        " (", ValuesForMessage(size.values), ", bytes ", slice.offset, " to ",
        slice.offset + data_bytes, ") does not fit in this reply: ",
        RoomForMessage(budget, size.reply_bytes),
        "; ask for a smaller max_bytes, or fetch it in a batch of its own");
  }
  RETURN_IF_ERROR(
      budget.ReserveMemory(seq, "FetchTensor",
                           absl::StrCat("a chunk of tensor id ", cmd.id(), " (",
                                        ValuesForMessage(size.values), ")"),
                           size.reply_bytes));
  if (absl::Status s = ToProto(slice, result->mutable_chunk()); !s.ok()) {
    return Command{seq, "FetchTensor"}.Error(
        absl::StatusCode::kInternal, "tensor id ", cmd.id(), ": ", s.message());
  }
  return absl::OkStatus();
}

// Reads the tensor, then measures it before serialising it: a tensor that
// does not fit in what remains of the reply is refused (FetchTensor changes
// nothing but last_seq, so the refusal is as atomic as any failed fetch).
absl::Status Fetch(Session& session, int64_t seq, const v1::FetchTensor& cmd,
                   ReplyBudget& budget, v1::CommandResult* result) {
  if (cmd.max_bytes() != 0 || cmd.offset() != 0) {
    return FetchChunk(session, seq, cmd, budget, result);
  }
  ASSIGN_OR_RETURN(Tensor tensor, session.FetchTensor(seq, cmd.id()));
  std::vector<ValueSize> values = {SizeOfTensor(tensor)};
  ResultSize size = SizeOfResult(seq, v1::CommandResult::kTensorFieldNumber,
                                 std::move(values), /*single_tensor=*/true);
  if (!budget.Fits(size.reply_bytes)) {
    return Command{seq, "FetchTensor"}.Error(
        absl::StatusCode::kResourceExhausted, "tensor id ", cmd.id(), " (",
        ValuesForMessage(size.values), ", ", size.values[0].data_bytes,
        " bytes) does not fit in this reply: ",
        RoomForMessage(budget, size.reply_bytes),
        "; fetch it in a batch of its own", kChunkedLater);
  }
  RETURN_IF_ERROR(
      budget.ReserveMemory(seq, "FetchTensor",
                           absl::StrCat("tensor id ", cmd.id(), " (",
                                        ValuesForMessage(size.values), ")"),
                           size.reply_bytes));
  if (absl::Status s = ToProto(tensor, result->mutable_tensor()); !s.ok()) {
    return Command{seq, "FetchTensor"}.Error(
        absl::StatusCode::kInternal, "tensor id ", cmd.id(), ": ", s.message());
  }
  return absl::OkStatus();
}

// The failure of a command with no kind set.
absl::Status NoKind(Session& session, int64_t seq) {
  absl::Status failure = absl::InvalidArgumentError(absl::StrCat(
      "command ", seq, ": no command kind set (execute, put, fetch, ...)"));
  session.Fail(seq, {}, failure);
  return failure;
}

// Jacobians, forward mode, custom gradients.
absl::Status ApplyAutodiffCommand(Session& session, const v1::Command& cmd,
                                  v1::CommandResult* result) {
  const int64_t seq = cmd.seq();
  switch (cmd.kind_case()) {
    case v1::Command::kJacobian:
      return Jacobian(session, seq, cmd.jacobian(), result);
    case v1::Command::kWatchedVariables: {
      ASSIGN_OR_RETURN(
          std::vector<int64_t> ids,
          session.WatchedVariables(seq, cmd.watched_variables().tape_id()));
      result->mutable_watched_variables()->mutable_ids()->Add(ids.begin(),
                                                              ids.end());
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
    default:
      return NoKind(session, seq);  // ApplyCommand sends no other kind
  }
}

}  // namespace

absl::Status ApplyCommand(Session& session, const v1::Command& cmd,
                          const CommandContext& context,
                          v1::CommandResult* result) {
  const int64_t seq = cmd.seq();
  switch (cmd.kind_case()) {
    case v1::Command::kExecute:
      return Execute(session, seq, cmd.execute());
    case v1::Command::kPut:
      return Put(session, seq, cmd.put(), context.put_limit);
    case v1::Command::kFetch:
      return Fetch(session, seq, cmd.fetch(), context.budget, result);
    case v1::Command::kPutBegin:
      return PutBegin(session, seq, cmd.put_begin(), context.put_limit);
    case v1::Command::kPutChunk:
      return session.PutTensorChunk(seq, cmd.put_chunk().id(),
                                    cmd.put_chunk().offset(),
                                    cmd.put_chunk().data());
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
      return Gradient(session, seq, cmd.gradient(), context, result);
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
    case v1::Command::kJacobian:
    case v1::Command::kWatchedVariables:
    case v1::Command::kPushAccumulator:
    case v1::Command::kPopAccumulator:
    case v1::Command::kDeleteAccumulator:
    case v1::Command::kAccumulatorWatch:
    case v1::Command::kFetchJvp:
    case v1::Command::kExecuteWithGradient:
      return ApplyAutodiffCommand(session, cmd, result);
    case v1::Command::kDefineProgram:
    case v1::Command::kCallProgram:
    case v1::Command::kDeleteProgram:
    case v1::Command::kListPrograms:
      return ApplyProgramCommand(session, cmd, result);
    case v1::Command::KIND_NOT_SET:
      break;
  }
  return NoKind(session, seq);
}

}  // namespace gradtape::server
