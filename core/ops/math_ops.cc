// Math ops: elementwise arithmetic with numpy broadcasting, unary functions
// and their gradient helpers, comparisons and Select, MatMul, reductions and
// scans. Where TensorFlow takes a host int tensor for an axis (Sum, Prod,
// Cumsum, ...), gradtape takes an attr of the same name.
#include <cmath>
#include <string_view>
#include <type_traits>

#include "Eigen/Core"
#include "core/autodiff/forward_mode.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"
#include "core/ops/vector_math.h"

namespace gradtape {
namespace {

Op Unary(const char* name) {
  return std::move(Op(name).Inputs({"x"}).Outputs({"y"}));
}
Op Binary(const char* name) {
  return std::move(Op(name).Inputs({"x", "y"}).Outputs({"z"}));
}
// TensorFlow's *Grad helpers take (y, dy): y the forward output.
Op GradHelper(const char* name) {
  return std::move(Op(name).Inputs({"y", "dy"}).Outputs({"z"}));
}

absl::Status SameShapeBinary(KernelContext& ctx) {
  RETURN_IF_ERROR(ctx.RequireFloat(0));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 1));
  if (ctx.input(0).shape() != ctx.input(1).shape()) {
    return ctx.InvalidArgument("y ", ShapeString(ctx.input(0).shape()),
                               " and dy ", ShapeString(ctx.input(1).shape()),
                               " must have the same shape");
  }
  return absl::OkStatus();
}

// z = f(y, dy) for the *Grad helpers (same shapes, floating).
template <typename F>
absl::Status GradHelperKernel(KernelContext& ctx, F f) {
  RETURN_IF_ERROR(SameShapeBinary(ctx));
  return BinaryKernel<DTypes::kFloating>(ctx, f);
}

// y = f(x) for floating x, with f an array function of vector_math.h
// (f(const T* x, T* y, int64_t n)).
template <typename F>
absl::Status ArrayFloatKernel(KernelContext& ctx, F f) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kFloating));
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, x.dtype(), x.shape()));
  DispatchFloat(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    f(x.data<T>(), y.mutable_data<T>(), x.num_elements());
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

enum class Reduction { kSum, kMean, kProd };

// Sum, Mean or Prod over the attr "axis" (empty: all axes). Prod takes real
// dtypes only (its gradient has no complex form here).
absl::Status ReduceKernel(KernelContext& ctx, Reduction kind) {
  const bool prod = kind == Reduction::kProd;
  RETURN_IF_ERROR(
      RequireDTypes(ctx, 0, prod ? DTypes::kNumeric : DTypes::kArithmetic));
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(std::vector<bool> mask,
                   AxesMask(ctx, ctx.attrs().IntList("axis"), x.shape()));
  const bool keep_dims = ctx.attrs().Bool("keep_dims");
  Shape kept, out_shape;  // kept: reduced dims as 1
  int64_t count = 1;
  for (int i = 0; i < x.rank(); ++i) {
    kept.push_back(mask[i] ? 1 : x.dim(i));
    if (mask[i]) count *= x.dim(i);
    if (!mask[i] || keep_dims) out_shape.push_back(kept.back());
  }
  ASSIGN_OR_RETURN(Tensor y,
                   AllocateFilled(ctx, x.dtype(), out_shape, prod ? 1.0 : 0.0));
  DispatchArithmetic(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    Shape sy = BroadcastStrides(kept, x.rank());
    Shape sx = RowMajorStrides(x.shape());
    if (prod) {
      ForEachStrided(x.shape(), sx, sy,
                     [&](int64_t, int64_t i, int64_t j) { py[j] *= px[i]; });
    } else {
      ForEachStrided(x.shape(), sx, sy,
                     [&](int64_t, int64_t i, int64_t j) { py[j] += px[i]; });
    }
    if (kind == Reduction::kMean && count > 0) {
      for (int64_t j = 0; j < y.num_elements(); ++j) {
        py[j] = static_cast<T>(py[j] / static_cast<T>(count));
      }
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// The reduced-axes mask of a reduction's input from its "axis" attr (the
// forward validated it); empty axis: all.
std::vector<bool> ReducedAxes(GradContext& g) {
  const Shape& in = g.InputShape(0);
  const int64_t rank = static_cast<int64_t>(in.size());
  const auto& axes = g.attrs().IntList("axis");
  std::vector<bool> mask(rank, axes.empty());
  for (int64_t a : axes) mask[a < 0 ? a + rank : a] = true;
  return mask;
}

// dy with the reduced dims kept as 1 (it broadcasts against the input).
Tensor ReductionGradKept(GradContext& g) {
  const Shape& in = g.InputShape(0);
  std::vector<bool> mask = ReducedAxes(g);
  Shape kept;
  for (size_t i = 0; i < in.size(); ++i) kept.push_back(mask[i] ? 1 : in[i]);
  return g.Reshape(g.Grad(0), kept);
}

// Prod's dx / dy: for each element the product of the other elements of its
// reduction group, computed as exclusive cumprods from both ends (exact when
// the group holds zeros, unlike y / x). The reduced axes are moved to the
// front and flattened so the cumprods run along axis 0 of a matrix.
Tensor ProdOthers(GradContext& g) {
  const Shape& in = g.InputShape(0);
  const int rank = static_cast<int>(in.size());
  std::vector<bool> mask = ReducedAxes(g);
  std::vector<int64_t> perm;
  int64_t reduced = 1, other = 1;
  for (int i = 0; i < rank; ++i) {
    if (mask[i]) perm.push_back(i), reduced *= in[i];
  }
  for (int i = 0; i < rank; ++i) {
    if (!mask[i]) perm.push_back(i), other *= in[i];
  }
  bool identity = true;
  Shape permuted_shape;
  std::vector<int64_t> inverse(rank);
  for (int i = 0; i < rank; ++i) {
    identity = identity && perm[i] == i;
    permuted_shape.push_back(in[perm[i]]);
    inverse[perm[i]] = i;
  }
  Tensor x = g.Input(0);
  if (!identity) x = g.Op("Transpose", {x}, {{"perm", perm}});
  x = g.Reshape(x, {reduced, other});
  auto cumprod = [&](bool reverse) {
    return g.Op(
        "Cumprod", {x},
        {{"axis", int64_t{0}}, {"exclusive", true}, {"reverse", reverse}});
  };
  Tensor y = g.Reshape(g.Mul(cumprod(false), cumprod(true)), permuted_shape);
  if (!identity) y = g.Op("Transpose", {y}, {{"perm", inverse}});
  return y;
}

// Cumsum (prod = false) or Cumprod along the attr "axis", TensorFlow's
// exclusive / reverse semantics.
absl::Status ScanKernel(KernelContext& ctx, bool prod) {
  RETURN_IF_ERROR(
      RequireDTypes(ctx, 0, prod ? DTypes::kNumeric : DTypes::kArithmetic));
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  int64_t axis = ctx.attrs().Int("axis");
  if (rank == 0) {
    return ctx.InvalidArgument("x must have rank >= 1, got ", x.DebugString());
  }
  if (axis < -rank || axis >= rank) {
    return ctx.InvalidArgument("axis ", axis, " is out of range for shape ",
                               ShapeString(x.shape()));
  }
  if (axis < 0) axis += rank;
  const bool exclusive = ctx.attrs().Bool("exclusive");
  const bool reverse = ctx.attrs().Bool("reverse");
  const int64_t n = x.dim(axis);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int64_t d = axis + 1; d < rank; ++d) inner *= x.dim(d);
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, x.dtype(), x.shape()));
  if (y.num_elements() == 0) {  // `inner` may be huge: no scratch for it
    ctx.set_output(0, std::move(y));
    return absl::OkStatus();
  }
  DispatchArithmetic(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    std::vector<T> acc(inner);
    for (int64_t o = 0; o < outer; ++o) {
      std::fill(acc.begin(), acc.end(), prod ? T(1) : T(0));
      for (int64_t k = 0; k < n; ++k) {
        const int64_t row = (o * n + (reverse ? n - 1 - k : k)) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const T v = px[row + i];
          if (exclusive) py[row + i] = acc[i];
          acc[i] = prod ? acc[i] * v : acc[i] + v;
          if (!exclusive) py[row + i] = acc[i];
        }
      }
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

template <typename T>
T Conj(T v) {
  if constexpr (std::is_same_v<T, complex64> || std::is_same_v<T, complex128>) {
    return std::conj(v);
  } else {
    return v;
  }
}

// ReciprocalGrad: z = -dy * conj(y)^2 (0 where dy is 0, so an infinite y
// with no gradient flowing gives 0, as TensorFlow's kernel does).
absl::Status ReciprocalGradKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kInexact));
  if (ctx.input(0).shape() != ctx.input(1).shape()) {
    return ctx.InvalidArgument("y ", ctx.input(0).DebugString(), " and dy ",
                               ctx.input(1).DebugString(),
                               " must have the same shape");
  }
  return BinaryKernel<DTypes::kInexact>(ctx, [](auto y, auto dy) {
    using T = decltype(y);
    if (dy == T(0)) return T(0);
    const T cy = Conj(y);
    return -dy * cy * cy;
  });
}

// The gradient of a reduction: dy reshaped with the reduced dims as 1, then
// broadcast to the input's shape.
Tensor ReductionGrad(GradContext& g) {
  const Shape& in = g.InputShape(0);
  return g.Op("BroadcastTo", {ReductionGradKept(g)},
              {{"shape", std::vector<int64_t>(in.begin(), in.end())}});
}

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

template <bool kOrdered, typename F>
void AddComparison(OpRegistry& r, const char* name, F f, const char* summary) {
  r.Add(Binary(name)
            .Forward([f](KernelContext& ctx) {
              return CompareKernel<kOrdered>(ctx, f);
            })
            .NotDifferentiable()
            .Summary(summary));
}

// Comparisons and Select.
void RegisterSelectionOps(OpRegistry& r) {
  AddComparison<false>(
      r, "Equal", [](auto a, auto b) { return a == b; },
      "z = (x == y) as bool, any dtype, with numpy broadcasting");
  AddComparison<false>(
      r, "NotEqual", [](auto a, auto b) { return a != b; },
      "z = (x != y) as bool, any dtype, with numpy broadcasting");
  AddComparison<true>(
      r, "Greater", [](auto a, auto b) { return a > b; },
      "z = (x > y) as bool, real numeric, with numpy broadcasting");
  AddComparison<true>(
      r, "GreaterEqual", [](auto a, auto b) { return a >= b; },
      "z = (x >= y) as bool, real numeric, with numpy broadcasting");
  AddComparison<true>(
      r, "Less", [](auto a, auto b) { return a < b; },
      "z = (x < y) as bool, real numeric, with numpy broadcasting");
  AddComparison<true>(
      r, "LessEqual", [](auto a, auto b) { return a <= b; },
      "z = (x <= y) as bool, real numeric, with numpy broadcasting");
  r.Add(Op("Select")
            .Inputs({"condition", "t", "e"})
            .Outputs({"output"})
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

// Abs, Sign, Expm1, Log1p, Sin, Cos, Tan, Reciprocal (Inv) and ReciprocalGrad.
void RegisterUnaryFunctionOps(OpRegistry& r) {
  r.Add(Unary("Abs")
            .Forward([](KernelContext& ctx) {
              return UnaryKernel<DTypes::kNumeric>(
                  ctx, [](const auto& x) { return x.abs(); });
            })
            // dx = dy * sign(x)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Mul(g.Grad(0), g.Op("Sign", {g.Input(0)})));
            })
            .SavesInputs({0})
            .Summary("y = |x| (real dtypes)"));
  r.Add(Unary("Sign")
            .Forward([](KernelContext& ctx) {
              return UnaryKernel<DTypes::kNumeric>(
                  ctx, [](const auto& x) { return x.sign(); });
            })
            // dx = 0 (TensorFlow's _SignGrad: zeros, not None)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("ZerosLike", {g.Grad(0)}));
            })
            .Summary("y = -1, 0 or 1 as x < 0, x == 0, x > 0 (real dtypes)"));
  r.Add(Unary("Expm1")
            .Forward([](KernelContext& ctx) {
              return UnaryFloatKernel(ctx,
                                      [](const auto& x) { return x.expm1(); });
            })
            // dx = dy * e^x
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Mul(g.Grad(0), g.Op("Exp", {g.Input(0)})));
            })
            .SavesInputs({0})
            .Summary("y = e^x - 1, accurate near 0"));
  r.Add(Unary("Log1p")
            .Forward([](KernelContext& ctx) {
              return UnaryFloatKernel(ctx,
                                      [](const auto& x) { return x.log1p(); });
            })
            // dx = dy / (1 + x)
            .Backward([](GradContext& g) {
              Tensor one = g.Const(1.0, g.InputDType(0));
              g.SetGrad(0, g.Div(g.Grad(0), g.Add(one, g.Input(0))));
            })
            .SavesInputs({0})
            .Summary("y = ln(1 + x), accurate near 0"));
  r.Add(Unary("Sin")
            .Forward([](KernelContext& ctx) {
              return UnaryFloatKernel(ctx,
                                      [](const auto& x) { return x.sin(); });
            })
            // dx = dy * cos(x)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Mul(g.Grad(0), g.Op("Cos", {g.Input(0)})));
            })
            .SavesInputs({0})
            .Summary("y = sin(x)"));
  r.Add(Unary("Cos")
            .Forward([](KernelContext& ctx) {
              return UnaryFloatKernel(ctx,
                                      [](const auto& x) { return x.cos(); });
            })
            // dx = -dy * sin(x)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Neg(g.Mul(g.Grad(0), g.Op("Sin", {g.Input(0)}))));
            })
            .SavesInputs({0})
            .Summary("y = cos(x)"));
  r.Add(Unary("Tan")
            .Forward([](KernelContext& ctx) {
              return UnaryFloatKernel(ctx,
                                      [](const auto& x) { return x.tan(); });
            })
            // dx = dy / cos(x)^2
            .Backward([](GradContext& g) {
              Tensor cos = g.Op("Cos", {g.Input(0)});
              g.SetGrad(0, g.Div(g.Grad(0), g.Op("Square", {cos})));
            })
            .SavesInputs({0})
            .Summary("y = tan(x)"));
  for (const char* name : {"Reciprocal", "Inv"}) {
    r.Add(Unary(name)
              .Forward([](KernelContext& ctx) {
                return UnaryKernel<DTypes::kInexact>(
                    ctx, [](const auto& x) { return x.inverse(); });
              })
              // dx = -dy * conj(y)^2 = ReciprocalGrad(y, dy)
              .Backward([](GradContext& g) {
                g.SetGrad(0, g.Op("ReciprocalGrad", {g.Output(0), g.Grad(0)}));
              })
              .SavesOutputs({0})
              .Summary("y = 1 / x (floating or complex)"));
  }
  r.Add(GradHelper("ReciprocalGrad")
            .Forward(ReciprocalGradKernel)
            // z = -dy conj(y)^2:  d(y) = -2 conj(g) dy conj(y),
            //                     d(dy) = ReciprocalGrad(conj(y), g)
            .Backward([](GradContext& g) {
              Tensor y = g.Input(0), dy = g.Input(1), gz = g.Grad(0);
              Tensor cg = gz;
              if (IsComplex(g.InputDType(0))) {
                y = g.Op("Conj", {y});
                cg = g.Op("Conj", {gz});
              }
              if (g.NeedsGrad(0)) {
                Tensor m2 = g.Const(-2.0, g.InputDType(0));
                g.SetGrad(0, g.Mul(g.Mul(g.Mul(cg, m2), dy), y));
              }
              if (g.NeedsGrad(1)) g.SetGrad(1, g.Op("ReciprocalGrad", {y, gz}));
            })
            .SavesInputs({0, 1})
            .Summary("z = -dy * conj(y)^2 (the gradient of Reciprocal)"));
}

// Maximum / Minimum: dx gets dz where `selector`(x, y) holds (GreaterEqual /
// LessEqual: ties go to x, as in TensorFlow), dy elsewhere; each summed over
// its broadcast axes.
void AddMaxMin(OpRegistry& r, const char* name, const char* selector) {
  const bool max = std::string_view(name) == "Maximum";
  r.Add(Binary(name)
            .Forward([max](KernelContext& ctx) {
              if (max) {
                return BinaryKernel<DTypes::kNumeric>(
                    ctx, [](auto a, auto b) { return a >= b ? a : b; });
              }
              return BinaryKernel<DTypes::kNumeric>(
                  ctx, [](auto a, auto b) { return a <= b ? a : b; });
            })
            // m = x >= y (Maximum) or x <= y (Minimum):
            //   dx = select(m, dz, 0),  dy = select(m, 0, dz)
            .Backward([selector](GradContext& g) {
              Tensor dz = g.Grad(0);
              Tensor mask = g.Op(selector, {g.Input(0), g.Input(1)});
              Tensor zeros = g.Op("ZerosLike", {dz});
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.SumToShape(g.Op("Select", {mask, dz, zeros}),
                                          g.InputShape(0)));
              }
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, g.SumToShape(g.Op("Select", {mask, zeros, dz}),
                                          g.InputShape(1)));
              }
            })
            .SavesInputs({0, 1})
            .Summary(max ? "z = max(x, y), with numpy broadcasting"
                         : "z = min(x, y), with numpy broadcasting"));
}

// Maximum, Minimum, SquaredDifference, L2Loss, Prod, Cumsum, Cumprod.
void RegisterMoreArithmeticOps(OpRegistry& r) {
  AddMaxMin(r, "Maximum", "GreaterEqual");
  AddMaxMin(r, "Minimum", "LessEqual");
  r.Add(Binary("SquaredDifference")
            .Forward([](KernelContext& ctx) {
              return BinaryKernel<DTypes::kNumeric>(
                  ctx, [](auto a, auto b) { return (a - b) * (a - b); });
            })
            // dx = 2 (x - y) dz,  dy = -dx (each summed to its shape)
            .Backward([](GradContext& g) {
              Tensor two = g.Const(2.0, g.InputDType(0));
              Tensor t =
                  g.Mul(g.Mul(two, g.Grad(0)), g.Sub(g.Input(0), g.Input(1)));
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.SumToShape(t, g.InputShape(0)));
              }
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, g.SumToShape(g.Neg(t), g.InputShape(1)));
              }
            })
            .SavesInputs({0, 1})
            .Summary("z = (x - y)^2 (real dtypes), with numpy broadcasting"));
  r.Add(Op("L2Loss")
            .Inputs({"t"})
            .Outputs({"output"})
            .Forward([](KernelContext& ctx) {
              RETURN_IF_ERROR(ctx.RequireFloat(0));
              const Tensor& t = ctx.input(0);
              ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, t.dtype(), {}));
              DispatchFloat(t.dtype(), [&](auto zero) {
                using T = decltype(zero);
                y.mutable_data<T>()[0] = t.flat<T>().square().sum() / T(2);
              });
              ctx.set_output(0, std::move(y));
              return absl::OkStatus();
            })
            // dt = t * dz
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Mul(g.Input(0), g.Grad(0)));
            })
            .SavesInputs({0})
            .Summary("output = sum(t^2) / 2, a scalar"));
  r.Add(Op("Prod")
            .Inputs({"input"})
            .Outputs({"output"})
            .Attr("axis", std::vector<int64_t>{})
            .Attr("keep_dims", false)
            .Forward([](KernelContext& ctx) {
              return ReduceKernel(ctx, Reduction::kProd);
            })
            // dx = broadcast(dy) * (product of the other elements of x's
            // group), by exclusive cumprods so zeros in x are handled
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Mul(ProdOthers(g), ReductionGradKept(g)));
            })
            .SavesInputs({0})
            .Summary("product over `axis` (an attr; empty: all axes), real "
                     "dtypes"));
  for (bool prod : {false, true}) {
    r.Add(Op(prod ? "Cumprod" : "Cumsum")
              .Inputs({"x"})
              .Outputs({"out"})
              .Attr("axis", int64_t{0})
              .Attr("exclusive", false)
              .Attr("reverse", false)
              .Forward(
                  [prod](KernelContext& ctx) { return ScanKernel(ctx, prod); })
              // Cumsum:  dx = cumsum(dy, exclusive, !reverse)
              // Cumprod: dx = cumsum(cumprod(x) * dy, exclusive, !reverse) / x
              //          (TensorFlow's formula: valid where x != 0)
              .Backward([prod](GradContext& g) {
                const AttrMap& a = g.attrs();
                auto scan = [&](const char* op, Tensor t, bool flip) {
                  return g.Op(op, {t},
                              {{"axis", a.Int("axis")},
                               {"exclusive", a.Bool("exclusive")},
                               {"reverse", a.Bool("reverse") != flip}});
                };
                if (!prod) {
                  g.SetGrad(0, scan("Cumsum", g.Grad(0), true));
                  return;
                }
                Tensor x = g.Input(0);
                Tensor t = g.Mul(scan("Cumprod", x, false), g.Grad(0));
                g.SetGrad(0, g.Div(scan("Cumsum", t, true), x));
              })
              .SavesInputs(prod ? std::vector<int>{0} : std::vector<int>{})
              .Summary(prod ? "cumulative product along `axis` (an attr), "
                              "real dtypes; exclusive / reverse as in "
                              "TensorFlow"
                            : "cumulative sum along `axis` (an attr); "
                              "exclusive / reverse as in TensorFlow"));
  }
}

}  // namespace

void RegisterMathOps(OpRegistry& r) {
  RegisterSelectionOps(r);
  RegisterUnaryFunctionOps(r);
  RegisterMoreArithmeticOps(r);
  auto add = [](auto a, auto b) { return a + b; };
  for (const char* name : {"AddV2", "Add"}) {
    r.Add(Binary(name)
              .Forward([add](KernelContext& ctx) {
                return BinaryKernel<DTypes::kArithmetic>(ctx, add);
              })
              // dx = dy, dy' = dy (each summed over its broadcast axes)
              .Backward([](GradContext& g) {
                for (int i = 0; i < 2; ++i) {
                  if (g.NeedsGrad(i)) {
                    g.SetGrad(i, g.SumToShape(g.Grad(0), g.InputShape(i)));
                  }
                }
              })
              // tz = tx + ty
              .Jvp([](JvpContext& j) {
                j.SetTangent(0, j.Add(j.Tangent(0), j.Tangent(1)));
              })
              .Summary("z = x + y, with numpy broadcasting"));
  }
  r.Add(Binary("Sub")
            .Forward([](KernelContext& ctx) {
              return BinaryKernel<DTypes::kArithmetic>(
                  ctx, [](auto a, auto b) { return a - b; });
            })
            // dx = dz, dy = -dz
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.SumToShape(g.Grad(0), g.InputShape(0)));
              }
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, g.SumToShape(g.Neg(g.Grad(0)), g.InputShape(1)));
              }
            })
            // tz = tx - ty
            .Jvp([](JvpContext& j) {
              j.SetTangent(0, j.Sub(j.Tangent(0), j.Tangent(1)));
            })
            .Summary("z = x - y, with numpy broadcasting"));
  r.Add(Binary("Mul")
            .Forward([](KernelContext& ctx) {
              return BinaryKernel<DTypes::kArithmetic>(
                  ctx, [](auto a, auto b) { return a * b; });
            })
            // dx = dz * conj(y), dy = dz * conj(x)  (conj: complex only)
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.SumToShape(g.Mul(g.Grad(0), g.Conj(g.Input(1))),
                                          g.InputShape(0)));
              }
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, g.SumToShape(g.Mul(g.Grad(0), g.Conj(g.Input(0))),
                                          g.InputShape(1)));
              }
            })
            .SavesInputs({0, 1})
            // tz = tx * y + x * ty (each term broadcasts to z's shape)
            .Jvp([](JvpContext& j) {
              Tensor a, b;
              if (j.HasTangent(0)) a = j.Mul(j.Tangent(0), j.Input(1));
              if (j.HasTangent(1)) b = j.Mul(j.Input(0), j.Tangent(1));
              j.SetTangent(0, !a.valid() ? b : !b.valid() ? a : j.Add(a, b));
            })
            .Summary("z = x * y, with numpy broadcasting"));
  for (const char* name : {"RealDiv", "Div"}) {
    r.Add(Binary(name)
              .Forward([](KernelContext& ctx) {
                return BinaryKernel<DTypes::kInexact>(
                    ctx, [](auto a, auto b) { return a / b; });
              })
              // dx = dz / conj(y), dy = -dz * conj(x) / conj(y)^2
              .Backward([](GradContext& g) {
                Tensor x = g.Conj(g.Input(0)), y = g.Conj(g.Input(1));
                Tensor dz = g.Grad(0);
                if (g.NeedsGrad(0)) {
                  g.SetGrad(0, g.SumToShape(g.Div(dz, y), g.InputShape(0)));
                }
                if (g.NeedsGrad(1)) {
                  Tensor t = g.Div(g.Div(g.Mul(dz, x), y), y);
                  g.SetGrad(1, g.SumToShape(g.Neg(t), g.InputShape(1)));
                }
              })
              .SavesInputs({0, 1})
              // tz = tx / y - z * ty / y
              .Jvp([](JvpContext& j) {
                Tensor y = j.Input(1), t;
                if (j.HasTangent(0)) t = j.Div(j.Tangent(0), y);
                if (j.HasTangent(1)) {
                  Tensor u = j.Div(j.Mul(j.Output(0), j.Tangent(1)), y);
                  t = t.valid() ? j.Sub(t, u) : j.Neg(u);
                }
                j.SetTangent(0, t);
              })
              .Summary("z = x / y (floating or complex), with numpy "
                       "broadcasting"));
  }
  r.Add(Unary("Neg")
            .Forward([](KernelContext& ctx) {
              return UnaryKernel<DTypes::kArithmetic>(
                  ctx, [](const auto& x) { return -x; });
            })
            // dx = -dy
            .Backward([](GradContext& g) { g.SetGrad(0, g.Neg(g.Grad(0))); })
            .Jvp(LinearUnaryJvp)  // ty = -tx
            .Summary("y = -x"));
  r.Add(Unary("Square")
            .Forward([](KernelContext& ctx) {
              return UnaryFloatKernel(ctx, [](const auto& x) { return x * x; });
            })
            // dx = dy * 2x
            .Backward([](GradContext& g) {
              Tensor two = g.Const(2.0, g.InputDType(0));
              g.SetGrad(0, g.Mul(g.Grad(0), g.Mul(two, g.Input(0))));
            })
            .SavesInputs({0})
            // ty = 2x * tx
            .Jvp([](JvpContext& j) {
              Tensor two = j.Const(2.0, j.Input(0).dtype());
              j.SetTangent(0, j.Mul(j.Mul(two, j.Input(0)), j.Tangent(0)));
            })
            .Summary("y = x^2"));
  r.Add(Unary("Sqrt")
            .Forward([](KernelContext& ctx) {
              return UnaryFloatKernel(ctx,
                                      [](const auto& x) { return x.sqrt(); });
            })
            // dx = dy * 0.5 / y
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("SqrtGrad", {g.Output(0), g.Grad(0)}));
            })
            .SavesOutputs({0})
            // ty = 0.5 tx / y
            .Jvp([](JvpContext& j) {
              j.SetTangent(0, j.Op("SqrtGrad", {j.Output(0), j.Tangent(0)}));
            })
            .Summary("y = sqrt(x)"));
  r.Add(GradHelper("SqrtGrad")
            .Forward([](KernelContext& ctx) {
              return GradHelperKernel(ctx, [](auto y, auto dy) {
                return static_cast<decltype(y)>(0.5) * dy / y;
              });
            })
            // z = 0.5 dy / y:  dy' = 0.5 g / y,  d(y) = -g z / y
            .Backward([](GradContext& g) {
              Tensor ga = g.Div(g.Grad(0), g.Input(0));
              if (g.NeedsGrad(0)) g.SetGrad(0, g.Neg(g.Mul(ga, g.Output(0))));
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, g.Mul(g.Const(0.5, g.InputDType(0)), ga));
              }
            })
            .SavesInputs({0})
            .SavesOutputs({0})
            .Summary("z = 0.5 * dy / y (the gradient of Sqrt)"));
  r.Add(Unary("Exp")
            .Forward([](KernelContext& ctx) {
              return ArrayFloatKernel(ctx, [](const auto* x, auto* y,
                                              int64_t n) { VecExp(x, y, n); });
            })
            // dx = dy * y
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Mul(g.Grad(0), g.Output(0)));
            })
            .SavesOutputs({0})
            // ty = tx * y
            .Jvp([](JvpContext& j) {
              j.SetTangent(0, j.Mul(j.Tangent(0), j.Output(0)));
            })
            .Summary("y = e^x"));
  r.Add(Unary("Log")
            .Forward([](KernelContext& ctx) {
              return ArrayFloatKernel(ctx, [](const auto* x, auto* y,
                                              int64_t n) { VecLog(x, y, n); });
            })
            // dx = dy / x
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Div(g.Grad(0), g.Input(0)));
            })
            .SavesInputs({0})
            // ty = tx / x
            .Jvp([](JvpContext& j) {
              j.SetTangent(0, j.Div(j.Tangent(0), j.Input(0)));
            })
            .Summary("y = ln(x)"));
  r.Add(Unary("Tanh")
            .Forward([](KernelContext& ctx) {
              return UnaryFloatKernel(ctx,
                                      [](const auto& x) { return x.tanh(); });
            })
            // dx = dy * (1 - y^2)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("TanhGrad", {g.Output(0), g.Grad(0)}));
            })
            .SavesOutputs({0})
            // ty = tx * (1 - y^2)
            .Jvp([](JvpContext& j) {
              j.SetTangent(0, j.Op("TanhGrad", {j.Output(0), j.Tangent(0)}));
            })
            .Summary("y = tanh(x)"));
  r.Add(GradHelper("TanhGrad")
            .Forward([](KernelContext& ctx) {
              return GradHelperKernel(ctx, [](auto y, auto dy) {
                return dy * (static_cast<decltype(y)>(1) - y * y);
              });
            })
            // z = dy (1 - y^2):  d(y) = -2 g dy y,  d(dy) = g (1 - y^2)
            .Backward([](GradContext& g) {
              Tensor y = g.Input(0), dy = g.Input(1), gz = g.Grad(0);
              if (g.NeedsGrad(0)) {
                Tensor m2 = g.Const(-2.0, g.InputDType(0));
                g.SetGrad(0, g.Mul(g.Mul(m2, g.Mul(gz, dy)), y));
              }
              if (g.NeedsGrad(1)) g.SetGrad(1, g.Op("TanhGrad", {y, gz}));
            })
            .SavesInputs({0, 1})
            .Summary("z = dy * (1 - y^2) (the gradient of Tanh)"));
  r.Add(Unary("Sigmoid")
            .Forward([](KernelContext& ctx) {
              return ArrayFloatKernel(ctx,
                                      [](const auto* x, auto* y, int64_t n) {
                                        VecSigmoid(x, y, n);
                                      });
            })
            // dx = dy * y * (1 - y)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("SigmoidGrad", {g.Output(0), g.Grad(0)}));
            })
            .SavesOutputs({0})
            // ty = tx * y * (1 - y)
            .Jvp([](JvpContext& j) {
              j.SetTangent(0, j.Op("SigmoidGrad", {j.Output(0), j.Tangent(0)}));
            })
            .Summary("y = 1 / (1 + e^-x)"));
  r.Add(GradHelper("SigmoidGrad")
            .Forward([](KernelContext& ctx) {
              return GradHelperKernel(ctx, [](auto y, auto dy) {
                return dy * y * (static_cast<decltype(y)>(1) - y);
              });
            })
            // z = dy y (1 - y):  d(y) = g dy (1 - 2y),  d(dy) = g y (1 - y)
            .Backward([](GradContext& g) {
              Tensor y = g.Input(0), dy = g.Input(1), gz = g.Grad(0);
              if (g.NeedsGrad(0)) {
                DType t = g.InputDType(0);
                Tensor one_minus_2y =
                    g.Sub(g.Const(1.0, t), g.Mul(g.Const(2.0, t), y));
                g.SetGrad(0, g.Mul(g.Mul(gz, dy), one_minus_2y));
              }
              if (g.NeedsGrad(1)) g.SetGrad(1, g.Op("SigmoidGrad", {y, gz}));
            })
            .SavesInputs({0, 1})
            .Summary("z = dy * y * (1 - y) (the gradient of Sigmoid)"));
  r.Add(Op("MatMul")
            .Inputs({"a", "b"})
            .Outputs({"product"})
            .Attr("transpose_a", false)
            .Attr("transpose_b", false)
            .Forward(MatMulKernel)
            // C = op(A) op(B):  dA = dC B^T,  dB = A^T dC  (with transposes
            // folded into the MatMul attrs)
            .Backward([](GradContext& g) {
              const bool ta = g.attrs().Bool("transpose_a");
              const bool tb = g.attrs().Bool("transpose_b");
              Tensor a = g.Input(0), b = g.Input(1), dc = g.Grad(0);
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
            .Summary("product = op(a) @ op(b) for 2-D a, b"));
  for (bool mean : {false, true}) {
    r.Add(Op(mean ? "Mean" : "Sum")
              .Inputs({"input"})
              .Outputs({"output"})
              .Attr("axis", std::vector<int64_t>{})
              .Attr("keep_dims", false)
              .Forward([mean](KernelContext& ctx) {
                return ReduceKernel(ctx,
                                    mean ? Reduction::kMean : Reduction::kSum);
              })
              // Sum: dx = broadcast(dy);  Mean: dx = broadcast(dy) / count
              .Backward([mean](GradContext& g) {
                Tensor dx = ReductionGrad(g);
                if (mean && g.ok()) {
                  const int64_t count =
                      NumElements(g.InputShape(0)) /
                      std::max<int64_t>(1, NumElements(g.OutputShape(0)));
                  dx = g.Div(
                      dx, g.Const(static_cast<double>(count), g.InputDType(0)));
                }
                g.SetGrad(0, dx);
              })
              .Jvp(LinearUnaryJvp)  // linear: ty = reduce(tx)
              .Summary(mean ? "mean over `axis` (empty: all axes)"
                            : "sum over `axis` (empty: all axes)"));
  }
}

}  // namespace gradtape
