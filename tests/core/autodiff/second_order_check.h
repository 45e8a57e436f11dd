// Second order by nested tapes, checked against central differences of the
// first-order gradient: shared by second_order_test.cc (every op) and
// released_output_test.cc (every multi-output op, each output released).
#ifndef GRADTAPE_TESTS_CORE_AUTODIFF_SECOND_ORDER_CHECK_H_
#define GRADTAPE_TESTS_CORE_AUTODIFF_SECOND_ORDER_CHECK_H_

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/autodiff/op_executor.h"
#include "core/tensor/tensor.h"
#include "gtest/gtest.h"

namespace gradtape::testing {

// Deterministic non-constant float64 weights shaped like `like`.
inline Tensor Weights(const Tensor& like, int salt) {
  Tensor t = Tensor::Empty(DType::kFloat64, like.shape()).value();
  for (int64_t k = 0; k < t.num_elements(); ++k) {
    t.mutable_data<double>()[k] = 0.3 + 0.2 * ((k * 5 + salt) % 7) - 0.6;
  }
  return t;
}

inline double Dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t k = 0; k < a.num_elements(); ++k) {
    s += a.ElementAsDouble(k) * b.ElementAsDouble(k);
  }
  return s;
}

// `h[a]` is d/d x[wrt[a]] of sum_i <u[i], g_i(x)>, where g = first_order(x)
// is the first-order gradient with respect to x[wrt[0]], x[wrt[1]], ...
// Expects each element to match central differences of that sum.
inline void ExpectSecondOrderMatchesDifferences(
    OpExecutor& ctx, const std::vector<Tensor>& x, const std::vector<int>& wrt,
    const std::vector<Tensor>& u, const std::vector<Tensor>& h,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>&
        first_order,
    const std::string& label) {
  constexpr double kStep = 1e-5;
  auto inner = [&](const std::vector<Tensor>& in) {
    std::vector<Tensor> gi = first_order(in);
    double total = 0;
    for (size_t i = 0; i < gi.size(); ++i) total += Dot(u[i], gi[i]);
    return total;
  };
  for (size_t a = 0; a < wrt.size(); ++a) {
    const int i = wrt[a];
    for (int64_t k = 0; k < x[i].num_elements(); ++k) {
      std::vector<Tensor> plus = x, minus = x;
      for (auto* v : {&plus, &minus}) {
        Tensor copy = Tensor::Empty(DType::kFloat64, x[i].shape()).value();
        std::memcpy(copy.raw_mutable_data(), x[i].raw_data(), x[i].num_bytes());
        copy.mutable_data<double>()[k] += v == &plus ? kStep : -kStep;
        (*v)[i] = ctx.Adopt(copy);
      }
      const double numeric = (inner(plus) - inner(minus)) / (2 * kStep);
      const double analytic = h[a].ElementAsDouble(k);
      EXPECT_NEAR(analytic, numeric, 1e-5 + 1e-5 * std::abs(numeric))
          << label << ": d2 / d in" << i << "[" << k << "]";
    }
  }
}

}  // namespace gradtape::testing

#endif  // GRADTAPE_TESTS_CORE_AUTODIFF_SECOND_ORDER_CHECK_H_
