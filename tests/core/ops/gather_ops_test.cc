// Forward values, TensorFlow's conventions and bad inputs of GatherNd and
// ScatterNd (core/ops/gather_ops.cc); the generic checks (Jacobian,
// elision, forward mode) run on their samples. Expected values follow
// tf.gather_nd / tf.scatter_nd's definitions, worked by hand on an iota.
#include <vector>

#include "core/autodiff/gradient.h"
#include "core/ops/ops.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace {

using testing::Values;

Tensor Iota(Shape shape) {
  std::vector<double> v(NumElements(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return Tensor::FromVector<double>(shape, v);
}
Tensor I32(Shape shape, std::vector<int32_t> v) {
  return Tensor::FromVector<int32_t>(shape, v);
}
Tensor I64(Shape shape, std::vector<int64_t> v) {
  return Tensor::FromVector<int64_t>(shape, v);
}

class GatherOpsTest : public testing::OpTest {};

// params = iota [3, 4]: params[i, j] = 4 i + j.
TEST_F(GatherOpsTest, GatherNdElementsRowsAndWhole) {
  Tensor y =
      MustRun("GatherNd", {Iota({3, 4}), I32({3, 2}, {0, 1, 2, 3, 1, 0})});
  EXPECT_EQ(y.shape(), Shape{3});
  EXPECT_EQ(Values(y), (std::vector<double>{1, 11, 4}));
  // K = 1: rows; batch shape [2, 1] kept in front.
  y = MustRun("GatherNd", {Iota({3, 4}), I64({2, 1, 1}, {2, 0})});
  EXPECT_EQ(y.shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(Values(y), (std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3}));
  // K = 0: each (empty) index takes all of params.
  y = MustRun("GatherNd", {Iota({2}), I32({2, 0}, {})});
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(Values(y), (std::vector<double>{0, 1, 0, 1}));
  // No indices: empty output of the slice shape.
  y = MustRun("GatherNd", {Iota({3, 4}), I32({0, 1}, {})});
  EXPECT_EQ(y.shape(), (Shape{0, 4}));
  // Integer params.
  y = MustRun("GatherNd", {I32({2, 2}, {5, 6, 7, 8}), I32({1, 2}, {1, 0})});
  EXPECT_EQ(y.dtype(), DType::kInt32);
  EXPECT_EQ(Values(y), (std::vector<double>{7}));
}

TEST_F(GatherOpsTest, ScatterNdAddsDuplicates) {
  // Rows 2, 0, 2 of a [3, 2] output: row 2 gets both of its updates.
  Tensor y = MustRun("ScatterNd",
                     {I32({3, 1}, {2, 0, 2}),
                      Tensor::FromVector<double>({3, 2}, {1, 2, 3, 4, 5, 6}),
                      I32({2}, {3, 2})});
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(Values(y), (std::vector<double>{3, 4, 0, 0, 6, 8}));
  // Elements, int64, int updates (tf.scatter_nd's doc example, 1-D).
  y = MustRun("ScatterNd", {I64({4, 1}, {4, 3, 1, 7}),
                            I32({4}, {9, 10, 11, 12}), I64({1}, {8})});
  EXPECT_EQ(y.dtype(), DType::kInt32);
  EXPECT_EQ(Values(y), (std::vector<double>{0, 11, 0, 10, 9, 0, 0, 12}));
  // No updates (of shape [0] + shape[1:] = [0, 0]): zeros.
  y = MustRun("ScatterNd",
              {I32({0, 1}, {}), Tensor::FromVector<double>({0, 0}, {}),
               I32({2}, {2, 0})});
  EXPECT_EQ(y.shape(), (Shape{2, 0}));
}

// d/dparams of sum(w * GatherNd(params, indices)) puts w at the gathered
// positions, adding for repeats; second order through ScatterNd's own
// gradient (GatherNd) gives back w's gradient.
TEST_F(GatherOpsTest, GradientsAreEachOther) {
  Tensor dy = Tensor::FromVector<double>({3}, {1, 2, 3});
  Tensor dx = MustRun("ScatterNd",
                      {I32({3, 2}, {0, 1, 2, 3, 0, 1}), dy, I32({2}, {3, 4})});
  EXPECT_EQ(Values(dx),
            (std::vector<double>{0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}));
  Tensor back = MustRun("GatherNd", {dx, I32({3, 2}, {0, 1, 2, 3, 0, 1})});
  EXPECT_EQ(Values(back), (std::vector<double>{4, 2, 4}));
}

TEST_F(GatherOpsTest, BadInputs) {
  ExpectInvalid("GatherNd", {Iota({3, 4}), I32({2, 2}, {0, 1, 3, 0})}, {},
                {"indices[1] = [3, 0]", "params [3,4]"});
  ExpectInvalid("GatherNd", {Iota({3, 4}), I32({1, 1}, {-1})}, {},
                {"indices[0] = [-1]"});
  ExpectInvalid("GatherNd", {Iota({3}), I32({1, 2}, {0, 0})}, {},
                {"indices.shape[-1] = 2", "params [3]"});
  ExpectInvalid("GatherNd", {Iota({3}), Tensor::Scalar<int32_t>(0)}, {},
                {"indices", "at least a vector"});
  ExpectInvalid("GatherNd", {Iota({3}), Tensor::FromVector<double>({1}, {0})},
                {}, {"indices"});
  ExpectInvalid("ScatterNd",
                {I32({2, 1}, {0, 4}), Tensor::FromVector<double>({2}, {1, 2}),
                 I32({1}, {4})},
                {}, {"indices[1] = [4]", "shape [4]"});
  ExpectInvalid("ScatterNd",
                {I32({2, 1}, {0, 1}),
                 Tensor::FromVector<double>({3}, {1, 2, 3}), I32({1}, {4})},
                {}, {"updates has shape [3]", "[2]"});
  ExpectInvalid(
      "ScatterNd",
      {I32({1, 1}, {0}), Tensor::FromVector<double>({1}, {1}), I32({1}, {-4})},
      {}, {"shape[0] is -4"});
  ExpectInvalid(
      "ScatterNd",
      {I32({1, 1}, {0}), Tensor::FromVector<double>({1}, {1}), I64({1}, {4})},
      {}, {"shape"});
  ExpectInvalid(
      "ScatterNd",
      {I32({1, 0}, {}), Tensor::FromVector<double>({1}, {1}), I32({0}, {})}, {},
      {"shape", "1 to 64 dims"});
}

}  // namespace
}  // namespace gradtape
