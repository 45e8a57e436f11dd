#include "core/ops/ops.h"

#include "core/ops/fused_loop.h"

namespace gradtape {

void RegisterAllOps(OpRegistry& registry) {
  RegisterUnaryOps(registry);
  RegisterBinaryOps(registry);
  RegisterComparisonOps(registry);
  RegisterReductionOps(registry);
  RegisterScanOps(registry);
  RegisterArrayOps(registry);
  RegisterSliceOps(registry);
  RegisterLayoutOps(registry);
  RegisterNnOps(registry);
  RegisterConvOps(registry);
  RegisterPoolOps(registry);
  RegisterNormOps(registry);
  RegisterLinalgOps(registry);
  RegisterEinsumOps(registry);
  RegisterSegmentOps(registry);
  RegisterComplexOps(registry);
  RegisterVariableOps(registry);
  RegisterTrainingOps(registry);
  RegisterRandomOps(registry);
  RegisterGatherOps(registry);
  RegisterConcatOps(registry);
  registry.set_fused_loop_kernel(&RunFusedLoop);
  registry.set_strided_matmul_kernel(&RunStridedMatMul);
}

const OpRegistry& DefaultRegistry() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry;
    RegisterAllOps(*r);
    return r;
  }();
  return *registry;
}

}  // namespace gradtape
