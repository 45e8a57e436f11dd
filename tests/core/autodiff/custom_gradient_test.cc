// Custom gradients for one op execution (core/autodiff/custom_gradient.h) and
// the watched_variables query, through the session.
#include "absl/strings/match.h"
#include "tests/core/autodiff/autodiff_fixture.h"

namespace gradtape::testing {
namespace {

using ::absl::StatusCode;

GradientRef Ref(GradientRef::Kind kind, int index, int output = 0) {
  GradientRef r;
  r.kind = kind;
  r.index = index;
  r.output = output;
  return r;
}

GradientRef Captured(int64_t client_id) {
  GradientRef r;
  r.kind = GradientRef::kTensor;
  r.client_id = client_id;
  return r;
}

class CustomGradientTest : public AutodiffTest {};

// Gradient clipping inside a model: h = Identity(x) with the backward
// dx = Minimum(Maximum(dh, lo), hi); y = sum(c * h) sends c to dh.
TEST_F(CustomGradientTest, ClipsTheGradientOfOneExecution) {
  Put(1, {4}, {1, 2, 3, 4});
  Put(2, {4}, {-5, -0.5, 0.25, 7});  // c
  Put(3, {}, {-1});                  // lo
  Put(4, {}, {1});                   // hi
  ASSERT_TRUE(Push(10, true).ok());
  ASSERT_TRUE(Watch(10, {1}).ok());
  GradientProgram clip;
  clip.steps.push_back(
      {"Maximum", {Ref(GradientRef::kUpstream, 0), Captured(3)}, {}});
  clip.steps.push_back(
      {"Minimum", {Ref(GradientRef::kStep, 0), Captured(4)}, {}});
  clip.input_grads.push_back(Ref(GradientRef::kStep, 1));
  ASSERT_TRUE(
      session_.ExecuteOpWithGradient(++seq_, "Identity", {1}, {5}, {}, clip)
          .ok());
  Exec("Mul", {2, 5}, {6});
  Exec("Sum", {6}, {7});
  // The same without the hook, for comparison.
  Exec("Identity", {1}, {8});
  Exec("Mul", {2, 8}, {9});
  Exec("Sum", {9}, {11});
  ASSERT_TRUE(Pop(10).ok());
  EXPECT_EQ(Values(5), (std::vector<double>{1, 2, 3, 4}));
  ASSERT_TRUE(Grad(10, {7}, {1}, {12}).ok());
  EXPECT_EQ(Values(12), (std::vector<double>{-1, -0.5, 0.25, 1}));
  ASSERT_TRUE(Grad(10, {11}, {1}, {13}).ok());
  EXPECT_EQ(Values(13), (std::vector<double>{-5, -0.5, 0.25, 7}));
  // The captured bounds may be released: the tape holds them.
  ASSERT_TRUE(session_.ReleaseTensors(++seq_, {3, 4}).ok());
  ASSERT_TRUE(Grad(10, {7}, {1}, {14}).ok());
  EXPECT_EQ(Values(14), (std::vector<double>{-1, -0.5, 0.25, 1}));
}

// The program may read the op's inputs and outputs; the tape keeps exactly
// those: y = x^3 with the (true) backward 3 y / x * dy.
TEST_F(CustomGradientTest, ReadsInputsAndOutputsAndIsDifferentiable) {
  Put(1, {2}, {0.5, 2});
  Put(2, {}, {3});
  ASSERT_TRUE(Push(100, true).ok());
  ASSERT_TRUE(Watch(100, {1}).ok());
  ASSERT_TRUE(Push(101).ok());
  ASSERT_TRUE(Watch(101, {1}).ok());
  Exec("Square", {1}, {3});
  GradientProgram p;
  p.steps.push_back(
      {"RealDiv",
       {Ref(GradientRef::kOutput, 0), Ref(GradientRef::kInput, 1)},
       {}});
  p.steps.push_back({"Mul", {Ref(GradientRef::kStep, 0), Captured(2)}, {}});
  p.steps.push_back(
      {"Mul",
       {Ref(GradientRef::kStep, 1), Ref(GradientRef::kUpstream, 0)},
       {}});
  p.input_grads = {std::nullopt, Ref(GradientRef::kStep, 2)};
  // y = x^2 * x, with the custom backward on the Mul's second input only.
  ASSERT_TRUE(
      session_.ExecuteOpWithGradient(++seq_, "Mul", {3, 1}, {4}, {}, p).ok());
  ASSERT_TRUE(Pop(101).ok());
  ASSERT_TRUE(Grad(101, {4}, {1}, {5}).ok());
  // d/dx through input 1 only: 3 x^2 (custom), through x^2: nothing.
  EXPECT_EQ(Values(5), (std::vector<double>{0.75, 12}));
  ASSERT_TRUE(Pop(100).ok());
  ASSERT_TRUE(Grad(100, {5}, {1}, {6}).ok());
  EXPECT_EQ(Values(6), (std::vector<double>{3, 12}));  // 6x
}

TEST_F(CustomGradientTest, BadProgramsFailAtomically) {
  Put(1, {2}, {1, 2});
  ASSERT_TRUE(Push(10).ok());
  ASSERT_TRUE(Watch(10, {1}).ok());
  GradientProgram out_of_range;
  out_of_range.input_grads.push_back(Ref(GradientRef::kStep, 0));
  absl::Status s =
      session_.ExecuteOpWithGradient(++seq_, "Exp", {1}, {2}, {}, out_of_range);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  for (const char* part : {"Exp", "command", "input 0", "step 0"}) {
    EXPECT_TRUE(absl::StrContains(s.message(), part)) << part << ": " << s;
  }
  EXPECT_EQ(Fetch(2).status().code(), StatusCode::kFailedPrecondition);
  GradientProgram unknown_op;
  unknown_op.steps.push_back({"Expp", {Ref(GradientRef::kUpstream, 0)}, {}});
  unknown_op.input_grads.push_back(Ref(GradientRef::kStep, 0));
  EXPECT_EQ(
      session_.ExecuteOpWithGradient(++seq_, "Exp", {1}, {2}, {}, unknown_op)
          .code(),
      StatusCode::kNotFound);
  GradientProgram unknown_id;
  unknown_id.input_grads.push_back(Captured(77));
  s = session_.ExecuteOpWithGradient(++seq_, "Exp", {1}, {2}, {}, unknown_id);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(s.message(), "77")) << s;
  // Nothing was recorded; the session works.
  EXPECT_EQ(session_.Stats().tape_entries, 0);
  Exec("Exp", {1}, {2});
  ASSERT_TRUE(Pop(10).ok());
  ASSERT_TRUE(Grad(10, {2}, {1}, {3}).ok());
}

class WatchedVariablesTest : public AutodiffTest {
 protected:
  void NewVariable(int64_t id, std::vector<double> value) {
    const int64_t n = static_cast<int64_t>(value.size());
    Exec("VarHandleOp", {}, {id},
         {{"dtype", DType::kFloat64}, {"shape", std::vector<int64_t>{n}}});
    Put(id + 1000, {n}, value);
    Exec("AssignVariableOp", {id, id + 1000}, {});
  }
  std::vector<int64_t> Watched(int64_t tape) {
    absl::StatusOr<std::vector<int64_t>> ids =
        session_.WatchedVariables(++seq_, tape);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int64_t>{-1};
  }
};

TEST_F(WatchedVariablesTest, AccessedVariablesAreWatchedInOrder) {
  NewVariable(1, {1, 2});
  NewVariable(2, {3});
  NewVariable(3, {4});
  ASSERT_TRUE(Push(10, false, /*watch_accessed_variables=*/true).ok());
  Exec("ReadVariableOp", {2}, {20});
  Exec("ReadVariableOp", {1}, {21});
  Exec("ReadVariableOp", {2}, {22});
  EXPECT_EQ(Watched(10), (std::vector<int64_t>{2, 1}));
  // A second id naming variable 1 (Identity of the handle) is listed too;
  // a released id is not.
  Exec("Identity", {1}, {30});
  EXPECT_EQ(Watched(10), (std::vector<int64_t>{2, 1, 30}));
  ASSERT_TRUE(session_.ReleaseTensors(++seq_, {2}).ok());
  EXPECT_EQ(Watched(10), (std::vector<int64_t>{1, 30}));
}

TEST_F(WatchedVariablesTest, WithoutWatchAccessedOnlyExplicitWatches) {
  NewVariable(1, {1, 2});
  NewVariable(2, {3});
  ASSERT_TRUE(Push(10, false, /*watch_accessed_variables=*/false).ok());
  Exec("ReadVariableOp", {1}, {20});
  EXPECT_EQ(Watched(10), std::vector<int64_t>{});
  ASSERT_TRUE(Watch(10, {2}).ok());
  Exec("ReadVariableOp", {2}, {21});
  EXPECT_EQ(Watched(10), std::vector<int64_t>{2});
  // Still listed after the tape computed its (non-persistent) gradient.
  ASSERT_TRUE(Pop(10).ok());
  ASSERT_TRUE(Grad(10, {21}, {2}, {22}).ok());
  EXPECT_EQ(Watched(10), std::vector<int64_t>{2});
  auto unknown = session_.WatchedVariables(++seq_, 99);
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "WatchedVariables"))
      << unknown.status();
}

}  // namespace
}  // namespace gradtape::testing
