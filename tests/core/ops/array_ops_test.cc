// Forward values and input checks of the array ops added for the segment
// family: Shape and GatherV2 (the gradient check covers GatherV2's
// backward).
#include <vector>

#include "absl/strings/match.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_samples.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace {

using testing::Values;

using testing::R;

class ArrayOpsTest : public testing::OpTest {
 protected:
};

// Naive GatherV2 (batch_dims 0) by unravelling every output index.
Tensor NaiveGather(const Tensor& params, const std::vector<int64_t>& indices,
                   const Shape& indices_shape, int axis) {
  Shape out_shape(params.shape().begin(), params.shape().begin() + axis);
  out_shape.insert(out_shape.end(), indices_shape.begin(), indices_shape.end());
  out_shape.insert(out_shape.end(), params.shape().begin() + axis + 1,
                   params.shape().end());
  Tensor out = Tensor::Zeros(DType::kFloat64, out_shape).value();
  const int ri = static_cast<int>(indices_shape.size());
  for (int64_t o = 0; o < out.num_elements(); ++o) {
    Shape idx(out_shape.size());
    int64_t rest = o;
    for (int d = static_cast<int>(out_shape.size()) - 1; d >= 0; --d) {
      idx[d] = rest % out_shape[d];
      rest /= out_shape[d];
    }
    int64_t flat_index = 0;
    for (int d = 0; d < ri; ++d) {
      flat_index = flat_index * indices_shape[d] + idx[axis + d];
    }
    int64_t offset = 0;
    for (int d = 0; d < params.rank(); ++d) {
      const int64_t i = d < axis    ? idx[d]
                        : d == axis ? indices[flat_index]
                                    : idx[d - 1 + ri];
      offset = offset * params.dim(d) + i;
    }
    out.mutable_data<double>()[o] = params.data<double>()[offset];
  }
  return out;
}

TEST_F(ArrayOpsTest, ShapeGivesTheDims) {
  Tensor x = Tensor::Zeros(DType::kFloat64, {2, 0, 5}).value();
  auto r = Run("Shape", {x});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DType::kInt32);
  EXPECT_EQ((*r)[0].shape(), (Shape{3}));
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{2, 0, 5}));
  r = Run("Shape", {Tensor::Scalar<int32_t>(4)}, {{"out_type", DType::kInt64}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DType::kInt64);
  EXPECT_EQ((*r)[0].shape(), (Shape{0}));
  EXPECT_FALSE(DefaultRegistry().Find("Shape")->differentiable());
  ExpectInvalid("Shape", {x}, {{"out_type", DType::kFloat64}},
                {"out_type", "float64"});
}

TEST_F(ArrayOpsTest, GatherV2MatchesNaive) {
  struct Case {
    Shape params, indices;
    int64_t axis;
  };
  uint32_t seed = 5;
  for (const Case& c : std::vector<Case>{{{5, 3}, {4}, 0},
                                         {{5, 3}, {2, 3}, 0},
                                         {{2, 4, 3}, {3}, 1},
                                         {{2, 4, 3}, {2, 2}, -2},
                                         {{2, 3, 4}, {5}, 2},
                                         {{4}, {}, 0},
                                         {{3, 2}, {0}, 0}}) {
    Tensor params = R(c.params, ++seed);
    const int axis =
        static_cast<int>(c.axis < 0 ? c.axis + params.rank() : c.axis);
    std::vector<int64_t> indices(NumElements(c.indices));
    for (size_t k = 0; k < indices.size(); ++k) {
      indices[k] = (k * 7 + seed) % params.dim(axis);
    }
    for (DType dtype : {DType::kInt32, DType::kInt64}) {
      Tensor t = dtype == DType::kInt64
                     ? Tensor::FromVector<int64_t>(c.indices, indices)
                     : Tensor::FromVector<int32_t>(
                           c.indices, std::vector<int32_t>(indices.begin(),
                                                           indices.end()));
      auto r = Run("GatherV2", {params, t}, {{"axis", c.axis}});
      ASSERT_TRUE(r.ok()) << r.status();
      Tensor want = NaiveGather(params, indices, c.indices, axis);
      EXPECT_EQ((*r)[0].shape(), want.shape());
      EXPECT_EQ(Values((*r)[0]), Values(want));
    }
  }
  auto ints = Run("GatherV2", {Tensor::FromVector<int32_t>({3}, {7, 8, 9}),
                               Tensor::FromVector<int64_t>({2}, {2, 2})});
  ASSERT_TRUE(ints.ok()) << ints.status();
  EXPECT_EQ(Values((*ints)[0]), (std::vector<double>{9, 9}));
}

TEST_F(ArrayOpsTest, GatherV2GradientScattersRepeatedIndices) {
  Tensor params = ctx_.Adopt(R({3, 2}, 9));
  ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
  (*ctx_.tapes().Find(1))->Watch(params);
  auto y = Run("GatherV2",
               {params, Tensor::FromVector<int32_t>({2, 2}, {2, 0, 2, 2})});
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
  auto g = Gradient(ctx_, **ctx_.tapes().Find(1), {(*y)[0]}, {params}, {},
                    Unconnected::kNone);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Values((*g)[0]), (std::vector<double>{1, 1, 0, 0, 3, 3}));
}

// tf.gather(params, indices, axis=a, batch_dims=1): batch b gathers from
// params[b] with indices[b]. Worked by hand on an iota; the gradient of
// sum(output) counts how often each element was taken.
TEST_F(ArrayOpsTest, GatherV2BatchDims) {
  struct Case {
    Shape params;
    std::vector<int32_t> indices;
    int64_t axis, batch_dims;
    Shape out_shape;
    std::vector<double> out, grad;
  } cases[] = {
      // out[b, n] = p[b, idx[b, n]], p[b, j] = 3 b + j
      {{2, 3}, {2, 0, 1, 1}, 1, 1, {2, 2}, {2, 0, 4, 4}, {1, 0, 1, 0, 2, 0}},
      // out[b, o, n] = p[b, o, idx[b, n]], p[b, o, j] = 6 b + 3 o + j
      {{2, 2, 3},
       {0, 2, 1, 1},
       2,
       -1,
       {2, 2, 2},
       {0, 2, 3, 5, 7, 7, 10, 10},
       {1, 0, 1, 1, 0, 1, 0, 2, 0, 0, 2, 0}},
  };
  for (const Case& c : cases) {
    std::vector<double> iota(NumElements(c.params));
    for (size_t i = 0; i < iota.size(); ++i) iota[i] = static_cast<double>(i);
    Tensor params = ctx_.Adopt(Tensor::FromVector<double>(c.params, iota));
    ASSERT_TRUE(ctx_.tapes().Push(1, false, false).ok());
    (*ctx_.tapes().Find(1))->Watch(params);
    auto y = Run("GatherV2",
                 {params, Tensor::FromVector<int32_t>({2, 2}, c.indices)},
                 {{"axis", c.axis}, {"batch_dims", c.batch_dims}});
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_TRUE(ctx_.tapes().Pop(1).ok());
    EXPECT_EQ((*y)[0].shape(), c.out_shape);
    EXPECT_EQ(Values((*y)[0]), c.out);
    auto g = Gradient(ctx_, **ctx_.tapes().Find(1), {(*y)[0]}, {params}, {},
                      Unconnected::kNone);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(Values((*g)[0]), c.grad);
    ASSERT_TRUE(ctx_.tapes().Delete(1).ok());
  }
  const Tensor idx = Tensor::FromVector<int32_t>({2, 2}, {0, 1, 1, 0});
  ExpectInvalid("GatherV2", {R({3, 2}, 4), idx},
                {{"axis", int64_t{1}}, {"batch_dims", int64_t{1}}},
                {"batch_dims 1", "[3,2]", "[2,2]"});
  ExpectInvalid("GatherV2", {R({2, 2}, 4), idx},
                {{"axis", int64_t{1}}, {"batch_dims", int64_t{3}}},
                {"batch_dims 3"});
  ExpectInvalid("GatherV2", {R({2, 2, 2}, 4), idx},
                {{"axis", int64_t{1}}, {"batch_dims", int64_t{2}}},
                {"batch_dims 2", "axis 1"});
}

TEST_F(ArrayOpsTest, GatherV2BadInputs) {
  Tensor params = R({3, 2}, 1);
  ExpectInvalid("GatherV2", {params, Tensor::FromVector<int32_t>({2}, {0, 3})},
                {}, {"indices[1] = 3", "[0, 3)", "[3,2]"});
  ExpectInvalid("GatherV2", {params, Tensor::FromVector<int64_t>({2}, {-1, 0})},
                {}, {"indices[0] = -1"});
  ExpectInvalid("GatherV2", {params, Tensor::FromVector<int32_t>({1}, {0})},
                {{"axis", int64_t{2}}}, {"axis 2", "[3,2]"});
  ExpectInvalid("GatherV2", {params, Tensor::FromVector<int32_t>({1}, {0})},
                {{"axis", int64_t{-3}}}, {"axis -3"});
  ExpectInvalid("GatherV2", {params, Tensor::FromVector<int32_t>({1}, {0})},
                {{"batch_dims", int64_t{1}}}, {"batch_dims 1"});
  ExpectInvalid("GatherV2", {params, R({1}, 2)}, {}, {"int32 or int64"});
  ExpectInvalid("GatherV2", {R({}, 3), Tensor::FromVector<int32_t>({1}, {0})},
                {}, {"axis 0"});
}

}  // namespace
}  // namespace gradtape
