// Op families. Each family file registers its ops with one builder
// expression per op (see core/op_registry.h).
#ifndef GRADTAPE_CORE_OPS_OPS_H_
#define GRADTAPE_CORE_OPS_OPS_H_

#include "core/op_registry.h"

namespace gradtape {

// Elementwise math (numpy broadcasting), MatMul, reductions.
void RegisterMathOps(OpRegistry& registry);
// Shapes and dtypes: Identity, Reshape, Transpose, Cast, BroadcastTo, ...
void RegisterArrayOps(OpRegistry& registry);
// Activations, softmax and losses, BiasAdd.
void RegisterNnOps(OpRegistry& registry);

void RegisterAllOps(OpRegistry& registry);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_OPS_OPS_H_
