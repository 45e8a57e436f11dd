// A session-level fixture for the Jacobian, forward-mode, higher-order and
// custom-gradient tests: tensors by id, as a client sees them, in-process.
#ifndef GRADTAPE_TESTS_CORE_AUTODIFF_FIXTURE_H_
#define GRADTAPE_TESTS_CORE_AUTODIFF_FIXTURE_H_

#include <cmath>
#include <vector>

#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "core/session/session.h"
#include "gtest/gtest.h"

namespace gradtape::testing {

class AutodiffTest : public ::testing::Test {
 protected:
  AutodiffTest() : session_(DefaultRegistry(), SessionOptions{}) {}

  void Put(int64_t id, Shape shape, std::vector<double> values) {
    absl::Status s = session_.PutTensor(
        ++seq_, id, Tensor::FromVector<double>(shape, values));
    ASSERT_TRUE(s.ok()) << s;
  }
  void Exec(absl::string_view op, std::vector<int64_t> in,
            std::vector<int64_t> out, AttrMap attrs = {}) {
    absl::Status s = session_.ExecuteOp(++seq_, op, in, out, attrs);
    ASSERT_TRUE(s.ok()) << s;
  }
  absl::StatusOr<Tensor> Fetch(int64_t id) {
    return session_.FetchTensor(++seq_, id);
  }
  std::vector<double> Values(int64_t id) {
    absl::StatusOr<Tensor> t = Fetch(id);
    EXPECT_TRUE(t.ok()) << t.status();
    std::vector<double> v;
    if (!t.ok()) return v;
    for (int64_t i = 0; i < t->num_elements(); ++i) {
      v.push_back(t->ElementAsDouble(i));
    }
    return v;
  }
  Shape ShapeOf(int64_t id) {
    absl::StatusOr<Tensor> t = Fetch(id);
    return t.ok() ? t->shape() : Shape{-1};
  }
  absl::Status Push(int64_t tape, bool persistent = false,
                    bool watch_accessed_variables = false) {
    return session_.PushTape(++seq_, tape, persistent,
                             watch_accessed_variables);
  }
  absl::Status Watch(int64_t tape, std::vector<int64_t> ids) {
    return session_.Watch(++seq_, tape, ids);
  }
  absl::Status Pop(int64_t tape) { return session_.PopTape(++seq_, tape); }
  absl::StatusOr<std::vector<Tensor>> Grad(
      int64_t tape, std::vector<int64_t> targets, std::vector<int64_t> sources,
      std::vector<int64_t> results, Unconnected u = Unconnected::kNone,
      std::vector<int64_t> output_grads = {}) {
    GradientRequest r;
    r.tape = tape;
    r.targets = std::move(targets);
    r.sources = std::move(sources);
    r.result_ids = std::move(results);
    r.unconnected = u;
    r.output_gradients = std::move(output_grads);
    return session_.Gradient(++seq_, r);
  }
  absl::StatusOr<std::vector<Tensor>> Jac(int64_t tape, int64_t target,
                                          std::vector<int64_t> sources,
                                          std::vector<int64_t> results,
                                          bool batch = false,
                                          Unconnected u = Unconnected::kNone) {
    JacobianRequest r;
    r.tape = tape;
    r.target = target;
    r.sources = std::move(sources);
    r.result_ids = std::move(results);
    r.batch = batch;
    r.unconnected = u;
    return session_.Jacobian(++seq_, r);
  }

  // The gradient of sum(tanh(W x)) at `x` (a column), W at id 1, by a
  // fresh tape on fresh ids (from 1000 up): the first-order gradient the
  // Hessian tests difference.
  std::vector<double> GradientAt(const std::vector<double>& x) {
    const int64_t base = next_id_;
    next_id_ += 10;
    Put(base, {static_cast<int64_t>(x.size()), 1}, x);
    EXPECT_TRUE(Push(base).ok());
    EXPECT_TRUE(Watch(base, {base}).ok());
    Exec("MatMul", {1, base}, {base + 1});
    Exec("Tanh", {base + 1}, {base + 2});
    Exec("Sum", {base + 2}, {base + 3});
    EXPECT_TRUE(Pop(base).ok());
    EXPECT_TRUE(Grad(base, {base + 3}, {base}, {base + 4}).ok());
    return Values(base + 4);
  }

  Session session_;
  int64_t seq_ = 0;
  int64_t next_id_ = 1000;  // GradientAt's ids
};

// Deterministic values in [-1, 1].
inline std::vector<double> Wave(int n, int salt) {
  std::vector<double> v(n);
  for (int k = 0; k < n; ++k)
    v[k] = 0.9 * std::sin(1.7 * k + 0.37 * salt + 0.5);
  return v;
}

}  // namespace gradtape::testing

#endif  // GRADTAPE_TESTS_CORE_AUTODIFF_FIXTURE_H_
