// Complex numbers: Complex, Real, Imag, Angle, Conj.
#include "core/gradient.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {

void RegisterComplexOps(OpRegistry& r) {}

}  // namespace gradtape
