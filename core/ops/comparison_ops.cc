// Comparisons (Equal, NotEqual, Greater, GreaterEqual, Less, LessEqual:
// bool outputs with numpy broadcasting) and Select.
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
  ASSIGN_OR_RETURN(Tensor z, Allocate(ctx, DType::kBool, shape));
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
  ASSIGN_OR_RETURN(Tensor out, Allocate(ctx, t.dtype(), t.shape()));
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
}

}  // namespace gradtape
