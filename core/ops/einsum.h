// Einsum's equation parser and kernel, as plain functions (the op, whose
// input is a list of N tensors, is registered in core/ops/einsum_ops.cc;
// tests/core/ops/einsum_ops_test.cc also tests these directly).
//
// TensorFlow's CPU forms: one or two operands, an explicit "->" output;
// labels are letters, "..." stands for broadcast dims (numpy-style, right
// aligned across the operands). A label repeated in one operand takes the
// diagonal ("ii->i"); a label in no output is summed ("ij->i", "ij,jk->ik");
// "...ij,...jk->...ik" broadcasts the ellipsis dims (the output must have
// "..." when they are not empty). Dims of one named label
// must be equal everywhere; ellipsis dims broadcast (1 against n).
#ifndef GRADTAPE_CORE_OPS_EINSUM_H_
#define GRADTAPE_CORE_OPS_EINSUM_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/registry/op_registry.h"
#include "core/tensor/tensor.h"

namespace gradtape {

// A parsed equation for given operand shapes. Labels are numbered: letters
// by their character, ellipsis dim k (of the broadcast ellipsis rank) as
// kEllipsisLabel + k.
struct EinsumEquation {
  static constexpr int kEllipsisLabel = 256;
  std::vector<std::vector<int>> inputs;  // per operand, a label per axis
  std::vector<int> output;               // a label per output axis
  // Size of every label (index: label), -1 for a label not used.
  std::vector<int64_t> sizes;
  Shape output_shape;
};

// INVALID_ARGUMENT naming "Einsum", the equation and the offending operand,
// label or dim. A label may repeat in the output (inflate: "i->ii").
absl::StatusOr<EinsumEquation> ParseEinsumEquation(
    absl::string_view equation, absl::Span<const Shape> shapes);

// Einsum's forward on `inputs` (float32 or float64, one dtype) per the
// string attr "equation" of ctx: the result, allocated with Allocate.
absl::StatusOr<Tensor> EinsumForward(const KernelContext& ctx,
                                     absl::Span<const Tensor> inputs);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_OPS_EINSUM_H_
