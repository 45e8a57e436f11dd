// NN ops: activations (Relu, Relu6, LeakyRelu, Elu, Selu, Softplus,
// Softsign and their *Grad ops), BiasAdd (NHWC or NCHW), softmax, the sparse
// and dense cross-entropy losses, LRN and TopKV2. Softmax-like ops work over
// the last axis (TensorFlow's default).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <variant>

#include "core/autodiff/forward_mode.h"
#include "core/autodiff/grad_context.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/ops.h"
#include "core/ops/parallel.h"
#include "core/ops/vector_math.h"

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
  ASSIGN_OR_RETURN(Tensor y, AllocateOutput(ctx, x.dtype(), x.shape()));
  Rows r = LastAxisRows(x);
  DispatchFloat(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    // Rows in parallel, each block's rows through VecSoftmaxRows.
    ParallelRange(r.rows,
                  std::max<int64_t>(1, kElementwiseGrain / (4 * r.cols + 1)),
                  [&](int64_t begin, int64_t end) {
                    std::vector<T> shifted(r.cols);
                    VecSoftmaxRows(px + begin * r.cols, py + begin * r.cols,
                                   shifted.data(), end - begin, r.cols, log);
                  });
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
                   AllocateOutput(ctx, logits.dtype(), logits.shape()));
  DispatchFloat(logits.dtype(), [&](auto zero) {
    using T = decltype(zero);
    // Rows in parallel: the softmax of each (VecSoftmaxRows: the Softmax
    // kernel's), its max m and sum s; then loss = ln s - (x[label] - m)
    // and backprop = softmax - onehot.
    ParallelRange(
        batch, std::max<int64_t>(1, kElementwiseGrain / (4 * classes + 1)),
        [&](int64_t begin, int64_t end) {
          std::vector<T> shifted(classes), max(end - begin), sum(end - begin);
          const T* in = logits.data<T>() + begin * classes;
          T* bp = backprop.mutable_data<T>() + begin * classes;
          VecSoftmaxRows(in, bp, shifted.data(), end - begin, classes,
                         /*log=*/false, max.data(), sum.data());
          for (int64_t i = 0; i < end - begin; ++i) {
            const int64_t label =
                static_cast<int64_t>(labels.ElementAsDouble(begin + i));
            loss.mutable_data<T>()[begin + i] =
                std::log(sum[i]) - (in[i * classes + label] - max[i]);
            bp[i * classes + label] -= T(1);
          }
        });
  });
  ctx.set_output(0, std::move(loss));
  ctx.set_output(1, std::move(backprop));
  return absl::OkStatus();
}

// SoftmaxCrossEntropyWithLogits: features and labels [batch, classes] of one
// floating dtype -> loss[b] = sum_j labels * (log sum exp(x) - x_j) and
// backprop = softmax(features) - labels (TensorFlow's kernel; labels need
// not sum to 1).
absl::Status XentKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(ctx.RequireFloat(0));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 1));
  RETURN_IF_ERROR(ctx.RequireRank(0, 2));
  const Tensor& logits = ctx.input(0);
  const Tensor& labels = ctx.input(1);
  if (labels.shape() != logits.shape()) {
    return ctx.InvalidArgument("labels ", labels.DebugString(),
                               " must have the shape of features ",
                               logits.DebugString());
  }
  const int64_t batch = logits.dim(0), classes = logits.dim(1);
  ASSIGN_OR_RETURN(Tensor loss, Allocate(ctx, logits.dtype(), {batch}));
  ASSIGN_OR_RETURN(Tensor backprop,
                   Allocate(ctx, logits.dtype(), logits.shape()));
  if (classes == 0) {
    ctx.set_output(0, std::move(loss));
    ctx.set_output(1, std::move(backprop));
    return absl::OkStatus();
  }
  DispatchFloat(logits.dtype(), [&](auto zero) {
    using T = decltype(zero);
    for (int64_t i = 0; i < batch; ++i) {
      const T* in = logits.data<T>() + i * classes;
      const T* lab = labels.data<T>() + i * classes;
      T* bp = backprop.mutable_data<T>() + i * classes;
      T max = in[0];
      for (int64_t j = 1; j < classes; ++j) max = std::max(max, in[j]);
      T sum = 0;
      for (int64_t j = 0; j < classes; ++j) sum += std::exp(in[j] - max);
      const T log_sum = std::log(sum);
      T l = 0;
      for (int64_t j = 0; j < classes; ++j) {
        l += lab[j] * (log_sum - (in[j] - max));
        bp[j] = std::exp(in[j] - max) / sum - lab[j];
      }
      loss.mutable_data<T>()[i] = l;
    }
  });
  ctx.set_output(0, std::move(loss));
  ctx.set_output(1, std::move(backprop));
  return absl::OkStatus();
}

// LRN's attrs, checked.
struct LrnParams {
  int64_t radius;
  double bias, alpha, beta;
};
absl::StatusOr<LrnParams> GetLrnParams(const KernelContext& ctx) {
  LrnParams p{ctx.attrs().Int("depth_radius"), ctx.attrs().Float("bias"),
              ctx.attrs().Float("alpha"), ctx.attrs().Float("beta")};
  if (p.radius < 0 || p.radius > std::numeric_limits<int32_t>::max()) {
    return ctx.InvalidArgument("depth_radius ", p.radius,
                               " must be in [0, 2^31)");
  }
  return p;
}

// The window [begin, end) of channel j and its norm bias + alpha * sum x^2.
template <typename T>
T LrnNorm(const T* x, int64_t depth, int64_t j, const LrnParams& p,
          int64_t* begin, int64_t* end) {
  *begin = std::max<int64_t>(0, j - p.radius);
  *end = std::min<int64_t>(depth, j + p.radius + 1);
  T sum = 0;
  for (int64_t k = *begin; k < *end; ++k) sum += x[k] * x[k];
  return T(p.bias) + T(p.alpha) * sum;
}

// LRN: output = input / (bias + alpha * sqr_sum)^beta, sqr_sum over the
// channels [d - depth_radius, d + depth_radius] of a 4-D NHWC input.
absl::Status LrnKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(ctx.RequireFloat(0));
  RETURN_IF_ERROR(ctx.RequireRank(0, 4));
  ASSIGN_OR_RETURN(LrnParams p, GetLrnParams(ctx));
  const Tensor& x = ctx.input(0);
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, x.dtype(), x.shape()));
  Rows r = LastAxisRows(x);
  DispatchFloat(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    for (int64_t i = 0; i < r.rows; ++i) {
      const T* in = x.data<T>() + i * r.cols;
      T* out = y.mutable_data<T>() + i * r.cols;
      for (int64_t j = 0; j < r.cols; ++j) {
        int64_t b, e;
        const T norm = LrnNorm(in, r.cols, j, p, &b, &e);
        out[j] = in[j] * std::pow(norm, -T(p.beta));
      }
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// LRNGrad(input_grads, input_image, output_image), TensorFlow's formula:
// for each channel j and k in its window,
//   output[k] += grads[j] * ((k == j) * norm_j^-beta
//                            - 2 alpha beta input[k] output[j] / norm_j).
absl::Status LrnGradKernel(KernelContext& ctx) {
  for (int i = 0; i < 3; ++i) {
    RETURN_IF_ERROR(ctx.RequireFloat(i));
    RETURN_IF_ERROR(ctx.RequireSameDType(0, i));
    RETURN_IF_ERROR(ctx.RequireRank(i, 4));
  }
  for (int i = 1; i < 3; ++i) {
    if (ctx.input(i).shape() != ctx.input(0).shape()) {
      return ctx.InvalidArgument(
          ctx.op().input_names[i], " ", ctx.input(i).DebugString(),
          " must have the shape of input_grads ", ctx.input(0).DebugString());
    }
  }
  ASSIGN_OR_RETURN(LrnParams p, GetLrnParams(ctx));
  const Tensor& dy = ctx.input(0);
  ASSIGN_OR_RETURN(Tensor dx, Allocate(ctx, dy.dtype(), dy.shape()));
  Rows r = LastAxisRows(dy);
  DispatchFloat(dy.dtype(), [&](auto zero) {
    using T = decltype(zero);
    for (int64_t i = 0; i < r.rows; ++i) {
      const T* g = dy.data<T>() + i * r.cols;
      const T* in = ctx.input(1).data<T>() + i * r.cols;
      const T* out = ctx.input(2).data<T>() + i * r.cols;
      T* d = dx.mutable_data<T>() + i * r.cols;
      for (int64_t j = 0; j < r.cols; ++j) {
        int64_t b, e;
        const T norm = LrnNorm(in, r.cols, j, p, &b, &e);
        const T scale = T(-2 * p.alpha * p.beta) * out[j] / norm;
        for (int64_t k = b; k < e; ++k) {
          T v = scale * in[k];
          if (k == j) v += std::pow(norm, -T(p.beta));
          d[k] += v * g[j];
        }
      }
    }
  });
  ctx.set_output(0, std::move(dx));
  return absl::OkStatus();
}

// TopKV2: the k largest entries of each last-axis row, in descending order
// (ties: the lower index first, as TensorFlow; `sorted` false gives the same
// order, which TensorFlow leaves unspecified), and their indices.
absl::Status TopKKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kNumeric));
  RETURN_IF_ERROR(ctx.RequireIndexDType(1));
  RETURN_IF_ERROR(ctx.RequireRank(1, 0));
  const Tensor& x = ctx.input(0);
  const int64_t k = static_cast<int64_t>(ctx.input(1).ElementAsDouble(0));
  const DType index_type = ctx.attrs().Type("index_type");
  if (index_type != DType::kInt32 && index_type != DType::kInt64) {
    return ctx.InvalidArgument("index_type must be int32 or int64, got ",
                               DTypeName(index_type));
  }
  if (x.rank() < 1) {
    return ctx.InvalidArgument("input must have rank >= 1, got ",
                               x.DebugString());
  }
  const int64_t n = x.dim(x.rank() - 1);
  if (k < 0 || k > n) {
    return ctx.InvalidArgument("k ", k, " must be in [0, ", n,
                               "], the last dim of input ", x.DebugString());
  }
  if (index_type == DType::kInt32 && n > std::numeric_limits<int32_t>::max()) {
    return ctx.InvalidArgument("the last dim of input ", x.DebugString(),
                               " does not fit index_type int32");
  }
  Shape shape = x.shape();
  shape.back() = k;
  ASSIGN_OR_RETURN(Tensor values, Allocate(ctx, x.dtype(), shape));
  ASSIGN_OR_RETURN(Tensor indices, Allocate(ctx, index_type, shape));
  const int64_t rows = n == 0 ? 0 : x.num_elements() / n;
  DispatchNumeric(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    std::vector<int64_t> order(n);
    for (int64_t i = 0; i < rows && k > 0; ++i) {
      const T* in = x.data<T>() + i * n;
      for (int64_t j = 0; j < n; ++j) order[j] = j;
      // A total order (NaN above every number), ties by index.
      auto above = [](T a, T b) {
        return std::isnan(static_cast<double>(a))
                   ? !std::isnan(static_cast<double>(b))
                   : a > b;
      };
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int64_t a, int64_t b) {
                          if (above(in[a], in[b])) return true;
                          if (above(in[b], in[a])) return false;
                          return a < b;
                        });
      for (int64_t j = 0; j < k; ++j) {
        values.mutable_data<T>()[i * k + j] = in[order[j]];
        if (index_type == DType::kInt32) {
          indices.mutable_data<int32_t>()[i * k + j] =
              static_cast<int32_t>(order[j]);
        } else {
          indices.mutable_data<int64_t>()[i * k + j] = order[j];
        }
      }
    }
  });
  ctx.set_output(0, std::move(values));
  ctx.set_output(1, std::move(indices));
  return absl::OkStatus();
}

// The channel dim of the bias ops: the last (data_format NHWC, and BiasAddV1
// which has no data_format) or dim 1 (NCHW, TensorFlow's CPU kernels: rank
// >= 2). `value` names the input in messages.
absl::StatusOr<int> BiasChannelDim(const KernelContext& ctx,
                                   const char* value) {
  const Tensor& x = ctx.input(0);
  const AttrValue* attr = ctx.attrs().Find("data_format");
  const std::string format =
      attr == nullptr ? "NHWC" : std::get<std::string>(*attr);
  if (format != "NHWC" && format != "NCHW") {
    return ctx.InvalidArgument("data_format '", format,
                               "' must be NHWC or NCHW");
  }
  const int min_rank = format == "NCHW" ? 2 : 1;
  if (x.rank() < min_rank) {
    return ctx.InvalidArgument(value, " must have rank >= ", min_rank,
                               " with data_format ", format, ", got ",
                               x.DebugString());
  }
  return format == "NCHW" ? 1 : x.rank() - 1;
}

// Elements of x after one step of dim d (the product of the later dims).
int64_t InnerOf(const Tensor& x, int d) {
  int64_t n = 1;
  for (int i = d + 1; i < x.rank(); ++i) n *= x.dim(i);
  return n;
}

// BiasAdd and BiasAddV1 (which has no data_format attr).
absl::Status BiasAddKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kArithmetic));
  RETURN_IF_ERROR(ctx.RequireSameDType(0, 1));
  RETURN_IF_ERROR(ctx.RequireRank(1, 1));
  ASSIGN_OR_RETURN(const int channel, BiasChannelDim(ctx, "value"));
  const Tensor& value = ctx.input(0);
  const Tensor& bias = ctx.input(1);
  if (value.dim(channel) != bias.dim(0)) {
    return ctx.InvalidArgument("bias ", bias.DebugString(), " must match dim ",
                               channel, " (the channels) of value ",
                               value.DebugString());
  }
  ASSIGN_OR_RETURN(Tensor y, Allocate(ctx, value.dtype(), value.shape()));
  const int64_t inner = InnerOf(value, channel), channels = bias.dim(0);
  DispatchArithmetic(value.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* x = value.data<T>();
    const T* b = bias.data<T>();
    T* out = y.mutable_data<T>();
    // Rows of [channels, inner] blocks: no division per element.
    const int64_t rows =
        channels * inner == 0 ? 0 : value.num_elements() / (channels * inner);
    for (int64_t r = 0; r < rows; ++r) {
      if (inner == 1) {  // NHWC: a row of channels, vectorised
        const int64_t at = r * channels;
        for (int64_t c = 0; c < channels; ++c) out[at + c] = x[at + c] + b[c];
        continue;
      }
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t at = (r * channels + c) * inner;
        for (int64_t j = 0; j < inner; ++j) out[at + j] = x[at + j] + b[c];
      }
    }
  });
  ctx.set_output(0, std::move(y));
  return absl::OkStatus();
}

// The sum of out_backprop over every dim but the channels.
absl::Status BiasAddGradKernel(KernelContext& ctx) {
  RETURN_IF_ERROR(RequireDTypes(ctx, 0, DTypes::kArithmetic));
  ASSIGN_OR_RETURN(const int channel, BiasChannelDim(ctx, "out_backprop"));
  const Tensor& dy = ctx.input(0);
  const int64_t channels = dy.dim(channel), inner = InnerOf(dy, channel);
  ASSIGN_OR_RETURN(Tensor db, Allocate(ctx, dy.dtype(), {channels}));
  DispatchArithmetic(dy.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = dy.data<T>();
    T* out = db.mutable_data<T>();
    // Each channel's sum in element order (rows outer), as one pass over
    // dy would add them: the same bits as a loop over every element.
    const int64_t rows =
        channels * inner == 0 ? 0 : dy.num_elements() / (channels * inner);
    for (int64_t r = 0; r < rows; ++r) {
      if (inner == 1) {  // NHWC: a row added to the sums, vectorised
        const T* row = p + r * channels;
        for (int64_t c = 0; c < channels; ++c) out[c] += row[c];
        continue;
      }
      for (int64_t c = 0; c < channels; ++c) {
        const T* from = p + (r * channels + c) * inner;
        T sum = out[c];
        for (int64_t j = 0; j < inner; ++j) sum += from[j];
        out[c] = sum;
      }
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

// Relu, Relu6, LeakyRelu, Elu, Selu, Softplus, Softsign and their *Grad
// ops.
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
            // zero a.e. in features: no gradient (the tape records no
            // ReluGrad for features alone)
            .NonDifferentiableInputs({1})
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
  r.Add(Activation(Op("LeakyRelu"))
            .Attr("alpha", 0.2)
            .Forward([](KernelContext& ctx) {
              // TensorFlow's alpha is a float32 attr.
              const float alpha =
                  static_cast<float>(ctx.attrs().Float("alpha"));
              return ActivationKernel(ctx, [alpha](auto x) {
                using T = decltype(x);
                return x > T(0) ? x : static_cast<T>(alpha) * x;
              });
            })
            // dx = dy where x > 0, alpha dy elsewhere
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("LeakyReluGrad", {g.Grad(0), g.Input(0)},
                                {{"alpha", g.attrs().Float("alpha")}}));
            })
            .SavesInputs({0})
            .Summary("features where features > 0, else alpha * features"));
  r.Add(ActivationGrad(Op("LeakyReluGrad"), "features")
            .Attr("alpha", 0.2)
            .Forward([](KernelContext& ctx) {
              // TensorFlow's alpha is a float32 attr.
              const float alpha =
                  static_cast<float>(ctx.attrs().Float("alpha"));
              return ActivationGradKernel(ctx, [alpha](auto dy, auto x) {
                using T = decltype(dy);
                return x > T(0) ? dy : static_cast<T>(alpha) * dy;
              });
            })
            // TensorFlow's _LeakyReluGradGrad:
            //   d(gradients) = LeakyReluGrad(gz, features), d(features) = 0
            .Backward([](GradContext& g) {
              if (g.NeedsGrad(0)) {
                g.SetGrad(0, g.Op("LeakyReluGrad", {g.Grad(0), g.Input(1)},
                                  {{"alpha", g.attrs().Float("alpha")}}));
              }
              if (g.NeedsGrad(1)) g.SetGrad(1, g.Op("ZerosLike", {g.Grad(0)}));
            })
            .SavesInputs({1})
            .Summary("gradients where features > 0, else alpha * gradients "
                     "(the gradient of LeakyRelu)"));
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

// The registrations of SoftmaxCrossEntropyWithLogits, LRN, LRNGrad and
// TopKV2.
void RegisterLossAndSelectionOps(OpRegistry& r) {
  r.Add(Op("SoftmaxCrossEntropyWithLogits")
            .Inputs({"features", "labels"})
            .Outputs({"loss", "backprop"})
            .Forward(XentKernel)
            // TensorFlow's _SoftmaxCrossEntropyWithLogitsGrad, s =
            // softmax(features):
            //   dfeatures = dloss[:, None] * backprop
            //             + (dbackprop - sum(dbackprop * s, -1)) * s
            //   dlabels = dloss[:, None] * -log_softmax(features)
            //             - dbackprop   (backprop = s - labels; TensorFlow
            //                            omits this term)
            .Backward([](GradContext& g) {
              const Shape& shape = g.OutputShape(1);
              Tensor dloss = g.Reshape(g.Grad(0), {shape[0], 1});
              Tensor x = g.Input(0);
              if (g.NeedsGrad(0)) {
                Tensor dx = g.Mul(dloss, g.Output(1));
                if (g.HasGrad(1)) {
                  Tensor s = g.Op("Softmax", {x});
                  Tensor gb = g.Grad(1);
                  dx = g.Add(dx, g.Mul(g.Sub(gb, SumLast(g, g.Mul(gb, s))), s));
                }
                g.SetGrad(0, dx);
              }
              if (g.NeedsGrad(1)) {
                Tensor dl = g.Neg(g.Mul(dloss, g.Op("LogSoftmax", {x})));
                if (g.HasGrad(1)) dl = g.Sub(dl, g.Grad(1));
                g.SetGrad(1, dl);
              }
            })
            .SavesInputs({0})
            .SavesOutputs({1})
            .Summary("per-row cross-entropy of softmax(features) against "
                     "label distributions, and softmax(features) - labels"));
  r.Add(Op("LRN")
            .Inputs({"input"})
            .Outputs({"output"})
            .Attr("depth_radius", int64_t{5})
            .Attr("bias", 1.0)
            .Attr("alpha", 1.0)
            .Attr("beta", 0.5)
            .Forward(LrnKernel)
            // dx = LRNGrad(dy, x, y)
            .Backward([](GradContext& g) {
              g.SetGrad(0, g.Op("LRNGrad", {g.Grad(0), g.Input(0), g.Output(0)},
                                g.attrs()));
            })
            .SavesInputs({0})
            .SavesOutputs({0})
            .Summary("input / (bias + alpha * sum of squares over channels "
                     "[d - depth_radius, d + depth_radius])^beta (NHWC)"));
  r.Add(Op("LRNGrad")
            .Inputs({"input_grads", "input_image", "output_image"})
            .Outputs({"output"})
            .Attr("depth_radius", int64_t{5})
            .Attr("bias", 1.0)
            .Attr("alpha", 1.0)
            .Attr("beta", 0.5)
            .Forward(LrnGradKernel)
            .BackwardUnsupported("TensorFlow defines no gradient for LRNGrad")
            .Summary("the gradient of LRN (TensorFlow's formula)"));
  r.Add(Op("TopKV2")
            .Inputs({"input", "k"})
            .Outputs({"values", "indices"})
            .Attr("sorted", true)
            .Attr("index_type", DType::kInt32)
            .OutputDTypes(
                {DTypeRule::SameAsInput(0), DTypeRule::FromAttr("index_type")})
            .Forward(TopKKernel)
            // dinput = dvalues scattered into zeros at indices (last axis):
            //   sum_k dvalues[..., k, None] * one_hot(indices[..., k], n)
            .Backward([](GradContext& g) {
              const Shape& in = g.InputShape(0);
              Shape col = g.OutputShape(0);
              col.push_back(1);
              Tensor onehot =
                  g.Op("OneHot", {g.Output(1)},
                       {{"depth", in.back()}, {"T", g.InputDType(0)}});
              Tensor spread = g.Mul(g.Reshape(g.Grad(0), col), onehot);
              g.SetGrad(0, g.Op("Sum", {spread},
                                {{"axis", std::vector<int64_t>{-2}},
                                 {"keep_dims", false}}));
            })
            .SavesOutputs({1})
            .NonDifferentiableInputs({1})
            .Summary("the k largest entries of each last-axis row, "
                     "descending (ties: lower index first), and their "
                     "indices"));
}
}  // namespace

void RegisterNnOps(OpRegistry& r) {
  RegisterActivations(r);
  RegisterLossAndSelectionOps(r);
  // dvalue = dy, dbias = sum of dy over all but the channel dim
  auto bias_add_backward = [](GradContext& g) {
    if (g.NeedsGrad(0)) g.SetGrad(0, g.Grad(0));
    if (g.NeedsGrad(1)) {
      const AttrValue* format = g.attrs().Find("data_format");
      AttrMap attrs;
      if (format != nullptr) attrs.Set("data_format", *format);
      g.SetGrad(1, g.Op("BiasAddGrad", {g.Grad(0)}, std::move(attrs)));
    }
  };
  r.Add(Op("BiasAdd")
            .Inputs({"value", "bias"})
            .Outputs({"output"})
            .Attr("data_format", std::string("NHWC"))
            .Forward(BiasAddKernel)
            .Backward(bias_add_backward)
            .Summary("value + bias, bias along the channels: the last axis "
                     "(data_format NHWC) or axis 1 (NCHW)"));
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
            // dx = broadcast of dy along all but the channel dim
            .Backward([](GradContext& g) {
              const Shape& in = g.InputShape(0);
              Shape row(in.size(), 1);
              const bool nchw =
                  g.attrs().Get<std::string>("data_format") == "NCHW";
              const size_t channel = nchw ? 1 : in.size() - 1;
              row[channel] = in[channel];
              Tensor dy = g.Reshape(g.Grad(0), row);
              g.SetGrad(0, g.Op("BroadcastTo", {dy},
                                {{"shape", std::vector<int64_t>(in.begin(),
                                                                in.end())}}));
            })
            .Summary("sum over all but the channels: the last axis (NHWC) "
                     "or axis 1 (NCHW) (the gradient of BiasAdd)"));
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
