// The kernel of fused elementwise loops (core/registry/fused_loop.h), set on
// the registry by RegisterAllOps.
#ifndef GRADTAPE_CORE_OPS_FUSED_LOOP_H_
#define GRADTAPE_CORE_OPS_FUSED_LOOP_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/registry/op_registry.h"
#include "core/tensor/tensor.h"

namespace gradtape {

// A FusedLoopKernel: rows of the loop's shape in parallel; within a row,
// blocks of at most kFusedBlock elements, each run by VecLoopBlock
// (core/ops/vector_math.h: the ops strip by strip).
absl::Status RunFusedLoop(const FusedLoop& loop,
                          absl::Span<const Tensor> inputs, Tensors* outputs);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_OPS_FUSED_LOOP_H_
