// A fused elementwise loop: several float ops over one shape run as one
// pass, a block of each row at a time, with the values only the loop reads
// kept in per-thread scratch instead of tensors. A program's plan
// (core/autodiff/program_plan.h) replaces runs of elementwise steps with one
// (docs/CAPTURE.md). Each element of each op is computed by the same
// function the op's own kernel uses (one IEEE operation for the arithmetic
// and Neg, VecExp for Exp), so a loop gives the ops' results bit for bit.
//
// Only plans build loops (never the wire), from steps whose ops, dtypes and
// shapes a traced run showed; the kernel still checks every shape.
#ifndef GRADTAPE_CORE_REGISTRY_FUSED_LOOP_H_
#define GRADTAPE_CORE_REGISTRY_FUSED_LOOP_H_

#include <optional>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/tensor/tensor.h"

namespace gradtape {

struct FusedLoop {
  // A comparison's result is 1 or 0 in the loop's dtype (the bool a Cast
  // then makes float), so a loop holds one only if its readers are all
  // Casts to that dtype in the same loop (kCopy): it is never written out.
  enum Code {
    kAdd,
    kSub,
    kMul,
    kDiv,
    kEqual,
    kNotEqual,
    kGreater,
    kGreaterEqual,
    kLess,
    kLessEqual,
    kNeg,
    kSquare,
    kExp,
    kErf,
    kCopy,
    // The softmax of each row (the last dim) of its operand, as the Softmax
    // kernel computes it (VecSoftmaxRows); the loop then runs whole rows
    // per block, so rows must be at most kMaxRowLength long.
    kSoftmax,
    // The sum (kRowSum) or mean (kRowMean) of each row of its operand,
    // given to every element of the row: a row sum of the loop's read back
    // broadcast by later ops of the same loop (a plan merges a loop that
    // reads an earlier loop's row sums into it). Each row is summed as
    // `row_sums` are; whole rows per block, as for kSoftmax.
    kRowSum,
    kRowMean
  };
  // An operand below num_inputs is that input; above, the result of op
  // (operand - num_inputs), an earlier op. Unary ops read `a` only.
  struct Op {
    Code code;
    int a = 0;
    int b = 0;
  };
  int num_inputs = 0;
  std::vector<Op> ops;
  // The results the loop writes out as tensors (the others stay in
  // scratch), in the order of the loop's outputs.
  std::vector<int> outputs;
  // The loop's shape; none: the broadcast of its inputs' shapes.
  std::optional<Shape> shape;
  // Sums over the last dim of results (a Sum or Mean over axis -1 that
  // reads the result, which then need not be written), written after
  // `outputs`, each of the loop's shape with the last dim 1 (keep_dims) or
  // without it. Each row is summed by VecRowSums (core/ops/vector_math.h),
  // as the Sum and Mean kernels sum rows, and a mean divided by the row's
  // length as they divide. Rows must be at most kMaxRowLength long (a
  // block then holds whole rows), and there must be 2 or more rows of 2 or
  // more elements: the kernels fold other shapes in other ways (RowSumsFit).
  struct RowSum {
    int op = 0;
    bool mean = false;
    bool keep_dims = true;
  };
  std::vector<RowSum> row_sums;
  static constexpr int64_t kMaxRowLength = 1024;

  static bool RowSumsFit(const Shape& shape) {
    return !shape.empty() && shape.back() >= 2 &&
           shape.back() <= kMaxRowLength &&
           NumElements(shape) / shape.back() >= 2;
  }

  // Sums over every dim but the last of results (a Sum over those axes
  // that reads the result), written after the row sums, each of `shape`
  // (the Sum's: [..., 1, K] with keep_dims, else [K]). Each column is
  // summed as the Sum kernel sums the columns of [R, K] with many rows:
  // blocks of ColumnBlockRows(K) rows, each summed row by row from 0, then
  // the blocks' sums in order. So the loop runs those blocks in parallel,
  // and the shape must fit ColumnSumsFit (the kernel's other ways of
  // summing columns are not followed).
  struct ColumnSum {
    int op = 0;
    Shape shape;
  };
  std::vector<ColumnSum> column_sums;
  // The Sum kernel's rows per block of a column sum (core/ops/
  // reduction_ops.cc, FoldRowsOf: kElementwiseGrain elements a block).
  static constexpr int64_t kColumnBlock = 32 * 1024;
  static int64_t ColumnBlockRows(int64_t cols) { return kColumnBlock / cols; }
  static bool ColumnSumsFit(const Shape& shape) {
    if (shape.size() < 2 || shape.back() < 1 || shape.back() > kMaxRowLength) {
      return false;
    }
    const int64_t rows = NumElements(shape) / shape.back();
    const int64_t block = ColumnBlockRows(shape.back());
    return block >= 8 && (rows + block - 1) / block >= 2;
  }

  // How many tensors the loop gives: its outputs, then its row sums, then
  // its column sums.
  int num_results() const {
    return static_cast<int>(outputs.size() + row_sums.size() +
                            column_sums.size());
  }

  // The code of an op a loop can run: AddV2, Add, Sub, Mul, RealDiv, Div,
  // Neg, Square, Exp, Erf, Softmax (float in, float out); Equal, NotEqual,
  // Greater, GreaterEqual, Less, LessEqual (float in, bool out); Cast
  // (kCopy: only of a comparison's bool to the loop's float) and
  // BroadcastTo (kCopy: its input broadcast to the loop's shape).
  static std::optional<Code> CodeOf(absl::string_view op_name);
  static bool IsUnary(Code code) { return code >= kNeg; }
  // An op over whole rows, not element by element.
  static bool IsRowWise(Code code) { return code >= kSoftmax; }
  static bool IsComparison(Code code) {
    return code >= kEqual && code <= kLessEqual;
  }
};

// Runs `loop` on `inputs` (float32 or float64, one dtype, shapes that
// broadcast to the shape every op gives); `outputs` gets the written
// results, fresh tensors without ids. INVALID_ARGUMENT for other inputs.
using FusedLoopKernel =
    absl::Status (*)(const FusedLoop& loop, absl::Span<const Tensor> inputs,
                     absl::InlinedVector<Tensor, 2>* outputs);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_REGISTRY_FUSED_LOOP_H_
