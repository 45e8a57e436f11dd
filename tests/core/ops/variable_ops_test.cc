// Variables: creation, assignment semantics, reading records on tapes that
// watch the handle or watch accessed variables, gradients w.r.t. variables.
#include "absl/strings/match.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "core/session/session.h"
#include "gtest/gtest.h"

namespace gradtape {
namespace {

using ::absl::StatusCode;

class VariableTest : public ::testing::Test {
 protected:
  VariableTest() : s_(DefaultRegistry(), SessionOptions{}) {}

  absl::Status Exec(absl::string_view op, std::vector<int64_t> in,
                    std::vector<int64_t> out, AttrMap attrs = {}) {
    return s_.ExecuteOp(++seq_, op, in, out, std::move(attrs));
  }
  // Variable at id `handle` holding `values` (shape [n]).
  void MakeVariable(int64_t handle, std::vector<double> values) {
    const int64_t n = static_cast<int64_t>(values.size());
    ASSERT_TRUE(Exec("VarHandleOp", {}, {handle},
                     {{"dtype", DType::kFloat64},
                      {"shape", std::vector<int64_t>{n}},
                      {"shared_name", std::string("w")}})
                    .ok());
    ASSERT_TRUE(s_.PutTensor(++seq_, handle + 1000,
                             Tensor::FromVector<double>({n}, values))
                    .ok());
    ASSERT_TRUE(Exec("AssignVariableOp", {handle, handle + 1000}, {}).ok());
  }
  double At(int64_t id, int64_t i = 0) {
    absl::StatusOr<Tensor> t = s_.FetchTensor(++seq_, id);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? t->ElementAsDouble(i) : 0;
  }
  absl::StatusOr<std::vector<Tensor>> Grad(int64_t tape, int64_t target,
                                           int64_t source, int64_t result) {
    GradientRequest r;
    r.tape = tape;
    r.targets = {target};
    r.sources = {source};
    r.result_ids = {result};
    return s_.Gradient(++seq_, r);
  }

  Session s_;
  int64_t seq_ = 0;
};

TEST_F(VariableTest, ReadSeesAssignmentsAndEarlierReadsKeepOldValues) {
  MakeVariable(1, {1.0, 2.0});
  ASSERT_TRUE(Exec("ReadVariableOp", {1}, {2}).ok());
  ASSERT_TRUE(
      s_.PutTensor(++seq_, 3, Tensor::FromVector<double>({2}, {5, 6})).ok());
  ASSERT_TRUE(Exec("AssignVariableOp", {1, 3}, {}).ok());
  ASSERT_TRUE(Exec("ReadVariableOp", {1}, {4}).ok());
  EXPECT_EQ(At(2, 1), 2.0);  // read before the assignment
  EXPECT_EQ(At(4, 1), 6.0);
}

TEST_F(VariableTest, WatchedHandleGetsTheGradient) {
  MakeVariable(1, {1.0, 2.0});
  ASSERT_TRUE(s_.PushTape(++seq_, 10, false, false).ok());
  ASSERT_TRUE(s_.Watch(++seq_, 10, {1}).ok());
  ASSERT_TRUE(Exec("ReadVariableOp", {1}, {2}).ok());
  ASSERT_TRUE(Exec("Square", {2}, {3}).ok());
  ASSERT_TRUE(Exec("Sum", {3}, {4}).ok());
  auto g = Grad(10, 4, 1, 5);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE((*g)[0].valid());
  EXPECT_EQ((*g)[0].shape(), (Shape{2}));
  EXPECT_EQ(At(5, 0), 2.0);
  EXPECT_EQ(At(5, 1), 4.0);
}

TEST_F(VariableTest, WatchAccessedVariables) {
  MakeVariable(1, {3.0});
  // Pushed with watch_accessed_variables: reading watches the handle.
  ASSERT_TRUE(s_.PushTape(++seq_, 10, true, /*watch_accessed=*/true).ok());
  ASSERT_TRUE(s_.PushTape(++seq_, 11, true, /*watch_accessed=*/false).ok());
  ASSERT_TRUE(Exec("ReadVariableOp", {1}, {2}).ok());
  ASSERT_TRUE(Exec("Mul", {2, 2}, {3}).ok());
  auto g = Grad(10, 3, 1, 4);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(At(4), 6.0);
  auto none = Grad(11, 3, 1, 5);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE((*none)[0].valid());
  GradientRequest zero{.tape = 11,
                       .targets = {3},
                       .sources = {1},
                       .unconnected = Unconnected::kZero,
                       .result_ids = {6}};
  auto z = s_.Gradient(++seq_, zero);
  ASSERT_TRUE(z.ok());
  EXPECT_EQ((*z)[0].shape(), (Shape{1}));  // the variable's shape
  EXPECT_EQ((*z)[0].dtype(), DType::kFloat64);
}

TEST_F(VariableTest, Errors) {
  ASSERT_TRUE(Exec("VarHandleOp", {}, {1},
                   {{"dtype", DType::kFloat32},
                    {"shape", std::vector<int64_t>{2}},
                    {"shared_name", std::string("v")}})
                  .ok());
  absl::Status uninit = Exec("ReadVariableOp", {1}, {2});
  EXPECT_EQ(uninit.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(uninit.message(), "'v' is uninitialized"))
      << uninit;
  ASSERT_TRUE(
      s_.PutTensor(++seq_, 3, Tensor::FromVector<double>({2}, {1, 2})).ok());
  absl::Status wrong = Exec("AssignVariableOp", {1, 3}, {});
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(wrong.message(), "float32[2]")) << wrong;
  EXPECT_TRUE(absl::StrContains(wrong.message(), "float64[2]")) << wrong;
  absl::Status not_handle = Exec("ReadVariableOp", {3}, {4});
  EXPECT_EQ(not_handle.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(not_handle.message(), "variable handle"));
  EXPECT_EQ(Exec("ReadVariableOp", {99}, {5}).code(), StatusCode::kNotFound);
  // Clients cannot forge handles.
  absl::Status put = s_.PutTensor(++seq_, 6, DType::kResource, {}, "12345678");
  EXPECT_EQ(put.code(), StatusCode::kInvalidArgument);
}

TEST_F(VariableTest, VariableDiesWithItsLastHandle) {
  MakeVariable(1, std::vector<double>(1000, 1.0));
  const int64_t with_variable = s_.Stats().bytes_in_use;
  ASSERT_TRUE(s_.ReleaseTensors(++seq_, {1, 1001}).ok());
  // The value, the handle and the two ids' slots.
  EXPECT_EQ(s_.Stats().bytes_in_use, with_variable - ChargedBytes(8000) -
                                         ChargedBytes(8) -
                                         2 * Session::kSlotBytes);
}

// ResourceGather on w = [[1, 2], [3, 4], [5, 6]] (id 1) with indices
// [2, 0, 2] (id 2).
class ResourceGatherTest : public VariableTest {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Exec("VarHandleOp", {}, {1},
                     {{"dtype", DType::kFloat64},
                      {"shape", std::vector<int64_t>{3, 2}},
                      {"shared_name", std::string("emb")}})
                    .ok());
    ASSERT_TRUE(
        s_.PutTensor(++seq_, 900,
                     Tensor::FromVector<double>({3, 2}, {1, 2, 3, 4, 5, 6}))
            .ok());
    ASSERT_TRUE(Exec("AssignVariableOp", {1, 900}, {}).ok());
    ASSERT_TRUE(
        s_.PutTensor(++seq_, 2, Tensor::FromVector<int32_t>({3}, {2, 0, 2}))
            .ok());
  }
  std::vector<double> All(int64_t id) {
    absl::StatusOr<Tensor> t = s_.FetchTensor(++seq_, id);
    EXPECT_TRUE(t.ok()) << t.status();
    std::vector<double> v;
    for (int64_t i = 0; t.ok() && i < t->num_elements(); ++i) {
      v.push_back(t->ElementAsDouble(i));
    }
    return v;
  }
};

TEST_F(ResourceGatherTest, GathersRows) {
  ASSERT_TRUE(Exec("ResourceGather", {1, 2}, {3}).ok());
  absl::StatusOr<Tensor> y = s_.FetchTensor(++seq_, 3);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (Shape{3, 2}));
  EXPECT_EQ(All(3), (std::vector<double>{5, 6, 1, 2, 5, 6}));
}

// loss = sum(gathered^2): d w = 2 w[i] added once per time row i was
// gathered: row 0 once, row 1 never, row 2 twice. The same as through
// ReadVariableOp + GatherV2, and dense of the variable's shape.
TEST_F(ResourceGatherTest, GradientIsDenseAndMatchesReadPlusGather) {
  ASSERT_TRUE(s_.PushTape(++seq_, 10, false, false).ok());
  ASSERT_TRUE(s_.Watch(++seq_, 10, {1}).ok());
  ASSERT_TRUE(Exec("ResourceGather", {1, 2}, {3}).ok());
  ASSERT_TRUE(Exec("Square", {3}, {4}).ok());
  ASSERT_TRUE(Exec("Sum", {4}, {5}).ok());
  auto g = Grad(10, 5, 1, 6);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(All(6), (std::vector<double>{2, 4, 0, 0, 20, 24}));

  ASSERT_TRUE(s_.PushTape(++seq_, 11, false, false).ok());
  ASSERT_TRUE(s_.Watch(++seq_, 11, {1}).ok());
  ASSERT_TRUE(Exec("ReadVariableOp", {1}, {13}).ok());
  ASSERT_TRUE(Exec("GatherV2", {13, 2}, {14}).ok());
  ASSERT_TRUE(Exec("Square", {14}, {15}).ok());
  ASSERT_TRUE(Exec("Sum", {15}, {16}).ok());
  auto h = Grad(11, 16, 1, 17);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(All(17), All(6));
}

TEST_F(ResourceGatherTest, RefusesBadIndicesAndBatchDims) {
  ASSERT_TRUE(
      s_.PutTensor(++seq_, 20, Tensor::FromVector<int64_t>({2}, {0, 3})).ok());
  absl::Status st = Exec("ResourceGather", {1, 20}, {21});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "ResourceGather")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "indices[1] = 3")) << st;
  st = Exec("ResourceGather", {1, 2}, {22}, {{"batch_dims", int64_t{1}}});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "batch_dims 1")) << st;
  ASSERT_TRUE(s_.PutTensor(++seq_, 23, Tensor::Scalar<double>(1.0)).ok());
  st = Exec("ResourceGather", {1, 23}, {24});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "indices")) << st;
}

}  // namespace
}  // namespace gradtape
