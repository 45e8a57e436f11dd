// Op families. Each family file registers its ops with one builder
// expression per op (see core/registry/op_registry.h).
#ifndef GRADTAPE_CORE_OPS_OPS_H_
#define GRADTAPE_CORE_OPS_OPS_H_

#include "core/registry/op_registry.h"

namespace gradtape {

// Elementwise unary math and its *Grad helpers: Neg, Exp, Tanh, ...
void RegisterUnaryOps(OpRegistry& registry);
// Elementwise binary arithmetic, numpy broadcasting: AddV2, Mul, Maximum, ...
void RegisterBinaryOps(OpRegistry& registry);
// Comparisons (bool outputs) and Select.
void RegisterComparisonOps(OpRegistry& registry);
// Sum, Mean, Prod, L2Loss.
void RegisterReductionOps(OpRegistry& registry);
// Cumsum, Cumprod.
void RegisterScanOps(OpRegistry& registry);
// Shapes and dtypes: Identity, Reshape, Transpose, Cast, BroadcastTo, ...
void RegisterArrayOps(OpRegistry& registry);
// Slicing: StridedSlice, StridedSliceGrad, Slice.
void RegisterSliceOps(OpRegistry& registry);
// Layout: ExpandDims, Squeeze, Tile, Fill, Range, Reverse(V2), Pad(V2),
// MirrorPad and MirrorPadGrad.
void RegisterLayoutOps(OpRegistry& registry);
// Lists of tensors: ConcatV2, Pack, Unpack, Split, SplitV.
void RegisterConcatOps(OpRegistry& registry);
// Activations, softmax and losses, BiasAdd.
void RegisterNnOps(OpRegistry& registry);
// Convolutions (NHWC/NDHWC, im2col + Eigen GEMM) and Dilation2D.
void RegisterConvOps(OpRegistry& registry);
// Average and max pooling, 2-D and 3-D.
void RegisterPoolOps(OpRegistry& registry);
// Batch normalization.
void RegisterNormOps(OpRegistry& registry);
// Matrix products (MatMul, batched, sparse), cross product.
void RegisterLinalgOps(OpRegistry& registry);
// Einsum (one or two operands).
void RegisterEinsumOps(OpRegistry& registry);
// Segment reductions and gathers.
void RegisterSegmentOps(OpRegistry& registry);
// Complex numbers: Complex, Real, Imag, Angle, Conj.
void RegisterComplexOps(OpRegistry& registry);
// Resource variables: VarHandleOp, ReadVariableOp, assignment.
void RegisterVariableOps(OpRegistry& registry);
// Optimizers as ops updating variables in place: ResourceApply*.
void RegisterTrainingOps(OpRegistry& registry);
// Stateless random numbers (Philox), bit-exact with TensorFlow.
void RegisterRandomOps(OpRegistry& registry);
// N-dimensional gather and scatter: GatherNd, ScatterNd.
void RegisterGatherOps(OpRegistry& registry);

// The kernel of a plan's strided matrix products
// (core/registry/strided_matmul.h), in linalg_ops.cc.
absl::Status RunStridedMatMul(const StridedMatMul& mm,
                              absl::Span<const Tensor> inputs, Tensor* output);

void RegisterAllOps(OpRegistry& registry);

// The registry with every op family of gradtape, built on first use.
const OpRegistry& DefaultRegistry();

}  // namespace gradtape

#endif  // GRADTAPE_CORE_OPS_OPS_H_
