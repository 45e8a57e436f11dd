// The client tests' reference MLP, run in-process by the core (a
// gradtape::Session, no gRPC): loss = mean(sparse softmax cross-entropy(
// tanh(x w1 + b1) w2 + b2, labels)) and its gradients w.r.t. w1, b1, w2, b2.
#ifndef GRADTAPE_TESTS_CLIENT_CORE_MLP_H_
#define GRADTAPE_TESTS_CLIENT_CORE_MLP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "core/session/session.h"

namespace gradtape::testing {

struct MlpInputs {
  int64_t batch = 0, in = 0, hidden = 0, classes = 0;
  std::vector<double> x, w1, b1, w2, b2;  // row-major
  std::vector<int32_t> labels;
};

struct MlpResult {
  double loss = 0;
  std::vector<std::vector<double>> grads;  // w1, b1, w2, b2
};

inline absl::StatusOr<MlpResult> CoreMlp(const MlpInputs& m) {
  Session core(DefaultRegistry(), {});
  int64_t seq = 0;
  absl::Status s;
  auto put = [&](int64_t id, std::vector<int64_t> shape,
                 const std::vector<double>& v) {
    if (s.ok()) {
      s = core.PutTensor(++seq, id, Tensor::FromVector<double>(shape, v));
    }
  };
  put(1, {m.batch, m.in}, m.x);
  if (s.ok()) {
    s = core.PutTensor(++seq, 2,
                       Tensor::FromVector<int32_t>({m.batch}, m.labels));
  }
  put(3, {m.in, m.hidden}, m.w1);
  put(4, {m.hidden}, m.b1);
  put(5, {m.hidden, m.classes}, m.w2);
  put(6, {m.classes}, m.b2);
  if (s.ok()) s = core.PushTape(++seq, 1, false, true);
  if (s.ok()) s = core.Watch(++seq, 1, {3, 4, 5, 6});
  auto run = [&](const char* op, std::vector<int64_t> in,
                 std::vector<int64_t> out) {
    if (s.ok()) s = core.ExecuteOp(++seq, op, in, out, {});
  };
  run("MatMul", {1, 3}, {10});
  run("BiasAdd", {10, 4}, {11});
  run("Tanh", {11}, {12});
  run("MatMul", {12, 5}, {13});
  run("BiasAdd", {13, 6}, {14});
  run("SparseSoftmaxCrossEntropyWithLogits", {14, 2}, {15, 16});
  run("Mean", {15}, {17});
  if (s.ok()) s = core.PopTape(++seq, 1);
  if (!s.ok()) return s;
  GradientRequest request;
  request.tape = 1;
  request.targets = {17};
  request.sources = {3, 4, 5, 6};
  request.result_ids = {20, 21, 22, 23};
  absl::StatusOr<std::vector<Tensor>> grads = core.Gradient(++seq, request);
  if (!grads.ok()) return grads.status();
  absl::StatusOr<Tensor> loss = core.FetchTensor(++seq, 17);
  if (!loss.ok()) return loss.status();
  MlpResult result;
  result.loss = loss->ElementAsDouble(0);
  for (const Tensor& g : *grads) {
    std::vector<double> values(g.num_elements());
    for (int64_t i = 0; i < g.num_elements(); ++i) {
      values[i] = g.ElementAsDouble(i);
    }
    result.grads.push_back(std::move(values));
  }
  return result;
}

}  // namespace gradtape::testing

#endif  // GRADTAPE_TESTS_CLIENT_CORE_MLP_H_
