// Programs: a straight-line list of registered ops over references, checked
// once (ValidateProgram) and run many times (RunProgram). The first slice of
// captured steps (docs/CAPTURE.md, issue 29), in core only: no wire form yet,
// no tape commands inside a program, no fusion.
//
// A program's values are named by references:
//   kParam i      the call's argument i (declared with a dtype and a shape)
//   kConstant i   a tensor the program holds
//   kStep s, k    output k of step s (an earlier step)
// Each step runs one registered op on references with attrs; the program
// ends with the references it returns. A step reads only earlier steps, so
// no cycle can be written.
//
// Steps run through OpExecutor::Execute, one by one, as a client's ops would:
// active tapes record them (a gradient through a program run works like one
// through the same ops run eagerly) and active forward accumulators compute
// their tangents. A step value is dropped after its last reader (the
// executor forgets its id, as when a client releases an intermediate), so a
// chain holds a few values at a time, not all of them.
//
// Failure: args are checked against the params before any step runs. When a
// step fails, RunProgram returns its error (naming the step index and op)
// and no outputs. What the executor guarantees for a failed op holds for
// that step (nothing of it was recorded); the earlier steps had run and been
// recorded, and their values are then all forgotten like released
// intermediates, which erases their tape entries (and their tangents) unless
// a tape's entry still needs them: in practice active tapes are left with
// the entries they had before the call. Ops with side effects (variable
// assignment) in earlier steps are not undone.
#ifndef GRADTAPE_CORE_AUTODIFF_PROGRAM_H_
#define GRADTAPE_CORE_AUTODIFF_PROGRAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/autodiff/op_executor.h"
#include "core/registry/op_registry.h"
#include "core/tensor/attrs.h"
#include "core/tensor/tensor.h"

namespace gradtape {

struct ProgramRef {
  enum Kind { kParam, kConstant, kStep };
  Kind kind = kParam;
  int index = 0;   // kParam / kConstant: the index; kStep: the step
  int output = 0;  // kStep: which output of the step

  static ProgramRef Param(int i) { return {kParam, i, 0}; }
  static ProgramRef Constant(int i) { return {kConstant, i, 0}; }
  static ProgramRef Step(int s, int k = 0) { return {kStep, s, k}; }
};

struct ProgramStep {
  std::string op;
  std::vector<ProgramRef> inputs;  // flat: a list input takes N entries
  AttrMap attrs;
};

struct ProgramParam {
  DType dtype = DType::kInvalid;
  Shape shape;
};

struct ProgramLimits {
  int64_t max_steps = 100000;
  // Values in all: params, constants and step outputs (an op with a list
  // output may have many).
  int64_t max_values = 1000000;
};

struct Program {
  std::vector<ProgramParam> params;
  std::vector<Tensor> constants;
  std::vector<ProgramStep> steps;
  std::vector<ProgramRef> outputs;

  // Filled by ValidateProgram (RunProgram refuses a program without them).
  // Values are numbered in slots: params, then constants, then each step's
  // outputs in order.
  std::vector<const OpDef*> step_ops;
  std::vector<int> step_slot;  // the slot of each step's output 0
  int num_slots = 0;
  // Per slot: the last step that reads it, kReadByOutput if the program
  // returns it, kUnread if nothing reads it.
  static constexpr int kReadByOutput = -1;
  static constexpr int kUnread = -2;
  std::vector<int> last_reader;
  // Per step: the slots to drop once it ran (those it read last, and its
  // own outputs nothing reads).
  std::vector<std::vector<int>> drop_after;
  bool validated = false;
};

// Checks `program` against `registry` and `limits` and fills its derived
// fields: every op exists, its attrs resolve (defaults filled in), each step
// has the op's number of inputs (an op with a list input: the count its
// length attr gives), every reference is in range and a step reads only
// earlier steps, outputs are in range, constants hold tensors. More than
// limits.max_steps steps is refused before any step is looked at.
// INVALID_ARGUMENT (NOT_FOUND for an unknown op) naming the step index, its
// op and the bad reference.
absl::Status ValidateProgram(const OpRegistry& registry, Program* program,
                             const ProgramLimits& limits = {});

// Runs a validated program on `args` (one per param, of its dtype and shape,
// else INVALID_ARGUMENT naming the param, before any step runs). Returns the
// outputs: fresh ids for step values and constants, the arg itself for a
// param. On a step's error, the error prefixed with "program step <s>
// (<op>): " and nothing else (see the file comment for tapes).
absl::StatusOr<Tensors> RunProgram(OpExecutor& exec, const Program& program,
                                   absl::Span<const Tensor> args);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_AUTODIFF_PROGRAM_H_
