// Training ops (core/ops/training_ops.cc) and variable updates
// (AssignAdd/AssignSubVariableOp): three steps of every optimizer against
// reference values, in float32 and float64; assignment ordering; errors
// leave the variables unchanged.
//
// The reference values are TensorFlow's update formulas (training_ops.cc)
// evaluated by hand in Python float64 for var0 = {1, -2, 0.5} and the
// gradients kGrads below, e.g. for Momentum (lr 0.1, momentum 0.9):
//   step 1: accum = 0.1, -0.2, 0.3;  var = 1 - 0.01, -2 + 0.02, 0.5 - 0.03.
#include <cmath>
#include <complex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "core/session/session.h"
#include "gtest/gtest.h"

namespace gradtape {
namespace {

using ::absl::StatusCode;
using Values = std::vector<double>;

const Values kVar0 = {1.0, -2.0, 0.5};
const std::vector<Values> kGrads = {
    {0.1, -0.2, 0.3}, {-0.4, 0.5, 0.6}, {0.7, -0.8, -0.9}};

class TrainingOpsTest : public ::testing::TestWithParam<DType> {
 protected:
  TrainingOpsTest() : s_(DefaultRegistry(), SessionOptions{}) {}

  DType dtype() const { return GetParam(); }
  Tensor Make(Shape shape, const Values& v) {
    if (dtype() == DType::kFloat64) return Tensor::FromVector<double>(shape, v);
    return Tensor::FromVector<float>(shape,
                                     std::vector<float>(v.begin(), v.end()));
  }
  absl::Status Exec(absl::string_view op, std::vector<int64_t> in,
                    std::vector<int64_t> out = {}, AttrMap attrs = {}) {
    return s_.ExecuteOp(++seq_, op, in, out, std::move(attrs));
  }
  int64_t Put(Shape shape, const Values& v) {
    const int64_t id = next_id_++;
    EXPECT_TRUE(s_.PutTensor(++seq_, id, Make(shape, v)).ok());
    return id;
  }
  int64_t Scalar(double v) { return Put({}, {v}); }
  // A variable named `name` holding `v` (shape [n]); returns its handle id.
  int64_t Var(const std::string& name, const Values& v) {
    const int64_t handle = Declare(name, {static_cast<int64_t>(v.size())});
    EXPECT_TRUE(Exec("AssignVariableOp",
                     {handle, Put({static_cast<int64_t>(v.size())}, v)})
                    .ok());
    return handle;
  }
  int64_t Declare(const std::string& name, std::vector<int64_t> shape) {
    const int64_t handle = next_id_++;
    EXPECT_TRUE(Exec("VarHandleOp", {}, {handle},
                     {{"dtype", dtype()},
                      {"shape", std::move(shape)},
                      {"shared_name", name}})
                    .ok());
    return handle;
  }
  Values Read(int64_t handle) {
    const int64_t id = next_id_++;
    absl::Status s = Exec("ReadVariableOp", {handle}, {id});
    EXPECT_TRUE(s.ok()) << s;
    return Fetch(id);
  }
  Values Fetch(int64_t id) {
    absl::StatusOr<Tensor> t = s_.FetchTensor(++seq_, id);
    EXPECT_TRUE(t.ok()) << t.status();
    Values out;
    if (!t.ok()) return out;
    for (int64_t i = 0; i < t->num_elements(); ++i) {
      out.push_back(t->ElementAsDouble(i));
    }
    return out;
  }
  void ExpectNear(const Values& got, const Values& want,
                  const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    // float32 kernels round every intermediate; float64 ones match to a few
    // ulps of the Python evaluation.
    const double tol = dtype() == DType::kFloat64 ? 1e-13 : 2e-6;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i])))
          << what << " element " << i;
    }
  }

  Session s_;
  int64_t seq_ = 0;
  int64_t next_id_ = 1;
};

TEST_P(TrainingOpsTest, GradientDescent) {
  const int64_t var = Var("w", kVar0);
  const int64_t alpha = Scalar(0.1);
  const std::vector<Values> want = {
      {0.99, -1.98, 0.47}, {1.03, -2.03, 0.41}, {0.96, -1.95, 0.5}};
  for (int t = 0; t < 3; ++t) {
    ASSERT_TRUE(
        Exec("ResourceApplyGradientDescent", {var, alpha, Put({3}, kGrads[t])})
            .ok());
    ExpectNear(Read(var), want[t], absl::StrCat("var after step ", t + 1));
  }
}

TEST_P(TrainingOpsTest, Momentum) {
  for (bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "plain");
    const int64_t var = Var("w", kVar0);
    const int64_t accum = Var("w/Momentum", {0, 0, 0});
    const int64_t lr = Scalar(0.1), momentum = Scalar(0.9);
    const std::vector<Values> want =
        nesterov ? std::vector<Values>{{0.981, -1.962, 0.443},
                                       {1.0489, -2.0408, 0.3047},
                                       {0.94101, -1.91472, 0.40523}}
                 : std::vector<Values>{{0.99, -1.98, 0.47},
                                       {1.021, -2.012, 0.383},
                                       {0.9789, -1.9608, 0.3947}};
    for (int t = 0; t < 3; ++t) {
      ASSERT_TRUE(Exec("ResourceApplyMomentum",
                       {var, accum, lr, Put({3}, kGrads[t]), momentum}, {},
                       {{"use_nesterov", nesterov}})
                      .ok());
      ExpectNear(Read(var), want[t], absl::StrCat("var after step ", t + 1));
    }
    ExpectNear(Read(accum), {0.421, -0.512, -0.117}, "accum");
  }
}

TEST_P(TrainingOpsTest, Adam) {
  for (bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "plain");
    const int64_t var = Var("w", kVar0);
    const int64_t m = Var("w/Adam/m", {0, 0, 0});
    const int64_t v = Var("w/Adam/v", {0, 0, 0});
    const int64_t lr = Scalar(0.01), beta1 = Scalar(0.9);
    const int64_t beta2 = Scalar(0.999), epsilon = Scalar(1e-7);
    const std::vector<Values> want =
        nesterov
            ? std::vector<Values>{{0.9810006008137561, -1.981000300411628,
                                   0.4810002002754741},
                                  {0.9932554381900895, -1.991889787332614,
                                   0.4656572066135897},
                                  {0.9847706517751142, -1.9835365559555733,
                                   0.4713795828277637}}
            : std::vector<Values>{
                  {0.9900003162177663, -1.990000158111383, 0.49000010540814426},
                  {0.9955953082452529, -1.9944222847798039, 0.4803483306533797},
                  {0.9922844406201675, -1.9910301096013103,
                   0.48101431893255836}};
    for (int t = 0; t < 3; ++t) {
      const int64_t beta1_power = Scalar(std::pow(0.9, t + 1));
      const int64_t beta2_power = Scalar(std::pow(0.999, t + 1));
      ASSERT_TRUE(Exec("ResourceApplyAdam",
                       {var, m, v, beta1_power, beta2_power, lr, beta1, beta2,
                        epsilon, Put({3}, kGrads[t])},
                       {}, {{"use_nesterov", nesterov}})
                      .ok());
      ExpectNear(Read(var), want[t], absl::StrCat("var after step ", t + 1));
    }
    ExpectNear(Read(m), {0.0421, -0.0512, -0.0117}, "m");
    ExpectNear(Read(v), {0.00065982001, 0.00092967004, 0.00125946009}, "v");
  }
}

TEST_P(TrainingOpsTest, Adagrad) {
  const int64_t var = Var("w", kVar0);
  const int64_t accum = Var("w/Adagrad", {0.1, 0.1, 0.1});
  const int64_t lr = Scalar(0.1);
  const std::vector<Values> want = {
      {0.9698488655422236, -1.9465477516175151, 0.43117527983883147},
      {1.0468289014341736, -2.0266118285200587, 0.35027129634324244},
      {0.966533394579477, -1.9477854862669153, 0.4274456596573714}};
  for (int t = 0; t < 3; ++t) {
    ASSERT_TRUE(
        Exec("ResourceApplyAdagrad", {var, accum, lr, Put({3}, kGrads[t])})
            .ok());
    ExpectNear(Read(var), want[t], absl::StrCat("var after step ", t + 1));
  }
  ExpectNear(Read(accum), {0.76, 1.03, 1.36}, "accum");
  // update_slots=false: accum stays, var -= lr * grad / sqrt(accum).
  ASSERT_TRUE(Exec("ResourceApplyAdagrad",
                   {var, accum, lr, Put({3}, {1.0, 1.0, 1.0})}, {},
                   {{"update_slots", false}})
                  .ok());
  ExpectNear(Read(accum), {0.76, 1.03, 1.36}, "accum without update_slots");
  ExpectNear(
      Read(var),
      {want[2][0] - 0.1 / std::sqrt(0.76), want[2][1] - 0.1 / std::sqrt(1.03),
       want[2][2] - 0.1 / std::sqrt(1.36)},
      "var without update_slots");
}

TEST_P(TrainingOpsTest, RMSProp) {
  const int64_t var = Var("w", kVar0);
  const int64_t ms = Var("w/RMSProp/ms", {1, 1, 1});
  const int64_t mom = Var("w/RMSProp/mom", {0, 0, 0});
  const int64_t lr = Scalar(0.01), rho = Scalar(0.9);
  const int64_t momentum = Scalar(0.5), epsilon = Scalar(1e-7);
  const std::vector<Values> want = {
      {0.9989464926244935, -1.9978964843067866, 0.49685341629544166},
      {1.0028185313678435, -2.0023047252872455, 0.48878785009161574},
      {0.9968948877910466, -1.9956675289005377, 0.49451871760987537}};
  for (int t = 0; t < 3; ++t) {
    ASSERT_TRUE(Exec("ResourceApplyRMSProp", {var, ms, mom, lr, rho, momentum,
                                              epsilon, Put({3}, kGrads[t])})
                    .ok());
    ExpectNear(Read(var), want[t], absl::StrCat("var after step ", t + 1));
  }
  ExpectNear(Read(ms), {0.79321, 0.81874, 0.84969}, "ms");
  ExpectNear(
      Read(mom),
      {0.005923643576796862, -0.006637196386707772, -0.005730867518259619},
      "mom");
}

TEST_P(TrainingOpsTest, ReadBeforeUpdateKeepsTheOldValue) {
  const int64_t var = Var("w", kVar0);
  const int64_t before = next_id_++;
  ASSERT_TRUE(Exec("ReadVariableOp", {var}, {before}).ok());
  ASSERT_TRUE(Exec("ResourceApplyGradientDescent",
                   {var, Scalar(1.0), Put({3}, {1, 1, 1})})
                  .ok());
  ExpectNear(Fetch(before), kVar0, "read before the update");
  ExpectNear(Read(var), {0, -3, -0.5}, "read after the update");
}

TEST_P(TrainingOpsTest, AssignAddAndAssignSub) {
  const int64_t var = Var("w", kVar0);
  const int64_t before = next_id_++;
  ASSERT_TRUE(Exec("ReadVariableOp", {var}, {before}).ok());
  ASSERT_TRUE(Exec("AssignAddVariableOp", {var, Put({3}, {1, 2, 3})}).ok());
  const int64_t middle = next_id_++;
  ASSERT_TRUE(Exec("ReadVariableOp", {var}, {middle}).ok());
  ASSERT_TRUE(
      Exec("AssignSubVariableOp", {var, Put({3}, {0.5, 0.5, 0.5})}).ok());
  ExpectNear(Fetch(before), kVar0, "read before AssignAdd");
  ExpectNear(Fetch(middle), {2, 0, 3.5}, "read between");
  ExpectNear(Read(var), {1.5, -0.5, 3}, "read after AssignSub");
}

TEST_P(TrainingOpsTest, AssignUpdateErrors) {
  const int64_t var = Var("w", kVar0);
  absl::Status shape = Exec("AssignAddVariableOp", {var, Put({2}, {1, 2})});
  EXPECT_EQ(shape.code(), StatusCode::kInvalidArgument) << shape;
  EXPECT_TRUE(absl::StrContains(shape.message(), "AssignAddVariableOp"))
      << shape;
  EXPECT_TRUE(absl::StrContains(shape.message(), "[3]")) << shape;
  EXPECT_TRUE(absl::StrContains(shape.message(), "[2]")) << shape;
  const int64_t uninit = Declare("u", {3});
  absl::Status s = Exec("AssignSubVariableOp", {uninit, Put({3}, kVar0)});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'u' is uninitialized")) << s;
  // Unknown id: NOT_FOUND naming the op, command and id.
  absl::Status unknown = Exec("ReadVariableOp", {9999}, {next_id_++});
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound) << unknown;
  EXPECT_TRUE(absl::StrContains(unknown.message(), "ReadVariableOp"))
      << unknown;
  EXPECT_TRUE(absl::StrContains(unknown.message(), "9999")) << unknown;
  absl::Status unknown_add =
      Exec("AssignAddVariableOp", {9999, Put({3}, kVar0)});
  EXPECT_EQ(unknown_add.code(), StatusCode::kNotFound) << unknown_add;
  ExpectNear(Read(var), kVar0, "after the failed updates");
}

TEST_P(TrainingOpsTest, ApplyErrorsNameTheOpAndShapesAndChangeNothing) {
  const int64_t var = Var("w", kVar0);
  const int64_t accum = Var("w/Momentum", {0, 0, 0});
  const int64_t short_slot = Var("short", {0, 0});
  const int64_t lr = Scalar(0.1), momentum = Scalar(0.9);
  const int64_t grad = Put({3}, kGrads[0]);

  absl::Status slot =
      Exec("ResourceApplyMomentum", {var, short_slot, lr, grad, momentum});
  EXPECT_EQ(slot.code(), StatusCode::kInvalidArgument) << slot;
  EXPECT_TRUE(absl::StrContains(slot.message(), "ResourceApplyMomentum"))
      << slot;
  EXPECT_TRUE(absl::StrContains(slot.message(), "[2]")) << slot;
  EXPECT_TRUE(absl::StrContains(slot.message(), "[3]")) << slot;

  absl::Status bad_grad = Exec("ResourceApplyMomentum",
                               {var, accum, lr, Put({3, 1}, kVar0), momentum});
  EXPECT_EQ(bad_grad.code(), StatusCode::kInvalidArgument) << bad_grad;
  EXPECT_TRUE(absl::StrContains(bad_grad.message(), "grad")) << bad_grad;
  EXPECT_TRUE(absl::StrContains(bad_grad.message(), "[3,1]")) << bad_grad;

  const int64_t other_dtype = next_id_++;
  ASSERT_TRUE(s_.PutTensor(++seq_, other_dtype,
                           Tensor::FromVector<int32_t>({3}, {1, 2, 3}))
                  .ok());
  absl::Status dtype_mismatch =
      Exec("ResourceApplyGradientDescent", {var, lr, other_dtype});
  EXPECT_EQ(dtype_mismatch.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(dtype_mismatch.message(), "int32[3]"))
      << dtype_mismatch;

  absl::Status not_scalar =
      Exec("ResourceApplyGradientDescent", {var, grad, grad});
  EXPECT_EQ(not_scalar.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(not_scalar.message(), "alpha must be"))
      << not_scalar;

  absl::Status same =
      Exec("ResourceApplyMomentum", {var, var, lr, grad, momentum});
  EXPECT_EQ(same.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(same.message(), "same variable")) << same;

  absl::Status not_handle =
      Exec("ResourceApplyGradientDescent", {grad, lr, grad});
  EXPECT_EQ(not_handle.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(not_handle.message(), "variable handle"))
      << not_handle;

  const int64_t uninit = Declare("w/uninit", {3});
  absl::Status slot_uninit =
      Exec("ResourceApplyMomentum", {var, uninit, lr, grad, momentum});
  EXPECT_EQ(slot_uninit.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(slot_uninit.message(), "'w/uninit'"))
      << slot_uninit;
  EXPECT_TRUE(absl::StrContains(slot_uninit.message(), "uninitialized"))
      << slot_uninit;

  absl::Status wrong_t = Exec(
      "ResourceApplyGradientDescent", {var, lr, grad}, {},
      {{"T", dtype() == DType::kFloat32 ? DType::kFloat64 : DType::kFloat32}});
  EXPECT_EQ(wrong_t.code(), StatusCode::kInvalidArgument) << wrong_t;

  ExpectNear(Read(var), kVar0, "var after the failures");
  ExpectNear(Read(accum), {0, 0, 0}, "accum after the failures");
  // The session still works.
  ASSERT_TRUE(
      Exec("ResourceApplyMomentum", {var, accum, lr, grad, momentum}).ok());
  ExpectNear(Read(var), {0.99, -1.98, 0.47}, "var after a good step");
}

// One step of each optimizer on complex128 variables against TensorFlow
// 2.21's CPU kernels (tf.raw_ops.ResourceApply*, complex arithmetic
// throughout: grad^2, not |grad|^2). Printed by this script:
//   c = lambda v: tf.constant(v, tf.complex128)
//   v = tf.Variable(np.array([1+1j, -2+0.5j])); g = [0.5-0.25j, -1+2j]
//   tf.raw_ops.ResourceApplyAdam(var=v.handle, m=..., v=...,
//   beta1_power=c(0.9),
//       beta2_power=c(0.999), lr=c(0.01), beta1=c(0.9), beta2=c(0.999),
//       epsilon=c(1e-7), grad=c(g)); print(v.numpy())
// (and likewise for the others, with the hyperparameters below).
class ComplexTrainingTest : public ::testing::Test {
 protected:
  using C = complex128;
  ComplexTrainingTest() : s_(DefaultRegistry(), SessionOptions{}) {}
  int64_t Put(std::vector<C> v) {
    const int64_t id = next_id_++;
    const Shape shape =
        v.size() == 1 ? Shape{} : Shape{static_cast<int64_t>(v.size())};
    EXPECT_TRUE(s_.PutTensor(++seq_, id, Tensor::FromVector<C>(shape, v)).ok());
    return id;
  }
  int64_t Var(const std::string& name, std::vector<C> v) {
    const int64_t handle = next_id_++;
    EXPECT_TRUE(s_.ExecuteOp(++seq_, "VarHandleOp", {}, {handle},
                             {{"dtype", DType::kComplex128},
                              {"shape", std::vector<int64_t>{2}},
                              {"shared_name", name}})
                    .ok());
    EXPECT_TRUE(
        s_.ExecuteOp(++seq_, "AssignVariableOp", {handle, Put(v)}, {}, {})
            .ok());
    return handle;
  }
  void Apply(absl::string_view op, std::vector<int64_t> in) {
    absl::Status st = s_.ExecuteOp(++seq_, op, in, {}, {});
    ASSERT_TRUE(st.ok()) << st;
  }
  void ExpectVar(int64_t handle, std::vector<C> want, const char* what) {
    const int64_t id = next_id_++;
    ASSERT_TRUE(
        s_.ExecuteOp(++seq_, "ReadVariableOp", {handle}, {id}, {}).ok());
    absl::StatusOr<Tensor> t = s_.FetchTensor(++seq_, id);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->dtype(), DType::kComplex128);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(std::abs(t->data<C>()[i] - want[i]), 0, 1e-12)
          << what << " element " << i;
    }
  }
  const std::vector<C> var0_ = {{1, 1}, {-2, 0.5}};
  const std::vector<C> grad_ = {{0.5, -0.25}, {-1, 2}};
  Session s_;
  int64_t seq_ = 0;
  int64_t next_id_ = 1;
};

TEST_F(ComplexTrainingTest, EveryOptimizerMatchesTensorFlow) {
  int64_t var = Var("gd", var0_);
  Apply("ResourceApplyGradientDescent", {var, Put({0.1}), Put(grad_)});
  ExpectVar(var, {{0.95, 1.025}, {-1.9, 0.3}}, "GradientDescent");

  var = Var("momentum", var0_);
  int64_t accum = Var("momentum/accum", {0, 0});
  for (int step = 0; step < 2; ++step) {
    Apply("ResourceApplyMomentum",
          {var, accum, Put({0.1}), Put(grad_), Put({0.9})});
  }
  ExpectVar(var, {{0.855, 1.0725}, {-1.71, -0.08}}, "Momentum var");
  ExpectVar(accum, {{0.95, -0.475}, {-1.9, 3.8}}, "Momentum accum");

  var = Var("adam", var0_);
  const int64_t m = Var("adam/m", {0, 0}), v = Var("adam/v", {0, 0});
  Apply("ResourceApplyAdam",
        {var, m, v, Put({0.9}), Put({0.999}), Put({0.01}), Put({0.9}),
         Put({0.999}), Put({1e-7}), Put(grad_)});
  ExpectVar(var,
            {{0.9900000505962505, 1.0000000252979653},
             {-1.9900000063245673, 0.49999998735090534}},
            "Adam var");
  ExpectVar(v, {{0.0001875, -0.00025}, {-0.003, -0.004}}, "Adam v");

  var = Var("adagrad", var0_);
  accum = Var("adagrad/accum", {0.1, 0.1});
  Apply("ResourceApplyAdagrad", {var, accum, Put({0.1}), Put(grad_)});
  ExpectVar(var,
            {{0.9099399933118861, 1.0095618581822106},
             {-1.89940443769386, 0.4991855144314685}},
            "Adagrad var");

  var = Var("rmsprop", var0_);
  const int64_t ms = Var("rmsprop/ms", {1, 1});
  const int64_t mom = Var("rmsprop/mom", {0, 0});
  Apply("ResourceApplyRMSProp", {var, ms, mom, Put({0.01}), Put({0.9}),
                                 Put({0.5}), Put({1e-7}), Put(grad_)});
  ExpectVar(var,
            {{0.994749573257943, 1.0025365400399249},
             {-1.9819042328430292, 0.4808710069194063}},
            "RMSProp var");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, TrainingOpsTest,
                         ::testing::Values(DType::kFloat32, DType::kFloat64),
                         [](const auto& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace gradtape
