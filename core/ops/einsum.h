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
//
// The equation is checked as TensorFlow's Einsum op checks it (its kernel,
// tensorflow/core/util/einsum_op_util.cc and kernels/linalg/einsum_op_impl.h,
// and its shape function, EinsumShape in framework/common_shape_fns.cc,
// which also refuses what the kernel lets through in eager mode). Each rule
// is a test in tests/core/ops/einsum_ops_test.cc:
//  1. exactly one "->": the op has no implicit output ("ij,jk" is
//     tf.einsum's Python shorthand, not the op's);
//  2. one or two operands, as many as inputs;
//  3. labels are ASCII letters (case matters); the op's kernel takes any
//     other character as a label too, tf.einsum refuses them, so do we;
//  4. an ellipsis is exactly "...", at most one per operand and output;
//  5. an operand's rank is its label count, or at least that with "...";
//  6. a named label has one size in every place it appears: a size of 1 does
//     not broadcast against n (only ellipsis dims do), nor 0 against n;
//  7. ellipsis dims broadcast (equal, or 1 against n);
//  8. the output has "..." when the broadcast ellipsis has dims; "..." in
//     the output without one in the operands stands for no dims ("i->i...");
//  9. every output label is in some operand.
// A label repeated in the output is accepted: the op inflates ("ab->aa" is
// diag(sum_b x[a, b])), as TensorFlow's op does in eager and graph mode, and
// TensorFlow's gradient of a diagonal needs it (the gradient of "ii,ij->ij"
// for the first operand is "ij,ij->ii"). Only tf.einsum, the Python
// wrapper, refuses it before it reaches the op.
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
// label or dim, for an equation or shapes breaking a rule above. A label may
// repeat in the output (inflate: "i->ii").
absl::StatusOr<EinsumEquation> ParseEinsumEquation(
    absl::string_view equation, absl::Span<const Shape> shapes);

// Einsum's forward on `inputs` (float32 or float64, one dtype) per the
// string attr "equation" of ctx: the result, allocated with Allocate.
absl::StatusOr<Tensor> EinsumForward(const KernelContext& ctx,
                                     absl::Span<const Tensor> inputs);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_OPS_EINSUM_H_
