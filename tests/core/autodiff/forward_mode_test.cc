// Forward mode (core/autodiff/forward_mode.h): for every op with a forward
// rule, and for a few ops through the double-VJP fallback, the JVP equals J @ v
// with J the reverse-mode Jacobian; a Hessian-vector product by
// forward-over-reverse equals central differences of the gradient; None / zero
// semantics.
#include <cmath>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "core/autodiff/jacobian.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "tests/core/autodiff/autodiff_fixture.h"
#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {
namespace {

using ::absl::StatusCode;

// Ops without a forward rule checked through the fallback.
const std::set<std::string>& FallbackOps() {
  static const auto* ops = new std::set<std::string>{
      "Sin",        "Softmax",
      "LogSoftmax", "BiasAdd",
      "Elu",        "Cumsum",
      "Conv2D",     "MaxPool",
      "Softplus",   "SparseSoftmaxCrossEntropyWithLogits"};
  return *ops;
}

bool RealSample(const OpSample& s) {
  for (const Tensor& t : s.inputs) {
    if (IsComplex(t.dtype())) return false;
  }
  return true;
}

std::vector<OpSample> JvpSamples() {
  std::vector<OpSample> out;
  for (const OpSample& s : AllOpSamples()) {
    const std::shared_ptr<const OpDef> op_def = SampleOpDef(s);
    const OpDef* op = op_def.get();
    if (op == nullptr || !RealSample(s)) continue;
    if (op->jvp || FallbackOps().count(s.op) > 0) out.push_back(s);
  }
  return out;
}

class JvpCheck : public ::testing::TestWithParam<OpSample> {};

TEST_P(JvpCheck, JvpEqualsJacobianTimesTangent) {
  const OpSample& s = GetParam();
  const std::shared_ptr<const OpDef> op_def = SampleOpDef(s);
  const OpDef* op = op_def.get();
  OpExecutor ctx(DefaultRegistry());
  std::vector<Tensor> x;
  for (const Tensor& t : s.inputs) x.push_back(ctx.Adopt(t));
  std::vector<int> wrt;
  std::vector<Tensor> v(x.size());
  for (int i = 0; i < op->num_inputs(); ++i) {
    if (op->input_differentiable[i] && IsFloating(x[i].dtype())) {
      wrt.push_back(i);
      v[i] = ctx.Adopt(RandomTensor(x[i].shape(), -1, 1, 100 + i));
    }
  }
  // Forward mode.
  ASSERT_TRUE(ctx.accumulators().Push(1).ok());
  ForwardAccumulator* acc = *ctx.accumulators().Find(1);
  for (int i : wrt) acc->Set(x[i].id(), {v[i], false});
  Tensors out;
  absl::Status run = ctx.Execute(*op, x, s.attrs, &out);
  ASSERT_TRUE(run.ok()) << run;
  ASSERT_TRUE(ctx.accumulators().Pop(1).ok());

  // Reverse mode: J for each output and input.
  ASSERT_TRUE(ctx.tapes().Push(2, /*persistent=*/true, false).ok());
  Tape* tape = *ctx.tapes().Find(2);
  for (int i : wrt) tape->Watch(x[i]);
  Tensors again;
  ASSERT_TRUE(ctx.Execute(*op, x, s.attrs, &again).ok());
  ASSERT_TRUE(ctx.tapes().Pop(2).ok());
  for (int o = 0; o < op->num_outputs(); ++o) {
    if (!IsFloating(out[o].dtype())) continue;
    std::vector<double> expected(out[o].num_elements(), 0.0);
    for (int i : wrt) {
      auto jac = Jacobian(ctx, *tape, again[o], {x[i]}, Unconnected::kZero);
      ASSERT_TRUE(jac.ok()) << jac.status();
      const Tensor& j = (*jac)[0];
      const int64_t n = x[i].num_elements();
      for (int64_t r = 0; r < out[o].num_elements(); ++r) {
        for (int64_t k = 0; k < n; ++k) {
          expected[r] += j.ElementAsDouble(r * n + k) * v[i].ElementAsDouble(k);
        }
      }
    }
    const ForwardAccumulator::Entry* e = acc->Find(out[o].id());
    for (int64_t r = 0; r < out[o].num_elements(); ++r) {
      const double got = e != nullptr ? e->tangent.ElementAsDouble(r) : 0.0;
      EXPECT_NEAR(got, expected[r], 1e-9 + 1e-9 * std::abs(expected[r]))
          << s.op << " (" << s.label << ") output " << o << "[" << r << "]"
          << (op->jvp ? " (rule)" : " (fallback)");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, JvpCheck, ::testing::ValuesIn(JvpSamples()),
                         [](const ::testing::TestParamInfo<OpSample>& info) {
                           return absl::StrCat(info.param.op, "_", info.index);
                         });

TEST(JvpCoverage, EveryOpWithARuleAndEveryFallbackOpIsChecked) {
  absl::flat_hash_set<std::string> checked;
  for (const OpSample& s : JvpSamples()) checked.insert(s.op);
  for (const auto& op : DefaultRegistry().ops()) {
    if (op->jvp) {
      EXPECT_TRUE(checked.contains(op->name)) << op->name;
    }
  }
  for (const std::string& name : FallbackOps()) {
    EXPECT_TRUE(checked.contains(name)) << name;
  }
  for (const char* name :
       {"AddV2", "Add", "Sub", "Mul", "RealDiv", "Div", "Neg", "Square", "Sqrt",
        "Exp", "Log", "Tanh", "Sigmoid", "Relu", "MatMul"}) {
    const OpDef* op = DefaultRegistry().Find(name);
    ASSERT_NE(op, nullptr) << name;
    EXPECT_TRUE(static_cast<bool>(op->jvp)) << name << " has no forward rule";
  }
}

class ForwardTest : public AutodiffTest {
 protected:
  absl::Status PushAcc(int64_t id) {
    return session_.PushAccumulator(++seq_, id);
  }
  absl::Status AccWatch(int64_t acc, std::vector<int64_t> ids,
                        std::vector<int64_t> tangents) {
    return session_.AccumulatorWatch(++seq_, acc, ids, tangents);
  }
  absl::StatusOr<Tensor> Jvp(int64_t acc, int64_t id, int64_t result,
                             Unconnected u = Unconnected::kNone) {
    return session_.FetchJvp(++seq_, acc, id, result, u);
  }
};

// H v by forward-over-reverse: the accumulator sees the gradient's
// backward ops, so the JVP of the gradient is the Hessian times v.
TEST_F(ForwardTest, HessianVectorProductMatchesFiniteDifferences) {
  Put(1, {2, 3}, Wave(6, 11));
  const std::vector<double> x = Wave(3, 12), v = {0.3, -0.7, 0.5};
  Put(2, {3, 1}, x);
  Put(3, {3, 1}, v);
  ASSERT_TRUE(PushAcc(7).ok());
  ASSERT_TRUE(AccWatch(7, {2}, {3}).ok());
  ASSERT_TRUE(Push(10).ok());
  ASSERT_TRUE(Watch(10, {2}).ok());
  Exec("MatMul", {1, 2}, {4});
  Exec("Tanh", {4}, {5});
  Exec("Sum", {5}, {6});
  ASSERT_TRUE(Pop(10).ok());
  ASSERT_TRUE(Grad(10, {6}, {2}, {8}).ok());
  ASSERT_TRUE(session_.PopAccumulator(++seq_, 7).ok());
  ASSERT_TRUE(Jvp(7, 8, 9).ok());
  const std::vector<double> hv = Values(9);
  ASSERT_EQ(hv.size(), 3u);
  constexpr double kStep = 1e-5;
  std::vector<double> plus = x, minus = x;
  for (int k = 0; k < 3; ++k) {
    plus[k] += kStep * v[k];
    minus[k] -= kStep * v[k];
  }
  const std::vector<double> gp = GradientAt(plus), gm = GradientAt(minus);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(hv[i], (gp[i] - gm[i]) / (2 * kStep), 1e-7) << i;
  }
  // The JVP of the function itself: <grad, v>.
  ASSERT_TRUE(Jvp(7, 6, 20).ok());
  const std::vector<double> g = Values(8);
  EXPECT_NEAR(Values(20)[0], g[0] * v[0] + g[1] * v[1] + g[2] * v[2], 1e-12);
  ASSERT_TRUE(session_.DeleteAccumulator(++seq_, 7).ok());
}

TEST_F(ForwardTest, NoTangentIsNoneOrZerosAndStopGradientBlocks) {
  Put(1, {2}, {0.5, 1.0});
  Put(2, {2}, {1.0, -1.0});
  Put(3, {2}, {2.0, 3.0});
  ASSERT_TRUE(PushAcc(7).ok());
  ASSERT_TRUE(AccWatch(7, {1}, {2}).ok());
  Exec("Exp", {1}, {4});
  Exec("StopGradient", {4}, {5});
  Exec("Exp", {3}, {6});
  ASSERT_TRUE(Jvp(7, 4, 10).ok());
  EXPECT_NEAR(Values(10)[0], std::exp(0.5), 1e-12);
  EXPECT_NEAR(Values(10)[1], -std::exp(1.0), 1e-12);
  for (int64_t id : {5, 6}) {
    auto none = Jvp(7, id, 10 + id);
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(none->valid());
    auto fetched = Fetch(10 + id);
    EXPECT_EQ(fetched.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(fetched.status().message(), "None JVP"))
        << fetched.status();
  }
  ASSERT_TRUE(Jvp(7, 6, 20, Unconnected::kZero).ok());
  EXPECT_EQ(Values(20), (std::vector<double>{0, 0}));
  // After Pop, ops get no tangents; earlier ones stay readable.
  ASSERT_TRUE(session_.PopAccumulator(++seq_, 7).ok());
  Exec("Exp", {4}, {21});
  ASSERT_TRUE(Jvp(7, 21, 22).ok());
  EXPECT_EQ(Fetch(22).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Jvp(7, 4, 23).ok());
  EXPECT_EQ(Values(23), Values(10));
}

TEST_F(ForwardTest, BadCommandsAreAtomicErrors) {
  Put(1, {2}, {0.5, 1.0});
  Put(2, {3}, {1.0, -1.0, 0});
  EXPECT_EQ(AccWatch(7, {1}, {2}).code(), StatusCode::kNotFound);
  ASSERT_TRUE(PushAcc(7).ok());
  EXPECT_EQ(PushAcc(7).code(), StatusCode::kAlreadyExists);
  absl::Status mismatch = AccWatch(7, {1}, {2});
  EXPECT_EQ(mismatch.code(), StatusCode::kInvalidArgument);
  for (const char* part :
       {"AccumulatorWatch", "command", "tangent id 2", "tensor id 1"}) {
    EXPECT_TRUE(absl::StrContains(mismatch.message(), part))
        << part << ": " << mismatch;
  }
  auto unknown = Jvp(7, 99, 30);
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Fetch(30).status().code(), StatusCode::kFailedPrecondition);
  // Nothing was watched: 1 has no tangent; the session works.
  Exec("Exp", {1}, {3});
  ASSERT_TRUE(Jvp(7, 3, 31).ok());
  EXPECT_EQ(Fetch(31).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(session_.PopAccumulator(++seq_, 8).code(), StatusCode::kNotFound);
}

// A tangent held only by the accumulator leaves with its tensor: releasing
// the primal frees the tangent (bytes drop back).
TEST_F(ForwardTest, ReleasingAPrimalFreesItsTangent) {
  Put(1, {64}, std::vector<double>(64, 0.5));
  Put(2, {64}, std::vector<double>(64, 1.0));
  ASSERT_TRUE(PushAcc(7).ok());
  ASSERT_TRUE(AccWatch(7, {1}, {2}).ok());
  const int64_t before = session_.Stats().bytes_in_use;
  Exec("Exp", {1}, {3});
  EXPECT_EQ(session_.Stats().bytes_in_use,
            before + 2 * ChargedBytes(64 * 8) + Session::kSlotBytes);
  ASSERT_TRUE(session_.ReleaseTensors(++seq_, {3}).ok());
  EXPECT_EQ(session_.Stats().bytes_in_use, before);
}

}  // namespace
}  // namespace gradtape::testing
