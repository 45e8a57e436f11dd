// Gradient-check samples for the ops of core/ops/pool_ops.cc. Max pooling
// inputs are distinct and spaced 0.1 apart (no ties, and a 1e-6 step never
// changes a window's argmax); MaxPoolGrad's orig_output is the real MaxPool
// of orig_input.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {
namespace {

// A random permutation of 0.1 * (k - n/2), k < n.
Tensor Distinct(Shape shape, uint32_t seed) {
  Tensor t = Tensor::Empty(DType::kFloat64, shape).value();
  const int64_t n = t.num_elements();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  for (int64_t i = 0; i < n; ++i) {
    t.mutable_data<double>()[i] = 0.1 * (static_cast<double>(order[i]) - n / 2);
  }
  return t;
}

// ksize, strides (batch and channel entries 1) and padding.
AttrMap Pool(std::vector<int64_t> k, std::vector<int64_t> s,
             const char* padding) {
  k.insert(k.begin(), 1);
  k.push_back(1);
  s.insert(s.begin(), 1);
  s.push_back(1);
  return {{"ksize", k}, {"strides", s}, {"padding", std::string(padding)}};
}

Tensor Run(const std::string& op, Tensor x, const AttrMap& attrs) {
  OpExecutor ctx(DefaultRegistry());
  Tensors out;
  absl::Status s = ctx.Execute(op, {x}, attrs, &out);
  return s.ok() ? out[0] : Tensor();
}

struct Case {
  Shape input;
  std::vector<int64_t> ksize, strides;
  const char* padding;
  const char* label;
};

}  // namespace

void AddPoolSamples(SampleList& samples) {
  // Every sample of an op with data_format also runs channels-first (NCHW /
  // NCDHW): all of them are added to `s` first.
  SampleList s;
  const Case cases2d[] = {
      {{2, 4, 4, 2}, {2, 2}, {2, 2}, "VALID", "VALID 2x2 stride 2"},
      {{1, 3, 4, 2}, {3, 3}, {1, 1}, "SAME", "SAME 3x3 stride 1"},
      {{1, 5, 5, 1}, {2, 2}, {2, 2}, "SAME", "SAME 2x2 stride 2, odd input"},
      {{1, 4, 5, 2}, {2, 3}, {1, 2}, "VALID", "VALID 2x3 strides 1,2"},
      {{1, 3, 3, 1}, {3, 2}, {2, 3}, "SAME", "SAME 3x2 strides 2,3"},
  };
  const Case cases3d[] = {
      {{1, 3, 4, 4, 2}, {2, 2, 2}, {2, 2, 2}, "VALID", "VALID 2^3 stride 2"},
      {{1, 3, 3, 3, 1}, {2, 3, 2}, {1, 1, 1}, "SAME", "SAME stride 1"},
      {{2, 3, 2, 3, 1}, {2, 2, 2}, {2, 1, 2}, "SAME", "SAME strides 2,1,2"},
  };
  uint32_t seed = 300;
  for (bool three_d : {false, true}) {
    const std::string dim = three_d ? "3D" : "";
    for (const Case& c : three_d ? absl::MakeConstSpan(cases3d)
                                 : absl::MakeConstSpan(cases2d)) {
      const AttrMap attrs = Pool(c.ksize, c.strides, c.padding);
      Tensor x = Distinct(c.input, ++seed);
      Tensor y = Run("MaxPool" + dim, x, attrs);
      const Shape& pooled = y.shape();
      s.Add("AvgPool" + dim, c.label, {R(c.input, ++seed)}, attrs);
      AttrMap grad_attrs = attrs;
      grad_attrs.Set("orig_input_shape",
                     std::vector<int64_t>(c.input.begin(), c.input.end()));
      s.Add("AvgPool" + dim + "Grad", c.label, {R(pooled, ++seed)}, grad_attrs);
      s.Add("MaxPool" + dim, c.label, {x}, attrs);
      s.Add("MaxPool" + dim + "Grad", c.label, {x, y, R(pooled, ++seed)},
            attrs);
      s.Add("MaxPool" + dim + "GradGrad", c.label, {x, y, R(c.input, ++seed)},
            attrs);
    }
  }
  // padding EXPLICIT (MaxPool and its gradients, 2-D).
  for (const auto& [paddings, label] :
       std::vector<std::pair<std::vector<int64_t>, const char*>>{
           {{0, 0, 1, 0, 0, 1, 0, 0}, "EXPLICIT 2x2 stride 2"},
           {{0, 0, 1, 1, 0, 0, 0, 0}, "EXPLICIT 2x2 stride 2, H both sides"}}) {
    AttrMap attrs = Pool({2, 2}, {2, 2}, "EXPLICIT");
    attrs.Set("explicit_paddings", paddings);
    Tensor x = Distinct({1, 3, 4, 2}, ++seed);
    Tensor y = Run("MaxPool", x, attrs);
    if (!y.valid()) continue;
    s.Add("MaxPool", label, {x}, attrs);
    s.Add("MaxPoolGrad", label, {x, y, R(y.shape(), ++seed)}, attrs);
    s.Add("MaxPoolGradGrad", label, {x, y, R(x.shape(), ++seed)}, attrs);
  }
  // MaxPool(3D)Grad(Grad) (orig_input, orig_output, grad); the others have
  // one input.
  AddWithChannelsFirstTwins(samples, std::move(s), [](const std::string& op) {
    const bool max_grad =
        op.find("MaxPool") == 0 && op.find("Grad") != std::string::npos;
    return max_grad ? std::vector<int>{0, 1, 2} : std::vector<int>{0};
  });
  // MaxPoolWithArgmax and its gradients (2-D, NHWC only as in TensorFlow),
  // argmax from the real op.
  for (const Case& c : cases2d) {
    for (bool with_batch : {false, true}) {
      AttrMap attrs = Pool(c.ksize, c.strides, c.padding);
      attrs.Set("include_batch_in_index", with_batch);
      const std::string label =
          absl::StrCat(c.label, with_batch ? ", batch in index" : "");
      Tensor x = Distinct(c.input, ++seed);
      OpExecutor ctx(DefaultRegistry());
      Tensors out;
      if (!ctx.Execute("MaxPoolWithArgmax", {x}, attrs, &out).ok()) continue;
      samples.Add("MaxPoolWithArgmax", label, {x}, attrs);
      samples.Add("MaxPoolGradWithArgmax", label,
                  {x, R(out[0].shape(), ++seed), out[1]}, attrs);
      samples.Add("MaxPoolGradGradWithArgmax", label,
                  {x, R(c.input, ++seed), out[1]}, attrs);
    }
  }
  {
    AttrMap attrs = Pool({2, 2}, {2, 2}, "VALID");
    attrs.Set("Targmax", DType::kInt32);
    samples.Add("MaxPoolWithArgmax", "Targmax int32",
                {Distinct({1, 4, 4, 2}, 399)}, attrs);
  }
}

}  // namespace gradtape::testing
