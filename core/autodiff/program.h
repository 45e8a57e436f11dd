// Programs: a straight-line list of steps over references, checked once
// (ValidateProgram) and run many times (RunProgram): captured steps
// (docs/CAPTURE.md, issue 29). A step is a registered op or a tape command
// (push, watch, gradient, pop), so a recorded training step (forward,
// gradient, optimizer updates) is one program.
//
// A program's values are named by references:
//   kParam i      the call's argument i (declared with a dtype and a shape)
//   kConstant i   a tensor the program holds (captured at definition), used
//                 under its own id: a captured variable handle is the
//                 variable an outer tape watches
//   kStep s, k    output k of step s (an earlier step)
//   kOnes         only as a gradient step's output gradient: ones
// A step reads only earlier steps, so no cycle can be written. Tapes are
// numbered by the program (0, 1, ...); each run makes its own tapes and
// deletes them when it ends.
//
// Steps run through the same code as the commands they were recorded from
// (OpExecutor::Execute, the tape set, Gradient), so a run gives those
// commands' results bit for bit. Active tapes outside the program record its
// ops (a gradient through a run works like one through the same ops run
// eagerly). A step value is dropped after its last reader (the executor
// forgets its id, as when a client releases an intermediate: tapes keep
// what their backward needs).
//
// Failure: args are checked against the params before any step runs. The
// thread's current Cancellation (core/base/cancellation.h) is polled before
// each step: a deadline passed or a cancellation stops the run there as a
// failed step would. When a step fails, RunProgram returns its error (naming
// the step index and op) and no outputs, and undoes what the run did: the
// variables reachable from the params and constants get back the values they
// had (values are immutable tensors, so keeping them costs nothing until an
// assignment), the program's tapes are deleted, and the step values are
// forgotten, which erases their entries from outer tapes.
#ifndef GRADTAPE_CORE_AUTODIFF_PROGRAM_H_
#define GRADTAPE_CORE_AUTODIFF_PROGRAM_H_

#include <cstdint>
#include <memory>
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
  enum Kind { kParam, kConstant, kStep, kOnes };
  Kind kind = kParam;
  int index = 0;   // kParam / kConstant: the index; kStep: the step
  int output = 0;  // kStep: which output of the step

  static ProgramRef Param(int i) { return {kParam, i, 0}; }
  static ProgramRef Constant(int i) { return {kConstant, i, 0}; }
  static ProgramRef Step(int s, int k = 0) { return {kStep, s, k}; }
  static ProgramRef Ones() { return {kOnes, 0, 0}; }
};

struct ProgramStep {
  // kStopRecording / kStartRecording: every tape stops / resumes recording
  // (the session's StopRecording); a run ends with the state it began with.
  enum Kind {
    kOp,
    kPushTape,
    kWatch,
    kGradient,
    kPopTape,
    kStopRecording,
    kStartRecording,
    // Only in plans (core/autodiff/program_plan.h), never from a client:
    // `loop`, run by the registry's fused loop kernel.
    kFused,
    // Only in plans: `matmul`, run by the registry's strided matrix product
    // kernel (one output).
    kMatMul
  };
  // kOp: the op; the other kinds leave it empty.
  std::string op;
  // kOp: flat (a list input takes N entries); kWatch: the values watched;
  // kGradient: the targets, then the sources, then the output gradients
  // (none, or one per target; kOnes for ones).
  std::vector<ProgramRef> inputs;
  AttrMap attrs;  // kOp
  Kind kind = kOp;
  int tape = 0;  // the tape steps: the program's tape number
  // kPushTape
  bool persistent = false;
  bool watch_accessed_variables = true;
  // kGradient: one output per source (an invalid Tensor for None).
  int num_targets = 0;
  int num_sources = 0;
  Unconnected unconnected = Unconnected::kNone;
  std::shared_ptr<const FusedLoop> loop;        // kFused
  std::shared_ptr<const StridedMatMul> matmul;  // kMatMul

  static ProgramStep PushTape(int tape, bool persistent = false,
                              bool watch_accessed_variables = true) {
    ProgramStep s;
    s.kind = kPushTape;
    s.tape = tape;
    s.persistent = persistent;
    s.watch_accessed_variables = watch_accessed_variables;
    return s;
  }
  static ProgramStep PopTape(int tape) {
    ProgramStep s;
    s.kind = kPopTape;
    s.tape = tape;
    return s;
  }
  static ProgramStep Recording(bool on) {
    ProgramStep s;
    s.kind = on ? kStartRecording : kStopRecording;
    return s;
  }
  static ProgramStep Watch(int tape, std::vector<ProgramRef> values) {
    ProgramStep s;
    s.kind = kWatch;
    s.tape = tape;
    s.inputs = std::move(values);
    return s;
  }
  static ProgramStep Gradient(int tape, std::vector<ProgramRef> targets,
                              std::vector<ProgramRef> sources,
                              std::vector<ProgramRef> output_gradients = {},
                              Unconnected unconnected = Unconnected::kNone);
  // "MatMul", "PushTape", "Gradient", ...: for messages.
  absl::string_view Name() const;
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
  // Tape numbers run from 0 to max_tapes - 1.
  int max_tapes = 64;
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
  int num_tapes = 0;  // 1 + the largest tape number used
  bool validated = false;
  // Set by a plan (core/autodiff/program_plan.h), else empty: per slot, the
  // shape each step output had when the plan was traced. A run fails with
  // FAILED_PRECONDITION at the first op step whose output differs.
  std::vector<Shape> expected_shapes;

  // The slot `ref` names in a validated program; -1 for kOnes.
  int Slot(const ProgramRef& ref) const;

  // What the program's structure costs in memory (steps, references,
  // attrs, derived fields; not its constants' buffers): what a session
  // charges for keeping it.
  int64_t StructureBytes() const;
};

// Checks `program` against `registry` and `limits` and fills its derived
// fields: every op exists, its attrs resolve (defaults filled in), each step
// has the op's number of inputs (an op with a list input: the count its
// length attr gives), every reference is in range and a step reads only
// earlier steps, outputs are in range, constants hold tensors, params have
// a valid dtype and a shape whose size fits (CheckedTensorSize). Tape steps:
// the tape number is in range, a tape is pushed while not recording, popped
// while recording, watched or differentiated after its first push; a
// gradient has targets and sources, and no output gradients or one per
// target. More than limits.max_steps steps is refused before any step is
// looked at.
// INVALID_ARGUMENT (NOT_FOUND for an unknown op) naming the step index, its
// op and the bad reference.
absl::Status ValidateProgram(const OpRegistry& registry, Program* program,
                             const ProgramLimits& limits = {});

// Runs a validated program on `args` (one per param, of its dtype and shape,
// else INVALID_ARGUMENT naming the param, before any step runs). Returns the
// outputs: step values, fresh ids for a param or constant returned, an
// invalid Tensor for a None gradient. On a step's error, the
// error prefixed with "program step <s> (<op>): ", with the run undone (see
// the file comment).
// With `tracer`, also reports each step to it, and the ops a gradient step
// runs (as the executor's observer during that step): how a plan is traced.
class ProgramTracer : public OpExecutor::Observer {
 public:
  // Step s ran on `inputs` and gave `outputs` (a gradient step: its results;
  // the other tape steps: none).
  virtual void StepRan(int s, absl::Span<const Tensor> inputs,
                       absl::Span<const Tensor> outputs) = 0;
};
absl::StatusOr<Tensors> RunProgram(OpExecutor& exec, const Program& program,
                                   absl::Span<const Tensor> args,
                                   ProgramTracer* tracer = nullptr);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_AUTODIFF_PROGRAM_H_
