// Matrix products (MatMul, batched, sparse) and the cross product.
//
// Every product is one Gemm (core/ops/gemm.h) per matrix on the row-major
// buffers, with transposes (MatMul's transpose_*) and adjoints
// (BatchMatMul's adj_*, conjugate-transposes for complex) passed as flags,
// so no copy is made. Batched products walk the batch dims with a RowCursor
// (BatchedGemm), whose strides (in matrices) are 0 along a broadcast dim.
#include <mutex>
#include <string>

#include "core/autodiff/forward_mode.h"
#include "core/autodiff/grad_context.h"
#include "core/base/cancellation.h"
#include "core/base/status_macros.h"
#include "core/ops/gemm.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"
#include "core/ops/parallel.h"
#include "core/registry/strided_matmul.h"

namespace gradtape {
namespace {

// Gemm splits a product of at least this many multiply-adds between the
// threads itself (kParallelMinWork in gemm.cc); smaller products of a batch
// are spread over the threads whole, at least kBatchBlockWork
// multiply-adds per block (a block of a few microseconds). The attention
// products of bench/transformer_bench.py (128 products of 64 x 16 x 64)
// ran on one core before: 14% of a captured training step's kernel time.
constexpr double kGemmSplitsWork = 1 << 20;
constexpr double kBatchBlockWork = 1 << 17;

// Runs gemms(begin, end) over blocks of n products of `work` multiply-adds
// each: in one call when Gemm splits such a product between the threads
// itself, else blocks spread over the threads. Each product is one Gemm on
// one thread, so the result does not depend on the thread count. The first
// error (a cancellation) wins; blocks started after it return at once
// (Gemm checks it first).
template <typename Fn>
absl::Status ForProducts(int64_t n, double work, Fn gemms) {
  if (n == 0) return absl::OkStatus();
  Cancellation* const cancel = CurrentCancellation();
  absl::Status status;
  std::mutex mu;
  auto run = [&](int64_t begin, int64_t end) {
    ScopedCancellation scope(cancel);  // on a pool thread too
    absl::Status s = gemms(begin, end);
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      if (status.ok()) status = std::move(s);
    }
  };
  if (work >= kGemmSplitsWork) {
    run(0, n);
  } else {
    ParallelRange(n, static_cast<int64_t>(kBatchBlockWork / (work + 1)) + 1,
                  run);
  }
  return status;
}

// z[o] = op(x[i]) op(y[j]) for every product o of the batch dims `batch`
// (i, j: matrix offsets into x and y, through the strides sx, sy, 0 along a
// broadcast dim), walked block by block with no list of the products (a
// batch of a billion 1 x 1 products must not need memory the tensors were
// not charged for).
template <typename T>
absl::Status BatchedGemm(MatrixOp op_x, MatrixOp op_y, const ProductDims& d,
                         absl::Span<const int64_t> batch,
                         absl::Span<const int64_t> sx,
                         absl::Span<const int64_t> sy, const T* px,
                         int64_t x_size, int64_t xc, const T* py,
                         int64_t y_size, int64_t yc, T* pz) {
  if (NumElements(batch) == 0) return absl::OkStatus();
  const BroadcastLayout l = CollapseStrides(batch, sx, sy);
  const int64_t inner = l.inner(), ia = l.sa.back(), ib = l.sb.back();
  const int64_t z_size = d.m * d.n;
  return ForProducts(
      NumElements(batch), static_cast<double>(d.m) * d.n * d.k,
      [&](int64_t begin, int64_t end) {
        RowCursor row(l, begin / inner);
        for (int64_t o = begin, k = begin % inner; o < end; ++o) {
          RETURN_IF_ERROR(Gemm<T>(
              op_x, op_y, d.m, d.n, d.k, px + (row.a() + k * ia) * x_size, xc,
              py + (row.b() + k * ib) * y_size, yc, pz + o * z_size, d.n));
          if (++k == inner) {
            k = 0;
            row.Next();
          }
        }
        return absl::OkStatus();
      });
}

// BatchMatMul (broadcast = false: batch dims must be equal) and
// BatchMatMulV2 (batch dims broadcast numpy-style).
absl::Status BatchMatMulKernel(KernelContext& ctx, bool broadcast) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kInexact));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 1));
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  for (int i = 0; i < 2; ++i) {
    if (ctx.input(i).rank() < 2) {
      return ctx.InvalidArgument("input ", i, " (", ctx.op().input_names[i],
                                 ") must have rank >= 2, got shape ",
                                 ShapeString(ctx.input(i).shape()));
    }
  }
  const bool adj_x = ctx.attrs().Bool("adj_x");
  const bool adj_y = ctx.attrs().Bool("adj_y");
  ASSIGN_OR_RETURN(ProductDims d,
                   MatrixDims(ctx, adj_x, adj_y, "adj_x", "adj_y"));
  absl::Span<const int64_t> bx(x.shape().data(), x.rank() - 2);
  absl::Span<const int64_t> by(y.shape().data(), y.rank() - 2);
  Shape batch;
  if (!broadcast) {
    if (bx != by) {
      return ctx.InvalidArgument(
          "batch dimensions of x ", ShapeString(x.shape()), " and y ",
          ShapeString(y.shape()),
          " must be equal (BatchMatMulV2 broadcasts them)");
    }
    batch.assign(bx.begin(), bx.end());
  } else {
    absl::StatusOr<Shape> b = BroadcastShapes(ctx, bx, by);
    if (!b.ok()) {
      return ctx.InvalidArgument("batch dimensions of x ",
                                 ShapeString(x.shape()), " and y ",
                                 ShapeString(y.shape()), " do not broadcast");
    }
    batch = *std::move(b);
  }
  Shape out_shape = batch;
  out_shape.push_back(d.m);
  out_shape.push_back(d.n);
  if (NumElements(out_shape) < 0) {
    return ctx.InvalidArgument("output shape ", ShapeString(out_shape),
                               " is too large");
  }
  // Written in full: every product writes its matrix (k == 0 too).
  ASSIGN_OR_RETURN(Tensor z, AllocateOutput(ctx, x.dtype(), out_shape));
  absl::Status status;
  const MatrixOp op_x = adj_x ? MatrixOp::kAdjoint : MatrixOp::kNone;
  const MatrixOp op_y = adj_y ? MatrixOp::kAdjoint : MatrixOp::kNone;
  const int rank = static_cast<int>(batch.size());
  const Shape sx = BroadcastStrides(bx, rank);  // in matrices
  const Shape sy = BroadcastStrides(by, rank);
  DispatchInexact(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const int64_t xc = x.dim(x.rank() - 1), yc = y.dim(y.rank() - 1);
    status = BatchedGemm<T>(op_x, op_y, d, batch, sx, sy, x.data<T>(),
                            x.dim(x.rank() - 2) * xc, xc, y.data<T>(),
                            y.dim(y.rank() - 2) * yc, yc, z.mutable_data<T>());
  });
  RETURN_IF_ERROR(ctx.Annotate(status));
  ctx.set_output(0, std::move(z));
  return absl::OkStatus();
}

// Whether `v`'s matrices of `rows` x `cols` stored elements, over `batch`,
// lie inside a tensor of `size` elements (they do if there are none).
bool ViewFits(const StridedMatMul::View& v, absl::Span<const int64_t> batch,
              int64_t rows, int64_t cols, int64_t size) {
  if (NumElements(batch) == 0 || rows == 0 || cols == 0) return true;
  if (v.offset < 0 || v.ld < cols || v.batch_strides.size() != batch.size()) {
    return false;
  }
  __int128 last = static_cast<__int128>(v.offset) +
                  static_cast<__int128>(rows - 1) * v.ld + (cols - 1);
  for (size_t d = 0; d < batch.size(); ++d) {
    if (v.batch_strides[d] < 0) return false;
    last += static_cast<__int128>(batch[d] - 1) * v.batch_strides[d];
  }
  return last < size;
}

// The element offset of matrix o of `batch` in view `v`.
int64_t MatrixAt(const StridedMatMul::View& v, absl::Span<const int64_t> batch,
                 int64_t o) {
  int64_t offset = v.offset;
  for (int d = static_cast<int>(batch.size()) - 1; d >= 0; --d) {
    offset += (o % batch[d]) * v.batch_strides[d];
    o /= batch[d];
  }
  return offset;
}

absl::Status CheckStridedMatMul(const StridedMatMul& mm,
                                absl::Span<const Tensor> inputs) {
  auto invalid = [](auto... why) {
    return absl::InvalidArgumentError(
        absl::StrCat("strided matrix products: ", why...));
  };
  if (static_cast<int>(inputs.size()) != mm.num_inputs || inputs.empty()) {
    return invalid("take ", mm.num_inputs, " inputs, got ", inputs.size());
  }
  const DType dtype = inputs[0].dtype();
  for (const Tensor& t : inputs) {
    if (t.dtype() != dtype ||
        (dtype != DType::kFloat32 && dtype != DType::kFloat64)) {
      return invalid("input ", t.DebugString(),
                     ": inputs are float32 or float64, one dtype");
    }
  }
  const int64_t size = NumElements(mm.shape);
  int64_t written = 0;
  for (const StridedMatMul::Product& p : mm.products) {
    if (p.a < 0 || p.a >= mm.num_inputs || p.b < 0 || p.b >= mm.num_inputs ||
        p.m < 0 || p.n < 0 || p.k < 0 || NumElements(p.batch) < 0) {
      return invalid("a product's inputs or sizes are out of range");
    }
    const Tensor& a = inputs[p.a];
    const Tensor& b = inputs[p.b];
    if (!ViewFits(p.va, p.batch, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k,
                  a.num_elements()) ||
        !ViewFits(p.vb, p.batch, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n,
                  b.num_elements()) ||
        !ViewFits(p.vz, p.batch, p.m, p.n, size)) {
      return invalid("a view leaves its tensor (", a.DebugString(), " times ",
                     b.DebugString(), " into ", ShapeString(mm.shape), ")");
    }
    written += NumElements(p.batch) * p.m * p.n;
  }
  if (written != size) {
    return invalid("the products write ", written, " elements of ",
                   ShapeString(mm.shape), "'s ", size);
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status RunProducts(const StridedMatMul& mm,
                         absl::Span<const Tensor> inputs, T* pz) {
  for (const StridedMatMul::Product& p : mm.products) {
    const T* pa = inputs[p.a].data<T>();
    const T* pb = inputs[p.b].data<T>();
    const MatrixOp op_a = p.trans_a ? MatrixOp::kTranspose : MatrixOp::kNone;
    const MatrixOp op_b = p.trans_b ? MatrixOp::kTranspose : MatrixOp::kNone;
    RETURN_IF_ERROR(ForProducts(
        NumElements(p.batch), static_cast<double>(p.m) * p.n * p.k,
        [&](int64_t begin, int64_t end) {
          for (int64_t o = begin; o < end; ++o) {
            RETURN_IF_ERROR(Gemm<T>(op_a, op_b, p.m, p.n, p.k,
                                    pa + MatrixAt(p.va, p.batch, o), p.va.ld,
                                    pb + MatrixAt(p.vb, p.batch, o), p.vb.ld,
                                    pz + MatrixAt(p.vz, p.batch, o), p.vz.ld));
          }
          return absl::OkStatus();
        }));
  }
  return absl::OkStatus();
}

// Z = op(X) op(Y):  dX = dZ Y^H,  dY = X^H dZ (adjoints folded into the
// adj attrs; TensorFlow's gradient for complex), each summed over the batch
// dims its input was broadcast along.
void BatchMatMulGrad(GradContext& g, const char* op_name) {
  const bool ax = g.attrs().Bool("adj_x");
  const bool ay = g.attrs().Bool("adj_y");
  Tensor x = g.Input(0), y = g.Input(1), dz = g.Grad(0);
  const bool v3 = std::string(op_name) == "BatchMatMulV3";
  auto mm = [&](Tensor a, Tensor b, bool adj_a, bool adj_b) {
    AttrMap attrs{{"adj_x", adj_a}, {"adj_y", adj_b}};
    if (v3) attrs.Set("Tout", g.OutputDType(0));
    return g.Op(op_name, {a, b}, std::move(attrs));
  };
  if (g.NeedsGrad(0)) {
    Tensor dx = !ax ? mm(dz, y, false, !ay) : mm(y, dz, ay, true);
    g.SetGrad(0, g.SumToShape(dx, g.InputShape(0)));
  }
  if (g.NeedsGrad(1)) {
    Tensor dy = !ay ? mm(x, dz, !ax, false) : mm(dz, x, true, ax);
    g.SetGrad(1, g.SumToShape(dy, g.InputShape(1)));
  }
}

absl::Status CrossKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kNumeric));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 1));
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.shape() != b.shape()) {
    return ctx.InvalidArgument("a ", ShapeString(a.shape()), " and b ",
                               ShapeString(b.shape()),
                               " must have the same shape");
  }
  if (a.rank() == 0 || a.dim(a.rank() - 1) != 3) {
    return ctx.InvalidArgument("the last dimension of a and b must be 3, got ",
                               ShapeString(a.shape()));
  }
  ASSIGN_OR_RETURN(Tensor c, Allocate(ctx, a.dtype(), a.shape()));
  DispatchNumeric(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = c.mutable_data<T>();
    for (int64_t v = 0; v < a.num_elements(); v += 3) {
      const T *u = pa + v, *w = pb + v;
      pc[v] = u[1] * w[2] - u[2] * w[1];
      pc[v + 1] = u[2] * w[0] - u[0] * w[2];
      pc[v + 2] = u[0] * w[1] - u[1] * w[0];
    }
  });
  ctx.set_output(0, std::move(c));
  return absl::OkStatus();
}

// BatchMatMulV3: BatchMatMulV2 with the dtype attrs Ta, Tb (those of x and
// y; kInvalid: taken from them) and Tout. TensorFlow's CPU kernels take one
// dtype for all three (no mixed kernel among the float types), so does this.
absl::Status BatchMatMulV3Kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kInexact));
  RETURN_IF_ERROR(RequireDTypes(ctx, 1, DTypes::kInexact));
  const DType ta = ctx.attrs().Type("Ta"), tb = ctx.attrs().Type("Tb");
  const DType tout = ctx.attrs().Type("Tout");
  const DType dx = ctx.input(0).dtype(), dy = ctx.input(1).dtype();
  if ((ta != DType::kInvalid && ta != dx) ||
      (tb != DType::kInvalid && tb != dy)) {
    return ctx.InvalidArgument("Ta ", DTypeName(ta), " and Tb ", DTypeName(tb),
                               " must be the dtypes of x (", DTypeName(dx),
                               ") and y (", DTypeName(dy), ")");
  }
  if (dx != dy || tout != dx) {
    return ctx.InvalidArgument("x (", DTypeName(dx), "), y (", DTypeName(dy),
                               ") and Tout (", DTypeName(tout),
                               ") must have one dtype (no mixed-dtype kernel)");
  }
  return BatchMatMulKernel(ctx, /*broadcast=*/true);
}

// BatchMatMul (broadcast = false) and BatchMatMulV2.
Op BatchMatMul(Op op, bool broadcast) {
  const char* name = broadcast ? "BatchMatMulV2" : "BatchMatMul";
  return std::move(
      op.Inputs({"x", "y"})
          .Outputs({"output"})
          .Attr("adj_x", false)
          .Attr("adj_y", false)
          .Forward([broadcast](KernelContext& ctx) {
            return BatchMatMulKernel(ctx, broadcast);
          })
          // Z = op(X) op(Y):  dX = dZ op(Y)^T,  dY = op(X)^T dZ
          // (transposes folded into adj_x/adj_y; V2 sums over the
          // broadcast batch dims)
          .Backward([name](GradContext& g) { BatchMatMulGrad(g, name); })
          .SavesInputs({0, 1})
          .Summary(broadcast
                       ? "output[..., :, :] = op(x) @ op(y) per matrix, "
                         "batch dims broadcast; op is the adjoint when adj_*"
                       : "output[..., :, :] = op(x) @ op(y) per matrix, "
                         "equal batch dims; op is the adjoint when adj_*"));
}

}  // namespace

absl::Status RunStridedMatMul(const StridedMatMul& mm,
                              absl::Span<const Tensor> inputs, Tensor* output) {
  RETURN_IF_ERROR(CheckStridedMatMul(mm, inputs));
  const DType dtype = inputs[0].dtype();
  // Every element is written by one product (the plan's promise; the count
  // is checked above).
  ASSIGN_OR_RETURN(Tensor z, Tensor::Uninitialized(dtype, mm.shape));
  RETURN_IF_ERROR(
      dtype == DType::kFloat32
          ? RunProducts<float>(mm, inputs, z.mutable_data<float>())
          : RunProducts<double>(mm, inputs, z.mutable_data<double>()));
  *output = std::move(z);
  return absl::OkStatus();
}

void RegisterLinalgOps(OpRegistry& r) {
  r.Add(Op("MatMul")
            .Inputs({"a", "b"})
            .Outputs({"product"})
            .Attr("transpose_a", false)
            .Attr("transpose_b", false)
            .Forward(MatMulKernel)
            // C = op(A) op(B):  dA = dC conj(B)^T,  dB = conj(A)^T dC
            // (transposes folded into the MatMul attrs; conj only for
            // complex, as TensorFlow's)
            .Backward([](GradContext& g) {
              const bool ta = g.attrs().Bool("transpose_a");
              const bool tb = g.attrs().Bool("transpose_b");
              Tensor a = g.Conj(g.Input(0)), b = g.Conj(g.Input(1));
              Tensor dc = g.Grad(0);
              auto matmul = [&](Tensor x, Tensor y, bool tx, bool ty) {
                return g.Op("MatMul", {x, y},
                            {{"transpose_a", tx}, {"transpose_b", ty}});
              };
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, !ta ? matmul(dc, b, false, !tb)
                                 : matmul(b, dc, tb, true));
              }
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, !tb ? matmul(a, dc, !ta, false)
                                 : matmul(dc, a, true, ta));
              }
            })
            .SavesInputs({0, 1})
            // tC = op(tA) op(B) + op(A) op(tB)
            .Jvp([](JvpContext& j) {
              Tensor a, b;
              if (j.HasTangent(0)) {
                a = j.Op("MatMul", {j.Tangent(0), j.Input(1)}, j.attrs());
              }
              if (j.HasTangent(1)) {
                b = j.Op("MatMul", {j.Input(0), j.Tangent(1)}, j.attrs());
              }
              j.SetTangent(0, !a.valid() ? b : !b.valid() ? a : j.Add(a, b));
            })
            .Summary("product = op(a) @ op(b) for 2-D a, b (float or "
                     "complex; op transposes, never conjugates)"));
  r.Add(BatchMatMul(Op("BatchMatMul"), /*broadcast=*/false));
  r.Add(BatchMatMul(Op("BatchMatMulV2"), /*broadcast=*/true));
  r.Add(
      Op("BatchMatMulV3")
          .Inputs({"x", "y"})
          .Outputs({"output"})
          .Attr("Ta", DType::kInvalid)
          .Attr("Tb", DType::kInvalid)
          .Attr("Tout", AttrType::kType)
          .Attr("adj_x", false)
          .Attr("adj_y", false)
          .OutputDType(DTypeRule::FromAttr("Tout"))
          .Forward(BatchMatMulV3Kernel)
          // as BatchMatMulV2 (one dtype throughout)
          .Backward([](GradContext& g) { BatchMatMulGrad(g, "BatchMatMulV3"); })
          .SavesInputs({0, 1})
          .Summary("BatchMatMulV2 with the dtype attrs Ta, Tb, Tout (all "
                   "one float or complex dtype)"));
  r.Add(Op("SparseMatMul")
            .Inputs({"a", "b"})
            .Outputs({"product"})
            .Attr("transpose_a", false)
            .Attr("transpose_b", false)
            .Attr("a_is_sparse", false)
            .Attr("b_is_sparse", false)
            // Ta, Tb: float32 (or bfloat16) in TensorFlow; float64 too here.
            .Forward([](KernelContext& ctx) {
              RETURN_IF_ERROR(ctx.RequireFloat(0));
              return MatMulKernel(ctx);
            })
            // C = op(A) op(B):  dA = dC op(B)^T,  dB = op(A)^T dC  (each
            // operand keeps its sparsity hint; dC is dense)
            .Backward([](GradContext& g) {
              const bool ta = g.attrs().Bool("transpose_a");
              const bool tb = g.attrs().Bool("transpose_b");
              const bool sa = g.attrs().Bool("a_is_sparse");
              const bool sb = g.attrs().Bool("b_is_sparse");
              Tensor a = g.Input(0), b = g.Input(1), dc = g.Grad(0);
              // x is sparse per hint sx, y per hint sy.
              auto smm = [&](Tensor x, bool sx, Tensor y, bool sy, bool tx,
                             bool ty) {
                return g.Op("SparseMatMul", {x, y},
                            {{"transpose_a", tx},
                             {"transpose_b", ty},
                             {"a_is_sparse", sx},
                             {"b_is_sparse", sy}});
              };
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, !ta ? smm(dc, false, b, sb, false, !tb)
                                 : smm(b, sb, dc, false, tb, true));
              }
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, !tb ? smm(a, sa, dc, false, !ta, false)
                                 : smm(dc, false, a, sa, true, ta));
              }
            })
            .SavesInputs({0, 1})
            .Summary("product = op(a) @ op(b) for 2-D a, b of one float "
                     "dtype; the *_is_sparse hints do not change the result "
                     "(the product is computed densely)"));
  r.Add(Op("Cross")
            .Inputs({"a", "b"})
            .Outputs({"product"})
            .Forward(CrossKernel)
            // c = a x b:  da = b x dc,  db = dc x a
            .Backward([](GradContext& g) {
              Tensor dc = g.Grad(0);
              if (g.NeedsGrad(0)) g.SetGrad(0, g.Op("Cross", {g.Input(1), dc}));
              if (g.NeedsGrad(1)) g.SetGrad(1, g.Op("Cross", {dc, g.Input(0)}));
            })
            .SavesInputs({0, 1})
            .Summary("product[..., :] = a[..., :] x b[..., :] (3-vectors in "
                     "the last dim; a, b of one shape)"));
}

}  // namespace gradtape
