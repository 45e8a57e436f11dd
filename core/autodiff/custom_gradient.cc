#include "core/autodiff/custom_gradient.h"

#include "absl/strings/str_cat.h"
#include "core/autodiff/grad_context.h"
#include "core/autodiff/tape.h"
#include "core/base/status_macros.h"

namespace gradtape {
namespace {

std::string RefName(const GradientRef& ref) {
  switch (ref.kind) {
    case GradientRef::kUpstream:
      return absl::StrCat("upstream ", ref.index);
    case GradientRef::kInput:
      return absl::StrCat("input ", ref.index);
    case GradientRef::kOutput:
      return absl::StrCat("output ", ref.index);
    case GradientRef::kStep:
      return absl::StrCat("step ", ref.index, " output ", ref.output);
    case GradientRef::kTensor:
      return absl::StrCat("tensor id ", ref.client_id);
  }
  return "?";
}

// `where`: "step s input j" or "the gradient of input i"; `steps_before`:
// how many steps a kStep reference may name.
absl::Status CheckRef(const OpDef& op, const GradientProgram& p,
                      const GradientRef& ref, int steps_before,
                      const std::string& where) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("custom gradient of ", op.name, ": ", where, " refers to ",
                     RefName(ref), ", ", why));
  };
  switch (ref.kind) {
    case GradientRef::kUpstream:
    case GradientRef::kOutput:
      if (ref.index < 0 || ref.index >= op.num_outputs()) {
        return bad(
            absl::StrCat("but the op has ", op.num_outputs(), " outputs"));
      }
      return absl::OkStatus();
    case GradientRef::kInput:
      if (ref.index < 0 || ref.index >= op.num_inputs()) {
        return bad(absl::StrCat("but the op has ", op.num_inputs(), " inputs"));
      }
      return absl::OkStatus();
    case GradientRef::kStep: {
      if (ref.index < 0 || ref.index >= steps_before) {
        return bad(absl::StrCat("but only steps 0..", steps_before - 1,
                                " come before it"));
      }
      const int n = p.step_ops[ref.index]->num_outputs();
      if (ref.output < 0 || ref.output >= n) {
        return bad(absl::StrCat("but that step's op ",
                                p.step_ops[ref.index]->name, " has ", n,
                                " outputs"));
      }
      return absl::OkStatus();
    }
    case GradientRef::kTensor:
      if (!ref.tensor.valid()) return bad("which holds no tensor");
      return absl::OkStatus();
  }
  return bad("of an unknown kind");
}

}  // namespace

absl::Status ValidateGradientProgram(const OpRegistry& registry,
                                     const OpDef& op,
                                     GradientProgram* program) {
  GradientProgram& p = *program;
  if (static_cast<int>(p.input_grads.size()) != op.num_inputs()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "custom gradient of ", op.name, ": gives ", p.input_grads.size(),
        " input gradients, the op has ", op.num_inputs(), " inputs"));
  }
  p.saves_input.assign(op.num_inputs(), false);
  p.saves_output.assign(op.num_outputs(), false);
  p.step_ops.clear();
  auto note = [&](const GradientRef& ref) {
    if (ref.kind == GradientRef::kInput) p.saves_input[ref.index] = true;
    if (ref.kind == GradientRef::kOutput) p.saves_output[ref.index] = true;
  };
  for (size_t s = 0; s < p.steps.size(); ++s) {
    GradientStep& step = p.steps[s];
    const OpDef* step_op = registry.Find(step.op);
    if (step_op == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("custom gradient of ", op.name, ": step ", s,
                       " runs unknown op '", step.op, "'"));
    }
    if (static_cast<int>(step.inputs.size()) != step_op->num_inputs()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "custom gradient of ", op.name, ": step ", s, " (", step.op, ") has ",
          step.inputs.size(), " inputs, the op takes ", step_op->num_inputs()));
    }
    if (absl::Status st = step_op->ResolveAttrs(&step.attrs); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "custom gradient of ", op.name, ": step ", s, ": ", st.message()));
    }
    for (size_t j = 0; j < step.inputs.size(); ++j) {
      RETURN_IF_ERROR(
          CheckRef(op, p, step.inputs[j], static_cast<int>(s),
                   absl::StrCat("step ", s, " (", step.op, ") input ", j)));
      note(step.inputs[j]);
    }
    p.step_ops.push_back(step_op);
  }
  for (size_t i = 0; i < p.input_grads.size(); ++i) {
    if (!p.input_grads[i].has_value()) continue;
    RETURN_IF_ERROR(CheckRef(op, p, *p.input_grads[i],
                             static_cast<int>(p.steps.size()),
                             absl::StrCat("the gradient of input ", i)));
    note(*p.input_grads[i]);
  }
  return absl::OkStatus();
}

const std::vector<bool>& CustomSavedInputs(const GradientProgram& program) {
  return program.saves_input;
}

const std::vector<bool>& CustomSavedOutputs(const GradientProgram& program) {
  return program.saves_output;
}

void RunGradientProgram(const GradientProgram& program, const TapeEntry& entry,
                        GradContext& g) {
  std::vector<Tensors> values(program.steps.size());
  auto value = [&](const GradientRef& ref) -> Tensor {
    switch (ref.kind) {
      case GradientRef::kUpstream:
        return g.Grad(ref.index);
      case GradientRef::kInput:
        return entry.saved_inputs[ref.index];
      case GradientRef::kOutput:
        return entry.saved_outputs[ref.index];
      case GradientRef::kStep:
        return values[ref.index][ref.output];
      case GradientRef::kTensor:
        return ref.tensor;
    }
    return Tensor();
  };
  for (size_t s = 0; s < program.steps.size() && g.ok(); ++s) {
    const GradientStep& step = program.steps[s];
    Tensors inputs;
    for (const GradientRef& ref : step.inputs) inputs.push_back(value(ref));
    values[s] = g.RunOp(step.op, inputs, step.attrs);
  }
  for (size_t i = 0; i < program.input_grads.size() && g.ok(); ++i) {
    if (program.input_grads[i].has_value()) {
      g.SetGrad(static_cast<int>(i), value(*program.input_grads[i]));
    }
  }
}

}  // namespace gradtape
