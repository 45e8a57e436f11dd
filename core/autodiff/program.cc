#include "core/autodiff/program.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

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
  }
  return "?";
}

std::string StepName(const Program& p, size_t s) {
  return absl::StrCat("program step ", s, " (", p.steps[s].op, ")");
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
        return bad(absl::StrCat("but that step's op ", p.steps[ref.index].op,
                                " has ", n, " outputs"));
      }
      return first + ref.output;
    }
  }
  return bad("of an unknown kind");
}

// limits.max_values, at most what a slot number can hold.
int64_t MaxValues(const ProgramLimits& limits) {
  return std::min<int64_t>(limits.max_values, std::numeric_limits<int>::max());
}

// Checks step s (op, attrs, arity, references) and appends its derived
// fields; records in last_reader that step s reads its input slots.
absl::Status ValidateStep(const OpRegistry& registry, const ProgramLimits& lim,
                          Program& p, int s) {
  ProgramStep& step = p.steps[s];
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
  for (size_t j = 0; j < step.inputs.size(); ++j) {
    ASSIGN_OR_RETURN(int slot,
                     SlotOf(p, step.inputs[j], s,
                            absl::StrCat(StepName(p, s), " input ", j)));
    p.last_reader[slot] = s;
  }
  if (p.num_slots + static_cast<int64_t>(arity->outputs) > MaxValues(lim)) {
    return absl::InvalidArgumentError(
        absl::StrCat(StepName(p, s), " takes the program past ", MaxValues(lim),
                     " values (the limit)"));
  }
  p.step_ops.push_back(op);
  p.step_slot.push_back(p.num_slots);
  p.num_slots += arity->outputs;
  p.last_reader.resize(p.num_slots, Program::kUnread);
  return absl::OkStatus();
}

void ClearDerived(Program& p) {
  p.validated = false;
  p.step_ops.clear();
  p.step_slot.clear();
  p.last_reader.clear();
  p.drop_after.clear();
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
  }
  p.last_reader.assign(p.num_slots, Program::kUnread);
  p.step_ops.reserve(p.steps.size());
  p.step_slot.reserve(p.steps.size());
  for (size_t s = 0; s < p.steps.size(); ++s) {
    RETURN_IF_ERROR(ValidateStep(registry, limits, p, static_cast<int>(s)));
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

// The slot of a reference of a validated program.
int ValidSlot(const Program& p, const ProgramRef& ref) {
  switch (ref.kind) {
    case ProgramRef::kParam:
      return ref.index;
    case ProgramRef::kConstant:
      return static_cast<int>(p.params.size()) + ref.index;
    case ProgramRef::kStep:
      return p.step_slot[ref.index] + ref.output;
  }
  return 0;
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
  bool Owned(int slot) const {
    return slot >= static_cast<int>(p_.params.size());
  }
  OpExecutor& exec_;
  const Program& p_;
  std::vector<Tensor> values_;
};

}  // namespace

absl::StatusOr<Tensors> RunProgram(OpExecutor& exec, const Program& program,
                                   absl::Span<const Tensor> args) {
  const Program& p = program;
  if (!p.validated || p.step_ops.size() != p.steps.size()) {
    return absl::FailedPreconditionError("program was not validated");
  }
  RETURN_IF_ERROR(CheckArgs(p, args));
  RunValues values(exec, p);
  const int num_params = static_cast<int>(p.params.size());
  for (int i = 0; i < num_params; ++i) values.at(i) = args[i];
  for (size_t c = 0; c < p.constants.size(); ++c) {
    const int slot = num_params + static_cast<int>(c);
    if (p.last_reader[slot] != Program::kUnread) {
      values.at(slot) = exec.Adopt(p.constants[c]);
    }
  }
  Tensors inputs;
  Tensors outputs;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const ProgramStep& step = p.steps[s];
    inputs.clear();
    for (const ProgramRef& ref : step.inputs) {
      inputs.push_back(values.at(ValidSlot(p, ref)));
    }
    absl::Status st =
        exec.Execute(*p.step_ops[s], inputs, step.attrs, &outputs);
    inputs.clear();
    if (!st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat(StepName(p, s), ": ", st.message()));
    }
    for (size_t k = 0; k < outputs.size(); ++k) {
      values.at(p.step_slot[s] + static_cast<int>(k)) = std::move(outputs[k]);
    }
    for (int slot : p.drop_after[s]) values.Drop(slot);
  }
  Tensors result;
  std::vector<int> kept;
  for (const ProgramRef& ref : p.outputs) {
    const int slot = ValidSlot(p, ref);
    result.push_back(values.Release(slot));
    kept.push_back(slot);
  }
  values.ReleaseAll(kept);
  return result;
}

}  // namespace gradtape
