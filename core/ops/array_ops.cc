// Array ops: identity, shapes, layout and dtype changes. Where TensorFlow
// takes a host-side int tensor for a static parameter (Reshape's shape,
// Transpose's perm, BroadcastTo's shape), gradtape takes an attr of the same
// name: a remote client knows it statically, and it saves a tensor.
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <type_traits>

#include "core/autodiff/forward_mode.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {
namespace {

std::vector<int64_t> ToVector(const Shape& s) {
  return std::vector<int64_t>(s.begin(), s.end());
}

absl::Status ReshapeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::vector<int64_t>& requested = ctx.attrs().IntList("shape");
  Shape shape(requested.begin(), requested.end());
  int infer = -1;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (shape[i] == -1 && infer < 0) {
      infer = i;
    } else if (shape[i] < 0) {
      return ctx.InvalidArgument("shape ", ShapeString(requested),
                                 " has a bad dim ", shape[i],
                                 " (at most one -1, others >= 0)");
    }
  }
  // The product of the given dims, checked (a shape past the server's caps
  // cannot match x, which is within them).
  Shape known_dims = shape;
  if (infer >= 0) known_dims[infer] = 1;
  absl::StatusOr<TensorSize> known = CheckedTensorSize(x.dtype(), known_dims);
  if (!known.ok()) {
    return ctx.InvalidArgument("cannot reshape ", x.DebugString(), " to ",
                               ShapeString(requested), ": ",
                               known.status().message());
  }
  int64_t elements = known->elements;
  if (infer >= 0) {
    if (elements == 0 || x.num_elements() % elements != 0) {
      return ctx.InvalidArgument("cannot reshape ", x.DebugString(), " to ",
                                 ShapeString(requested));
    }
    shape[infer] = x.num_elements() / elements;
    elements *= shape[infer];
  }
  if (elements != x.num_elements()) {
    return ctx.InvalidArgument("cannot reshape ", x.DebugString(), " (",
                               x.num_elements(), " elements) to ",
                               ShapeString(requested));
  }
  ctx.set_output(0, x.Reshaped(shape));
  return absl::OkStatus();
}

absl::Status TransposeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::vector<int64_t>& perm_attr = ctx.attrs().IntList("perm");
  const int rank = x.rank();
  std::vector<int64_t> perm = perm_attr;
  if (perm.empty()) {  // Like tf.transpose(x): reverse the dims.
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  std::vector<bool> seen(rank, false);
  bool ok = static_cast<int>(perm.size()) == rank;
  for (int64_t p : perm) {
    ok = ok && p >= 0 && p < rank && !seen[p];
    if (ok) seen[p] = true;
  }
  if (!ok) {
    return ctx.InvalidArgument("perm ", ShapeString(perm),
                               " is not a permutation of the dims of ",
                               x.DebugString());
  }
  ASSIGN_OR_RETURN(Tensor y, Transposed(ctx, x, perm));
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// TensorFlow's Cast: complex -> real keeps the real part, real -> complex
// has a zero imaginary part.
template <typename D, typename S>
D CastValue(S v) {
  if constexpr (kIsComplex<D> && kIsComplex<S>) {
    return D(v.real(), v.imag());
  } else if constexpr (kIsComplex<D>) {
    return D(static_cast<typename D::value_type>(v), 0);
  } else if constexpr (kIsComplex<S>) {
    return CastValue<D>(v.real());
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D> &&
                       !std::is_same_v<D, bool>) {
    // C++ leaves a float past the integer's range undefined: gradtape
    // saturates, and NaN gives 0.
    if (std::isnan(v)) return D(0);
    if (v <= static_cast<S>(std::numeric_limits<D>::min())) {
      return std::numeric_limits<D>::min();
    }
    if (v >= static_cast<S>(std::numeric_limits<D>::max())) {
      return std::numeric_limits<D>::max();
    }
    return static_cast<D>(v);
  } else {
    return static_cast<D>(v);
  }
}

absl::Status CastKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  DType dst = ctx.attrs().Type("DstT");
  if (dst == DType::kInvalid) return ctx.InvalidArgument("DstT is not set");
  ASSIGN_OR_RETURN(Tensor y, AllocateOutput(ctx, dst, x.shape()));
  DispatchAny(x.dtype(), [&](auto from) {
    using S = decltype(from);
    DispatchAny(dst, [&](auto to) {
      using D = decltype(to);
      const S* px = x.data<S>();
      D* py = y.mutable_data<D>();
      ParallelRange(
          x.num_elements(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
            if constexpr (std::is_same_v<S, bool> && std::is_arithmetic_v<D> &&
                          !std::is_same_v<D, bool>) {
              // A bool is one byte holding 0 or 1: read as bytes, which the
              // compiler vectorises (it does not vectorise loads of bool;
              // a dropout mask's Cast was 2.5% of a transformer step).
              const auto* bytes = reinterpret_cast<const uint8_t*>(px);
              for (int64_t i = begin; i < end; ++i) {
                py[i] = static_cast<D>(bytes[i]);
              }
            } else {
              for (int64_t i = begin; i < end; ++i) {
                py[i] = CastValue<D>(px[i]);
              }
            }
          });
    });
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

absl::Status BroadcastToKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const std::vector<int64_t>& shape = ctx.attrs().IntList("shape");
  absl::StatusOr<Shape> b = BroadcastShapes(ctx, x.shape(), shape);
  if (!b.ok() || ToVector(*b) != shape) {
    return ctx.InvalidArgument("cannot broadcast ", x.DebugString(), " to ",
                               ShapeString(shape));
  }
  ASSIGN_OR_RETURN(Tensor y, AllocateOutput(ctx, x.dtype(), shape));
  DispatchAny(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    StridedCopy<T>(shape,
                   BroadcastStrides(x.shape(), static_cast<int>(shape.size())),
                   px, py);
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

absl::Status ShapeKernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const DType out_type = ctx.attrs().Type("out_type");
  if (out_type != DType::kInt32 && out_type != DType::kInt64) {
    return ctx.InvalidArgument("out_type must be int32 or int64, got ",
                               DTypeName(out_type));
  }
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, out_type, {x.rank()}));
  for (int i = 0; i < x.rank(); ++i) {
    if (out_type == DType::kInt64) {
      y.mutable_data<int64_t>()[i] = x.dim(i);
    } else if (x.dim(i) > std::numeric_limits<int32_t>::max()) {
      return ctx.InvalidArgument("dim ", i, " of ", x.DebugString(),
                                 " does not fit out_type int32");
    } else {
      y.mutable_data<int32_t>()[i] = static_cast<int32_t>(x.dim(i));
    }
  }
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// GatherV2's geometry. With B = prod(params.shape[:batch_dims]) (shared by
// indices), params is viewed as [B, outer, limit, inner] (limit: the axis)
// and indices as [B, n]; output [B, outer, n, inner].
struct GatherDims {
  int64_t axis, batch_dims, batch = 1, outer = 1, limit, inner = 1, n = 1;
};

// Resolves axis and batch_dims (negative: from the end, of params / of
// indices) as TensorFlow: 0 <= batch_dims <= axis, batch_dims <=
// rank(indices), and the first batch_dims dims of params and indices agree.
absl::StatusOr<GatherDims> ResolveGather(const KernelContext& ctx,
                                         const Shape& params,
                                         const Shape& indices) {
  const int64_t rank = static_cast<int64_t>(params.size());
  const int64_t irank = static_cast<int64_t>(indices.size());
  GatherDims g;
  g.axis = ctx.attrs().Int("axis");
  g.batch_dims = ctx.attrs().Int("batch_dims");
  if (g.axis < -rank || g.axis >= rank) {
    return ctx.InvalidArgument("axis ", g.axis, " is out of range for params ",
                               ShapeString(params));
  }
  if (g.axis < 0) g.axis += rank;
  if (g.batch_dims < -irank || g.batch_dims > irank) {
    return ctx.InvalidArgument("batch_dims ", g.batch_dims,
                               " is out of range for indices ",
                               ShapeString(indices));
  }
  if (g.batch_dims < 0) g.batch_dims += irank;
  if (g.batch_dims > g.axis) {
    return ctx.InvalidArgument("batch_dims ", g.batch_dims, " must be <= axis ",
                               g.axis);
  }
  for (int64_t d = 0; d < g.batch_dims; ++d) {
    if (params[d] != indices[d]) {
      return ctx.InvalidArgument(
          "params ", ShapeString(params), " and indices ", ShapeString(indices),
          " must agree on the first batch_dims ", g.batch_dims, " dims");
    }
    g.batch *= params[d];
  }
  for (int64_t d = g.batch_dims; d < g.axis; ++d) g.outer *= params[d];
  g.limit = params[g.axis];
  for (int64_t d = g.axis + 1; d < rank; ++d) g.inner *= params[d];
  for (int64_t d = g.batch_dims; d < irank; ++d) g.n *= indices[d];
  return g;
}

// GatherV2: output = params.shape[:axis] + indices.shape[batch_dims:] +
// params.shape[axis+1:], output[b, o, n, i] = params[b, o, indices[b, n], i].
absl::Status GatherV2Kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  const Tensor& params = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  ASSIGN_OR_RETURN(GatherDims g,
                   ResolveGather(ctx, params.shape(), indices.shape()));
  for (int64_t n = 0; n < indices.num_elements(); ++n) {
    const int64_t index = IndexAt(indices, n);
    if (index < 0 || index >= g.limit) {
      return ctx.InvalidArgument(
          "indices[", n, "] = ", index, " is not in [0, ", g.limit, ") (axis ",
          g.axis, " of params ", ShapeString(params.shape()), ")");
    }
  }
  Shape out_shape(params.shape().begin(), params.shape().begin() + g.axis);
  out_shape.insert(out_shape.end(), indices.shape().begin() + g.batch_dims,
                   indices.shape().end());
  out_shape.insert(out_shape.end(), params.shape().begin() + g.axis + 1,
                   params.shape().end());
  if (NumElements(out_shape) < 0) {
    return ctx.InvalidArgument("output shape ", ShapeString(out_shape),
                               " is too large");
  }
  ASSIGN_OR_RETURN(Tensor y, AllocateOutput(ctx, params.dtype(), out_shape));
  DispatchAny(params.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = params.data<T>();
    T* py = y.mutable_data<T>();
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t o = 0; o < g.outer; ++o) {
        const T* slab = px + (b * g.outer + o) * g.limit * g.inner;
        T* to = py + (b * g.outer + o) * g.n * g.inner;
        for (int64_t n = 0; n < g.n; ++n) {
          const T* from = slab + IndexAt(indices, b * g.n + n) * g.inner;
          std::copy(from, from + g.inner, to + n * g.inner);
        }
      }
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// dparams for GatherV2: the rows of dy scattered (summed) back to where they
// were gathered from, with UnsortedSegmentSum over the gather axis (moved to
// the front and back with Transpose). With batch dims, batch b's indices
// are offset by b * limit, so that one segment sum serves every batch.
void GatherV2Grad(GradContext& g) {
  const Shape& params = g.InputShape(0);
  const Tensor indices = g.Input(1);
  if (!g.ok()) return;
  int64_t axis = g.attrs().Int("axis"), b = g.attrs().Int("batch_dims");
  const int64_t rank = static_cast<int64_t>(params.size());
  if (axis < 0) axis += rank;
  if (b < 0) b += indices.rank();
  int64_t batch = 1, outer = 1, inner = 1;
  for (int64_t i = 0; i < b; ++i) batch *= params[i];
  for (int64_t i = b; i < axis; ++i) outer *= params[i];
  for (int64_t i = axis + 1; i < rank; ++i) inner *= params[i];
  const int64_t limit = params[axis];
  const int64_t total = indices.num_elements();
  const int64_t n = batch == 0 ? 0 : total / batch;
  Tensor ids = g.Reshape(indices, {total});
  if (batch > 1) {
    // Made as a tensor, so its memory is charged like any.
    absl::StatusOr<Tensor> shifted = Tensor::Empty(DType::kInt64, {total});
    if (!shifted.ok()) return g.Fail(shifted.status());
    int64_t* out = shifted->mutable_data<int64_t>();
    for (int64_t i = 0; i < total; ++i) {
      out[i] = IndexAt(indices, i) + (i / n) * limit;
    }
    ids = *std::move(shifted);
  }
  // dy as [batch * n, outer, inner]: the gathered rows first.
  Tensor dy = g.Reshape(g.Grad(0), {batch, outer, n, inner});
  if (outer > 1) {
    dy = g.Op("Transpose", {dy}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  }
  Tensor dx = g.Op("UnsortedSegmentSum",
                   {g.Reshape(dy, {batch * n, outer * inner}), ids},
                   {{"num_segments", batch * limit}});
  if (outer > 1) {
    dx = g.Op("Transpose", {g.Reshape(dx, {batch, limit, outer, inner})},
              {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  }
  g.SetGrad(0, g.Reshape(dx, params));
}

// ZerosLike (value 0) and OnesLike (value 1).
Op FilledLike(Op op, double value) {
  return std::move(op.Inputs({"x"})
                       .Outputs({"y"})
                       .Forward([value](KernelContext& ctx) {
                         const Tensor& x = ctx.input(0);
                         ASSIGN_OR_RETURN(
                             Tensor y,
                             AllocateFilled(ctx, x.dtype(), x.shape(), value));
                         ctx.set_output(0, std::move(y));
                         return absl::OkStatus();
                       })
                       .NotDifferentiable());
}

}  // namespace

void RegisterArrayOps(OpRegistry& r) {
  r.Add(Op("Identity")
            .Inputs({"input"})
            .AnyKindInputs({0})
            .Outputs({"output"})
            .Forward([](KernelContext& ctx) {
              ctx.set_output(0, ctx.input(0));
              return absl::OkStatus();
            })
            // dx = dy
            .Backward([](GradContext& g) { g.SetGrad(0, g.Grad(0)); })
            .Jvp([](JvpContext& j) { j.SetTangent(0, j.Tangent(0)); })
            .Summary("output = input (shares the buffer)"));
  r.Add(Op("Reshape")
            .Inputs({"tensor"})
            .Outputs({"output"})
            .Attr("shape", AttrType::kIntList)
            .Forward(ReshapeKernel)
            // dx = reshape(dy, shape(x))
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Reshape(g.Grad(0), g.InputShape(0)));
            })
            .Jvp(LinearUnaryJvp)
            .Summary("same elements, new shape (one dim may be -1)"));
  r.Add(Op("Transpose")
            .Inputs({"x"})
            .Outputs({"y"})
            .Attr("perm", std::vector<int64_t>{})
            .Forward(TransposeKernel)
            // dx = transpose(dy, inverse(perm))
            .Backward([](GradContext& g) {
              std::vector<int64_t> perm = g.attrs().IntList("perm");
              const int rank = static_cast<int>(g.InputShape(0).size());
              if (perm.empty()) {
                for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
              }
              std::vector<int64_t> inverse(rank);
              for (int i = 0; i < rank; ++i) inverse[perm[i]] = i;
              g.SetGrad(0, g.Op("Transpose", {g.Grad(0)},
                                {{"perm", std::move(inverse)}}));
            })
            .Jvp(LinearUnaryJvp)
            .Summary("y.shape[i] = x.shape[perm[i]]; empty perm reverses"));
  r.Add(Op("Cast")
            .Inputs({"x"})
            .Outputs({"y"})
            .Attr("DstT", AttrType::kType)
            .OutputDType(DTypeRule::FromAttr("DstT"))
            .Forward(CastKernel)
            // dx = cast(dy, dtype(x)); no gradient flows into integers
            .Backward([](GradContext& g) {
              if (!IsTrainable(g.OutputDType(0))) return;
              g.SetGrad(0,
                        g.Op("Cast", {g.Grad(0)}, {{"DstT", g.InputDType(0)}}));
            })
            .Summary("y = x converted to DstT"));
  r.Add(Op("BroadcastTo")
            .Inputs({"input"})
            .Outputs({"output"})
            .Attr("shape", AttrType::kIntList)
            .Forward(BroadcastToKernel)
            // dx = dy summed over the broadcast axes
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.SumToShape(g.Grad(0), g.InputShape(0)));
            })
            .Jvp(LinearUnaryJvp)
            .Summary("numpy-broadcasts input to `shape`"));
  // TensorFlow's StopGradient: its output carries no gradient (and no
  // tangent), so the op is not recorded.
  r.Add(Op("StopGradient")
            .Inputs({"input"})
            .Outputs({"output"})
            .Forward([](KernelContext& ctx) {
              ctx.set_output(0, ctx.input(0));
              return absl::OkStatus();
            })
            .NotDifferentiable()
            .Summary("output = input, with no gradient flowing back"));
  // TensorFlow's PreventGradient: recorded, and a gradient through it fails
  // (UNIMPLEMENTED quoting `message`) instead of being silently None.
  r.Add(Op("PreventGradient")
            .Inputs({"input"})
            .Outputs({"output"})
            .Attr("message", std::string())
            .Forward([](KernelContext& ctx) {
              ctx.set_output(0, ctx.input(0));
              return absl::OkStatus();
            })
            .BackwardUnsupported("the gradient is explicitly disabled")
            .Summary("output = input; any gradient through it is an error"));
  r.Add(
      FilledLike(Op("ZerosLike"), 0.0).Summary("zeros of x's shape and dtype"));
  r.Add(FilledLike(Op("OnesLike"), 1.0).Summary("ones of x's shape and dtype"));
  r.Add(Op("Shape")
            .Inputs({"input"})
            .Outputs({"output"})
            .Attr("out_type", DType::kInt32)
            .OutputDType(DTypeRule::FromAttr("out_type"))
            .Forward(ShapeKernel)
            .NotDifferentiable()
            .Summary("the dims of input as a vector of out_type (int32 or "
                     "int64)"));
  r.Add(Op("GatherV2")
            .Inputs({"params", "indices"})
            .Outputs({"output"})
            .Attr("axis", int64_t{0})
            .Attr("batch_dims", int64_t{0})
            .Forward(GatherV2Kernel)
            // dparams = UnsortedSegmentSum(dy, indices) along axis (TF's
            // IndexedSlices gradient, made dense)
            .Backward(GatherV2Grad)
            .SavesInputs({1})
            .NonDifferentiableInputs({1})
            .Summary("output = params gathered at int indices along `axis` "
                     "(TF's axis input is an attr here), the first "
                     "batch_dims dims of params and indices shared; "
                     "out-of-range indices are an error"));
}

}  // namespace gradtape
