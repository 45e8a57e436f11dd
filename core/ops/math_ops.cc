// Math ops: elementwise arithmetic with numpy broadcasting, unary functions
// and their gradient helpers, MatMul, reductions.
#include <cmath>

#include "Eigen/Core"
#include "core/gradient.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

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
  if (absl::Status s = ctx.RequireFloat(0); !s.ok()) return s;
  if (absl::Status s = ctx.RequireSameDType(0, 1); !s.ok()) return s;
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
  if (absl::Status s = SameShapeBinary(ctx); !s.ok()) return s;
  return BinaryKernel<DTypes::kFloating>(ctx, f);
}

absl::Status MatMulKernel(KernelContext& ctx) {
  if (absl::Status s = ctx.RequireFloat(0); !s.ok()) return s;
  if (absl::Status s = ctx.RequireSameDType(0, 1); !s.ok()) return s;
  if (absl::Status s = ctx.RequireRank(0, 2); !s.ok()) return s;
  if (absl::Status s = ctx.RequireRank(1, 2); !s.ok()) return s;
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const bool ta = ctx.attrs().Bool("transpose_a");
  const bool tb = ctx.attrs().Bool("transpose_b");
  const int64_t m = ta ? a.dim(1) : a.dim(0);
  const int64_t k = ta ? a.dim(0) : a.dim(1);
  const int64_t kb = tb ? b.dim(1) : b.dim(0);
  const int64_t n = tb ? b.dim(0) : b.dim(1);
  if (k != kb) {
    return ctx.InvalidArgument(
        "inner dimensions do not match: a is ", ShapeString(a.shape()),
        ta ? " (transposed)" : "", ", b is ", ShapeString(b.shape()),
        tb ? " (transposed)" : "", "; a's ", ta ? "rows" : "columns", " (", k,
        ") must equal b's ", tb ? "columns" : "rows", " (", kb, ")");
  }
  Tensor c = Tensor::Empty(a.dtype(), {m, n});
  DispatchFloat(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    using Matrix =
        Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    Eigen::Map<const Matrix> ma(a.data<T>(), a.dim(0), a.dim(1));
    Eigen::Map<const Matrix> mb(b.data<T>(), b.dim(0), b.dim(1));
    Eigen::Map<Matrix> mc(c.mutable_data<T>(), m, n);
    if (!ta && !tb) mc.noalias() = ma * mb;
    if (!ta && tb) mc.noalias() = ma * mb.transpose();
    if (ta && !tb) mc.noalias() = ma.transpose() * mb;
    if (ta && tb) mc.noalias() = ma.transpose() * mb.transpose();
  });
  ctx.set_output(0, std::move(c));
  return absl::OkStatus();
}

// Sum (mean = false) or Mean over the attr "axis" (empty: all axes).
absl::Status ReduceKernel(KernelContext& ctx, bool mean) {
  if (absl::Status s = RequireDTypes(ctx, 0, DTypes::kArithmetic); !s.ok()) {
    return s;
  }
  const Tensor& x = ctx.input(0);
  absl::StatusOr<std::vector<bool>> mask =
      AxesMask(ctx, ctx.attrs().IntList("axis"), x.shape());
  if (!mask.ok()) return mask.status();
  const bool keep_dims = ctx.attrs().Bool("keep_dims");
  Shape kept, out_shape;  // kept: reduced dims as 1
  int64_t count = 1;
  for (int i = 0; i < x.rank(); ++i) {
    kept.push_back((*mask)[i] ? 1 : x.dim(i));
    if ((*mask)[i]) count *= x.dim(i);
    if (!(*mask)[i] || keep_dims) out_shape.push_back(kept.back());
  }
  Tensor y = Tensor::Zeros(x.dtype(), out_shape);
  DispatchArithmetic(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    Shape sy = BroadcastStrides(kept, x.rank());
    Shape sx = RowMajorStrides(x.shape());
    ForEachStrided(x.shape(), sx, sy,
                   [&](int64_t, int64_t i, int64_t j) { py[j] += px[i]; });
    if (mean && count > 0) {
      for (int64_t j = 0; j < y.num_elements(); ++j) {
        py[j] = static_cast<T>(py[j] / static_cast<T>(count));
      }
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// The gradient of a reduction: dy reshaped with the reduced dims as 1, then
// broadcast to the input's shape.
Tensor ReductionGrad(GradContext& g) {
  const Shape& in = g.InputShape(0);
  std::vector<bool> mask(in.size(), false);
  const auto& axes = g.attrs().IntList("axis");
  const int64_t rank = static_cast<int64_t>(in.size());
  for (int64_t a : axes) mask[a < 0 ? a + rank : a] = true;
  Shape kept;
  for (int64_t i = 0; i < rank; ++i) {
    kept.push_back(mask[i] || axes.empty() ? 1 : in[i]);
  }
  Tensor dy = g.Reshape(g.Grad(0), kept);
  return g.Op("BroadcastTo", {dy},
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
    if (absl::Status s = RequireDTypes(ctx, 0, DTypes::kNumeric); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = ctx.RequireSameDType(0, 1); !s.ok()) return s;
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  absl::StatusOr<Shape> shape = BroadcastShapes(ctx, a.shape(), b.shape());
  if (!shape.ok()) return shape.status();
  Tensor z = Tensor::Empty(DType::kBool, *shape);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    bool* pz = z.mutable_data<bool>();
    ForEachBroadcast(
        *shape, a.shape(), b.shape(),
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
  if (absl::Status s = ctx.RequireSameDType(1, 2); !s.ok()) return s;
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
  Tensor out = Tensor::Empty(t.dtype(), t.shape());
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

}  // namespace

void RegisterMathOps(OpRegistry& r) {
  RegisterSelectionOps(r);
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
            .Summary("z = x - y, with numpy broadcasting"));
  r.Add(Binary("Mul")
            .Forward([](KernelContext& ctx) {
              return BinaryKernel<DTypes::kArithmetic>(
                  ctx, [](auto a, auto b) { return a * b; });
            })
            // dx = dz * y, dy = dz * x
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.SumToShape(g.Mul(g.Grad(0), g.Input(1)),
                                          g.InputShape(0)));
              }
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, g.SumToShape(g.Mul(g.Grad(0), g.Input(0)),
                                          g.InputShape(1)));
              }
            })
            .SavesInputs({0, 1})
            .Summary("z = x * y, with numpy broadcasting"));
  for (const char* name : {"RealDiv", "Div"}) {
    r.Add(Binary(name)
              .Forward([](KernelContext& ctx) {
                return BinaryKernel<DTypes::kInexact>(
                    ctx, [](auto a, auto b) { return a / b; });
              })
              // dx = dz / y, dy = -dz * x / y^2
              .Backward([](GradContext& g) {
                Tensor x = g.Input(0), y = g.Input(1), dz = g.Grad(0);
                if (g.NeedsGrad(0)) {
                  g.SetGrad(0, g.SumToShape(g.Div(dz, y), g.InputShape(0)));
                }
                if (g.NeedsGrad(1)) {
                  Tensor t = g.Div(g.Div(g.Mul(dz, x), y), y);
                  g.SetGrad(1, g.SumToShape(g.Neg(t), g.InputShape(1)));
                }
              })
              .SavesInputs({0, 1})
              .Summary("z = x / y (floating), with numpy broadcasting"));
  }
  r.Add(Unary("Neg")
            .Forward([](KernelContext& ctx) {
              return UnaryKernel<DTypes::kArithmetic>(
                  ctx, [](const auto& x) { return -x; });
            })
            // dx = -dy
            .Backward([](GradContext& g) { g.SetGrad(0, g.Neg(g.Grad(0))); })
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
              return UnaryFloatKernel(ctx,
                                      [](const auto& x) { return x.exp(); });
            })
            // dx = dy * y
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Mul(g.Grad(0), g.Output(0)));
            })
            .SavesOutputs({0})
            .Summary("y = e^x"));
  r.Add(Unary("Log")
            .Forward([](KernelContext& ctx) {
              return UnaryFloatKernel(ctx,
                                      [](const auto& x) { return x.log(); });
            })
            // dx = dy / x
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Div(g.Grad(0), g.Input(0)));
            })
            .SavesInputs({0})
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
              return UnaryFloatKernel(ctx, [](const auto& x) {
                using T = typename std::decay_t<decltype(x)>::Scalar;
                return (T(1) + (-x).exp()).inverse();
              });
            })
            // dx = dy * y * (1 - y)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("SigmoidGrad", {g.Output(0), g.Grad(0)}));
            })
            .SavesOutputs({0})
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
            .Summary("product = op(a) @ op(b) for 2-D a, b"));
  for (bool mean : {false, true}) {
    r.Add(Op(mean ? "Mean" : "Sum")
              .Inputs({"input"})
              .Outputs({"output"})
              .Attr("axis", std::vector<int64_t>{})
              .Attr("keep_dims", false)
              .Forward([mean](KernelContext& ctx) {
                return ReduceKernel(ctx, mean);
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
              .Summary(mean ? "mean over `axis` (empty: all axes)"
                            : "sum over `axis` (empty: all axes)"));
  }
}

}  // namespace gradtape
