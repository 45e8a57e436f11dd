#include "core/ops/fused_loop.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/parallel.h"
#include "core/ops/vector_math.h"

namespace gradtape {
namespace {

static_assert(static_cast<int>(FusedLoop::kAdd) ==
                      static_cast<int>(VecArith::kAdd) &&
                  static_cast<int>(FusedLoop::kLessEqual) ==
                      static_cast<int>(VecArith::kLessEqual),
              "the arithmetic and comparison codes are VecArith's");
static_assert(static_cast<int>(FusedLoop::kNeg) ==
                      static_cast<int>(VecUnary::kNeg) &&
                  static_cast<int>(FusedLoop::kCopy) ==
                      static_cast<int>(VecUnary::kCopy),
              "the unary codes are VecUnary's");

// Elements per block of a loop over full-size and scalar inputs: the scratch
// of a few ops stays in the core's caches. A loop with row sums runs whole
// rows of at most this many elements per block.
constexpr int64_t kFusedBlock = 1024;
static_assert(kFusedBlock == FusedLoop::kMaxRowLength);

absl::Status Invalid(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("fused loop: ", why));
}

// The numpy broadcast of `a` and `b`, or nothing.
std::optional<Shape> Broadcast(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// The loop's shape: every input broadcasts to it and every op gives it.
absl::StatusOr<Shape> CheckLoop(const FusedLoop& loop,
                                absl::Span<const Tensor> inputs) {
  const int ni = loop.num_inputs, nr = static_cast<int>(loop.ops.size());
  if (ni < 1 || static_cast<int>(inputs.size()) != ni || nr < 1) {
    return Invalid(absl::StrCat("takes ", ni, " inputs, got ", inputs.size()));
  }
  Shape out = loop.shape.value_or(Shape{});
  for (const Tensor& t : inputs) {
    if (t.dtype() != inputs[0].dtype() ||
        (t.dtype() != DType::kFloat32 && t.dtype() != DType::kFloat64)) {
      return Invalid(absl::StrCat("input ", t.DebugString(),
                                  ": inputs are float32 or float64, one "
                                  "dtype"));
    }
    std::optional<Shape> b = Broadcast(out, t.shape());
    if (!b || (loop.shape && *b != out)) {
      return Invalid(absl::StrCat("input ", t.DebugString(),
                                  " does not broadcast to the loop's shape"));
    }
    out = *b;
  }
  for (int r = 0; r < nr; ++r) {
    const FusedLoop::Op& op = loop.ops[r];
    if (FusedLoop::IsRowWise(op.code) &&
        (out.empty() || out.back() > FusedLoop::kMaxRowLength ||
         (op.code != FusedLoop::kSoftmax && !FusedLoop::RowSumsFit(out)) ||
         (op.a < ni && inputs[op.a].shape() != out))) {
      return Invalid(absl::StrCat("op ", r, " runs over whole rows of at most ",
                                  FusedLoop::kMaxRowLength,
                                  " elements of one full-size operand"));
    }
    auto shape_of = [&](int x) -> std::optional<Shape> {
      if (x < 0 || x >= ni + r) return std::nullopt;
      return x < ni ? inputs[x].shape() : out;
    };
    std::optional<Shape> a = shape_of(op.a);
    // kCopy broadcasts its operand to the loop's shape.
    std::optional<Shape> b = op.code == FusedLoop::kCopy   ? out
                             : FusedLoop::IsUnary(op.code) ? a
                                                           : shape_of(op.b);
    std::optional<Shape> z = a && b ? Broadcast(*a, *b) : std::nullopt;
    if (!z || *z != out) {
      return Invalid(absl::StrCat("op ", r, " does not give the loop's shape ",
                                  ShapeString(out)));
    }
  }
  std::vector<bool> seen(nr, false);
  for (int r : loop.outputs) {
    if (r < 0 || r >= nr || seen[r]) return Invalid("bad outputs");
    seen[r] = true;
  }
  for (const FusedLoop::ColumnSum& sum : loop.column_sums) {
    if (sum.op < 0 || sum.op >= nr) return Invalid("bad column sums");
    if (!FusedLoop::ColumnSumsFit(out) ||
        NumElements(sum.shape) != out.back() ||
        sum.shape.back() != out.back()) {
      return Invalid(absl::StrCat(
          "column sums ", ShapeString(sum.shape), " of shape ",
          ShapeString(out), ": rank 2 or more, rows of 1 to ",
          FusedLoop::kMaxRowLength, " elements, two or more blocks of ",
          FusedLoop::kColumnBlock, " elements"));
    }
  }
  for (const FusedLoop::RowSum& sum : loop.row_sums) {
    if (sum.op < 0 || sum.op >= nr) return Invalid("bad row sums");
    if (!FusedLoop::RowSumsFit(out)) {
      return Invalid(absl::StrCat("row sums of shape ", ShapeString(out),
                                  ": 2 or more rows of 2 to ",
                                  FusedLoop::kMaxRowLength, " elements"));
    }
  }
  return out;
}

// The shape of a row sum of a loop of shape `out`.
Shape RowSumShape(const Shape& out, const FusedLoop::RowSum& sum) {
  Shape shape = out;
  if (sum.keep_dims) {
    shape.back() = 1;
  } else {
    shape.pop_back();
  }
  return shape;
}

template <typename T>
struct Operand {
  const T* p;
  int64_t stride;  // 0 or 1
};

bool RowWise(const FusedLoop& loop) {
  return std::any_of(
      loop.ops.begin(), loop.ops.end(),
      [](const FusedLoop::Op& op) { return FusedLoop::IsRowWise(op.code); });
}

// The offsets of some inputs (the broadcast ones: the others need none) at
// a row of `out` (a row: the last dim), walked as an odometer over the
// other dims. Plain arrays: a loop over [32, 4, 64, 64] walks 32768 rows.
class Rows {
 public:
  // strides[i]: input i's BroadcastStrides for out; `walked`: the inputs
  // whose offsets Seek and Next keep.
  Rows(const Shape& out, const std::vector<Shape>& strides,
       const std::vector<int>& walked)
      : dims_(out.empty() ? 0 : static_cast<int>(out.size()) - 1),
        extent_(out.begin(), out.begin() + dims_),
        walked_(walked),
        step_(extent_.size() * walked.size()),
        index_(extent_.size()) {
    const size_t w = walked_.size();
    for (int d = 0; d < dims_; ++d) {
      for (size_t j = 0; j < w; ++j) step_[d * w + j] = strides[walked_[j]][d];
    }
  }
  void Seek(int64_t row, std::vector<int64_t>& offsets) {
    for (int d = dims_ - 1; d >= 0; --d) {
      index_[d] = row % extent_[d];
      row /= extent_[d];
    }
    const size_t w = walked_.size();
    for (size_t j = 0; j < w; ++j) {
      int64_t offset = 0;
      for (int d = 0; d < dims_; ++d) offset += index_[d] * step_[d * w + j];
      offsets[walked_[j]] = offset;
    }
  }
  void Next(std::vector<int64_t>& offsets) {
    const size_t w = walked_.size();
    for (int d = dims_ - 1; d >= 0; --d) {
      const int64_t* step = step_.data() + d * w;
      for (size_t j = 0; j < w; ++j) offsets[walked_[j]] += step[j];
      if (++index_[d] < extent_[d]) return;
      for (size_t j = 0; j < w; ++j) {
        offsets[walked_[j]] -= step[j] * extent_[d];
      }
      index_[d] = 0;
    }
  }

 private:
  const int dims_;
  const std::vector<int64_t> extent_;
  const std::vector<int> walked_;
  std::vector<int64_t> step_;  // [dim][walked input]
  std::vector<int64_t> index_;
};

// The blocks a loop runs in: whole rows, as many as fit kFusedBlock
// elements, or pieces of kFusedBlock of one longer row. With only full-size
// and one-element inputs the loop is one row of every element.
struct Blocks {
  Blocks(const Shape& out, bool flat) {
    const int64_t n = NumElements(out);
    inner = flat ? n : out.back();
    rows = n / inner;
    piece = std::min(inner, kFusedBlock);
    pieces = (inner + piece - 1) / piece;
    rows_per_block = pieces > 1 ? 1 : std::max<int64_t>(1, kFusedBlock / inner);
    count = pieces > 1 ? rows * pieces
                       : (rows + rows_per_block - 1) / rows_per_block;
  }
  int64_t inner, rows, piece, pieces, rows_per_block, count;
};

// One run of a loop: its blocks in parallel, each through every op.
template <typename T>
class LoopRun {
 public:
  LoopRun(const FusedLoop& loop, absl::Span<const Tensor> inputs,
          const Shape& out, Tensors& outputs)
      : loop_(loop),
        inputs_(inputs),
        out_(out),
        n_(NumElements(out)),
        ni_(loop.num_inputs),
        nr_(static_cast<int>(loop.ops.size())),
        flat_(out.empty() || (loop.row_sums.empty() &&
                              loop.column_sums.empty() && !RowWise(loop) &&
                              std::all_of(inputs.begin(), inputs.end(),
                                          [&](const Tensor& t) {
                                            return t.num_elements() == n_ ||
                                                   t.num_elements() == 1;
                                          }))),
        blocks_(out, flat_),
        block_(blocks_.rows_per_block * blocks_.piece),
        written_(nr_, nullptr) {
    for (int i = 0; i < ni_; ++i) {
      const Tensor& t = inputs[i];
      strides_.push_back(BroadcastStrides(t.shape(), out.size()));
      base_.push_back(t.data<T>());
      if (t.num_elements() != n_ && t.num_elements() != 1) {
        broadcast_.push_back(i);
      }
    }
    for (size_t k = 0; k < loop.outputs.size(); ++k) {
      written_[loop.outputs[k]] = outputs[k].mutable_data<T>();
    }
    for (size_t k = 0; k < loop.row_sums.size(); ++k) {
      sums_.push_back(outputs[loop.outputs.size() + k].mutable_data<T>());
    }
    for (size_t k = 0; k < loop.column_sums.size(); ++k) {
      column_sums_.push_back(
          outputs[loop.outputs.size() + loop.row_sums.size() + k]
              .mutable_data<T>());
    }
  }

  void Run() {
    if (!loop_.column_sums.empty()) return RunColumnBlocks();
    ParallelRange(
        blocks_.count, std::max<int64_t>(1, kElementwiseGrain / (block_ * nr_)),
        [&](int64_t begin, int64_t end) {
          Worker w(*this);
          for (int64_t b = begin; b < end; ++b) {
            // Rows [row, row + nrows), or a piece of one at col.
            const bool pieces = blocks_.pieces > 1;
            const int64_t row =
                pieces ? b / blocks_.pieces : b * blocks_.rows_per_block;
            RunBlock(w, row, pieces ? (b % blocks_.pieces) * blocks_.piece : 0,
                     std::min(blocks_.rows_per_block, blocks_.rows - row));
          }
        });
  }

 private:
  // A thread's scratch and operands.
  struct Worker {
    // The scratch is left uninitialized (new T[], not a vector): every
    // element a block reads there, the block wrote first.
    explicit Worker(const LoopRun& run)
        : scratch(new T[static_cast<size_t>(run.nr_ + run.ni_) * run.block_]),
          operands(run.ni_ + run.nr_),
          offsets(run.ni_),
          ops(run.nr_),
          // A row-wise op's scratch (a row: the loop then runs whole rows).
          shifted(RowWise(run.loop_) ? run.blocks_.inner : 0),
          walk(run.out_, run.strides_, run.broadcast_) {}
    std::unique_ptr<T[]> scratch;
    std::vector<Operand<T>> operands;
    std::vector<int64_t> offsets;
    std::vector<VecLoopOp<T>> ops;
    std::vector<T> shifted;
    Rows walk;
  };

  // Rows [row, row + nrows), elements [col, col + len) of each, through
  // every op; the results in w.operands.
  void RunBlock(Worker& w, int64_t row, int64_t col, int64_t nrows) {
    const int64_t len = nrows > 1
                            ? nrows * blocks_.inner
                            : std::min(blocks_.piece, blocks_.inner - col);
    const int64_t first = row * blocks_.inner + col;
    if (!broadcast_.empty()) w.walk.Seek(row, w.offsets);
    PlaceInputs(first, col, nrows, w.scratch.get(), w.offsets, w.walk,
                w.operands);
    for (int r = 0; r < nr_; ++r) {
      T* z = written_[r] != nullptr ? written_[r] + first
                                    : w.scratch.get() + r * block_;
      const FusedLoop::Op& op = loop_.ops[r];
      const Operand<T> a = w.operands[op.a];
      const Operand<T> b = FusedLoop::IsUnary(op.code) ? a : w.operands[op.b];
      w.ops[r] = {static_cast<int>(op.code), a.p, a.stride, b.p, b.stride, z};
      w.operands[ni_ + r] = {z, 1};
    }
    RunOps(w.ops, nrows, len, w.shifted);
    SumRows(w.operands, row, nrows);
  }

  // With column sums: the Sum kernel's blocks of rows in parallel, each
  // block's column sums from 0 row by row, then the blocks' sums in order
  // (FusedLoop::ColumnSum).
  void RunColumnBlocks() {
    const int64_t k = blocks_.inner;
    const int64_t block_rows = FusedLoop::ColumnBlockRows(k);
    const int64_t count = (blocks_.rows + block_rows - 1) / block_rows;
    const size_t sums = loop_.column_sums.size();
    std::vector<T> partial(count * sums * k, T(0));
    ParallelRange(count, 1, [&](int64_t begin, int64_t end) {
      Worker w(*this);
      for (int64_t c = begin; c < end; ++c) {
        const int64_t last = std::min(blocks_.rows, (c + 1) * block_rows);
        for (int64_t row = c * block_rows; row < last;
             row += blocks_.rows_per_block) {
          const int64_t nrows = std::min(blocks_.rows_per_block, last - row);
          RunBlock(w, row, 0, nrows);
          for (size_t j = 0; j < sums; ++j) {
            AddRows(w.operands[ni_ + loop_.column_sums[j].op].p, nrows, k,
                    partial.data() + (c * sums + j) * k);
          }
        }
      }
    });
    for (size_t j = 0; j < sums; ++j) {
      T* y = column_sums_[j];
      std::fill(y, y + k, T(0));
      for (int64_t c = 0; c < count; ++c) {
        AddRows(partial.data() + (c * sums + j) * k, 1, k, y);
      }
    }
  }

  // y[i] += x[r][i] for each of `rows` rows of k, in order.
  static void AddRows(const T* x, int64_t rows, int64_t k, T* y) {
    VecAddRows(x, rows, k, k, y);
  }

  // The block's ops: the elementwise ones strip by strip (VecLoopBlock),
  // up to each row-wise one, which runs over the block's whole rows.
  void RunOps(const std::vector<VecLoopOp<T>>& ops, int64_t nrows, int64_t len,
              std::vector<T>& shifted) {
    int from = 0;
    for (int r = 0; r < nr_; ++r) {
      const FusedLoop::Code code = loop_.ops[r].code;
      if (!FusedLoop::IsRowWise(code)) continue;
      VecLoopBlock(ops.data() + from, r - from, len);
      if (code == FusedLoop::kSoftmax) {
        VecSoftmaxRows(ops[r].a, ops[r].z, shifted.data(), nrows, blocks_.inner,
                       /*log=*/false);
      } else {
        SpreadRowSums(ops[r].a, nrows, code == FusedLoop::kRowMean, ops[r].z);
      }
      from = r + 1;
    }
    VecLoopBlock(ops.data() + from, nr_ - from, len);
  }

  // Each of `nrows` rows of z: the sum (or mean) of that row of x, as
  // SumRows computes it.
  void SpreadRowSums(const T* x, int64_t nrows, bool mean, T* z) {
    const int64_t k = blocks_.inner;
    VecRowSums(x, nrows, k, z);  // z's first nrows elements: the sums
    for (int64_t i = nrows - 1; i >= 0; --i) {
      const T sum = mean ? static_cast<T>(z[i] / static_cast<T>(k)) : z[i];
      std::fill(z + i * k, z + (i + 1) * k, sum);
    }
  }

  // The row sums of the block's whole rows [row, row + nrows), as the Sum
  // and Mean kernels compute them.
  void SumRows(const std::vector<Operand<T>>& operands, int64_t row,
               int64_t nrows) {
    for (size_t k = 0; k < sums_.size(); ++k) {
      const FusedLoop::RowSum& sum = loop_.row_sums[k];
      T* y = sums_[k] + row;
      VecRowSums(operands[ni_ + sum.op].p, nrows, blocks_.inner, y);
      if (sum.mean) {
        const T count = static_cast<T>(blocks_.inner);
        for (int64_t i = 0; i < nrows; ++i) y[i] = static_cast<T>(y[i] / count);
      }
    }
  }

  // Points the input operands at the block's elements: full-size and
  // one-element inputs in place, a broadcast input's row in place when the
  // block is one row, else its rows copied into scratch.
  void PlaceInputs(int64_t first, int64_t col, int64_t nrows, T* scratch,
                   std::vector<int64_t>& offsets, Rows& walk,
                   std::vector<Operand<T>>& operands) {
    bool broadcast = false;
    for (int i = 0; i < ni_; ++i) {
      const int64_t size = inputs_[i].num_elements();
      if (size == n_ || size == 1) {
        operands[i] = {base_[i] + (size == n_ ? first : 0),
                       size == n_ && n_ > 1 ? 1 : 0};
      } else if (nrows == 1) {
        const int64_t stride = strides_[i].back();
        operands[i] = {base_[i] + offsets[i] + col * stride, stride};
      } else {
        operands[i] = {scratch + (nr_ + i) * block_, 1};
        broadcast = true;
      }
    }
    for (int64_t r = 0; broadcast && r < nrows; ++r, walk.Next(offsets)) {
      for (int i : broadcast_) {
        T* dst = scratch + (nr_ + i) * block_ + r * blocks_.inner;
        const T* src = base_[i] + offsets[i];
        if (strides_[i].back() == 1) {
          std::copy(src, src + blocks_.inner, dst);
        } else {
          std::fill(dst, dst + blocks_.inner, *src);
        }
      }
    }
  }

  const FusedLoop& loop_;
  absl::Span<const Tensor> inputs_;
  const Shape& out_;
  const int64_t n_;
  const int ni_, nr_;
  const bool flat_;
  const Blocks blocks_;
  const int64_t block_;
  std::vector<Shape> strides_;
  std::vector<int> broadcast_;  // the inputs neither full-size nor one element
  std::vector<const T*> base_;
  std::vector<T*> written_;
  std::vector<T*> sums_;         // the row sums' outputs
  std::vector<T*> column_sums_;  // the column sums' outputs
};

}  // namespace

absl::Status RunFusedLoop(const FusedLoop& loop,
                          absl::Span<const Tensor> inputs, Tensors* outputs) {
  ASSIGN_OR_RETURN(Shape out, CheckLoop(loop, inputs));
  const DType dtype = inputs[0].dtype();
  outputs->clear();
  for (size_t k = 0; k < loop.outputs.size(); ++k) {
    // Every element of a written result is written below.
    ASSIGN_OR_RETURN(Tensor t, Tensor::Uninitialized(dtype, out));
    outputs->push_back(std::move(t));
  }
  for (const FusedLoop::RowSum& sum : loop.row_sums) {
    // Every row is summed below (CheckLoop: rows are not empty).
    ASSIGN_OR_RETURN(Tensor t,
                     Tensor::Uninitialized(dtype, RowSumShape(out, sum)));
    outputs->push_back(std::move(t));
  }
  for (const FusedLoop::ColumnSum& sum : loop.column_sums) {
    // Every column is summed below (CheckLoop: columns are not empty).
    ASSIGN_OR_RETURN(Tensor t, Tensor::Uninitialized(dtype, sum.shape));
    outputs->push_back(std::move(t));
  }
  if (NumElements(out) == 0) return absl::OkStatus();
  if (dtype == DType::kFloat32) {
    LoopRun<float>(loop, inputs, out, *outputs).Run();
  } else {
    LoopRun<double>(loop, inputs, out, *outputs).Run();
  }
  return absl::OkStatus();
}

}  // namespace gradtape
