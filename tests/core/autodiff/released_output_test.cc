// Releasing an op's output must not cut a gradient of a gradient: an output
// that a live tape entry saves for its backward stays on every tape that
// recorded its producer (core/autodiff/tape.h, lifetime), so what the inner
// backward computes from it is recorded on the outer tape as depending on
// the op.
//
// Both tests compare a second-order gradient, by nested tapes, with central
// differences of the first-order gradient. With G(X) = d<w, f(X)>/dX:
//   d<u, G(X)>/dX == (<u, G(X + h e_k)> - <u, G(X - h e_k)>) / 2h.
// The weights are not constant: with plain sums, a softmax's rows summing
// to one hide a dropped Hessian term.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/autodiff/autodiff_fixture.h"
#include "tests/core/autodiff/second_order_check.h"
#include "tests/core/ops/op_samples.h"

namespace gradtape {
namespace {

using testing::AllOpSamples;
using testing::AutodiffTest;
using testing::ExpectSecondOrderMatchesDifferences;
using testing::OpSample;
using testing::Wave;
using testing::Weights;

constexpr double kStep = 1e-5;

// --- The tape's rule --------------------------------------------------------

// SparseSoftmaxCrossEntropyWithLogits(logits, labels) -> (loss, backprop),
// recorded on tape 1; its backward reads backprop (output 1) only.
class ReleasedOutputOnTape : public ::testing::Test {
 protected:
  ReleasedOutputOnTape() : ctx_(DefaultRegistry()) {
    EXPECT_TRUE(ctx_.tapes().Push(1, false, false).ok());
    tape_ = *ctx_.tapes().Find(1);
    logits_ = ctx_.Adopt(Tensor::FromVector<double>({2, 3}, Wave(6, 2)));
    tape_->Watch(logits_);
    Tensor labels = ctx_.Adopt(Tensor::FromVector<int32_t>({2}, {2, 0}));
    EXPECT_TRUE(ctx_.Execute("SparseSoftmaxCrossEntropyWithLogits",
                             {logits_, labels}, {}, &out_)
                    .ok());
    producer_ = tape_->Producer(out_[0].id());
  }

  OpExecutor ctx_;
  Tape* tape_ = nullptr;
  Tensor logits_;
  Tensors out_;
  int64_t producer_ = Tape::kNotOnTape;
};

TEST_F(ReleasedOutputOnTape, ASavedOutputStaysWhileItsEntryLives) {
  ASSERT_GE(producer_, 0);
  const int64_t saved = tape_->SavedBytes();
  ctx_.Forget(out_[1].id());  // backprop: the entry saves it
  EXPECT_EQ(tape_->Producer(out_[1].id()), producer_);
  EXPECT_EQ(tape_->SavedBytes(), saved);
  ctx_.Forget(out_[0].id());  // the last output: the entry goes, and both
  EXPECT_EQ(tape_->Producer(out_[0].id()), Tape::kNotOnTape);
  EXPECT_EQ(tape_->Producer(out_[1].id()), Tape::kNotOnTape);
  EXPECT_EQ(tape_->num_entries(), 0u);
  EXPECT_EQ(tape_->SavedBytes(), 0);
}

TEST_F(ReleasedOutputOnTape, AnOutputNothingSavesLeavesAtOnce) {
  ASSERT_GE(producer_, 0);
  ctx_.Forget(out_[0].id());  // loss: not saved
  EXPECT_EQ(tape_->Producer(out_[0].id()), Tape::kNotOnTape);
  EXPECT_EQ(tape_->Producer(out_[1].id()), producer_);
  ctx_.Forget(out_[1].id());
  EXPECT_EQ(tape_->Producer(out_[1].id()), Tape::kNotOnTape);
  EXPECT_EQ(tape_->num_entries(), 0u);
  EXPECT_EQ(tape_->SavedBytes(), 0);
}

TEST_F(ReleasedOutputOnTape, AConsumerOfAKeptOutputKeepsTheEntry) {
  ctx_.Forget(out_[1].id());
  // What a backward does with the saved output, recorded on this tape.
  Tensors y;
  ASSERT_TRUE(ctx_.Execute("Neg", {out_[1]}, {}, &y).ok());
  ctx_.Forget(out_[0].id());
  EXPECT_EQ(tape_->Producer(out_[1].id()), producer_);
  ASSERT_NE(tape_->FindEntry(producer_), nullptr);
  ctx_.Forget(y[0].id());  // the consumer goes, and the producer with it
  EXPECT_EQ(tape_->Producer(out_[1].id()), Tape::kNotOnTape);
  EXPECT_EQ(tape_->num_entries(), 0u);
}

// --- SparseSoftmaxCrossEntropyWithLogits through the session ---------------

// x [3, 4] (float64), logits = x * x, labels [0, 3, 1];
// L = <w, loss> with loss = SparseSoftmaxCrossEntropyWithLogits(logits)[0].
class ReleasedBackprop : public AutodiffTest {
 protected:
  static constexpr int64_t kLabels = 2;
  static constexpr int64_t kW = 3;
  static constexpr int64_t kU = 4;

  void SetUp() override {
    ASSERT_TRUE(session_
                    .PutTensor(++seq_, kLabels,
                               Tensor::FromVector<int32_t>({3}, {0, 3, 1}))
                    .ok());
    Put(kW, {3}, {0.7, -1.3, 2.1});
    Put(kU, {3, 4}, Wave(12, 5));
  }

  // dL/dx at `x` on fresh ids from `base`, recorded on tape `base`; with
  // `outer`, also on tape `outer` (which watches x too). With `release`, the
  // client releases the op's backprop output (output 1) before the gradient.
  // Returns the id of dL/dx.
  int64_t FirstOrder(int64_t base, int64_t x, int64_t outer, bool release) {
    EXPECT_TRUE(Push(base).ok());
    EXPECT_TRUE(Watch(base, {x}).ok());
    if (outer != 0) {
      EXPECT_TRUE(Watch(outer, {x}).ok());
    }
    Exec("Mul", {x, x}, {base + 1});
    Exec("SparseSoftmaxCrossEntropyWithLogits", {base + 1, kLabels},
         {base + 2, base + 3});
    if (release) {
      EXPECT_TRUE(session_.ReleaseTensors(++seq_, {base + 3}).ok());
    }
    Exec("Mul", {base + 2, kW}, {base + 4});
    Exec("Sum", {base + 4}, {base + 5});
    EXPECT_TRUE(Pop(base).ok());
    EXPECT_TRUE(Grad(base, {base + 5}, {x}, {base + 6}).ok());
    return base + 6;
  }

  // <u, dL/dx> at `x`, without an outer tape.
  double Inner(const std::vector<double>& x) {
    const int64_t base = next_id_;
    next_id_ += 10;
    Put(base, {3, 4}, x);
    const std::vector<double> g = Values(FirstOrder(base, base, 0, false));
    const std::vector<double> u = Values(kU);
    double total = 0;
    for (size_t k = 0; k < g.size(); ++k) total += u[k] * g[k];
    return total;
  }

  // d<u, dL/dx>/dx by nested tapes, on ids (and an outer tape) from `base`.
  std::vector<double> SecondOrder(int64_t base, bool release) {
    const int64_t x = base, outer = base + 1;
    Put(x, {3, 4}, Wave(12, 1));
    EXPECT_TRUE(Push(outer).ok());
    const int64_t g = FirstOrder(base + 10, x, outer, release);
    Exec("Mul", {g, kU}, {base + 2});
    Exec("Sum", {base + 2}, {base + 3});
    EXPECT_TRUE(Pop(outer).ok());
    auto h = Grad(outer, {base + 3}, {x}, {base + 4});
    EXPECT_TRUE(h.ok()) << h.status();
    return Values(base + 4);
  }

  std::vector<double> Differences() {
    const std::vector<double> x = Wave(12, 1);
    std::vector<double> out;
    for (size_t k = 0; k < x.size(); ++k) {
      std::vector<double> plus = x, minus = x;
      plus[k] += kStep;
      minus[k] -= kStep;
      out.push_back((Inner(plus) - Inner(minus)) / (2 * kStep));
    }
    return out;
  }
};

TEST_F(ReleasedBackprop, SecondOrderMatchesDifferencesWhenReleased) {
  const std::vector<double> h = SecondOrder(100, /*release=*/true);
  const std::vector<double> numeric = Differences();
  ASSERT_EQ(h.size(), numeric.size());
  for (size_t k = 0; k < h.size(); ++k) {
    EXPECT_NEAR(h[k], numeric[k], 1e-6 + 1e-6 * std::abs(numeric[k]))
        << "d2 L / dx[" << k << "]";
  }
}

TEST_F(ReleasedBackprop, ReleasingDoesNotChangeTheSecondOrder) {
  const std::vector<double> kept = SecondOrder(100, /*release=*/false);
  const std::vector<double> released = SecondOrder(200, /*release=*/true);
  ASSERT_EQ(kept.size(), released.size());
  for (size_t k = 0; k < kept.size(); ++k) {
    EXPECT_DOUBLE_EQ(released[k], kept[k]) << "d2 L / dx[" << k << "]";
  }
}

// --- Every multi-output op, each output released in turn -------------------

struct ReleaseCase {
  OpSample sample;
  int released;  // the output released before the gradient
};

void PrintTo(const ReleaseCase& c, std::ostream* os) {
  *os << c.sample.op << " (" << c.sample.label << "), output " << c.released
      << " released";
}

// Output j takes part in the loss: float64, and not the released one.
bool InLoss(const Tensor& out, int j, int released) {
  return j != released && out.dtype() == DType::kFloat64;
}

class ReleasedOutput : public ::testing::TestWithParam<ReleaseCase> {
 protected:
  ReleasedOutput() : ctx_(DefaultRegistry()) {}

  Tensor Run(absl::string_view op, std::vector<Tensor> in, AttrMap attrs = {}) {
    Tensors out;
    absl::Status s = ctx_.Execute(op, in, std::move(attrs), &out);
    EXPECT_TRUE(s.ok()) << s;
    return s.ok() ? out[0] : Tensor();
  }

  // G(in) = d<w, f(in)>/d(differentiable inputs), on tape 2 (and, with
  // `outer`, tape 1, which watches the sources too). Output `released` of f
  // is released (OpExecutor::Forget, as Session::ReleaseTensors does) before
  // the loss is built, so only its producer's entry keeps it.
  std::vector<Tensor> FirstOrder(const std::vector<Tensor>& in, bool outer) {
    const ReleaseCase& c = GetParam();
    std::vector<Tensor> sources;
    for (int i : wrt_) sources.push_back(in[i]);
    if (outer) {
      EXPECT_TRUE(ctx_.tapes().Push(1, false, false).ok());
      for (const Tensor& t : sources) (*ctx_.tapes().Find(1))->Watch(t);
    }
    EXPECT_TRUE(ctx_.tapes().Push(2, false, false).ok());
    for (const Tensor& t : sources) (*ctx_.tapes().Find(2))->Watch(t);
    Tensors out;
    absl::Status s = ctx_.Execute(*op_, in, c.sample.attrs, &out);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return {};
    ctx_.Forget(out[c.released].id());
    out[c.released] = Tensor();
    Tensor loss;
    for (size_t j = 0; j < out.size(); ++j) {
      if (!InLoss(probe_[j], static_cast<int>(j), c.released)) continue;
      Tensor term = Run("Sum", {Run("Mul", {out[j], w_[j]})});
      loss = loss.valid() ? Run("AddV2", {loss, term}) : term;
    }
    EXPECT_TRUE(ctx_.tapes().Pop(2).ok());
    auto g = Gradient(ctx_, **ctx_.tapes().Find(2), {loss}, sources, {},
                      Unconnected::kZero);
    EXPECT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(ctx_.tapes().Delete(2).ok());
    if (outer) {
      EXPECT_TRUE(ctx_.tapes().Pop(1).ok());
    }
    return g.ok() ? *g : std::vector<Tensor>();
  }

  OpExecutor ctx_;
  const OpDef* op_ = nullptr;
  std::vector<int> wrt_;
  Tensors probe_;          // f at the sample: the outputs' dtypes and shapes
  std::vector<Tensor> w_;  // per output (invalid where not in the loss)
};

TEST_P(ReleasedOutput, SecondOrderMatchesDifferences) {
  const ReleaseCase& c = GetParam();
  op_ = DefaultRegistry().Find(c.sample.op);
  ASSERT_NE(op_, nullptr);
  std::vector<Tensor> x;
  for (const Tensor& t : c.sample.inputs) x.push_back(ctx_.Adopt(t));
  for (int i = 0; i < op_->num_inputs(); ++i) {
    if (op_->input_differentiable[i] && x[i].dtype() == DType::kFloat64) {
      wrt_.push_back(i);
    }
  }
  ASSERT_TRUE(ctx_.Execute(*op_, x, c.sample.attrs, &probe_).ok());
  w_.resize(probe_.size());
  for (size_t j = 0; j < probe_.size(); ++j) {
    if (InLoss(probe_[j], static_cast<int>(j), c.released)) {
      w_[j] = Weights(probe_[j], static_cast<int>(j) + 1);
    }
  }

  std::vector<Tensor> g = FirstOrder(x, /*outer=*/true);
  ASSERT_EQ(g.size(), wrt_.size());
  std::vector<Tensor> u;
  for (size_t i = 0; i < g.size(); ++i) u.push_back(Weights(g[i], 3 + i));
  std::vector<Tensor> sources;
  for (int i : wrt_) sources.push_back(x[i]);
  auto h =
      Gradient(ctx_, **ctx_.tapes().Find(1), g, sources, u, Unconnected::kZero);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(ctx_.tapes().Delete(1).ok());

  ExpectSecondOrderMatchesDifferences(
      ctx_, x, wrt_, u, *h,
      [&](const std::vector<Tensor>& in) { return FirstOrder(in, false); },
      absl::StrCat(c.sample.op, " (", c.sample.label, "), output ", c.released,
                   " released"));
}

// Every sample of a differentiable multi-output op with a float64 input, once
// per output that leaves a float64 output in the loss when released.
std::vector<ReleaseCase> ReleaseCases() {
  std::vector<ReleaseCase> cases;
  for (const OpSample& s : AllOpSamples()) {
    const OpDef* op = DefaultRegistry().Find(s.op);
    if (op == nullptr || op->num_outputs() < 2 || !op->differentiable() ||
        !op->backward_supported()) {
      continue;
    }
    bool float64_input = false;
    for (int i = 0; i < op->num_inputs(); ++i) {
      float64_input = float64_input || (op->input_differentiable[i] &&
                                        s.inputs[i].dtype() == DType::kFloat64);
    }
    if (!float64_input) continue;
    OpExecutor ctx(DefaultRegistry());
    std::vector<Tensor> in;
    for (const Tensor& t : s.inputs) in.push_back(ctx.Adopt(t));
    Tensors out;
    if (!ctx.Execute(*op, in, s.attrs, &out).ok()) continue;
    for (int k = 0; k < op->num_outputs(); ++k) {
      bool any = false;
      for (int j = 0; j < op->num_outputs(); ++j) {
        any = any || InLoss(out[j], j, k);
      }
      if (any) cases.push_back({s, k});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(MultiOutputOps, ReleasedOutput,
                         ::testing::ValuesIn(ReleaseCases()),
                         [](const ::testing::TestParamInfo<ReleaseCase>& info) {
                           return info.param.sample.op + "_" +
                                  std::to_string(info.index) + "_release" +
                                  std::to_string(info.param.released);
                         });

}  // namespace
}  // namespace gradtape
