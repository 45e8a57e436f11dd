// Forward values of the ops against hand-computed results, and their input
// checks (the gradient check covers the backwards).
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/match.h"
#include "core/autodiff/op_executor.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace {

using testing::Values;

class OpsTest : public testing::OpTest {
 protected:
  Tensor D(Shape shape, std::vector<double> v) {
    return Tensor::FromVector<double>(shape, v);
  }
};

TEST_F(OpsTest, BroadcastingArithmetic) {
  auto r = Run("AddV2", {D({2, 1}, {1, 2}), D({3}, {10, 20, 30})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{11, 21, 31, 12, 22, 32}));
  r = Run("Sub", {D({}, {1}), D({2}, {1, 2})});
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{0, -1}));
  auto ints = Run("Mul", {Tensor::FromVector<int32_t>({2}, {3, 4}),
                          Tensor::FromVector<int32_t>({2}, {5, 6})});
  ASSERT_TRUE(ints.ok());
  EXPECT_EQ((*ints)[0].dtype(), DType::kInt32);
  EXPECT_EQ(Values((*ints)[0]), (std::vector<double>{15, 24}));
}

TEST_F(OpsTest, BroadcastMismatchNamesBothShapes) {
  auto r = Run("Mul", {D({2, 3}, std::vector<double>(6)),
                       D({4}, std::vector<double>(4))});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "Mul"));
  EXPECT_TRUE(absl::StrContains(r.status().message(), "[2,3]"));
  EXPECT_TRUE(absl::StrContains(r.status().message(), "[4]"));
}

TEST_F(OpsTest, MatMulWithTransposes) {
  Tensor a = D({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = D({3, 2}, {7, 8, 9, 10, 11, 12});
  auto r = Run("MatMul", {a, b});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{58, 64, 139, 154}));
  r = Run("MatMul", {a, a}, {{"transpose_b", true}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{14, 32, 32, 77}));
  r = Run("MatMul", {a, a}, {{"transpose_a", true}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].shape(), (Shape{3, 3}));
  EXPECT_EQ(Values((*r)[0])[0], 17);
}

TEST_F(OpsTest, MatMulShapeErrorNamesBothShapes) {
  auto r = Run("MatMul", {D({2, 3}, std::vector<double>(6)),
                          D({4, 5}, std::vector<double>(20))});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(r.status().message(), "[2,3]"));
  EXPECT_TRUE(absl::StrContains(r.status().message(), "[4,5]"));
}

TEST_F(OpsTest, Reductions) {
  Tensor x = D({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(Values((*Run("Sum", {x}))[0]), std::vector<double>{21});
  auto r = Run("Sum", {x}, {{"axis", std::vector<int64_t>{0}}});
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{5, 7, 9}));
  r = Run("Mean", {x},
          {{"axis", std::vector<int64_t>{-1}}, {"keep_dims", true}});
  EXPECT_EQ((*r)[0].shape(), (Shape{2, 1}));
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{2, 5}));
  r = Run("Sum", {x}, {{"axis", std::vector<int64_t>{2}}});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "axis 2"));
}

// Sums and products over the rows of an [R, K] input with many rows take
// blocks of rows folded into partial rows (core/ops/reduction_ops.cc):
// integer-valued sums are exact whatever the order; a float32 sum of
// 3000 rows is within float32 rounding of the exact one; the product's
// partial rows combine too; and 3-d inputs reduced over their first two
// dims (a layer-norm gain's gradient) are the same case.
TEST_F(OpsTest, ColumnReductionsOverManyRows) {
  const int64_t rows = 3000, cols = 64;  // 512 rows a block: 6 blocks
  std::vector<double> v(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) v[i] = static_cast<double>(i % 97);
  std::vector<double> want(cols, 0.0);
  for (int64_t i = 0; i < rows * cols; ++i) want[i % cols] += v[i];
  EXPECT_EQ(Values(MustRun("Sum", {D({rows, cols}, v)},
                           {{"axis", std::vector<int64_t>{0}}})),
            want);
  EXPECT_EQ(Values(MustRun("Sum", {D({30, 100, cols}, v)},
                           {{"axis", std::vector<int64_t>{0, 1}}})),
            want);
  std::vector<float> f(rows * cols);
  std::vector<long double> exact(cols, 0), product(cols, 1);
  for (int64_t i = 0; i < rows * cols; ++i) {
    f[i] = 1.0f + static_cast<float>((i * 7919) % 1000) * 1e-4f;
    exact[i % cols] += f[i];
  }
  const Tensor ft = Tensor::FromVector<float>({rows, cols}, f);
  Tensor sum = MustRun("Sum", {ft}, {{"axis", std::vector<int64_t>{0}}});
  for (int64_t k = 0; k < cols; ++k) {
    // Blocked: at most (512 + 6) roundings of eps each, relative to the sum.
    EXPECT_NEAR(sum.data<float>()[k], static_cast<double>(exact[k]),
                (512 + 6) * 6e-8 * static_cast<double>(exact[k]))
        << k;
  }
  std::vector<double> near_one(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    near_one[i] = 1.0 + static_cast<double>((i * 31) % 17 - 8) * 1e-5;
    product[i % cols] *= near_one[i];
  }
  Tensor prod = MustRun("Prod", {D({rows, cols}, near_one)},
                        {{"axis", std::vector<int64_t>{0}}});
  for (int64_t k = 0; k < cols; ++k) {
    EXPECT_NEAR(Values(prod)[k], static_cast<double>(product[k]), 1e-12) << k;
  }
}

// Transpose against the definition y[i_0, ..., i_r] = x[i at perm], on
// every permutation of rank 1 to 4 over shapes with dims of 1 (dropped by
// the kernel), runs that merge, and sizes around the 32x32 tile, and on
// int32, bool and complex128 elements.
TEST_F(OpsTest, TransposeMatchesTheDefinition) {
  const std::vector<Shape> shapes = {
      {5},        {3, 1},       {33, 65},       {2, 3, 4},    {1, 37, 3},
      {4, 1, 40}, {2, 3, 1, 4}, {3, 33, 2, 34}, {1, 1, 1, 1}, {2, 0, 3}};
  int cases = 0;
  for (const Shape& shape : shapes) {
    const int rank = static_cast<int>(shape.size());
    std::vector<int64_t> perm(rank);
    for (int i = 0; i < rank; ++i) perm[i] = i;
    const int64_t n = NumElements(shape);
    std::vector<int32_t> values(n);
    for (int64_t i = 0; i < n; ++i) values[i] = static_cast<int32_t>(i * 7 + 1);
    const Tensor x = Tensor::FromVector<int32_t>(shape, values);
    do {
      Tensor y = MustRun("Transpose", {x}, {{"perm", perm}});
      ASSERT_TRUE(y.valid());
      Shape want_shape(rank);
      for (int i = 0; i < rank; ++i) want_shape[i] = shape[perm[i]];
      ASSERT_EQ(y.shape(), want_shape);
      // Walk the output in row-major order; in[] is the input index.
      Shape in_strides(rank, 1);
      for (int i = rank - 2; i >= 0; --i) {
        in_strides[i] = in_strides[i + 1] * shape[i + 1];
      }
      Shape index(rank, 0);
      for (int64_t o = 0; o < n; ++o) {
        int64_t in = 0;
        for (int i = 0; i < rank; ++i) in += index[i] * in_strides[perm[i]];
        ASSERT_EQ(y.data<int32_t>()[o], values[in])
            << ShapeString(shape) << " perm " << ShapeString(perm) << " at "
            << o;
        for (int i = rank - 1; i >= 0 && ++index[i] == want_shape[i]; --i) {
          index[i] = 0;
        }
      }
      ++cases;
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
  EXPECT_EQ(cases, 1 + 2 + 2 + 6 + 6 + 6 + 24 + 24 + 24 + 6);
  // Other element sizes: bool and complex128 through the tiled path.
  Tensor b =
      Tensor::FromVector<bool>({2, 3}, {true, false, false, true, true, false});
  EXPECT_EQ(Values(MustRun("Transpose", {b})),
            (std::vector<double>{1, 1, 0, 1, 0, 0}));
  Tensor c = Tensor::FromVector<complex128>(
      {2, 2}, {{1, -1}, {2, -2}, {3, -3}, {4, -4}});
  Tensor ct = MustRun("Transpose", {c});
  EXPECT_EQ(ct.data<complex128>()[1], complex128(3, -3));
  EXPECT_EQ(ct.data<complex128>()[2], complex128(2, -2));
}

TEST_F(OpsTest, ShapeOps) {
  Tensor x = D({2, 3}, {1, 2, 3, 4, 5, 6});
  auto r = Run("Transpose", {x});
  EXPECT_EQ((*r)[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  r = Run("Reshape", {x}, {{"shape", std::vector<int64_t>{-1}}});
  EXPECT_EQ((*r)[0].shape(), (Shape{6}));
  EXPECT_TRUE((*r)[0].SharesBufferWith(x));
  r = Run("Reshape", {x}, {{"shape", std::vector<int64_t>{4, 2}}});
  EXPECT_FALSE(r.ok());
  r = Run("BroadcastTo", {D({3}, {1, 2, 3})},
          {{"shape", std::vector<int64_t>{2, 3}}});
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  r = Run("Cast", {D({2}, {1.7, -2.2})}, {{"DstT", DType::kInt32}});
  EXPECT_EQ((*r)[0].dtype(), DType::kInt32);
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{1, -2}));
}

TEST_F(OpsTest, SoftmaxAndLoss) {
  Tensor logits = D({1, 3}, {1, 2, 3});
  auto r = Run("Softmax", {logits});
  const double z = std::exp(1) + std::exp(2) + std::exp(3);
  EXPECT_NEAR(Values((*r)[0])[2], std::exp(3) / z, 1e-12);
  r = Run("LogSoftmax", {logits});
  EXPECT_NEAR(Values((*r)[0])[0], 1 - std::log(z), 1e-12);
  r = Run("SparseSoftmaxCrossEntropyWithLogits",
          {logits, Tensor::FromVector<int32_t>({1}, {2})});
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(Values((*r)[0])[0], std::log(z) - 3, 1e-12);
  EXPECT_NEAR(Values((*r)[1])[2], std::exp(3) / z - 1, 1e-12);
  r = Run("SparseSoftmaxCrossEntropyWithLogits",
          {logits, Tensor::FromVector<int32_t>({1}, {3})});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "label 3"));
}

// Cast from bool (read as bytes) to every numeric dtype, over enough
// elements to be split between threads.
TEST_F(OpsTest, CastFromBoolGivesZerosAndOnes) {
  constexpr int64_t n = 100003;
  std::vector<bool> bits(n);
  for (int64_t i = 0; i < n; ++i) bits[i] = (i * 7919) % 3 == 1;
  Tensor mask = Tensor::Uninitialized(DType::kBool, {n}).value();
  for (int64_t i = 0; i < n; ++i) mask.mutable_data<bool>()[i] = bits[i];
  for (DType to : {DType::kFloat32, DType::kFloat64, DType::kInt32,
                   DType::kInt64, DType::kComplex64}) {
    auto r = Run("Cast", {mask}, {{"DstT", to}});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ((*r)[0].dtype(), to);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ((*r)[0].ElementAsDouble(i), bits[i] ? 1.0 : 0.0)
          << DTypeName(to) << " element " << i;
    }
  }
}

// Rows of every length around the kernel's lanes (8 partial maxima and
// sums): values against a plain two-pass reference, large logits shifted by
// the max, and a NaN anywhere in a row making that row NaN.
TEST_F(OpsTest, SoftmaxRowsOfEveryLengthMatchTheReference) {
  for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 64, 67}) {
    std::vector<double> v(2 * n);
    for (int64_t i = 0; i < 2 * n; ++i) v[i] = std::sin(1.7 * i + n) * 30;
    v[n + n / 2] += 1000;  // row 1 holds one large logit
    for (bool log : {false, true}) {
      auto r = Run(log ? "LogSoftmax" : "Softmax", {D({2, n}, v)});
      ASSERT_TRUE(r.ok()) << r.status();
      const std::vector<double> got = Values((*r)[0]);
      for (int64_t row = 0; row < 2; ++row) {
        const double* x = v.data() + row * n;
        const double max = *std::max_element(x, x + n);
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += std::exp(x[j] - max);
        for (int64_t j = 0; j < n; ++j) {
          const double want =
              log ? x[j] - max - std::log(sum) : std::exp(x[j] - max) / sum;
          EXPECT_NEAR(got[row * n + j], want, 1e-12 * (1 + std::abs(want)))
              << (log ? "LogSoftmax" : "Softmax") << " n=" << n << " row "
              << row << " element " << j;
        }
      }
    }
    std::vector<double> with_nan(v.begin(), v.begin() + n);
    with_nan[n - 1] = std::nan("");
    auto r = Run("Softmax", {D({1, n}, with_nan)});
    ASSERT_TRUE(r.ok()) << r.status();
    for (double y : Values((*r)[0])) EXPECT_TRUE(std::isnan(y)) << "n=" << n;
  }
}

TEST_F(OpsTest, AttrChecks) {
  Tensor x = D({2, 2}, {1, 2, 3, 4});
  auto r = Run("MatMul", {x, x}, {{"transpose_c", true}});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "unknown attr"));
  r = Run("MatMul", {x, x}, {{"transpose_a", int64_t{1}}});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "must be bool"));
  r = Run("Cast", {x});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "DstT"));
  r = Run("Exp", {Tensor::FromVector<int32_t>({1}, {1})});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "float32 or float64"));
}

TEST_F(OpsTest, Float32Works) {
  auto r = Run("MatMul", {Tensor::FromVector<float>({1, 2}, {1, 2}),
                          Tensor::FromVector<float>({2, 1}, {3, 4})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].dtype(), DType::kFloat32);
  EXPECT_EQ(Values((*r)[0]), std::vector<double>{11});
}

}  // namespace
}  // namespace gradtape
