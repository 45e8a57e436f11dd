// Ops on lists of tensors (TensorFlow's `N * T` arguments, core/registry's
// ListInput / ListOutput): ConcatV2, Pack, Unpack, Split and SplitV.
//
// Every kernel views a tensor as [outer, d, inner] around its axis and
// copies whole rows of d * inner elements, whatever the dtype. As in
// TensorFlow, ConcatV2's axis and Split's / SplitV's split_dim are int32 or
// int64 scalar input tensors (non-differentiable, in [-rank, rank)); Pack's
// and Unpack's axis are int attrs (Pack's in [-(rank + 1), rank + 1)).
//
// The gradients (TensorFlow's array_grad.py): ConcatV2's is SplitV of dy by
// the inputs' sizes along the axis; Split's and SplitV's are ConcatV2 of
// the output gradients (zeros where none arrived); Pack's is Unpack and
// Unpack's is Pack. Each is written in these ops, so second order works.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/autodiff/forward_mode.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"
#include "core/ops/parallel.h"

namespace gradtape {
namespace {

// Scalar int32 / int64 input i (an axis), by value.
absl::StatusOr<int64_t> ScalarIndex(const KernelContext& ctx, int i,
                                    absl::string_view name) {
  RETURN_IF_ERROR(ctx.RequireIndexDType(i));
  const Tensor& t = ctx.input(i);
  if (t.rank() != 0) {
    return ctx.InvalidArgument(name, " must be a scalar, got shape ",
                               ShapeString(t.shape()));
  }
  return t.dtype() == DType::kInt32 ? int64_t{t.data<int32_t>()[0]}
                                    : t.data<int64_t>()[0];
}

// `axis` in [-rank, rank) as a dim index; INVALID_ARGUMENT naming the attr
// or input `name` and the shape otherwise.
absl::StatusOr<int> NormalizeAxis(const KernelContext& ctx, int64_t axis,
                                  int rank, absl::string_view name,
                                  absl::Span<const int64_t> shape) {
  if (axis < -rank || axis >= rank) {
    return ctx.InvalidArgument(name, " ", axis, " is out of range [", -rank,
                               ", ", rank, ") for shape ", ShapeString(shape));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Product of the dims before `axis` / from `axis + 1` on.
int64_t Outer(absl::Span<const int64_t> shape, int axis) {
  return NumElements(shape.subspan(0, axis));
}
int64_t Inner(absl::Span<const int64_t> shape, int axis) {
  return NumElements(shape.subspan(axis + 1));
}

// Bytes per block of a parallel copy.
constexpr int64_t kCopyChunkBytes = 64 * 1024;

// Calls copy(o, k, begin, end) for the bytes [begin, end) of row o of every
// piece k (row_bytes[k] bytes each), all of them once, in parallel: blocks
// of whole rows when rows are short, chunks of each row when they are long
// (Pack and Unpack along axis 0 copy one long row per piece).
template <typename Copy>
void CopyRowsInParallel(absl::Span<const int64_t> row_bytes, int64_t outer,
                        const Copy& copy) {
  int64_t total = 0;
  for (int64_t b : row_bytes) total += b;
  if (total < kCopyChunkBytes) {
    const int64_t grain = kCopyChunkBytes / std::max<int64_t>(total, 1);
    ParallelRange(outer, grain, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        for (size_t k = 0; k < row_bytes.size(); ++k) {
          // An empty piece may have no buffer: no memcpy from null.
          if (row_bytes[k] > 0) copy(o, k, 0, row_bytes[k]);
        }
      }
    });
    return;
  }
  for (int64_t o = 0; o < outer; ++o) {
    for (size_t k = 0; k < row_bytes.size(); ++k) {
      const int64_t bytes = row_bytes[k];
      ParallelRange((bytes + kCopyChunkBytes - 1) / kCopyChunkBytes, 1,
                    [&](int64_t begin, int64_t end) {
                      copy(o, k, begin * kCopyChunkBytes,
                           std::min(bytes, end * kCopyChunkBytes));
                    });
    }
  }
}

// The offset of each piece's bytes in a joined row, and the row's bytes.
std::vector<int64_t> RowOffsets(absl::Span<const int64_t> row_bytes) {
  std::vector<int64_t> offsets(row_bytes.size() + 1, 0);
  for (size_t k = 0; k < row_bytes.size(); ++k) {
    offsets[k + 1] = offsets[k] + row_bytes[k];
  }
  return offsets;
}

// out[o] = concat(pieces[0][o], pieces[1][o], ...) for each of `outer` rows,
// row o of piece k being row_bytes[k] bytes.
void ConcatRows(absl::Span<const char* const> pieces,
                absl::Span<const int64_t> row_bytes, int64_t outer, char* out) {
  const std::vector<int64_t> at = RowOffsets(row_bytes);
  CopyRowsInParallel(
      row_bytes, outer, [&](int64_t o, size_t k, int64_t begin, int64_t end) {
        std::memcpy(out + o * at.back() + at[k] + begin,
                    pieces[k] + o * row_bytes[k] + begin, end - begin);
      });
}

// The inverse: row o of `in` split into pieces of row_bytes[k] bytes.
void SplitRows(const char* in, absl::Span<const int64_t> row_bytes,
               int64_t outer, absl::Span<char* const> pieces) {
  const std::vector<int64_t> at = RowOffsets(row_bytes);
  CopyRowsInParallel(
      row_bytes, outer, [&](int64_t o, size_t k, int64_t begin, int64_t end) {
        std::memcpy(pieces[k] + o * row_bytes[k] + begin,
                    in + o * at.back() + at[k] + begin, end - begin);
      });
}

// Checks that inputs [0, n) have input 0's dtype and, but for dim `axis`
// when axis >= 0, its shape.
absl::Status RequireSameShapes(const KernelContext& ctx, int n, int axis) {
  const Tensor& x0 = ctx.input(0);
  for (int k = 1; k < n; ++k) {
    RETURN_IF_ERROR(ctx.RequireSameDType(0, k));
    const Tensor& x = ctx.input(k);
    bool same = x.rank() == x0.rank();
    for (int d = 0; same && d < x.rank(); ++d) {
      same = d == axis || x.dim(d) == x0.dim(d);
    }
    if (!same) {
      return ctx.InvalidArgument(
          "values_", k, " has shape ", ShapeString(x.shape()),
          axis >= 0 ? ", which does not match values_0's shape "
                    : ", which is not values_0's shape ",
          ShapeString(x0.shape()),
          axis >= 0 ? absl::StrCat(" but for dim ", axis) : "");
    }
  }
  return absl::OkStatus();
}

// Concatenates inputs [0, n) (checked) along `axis` into `out_shape`.
absl::Status ConcatInto(KernelContext& ctx, int n, int axis,
                        const Shape& out_shape) {
  const Tensor& x0 = ctx.input(0);
  ASSIGN_OR_RETURN(Tensor y, AllocateOutput(ctx, x0.dtype(), out_shape));
  const int64_t elem = static_cast<int64_t>(DTypeSize(x0.dtype()));
  std::vector<const char*> pieces(n);
  std::vector<int64_t> row_bytes(n);
  for (int k = 0; k < n; ++k) {
    const Tensor& x = ctx.input(k);
    pieces[k] = static_cast<const char*>(x.raw_data());
    row_bytes[k] = x.num_elements() == 0
                       ? 0
                       : x.num_elements() / Outer(x.shape(), axis) * elem;
  }
  if (y.num_elements() > 0) {
    ConcatRows(pieces, row_bytes, Outer(out_shape, axis),
               static_cast<char*>(y.raw_mutable_data()));
  }
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// output = concat(values_0 .. values_{N-1}, axis); the last input is axis.
absl::Status ConcatV2Kernel(KernelContext& ctx) {
  const int n = ctx.num_inputs() - 1;
  ASSIGN_OR_RETURN(const int64_t axis_value, ScalarIndex(ctx, n, "axis"));
  const Tensor& x0 = ctx.input(0);
  if (x0.rank() == 0) {
    return ctx.InvalidArgument("cannot concatenate scalars (values_0 is ",
                               x0.DebugString(), "); use Pack");
  }
  ASSIGN_OR_RETURN(const int axis, NormalizeAxis(ctx, axis_value, x0.rank(),
                                                 "axis", x0.shape()));
  RETURN_IF_ERROR(RequireSameShapes(ctx, n, axis));
  Shape out_shape = x0.shape();
  // No overflow: every dim of a tensor is at most its limits' element cap
  // (2^32 by default, well under 2^63 / kMaxListLength).
  for (int k = 1; k < n; ++k) out_shape[axis] += ctx.input(k).dim(axis);
  return ConcatInto(ctx, n, axis, out_shape);
}

// output = stack(values_0 .. values_{N-1}) along a new dim `axis`.
absl::Status PackKernel(KernelContext& ctx) {
  const int n = ctx.num_inputs();
  const Tensor& x0 = ctx.input(0);
  ASSIGN_OR_RETURN(const int axis,
                   NormalizeAxis(ctx, ctx.attrs().Int("axis"), x0.rank() + 1,
                                 "attr axis", x0.shape()));
  RETURN_IF_ERROR(RequireSameShapes(ctx, n, -1));
  Shape out_shape = x0.shape();
  out_shape.insert(out_shape.begin() + axis, n);
  // Each input is an [outer, 1, inner] block of the output.
  Shape block = x0.shape();
  block.insert(block.begin() + axis, 1);
  const int64_t elem = static_cast<int64_t>(DTypeSize(x0.dtype()));
  ASSIGN_OR_RETURN(Tensor y, AllocateOutput(ctx, x0.dtype(), out_shape));
  std::vector<const char*> pieces(n);
  std::vector<int64_t> row_bytes(n, Inner(block, axis) * elem);
  for (int k = 0; k < n; ++k) {
    pieces[k] = static_cast<const char*>(ctx.input(k).raw_data());
  }
  if (y.num_elements() > 0) {
    ConcatRows(pieces, row_bytes, Outer(block, axis),
               static_cast<char*>(y.raw_mutable_data()));
  }
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// Splits `x` along `axis` into pieces of sizes[k] and sets them as outputs,
// each of x's shape with dim `axis` sizes[k] (and without it, `squeeze`).
absl::Status SplitInto(KernelContext& ctx, const Tensor& x, int axis,
                       absl::Span<const int64_t> sizes, bool squeeze) {
  const int64_t elem = static_cast<int64_t>(DTypeSize(x.dtype()));
  const int64_t inner = Inner(x.shape(), axis);
  std::vector<Tensor> outs;
  std::vector<char*> pieces;
  std::vector<int64_t> row_bytes;
  for (int64_t size : sizes) {
    Shape shape = x.shape();
    shape[axis] = size;
    if (squeeze) shape.erase(shape.begin() + axis);
    // Every byte of every piece is copied below.
    ASSIGN_OR_RETURN(Tensor y, AllocateOutput(ctx, x.dtype(), shape));
    pieces.push_back(static_cast<char*>(y.raw_mutable_data()));
    row_bytes.push_back(size * inner * elem);
    outs.push_back(std::move(y));
  }
  if (x.num_elements() > 0) {
    SplitRows(static_cast<const char*>(x.raw_data()), row_bytes,
              Outer(x.shape(), axis), pieces);
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    ctx.set_output(static_cast<int>(k), std::move(outs[k]));
  }
  return absl::OkStatus();
}

// output_0 .. output_{num-1} = value[..., k, ...] along `axis`.
absl::Status UnpackKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (x.rank() == 0) {
    return ctx.InvalidArgument("cannot unpack a scalar (value is ",
                               x.DebugString(), ")");
  }
  ASSIGN_OR_RETURN(const int axis,
                   NormalizeAxis(ctx, ctx.attrs().Int("axis"), x.rank(),
                                 "attr axis", x.shape()));
  const int64_t num = ctx.attrs().Int("num");
  if (x.dim(axis) != num) {
    return ctx.InvalidArgument("attr num ", num, " must equal dim ", axis,
                               " of value ", x.DebugString());
  }
  return SplitInto(ctx, x, axis, std::vector<int64_t>(num, 1), true);
}

// num_split equal pieces of value along split_dim (input 0).
absl::Status SplitKernel(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const int64_t axis_value, ScalarIndex(ctx, 0, "split_dim"));
  const Tensor& x = ctx.input(1);
  ASSIGN_OR_RETURN(const int axis, NormalizeAxis(ctx, axis_value, x.rank(),
                                                 "split_dim", x.shape()));
  const int64_t num = ctx.attrs().Int("num_split");
  if (x.dim(axis) % num != 0) {
    return ctx.InvalidArgument("num_split ", num, " does not divide dim ", axis,
                               " of value ", x.DebugString());
  }
  return SplitInto(ctx, x, axis, std::vector<int64_t>(num, x.dim(axis) / num),
                   false);
}

// The sizes of SplitV's size_splits (input 1) for a dim of `dim`: one -1
// takes the rest.
absl::StatusOr<std::vector<int64_t>> SplitSizes(const KernelContext& ctx,
                                                int64_t dim, int64_t num) {
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  const Tensor& s = ctx.input(1);
  if (s.rank() != 1 || s.dim(0) != num) {
    return ctx.InvalidArgument("size_splits must be 1-D of num_split (", num,
                               ") entries, got shape ", ShapeString(s.shape()));
  }
  std::vector<int64_t> sizes(num);
  int unknown = -1;
  int64_t known = 0;  // no overflow: each entry is checked <= dim first
  for (int64_t k = 0; k < num; ++k) {
    sizes[k] = s.dtype() == DType::kInt32 ? int64_t{s.data<int32_t>()[k]}
                                          : s.data<int64_t>()[k];
    if (sizes[k] == -1 && unknown < 0) {
      unknown = static_cast<int>(k);
    } else if (sizes[k] < 0 || sizes[k] > dim - known) {
      return ctx.InvalidArgument(
          "size_splits[", k, "] = ", sizes[k],
          sizes[k] == -1 ? " is a second -1"
                         : " is negative or runs past the split dim",
          " (size ", dim, ")");
    } else {
      known += sizes[k];
    }
  }
  if (unknown >= 0) sizes[unknown] = dim - known;
  if (unknown < 0 && known != dim) {
    return ctx.InvalidArgument("size_splits sum to ", known,
                               ", not the split dim's size ", dim);
  }
  return sizes;
}

// Pieces of value (input 0) along split_dim (input 2) of size_splits'
// sizes (input 1).
absl::Status SplitVKernel(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const int64_t axis_value, ScalarIndex(ctx, 2, "split_dim"));
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(const int axis, NormalizeAxis(ctx, axis_value, x.rank(),
                                                 "split_dim", x.shape()));
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
                   SplitSizes(ctx, x.dim(axis), ctx.attrs().Int("num_split")));
  return SplitInto(ctx, x, axis, sizes, false);
}

// The output gradients 0..n-1 (zeros where none arrived).
std::vector<Tensor> OutputGrads(GradContext& g, int n) {
  std::vector<Tensor> grads;
  for (int k = 0; k < n; ++k) grads.push_back(g.Grad(k));
  return grads;
}

// dvalues = SplitV(dy, sizes of the values along axis, axis).
void ConcatV2Backward(GradContext& g) {
  const int n = g.num_inputs() - 1;
  const Tensor axis = g.Input(n);
  if (!g.ok()) return;
  const int64_t a = axis.dtype() == DType::kInt32
                        ? int64_t{axis.data<int32_t>()[0]}
                        : axis.data<int64_t>()[0];
  const int rank = static_cast<int>(g.InputShape(0).size());
  if (a < -rank || a >= rank) {  // the forward checked it; a changed tensor
    g.Fail(absl::InvalidArgumentError(
        absl::StrCat("axis ", a, " out of range for rank ", rank)));
    return;
  }
  const int d = static_cast<int>(a < 0 ? a + rank : a);
  std::vector<int64_t> sizes(n);
  for (int k = 0; k < n; ++k) sizes[k] = g.InputShape(k)[d];
  Tensors dx =
      g.OpN("SplitV",
            {g.Grad(0), Tensor::FromVector<int64_t>({int64_t{n}}, sizes), axis},
            {{"num_split", int64_t{n}}});
  if (!g.ok()) return;
  for (int k = 0; k < n; ++k) {
    if (g.NeedsGrad(k)) g.SetGrad(k, dx[k]);
  }
}

// dvalue = ConcatV2(doutputs, split_dim), split_dim being input `axis_input`.
void SplitBackward(GradContext& g, int value_input, int axis_input) {
  const int n = static_cast<int>(g.op().num_outputs());
  std::vector<Tensor> in = OutputGrads(g, n);
  in.push_back(g.Input(axis_input));
  if (!g.ok()) return;
  if (n == 1) {
    g.SetGrad(value_input, in[0]);
    return;
  }
  Tensors dx = g.RunOp("ConcatV2", in, {{"N", int64_t{n}}});
  if (g.ok()) g.SetGrad(value_input, dx[0]);
}

// dvalues = Unpack(dy, num = N, axis).
void PackBackward(GradContext& g) {
  const int n = g.num_inputs();
  Tensors dx = g.OpN("Unpack", {g.Grad(0)},
                     {{"num", int64_t{n}}, {"axis", g.attrs().Int("axis")}});
  if (!g.ok()) return;
  for (int k = 0; k < n; ++k) g.SetGrad(k, dx[k]);
}

// dvalue = Pack(doutputs, axis).
void UnpackBackward(GradContext& g) {
  const int n = static_cast<int>(g.op().num_outputs());
  if (n == 0) {
    g.SetGrad(0, g.Filled(g.InputDType(0), g.InputShape(0), 0));
    return;
  }
  Tensors dx = g.RunOp("Pack", OutputGrads(g, n),
                       {{"N", int64_t{n}}, {"axis", g.attrs().Int("axis")}});
  if (g.ok()) g.SetGrad(0, dx[0]);
}

// All five are linear in their values: the tangents are the op itself run
// on the input tangents (the index inputs as they are).
void LinearJvp(JvpContext& j) {
  const OpDef& op = j.op();
  std::vector<Tensor> in;
  for (int i = 0; i < op.num_inputs(); ++i) {
    in.push_back(op.input_differentiable[i] ? j.Tangent(i) : j.Input(i));
  }
  Tensors out = j.RunOp(op.name, in, j.attrs());
  if (!j.ok()) return;
  for (size_t o = 0; o < out.size(); ++o) {
    j.SetTangent(static_cast<int>(o), out[o]);
  }
}

}  // namespace

void RegisterConcatOps(OpRegistry& r) {
  r.Add(Op("ConcatV2")
            .Inputs({"values", "axis"})
            .ListInput(0, "N", 2)
            .Outputs({"output"})
            .Attr("N", AttrType::kInt)
            .Forward(ConcatV2Kernel)
            // dvalues_k = SplitV(dy, sizes along axis, axis)[k]
            .Backward(ConcatV2Backward)
            .SavesInputs({1})
            .NonDifferentiableInputs({1})
            .Jvp(LinearJvp)
            .Summary("output = values_0 .. values_{N-1} (N >= 2) "
                     "concatenated along axis (int32 or int64 scalar, "
                     "in [-rank, rank))"));
  r.Add(Op("Pack")
            .Inputs({"values"})
            .ListInput(0, "N", 1)
            .Outputs({"output"})
            .Attr("N", AttrType::kInt)
            .Attr("axis", int64_t{0})
            .Forward(PackKernel)
            // dvalues = Unpack(dy, num = N, axis)
            .Backward(PackBackward)
            .Jvp(LinearJvp)
            .Summary("output = values_0 .. values_{N-1} (one shape) stacked "
                     "along a new dim axis (in [-(rank + 1), rank + 1))"));
  r.Add(Op("Unpack")
            .Inputs({"value"})
            .Outputs({"output"})
            .ListOutput("num", 0)
            .Attr("num", AttrType::kInt)
            .Attr("axis", int64_t{0})
            .Forward(UnpackKernel)
            // dvalue = Pack(doutputs, axis), zeros for missing ones
            .Backward(UnpackBackward)
            .Jvp(LinearJvp)
            .Summary("output_k = value[..., k, ...] along axis, for the "
                     "num = dim(axis) values of that dim"));
  r.Add(Op("Split")
            .Inputs({"split_dim", "value"})
            .Outputs({"output"})
            .ListOutput("num_split", 1)
            .Attr("num_split", AttrType::kInt)
            .Forward(SplitKernel)
            // dvalue = ConcatV2(doutputs, split_dim)
            .Backward([](GradContext& g) { SplitBackward(g, 1, 0); })
            .SavesInputs({0})
            .NonDifferentiableInputs({0})
            .OutputDType(DTypeRule::SameAsInput(1))
            .Jvp(LinearJvp)
            .Summary("output_0 .. output_{num_split-1} = value cut into "
                     "num_split equal pieces along split_dim (int32 or "
                     "int64 scalar)"));
  r.Add(Op("SplitV")
            .Inputs({"value", "size_splits", "split_dim"})
            .Outputs({"output"})
            .ListOutput("num_split", 1)
            .Attr("num_split", AttrType::kInt)
            .Forward(SplitVKernel)
            // dvalue = ConcatV2(doutputs, split_dim)
            .Backward([](GradContext& g) { SplitBackward(g, 0, 2); })
            .SavesInputs({2})
            .NonDifferentiableInputs({1, 2})
            .Jvp(LinearJvp)
            .Summary("output_k = the size_splits[k] entries of value along "
                     "split_dim after the previous pieces' (one entry may "
                     "be -1: the rest)"));
}

}  // namespace gradtape
