// A program's gradient planned once (issue 29, docs/CAPTURE.md "The
// gradient planned at the first call").
//
// The first call of a program that qualifies runs it as defined, with a
// tracer (ProgramTracer) that writes down what ran: each op step, and each
// op a gradient step's backward functions ran, with the values they read.
// From that it builds a plan: a Program with no tape steps, whose steps are
// the program's op steps with each gradient step replaced by the ops its
// backward ran, in the order they ran, on the same values. Later calls run
// the plan: no tape records an op, no gradient walks a tape, and each value
// is dropped after its last reader in the plan. The plan runs the same
// kernels on the same values in the same order as the tape's gradient did,
// so a call gives the defined program's results bit for bit.
//
// A call runs the plan only when nothing outside the program watches it: no
// tape of the session could record and no forward accumulator is active
// (those must see the ops the defined program runs). Otherwise it runs the
// program as defined.
//
// What a plan assumes, and how each assumption is held:
// - The backward ran the same ops for any call with the params' dtypes and
//   shapes. A backward reads shapes, attrs and tensors through ops. Where it
//   could read an integer tensor's values itself (an axis, multiples,
//   paddings), the tensor must be computed from the program's constants
//   only, or the op must be one whose backward passes it to ops (gather
//   indices, labels, a select's condition); else no plan.
// - A tensor a backward makes itself comes from a dtype, a shape and one
//   value (OpExecutor::NoteConstant); the plan keeps it as a constant. Any
//   other tensor it made (from some tensor's values) means no plan.
// - Every step value has the shape it had when traced: checked after each
//   op step of a planned call (Program::expected_shapes). The variables the
//   program holds keep the dtype and shape they had: checked before each.
// - One tape, not persistent: no backward's ops are recorded and
//   differentiated in turn (their integer inputs are not checked as the op
//   steps' are). Programs with more are not planned.
// - Distinct params and constants are distinct tensors: a call that passes
//   one tensor twice, or a constant as a param, runs as defined (a tape
//   sums what the plan traced as two values).
// - A planned call that fails is undone (as any call) and the program runs
//   as defined, so a failure reads as the defined program's. When that run
//   succeeds, the plan did not fit this call and is dropped for good.
#ifndef GRADTAPE_CORE_AUTODIFF_PROGRAM_PLAN_H_
#define GRADTAPE_CORE_AUTODIFF_PROGRAM_PLAN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/autodiff/op_executor.h"
#include "core/autodiff/program.h"
#include "core/tensor/tensor.h"

namespace gradtape {

struct Variable;

class PlannedProgram {
 public:
  // `program`: validated; it must outlive this. The plan's structure is
  // charged to `account` (no plan if that is refused); null: not charged.
  // `fuse`: runs of elementwise steps become fused loops
  // (core/registry/fused_loop.h).
  PlannedProgram(const Program& program, std::shared_ptr<MemoryAccount> account,
                 bool enabled = true, bool fuse = true);
  PlannedProgram(const PlannedProgram&) = delete;
  PlannedProgram& operator=(const PlannedProgram&) = delete;
  ~PlannedProgram();

  // Runs the program (RunProgram's contract): the plan when there is one and
  // the call qualifies; else as defined, tracing a plan on the first call
  // that qualifies.
  absl::StatusOr<Tensors> Run(OpExecutor& exec, absl::Span<const Tensor> args);

  bool planned() const { return plan_ != nullptr; }
  // Why the program has no plan; empty while it has one or may still get
  // one.
  const std::string& not_planned() const { return not_planned_; }
  // Steps of the plan (0 without one).
  int64_t plan_steps() const;
  // The plan, or null.
  const Program* plan() const { return plan_.get(); }
  // The plan's structure, charged to the account.
  int64_t plan_bytes() const { return plan_bytes_; }

 private:
  struct VariableShape {
    const Variable* var;
    DType dtype;
    Shape shape;
  };
  absl::StatusOr<Tensors> RunAndTrace(OpExecutor& exec,
                                      absl::Span<const Tensor> args);
  bool Aliased(absl::Span<const Tensor> args) const;
  bool VariablesUnchanged() const;
  void Drop(std::string why);

  const Program& program_;
  std::shared_ptr<MemoryAccount> account_;
  std::unique_ptr<Program> plan_;
  std::vector<VariableShape> variables_;
  int64_t plan_bytes_ = 0;
  std::string not_planned_;
  bool fuse_ = true;
  absl::flat_hash_set<int64_t> constant_ids_;
};

}  // namespace gradtape

#endif  // GRADTAPE_CORE_AUTODIFF_PROGRAM_PLAN_H_
