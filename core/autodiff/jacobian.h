// Jacobians on the server (TensorFlow's tape.jacobian and
// tape.batch_jacobian), without a client round trip per row.
//
// How it works. One reverse pass per row: the gradient engine
// (core/autodiff/gradient.h), seeded with a one-hot output gradient on the
// target, gives row r of d target / d source for every source at once; the
// rows are copied into the result. The ops between target and sources are
// found once (a GradientPlan: reach and prune), and each row runs only the
// seed, the walk and the collection. batch_jacobian assumes, as TensorFlow
// does, that batch row b of the target depends only on batch row b of the
// source, so it seeds all batch rows at once: one pass per element of
// target.shape[1:].
//
// The rows are computed with recording stopped: the Jacobian is recorded on
// no tape and no forward accumulator (a Jacobian of a Jacobian needs the
// inner one as a gradient, e.g. a Hessian is the Jacobian of a gradient
// computed under the outer tape). A non-persistent tape may compute one
// Jacobian (all its rows), then is used up like after one gradient.
//
// Result shapes follow TensorFlow:
//   Jacobian:      target.shape + source.shape
//   BatchJacobian: [batch] + target.shape[1:] + source.shape[1:]
// (for a variable handle, source.shape is the variable's shape). A source
// not connected to the target gets None (invalid Tensor) or zeros.
#ifndef GRADTAPE_CORE_AUTODIFF_JACOBIAN_H_
#define GRADTAPE_CORE_AUTODIFF_JACOBIAN_H_

#include <vector>

#include "absl/status/statusor.h"
#include "core/autodiff/op_executor.h"
#include "core/autodiff/tape.h"
#include "core/tensor/tensor.h"

namespace gradtape {

// The shape of the result for one source, from the target's shape and the
// source's value shape (ValueShape: a variable handle's variable's shape):
// target + source, or for a batch Jacobian [B] + target[1:] + source[1:].
// A batch Jacobian whose target or source has rank 0, or whose batch dims
// differ, has none: INVALID_ARGUMENT (BatchJacobian fails on it). Callers
// size a result with it before computing it (the server's reply budget).
absl::StatusOr<Shape> JacobianResultShape(const Shape& target,
                                          const Shape& source, bool batch);

// INVALID_ARGUMENT for a target or source without a differentiable dtype.
absl::StatusOr<std::vector<Tensor>> Jacobian(OpExecutor& ctx, Tape& tape,
                                             const Tensor& target,
                                             absl::Span<const Tensor> sources,
                                             Unconnected unconnected);

// INVALID_ARGUMENT also when the target or a source has rank 0, or their
// first (batch) dims differ.
absl::StatusOr<std::vector<Tensor>> BatchJacobian(
    OpExecutor& ctx, Tape& tape, const Tensor& target,
    absl::Span<const Tensor> sources, Unconnected unconnected);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_AUTODIFF_JACOBIAN_H_
