#include "core/autodiff/program_plan.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/autodiff/plan_passes.h"
#include "core/tensor/variable.h"

namespace gradtape {
namespace {

// Ops whose backward hands this integer or bool input to ops and never reads
// its values itself, so it may come from the call's params.
bool BackwardReadsOnlyThroughOps(const OpDef& op, const AttrMap& attrs,
                                 int input) {
  if (op.name == "ResourceGather" ||
      op.name == "SparseSoftmaxCrossEntropyWithLogits") {
    return input == 1;
  }
  // With batch dims, GatherV2's backward shifts the indices itself.
  if (op.name == "GatherV2") return input == 1 && attrs.Int("batch_dims") == 0;
  if (op.name == "Select" || op.name == "SelectV2") return input == 0;
  return false;
}

// Writes the plan while the program runs as defined (see the header).
class PlanBuilder : public ProgramTracer {
 public:
  PlanBuilder(const Program& p, absl::Span<const Tensor> args);

  void StepRan(int s, absl::Span<const Tensor> inputs,
               absl::Span<const Tensor> outputs) override;
  void Executed(const OpDef& op, const AttrMap& attrs,
                absl::Span<const Tensor> inputs,
                const Tensors& outputs) override;
  void Constant(const Tensor& t) override {
    // A buffer freed and reused is a new constant.
    if (t.num_elements() > 0) noted_.insert_or_assign(t.raw_data(), -1);
  }

  // The plan (validated), or FAILED_PRECONDITION saying why there is none.
  absl::StatusOr<std::unique_ptr<Program>> Finish(const OpRegistry& registry,
                                                  bool fuse);

 private:
  struct Known {
    ProgramRef ref;
    DType dtype;
    Shape shape;
  };
  void Fail(std::string why) {
    if (failure_.empty()) failure_ = std::move(why);
  }
  void OpStepRan(int s, absl::Span<const Tensor> inputs,
                 absl::Span<const Tensor> outputs);
  // The plan's reference to `t`, a value a step reads or a gradient gives.
  bool RefOf(const Tensor& t, ProgramRef* ref);
  // Appends `step`, whose run gave `outputs`.
  void AddStep(ProgramStep step, absl::Span<const Tensor> outputs);

  const Program& p_;
  std::unique_ptr<Program> plan_ = std::make_unique<Program>();
  std::vector<std::vector<StepOutput>> step_outputs_;  // per plan step
  // Per slot of the program: its value in the plan; whether it depends on
  // the call (params, variables' values, gradients); whether a tape could
  // have recorded it (watched, or computed from a variable or a watched
  // value).
  std::vector<ProgramRef> slot_ref_;
  std::vector<bool> dynamic_, tracked_;
  absl::flat_hash_map<int64_t, ProgramRef> by_id_;
  absl::flat_hash_map<const void*, Known> by_buffer_;
  // Buffers of the constants backwards made (NoteConstant): the plan's
  // constant index, -1 until a step reads it.
  absl::flat_hash_map<const void*, int> noted_;
  std::string failure_;
};

PlanBuilder::PlanBuilder(const Program& p, absl::Span<const Tensor> args)
    : p_(p),
      slot_ref_(p.num_slots),
      dynamic_(p.num_slots, true),
      tracked_(p.num_slots, true) {
  plan_->params = p.params;
  plan_->constants = p.constants;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].dtype() == DType::kResource) {
      Fail(absl::StrCat("param ", i, " is a variable handle"));
    }
    if (!by_id_.emplace(args[i].id(), ProgramRef::Param(i)).second) {
      Fail(absl::StrCat("param ", i, " is a tensor passed twice"));
    }
    slot_ref_[i] = ProgramRef::Param(i);
    tracked_[i] = false;
  }
  for (size_t c = 0; c < p.constants.size(); ++c) {
    const Tensor& t = p.constants[c];
    const int slot = static_cast<int>(p.params.size() + c);
    if (!by_id_.emplace(t.id(), ProgramRef::Constant(c)).second) {
      Fail(absl::StrCat("constant ", c, " is also a param or constant"));
    }
    slot_ref_[slot] = ProgramRef::Constant(c);
    dynamic_[slot] = false;
    tracked_[slot] = t.dtype() == DType::kResource;
  }
}

void PlanBuilder::StepRan(int s, absl::Span<const Tensor> inputs,
                          absl::Span<const Tensor> outputs) {
  const ProgramStep& step = p_.steps[s];
  if (step.kind == ProgramStep::kOp) return OpStepRan(s, inputs, outputs);
  if (step.kind == ProgramStep::kWatch) {
    for (const ProgramRef& ref : step.inputs) tracked_[p_.Slot(ref)] = true;
  }
  for (size_t k = 0; k < outputs.size(); ++k) {  // a gradient's results
    const std::string where =
        absl::StrCat("the gradient of step ", s, " for source ", k);
    if (!outputs[k].valid()) return Fail(where + " is None");
    ProgramRef ref;
    if (!RefOf(outputs[k], &ref)) return Fail(where + " is not a value");
    slot_ref_[p_.step_slot[s] + k] = ref;
  }
}

void PlanBuilder::OpStepRan(int s, absl::Span<const Tensor> inputs,
                            absl::Span<const Tensor> outputs) {
  const ProgramStep& step = p_.steps[s];
  const OpDef& op = *p_.step_ops[s];
  bool dynamic = false, tracked = false;
  ProgramStep planned = step;
  for (size_t j = 0; j < step.inputs.size(); ++j) {
    const int slot = p_.Slot(step.inputs[j]);
    const bool handle = inputs[j].dtype() == DType::kResource;
    dynamic = dynamic || dynamic_[slot] || handle;
    tracked = tracked || tracked_[slot];
    planned.inputs[j] = slot_ref_[slot];
  }
  for (size_t j = 0; tracked && op.differentiable() && j < inputs.size(); ++j) {
    if (!IsTrainable(inputs[j].dtype()) && dynamic_[p_.Slot(step.inputs[j])] &&
        !BackwardReadsOnlyThroughOps(op, step.attrs, static_cast<int>(j))) {
      return Fail(absl::StrCat(
          "step ", s, " (", op.name, ") input ", j, " is ",
          inputs[j].DebugString(),
          " computed from the call's inputs; its backward may read it"));
    }
  }
  const int plan_step = static_cast<int>(plan_->steps.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int slot = p_.step_slot[s] + static_cast<int>(k);
    slot_ref_[slot] = ProgramRef::Step(plan_step, static_cast<int>(k));
    dynamic_[slot] = dynamic;
    tracked_[slot] = tracked;
  }
  AddStep(std::move(planned), outputs);
}

void PlanBuilder::Executed(const OpDef& op, const AttrMap& attrs,
                           absl::Span<const Tensor> inputs,
                           const Tensors& outputs) {
  ProgramStep step;
  step.op = op.name;
  step.attrs = attrs;
  for (size_t j = 0; j < inputs.size(); ++j) {
    ProgramRef ref;
    if (!RefOf(inputs[j], &ref)) {
      return Fail(absl::StrCat("a backward's ", op.name, " read ",
                               inputs[j].DebugString(), " (id ", inputs[j].id(),
                               "), neither a value of the program nor a "
                               "constant"));
    }
    step.inputs.push_back(ref);
  }
  AddStep(std::move(step), outputs);
}

bool PlanBuilder::RefOf(const Tensor& t, ProgramRef* ref) {
  if (t.id() != 0) {
    if (auto it = by_id_.find(t.id()); it != by_id_.end()) {
      *ref = it->second;
      return true;
    }
    // A value under a new id (a gradient passed through gets one).
    auto it =
        t.num_elements() > 0 ? by_buffer_.find(t.raw_data()) : by_buffer_.end();
    if (it == by_buffer_.end() || it->second.dtype != t.dtype() ||
        it->second.shape != t.shape()) {
      return false;
    }
    *ref = it->second.ref;
    return true;
  }
  // A constant a backward made (from a dtype, a shape and a value), or an
  // empty tensor; the plan holds it.
  auto noted = t.num_elements() > 0 ? noted_.find(t.raw_data()) : noted_.end();
  if (t.num_elements() > 0 && noted == noted_.end()) return false;
  int index = noted != noted_.end() ? noted->second : -1;
  if (index < 0) {
    index = static_cast<int>(plan_->constants.size());
    plan_->constants.push_back(t);
    if (noted != noted_.end()) noted->second = index;
  }
  *ref = ProgramRef::Constant(index);
  return true;
}

void PlanBuilder::AddStep(ProgramStep step, absl::Span<const Tensor> outputs) {
  const int s = static_cast<int>(plan_->steps.size());
  std::vector<StepOutput> shapes;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& t = outputs[k];
    const ProgramRef ref = ProgramRef::Step(s, static_cast<int>(k));
    if (t.id() != 0) by_id_.emplace(t.id(), ref);
    // The latest value in a buffer: the trace holds no values, so a
    // buffer may be freed and reused.
    if (t.num_elements() > 0) {
      by_buffer_.insert_or_assign(t.raw_data(),
                                  Known{ref, t.dtype(), t.shape()});
    }
    shapes.push_back({t.dtype(), t.shape()});
  }
  plan_->steps.push_back(std::move(step));
  step_outputs_.push_back(std::move(shapes));
}

absl::StatusOr<std::unique_ptr<Program>> PlanBuilder::Finish(
    const OpRegistry& registry, bool fuse) {
  if (!failure_.empty()) return absl::FailedPreconditionError(failure_);
  for (const ProgramRef& ref : p_.outputs) {
    plan_->outputs.push_back(slot_ref_[p_.Slot(ref)]);
  }
  if (fuse) OptimizePlan(registry, *plan_, step_outputs_);
  // The backward adds steps: room for them beyond a definition's limits
  // (the plan's memory is charged all the same).
  ProgramLimits limits;
  limits.max_steps *= 10;
  limits.max_values *= 10;
  if (absl::Status st = ValidateProgram(registry, plan_.get(), limits);
      !st.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the plan is not valid: ", st.message()));
  }
  plan_->expected_shapes.resize(plan_->num_slots);
  for (size_t s = 0; s < step_outputs_.size(); ++s) {
    for (size_t k = 0; k < step_outputs_[s].size(); ++k) {
      plan_->expected_shapes[plan_->step_slot[s] + k] =
          step_outputs_[s][k].shape;
    }
  }
  return std::move(plan_);
}

bool HasGradientStep(const Program& p) {
  return std::any_of(p.steps.begin(), p.steps.end(), [](const auto& step) {
    return step.kind == ProgramStep::kGradient;
  });
}

}  // namespace

PlannedProgram::PlannedProgram(const Program& program,
                               std::shared_ptr<MemoryAccount> account,
                               bool enabled, bool fuse)
    : program_(program), account_(std::move(account)), fuse_(fuse) {
  for (const Tensor& t : program.constants) {
    if (!constant_ids_.insert(t.id()).second) {
      not_planned_ = "two of its constants are one tensor";
    }
  }
  const bool second_order =
      program.num_tapes > 1 ||
      std::any_of(program.steps.begin(), program.steps.end(),
                  [](const ProgramStep& step) {
                    return step.kind == ProgramStep::kPushTape &&
                           step.persistent;
                  });
  if (!enabled) {
    not_planned_ = "plans are off";
  } else if (!HasGradientStep(program)) {
    not_planned_ = "the program takes no gradient";
  } else if (second_order) {
    // A tape could record a backward's ops, and a gradient differentiate
    // them: their integer inputs are not checked as the op steps' are.
    not_planned_ = "it has more than one tape, or a persistent one";
  }
}

PlannedProgram::~PlannedProgram() {
  if (account_ != nullptr) account_->Add(-plan_bytes_);
}

int64_t PlannedProgram::plan_steps() const {
  return plan_ != nullptr ? static_cast<int64_t>(plan_->steps.size()) : 0;
}

absl::StatusOr<Tensors> PlannedProgram::Run(OpExecutor& exec,
                                            absl::Span<const Tensor> args) {
  // Tapes and accumulators outside the program see the ops it runs as
  // defined; so does a tracer.
  const bool watched = exec.tapes().CouldRecord() ||
                       exec.accumulators().CouldAccumulate() ||
                       exec.observer() != nullptr;
  if (watched || (plan_ == nullptr && !not_planned_.empty()) || Aliased(args)) {
    return RunProgram(exec, program_, args);
  }
  if (plan_ == nullptr) return RunAndTrace(exec, args);
  if (!VariablesUnchanged()) {
    Drop("a variable the program holds changed its dtype or shape");
    return RunProgram(exec, program_, args);
  }
  absl::StatusOr<Tensors> planned = RunProgram(exec, *plan_, args);
  if (planned.ok()) return planned;
  // Undone; the program as defined gives the failure the client should see,
  // or shows the plan did not fit this call.
  absl::StatusOr<Tensors> defined = RunProgram(exec, program_, args);
  if (defined.ok()) {
    // Its steps are the plan's, not the program's.
    absl::string_view why = planned.status().message();
    absl::ConsumePrefix(&why, "program ");
    Drop(absl::StrCat("a planned call failed where the program ran: plan ",
                      why));
  }
  return defined;
}

absl::StatusOr<Tensors> PlannedProgram::RunAndTrace(
    OpExecutor& exec, absl::Span<const Tensor> args) {
  PlanBuilder builder(program_, args);
  absl::StatusOr<Tensors> results = RunProgram(exec, program_, args, &builder);
  if (!results.ok()) return results;  // a later call traces again
  absl::StatusOr<std::unique_ptr<Program>> plan =
      builder.Finish(exec.registry(), fuse_);
  if (!plan.ok()) {
    not_planned_ = std::string(plan.status().message());
    return results;
  }
  const int64_t bytes = (*plan)->StructureBytes();
  if (account_ != nullptr && !account_->TryCharge(bytes)) {
    not_planned_ = absl::StrCat("the plan's ", bytes,
                                " bytes would pass the memory limit");
    return results;
  }
  plan_ = *std::move(plan);
  plan_bytes_ = bytes;
  for (const Tensor& t : program_.constants) {
    if (const Variable* var = VariableOf(t)) {
      variables_.push_back({var, var->dtype, var->shape});
    }
  }
  return results;
}

// One tensor as two params, or as a param and a constant: a tape sees one
// value where a plan traced two (their gradients would be summed), so such
// a call runs as defined and traces nothing.
bool PlannedProgram::Aliased(absl::Span<const Tensor> args) const {
  absl::flat_hash_set<int64_t> ids;
  for (const Tensor& t : args) {
    if (constant_ids_.contains(t.id()) || !ids.insert(t.id()).second) {
      return true;
    }
  }
  return false;
}

bool PlannedProgram::VariablesUnchanged() const {
  return std::all_of(variables_.begin(), variables_.end(), [](const auto& v) {
    return v.var->dtype == v.dtype && v.var->shape == v.shape;
  });
}

void PlannedProgram::Drop(std::string why) {
  plan_.reset();
  variables_.clear();
  if (account_ != nullptr) account_->Add(-plan_bytes_);
  plan_bytes_ = 0;
  not_planned_ = std::move(why);
}

}  // namespace gradtape
