// Custom gradients for one op execution: the client gives, with an op it
// runs, the backward to record for it, as a small straight-line program of
// registered ops (for example gradient clipping: dx = Minimum(Maximum(dy,
// lo), hi) on an Identity).
//
// The program's values are named by references:
//   kUpstream i  the gradient flowing into output i (zeros if none did)
//   kInput i     the op's input i (the tape keeps it for this execution)
//   kOutput i    the op's output i (kept likewise)
//   kStep s, k   output k of step s (an earlier step)
//   kTensor      a session tensor captured when the op runs (e.g. a bound)
// Each step runs one registered op on references with attrs. The program
// ends with one optional reference per op input: that input's gradient (or
// none). Steps run through the executor, so outer tapes record them
// (gradients of custom gradients work when the steps' ops have gradients).
//
// The tape keeps exactly the inputs and outputs the program references, not
// what the op's own backward would read. Forward mode ignores custom
// gradients (it uses the op's forward rule). The program is checked when the
// op runs: references in range, steps only read earlier steps, ops exist;
// a program whose results have the wrong shape fails when the gradient runs.
#ifndef GRADTAPE_CORE_AUTODIFF_CUSTOM_GRADIENT_H_
#define GRADTAPE_CORE_AUTODIFF_CUSTOM_GRADIENT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/registry/op_registry.h"
#include "core/tensor/attrs.h"
#include "core/tensor/tensor.h"

namespace gradtape {

class GradContext;
struct TapeEntry;

struct GradientRef {
  enum Kind { kUpstream, kInput, kOutput, kStep, kTensor };
  Kind kind = kUpstream;
  int index = 0;   // kUpstream / kInput / kOutput: the index; kStep: step
  int output = 0;  // kStep: which output of the step
  int64_t client_id = 0;  // kTensor: the session id (resolved into `tensor`)
  Tensor tensor;          // kTensor
};

struct GradientStep {
  std::string op;
  std::vector<GradientRef> inputs;
  AttrMap attrs;
};

struct GradientProgram {
  std::vector<GradientStep> steps;
  // One per op input; nullopt: that input gets no gradient.
  std::vector<std::optional<GradientRef>> input_grads;

  // Filled by ValidateGradientProgram: what the tape keeps, and each step's
  // op.
  std::vector<bool> saves_input;
  std::vector<bool> saves_output;
  std::vector<const OpDef*> step_ops;
};

// Checks `program` against `op` (arity, references, step ops in `registry`)
// and fills its derived fields. INVALID_ARGUMENT / NOT_FOUND naming the step
// and reference. kTensor references must already hold their tensor.
absl::Status ValidateGradientProgram(const OpRegistry& registry,
                                     const OpDef& op, GradientProgram* program);

// For the tape (see TapeEntry::custom).
const std::vector<bool>& CustomSavedInputs(const GradientProgram& program);
const std::vector<bool>& CustomSavedOutputs(const GradientProgram& program);

// Runs the program as the backward of `entry` (errors are sticky in g).
void RunGradientProgram(const GradientProgram& program, const TapeEntry& entry,
                        GradContext& g);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_AUTODIFF_CUSTOM_GRADIENT_H_
