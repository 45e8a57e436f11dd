// The passes that rewrite a program's plan after it is traced
// (core/autodiff/program_plan.h; docs/CAPTURE.md, "Fused loops" and
// "Layouts folded into products"): elementwise steps become fused loops
// (core/registry/fused_loop.h) with the reductions, softmaxes and
// recomputations they can take in, and matrix products read and write
// through the layout steps around them (core/registry/strided_matmul.h).
// Each pass runs the same ops on the same values as the plan it rewrites:
// the same bits. Each walks the plan a fixed number of times (layout chains
// at most 8 steps long), so its work grows with the plan's size; no
// committed test times them.
#ifndef GRADTAPE_CORE_AUTODIFF_PLAN_PASSES_H_
#define GRADTAPE_CORE_AUTODIFF_PLAN_PASSES_H_

#include <vector>

#include "core/autodiff/program.h"
#include "core/registry/op_registry.h"
#include "core/tensor/tensor.h"

namespace gradtape {

// The dtype and shape of a plan step's output, as the trace saw it.
struct StepOutput {
  DType dtype;
  Shape shape;
};
// Per plan step, its outputs'.
using StepOutputs = std::vector<std::vector<StepOutput>>;

// Runs the passes on `plan` (not yet validated) in order, keeping `outs`
// in step with its steps: reshapes moved before bias ops, elementwise
// fusion, row and column sums, recomputation and merged loops (if the
// registry has a fused loop kernel), then folded layouts (if it has a
// strided product kernel).
void OptimizePlan(const OpRegistry& registry, Program& plan, StepOutputs& outs);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_AUTODIFF_PLAN_PASSES_H_
