#include "core/ops/ops.h"

namespace gradtape {

void RegisterAllOps(OpRegistry& registry) {
  RegisterMathOps(registry);
  RegisterArrayOps(registry);
  RegisterNnOps(registry);
}

}  // namespace gradtape
