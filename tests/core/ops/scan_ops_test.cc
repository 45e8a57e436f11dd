// Cumprod's gradient where x holds zeros (TensorFlow's cumsum(dy * y) / x
// is NaN there): against an exact reference and central differences, with a
// zero at every position and two zeros, for every exclusive / reverse, along
// either axis; and at second order. Forward values of the scans are in
// math_ops_test.cc, the generic Jacobian check covers the samples.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/autodiff/gradient.h"
#include "tests/core/ops/op_samples.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace testing {
// Defined in math_ops_test.cc.
void CheckSecondOrder(const OpSample& s);

namespace {

constexpr int kRows = 2;
constexpr int kCols = 5;

// Whether x_k is a factor of y_j in a scan of one row.
bool InScan(int k, int j, bool exclusive, bool reverse) {
  const bool before = reverse ? k > j : k < j;
  return before || (!exclusive && k == j);
}

// d sum(dy * cumprod(x)) / dx along axis 1 of a [rows, cols] matrix, from
// the definition: dx_i = sum_j dy_j prod_{k in scan j, k != i} x_k.
std::vector<double> ExactCumprodGrad(const std::vector<double>& x,
                                     const std::vector<double>& dy, int rows,
                                     int cols, bool exclusive, bool reverse) {
  std::vector<double> dx(x.size(), 0.0);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < cols; ++i) {
      for (int j = 0; j < cols; ++j) {
        if (!InScan(i, j, exclusive, reverse)) continue;
        double p = 1;
        for (int k = 0; k < cols; ++k) {
          if (k != i && InScan(k, j, exclusive, reverse)) p *= x[r * cols + k];
        }
        dx[r * cols + i] += dy[r * cols + j] * p;
      }
    }
  }
  return dx;
}

std::vector<double> Transposed(const std::vector<double>& m, int rows,
                               int cols) {
  std::vector<double> t(m.size());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  }
  return t;
}

class CumprodGradTest : public OpTest {
 protected:
  // d sum(dy * Cumprod(x)) / dx through the tape.
  std::vector<double> TapeGrad(const Shape& shape, const std::vector<double>& x,
                               const std::vector<double>& dy,
                               const AttrMap& attrs) {
    Tensor xt = ctx_.Adopt(Tensor::FromVector<double>(shape, x));
    EXPECT_TRUE(ctx_.tapes().Push(1, false, false).ok());
    Tape* tape = *ctx_.tapes().Find(1);
    tape->Watch(xt);
    Tensors out;
    EXPECT_TRUE(ctx_.Execute("Cumprod", {xt}, attrs, &out).ok());
    EXPECT_TRUE(ctx_.tapes().Pop(1).ok());
    auto g =
        Gradient(ctx_, *tape, {out[0]}, {xt},
                 {Tensor::FromVector<double>(shape, dy)}, Unconnected::kZero);
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(ctx_.tapes().Delete(1).ok());
    return g.ok() ? Values((*g)[0]) : std::vector<double>(x.size());
  }

  // Central differences of sum(dy * Cumprod(x)) (a polynomial in x).
  std::vector<double> NumericGrad(const Shape& shape,
                                  const std::vector<double>& x,
                                  const std::vector<double>& dy,
                                  const AttrMap& attrs) {
    auto value = [&](const std::vector<double>& at) {
      Tensor y =
          MustRun("Cumprod", {Tensor::FromVector<double>(shape, at)}, attrs);
      double sum = 0;
      for (int64_t i = 0; i < y.num_elements(); ++i) {
        sum += dy[i] * y.ElementAsDouble(i);
      }
      return sum;
    };
    std::vector<double> g;
    for (size_t i = 0; i < x.size(); ++i) {
      std::vector<double> plus = x, minus = x;
      plus[i] += 1e-6;
      minus[i] -= 1e-6;
      g.push_back((value(plus) - value(minus)) / 2e-6);
    }
    return g;
  }

  // Checks the gradient of Cumprod along each axis of x ([kRows, kCols]
  // rows scanned along axis 1; the transpose along axis 0).
  void Check(const std::vector<double>& x, const std::string& what) {
    const std::vector<double> dy = Values(R({kRows, kCols}, 11));
    for (bool exclusive : {false, true}) {
      for (bool reverse : {false, true}) {
        SCOPED_TRACE(absl::StrCat(what, ", exclusive ", exclusive, ", reverse ",
                                  reverse));
        const std::vector<double> want =
            ExactCumprodGrad(x, dy, kRows, kCols, exclusive, reverse);
        for (int axis : {1, 0}) {
          const bool t = axis == 0;
          const Shape shape = t ? Shape{kCols, kRows} : Shape{kRows, kCols};
          const std::vector<double> xa = t ? Transposed(x, kRows, kCols) : x;
          const std::vector<double> dya = t ? Transposed(dy, kRows, kCols) : dy;
          const AttrMap attrs{{"axis", int64_t{axis}},
                              {"exclusive", exclusive},
                              {"reverse", reverse}};
          std::vector<double> got = TapeGrad(shape, xa, dya, attrs);
          std::vector<double> numeric = NumericGrad(shape, xa, dya, attrs);
          if (t) {
            got = Transposed(got, kCols, kRows);
            numeric = Transposed(numeric, kCols, kRows);
          }
          for (size_t i = 0; i < x.size(); ++i) {
            ASSERT_FALSE(std::isnan(got[i])) << "axis " << axis << " at " << i;
            EXPECT_NEAR(got[i], want[i], 1e-12)
                << "axis " << axis << " at " << i;
            EXPECT_NEAR(got[i], numeric[i], 1e-6)
                << "axis " << axis << " at " << i;
          }
        }
      }
    }
  }
};

// Rows of kCols values in [0.5, 2] (either sign), with zeros at `zeros` in
// the first row and at `zeros2` in the second.
std::vector<double> WithZeros(const std::vector<int>& zeros,
                              const std::vector<int>& zeros2) {
  std::vector<double> x = {1.5, -0.75, 2.0,  1.25, -1.75,
                           0.5, 1.1,   -1.3, 0.9,  1.7};
  for (int k : zeros) x[k] = 0;
  for (int k : zeros2) x[kCols + k] = 0;
  return x;
}

TEST_F(CumprodGradTest, NoZeros) { Check(WithZeros({}, {}), "no zeros"); }

TEST_F(CumprodGradTest, OneZeroAtEveryPosition) {
  for (int k = 0; k < kCols; ++k) {
    Check(WithZeros({k}, {kCols - 1 - k}), absl::StrCat("zero at ", k));
  }
}

TEST_F(CumprodGradTest, TwoZeros) {
  Check(WithZeros({0, 4}, {1, 3}), "zeros at 0, 4 and 1, 3");
  Check(WithZeros({2, 3}, {0, 1}), "adjacent zeros");
  Check(WithZeros({0, 1, 2, 3, 4}, {}), "all zeros");
}

TEST_F(CumprodGradTest, SecondOrderWithAndWithoutAZero) {
  for (bool exclusive : {false, true}) {
    for (bool reverse : {false, true}) {
      const AttrMap attrs{
          {"axis", int64_t{1}}, {"exclusive", exclusive}, {"reverse", reverse}};
      for (int zero : {-1, 0, 2, 4}) {
        std::vector<double> x = WithZeros({}, {});
        if (zero >= 0) x[zero] = 0, x[kCols + kCols - 1 - zero] = 0;
        CheckSecondOrder({"Cumprod",
                          absl::StrCat("zero at ", zero, ", exclusive ",
                                       exclusive, ", reverse ", reverse),
                          {Tensor::FromVector<double>({kRows, kCols}, x)},
                          attrs});
      }
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace gradtape
