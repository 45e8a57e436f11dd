// Resource variables: VarHandleOp, ReadVariableOp, assignment.
#include "core/gradient.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {

void RegisterVariableOps(OpRegistry& r) {}

}  // namespace gradtape
