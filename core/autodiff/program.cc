#include "core/autodiff/program.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/autodiff/gradient.h"
#include "core/base/cancellation.h"
#include "core/base/status_macros.h"
#include "core/tensor/variable.h"

namespace gradtape {
namespace {

std::string RefName(const ProgramRef& ref) {
  switch (ref.kind) {
    case ProgramRef::kParam:
      return absl::StrCat("param ", ref.index);
    case ProgramRef::kConstant:
      return absl::StrCat("constant ", ref.index);
    case ProgramRef::kStep:
      return absl::StrCat("step ", ref.index, " output ", ref.output);
    case ProgramRef::kOnes:
      return "ones";
  }
  return "?";
}

std::string StepName(const Program& p, size_t s) {
  return absl::StrCat("program step ", s, " (", p.steps[s].Name(), ")");
}

// The slot `ref` names, or INVALID_ARGUMENT "<where> refers to <ref>, <why>".
// `steps_before`: how many steps a kStep reference may name (their derived
// fields are filled).
absl::StatusOr<int> SlotOf(const Program& p, const ProgramRef& ref,
                           int steps_before, const std::string& where) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " refers to ", RefName(ref), ", ", why));
  };
  const int num_params = static_cast<int>(p.params.size());
  const int num_constants = static_cast<int>(p.constants.size());
  switch (ref.kind) {
    case ProgramRef::kParam:
      if (ref.index < 0 || ref.index >= num_params) {
        return bad(absl::StrCat("but the program has ", num_params, " params"));
      }
      return ref.index;
    case ProgramRef::kConstant:
      if (ref.index < 0 || ref.index >= num_constants) {
        return bad(
            absl::StrCat("but the program has ", num_constants, " constants"));
      }
      return num_params + ref.index;
    case ProgramRef::kStep: {
      if (ref.index < 0 || ref.index >= steps_before) {
        return bad(steps_before == 0
                       ? std::string("but no step comes before it")
                       : absl::StrCat("but only steps 0..", steps_before - 1,
                                      " come before it"));
      }
      const int first = p.step_slot[ref.index];
      const int n = (ref.index + 1 < static_cast<int>(p.step_slot.size())
                         ? p.step_slot[ref.index + 1]
                         : p.num_slots) -
                    first;
      if (ref.output < 0 || ref.output >= n) {
        return bad(absl::StrCat("but that step (", p.steps[ref.index].Name(),
                                ") has ", n, " outputs"));
      }
      return first + ref.output;
    }
    case ProgramRef::kOnes:
      return bad("which only a gradient's output gradient may be");
  }
  return bad("of an unknown kind");
}

// limits.max_values, at most what a slot number can hold.
int64_t MaxValues(const ProgramLimits& limits) {
  return std::min<int64_t>(limits.max_values, std::numeric_limits<int>::max());
}

// Records in last_reader that step s reads its inputs (checked references;
// kOnes only where `ones_from` <= j).
absl::Status ReadInputs(Program& p, int s, size_t ones_from) {
  const ProgramStep& step = p.steps[s];
  for (size_t j = 0; j < step.inputs.size(); ++j) {
    if (j >= ones_from && step.inputs[j].kind == ProgramRef::kOnes) continue;
    ASSIGN_OR_RETURN(int slot,
                     SlotOf(p, step.inputs[j], s,
                            absl::StrCat(StepName(p, s), " input ", j)));
    p.last_reader[slot] = s;
  }
  return absl::OkStatus();
}

// Appends step s's derived fields for `num_outputs` outputs.
absl::Status AddOutputs(const ProgramLimits& lim, Program& p, int s,
                        const OpDef* op, int64_t num_outputs) {
  if (p.num_slots + num_outputs > MaxValues(lim)) {
    return absl::InvalidArgumentError(
        absl::StrCat(StepName(p, s), " takes the program past ", MaxValues(lim),
                     " values (the limit)"));
  }
  p.step_ops.push_back(op);
  p.step_slot.push_back(p.num_slots);
  p.num_slots += static_cast<int>(num_outputs);
  p.last_reader.resize(p.num_slots, Program::kUnread);
  return absl::OkStatus();
}

// Where each tape stands while the steps are checked in order.
enum class TapeState { kNever, kRecording, kPopped };

// Checks tape step s against the tapes' states so far and updates them.
absl::Status ValidateTapeStep(const ProgramLimits& lim, Program& p, int s,
                              std::vector<TapeState>& tapes) {
  const ProgramStep& step = p.steps[s];
  if (step.kind == ProgramStep::kStopRecording ||
      step.kind == ProgramStep::kStartRecording) {
    if (!step.inputs.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          StepName(p, s), " takes no inputs, got ", step.inputs.size()));
    }
    return AddOutputs(lim, p, s, nullptr, 0);
  }
  if (step.tape < 0 || step.tape >= lim.max_tapes) {
    return absl::InvalidArgumentError(
        absl::StrCat(StepName(p, s), " names tape ", step.tape,
                     "; tapes are numbered 0..", lim.max_tapes - 1));
  }
  if (step.tape >= static_cast<int>(tapes.size())) {
    tapes.resize(step.tape + 1, TapeState::kNever);
  }
  TapeState& state = tapes[step.tape];
  int64_t num_outputs = 0;
  switch (step.kind) {
    case ProgramStep::kPushTape:
      if (state == TapeState::kRecording) {
        return absl::InvalidArgumentError(
            absl::StrCat(StepName(p, s), ": tape ", step.tape,
                         " is already recording (pushed, not popped)"));
      }
      state = TapeState::kRecording;
      break;
    case ProgramStep::kPopTape:
      if (state != TapeState::kRecording) {
        return absl::InvalidArgumentError(
            absl::StrCat(StepName(p, s), ": tape ", step.tape,
                         " is not recording (no push before, or popped)"));
      }
      state = TapeState::kPopped;
      break;
    case ProgramStep::kWatch:
    case ProgramStep::kGradient:
      if (state == TapeState::kNever) {
        return absl::InvalidArgumentError(
            absl::StrCat(StepName(p, s), ": tape ", step.tape,
                         " is not pushed by an earlier step"));
      }
      break;
    default:
      break;
  }
  size_t ones_from = step.inputs.size();
  if (step.kind == ProgramStep::kGradient) {
    const int64_t grads = static_cast<int64_t>(step.inputs.size()) -
                          step.num_targets - step.num_sources;
    if (step.num_targets < 1 || step.num_sources < 0 || grads < 0 ||
        (grads != 0 && grads != step.num_targets)) {
      return absl::InvalidArgumentError(absl::StrCat(
          StepName(p, s), " has ", step.num_targets, " targets, ",
          step.num_sources, " sources and ", step.inputs.size(),
          " inputs in all; it needs at least one target, and no output "
          "gradients or one per target"));
    }
    ones_from = static_cast<size_t>(step.num_targets + step.num_sources);
    num_outputs = step.num_sources;
  } else if (step.kind != ProgramStep::kWatch && !step.inputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        StepName(p, s), " takes no inputs, got ", step.inputs.size()));
  }
  RETURN_IF_ERROR(ReadInputs(p, s, ones_from));
  p.num_tapes = std::max(p.num_tapes, step.tape + 1);
  return AddOutputs(lim, p, s, nullptr, num_outputs);
}

// Checks step s (op, attrs, arity, references) and appends its derived
// fields; records in last_reader that step s reads its input slots.
absl::Status ValidateStep(const OpRegistry& registry, const ProgramLimits& lim,
                          Program& p, int s, std::vector<TapeState>& tapes) {
  ProgramStep& step = p.steps[s];
  if (step.kind == ProgramStep::kFused) {
    if (step.loop == nullptr || registry.fused_loop_kernel() == nullptr ||
        static_cast<int>(step.inputs.size()) != step.loop->num_inputs) {
      return absl::InvalidArgumentError(
          absl::StrCat(StepName(p, s), " is not a runnable fused loop"));
    }
    RETURN_IF_ERROR(ReadInputs(p, s, step.inputs.size()));
    return AddOutputs(lim, p, s, nullptr, step.loop->num_results());
  }
  if (step.kind == ProgramStep::kMatMul) {
    if (step.matmul == nullptr || registry.strided_matmul_kernel() == nullptr ||
        static_cast<int>(step.inputs.size()) != step.matmul->num_inputs) {
      return absl::InvalidArgumentError(absl::StrCat(
          StepName(p, s), " is not a runnable strided matrix product"));
    }
    RETURN_IF_ERROR(ReadInputs(p, s, step.inputs.size()));
    return AddOutputs(lim, p, s, nullptr, 1);
  }
  if (step.kind != ProgramStep::kOp) return ValidateTapeStep(lim, p, s, tapes);
  const OpDef* op = registry.Find(step.op);
  if (op == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("program step ", s, " runs unknown op '", step.op, "'"));
  }
  if (absl::Status st = op->ResolveAttrs(&step.attrs); !st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(StepName(p, s), ": ", st.message()));
  }
  absl::StatusOr<OpDef::Arity> arity = op->FlatArity(step.attrs);
  if (!arity.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(StepName(p, s), ": ", arity.status().message()));
  }
  if (static_cast<int64_t>(step.inputs.size()) != arity->inputs) {
    return absl::InvalidArgumentError(
        absl::StrCat(StepName(p, s), " has ", step.inputs.size(),
                     " inputs, the op takes ", arity->inputs));
  }
  RETURN_IF_ERROR(ReadInputs(p, s, step.inputs.size()));
  return AddOutputs(lim, p, s, op, arity->outputs);
}

void ClearDerived(Program& p) {
  p.validated = false;
  p.step_ops.clear();
  p.step_slot.clear();
  p.last_reader.clear();
  p.drop_after.clear();
  p.num_tapes = 0;
  p.num_slots = static_cast<int>(p.params.size() + p.constants.size());
}

// drop_after from last_reader: a slot goes after its last reader; a step's
// unread outputs go right after the step (params and constants nobody reads
// are never taken).
void PlanDrops(Program& p) {
  const int num_steps = static_cast<int>(p.steps.size());
  p.drop_after.assign(num_steps, {});
  const int first_step_slot =
      static_cast<int>(p.params.size() + p.constants.size());
  int producer = 0;
  for (int slot = 0; slot < p.num_slots; ++slot) {
    while (producer + 1 < num_steps && p.step_slot[producer + 1] <= slot) {
      ++producer;
    }
    const int reader = p.last_reader[slot];
    if (reader >= 0) {
      p.drop_after[reader].push_back(slot);
    } else if (reader == Program::kUnread && slot >= first_step_slot) {
      p.drop_after[producer].push_back(slot);
    }
  }
}

}  // namespace

absl::Status ValidateProgram(const OpRegistry& registry, Program* program,
                             const ProgramLimits& limits) {
  Program& p = *program;
  ClearDerived(p);
  if (static_cast<int64_t>(p.steps.size()) > limits.max_steps) {
    return absl::InvalidArgumentError(
        absl::StrCat("program has ", p.steps.size(),
                     " steps, more than the limit of ", limits.max_steps));
  }
  if (static_cast<int64_t>(p.params.size() + p.constants.size()) >
      MaxValues(limits)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "program has ", p.params.size(), " params and ", p.constants.size(),
        " constants, more than the limit of ", MaxValues(limits), " values"));
  }
  for (size_t i = 0; i < p.constants.size(); ++i) {
    if (!p.constants[i].valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("program constant ", i, " holds no tensor"));
    }
  }
  for (size_t i = 0; i < p.params.size(); ++i) {
    if (p.params[i].dtype == DType::kInvalid) {
      return absl::InvalidArgumentError(
          absl::StrCat("program param ", i, " has no dtype"));
    }
    if (absl::Status st =
            CheckedTensorSize(p.params[i].dtype, p.params[i].shape).status();
        !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("program param ", i, ": ", st.message()));
    }
  }
  p.last_reader.assign(p.num_slots, Program::kUnread);
  p.step_ops.reserve(p.steps.size());
  p.step_slot.reserve(p.steps.size());
  std::vector<TapeState> tapes;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    RETURN_IF_ERROR(
        ValidateStep(registry, limits, p, static_cast<int>(s), tapes));
  }
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    ASSIGN_OR_RETURN(int slot,
                     SlotOf(p, p.outputs[i], static_cast<int>(p.steps.size()),
                            absl::StrCat("program output ", i)));
    p.last_reader[slot] = Program::kReadByOutput;
  }
  PlanDrops(p);
  p.validated = true;
  return absl::OkStatus();
}

namespace {

absl::Status CheckArgs(const Program& p, absl::Span<const Tensor> args) {
  if (args.size() != p.params.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "program takes ", p.params.size(), " args, got ", args.size()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const ProgramParam& param = p.params[i];
    const Tensor& arg = args[i];
    if (!arg.valid() || arg.dtype() != param.dtype ||
        arg.shape() != param.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "program param ", i, " is ", DTypeName(param.dtype),
          ShapeString(param.shape), ", got ",
          arg.valid() ? arg.DebugString() : std::string("no tensor")));
    }
  }
  return absl::OkStatus();
}

// The values of one run, by slot; forgets what it owns (constants and step
// outputs, which have ids only this run knows) when dropped, and everything
// left unless released to the caller.
class RunValues {
 public:
  RunValues(OpExecutor& exec, const Program& p) : exec_(exec), p_(p) {
    values_.resize(p.num_slots);
  }
  ~RunValues() {
    for (int slot = 0; slot < static_cast<int>(values_.size()); ++slot) {
      Drop(slot);
    }
  }
  Tensor& at(int slot) { return values_[slot]; }
  void Drop(int slot) {
    Tensor& t = values_[slot];
    if (t.valid() && Owned(slot) && t.id() != 0) exec_.Forget(t.id());
    t = Tensor();
  }
  // Hands the slot's tensor to the caller (not forgotten).
  Tensor Release(int slot) { return values_[slot]; }
  void ReleaseAll(const std::vector<int>& slots) {
    for (int slot : slots) values_[slot] = Tensor();
  }

 private:
  // Step values: params are the caller's, constants the program's.
  bool Owned(int slot) const {
    return slot >= static_cast<int>(p_.params.size() + p_.constants.size());
  }
  OpExecutor& exec_;
  const Program& p_;
  std::vector<Tensor> values_;
};

// What a run undoes when a step fails, and the tapes it made (deleted when
// the run ends, whatever happened).
class RunGuard {
 public:
  RunGuard(OpExecutor& exec, const Program& p, absl::Span<const Tensor> args)
      : exec_(exec),
        tape_ids_(p.num_tapes, 0),
        was_stopped_(exec.tapes().stopped()) {
    absl::flat_hash_map<Variable*, bool> seen;
    auto keep = [&](const Tensor& t) {
      Variable* var = VariableOf(t);
      if (var != nullptr && seen.emplace(var, true).second) {
        saved_.push_back({var, var->value});
      }
    };
    for (const Tensor& t : args) keep(t);
    for (const Tensor& t : p.constants) keep(t);
  }
  RunGuard(const RunGuard&) = delete;
  RunGuard& operator=(const RunGuard&) = delete;
  ~RunGuard() {
    if (was_stopped_) {
      exec_.tapes().StopRecording();
    } else {
      exec_.tapes().StartRecording();
    }
    for (int64_t id : tape_ids_) {
      if (id != 0) exec_.tapes().Delete(id).IgnoreError();
    }
    if (committed_) return;
    for (auto& [var, value] : saved_) var->value = std::move(value);
  }
  void Commit() { committed_ = true; }

  // The session tape id of the program's tape `tape`; a push makes it (an
  // id no tape of the session uses).
  absl::StatusOr<gradtape::Tape*> FindTape(int tape) {
    return exec_.tapes().Find(tape_ids_[tape]);
  }
  absl::Status Push(const ProgramStep& step) {
    int64_t& id = tape_ids_[step.tape];
    if (id == 0) {
      while (exec_.tapes().Find(next_id_).ok()) ++next_id_;
      id = next_id_++;
    }
    return exec_.tapes().Push(id, step.persistent,
                              step.watch_accessed_variables);
  }
  absl::Status Pop(int tape) { return exec_.tapes().Pop(tape_ids_[tape]); }

 private:
  OpExecutor& exec_;
  std::vector<std::pair<Variable*, Tensor>> saved_;
  std::vector<int64_t> tape_ids_;  // 0: not made yet
  // Program tapes take ids from the bottom of the range, which clients are
  // unlikely to use (any id in use is skipped).
  int64_t next_id_ = std::numeric_limits<int64_t>::min() + 1;
  const bool was_stopped_;
  bool committed_ = false;
};

// Runs tape step `step` of a run (values in `values`, the inputs read).
absl::Status RunTapeStep(OpExecutor& exec, const Program& p, size_t s,
                         const Tensors& in, RunGuard& guard,
                         RunValues& values) {
  const ProgramStep& step = p.steps[s];
  switch (step.kind) {
    case ProgramStep::kPushTape:
      return guard.Push(step);
    case ProgramStep::kPopTape:
      return guard.Pop(step.tape);
    case ProgramStep::kStopRecording:
      exec.tapes().StopRecording();
      return absl::OkStatus();
    case ProgramStep::kStartRecording:
      exec.tapes().StartRecording();
      return absl::OkStatus();
    case ProgramStep::kWatch: {
      ASSIGN_OR_RETURN(Tape * tape, guard.FindTape(step.tape));
      for (size_t j = 0; j < in.size(); ++j) {
        if (!IsTrainable(in[j].dtype())) {
          return absl::InvalidArgumentError(absl::StrCat(
              "input ", j, " is ", in[j].DebugString(),
              "; only floating, complex and variable-handle tensors can be "
              "watched"));
        }
      }
      for (const Tensor& t : in) tape->Watch(t);
      return absl::OkStatus();
    }
    case ProgramStep::kGradient: {
      ASSIGN_OR_RETURN(Tape * tape, guard.FindTape(step.tape));
      const auto all = absl::MakeConstSpan(in);
      ASSIGN_OR_RETURN(
          std::vector<Tensor> grads,
          Gradient(exec, *tape, all.subspan(0, step.num_targets),
                   all.subspan(step.num_targets, step.num_sources),
                   all.subspan(step.num_targets + step.num_sources),
                   step.unconnected));
      // One id, one value: a result that is already a value of this run (an
      // output gradient passed through, a source twice) gets its own id.
      absl::flat_hash_map<int64_t, bool> held;
      for (int slot = 0; slot < p.num_slots; ++slot) {
        if (values.at(slot).valid()) held.emplace(values.at(slot).id(), true);
      }
      for (size_t k = 0; k < grads.size(); ++k) {
        Tensor& g = grads[k];
        if (g.valid() && !held.emplace(g.id(), true).second) {
          g = exec.Adopt(g);
        }
        values.at(p.step_slot[s] + static_cast<int>(k)) = std::move(g);
      }
      return absl::OkStatus();
    }
    case ProgramStep::kOp:
    case ProgramStep::kFused:
    case ProgramStep::kMatMul:
      break;
  }
  return absl::InternalError("not a tape step");
}

// FAILED_PRECONDITION if an output of op step s has another shape than the
// plan traced (Program::expected_shapes).
absl::Status CheckExpectedShapes(const Program& p, size_t s,
                                 const Tensors& outputs) {
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Shape& want = p.expected_shapes[p.step_slot[s] + k];
    if (outputs[k].shape() != want) {
      return absl::FailedPreconditionError(
          absl::StrCat("output ", k, " is ", outputs[k].DebugString(),
                       "; the plan was traced with ",
                       DTypeName(outputs[k].dtype()), ShapeString(want)));
    }
  }
  return absl::OkStatus();
}

// Runs step s on `inputs`; a gradient step with `tracer` as the executor's
// observer, which then sees the step's inputs and outputs.
absl::Status RunStep(OpExecutor& exec, const Program& p, size_t s,
                     const Tensors& inputs, RunGuard& guard, RunValues& values,
                     ProgramTracer* tracer) {
  const ProgramStep& step = p.steps[s];
  if (step.kind == ProgramStep::kOp || step.kind == ProgramStep::kFused ||
      step.kind == ProgramStep::kMatMul) {
    Tensors outputs;
    if (step.kind == ProgramStep::kOp) {
      RETURN_IF_ERROR(
          exec.Execute(*p.step_ops[s], inputs, step.attrs, &outputs));
    } else {
      if (step.kind == ProgramStep::kFused) {
        RETURN_IF_ERROR(
            exec.registry().fused_loop_kernel()(*step.loop, inputs, &outputs));
      } else {
        outputs.emplace_back();
        RETURN_IF_ERROR(exec.registry().strided_matmul_kernel()(
            *step.matmul, inputs, &outputs[0]));
      }
      RETURN_IF_ERROR(exec.CheckMemoryLimit(step.Name()));
      for (Tensor& t : outputs) t = exec.Adopt(std::move(t));
    }
    if (!p.expected_shapes.empty()) {
      RETURN_IF_ERROR(CheckExpectedShapes(p, s, outputs));
    }
    if (tracer != nullptr)
      tracer->StepRan(static_cast<int>(s), inputs, outputs);
    for (size_t k = 0; k < outputs.size(); ++k) {
      values.at(p.step_slot[s] + static_cast<int>(k)) = std::move(outputs[k]);
    }
    return absl::OkStatus();
  }
  OpExecutor::Observer* outer = exec.observer();
  if (tracer != nullptr) exec.set_observer(tracer);
  absl::Status st = RunTapeStep(exec, p, s, inputs, guard, values);
  exec.set_observer(outer);
  if (tracer != nullptr && st.ok()) {
    const int first = p.step_slot[s];
    const int n =
        (s + 1 < p.steps.size() ? p.step_slot[s + 1] : p.num_slots) - first;
    std::vector<Tensor> outputs;
    for (int k = 0; k < n; ++k) outputs.push_back(values.at(first + k));
    tracer->StepRan(static_cast<int>(s), inputs, outputs);
  }
  return st;
}

}  // namespace

absl::StatusOr<Tensors> RunProgram(OpExecutor& exec, const Program& program,
                                   absl::Span<const Tensor> args,
                                   ProgramTracer* tracer) {
  const Program& p = program;
  if (!p.validated || p.step_ops.size() != p.steps.size()) {
    return absl::FailedPreconditionError("program was not validated");
  }
  RETURN_IF_ERROR(CheckArgs(p, args));
  RunGuard guard(exec, p, args);
  RunValues values(exec, p);
  const int num_params = static_cast<int>(p.params.size());
  for (int i = 0; i < num_params; ++i) values.at(i) = args[i];
  for (size_t c = 0; c < p.constants.size(); ++c) {
    const int slot = num_params + static_cast<int>(c);
    if (p.last_reader[slot] != Program::kUnread) {
      values.at(slot) = p.constants[c];
    }
  }
  Tensors inputs;
  Cancellation* const cancel = CurrentCancellation();
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const ProgramStep& step = p.steps[s];
    // A call is one command: its deadline or cancellation stops it between
    // steps too (and the guard undoes what ran).
    if (cancel != nullptr && cancel->Poll()) {
      return cancel->Check(StepName(p, s));
    }
    inputs.clear();
    for (size_t j = 0; j < step.inputs.size(); ++j) {
      const int slot = p.Slot(step.inputs[j]);
      if (slot < 0) {  // kOnes
        inputs.emplace_back();
        continue;
      }
      if (!values.at(slot).valid()) {
        return absl::FailedPreconditionError(absl::StrCat(
            StepName(p, s), ": input ", j, " (", RefName(step.inputs[j]),
            ") is a None gradient: its source is not connected to the "
            "targets"));
      }
      inputs.push_back(values.at(slot));
    }
    absl::Status st = RunStep(exec, p, s, inputs, guard, values, tracer);
    inputs.clear();
    if (!st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat(StepName(p, s), ": ", st.message()));
    }
    for (int slot : p.drop_after[s]) values.Drop(slot);
  }
  Tensors result;
  std::vector<int> kept;
  const int first_step_slot = num_params + static_cast<int>(p.constants.size());
  for (const ProgramRef& ref : p.outputs) {
    const int slot = p.Slot(ref);
    // A param or constant returned gets an id of its own: its tensor keeps
    // the one the caller or the program holds.
    result.push_back(slot < first_step_slot ? exec.Adopt(values.at(slot))
                                            : values.Release(slot));
    kept.push_back(slot);
  }
  values.ReleaseAll(kept);
  guard.Commit();
  return result;
}

ProgramStep ProgramStep::Gradient(int tape, std::vector<ProgramRef> targets,
                                  std::vector<ProgramRef> sources,
                                  std::vector<ProgramRef> output_gradients,
                                  Unconnected unconnected) {
  ProgramStep s;
  s.kind = kGradient;
  s.tape = tape;
  s.num_targets = static_cast<int>(targets.size());
  s.num_sources = static_cast<int>(sources.size());
  s.inputs = std::move(targets);
  s.inputs.insert(s.inputs.end(), sources.begin(), sources.end());
  s.inputs.insert(s.inputs.end(), output_gradients.begin(),
                  output_gradients.end());
  s.unconnected = unconnected;
  return s;
}

absl::string_view ProgramStep::Name() const {
  switch (kind) {
    case kOp:
      return op;
    case kPushTape:
      return "PushTape";
    case kWatch:
      return "Watch";
    case kGradient:
      return "Gradient";
    case kPopTape:
      return "PopTape";
    case kStopRecording:
      return "StopRecording";
    case kStartRecording:
      return "StartRecording";
    case kFused:
      return "FusedLoop";
    case kMatMul:
      return "StridedMatMul";
  }
  return "?";
}

int Program::Slot(const ProgramRef& ref) const {
  switch (ref.kind) {
    case ProgramRef::kParam:
      return ref.index;
    case ProgramRef::kConstant:
      return static_cast<int>(params.size()) + ref.index;
    case ProgramRef::kStep:
      return step_slot[ref.index] + ref.output;
    case ProgramRef::kOnes:
      break;
  }
  return -1;
}

int64_t Program::StructureBytes() const {
  int64_t bytes = sizeof(Program);
  bytes += static_cast<int64_t>(params.size()) * sizeof(ProgramParam);
  for (const ProgramParam& param : params) {
    bytes += static_cast<int64_t>(param.shape.size()) * sizeof(int64_t);
  }
  bytes += static_cast<int64_t>(constants.size()) * sizeof(Tensor);
  bytes += static_cast<int64_t>(outputs.size()) * sizeof(ProgramRef);
  for (const ProgramStep& step : steps) {
    bytes += sizeof(ProgramStep) + static_cast<int64_t>(step.op.capacity());
    bytes += static_cast<int64_t>(step.inputs.size()) * sizeof(ProgramRef);
    // An attr: its entry, plus what a string or list holds.
    for (const auto& [name, value] : step.attrs) {
      bytes += sizeof(std::pair<std::string, AttrValue>) +
               static_cast<int64_t>(name.capacity());
      if (const auto* str = std::get_if<std::string>(&value)) {
        bytes += static_cast<int64_t>(str->capacity());
      } else if (const auto* list = std::get_if<std::vector<int64_t>>(&value)) {
        bytes += static_cast<int64_t>(list->capacity()) * sizeof(int64_t);
      }
    }
    if (step.loop != nullptr) {
      bytes +=
          sizeof(FusedLoop) +
          static_cast<int64_t>(step.loop->ops.size()) * sizeof(FusedLoop::Op) +
          static_cast<int64_t>(step.loop->outputs.size()) * sizeof(int) +
          static_cast<int64_t>(step.loop->row_sums.size()) *
              sizeof(FusedLoop::RowSum);
    }
    if (step.matmul != nullptr) {
      bytes += sizeof(StridedMatMul);
      for (const StridedMatMul::Product& product : step.matmul->products) {
        bytes +=
            sizeof(product) +
            static_cast<int64_t>(product.batch.size() * 4) * sizeof(int64_t);
      }
    }
    // Derived: step_ops, step_slot, drop_after's vector.
    bytes += sizeof(void*) + sizeof(int) + sizeof(std::vector<int>);
  }
  // last_reader and the drop lists: one int each per slot.
  bytes += 2 * static_cast<int64_t>(num_slots) * sizeof(int);
  for (const Shape& shape : expected_shapes) {
    bytes +=
        sizeof(Shape) + static_cast<int64_t>(shape.size()) * sizeof(int64_t);
  }
  return bytes;
}

}  // namespace gradtape
