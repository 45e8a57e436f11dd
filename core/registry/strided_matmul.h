// Batched matrix products that read their operands and write their result
// through strided views: a plan (core/autodiff/program_plan.h) folds the
// layout steps around a BatchMatMul into them (docs/CAPTURE.md, "Layouts
// folded into products"). The attention's Reshape, Transpose and Unpack of
// the fused q, k, v projection, and the Pack and Transpose of their
// gradients, become offsets and strides: no step copies those values into
// a new layout, and the products read and write them where they are.
//
// Each matrix is one Gemm call (core/ops/gemm.h), as BatchMatMul's kernel
// makes it, with the same sizes and transposes: only the distances between
// rows differ, so the products give BatchMatMul's bits.
//
// Only plans build these (never the wire), from steps whose shapes a traced
// run showed; the kernel still checks that every view stays inside its
// tensor and that the products write as many elements as the output has.
#ifndef GRADTAPE_CORE_REGISTRY_STRIDED_MATMUL_H_
#define GRADTAPE_CORE_REGISTRY_STRIDED_MATMUL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/tensor/tensor.h"

namespace gradtape {

struct StridedMatMul {
  // The matrices of one operand or of the result in a tensor: matrix b of
  // the batch (an index per batch dim) starts at element
  // offset + sum(b[d] * batch_strides[d]); its rows are `ld` elements
  // apart, and the elements of a row are contiguous.
  struct View {
    int64_t offset = 0;
    Shape batch_strides;
    int64_t ld = 0;
  };
  // z = op(a) * op(b) for each matrix of the batch: op(a) is [m, k] (a is
  // stored [k, m] when trans_a), op(b) is [k, n] (b is stored [n, k] when
  // trans_b), z is [m, n]. a and b are step inputs; z is in the output.
  struct Product {
    int a = 0, b = 0;
    View va, vb, vz;
    bool trans_a = false, trans_b = false;
    Shape batch;
    int64_t m = 0, n = 0, k = 0;
  };
  int num_inputs = 0;
  Shape shape;  // the output's
  // Together they write each element of the output once.
  std::vector<Product> products;
};

// Runs `mm` on `inputs` (float32 or float64, one dtype) into a new tensor of
// mm.shape. INVALID_ARGUMENT if a view leaves its tensor or the products do
// not write as many elements as the output has; the products' Gemm status
// (a cancellation) otherwise.
using StridedMatMulKernel = absl::Status (*)(const StridedMatMul& mm,
                                             absl::Span<const Tensor> inputs,
                                             Tensor* output);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_REGISTRY_STRIDED_MATMUL_H_
