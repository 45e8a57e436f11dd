// Jacobians, watched variables, forward accumulators, stop_gradient and
// custom gradients for the C++ client (gradtape/client/autodiff.h and the
// GradientTape methods of session.h).
#include "gradtape/client/autodiff.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/src/session_core.h"
#include "core/base/status_macros.h"
#include "gradtape/client/ops.h"

namespace gradtape::client {
namespace {

absl::StatusOr<std::vector<Tensor>> JacobianCommand(
    internal::SessionCore& core, int64_t tape, const Tensor& target,
    absl::Span<const Tensor> sources, Unconnected unconnected, bool batch) {
  const char* what = batch ? "BatchJacobian" : "Jacobian";
  if (sources.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " on tape ", tape, ": needs at least one source"));
  }
  v1::Command command;
  v1::Jacobian* jac = command.mutable_jacobian();
  jac->set_tape_id(tape);
  std::string problem;
  jac->set_target_id(core.IdFor(target, "the target", &problem));
  for (size_t i = 0; i < sources.size(); ++i) {
    jac->add_source_ids(
        core.IdFor(sources[i], absl::StrCat("source ", i), &problem));
  }
  if (!problem.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " on tape ", tape, ": ", problem));
  }
  jac->set_unconnected(internal::ToProto(unconnected));
  jac->set_batch(batch);
  std::vector<Tensor> results;
  for (size_t i = 0; i < sources.size(); ++i) {
    const int64_t id = core.NewTensorId();
    jac->add_result_ids(id);
    results.push_back(core.MakeTensor(id));
  }
  core.Enqueue(command);
  return results;
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> GradientTape::Jacobian(
    const Tensor& target, absl::Span<const Tensor> sources,
    Unconnected unconnected) {
  return JacobianCommand(*core_, id_, target, sources, unconnected, false);
}

absl::StatusOr<std::vector<Tensor>> GradientTape::BatchJacobian(
    const Tensor& target, absl::Span<const Tensor> sources,
    Unconnected unconnected) {
  return JacobianCommand(*core_, id_, target, sources, unconnected, true);
}

absl::StatusOr<std::vector<int64_t>> GradientTape::WatchedVariableIds() {
  v1::Command command;
  command.mutable_watched_variables()->set_tape_id(id_);
  ASSIGN_OR_RETURN(v1::CommandResult result, core_->Call(std::move(command)));
  if (!result.has_watched_variables()) {
    return absl::InternalError(absl::StrCat(
        "WatchedVariableIds on tape ", id_,
        ": the server's result for command ", result.seq(), " holds no ids"));
  }
  const auto& ids = result.watched_variables().ids();
  return std::vector<int64_t>(ids.begin(), ids.end());
}

// ---------------------------------------------------------------------------

ForwardAccumulator::ForwardAccumulator(Session& session)
    : core_(session.core()), id_(core_->NewTapeId()) {
  v1::Command command;
  command.mutable_push_accumulator()->set_accumulator_id(id_);
  core_->Enqueue(command);
  active_ = true;
}

ForwardAccumulator::~ForwardAccumulator() {
  Stop();
  v1::Command command;
  command.mutable_delete_accumulator()->set_accumulator_id(id_);
  core_->Enqueue(command);
}

void ForwardAccumulator::Watch(const Tensor& t, const Tensor& tangent) {
  v1::Command command;
  v1::AccumulatorWatch* watch = command.mutable_accumulator_watch();
  watch->set_accumulator_id(id_);
  std::string problem;
  watch->add_ids(core_->IdFor(t, "the tensor", &problem));
  watch->add_tangent_ids(core_->IdFor(tangent, "the tangent", &problem));
  core_->Enqueue(command, "AccumulatorWatch", problem);
}

void ForwardAccumulator::Stop() {
  if (!active_) return;
  active_ = false;
  v1::Command command;
  command.mutable_pop_accumulator()->set_accumulator_id(id_);
  core_->Enqueue(command);
}

Tensor ForwardAccumulator::Jvp(const Tensor& t, Unconnected unconnected) {
  if (t.is_null()) return Tensor();
  v1::Command command;
  v1::FetchJvp* fetch = command.mutable_fetch_jvp();
  fetch->set_accumulator_id(id_);
  std::string problem;
  fetch->set_id(core_->IdFor(t, "the tensor", &problem));
  fetch->set_unconnected(internal::ToProto(unconnected));
  const int64_t id = core_->NewTensorId();
  fetch->set_result_id(id);
  Tensor result = core_->MakeTensor(id);
  core_->Enqueue(command, "FetchJvp", problem);
  return result;
}

absl::StatusOr<std::optional<HostTensor>> ForwardAccumulator::JvpValue(
    const Tensor& t, Unconnected unconnected) {
  std::string problem;
  const int64_t tensor_id = core_->IdFor(t, "the tensor", &problem);
  if (!problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("JvpValue: ", problem));
  }
  v1::Command command;
  v1::FetchJvp* fetch = command.mutable_fetch_jvp();
  fetch->set_accumulator_id(id_);
  fetch->set_id(tensor_id);
  fetch->set_unconnected(internal::ToProto(unconnected));
  fetch->set_return_value(true);
  // The result still gets an id (released when this handle goes).
  const int64_t id = core_->NewTensorId();
  fetch->set_result_id(id);
  Tensor handle = core_->MakeTensor(id);
  ASSIGN_OR_RETURN(v1::CommandResult result, core_->Call(std::move(command)));
  v1::GradientValues* values = result.mutable_jvp();
  if (!result.has_jvp() || values->values_size() != 1) {
    return absl::InternalError(
        absl::StrCat("JvpValue: the server's result for command ", result.seq(),
                     " holds no value"));
  }
  if (values->is_none_size() > 0 && values->is_none(0)) return std::nullopt;
  return internal::FromProto(values->mutable_values(0));
}

Tensor StopGradient(const Tensor& x) {
  return Execute("StopGradient", {x}, {}, 1)[0];
}

// ---------------------------------------------------------------------------

int GradientProgram::AddStep(std::string op, std::vector<Ref> inputs,
                             Attrs attrs) {
  steps_.push_back({std::move(op), std::move(inputs), std::move(attrs)});
  return static_cast<int>(steps_.size()) - 1;
}

void GradientProgram::SetInputGradient(int i, Ref ref) {
  if (i < 0) return;
  if (static_cast<int>(input_gradients_.size()) <= i) {
    input_gradients_.resize(i + 1);
  }
  input_gradients_[i] = std::move(ref);
}

std::vector<Tensor> ExecuteWithGradient(absl::string_view op,
                                        absl::Span<const Tensor> inputs,
                                        const Attrs& attrs, int num_outputs,
                                        const GradientProgram& gradient) {
  internal::SessionCore* core = nullptr;
  for (const Tensor& t : inputs) {
    if ((core = SessionOf(t)) != nullptr) break;
  }
  if (core == nullptr) return std::vector<Tensor>(num_outputs);
  v1::Command command;
  v1::ExecuteWithGradient* cmd = command.mutable_execute_with_gradient();
  v1::ExecuteOp* execute = cmd->mutable_op();
  execute->set_op(std::string(op));
  std::string problem;
  for (size_t i = 0; i < inputs.size(); ++i) {
    execute->add_input_ids(
        core->IdFor(inputs[i], absl::StrCat("input ", i), &problem));
  }
  std::vector<Tensor> outputs;
  for (int i = 0; i < num_outputs; ++i) {
    const int64_t id = core->NewTensorId();
    execute->add_output_ids(id);
    outputs.push_back(core->MakeTensor(id));
  }
  for (const auto& [name, value] : attrs) {
    internal::ToProto(value, &(*execute->mutable_attrs())[name]);
  }
  auto ref_to_proto = [&](const GradientProgram::Ref& ref,
                          v1::GradientRef* out) {
    switch (ref.kind_) {
      case GradientProgram::Ref::kUpstream:
        out->set_upstream(ref.index_);
        break;
      case GradientProgram::Ref::kInput:
        out->set_input(ref.index_);
        break;
      case GradientProgram::Ref::kOutput:
        out->set_output(ref.index_);
        break;
      case GradientProgram::Ref::kStep:
        out->mutable_step()->set_step(ref.index_);
        out->mutable_step()->set_output(ref.output_);
        break;
      case GradientProgram::Ref::kTensor:
        out->set_tensor_id(
            core->IdFor(ref.tensor_, "a captured tensor", &problem));
        break;
    }
  };
  for (const GradientProgram::Step& step : gradient.steps_) {
    v1::GradientStep* s = cmd->add_steps();
    s->set_op(step.op);
    for (const GradientProgram::Ref& ref : step.inputs) {
      ref_to_proto(ref, s->add_inputs());
    }
    for (const auto& [name, value] : step.attrs) {
      internal::ToProto(value, &(*s->mutable_attrs())[name]);
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    v1::InputGradient* g = cmd->add_input_gradients();
    if (i < gradient.input_gradients_.size() &&
        gradient.input_gradients_[i].has_value()) {
      ref_to_proto(*gradient.input_gradients_[i], g->mutable_ref());
    }
  }
  core->Enqueue(command, op, problem);
  return outputs;
}

}  // namespace gradtape::client
