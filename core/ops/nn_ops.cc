// NN ops: activations, BiasAdd, softmax and the sparse cross-entropy loss.
// Softmax-like ops work over the last axis (TensorFlow's default).
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <variant>

#include "core/autodiff/forward_mode.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"

namespace gradtape {
namespace {

// Views x as [rows, cols] with cols the last dim.
struct Rows {
  int64_t rows, cols;
};
Rows LastAxisRows(const Tensor& x) {
  int64_t cols = x.rank() == 0 ? 1 : x.dim(x.rank() - 1);
  return {cols == 0 ? 0 : x.num_elements() / cols, cols};
}

absl::Status SoftmaxKernel(KernelContext& ctx, bool log) {
  RETURN_IF_ERROR(ctx.RequireFloat(0));
  const Tensor& x = ctx.input(0);
  if (x.rank() < 1) {
    return ctx.InvalidArgument("logits must have rank >= 1, got ",
                               x.DebugString());
  }
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, x.dtype(), x.shape()));
  Rows r = LastAxisRows(x);
  DispatchFloat(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    for (int64_t i = 0; i < r.rows; ++i) {
      const T* in = px + i * r.cols;
      T* out = py + i * r.cols;
      T max = in[0];
      for (int64_t j = 1; j < r.cols; ++j) max = std::max(max, in[j]);
      T sum = 0;
      for (int64_t j = 0; j < r.cols; ++j) sum += std::exp(in[j] - max);
      const T log_sum = std::log(sum);
      for (int64_t j = 0; j < r.cols; ++j) {
        out[j] = log ? in[j] - max - log_sum : std::exp(in[j] - max) / sum;
      }
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

absl::Status SparseXentKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(ctx.RequireFloat(0));
  RETURN_IF_ERROR(ctx.RequireRank(0, 2));
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  RETURN_IF_ERROR(ctx.RequireRank(1, 1));
  const Tensor& logits = ctx.input(0);
  const Tensor& labels = ctx.input(1);
  const int64_t batch = logits.dim(0), classes = logits.dim(1);
  if (labels.dim(0) != batch) {
    return ctx.InvalidArgument("labels ", labels.DebugString(),
                               " must have one entry per row of features ",
                               logits.DebugString());
  }
  for (int64_t i = 0; i < batch; ++i) {
    int64_t label = static_cast<int64_t>(labels.ElementAsDouble(i));
    if (label < 0 || label >= classes) {
      return ctx.InvalidArgument("label ", label, " at index ", i,
                                 " is outside [0, ", classes, ")");
    }
  }
  ASSIGN_OR_RETURN(Tensor loss, Allocate(ctx, logits.dtype(), {batch}));
  ASSIGN_OR_RETURN(Tensor backprop,
                   Allocate(ctx, logits.dtype(), logits.shape()));
  DispatchFloat(logits.dtype(), [&](auto zero) {
    using T = decltype(zero);
    for (int64_t i = 0; i < batch; ++i) {
      const T* in = logits.data<T>() + i * classes;
      T* bp = backprop.mutable_data<T>() + i * classes;
      const int64_t label = static_cast<int64_t>(labels.ElementAsDouble(i));
      T max = in[0];
      for (int64_t j = 1; j < classes; ++j) max = std::max(max, in[j]);
      T sum = 0;
      for (int64_t j = 0; j < classes; ++j) sum += std::exp(in[j] - max);
      const T log_sum = std::log(sum);
      loss.mutable_data<T>()[i] = log_sum - (in[label] - max);
      for (int64_t j = 0; j < classes; ++j) {
        bp[j] = std::exp(in[j] - max) / sum - (j == label ? T(1) : T(0));
      }
    }
  });
  ctx.set_output(0, std::move(loss));
  ctx.set_output(1, std::move(backprop));
  return absl::OkStatus();
}

// The bias ops take the channels last: data_format (if the op has it) must
// be NHWC.
absl::Status RequireChannelsLast(const KernelContext& ctx) {
  const AttrValue* format = ctx.attrs().Find("data_format");
  if (format == nullptr || std::get<std::string>(*format) == "NHWC") {
    return absl::OkStatus();
  }
  return ctx.InvalidArgument("data_format '", std::get<std::string>(*format),
                             "' is not supported (only NHWC)");
}

// BiasAdd and BiasAddV1 (which has no data_format attr).
absl::Status BiasAddKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(RequireChannelsLast(ctx));
  RETURN_IF_ERROR(ctx.RequireRank(1, 1));
  const Tensor& value = ctx.input(0);
  const Tensor& bias = ctx.input(1);
  if (value.rank() < 1 || value.dim(value.rank() - 1) != bias.dim(0)) {
    return ctx.InvalidArgument("bias ", bias.DebugString(),
                               " must match the last dim of value ",
                               value.DebugString());
  }
  return BinaryKernel<DTypes::kNumeric>(ctx,
                                        [](auto a, auto b) { return a + b; });
}

absl::Status BiasAddGradKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(RequireChannelsLast(ctx));
  RETURN_IF_ERROR(ctx.RequireNumeric(0));
  const Tensor& dy = ctx.input(0);
  if (dy.rank() < 1) {
    return ctx.InvalidArgument("out_backprop must have rank >= 1, got ",
                               dy.DebugString());
  }
  Rows r = LastAxisRows(dy);
  ASSIGN_OR_RETURN(Tensor db, Allocate(ctx, dy.dtype(), {r.cols}));
  DispatchNumeric(dy.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = dy.data<T>();
    T* out = db.mutable_data<T>();
    for (int64_t i = 0; i < r.rows; ++i) {
      for (int64_t j = 0; j < r.cols; ++j) out[j] += p[i * r.cols + j];
    }
  });
  ctx.set_output(0, std::move(db));
  return absl::OkStatus();
}

// OneHot: depth inserted into indices.shape at `axis` (-1: last).
// output[p, k, s] = on_value where indices[p, s] == k, else off_value.
absl::Status OneHotKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(ctx.RequireIndexDType(0));
  const Tensor& indices = ctx.input(0);
  const int64_t depth = ctx.attrs().Int("depth");
  DType dtype = ctx.attrs().Type("T");
  if (depth < 0) return ctx.InvalidArgument("depth ", depth, " is negative");
  if (!IsFloating(dtype)) {
    return ctx.InvalidArgument("T must be float32 or float64, got ",
                               DTypeName(dtype));
  }
  const int64_t rank = indices.rank();
  int64_t axis = ctx.attrs().Int("axis");
  if (axis < -1 || axis > rank) {
    return ctx.InvalidArgument("axis ", axis, " must be -1 or in [0, ", rank,
                               "] for indices of shape ",
                               ShapeString(indices.shape()));
  }
  if (axis == -1) axis = rank;
  Shape shape = indices.shape();
  shape.insert(shape.begin() + axis, depth);
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, dtype, shape));
  int64_t suffix = 1;
  for (int64_t d = axis; d < rank; ++d) suffix *= indices.dim(d);
  const double off = ctx.attrs().Float("off_value");
  const double on = ctx.attrs().Float("on_value");
  DispatchFloat(dtype, [&](auto zero) {
    using T = decltype(zero);
    y.flat<T>().setConstant(static_cast<T>(off));
    T* p = y.mutable_data<T>();
    for (int64_t i = 0; i < indices.num_elements(); ++i) {
      int64_t k = static_cast<int64_t>(indices.ElementAsDouble(i));
      if (k < 0 || k >= depth) continue;
      const int64_t outer = i / suffix, inner = i % suffix;
      p[(outer * depth + k) * suffix + inner] = static_cast<T>(on);
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// sum(x, last axis, keep_dims)
Tensor SumLast(GradContext& g, Tensor x) {
  return g.Op("Sum", {x},
              {{"axis", std::vector<int64_t>{-1}}, {"keep_dims", true}});
}

// SELU's constants (Klambauer et al. 2017), as in TensorFlow's kernel.
constexpr double kSeluScale = 1.0507009873554804934193349852946;
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;

// y = f(x) elementwise for a floating x, f a scalar function.
template <typename F>
absl::Status ActivationKernel(KernelContext& ctx, F f) {
  return UnaryFloatKernel(ctx, [f](const auto& x) {
    using T = typename std::decay_t<decltype(x)>::Scalar;
    return x.unaryExpr([f](T v) { return f(v); });
  });
}

// The activation *Grad helpers: z = f(gradients, other) for floating inputs
// of one shape (other: the features or the outputs of the forward op).
template <typename F>
absl::Status ActivationGradKernel(KernelContext& ctx, F f) {
  RETURN_IF_ERROR(ctx.RequireFloat(0));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 1));
  if (ctx.input(0).shape() != ctx.input(1).shape()) {
    return ctx.InvalidArgument(
        ctx.op().input_names[0], " ", ctx.input(0).DebugString(), " and ",
        ctx.op().input_names[1], " ", ctx.input(1).DebugString(),
        " must have the same shape");
  }
  return BinaryKernel<DTypes::kFloating>(ctx, f);
}

Op Activation(Op op) {
  return std::move(op.Inputs({"features"}).Outputs({"activations"}));
}
// (gradients, features) or (gradients, outputs) -> backprops.
Op ActivationGrad(Op op, const char* second) {
  return std::move(op.Inputs({"gradients", second}).Outputs({"backprops"}));
}

// The second-order part shared by EluGrad and SeluGrad, whose z depends on
// the saved outputs y only where y < 0, there as gradients * y:
//   d(outputs) = select(y < 0, gz * gradients, 0)
Tensor ExpLinearOutputsGrad(GradContext& g) {
  Tensor y = g.Input(1), gz = g.Grad(0);
  Tensor negative = g.Op("Less", {y, g.Const(0.0, g.InputDType(1))});
  return g.Op("Select",
              {negative, g.Mul(gz, g.Input(0)), g.Op("ZerosLike", {gz})});
}

// Relu, Relu6, Elu, Selu, Softplus, Softsign and their *Grad ops.
void RegisterActivations(OpRegistry& r) {
  r.Add(Activation(Op("Relu"))
            .Forward([](KernelContext& ctx) {
              return UnaryFloatKernel(ctx, [](const auto& x) {
                using T = typename std::decay_t<decltype(x)>::Scalar;
                return x.max(T(0));
              });
            })
            // dx = dy * (y > 0)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("ReluGrad", {g.Grad(0), g.Output(0)}));
            })
            // ty = tx * (y > 0)
            .Jvp([](JvpContext& j) {
              j.SetTangent(0, j.Op("ReluGrad", {j.Tangent(0), j.Output(0)}));
            })
            .SavesOutputs({0})
            .Summary("max(features, 0)"));
  r.Add(ActivationGrad(Op("ReluGrad"), "features")
            .Forward([](KernelContext& ctx) {
              if (ctx.input(0).shape() != ctx.input(1).shape()) {
                return ctx.InvalidArgument(
                    "gradients ", ctx.input(0).DebugString(), " and features ",
                    ctx.input(1).DebugString(), " must have the same shape");
              }
              return BinaryKernel<DTypes::kFloating>(ctx, [](auto dy, auto y) {
                return y > 0 ? dy : decltype(dy)(0);
              });
            })
            // z = g * (y > 0):  d(g) = ReluGrad(gz, y); features: zero a.e.
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.Op("ReluGrad", {g.Grad(0), g.Input(1)}));
              }
            })
            .SavesInputs({1})
            .Summary("gradients * (features > 0) (the gradient of Relu)"));
  r.Add(Activation(Op("Relu6"))
            .Forward([](KernelContext& ctx) {
              return ActivationKernel(ctx, [](auto x) {
                using T = decltype(x);
                return std::min(std::max(x, T(0)), T(6));
              });
            })
            // dx = dy * (0 < x < 6)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("Relu6Grad", {g.Grad(0), g.Input(0)}));
            })
            .SavesInputs({0})
            .Summary("min(max(features, 0), 6)"));
  r.Add(ActivationGrad(Op("Relu6Grad"), "features")
            .Forward([](KernelContext& ctx) {
              return ActivationGradKernel(ctx, [](auto dy, auto x) {
                using T = decltype(dy);
                return x > T(0) && x < T(6) ? dy : T(0);
              });
            })
            // z = g * (0 < x < 6):  d(g) = Relu6Grad(gz, x),  d(x) = 0
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.Op("Relu6Grad", {g.Grad(0), g.Input(1)}));
              }
              if (g.NeedsGrad(1)) g.SetGrad(1, g.Op("ZerosLike", {g.Grad(0)}));
            })
            .SavesInputs({1})
            .Summary("gradients * (0 < features < 6) (the gradient of "
                     "Relu6)"));
  r.Add(Activation(Op("Elu"))
            .Forward([](KernelContext& ctx) {
              return ActivationKernel(ctx, [](auto x) {
                return x > decltype(x)(0) ? x : std::expm1(x);
              });
            })
            // dx = dy * (y < 0 ? y + 1 : 1)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("EluGrad", {g.Grad(0), g.Output(0)}));
            })
            .SavesOutputs({0})
            .Summary("features > 0 ? features : e^features - 1"));
  r.Add(ActivationGrad(Op("EluGrad"), "outputs")
            .Forward([](KernelContext& ctx) {
              return ActivationGradKernel(ctx, [](auto dy, auto y) {
                using T = decltype(dy);
                return y < T(0) ? dy * (y + T(1)) : dy;
              });
            })
            // z = y < 0 ? g (y + 1) : g:  d(g) = EluGrad(gz, y),
            //   d(y) = select(y < 0, gz * g, 0)
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.Op("EluGrad", {g.Grad(0), g.Input(1)}));
              }
              if (g.NeedsGrad(1)) g.SetGrad(1, ExpLinearOutputsGrad(g));
            })
            .SavesInputs({0, 1})
            .Summary("gradients * (outputs < 0 ? outputs + 1 : 1) (the "
                     "gradient of Elu, from its outputs)"));
  r.Add(Activation(Op("Selu"))
            .Forward([](KernelContext& ctx) {
              return ActivationKernel(ctx, [](auto x) {
                using T = decltype(x);
                return x < T(0) ? T(kSeluScale * kSeluAlpha) * std::expm1(x)
                                : T(kSeluScale) * x;
              });
            })
            // dx = dy * (y < 0 ? y + scale * alpha : scale)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("SeluGrad", {g.Grad(0), g.Output(0)}));
            })
            .SavesOutputs({0})
            .Summary("scale * (features > 0 ? features : alpha * "
                     "(e^features - 1)), TensorFlow's constants"));
  r.Add(ActivationGrad(Op("SeluGrad"), "outputs")
            .Forward([](KernelContext& ctx) {
              return ActivationGradKernel(ctx, [](auto dy, auto y) {
                using T = decltype(dy);
                return y < T(0) ? dy * (y + T(kSeluScale * kSeluAlpha))
                                : dy * T(kSeluScale);
              });
            })
            // z = y < 0 ? g (y + scale alpha) : g scale:
            //   d(g) = SeluGrad(gz, y),  d(y) = select(y < 0, gz * g, 0)
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.Op("SeluGrad", {g.Grad(0), g.Input(1)}));
              }
              if (g.NeedsGrad(1)) g.SetGrad(1, ExpLinearOutputsGrad(g));
            })
            .SavesInputs({0, 1})
            .Summary("gradients * (outputs < 0 ? outputs + scale * alpha : "
                     "scale) (the gradient of Selu, from its outputs)"));
  r.Add(Activation(Op("Softplus"))
            .Forward([](KernelContext& ctx) {
              // max(x, 0) + log(1 + e^-|x|): no overflow for large |x|.
              return ActivationKernel(ctx, [](auto x) {
                using T = decltype(x);
                return std::max(x, T(0)) + std::log1p(std::exp(-std::abs(x)));
              });
            })
            // dx = dy * sigmoid(x)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("SoftplusGrad", {g.Grad(0), g.Input(0)}));
            })
            .SavesInputs({0})
            .Summary("log(1 + e^features)"));
  r.Add(ActivationGrad(Op("SoftplusGrad"), "features")
            .Forward([](KernelContext& ctx) {
              return ActivationGradKernel(ctx, [](auto dy, auto x) {
                using T = decltype(dy);
                return dy / (T(1) + std::exp(-x));
              });
            })
            // z = g sigmoid(x):  d(g) = SoftplusGrad(gz, x),
            //   d(x) = gz * g / (e^-x + 2 + e^x)
            .Backward([](GradContext& g) {
              Tensor dy = g.Input(0), x = g.Input(1), gz = g.Grad(0);
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.Op("SoftplusGrad", {gz, x}));
              }
              if (g.NeedsGrad(1)) {
                Tensor denom = g.Add(g.Add(g.Op("Exp", {g.Neg(x)}),
                                           g.Const(2.0, g.InputDType(1))),
                                     g.Op("Exp", {x}));
                g.SetGrad(1, g.Div(g.Mul(gz, dy), denom));
              }
            })
            .SavesInputs({0, 1})
            .Summary("gradients / (1 + e^-features) (the gradient of "
                     "Softplus)"));
  r.Add(Activation(Op("Softsign"))
            .Forward([](KernelContext& ctx) {
              return ActivationKernel(ctx, [](auto x) {
                return x / (decltype(x)(1) + std::abs(x));
              });
            })
            // dx = dy / (1 + |x|)^2
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("SoftsignGrad", {g.Grad(0), g.Input(0)}));
            })
            .SavesInputs({0})
            .Summary("features / (1 + |features|)"));
  r.Add(ActivationGrad(Op("SoftsignGrad"), "features")
            .Forward([](KernelContext& ctx) {
              return ActivationGradKernel(ctx, [](auto dy, auto x) {
                using T = decltype(dy);
                const T d = T(1) + std::abs(x);
                return dy / (d * d);
              });
            })
            // z = g / (1 + |x|)^2:  d(g) = SoftsignGrad(gz, x),
            //   d(x) = -2 gz g sign(x) / (1 + |x|)^3
            .Backward([](GradContext& g) {
              Tensor dy = g.Input(0), x = g.Input(1), gz = g.Grad(0);
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.Op("SoftsignGrad", {gz, x}));
              }
              if (g.NeedsGrad(1)) {
                DType t = g.InputDType(1);
                Tensor d = g.Add(g.Const(1.0, t), g.Op("Abs", {x}));
                Tensor d3 = g.Mul(g.Mul(d, d), d);
                Tensor num = g.Mul(g.Mul(g.Const(-2.0, t), g.Mul(gz, dy)),
                                   g.Op("Sign", {x}));
                g.SetGrad(1, g.Div(num, d3));
              }
            })
            .SavesInputs({0, 1})
            .Summary("gradients / (1 + |features|)^2 (the gradient of "
                     "Softsign)"));
}

}  // namespace

void RegisterNnOps(OpRegistry& r) {
  RegisterActivations(r);
  // dvalue = dy, dbias = sum of dy over all but the last axis
  auto bias_add_backward = [](GradContext& g) {
    if (g.NeedsGrad(0)) g.SetGrad(0, g.Grad(0));
    if (g.NeedsGrad(1)) g.SetGrad(1, g.Op("BiasAddGrad", {g.Grad(0)}));
  };
  r.Add(Op("BiasAdd")
            .Inputs({"value", "bias"})
            .Outputs({"output"})
            .Attr("data_format", std::string("NHWC"))
            .Forward(BiasAddKernel)
            .Backward(bias_add_backward)
            .Summary("value + bias, bias along the last axis (data_format "
                     "NHWC only)"));
  r.Add(Op("BiasAddV1")
            .Inputs({"value", "bias"})
            .Outputs({"output"})
            .Forward(BiasAddKernel)
            .Backward(bias_add_backward)
            .Summary("value + bias, bias along the last axis (BiasAdd "
                     "without data_format)"));
  r.Add(Op("BiasAddGrad")
            .Inputs({"out_backprop"})
            .Outputs({"output"})
            .Attr("data_format", std::string("NHWC"))
            .Forward(BiasAddGradKernel)
            // dx = broadcast of dy along the leading axes
            .Backward([](GradContext& g) {
              const Shape& in = g.InputShape(0);
              Shape row(in.size(), 1);
              row.back() = in.back();
              Tensor dy = g.Reshape(g.Grad(0), row);
              g.SetGrad(0, g.Op("BroadcastTo", {dy},
                                {{"shape", std::vector<int64_t>(in.begin(),
                                                                in.end())}}));
            })
            .Summary("sum over all but the last axis (the gradient of "
                     "BiasAdd)"));
  r.Add(
      Op("Softmax")
          .Inputs({"logits"})
          .Outputs({"softmax"})
          .Forward([](KernelContext& ctx) { return SoftmaxKernel(ctx, false); })
          // dx = (dy - sum(dy * y, -1)) * y
          .Backward([](GradContext& g) {
            Tensor y = g.Output(0), dy = g.Grad(0);
            g.SetGrad(0, g.Mul(g.Sub(dy, SumLast(g, g.Mul(dy, y))), y));
          })
          .SavesOutputs({0})
          .Summary("softmax over the last axis"));
  r.Add(
      Op("LogSoftmax")
          .Inputs({"logits"})
          .Outputs({"logsoftmax"})
          .Forward([](KernelContext& ctx) { return SoftmaxKernel(ctx, true); })
          // dx = dy - sum(dy, -1) * exp(y)
          .Backward([](GradContext& g) {
            Tensor y = g.Output(0), dy = g.Grad(0);
            g.SetGrad(0, g.Sub(dy, g.Mul(SumLast(g, dy), g.Op("Exp", {y}))));
          })
          .SavesOutputs({0})
          .Summary("log of softmax over the last axis"));
  r.Add(Op("SparseSoftmaxCrossEntropyWithLogits")
            .Inputs({"features", "labels"})
            .Outputs({"loss", "backprop"})
            .Forward(SparseXentKernel)
            // backprop = softmax(x) - onehot(labels) = s - e:
            //   dx = dloss[:, None] * backprop
            //      + (dbackprop - sum(dbackprop * s, -1)) * s   (second order)
            .Backward([](GradContext& g) {
              Tensor bp = g.Output(1);
              const Shape& shape = g.OutputShape(1);
              Tensor dloss = g.Reshape(g.Grad(0), {shape[0], 1});
              Tensor dx = g.Mul(dloss, bp);
              if (g.HasGrad(1)) {
                Tensor onehot =
                    g.Op("OneHot", {g.Input(1)},
                         {{"depth", shape[1]}, {"T", g.OutputDType(1)}});
                Tensor s = g.Add(bp, onehot);
                Tensor gb = g.Grad(1);
                dx = g.Add(dx, g.Mul(g.Sub(gb, SumLast(g, g.Mul(gb, s))), s));
              }
              g.SetGrad(0, dx);
            })
            .SavesInputs({1})
            .SavesOutputs({1})
            .NonDifferentiableInputs({1})
            .Summary("per-row cross-entropy of softmax(features) against "
                     "integer labels, and its gradient"));
  r.Add(Op("OneHot")
            .Inputs({"indices"})
            .Outputs({"output"})
            .Attr("depth", AttrType::kInt)
            .Attr("T", DType::kFloat32)
            .OutputDType(DTypeRule::FromAttr("T"))
            .Attr("on_value", 1.0)
            .Attr("off_value", 0.0)
            .Attr("axis", int64_t{-1})
            .Forward(OneHotKernel)
            .NotDifferentiable()
            .Summary("indices -> one-hot vectors of `depth` along `axis` "
                     "(-1: last; any in [0, rank]); out of range: all "
                     "off_value"));
}

}  // namespace gradtape
