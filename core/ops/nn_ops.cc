// NN ops: activations, BiasAdd, softmax and the sparse cross-entropy loss.
// Softmax-like ops work over the last axis (TensorFlow's default).
#include <cmath>

#include "core/gradient.h"
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
  if (absl::Status s = ctx.RequireFloat(0); !s.ok()) return s;
  const Tensor& x = ctx.input(0);
  if (x.rank() < 1) {
    return ctx.InvalidArgument("logits must have rank >= 1, got ",
                               x.DebugString());
  }
  Tensor y = Tensor::Empty(x.dtype(), x.shape());
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
  if (absl::Status s = ctx.RequireFloat(0); !s.ok()) return s;
  if (absl::Status s = ctx.RequireRank(0, 2); !s.ok()) return s;
  if (absl::Status s = ctx.RequireIndexDType(1); !s.ok()) return s;
  if (absl::Status s = ctx.RequireRank(1, 1); !s.ok()) return s;
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
  Tensor loss = Tensor::Empty(logits.dtype(), {batch});
  Tensor backprop = Tensor::Empty(logits.dtype(), logits.shape());
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

absl::Status BiasAddKernel(KernelContext& ctx) {
  if (absl::Status s = ctx.RequireRank(1, 1); !s.ok()) return s;
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
  if (absl::Status s = ctx.RequireNumeric(0); !s.ok()) return s;
  const Tensor& dy = ctx.input(0);
  if (dy.rank() < 1) {
    return ctx.InvalidArgument("out_backprop must have rank >= 1, got ",
                               dy.DebugString());
  }
  Rows r = LastAxisRows(dy);
  Tensor db = Tensor::Zeros(dy.dtype(), {r.cols});
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

absl::Status OneHotKernel(KernelContext& ctx) {
  if (absl::Status s = ctx.RequireIndexDType(0); !s.ok()) return s;
  const Tensor& indices = ctx.input(0);
  const int64_t depth = ctx.attrs().Int("depth");
  DType dtype = ctx.attrs().Type("T");
  if (depth < 0) return ctx.InvalidArgument("depth ", depth, " is negative");
  if (!IsFloating(dtype)) {
    return ctx.InvalidArgument("T must be float32 or float64, got ",
                               DTypeName(dtype));
  }
  Shape shape = indices.shape();
  shape.push_back(depth);
  Tensor y = Tensor::Filled(dtype, shape, ctx.attrs().Float("off_value"));
  const double on = ctx.attrs().Float("on_value");
  DispatchFloat(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = y.mutable_data<T>();
    for (int64_t i = 0; i < indices.num_elements(); ++i) {
      int64_t k = static_cast<int64_t>(indices.ElementAsDouble(i));
      if (k >= 0 && k < depth) p[i * depth + k] = static_cast<T>(on);
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

}  // namespace

void RegisterNnOps(OpRegistry& r) {
  r.Add(Op("Relu")
            .Inputs({"features"})
            .Outputs({"activations"})
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
            .SavesOutputs({0})
            .Summary("max(features, 0)"));
  r.Add(Op("ReluGrad")
            .Inputs({"gradients", "features"})
            .Outputs({"backprops"})
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
  r.Add(Op("BiasAdd")
            .Inputs({"value", "bias"})
            .Outputs({"output"})
            .Attr("data_format", std::string("NHWC"))
            .Forward(BiasAddKernel)
            // dvalue = dy, dbias = sum of dy over all but the last axis
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(0)) g.SetGrad(0, g.Grad(0));
              if (g.NeedsGrad(1)) {
                g.SetGrad(1, g.Op("BiasAddGrad", {g.Grad(0)}));
              }
            })
            .Summary("value + bias, bias along the last axis"));
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
            .Attr("on_value", 1.0)
            .Attr("off_value", 0.0)
            .Forward(OneHotKernel)
            .NotDifferentiable()
            .Summary("indices -> one-hot rows of `depth` (out of range: all "
                     "off_value)"));
}

}  // namespace gradtape
