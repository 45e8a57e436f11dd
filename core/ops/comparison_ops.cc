// Comparisons (Equal, NotEqual, Greater, GreaterEqual, Less, LessEqual:
// bool outputs with numpy broadcasting), Select, and the three-input ops
// with numpy broadcasting of all three: SelectV2 and ClipByValue.
#include <algorithm>

#include "core/autodiff/forward_mode.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {
namespace {

// Calls fn(out_index, a_index, b_index) over the numpy broadcast `shape` of
// inputs shaped `a` and `b`, with fast paths for equal shapes and scalars.
template <typename Fn>
void ForEachBroadcast(const Shape& shape, const Shape& a, const Shape& b,
                      Fn&& fn) {
  const int64_t n = NumElements(shape);
  const int64_t na = NumElements(a), nb = NumElements(b);
  if (na == n && nb == n) {
    for (int64_t i = 0; i < n; ++i) fn(i, i, i);
  } else if (nb == 1 && na == n) {
    for (int64_t i = 0; i < n; ++i) fn(i, i, 0);
  } else if (na == 1 && nb == n) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0, i);
  } else {
    const int rank = static_cast<int>(shape.size());
    ForEachStrided(shape, BroadcastStrides(a, rank), BroadcastStrides(b, rank),
                   fn);
  }
}

// z = f(x, y) as bool with numpy broadcasting. kOrdered: the comparison
// needs an order (real numeric dtypes); otherwise any dtype (==, !=).
template <bool kOrdered, typename F>
absl::Status CompareKernel(KernelContext& ctx, F f) {
  if constexpr (kOrdered) {
    RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kNumeric));
  }
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 1));
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(ctx, a.shape(), b.shape()));
  ASSIGN_OR_RETURN(Tensor z, AllocateOutput(ctx, DType::kBool, shape));
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    bool* pz = z.mutable_data<bool>();
    ForEachBroadcast(
        shape, a.shape(), b.shape(),
        [&](int64_t o, int64_t i, int64_t j) { pz[o] = f(pa[i], pb[j]); });
  };
  if constexpr (kOrdered) {
    DispatchNumeric(a.dtype(), run);
  } else {
    DispatchAny(a.dtype(), run);
  }
  ctx.set_output(0, std::move(z));
  return absl::OkStatus();
}

// TensorFlow's Select (v1): condition has t's shape, or is a scalar, or is a
// vector choosing whole rows along t's first dim; t and e have one shape.
absl::Status SelectKernel(KernelContext& ctx) {
  const Tensor& c = ctx.input(0);
  const Tensor& t = ctx.input(1);
  const Tensor& e = ctx.input(2);
  if (c.dtype() != DType::kBool) {
    return ctx.InvalidArgument("condition must be bool, got ", c.DebugString());
  }
  RETURN_IF_ERROR(ctx.RequireSameDType(1, 2));
  if (t.shape() != e.shape()) {
    return ctx.InvalidArgument("t ", t.DebugString(), " and e ",
                               e.DebugString(), " must have the same shape");
  }
  // Elements of t (and e) chosen by each element of the condition.
  int64_t block = 0;
  if (c.shape() == t.shape()) {
    block = 1;
  } else if (c.rank() == 0) {
    block = t.num_elements();
  } else if (c.rank() == 1 && t.rank() >= 1 && c.dim(0) == t.dim(0)) {
    block = t.dim(0) == 0 ? 0 : t.num_elements() / t.dim(0);
  } else {
    return ctx.InvalidArgument("condition ", c.DebugString(),
                               " must be a scalar, have the shape of t ",
                               t.DebugString(),
                               ", or be a vector of the size of t's first dim");
  }
  ASSIGN_OR_RETURN(Tensor out, AllocateOutput(ctx, t.dtype(), t.shape()));
  DispatchAny(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const bool* pc = c.data<bool>();
    const T* pt = t.data<T>();
    const T* pe = e.data<T>();
    T* po = out.mutable_data<T>();
    for (int64_t k = 0; k < c.num_elements(); ++k) {
      const T* src = (pc[k] ? pt : pe) + k * block;
      std::copy(src, src + block, po + k * block);
    }
  });
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

// Calls fn(out_index, a_index, b_index, c_index) over the numpy broadcast
// `shape` of inputs shaped `a`, `b` and `c`, in row-major order.
template <typename Fn>
void ForEachBroadcast3(const Shape& shape, const Shape& a, const Shape& b,
                       const Shape& c, Fn&& fn) {
  const int rank = static_cast<int>(shape.size());
  const int64_t n = NumElements(shape);
  const Shape sa = BroadcastStrides(a, rank), sb = BroadcastStrides(b, rank),
              sc = BroadcastStrides(c, rank);
  Shape index(rank, 0);
  int64_t ia = 0, ib = 0, ic = 0;
  for (int64_t o = 0; o < n; ++o) {
    fn(o, ia, ib, ic);
    for (int d = rank - 1; d >= 0; --d) {  // the odometer
      ia += sa[d], ib += sb[d], ic += sc[d];
      if (++index[d] < shape[d]) break;
      ia -= sa[d] * shape[d], ib -= sb[d] * shape[d], ic -= sc[d] * shape[d];
      index[d] = 0;
    }
  }
}

// The numpy broadcast of inputs 0, 1 and 2's shapes, or INVALID_ARGUMENT
// naming the three inputs and shapes.
absl::StatusOr<Shape> BroadcastShape3(const KernelContext& ctx) {
  absl::StatusOr<Shape> s =
      BroadcastShapes(ctx, ctx.input(0).shape(), ctx.input(1).shape());
  if (s.ok()) s = BroadcastShapes(ctx, *s, ctx.input(2).shape());
  if (s.ok()) return s;
  const auto& names = ctx.op().input_names;
  return ctx.InvalidArgument(
      names[0], " ", ShapeString(ctx.input(0).shape()), ", ", names[1], " ",
      ShapeString(ctx.input(1).shape()), " and ", names[2], " ",
      ShapeString(ctx.input(2).shape()), " do not broadcast together");
}

// SelectV2: output = condition ? t : e elementwise, the three broadcast.
absl::Status SelectV2Kernel(KernelContext& ctx) {
  const Tensor& c = ctx.input(0);
  const Tensor& t = ctx.input(1);
  const Tensor& e = ctx.input(2);
  if (c.dtype() != DType::kBool) {
    return ctx.InvalidArgument("condition must be bool, got ", c.DebugString());
  }
  RETURN_IF_ERROR(ctx.RequireSameDType(1, 2));
  ASSIGN_OR_RETURN(Shape shape, BroadcastShape3(ctx));
  ASSIGN_OR_RETURN(Tensor out, AllocateOutput(ctx, t.dtype(), shape));
  DispatchAny(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const bool* pc = c.data<bool>();
    const T* pt = t.data<T>();
    const T* pe = e.data<T>();
    T* po = out.mutable_data<T>();
    ForEachBroadcast3(shape, c.shape(), t.shape(), e.shape(),
                      [&](int64_t o, int64_t i, int64_t j, int64_t k) {
                        po[o] = pc[i] ? pt[j] : pe[k];
                      });
  });
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

// ClipByValue: output = max(min(t, clip_value_max), clip_value_min)
// elementwise (TensorFlow's order: min wins when min > max); the bounds
// broadcast to t's shape, which is the output's.
absl::Status ClipByValueKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kNumeric));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 1));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 2));
  const Tensor& t = ctx.input(0);
  const Tensor& lo = ctx.input(1);
  const Tensor& hi = ctx.input(2);
  ASSIGN_OR_RETURN(Shape shape, BroadcastShape3(ctx));
  if (shape != t.shape()) {
    return ctx.InvalidArgument("clip_value_min ", ShapeString(lo.shape()),
                               " and clip_value_max ", ShapeString(hi.shape()),
                               " must broadcast to the shape of t ",
                               ShapeString(t.shape()));
  }
  ASSIGN_OR_RETURN(Tensor out, AllocateOutput(ctx, t.dtype(), shape));
  DispatchNumeric(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pt = t.data<T>();
    const T* pl = lo.data<T>();
    const T* ph = hi.data<T>();
    T* po = out.mutable_data<T>();
    ForEachBroadcast3(shape, t.shape(), lo.shape(), hi.shape(),
                      [&](int64_t o, int64_t i, int64_t j, int64_t k) {
                        const T v = pt[i] > ph[k] ? ph[k] : pt[i];
                        po[o] = v < pl[j] ? pl[j] : v;
                      });
  });
  ctx.set_output(0, std::move(out));
  return absl::OkStatus();
}

// TensorFlow's _ClipByValueGrad: dt = dz where min <= t <= max, else 0;
// dmin = dz where t < min, dmax = dz where t > max (0 elsewhere), each
// summed to its input's shape.
void ClipByValueBackward(GradContext& g) {
  Tensor t = g.Input(0), dz = g.Grad(0);
  Tensor zero = g.Const(0.0, g.InputDType(0));
  Tensor below = g.Op("Less", {t, g.Input(1)});
  Tensor above = g.Op("Greater", {t, g.Input(2)});
  if (g.NeedsGrad(0)) {
    Tensor inside = g.Op("SelectV2", {above, zero, dz});
    g.SetGrad(0, g.Op("SelectV2", {below, zero, inside}));
  }
  if (g.NeedsGrad(1)) {
    g.SetGrad(
        1, g.SumToShape(g.Op("SelectV2", {below, dz, zero}), g.InputShape(1)));
  }
  if (g.NeedsGrad(2)) {
    g.SetGrad(
        2, g.SumToShape(g.Op("SelectV2", {above, dz, zero}), g.InputShape(2)));
  }
}

// A comparison: z = f(x, y) as bool; not differentiable.
template <bool kOrdered, typename F>
Op Comparison(Op op, F f, const char* summary) {
  return std::move(op.Inputs({"x", "y"})
                       .Outputs({"z"})
                       .OutputDType(DTypeRule::Fixed(DType::kBool))
                       .Forward([f](KernelContext& ctx) {
                         return CompareKernel<kOrdered>(ctx, f);
                       })
                       .NotDifferentiable()
                       .Summary(summary));
}

}  // namespace

void RegisterComparisonOps(OpRegistry& r) {
  r.Add(Comparison<false>(
      Op("Equal"), [](auto a, auto b) { return a == b; },
      "z = (x == y) as bool, any dtype, with numpy broadcasting"));
  r.Add(Comparison<false>(
      Op("NotEqual"), [](auto a, auto b) { return a != b; },
      "z = (x != y) as bool, any dtype, with numpy broadcasting"));
  r.Add(Comparison<true>(
      Op("Greater"), [](auto a, auto b) { return a > b; },
      "z = (x > y) as bool, real numeric, with numpy broadcasting"));
  r.Add(Comparison<true>(
      Op("GreaterEqual"), [](auto a, auto b) { return a >= b; },
      "z = (x >= y) as bool, real numeric, with numpy broadcasting"));
  r.Add(Comparison<true>(
      Op("Less"), [](auto a, auto b) { return a < b; },
      "z = (x < y) as bool, real numeric, with numpy broadcasting"));
  r.Add(Comparison<true>(
      Op("LessEqual"), [](auto a, auto b) { return a <= b; },
      "z = (x <= y) as bool, real numeric, with numpy broadcasting"));
  r.Add(Op("Select")
            .Inputs({"condition", "t", "e"})
            .Outputs({"output"})
            .OutputDType(DTypeRule::SameAsInput(1))
            .Forward(SelectKernel)
            // dt = select(c, dz, 0), de = select(c, 0, dz)
            .Backward([](GradContext& g) {
              Tensor c = g.Input(0), dz = g.Grad(0);
              Tensor zeros = g.Op("ZerosLike", {dz});
              if (g.NeedsGrad(1)) g.SetGrad(1, g.Op("Select", {c, dz, zeros}));
              if (g.NeedsGrad(2)) g.SetGrad(2, g.Op("Select", {c, zeros, dz}));
            })
            .SavesInputs({0})
            .NonDifferentiableInputs({0})
            .Summary("output = condition ? t : e; condition is bool with t's "
                     "shape, a scalar, or a vector over t's first dim"));
  r.Add(Op("SelectV2")
            .Inputs({"condition", "t", "e"})
            .Outputs({"output"})
            .OutputDType(DTypeRule::SameAsInput(1))
            .Forward(SelectV2Kernel)
            // TensorFlow's _SelectGradV2: dt = select(c, dz, 0),
            // de = select(c, 0, dz), each summed to its input's shape
            .Backward([](GradContext& g) {
              Tensor c = g.Input(0), dz = g.Grad(0);
              Tensor zero = g.Const(0.0, g.InputDType(1));
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, g.SumToShape(g.Op("SelectV2", {c, dz, zero}),
                                          g.InputShape(1)));
              }
              if (g.NeedsGrad(2)) {
                g.SetGrad(2, g.SumToShape(g.Op("SelectV2", {c, zero, dz}),
                                          g.InputShape(2)));
              }
            })
            .SavesInputs({0})
            .NonDifferentiableInputs({0})
            .Summary("output = condition ? t : e elementwise, with numpy "
                     "broadcasting of all three"));
  r.Add(Op("ClipByValue")
            .Inputs({"t", "clip_value_min", "clip_value_max"})
            .Outputs({"output"})
            .Forward(ClipByValueKernel)
            // dt = dz inside [min, max]; dmin / dmax = dz where t was
            // clipped to them (each summed to its input's shape)
            .Backward(ClipByValueBackward)
            .SavesInputs({0, 1, 2})
            .Summary("output = max(min(t, clip_value_max), clip_value_min), "
                     "the bounds broadcast to t's shape"));
}

}  // namespace gradtape
