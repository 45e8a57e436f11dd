// Programs (core/autodiff/program.h): validation of hostile programs, runs
// that match the same ops run eagerly bit for bit (values and gradients),
// failures mid-program, and values dropped after their last reader.
#include "core/autodiff/program.h"

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/autodiff/gradient.h"
#include "core/autodiff/program_plan.h"
#include "core/base/cancellation.h"
#include "core/ops/ops.h"
#include "core/tensor/variable.h"
#include "gtest/gtest.h"

namespace gradtape {
namespace {

using ::absl::StatusCode;

Tensor Random(Shape shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return Tensor::FromVector<double>(shape, v);
}

ProgramLimits MaxSteps(int64_t n) {
  ProgramLimits limits;
  limits.max_steps = n;
  return limits;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.valid() && b.valid() && a.dtype() == b.dtype() &&
         a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0;
}

class ProgramTest : public ::testing::Test {
 protected:
  ProgramTest() : exec_(DefaultRegistry()) {}

  Tensor Arg(Tensor t) { return exec_.Adopt(std::move(t)); }
  Tensor Eager(absl::string_view op, std::vector<Tensor> inputs,
               AttrMap attrs = {}) {
    Tensors out;
    absl::Status s = exec_.Execute(op, inputs, attrs, &out);
    EXPECT_TRUE(s.ok()) << s;
    return s.ok() ? out[0] : Tensor();
  }
  absl::Status Validate(Program& p, ProgramLimits limits = {}) {
    return ValidateProgram(DefaultRegistry(), &p, limits);
  }
  // The next id the executor gives: tells whether any op ran since.
  int64_t NextId() { return exec_.Adopt(Tensor::Scalar<double>(0)).id(); }

  // A two-layer MLP: params x [4,3], w1 [3,5], w2 [5,2]; constants b1 [5],
  // b2 [2]; outputs the logits and their sum.
  static Program Mlp() {
    Program p;
    p.params = {{DType::kFloat64, {4, 3}},
                {DType::kFloat64, {3, 5}},
                {DType::kFloat64, {5, 2}}};
    p.constants = {Random({5}, 11), Random({2}, 12)};
    using R = ProgramRef;
    p.steps = {{"MatMul", {R::Param(0), R::Param(1)}, {}},
               {"BiasAdd", {R::Step(0), R::Constant(0)}, {}},
               {"Tanh", {R::Step(1)}, {}},
               {"MatMul", {R::Step(2), R::Param(2)}, {}},
               {"BiasAdd", {R::Step(3), R::Constant(1)}, {}},
               {"Sum", {R::Step(4)}, {}}};
    p.outputs = {R::Step(4), R::Step(5)};
    return p;
  }
  // The same ops, eagerly.
  std::vector<Tensor> MlpEager(const Program& p, const Tensor& x,
                               const Tensor& w1, const Tensor& w2) {
    Tensor h = Eager("MatMul", {x, w1});
    h = Eager("BiasAdd", {h, p.constants[0]});
    h = Eager("Tanh", {h});
    h = Eager("MatMul", {h, w2});
    Tensor logits = Eager("BiasAdd", {h, p.constants[1]});
    return {logits, Eager("Sum", {logits})};
  }

  OpExecutor exec_;
};

TEST_F(ProgramTest, MlpForwardEqualsEagerBitForBit) {
  Program p = Mlp();
  ASSERT_TRUE(Validate(p).ok());
  const Tensor x = Arg(Random({4, 3}, 1));
  const Tensor w1 = Arg(Random({3, 5}, 2));
  const Tensor w2 = Arg(Random({5, 2}, 3));
  absl::StatusOr<Tensors> out = RunProgram(exec_, p, {x, w1, w2});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  std::vector<Tensor> eager = MlpEager(p, x, w1, w2);
  EXPECT_TRUE(SameBits((*out)[0], eager[0])) << (*out)[0].DebugString();
  EXPECT_TRUE(SameBits((*out)[1], eager[1]));
  EXPECT_EQ((*out)[0].shape(), (Shape{4, 2}));
  EXPECT_NE((*out)[0].id(), 0);
  EXPECT_NE((*out)[0].id(), (*out)[1].id());
  // Run twice: the program is not consumed.
  absl::StatusOr<Tensors> again = RunProgram(exec_, p, {x, w1, w2});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(SameBits((*again)[1], eager[1]));
}

// d(sum of logits)/d(w1, w2) through a program run recorded on a tape equals
// the eager gradient, bit for bit.
TEST_F(ProgramTest, GradientThroughARunEqualsEagerGradient) {
  Program p = Mlp();
  ASSERT_TRUE(Validate(p).ok());
  const Tensor x = Arg(Random({4, 3}, 1));
  const Tensor w1 = Arg(Random({3, 5}, 2));
  const Tensor w2 = Arg(Random({5, 2}, 3));
  auto grads = [&](bool program) -> std::vector<Tensor> {
    const int64_t tape_id = program ? 1 : 2;
    EXPECT_TRUE(exec_.tapes().Push(tape_id, false, false).ok());
    Tape* tape = *exec_.tapes().Find(tape_id);
    tape->Watch(w1);
    tape->Watch(w2);
    Tensor loss;
    if (program) {
      absl::StatusOr<Tensors> out = RunProgram(exec_, p, {x, w1, w2});
      EXPECT_TRUE(out.ok()) << out.status();
      if (out.ok()) loss = (*out)[1];
    } else {
      loss = MlpEager(p, x, w1, w2)[1];
    }
    EXPECT_TRUE(exec_.tapes().Pop(tape_id).ok());
    EXPECT_GT(tape->num_entries(), 0u);
    absl::StatusOr<std::vector<Tensor>> g =
        Gradient(exec_, *tape, {loss}, {w1, w2}, {}, Unconnected::kNone);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *g : std::vector<Tensor>();
  };
  std::vector<Tensor> from_program = grads(true);
  std::vector<Tensor> from_eager = grads(false);
  ASSERT_EQ(from_program.size(), 2u);
  ASSERT_EQ(from_eager.size(), 2u);
  EXPECT_TRUE(SameBits(from_program[0], from_eager[0]));
  EXPECT_TRUE(SameBits(from_program[1], from_eager[1]));
  EXPECT_EQ(from_program[0].shape(), (Shape{3, 5}));
  double norm = 0;
  for (int64_t i = 0; i < from_program[0].num_elements(); ++i) {
    norm += std::abs(from_program[0].ElementAsDouble(i));
  }
  EXPECT_GT(norm, 0);
}

// A list input takes its count from the step's attr; a list output gives
// that many outputs to refer to.
TEST_F(ProgramTest, ListInputsAndOutputs) {
  using R = ProgramRef;
  Program p;
  p.params = {{DType::kFloat64, {2}}, {DType::kFloat64, {2}}};
  p.steps = {
      {"Pack", {R::Param(0), R::Param(1), R::Param(0)}, {{"N", int64_t{3}}}},
      {"Unpack", {R::Step(0)}, {{"num", int64_t{3}}}},
      {"AddV2", {R::Step(1, 1), R::Step(1, 2)}, {}}};
  p.outputs = {R::Step(2)};
  ASSERT_TRUE(Validate(p).ok());
  const Tensor a = Arg(Tensor::FromVector<double>({2}, {1, 2}));
  const Tensor b = Arg(Tensor::FromVector<double>({2}, {10, 20}));
  absl::StatusOr<Tensors> out = RunProgram(exec_, p, {a, b});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].ElementAsDouble(0), 11);
  EXPECT_EQ((*out)[0].ElementAsDouble(1), 22);

  p.steps[0].attrs = {{"N", int64_t{2}}};  // three inputs given
  absl::Status s = Validate(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "program step 0 (Pack)"))
      << s.message();
  p.steps[0].attrs = {{"N", int64_t{3}}};
  p.steps[2].inputs[1] = R::Step(1, 3);  // Unpack gives 3 outputs
  s = Validate(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "step 1 output 3")) << s.message();
  EXPECT_TRUE(
      absl::StrContains(s.message(), "that step (Unpack) has 3 outputs"))
      << s.message();
}

// Each hostile program is refused with the step, its op and the reference.
TEST_F(ProgramTest, RefusesHostilePrograms) {
  using R = ProgramRef;
  struct Case {
    const char* name;
    std::vector<ProgramStep> steps;
    std::vector<ProgramRef> outputs;
    StatusCode code;
    std::vector<const char*> says;
  };
  const std::vector<Case> cases = {
      {"unknown op",
       {{"Neg", {R::Param(0)}, {}}, {"NoSuchOp", {R::Step(0)}, {}}},
       {R::Step(1)},
       StatusCode::kNotFound,
       {"program step 1", "'NoSuchOp'"}},
      {"wrong arity",
       {{"Neg", {R::Param(0), R::Param(0)}, {}}},
       {R::Step(0)},
       StatusCode::kInvalidArgument,
       {"program step 0 (Neg) has 2 inputs, the op takes 1"}},
      {"forward reference (a cycle)",
       {{"Neg", {R::Step(1)}, {}}, {"Neg", {R::Step(0)}, {}}},
       {R::Step(1)},
       StatusCode::kInvalidArgument,
       {"program step 0 (Neg) input 0 refers to step 1 output 0"}},
      {"self reference",
       {{"Neg", {R::Param(0)}, {}}, {"Neg", {R::Step(1)}, {}}},
       {R::Step(1)},
       StatusCode::kInvalidArgument,
       {"program step 1 (Neg) input 0 refers to step 1", "only steps 0..0"}},
      {"param out of range",
       {{"AddV2", {R::Param(0), R::Param(1)}, {}}},
       {R::Step(0)},
       StatusCode::kInvalidArgument,
       {"program step 0 (AddV2) input 1 refers to param 1", "1 params"}},
      {"negative param",
       {{"Neg", {R::Param(-1)}, {}}},
       {R::Step(0)},
       StatusCode::kInvalidArgument,
       {"refers to param -1"}},
      {"constant out of range",
       {{"AddV2", {R::Param(0), R::Constant(1)}, {}}},
       {R::Step(0)},
       StatusCode::kInvalidArgument,
       {"program step 0 (AddV2) input 1 refers to constant 1", "1 constants"}},
      {"step output out of range",
       {{"Neg", {R::Param(0)}, {}}, {"Neg", {R::Step(0, 1)}, {}}},
       {R::Step(1)},
       StatusCode::kInvalidArgument,
       {"program step 1 (Neg) input 0 refers to step 0 output 1",
        "that step (Neg) has 1 outputs"}},
      {"bad output",
       {{"Neg", {R::Param(0)}, {}}},
       {R::Step(0), R::Step(1)},
       StatusCode::kInvalidArgument,
       {"program output 1 refers to step 1 output 0"}},
      {"bad attr",
       {{"Neg", {R::Param(0)}, {{"no_such_attr", int64_t{1}}}}},
       {R::Step(0)},
       StatusCode::kInvalidArgument,
       {"program step 0 (Neg)", "no_such_attr"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Program p;
    p.params = {{DType::kFloat64, {2}}};
    p.constants = {Tensor::FromVector<double>({2}, {1, 2})};
    p.steps = c.steps;
    p.outputs = c.outputs;
    absl::Status s = Validate(p);
    EXPECT_EQ(s.code(), c.code) << s;
    for (const char* piece : c.says)
      EXPECT_TRUE(absl::StrContains(s.message(), piece)) << s.message();
    EXPECT_FALSE(p.validated);
    // Refused programs cannot run.
    absl::StatusOr<Tensors> out =
        RunProgram(exec_, p, {Tensor::FromVector<double>({2}, {1, 2})});
    EXPECT_EQ(out.status().code(), StatusCode::kFailedPrecondition);
  }
}

// Declarations a run could not honour, and a list output past the limit on
// values.
TEST_F(ProgramTest, RefusesBadDeclarationsAndTooManyValues) {
  using R = ProgramRef;
  Program p;
  p.params = {{DType::kFloat64, {3}}};
  p.constants = {Tensor()};
  p.steps = {{"Neg", {R::Param(0)}, {}}};
  p.outputs = {R::Step(0)};
  absl::Status s = Validate(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "program constant 0 holds no"))
      << s;
  p.constants.clear();
  p.params[0].dtype = DType::kInvalid;
  s = Validate(p);
  EXPECT_TRUE(absl::StrContains(s.message(), "program param 0 has no dtype"))
      << s;
  p.params[0].dtype = DType::kFloat64;
  ASSERT_TRUE(Validate(p).ok());

  p.steps = {{"Unpack", {R::Param(0)}, {{"num", int64_t{3}}}},
             {"Unpack", {R::Param(0)}, {{"num", int64_t{3}}}}};
  ProgramLimits limits;
  limits.max_values = 6;  // the param and 3 + 3 outputs make 7
  s = Validate(p, limits);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(),
                                "program step 1 (Unpack) takes "
                                "the program past 6 values"))
      << s;
  limits.max_values = 7;
  EXPECT_TRUE(Validate(p, limits).ok());
}

// A million-step program is refused by its size, before any step is looked
// at: step 0's unknown op is not what the error says.
TEST_F(ProgramTest, RefusesAMillionStepsBeforeLookingAtThem) {
  Program p;
  p.params = {{DType::kFloat64, {}}};
  p.steps.assign(1000000, {"Neg", {ProgramRef::Param(0)}, {}});
  p.steps[0].op = "NoSuchOp";
  p.outputs = {ProgramRef::Step(0)};
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = Validate(p);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "1000000 steps")) << s.message();
  EXPECT_TRUE(absl::StrContains(s.message(), "limit of 100000")) << s.message();
  EXPECT_LT(elapsed, std::chrono::milliseconds(100));
  // A lower limit applies likewise; at the limit, the steps are checked.
  p.steps.resize(3);
  s = Validate(p, MaxSteps(2));
  EXPECT_TRUE(absl::StrContains(s.message(), "limit of 2")) << s.message();
  s = Validate(p, MaxSteps(3));
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
}

TEST_F(ProgramTest, RefusesArgsBeforeAnyStepRuns) {
  Program p = Mlp();
  ASSERT_TRUE(Validate(p).ok());
  const Tensor x = Arg(Random({4, 3}, 1));
  const Tensor w1 = Arg(Random({3, 5}, 2));
  const Tensor w2 = Arg(Random({5, 2}, 3));
  const Tensor w2_f32 =
      Arg(Tensor::FromVector<float>({5, 2}, std::vector<float>(10, 1.0f)));
  const Tensor w2_t = Arg(Random({2, 5}, 3));
  struct Case {
    std::vector<Tensor> args;
    std::vector<const char*> says;
  };
  const std::vector<Case> cases = {
      {{x, w1}, {"program takes 3 args, got 2"}},
      {{x, w1, w2, w2}, {"program takes 3 args, got 4"}},
      {{x, w1, w2_f32}, {"program param 2 is float64[5,2]", "float32"}},
      {{x, w1, w2_t}, {"program param 2 is float64[5,2]", "[2,5]"}},
      {{x, Tensor(), w2}, {"program param 1", "no tensor"}},
  };
  for (const Case& c : cases) {
    const int64_t before = NextId();
    absl::StatusOr<Tensors> out = RunProgram(exec_, p, c.args);
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    for (const char* piece : c.says) {
      EXPECT_TRUE(absl::StrContains(out.status().message(), piece))
          << out.status().message();
    }
    EXPECT_EQ(NextId(), before + 1) << "a step ran";
  }
}

// Step 1's kernel fails (a shape the dry run cannot see yet): the error names
// the step and its op, the tape keeps nothing of the run, and the executor
// runs the next program.
TEST_F(ProgramTest, AFailingStepNamesItAndLeavesTheExecutorUsable) {
  using R = ProgramRef;
  Program p;
  p.params = {{DType::kFloat64, {2, 3}}};
  p.constants = {Random({2, 3}, 5)};
  p.steps = {{"Tanh", {R::Param(0)}, {}},
             {"MatMul", {R::Step(0), R::Constant(0)}, {}},
             {"Neg", {R::Step(1)}, {}}};
  p.outputs = {R::Step(2)};
  ASSERT_TRUE(Validate(p).ok());
  const Tensor x = Arg(Random({2, 3}, 6));
  ASSERT_TRUE(exec_.tapes().Push(1, true, false).ok());
  Tape* tape = *exec_.tapes().Find(1);
  tape->Watch(x);
  Tensor before = Eager("Square", {x});  // one entry the run must not touch
  ASSERT_EQ(tape->num_entries(), 1u);
  absl::StatusOr<Tensors> out = RunProgram(exec_, p, {x});
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(out.status().message(), "program step 1 (MatMul): "))
      << out.status().message();
  EXPECT_EQ(tape->num_entries(), 1u);

  p.steps[1].attrs = {{"transpose_b", true}};
  ASSERT_TRUE(Validate(p).ok());
  out = RunProgram(exec_, p, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(tape->num_entries(), 4u);
  ASSERT_TRUE(exec_.tapes().Pop(1).ok());
  absl::StatusOr<std::vector<Tensor>> g =
      Gradient(exec_, *tape, {(*out)[0]}, {x}, {}, Unconnected::kNone);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)[0].shape(), (Shape{2, 3}));
}

TEST_F(ProgramTest, ValidationRecordsLastReaders) {
  using R = ProgramRef;
  Program p;
  p.params = {{DType::kFloat64, {2}}};
  p.constants = {Tensor::FromVector<double>({2}, {1, 2}),
                 Tensor::FromVector<double>({2}, {3, 4})};
  p.steps = {{"AddV2", {R::Param(0), R::Constant(0)}, {}},  // slot 3
             {"Neg", {R::Step(0)}, {}},                     // slot 4, unread
             {"Mul", {R::Step(0), R::Param(0)}, {}}};       // slot 5
  p.outputs = {R::Step(2)};
  ASSERT_TRUE(Validate(p).ok());
  EXPECT_EQ(p.num_slots, 6);
  EXPECT_EQ(p.step_ops[1]->name, "Neg");
  EXPECT_EQ(p.last_reader,
            (std::vector<int>{2, 0, Program::kUnread, 2, Program::kUnread,
                              Program::kReadByOutput}));
  EXPECT_EQ(p.drop_after, (std::vector<std::vector<int>>{{1}, {4}, {0, 3}}));
}

// A chain of 16 Neg on 1 MiB values runs under a 3.5 MiB limit: each value
// is dropped after its reader. The same chain keeping every value (each an
// output) is refused by the limit, so the limit does bite.
TEST_F(ProgramTest, DropsValuesAfterTheirLastReader) {
  constexpr int kSteps = 16;
  constexpr int64_t kElements = int64_t{1} << 17;  // 1 MiB of float64
  const Tensor x = Arg(Random({kElements}, 7));
  Program chain;
  chain.params = {{DType::kFloat64, {kElements}}};
  for (int s = 0; s < kSteps; ++s) {
    chain.steps.push_back(
        {"Neg", {s == 0 ? ProgramRef::Param(0) : ProgramRef::Step(s - 1)}, {}});
  }
  Program keeping = chain;
  chain.outputs = {ProgramRef::Step(kSteps - 1)};
  for (int s = 0; s < kSteps; ++s)
    keeping.outputs.push_back(ProgramRef::Step(s));
  ASSERT_TRUE(Validate(chain).ok());
  ASSERT_TRUE(Validate(keeping).ok());

  auto account = std::make_shared<MemoryAccount>();
  ScopedMemoryAccount scope(account);
  exec_.SetMemoryLimit(account, 3 * kElements * 8 + kElements * 4);
  absl::StatusOr<Tensors> out = RunProgram(exec_, chain, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(SameBits((*out)[0], x));  // an even number of negations
  EXPECT_LE(account->bytes(), 2 * kElements * 8);
  out = Tensors();
  EXPECT_LT(account->bytes(), kElements * 8);

  out = RunProgram(exec_, keeping, {x});
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(out.status().message(), "(Neg)"))
      << out.status().message();
  // Nothing of the failed run stays charged.
  EXPECT_LT(account->bytes(), kElements * 8);
}

// --- Tape steps: a whole training step as one program ----------------------

class ProgramTrainingTest : public ProgramTest {
 protected:
  // A float64 variable of random values (shape [3, 2] unless given), as a
  // client makes one.
  Tensor NewVariable(uint32_t seed, Shape shape = {3, 2}) {
    Tensors out;
    EXPECT_TRUE(exec_
                    .Execute("VarHandleOp", {},
                             {{"dtype", DType::kFloat64},
                              {"shape", std::vector<int64_t>(shape.begin(),
                                                             shape.end())}},
                             &out)
                    .ok());
    Tensors none;
    EXPECT_TRUE(exec_
                    .Execute("AssignVariableOp",
                             {out[0], Arg(Random(shape, seed))}, {}, &none)
                    .ok());
    return out[0];
  }
  static const Tensor& ValueOf(const Tensor& handle) {
    return VariableOf(handle)->value;
  }
  // One SGD step of loss = sum((x @ w - y)^2), variable w captured:
  // PushTape, ReadVariableOp, MatMul, Sub, Square, Sum, PopTape, Gradient
  // (w), ResourceApplyGradientDescent. Params x [4,3], y [4,2]; returns the
  // loss.
  static Program SgdStep(const Tensor& w, const Tensor& lr) {
    using R = ProgramRef;
    Program p;
    p.params = {{DType::kFloat64, {4, 3}}, {DType::kFloat64, {4, 2}}};
    p.constants = {w, lr};
    p.steps = {
        ProgramStep::PushTape(0),
        {"ReadVariableOp", {R::Constant(0)}, {{"dtype", DType::kFloat64}}},
        {"MatMul", {R::Param(0), R::Step(1)}, {}},
        {"Sub", {R::Step(2), R::Param(1)}, {}},
        {"Square", {R::Step(3)}, {}},
        {"Sum", {R::Step(4)}, {}},
        ProgramStep::PopTape(0),
        ProgramStep::Gradient(0, {R::Step(5)}, {R::Constant(0)}),
        {"ResourceApplyGradientDescent",
         {R::Constant(0), R::Constant(1), R::Step(7)},
         {}}};
    p.outputs = {R::Step(5)};
    return p;
  }
  // The same commands, eagerly, on tape `tape_id`.
  Tensor SgdStepEager(const Tensor& w, const Tensor& lr, const Tensor& x,
                      const Tensor& y, int64_t tape_id) {
    EXPECT_TRUE(exec_.tapes().Push(tape_id, false, true).ok());
    Tensor read = Eager("ReadVariableOp", {w}, {{"dtype", DType::kFloat64}});
    Tensor loss = Eager(
        "Sum",
        {Eager("Square", {Eager("Sub", {Eager("MatMul", {x, read}), y})})});
    EXPECT_TRUE(exec_.tapes().Pop(tape_id).ok());
    absl::StatusOr<std::vector<Tensor>> g =
        Gradient(exec_, **exec_.tapes().Find(tape_id), {loss}, {w}, {},
                 Unconnected::kNone);
    EXPECT_TRUE(g.ok()) << g.status();
    Tensors none;
    EXPECT_TRUE(exec_
                    .Execute("ResourceApplyGradientDescent", {w, lr, (*g)[0]},
                             {}, &none)
                    .ok());
    EXPECT_TRUE(exec_.tapes().Delete(tape_id).ok());
    return loss;
  }
};

// Five steps of the program and of the same commands run eagerly on twin
// variables: the same losses and weights, bit for bit; no tape is left.
TEST_F(ProgramTrainingTest, TrainingStepEqualsEagerCommandsBitForBit) {
  const Tensor w_program = NewVariable(5);
  const Tensor w_eager = NewVariable(5);
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  Program p = SgdStep(w_program, lr);
  ASSERT_TRUE(Validate(p).ok());
  EXPECT_EQ(p.num_tapes, 1);
  for (int step = 0; step < 5; ++step) {
    const Tensor x = Arg(Random({4, 3}, 100 + step));
    const Tensor y = Arg(Random({4, 2}, 200 + step));
    absl::StatusOr<Tensors> out = RunProgram(exec_, p, {x, y});
    ASSERT_TRUE(out.ok()) << out.status();
    const Tensor loss = SgdStepEager(w_eager, lr, x, y, 7);
    EXPECT_TRUE(SameBits((*out)[0], loss)) << step;
    EXPECT_TRUE(SameBits(ValueOf(w_program), ValueOf(w_eager))) << step;
  }
  EXPECT_FALSE(SameBits(ValueOf(w_program), Random({3, 2}, 5)));  // trained
  EXPECT_EQ(exec_.tapes().num_tapes(), 0u);
}

// A step that fails after the update: the variable gets its value back, the
// program's tape is gone, and the next run works.
TEST_F(ProgramTrainingTest, AFailedRunUndoesItsAssignments) {
  const Tensor w = NewVariable(5);
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  Program p = SgdStep(w, lr);
  // After the update: a MatMul whose inner dimensions differ (x [4,3] by
  // y [4,2]).
  p.steps.push_back(
      {"MatMul", {ProgramRef::Param(0), ProgramRef::Param(1)}, {}});
  ASSERT_TRUE(Validate(p).ok());
  const Tensor before = ValueOf(w);
  const Tensor x = Arg(Random({4, 3}, 1));
  const Tensor y = Arg(Random({4, 2}, 2));
  absl::StatusOr<Tensors> out = RunProgram(exec_, p, {x, y});
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(out.status().message(), "program step 9 (MatMul)"))
      << out.status();
  EXPECT_EQ(ValueOf(w).raw_data(), before.raw_data());  // the same buffer
  EXPECT_EQ(exec_.tapes().num_tapes(), 0u);
  p.steps.pop_back();
  ASSERT_TRUE(Validate(p).ok());
  ASSERT_TRUE(RunProgram(exec_, p, {x, y}).ok());
  EXPECT_FALSE(SameBits(ValueOf(w), before));
}

// A gradient's None result: returned as an invalid Tensor; a step that
// reads it fails naming the step.
TEST_F(ProgramTrainingTest, NoneGradients) {
  using R = ProgramRef;
  Program p;
  p.params = {{DType::kFloat64, {2}}, {DType::kFloat64, {2}}};
  p.steps = {ProgramStep::PushTape(0, false, false),
             ProgramStep::Watch(0, {R::Param(0), R::Param(1)}),
             {"Sum", {R::Param(0)}, {}},
             ProgramStep::PopTape(0),
             ProgramStep::Gradient(0, {R::Step(2)}, {R::Param(0), R::Param(1)},
                                   {R::Ones()})};
  p.outputs = {R::Step(4, 0), R::Step(4, 1)};
  ASSERT_TRUE(Validate(p).ok());
  const Tensor a = Arg(Random({2}, 1));
  const Tensor b = Arg(Random({2}, 2));
  absl::StatusOr<Tensors> out = RunProgram(exec_, p, {a, b});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE((*out)[0].valid());
  EXPECT_FALSE((*out)[1].valid());

  p.steps.push_back({"Neg", {R::Step(4, 1)}, {}});
  ASSERT_TRUE(Validate(p).ok());
  out = RunProgram(exec_, p, {a, b});
  EXPECT_EQ(out.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(out.status().message(),
                                "program step 5 (Neg): input 0 (step 4 output "
                                "1) is a None gradient"))
      << out.status();
  EXPECT_EQ(exec_.tapes().num_tapes(), 0u);
}

TEST_F(ProgramTrainingTest, RefusesHostileTapeSteps) {
  using R = ProgramRef;
  struct Case {
    std::vector<ProgramStep> steps;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{ProgramStep::PopTape(0)},
       "program step 0 (PopTape): tape 0 is not recording"},
      {{ProgramStep::Watch(1, {R::Param(0)})},
       "program step 0 (Watch): tape 1 is not pushed by an earlier step"},
      {{ProgramStep::PushTape(0), ProgramStep::PushTape(0)},
       "program step 1 (PushTape): tape 0 is already recording"},
      {{ProgramStep::PushTape(-1)}, "names tape -1; tapes are numbered 0..63"},
      {{ProgramStep::PushTape(64)}, "names tape 64"},
      {{ProgramStep::PushTape(0), ProgramStep::Gradient(0, {}, {R::Param(0)})},
       "program step 1 (Gradient) has 0 targets"},
      {{ProgramStep::PushTape(0),
        ProgramStep::Gradient(0, {R::Param(0)}, {R::Param(0)},
                              {R::Ones(), R::Ones()})},
       "no output gradients or one per target"},
      {{ProgramStep::PushTape(0),
        ProgramStep::Gradient(0, {R::Step(1)}, {R::Param(0)})},
       "program step 1 (Gradient) input 0 refers to step 1 output 0, but only "
       "steps 0..0 come before it"},
      {{ProgramStep::PushTape(0), ProgramStep::Gradient(0, {R::Ones()}, {})},
       "input 0 refers to ones, which only a gradient's output gradient may "
       "be"},
      {{{"Neg", {R::Ones()}, {}}},
       "program step 0 (Neg) input 0 refers to ones"},
      {{ProgramStep::PushTape(0),
        ProgramStep::Gradient(0, {R::Param(0)}, {R::Param(0)}),
        {"Neg", {R::Step(1, 1)}, {}}},
       "program step 2 (Neg) input 0 refers to step 1 output 1, but that step "
       "(Gradient) has 1 outputs"},
  };
  for (const Case& c : cases) {
    Program p;
    p.params = {{DType::kFloat64, {2}}};
    p.steps = c.steps;
    absl::Status s = Validate(p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.message;
    EXPECT_TRUE(absl::StrContains(s.message(), c.message))
        << s.message() << "\n  wanted: " << c.message;
  }
  // A param whose shape overflows.
  Program p;
  p.params = {{DType::kFloat64, {int64_t{1} << 40, int64_t{1} << 40}}};
  absl::Status s = Validate(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "program param 0")) << s;
}

// An outer tape records a run that computes an inner gradient: the
// second derivative through the program equals the eager one.
TEST_F(ProgramTrainingTest, SecondOrderThroughARun) {
  using R = ProgramRef;
  Program p;  // d/dx sum(x^3) = 3x^2
  p.params = {{DType::kFloat64, {3}}};
  p.steps = {ProgramStep::PushTape(0, false, false),
             ProgramStep::Watch(0, {R::Param(0)}),
             {"Mul", {R::Param(0), R::Param(0)}, {}},
             {"Mul", {R::Step(2), R::Param(0)}, {}},
             {"Sum", {R::Step(3)}, {}},
             ProgramStep::PopTape(0),
             ProgramStep::Gradient(0, {R::Step(4)}, {R::Param(0)})};
  p.outputs = {R::Step(6)};
  ASSERT_TRUE(Validate(p).ok());
  const Tensor x = Arg(Random({3}, 4));
  ASSERT_TRUE(exec_.tapes().Push(1, false, false).ok());
  (*exec_.tapes().Find(1))->Watch(x);
  absl::StatusOr<Tensors> out = RunProgram(exec_, p, {x});
  ASSERT_TRUE(out.ok()) << out.status();
  Tensor total = Eager("Sum", {(*out)[0]});
  ASSERT_TRUE(exec_.tapes().Pop(1).ok());
  absl::StatusOr<std::vector<Tensor>> g2 = Gradient(
      exec_, **exec_.tapes().Find(1), {total}, {x}, {}, Unconnected::kNone);
  ASSERT_TRUE(g2.ok()) << g2.status();
  ASSERT_TRUE((*g2)[0].valid());
  const double* xv = x.data<double>();
  const double* gv = (*g2)[0].data<double>();
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(gv[i], 6 * xv[i], 1e-12);
}

// A captured variable handle is the variable: an outer tape watching it
// differentiates the run's reads of it. Ops between StopRecording and
// StartRecording steps are not recorded, and a run that stops recording
// and fails leaves recording on.
TEST_F(ProgramTrainingTest, CapturedVariablesAndRecordingSteps) {
  using R = ProgramRef;
  const Tensor w = NewVariable(3);
  Program p;  // sum(read(w) * read(w)), then an unrecorded Exp
  p.constants = {w};
  p.steps = {{"ReadVariableOp", {R::Constant(0)}, {{"dtype", DType::kFloat64}}},
             {"Mul", {R::Step(0), R::Step(0)}, {}},
             {"Sum", {R::Step(1)}, {}},
             ProgramStep::Recording(false),
             {"Exp", {R::Step(2)}, {}},
             ProgramStep::Recording(true)};
  p.outputs = {R::Step(2), R::Step(4)};
  ASSERT_TRUE(Validate(p).ok());
  ASSERT_TRUE(exec_.tapes().Push(1, false, false).ok());
  Tape* tape = *exec_.tapes().Find(1);
  tape->Watch(w);
  absl::StatusOr<Tensors> out = RunProgram(exec_, p, {});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(exec_.tapes().stopped());
  ASSERT_TRUE(exec_.tapes().Pop(1).ok());
  absl::StatusOr<std::vector<Tensor>> g =
      Gradient(exec_, *tape, {(*out)[0]}, {w}, {}, Unconnected::kNone);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE((*g)[0].valid()) << "the variable's gradient is None";
  const double* wv = ValueOf(w).data<double>();
  const double* gv = (*g)[0].data<double>();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(gv[i], 2 * wv[i]);
  // The Exp was not recorded: its output is not connected.
  ASSERT_TRUE(exec_.tapes().Delete(1).ok());
  ASSERT_TRUE(exec_.tapes().Push(2, true, false).ok());
  tape = *exec_.tapes().Find(2);
  tape->Watch(w);
  out = RunProgram(exec_, p, {});
  ASSERT_TRUE(out.ok());
  g = Gradient(exec_, *tape, {(*out)[1]}, {w}, {}, Unconnected::kNone);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FALSE((*g)[0].valid());
  // Stopped, then failed: recording is back on.
  p.steps.insert(p.steps.begin() + 4,
                 ProgramStep{"MatMul", {R::Step(2), R::Step(2)}, {}});
  p.outputs = {R::Step(2)};
  ASSERT_TRUE(Validate(p).ok());
  EXPECT_FALSE(RunProgram(exec_, p, {}).ok());
  EXPECT_FALSE(exec_.tapes().stopped());
}

// A passed deadline or a cancellation stops a run between steps, undone
// like a failed step; without one the same run trains.
TEST_F(ProgramTrainingTest, DeadlinesAndCancellationStopARunBetweenSteps) {
  const Tensor w = NewVariable(5);
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  Program p = SgdStep(w, lr);
  ASSERT_TRUE(Validate(p).ok());
  const Tensor x = Arg(Random({4, 3}, 1));
  const Tensor y = Arg(Random({4, 2}, 2));
  const Tensor before = ValueOf(w);
  {
    Cancellation passed(absl::Now() - absl::Seconds(1));
    ScopedCancellation scope(&passed);
    absl::StatusOr<Tensors> out = RunProgram(exec_, p, {x, y});
    EXPECT_EQ(out.status().code(), StatusCode::kDeadlineExceeded);
    EXPECT_TRUE(
        absl::StrContains(out.status().message(), "program step 0 (PushTape)"))
        << out.status();
  }
  {
    Cancellation cancel;
    cancel.Cancel(StatusCode::kCancelled);
    ScopedCancellation scope(&cancel);
    EXPECT_EQ(RunProgram(exec_, p, {x, y}).status().code(),
              StatusCode::kCancelled);
  }
  EXPECT_EQ(ValueOf(w).raw_data(), before.raw_data());
  EXPECT_EQ(exec_.tapes().num_tapes(), 0u);
  ASSERT_TRUE(RunProgram(exec_, p, {x, y}).ok());
  EXPECT_NE(ValueOf(w).raw_data(), before.raw_data());
}

// --- Plans: the gradient planned at the first call (program_plan.h) --------

// The plan of the SGD step trains like the same commands run eagerly, bit
// for bit, from its second call on; it has no tape steps, so no tape exists
// while it runs.
TEST_F(ProgramTrainingTest, APlanTrainsLikeTheEagerCommandsBitForBit) {
  const Tensor w_program = NewVariable(5);
  const Tensor w_eager = NewVariable(5);
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  Program p = SgdStep(w_program, lr);
  ASSERT_TRUE(Validate(p).ok());
  PlannedProgram planned(p, nullptr);
  EXPECT_FALSE(planned.planned());
  for (int step = 0; step < 5; ++step) {
    const Tensor x = Arg(Random({4, 3}, 100 + step));
    const Tensor y = Arg(Random({4, 2}, 200 + step));
    absl::StatusOr<Tensors> out = planned.Run(exec_, {x, y});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(planned.planned()) << planned.not_planned();
    const Tensor loss = SgdStepEager(w_eager, lr, x, y, 7);
    EXPECT_TRUE(SameBits((*out)[0], loss)) << step;
    EXPECT_TRUE(SameBits(ValueOf(w_program), ValueOf(w_eager))) << step;
  }
  // The 6 op steps, with the gradient's backward ops for the 3 tape steps.
  EXPECT_GT(planned.plan_steps(), 6);
  EXPECT_EQ(planned.not_planned(), "");
  EXPECT_EQ(exec_.tapes().num_tapes(), 0u);
}

// Plans `make(w)` fused and unfused, on twin variables w, and calls each
// four times on `args(call)`: the same outputs and weights, bit for bit.
// Returns the fused plan's and the unfused plan's op names.
using MakeProgram = std::function<Program(const Tensor& w)>;
using MakeArgs = std::function<std::vector<Tensor>(int call)>;

class FusedPlanTest : public ProgramTrainingTest {
 protected:
  struct PlanOps {
    std::set<std::string> fused, unfused;
    int64_t fused_steps = 0, unfused_steps = 0;
    std::vector<std::shared_ptr<const FusedLoop>> loops;  // the fused plan's
    std::vector<std::shared_ptr<const StridedMatMul>> matmuls;  // the same
  };

  PlanOps ExpectFusedSameAsUnfused(const MakeProgram& make,
                                   const MakeArgs& args,
                                   Shape var_shape = {3, 2}) {
    const Tensor w_fused = NewVariable(5, var_shape);
    const Tensor w_unfused = NewVariable(5, var_shape);
    Program p_fused = make(w_fused);
    Program p_unfused = make(w_unfused);
    EXPECT_TRUE(Validate(p_fused).ok());
    EXPECT_TRUE(Validate(p_unfused).ok());
    PlannedProgram fused(p_fused, nullptr, true, true);
    PlannedProgram unfused(p_unfused, nullptr, true, false);
    for (int call = 0; call < 4; ++call) {
      const std::vector<Tensor> in = args(call);
      absl::StatusOr<Tensors> a = fused.Run(exec_, in);
      absl::StatusOr<Tensors> b = unfused.Run(exec_, in);
      if (!a.ok() || !b.ok() || a->size() != b->size()) {
        ADD_FAILURE() << a.status() << b.status();
        return {};
      }
      for (size_t k = 0; k < a->size(); ++k) {
        EXPECT_TRUE(SameBits((*a)[k], (*b)[k])) << call << " output " << k;
      }
      EXPECT_TRUE(SameBits(ValueOf(w_fused), ValueOf(w_unfused))) << call;
    }
    if (!fused.planned() || !unfused.planned()) {
      ADD_FAILURE() << fused.not_planned() << unfused.not_planned();
      return {};
    }
    PlanOps ops;
    for (const ProgramStep& step : fused.plan()->steps) {
      ops.fused.insert(step.op);
      if (step.loop != nullptr) ops.loops.push_back(step.loop);
      if (step.matmul != nullptr) ops.matmuls.push_back(step.matmul);
    }
    for (const ProgramStep& step : unfused.plan()->steps) {
      ops.unfused.insert(step.op);
    }
    ops.fused_steps = fused.plan_steps();
    ops.unfused_steps = unfused.plan_steps();
    return ops;
  }

  // x [4, 3] and y [4, 2], then `extra` more [4, 2] args, per call.
  std::vector<Tensor> Args(int call, int extra = 0) {
    std::vector<Tensor> in = {Arg(Random({4, 3}, 100 + call)),
                              Arg(Random({4, 2}, 200 + call))};
    for (int e = 0; e < extra; ++e) {
      in.push_back(Arg(Random({4, 2}, 300 + 100 * e + call)));
    }
    return in;
  }
};

// Fusing the plan's elementwise runs (Sub and Square in the forward pass,
// the Muls of their backward) leaves fewer steps and the same bits.
TEST_F(FusedPlanTest, FusedLoopsGiveTheUnfusedPlansBits) {
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  const PlanOps ops =
      ExpectFusedSameAsUnfused([&](const Tensor& w) { return SgdStep(w, lr); },
                               [&](int call) { return Args(call); });
  EXPECT_GT(ops.unfused_steps, 0);
  EXPECT_LT(ops.fused_steps, ops.unfused_steps);
}

// SgdStep with dropout on the prediction: x @ w * (Cast(u >= rate) *
// scale), u from a step (as a random op's would be); the mask a program
// output too when `mask_is_output`.
Program DropoutStep(const Tensor& w, const Tensor& lr, const Tensor& rate,
                    const Tensor& scale, bool mask_is_output) {
  using R = ProgramRef;
  Program p;
  p.params = {{DType::kFloat64, {4, 3}},
              {DType::kFloat64, {4, 2}},
              {DType::kFloat64, {4, 2}}};
  p.constants = {w, lr, rate, scale};
  p.steps = {ProgramStep::PushTape(0),
             {"ReadVariableOp", {R::Constant(0)}, {{"dtype", DType::kFloat64}}},
             {"MatMul", {R::Param(0), R::Step(1)}, {}},
             {"Identity", {R::Param(2)}, {}},
             {"GreaterEqual", {R::Step(3), R::Constant(2)}, {}},
             {"Cast", {R::Step(4)}, {{"DstT", DType::kFloat64}}},
             {"Mul", {R::Step(5), R::Constant(3)}, {}},
             {"Mul", {R::Step(2), R::Step(6)}, {}},
             {"Sub", {R::Step(7), R::Param(1)}, {}},
             {"Square", {R::Step(8)}, {}},
             {"Sum", {R::Step(9)}, {}},
             ProgramStep::PopTape(0),
             ProgramStep::Gradient(0, {R::Step(10)}, {R::Constant(0)}),
             {"ResourceApplyGradientDescent",
              {R::Constant(0), R::Constant(1), R::Step(12)},
              {}}};
  p.outputs = {R::Step(10)};
  if (mask_is_output) p.outputs.push_back(R::Step(4));
  return p;
}

// Dropout's mask joins the loop of the Muls around it: the fused plan has
// no GreaterEqual or Cast step, and the unfused plan's bits. A comparison
// also read after its loop (here: a program output) stays a step.
TEST_F(FusedPlanTest, DropoutMasksJoinFusedLoops) {
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  const Tensor rate = Arg(Tensor::Scalar<double>(0.3));
  const Tensor scale = Arg(Tensor::Scalar<double>(1 / 0.7));
  for (bool mask_is_output : {false, true}) {
    SCOPED_TRACE(mask_is_output);
    const PlanOps ops = ExpectFusedSameAsUnfused(
        [&](const Tensor& w) {
          return DropoutStep(w, lr, rate, scale, mask_is_output);
        },
        [&](int call) { return Args(call, 1); });
    EXPECT_EQ(ops.unfused.count("GreaterEqual"), 1u);
    EXPECT_EQ(ops.unfused.count("Cast"), 1u);
    EXPECT_EQ(ops.fused.count("GreaterEqual"), mask_is_output ? 1u : 0u);
    EXPECT_EQ(ops.fused.count("Cast"), mask_is_output ? 1u : 0u);
  }
}

// Centering (h - mean(h) over each row, a layer norm's first part): the
// backward's BroadcastTo of the mean's gradient joins a loop as a copy of
// the column; the fused plan has no BroadcastTo step and the unfused
// plan's bits.
TEST_F(FusedPlanTest, BroadcastsOfAGradientJoinFusedLoops) {
  using R = ProgramRef;
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  auto centering = [&](const Tensor& w) {
    Program p = SgdStep(w, lr);
    const AttrMap mean_attrs = {{"axis", std::vector<int64_t>{1}},
                                {"keep_dims", true}};
    p.steps[3] = {"Mean", {R::Step(2)}, mean_attrs};
    p.steps[4] = {"Sub", {R::Step(2), R::Step(3)}, {}};
    p.steps.insert(p.steps.begin() + 5, {"Square", {R::Step(4)}, {}});
    p.steps[6] = {"Sum", {R::Step(5)}, {}};
    p.steps[8] = ProgramStep::Gradient(0, {R::Step(6)}, {R::Constant(0)});
    p.steps[9].inputs[2] = R::Step(8);
    p.outputs = {R::Step(6)};
    return p;
  };
  const PlanOps ops =
      ExpectFusedSameAsUnfused(centering, [&](int call) { return Args(call); });
  EXPECT_EQ(ops.unfused.count("BroadcastTo"), 1u);
  EXPECT_EQ(ops.fused.count("BroadcastTo"), 0u);
}

// A GELU, h * (erf(h * c) + 1), between a MatMul and a squared error: the
// backward loop reads h * c, erf(h * c) + 1 and the error, which nothing
// else reads, so it recomputes them from h (which it reads anyway), the
// constants and y (one new read for three), and the forward loop writes
// only the square the Sum reads. The same ops on the same values: the
// unfused plan's bits.
TEST_F(FusedPlanTest, BackwardLoopsRecomputeCheapForwardResults) {
  using R = ProgramRef;
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  const Tensor c = Arg(Tensor::Scalar<double>(0.7071067811865476));
  const Tensor one = Arg(Tensor::Scalar<double>(1.0));
  auto gelu = [&](const Tensor& w) {
    Program p = SgdStep(w, lr);
    p.constants.push_back(c);    // 2
    p.constants.push_back(one);  // 3
    p.steps = {
        ProgramStep::PushTape(0),
        {"ReadVariableOp", {R::Constant(0)}, {{"dtype", DType::kFloat64}}},
        {"MatMul", {R::Param(0), R::Step(1)}, {}},
        {"Mul", {R::Step(2), R::Constant(2)}, {}},
        {"Erf", {R::Step(3)}, {}},
        {"AddV2", {R::Step(4), R::Constant(3)}, {}},
        {"Mul", {R::Step(2), R::Step(5)}, {}},
        {"Sub", {R::Step(6), R::Param(1)}, {}},
        {"Square", {R::Step(7)}, {}},
        {"Sum", {R::Step(8)}, {}},
        ProgramStep::PopTape(0),
        ProgramStep::Gradient(0, {R::Step(9)}, {R::Constant(0)}),
        {"ResourceApplyGradientDescent",
         {R::Constant(0), R::Constant(1), R::Step(11)},
         {}}};
    p.outputs = {R::Step(9)};
    return p;
  };
  const PlanOps ops =
      ExpectFusedSameAsUnfused(gelu, [&](int call) { return Args(call); });
  // The loops holding an Erf: the forward one, writing 1 result, and the
  // backward one recomputing it.
  std::vector<const FusedLoop*> with_erf;
  for (const auto& loop : ops.loops) {
    for (const FusedLoop::Op& op : loop->ops) {
      if (op.code == FusedLoop::kErf) {
        with_erf.push_back(loop.get());
        break;
      }
    }
  }
  ASSERT_EQ(with_erf.size(), 2u);
  EXPECT_EQ(with_erf[0]->outputs.size(), 1u);
}

// A layer norm of g = h * h + h, g - mean(g) over each row divided by the
// root of the rows' mean squares: both Means become row sums of the loops
// whose results they read, and the loop of g - mean(g) then joins g's, the
// unfused plan's bits. The squares are read by their Mean alone and never
// written; g, a program output too, still is.
TEST_F(FusedPlanTest, RowMeansJoinTheLoopsTheyRead) {
  using R = ProgramRef;
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  const Tensor eps = Arg(Tensor::Scalar<double>(1e-5));
  auto norm = [&](const Tensor& w) {
    Program p = SgdStep(w, lr);
    p.constants.push_back(eps);  // 2
    const AttrMap rows = {{"axis", std::vector<int64_t>{-1}},
                          {"keep_dims", true}};
    p.steps = {
        ProgramStep::PushTape(0),
        {"ReadVariableOp", {R::Constant(0)}, {{"dtype", DType::kFloat64}}},
        {"MatMul", {R::Param(0), R::Step(1)}, {}},
        {"Mul", {R::Step(2), R::Step(2)}, {}},
        {"AddV2", {R::Step(3), R::Step(2)}, {}},
        {"Mean", {R::Step(4)}, rows},
        {"Sub", {R::Step(4), R::Step(5)}, {}},
        {"Square", {R::Step(6)}, {}},
        {"Mean", {R::Step(7)}, rows},
        {"AddV2", {R::Step(8), R::Constant(2)}, {}},
        {"Rsqrt", {R::Step(9)}, {}},
        {"Mul", {R::Step(6), R::Step(10)}, {}},
        {"Sub", {R::Step(11), R::Param(1)}, {}},
        {"Square", {R::Step(12)}, {}},
        {"Sum", {R::Step(13)}, {}},
        ProgramStep::PopTape(0),
        ProgramStep::Gradient(0, {R::Step(14)}, {R::Constant(0)}),
        {"ResourceApplyGradientDescent",
         {R::Constant(0), R::Constant(1), R::Step(16)},
         {}}};
    p.outputs = {R::Step(14), R::Step(4)};
    return p;
  };
  const PlanOps ops =
      ExpectFusedSameAsUnfused(norm, [&](int call) { return Args(call); });
  // g's mean is read by the loop of g - mean(g), which joins g's loop: the
  // mean is spread over its rows there (kRowMean), no longer a row sum.
  int means = 0, spread = 0;
  bool squares_written = true, g_written = false;
  for (const auto& loop : ops.loops) {
    for (const FusedLoop::RowSum& sum : loop->row_sums) {
      if (!sum.mean) continue;
      ++means;
      EXPECT_EQ(loop->ops[sum.op].code, FusedLoop::kSquare);
      squares_written = std::find(loop->outputs.begin(), loop->outputs.end(),
                                  sum.op) != loop->outputs.end();
    }
    for (const FusedLoop::Op& op : loop->ops) {
      if (op.code != FusedLoop::kRowMean) continue;
      ++spread;
      const int g = op.a - loop->num_inputs;
      g_written = std::find(loop->outputs.begin(), loop->outputs.end(), g) !=
                  loop->outputs.end();
    }
  }
  EXPECT_EQ(means, 1);
  EXPECT_EQ(spread, 1);
  EXPECT_FALSE(squares_written);
  EXPECT_TRUE(g_written);
  EXPECT_LT(ops.fused_steps, ops.unfused_steps);
}

// A bias added after a MatMul, then a Reshape that keeps the last dim and
// a squared error on the new shape: the Reshape moves before the AddV2,
// which joins the error's loop (no AddV2 step is left); with the bias
// added to an elementwise result instead, the AddV2 stays in that loop
// (the Reshape stays after it). The unfused plan's bits.
TEST_F(FusedPlanTest, ReshapesMoveBeforeABiasSoItJoinsTheNextLoop) {
  using R = ProgramRef;
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  const Tensor bias = Arg(Random({2}, 9));
  for (bool after_matmul : {true, false}) {
    SCOPED_TRACE(after_matmul);
    auto biased = [&](const Tensor& w) {
      Program p = SgdStep(w, lr);
      p.params[1].shape = {2, 2, 2};
      p.constants.push_back(bias);  // 2
      p.steps = {
          ProgramStep::PushTape(0),
          {"ReadVariableOp", {R::Constant(0)}, {{"dtype", DType::kFloat64}}},
          {"MatMul", {R::Param(0), R::Step(1)}, {}},
          after_matmul ? ProgramStep{"Identity", {R::Step(2)}, {}}
                       : ProgramStep{"Square", {R::Step(2)}, {}},
          {"AddV2",
           {after_matmul ? R::Step(2) : R::Step(3), R::Constant(2)},
           {}},
          {"Reshape", {R::Step(4)}, {{"shape", std::vector<int64_t>{2, 2, 2}}}},
          {"Sub", {R::Step(5), R::Param(1)}, {}},
          {"Square", {R::Step(6)}, {}},
          {"Sum", {R::Step(7)}, {}},
          ProgramStep::PopTape(0),
          ProgramStep::Gradient(0, {R::Step(8)}, {R::Constant(0)}),
          {"ResourceApplyGradientDescent",
           {R::Constant(0), R::Constant(1), R::Step(10)},
           {}}};
      p.outputs = {R::Step(8)};
      return p;
    };
    const PlanOps ops = ExpectFusedSameAsUnfused(biased, [&](int call) {
      return std::vector<Tensor>{Arg(Random({4, 3}, 100 + call)),
                                 Arg(Random({2, 2, 2}, 200 + call))};
    });
    EXPECT_EQ(ops.unfused.count("AddV2"), 1u);
    EXPECT_EQ(ops.fused.count("AddV2"), 0u);
    bool bias_in_loop = false;
    for (const auto& loop : ops.loops) {
      const bool has_add = std::any_of(
          loop->ops.begin(), loop->ops.end(),
          [](const FusedLoop::Op& op) { return op.code == FusedLoop::kAdd; });
      if (has_add) {
        bias_in_loop = true;
        // After the MatMul the bias joins the error's loop ([2, 2, 2]);
        // after the Square it stays in the Square's ([4, 2]).
        EXPECT_EQ(*loop->shape,
                  after_matmul ? (Shape{2, 2, 2}) : (Shape{4, 2}));
      }
    }
    EXPECT_TRUE(bias_in_loop);
  }
}

// A Sum over the rows of a loop's result, sum((x @ w - y)^2 over rows)^2
// summed: the Sum becomes a column sum of the Sub and Square loop, in the
// Sum kernel's blocks of rows (20,000 rows of 2: two blocks), and the
// squares are not written; the unfused plan's bits.
TEST_F(FusedPlanTest, ColumnSumsJoinTheLoopsTheyRead) {
  using R = ProgramRef;
  constexpr int64_t rows = 20000;
  const Tensor lr = Arg(Tensor::Scalar<double>(1e-6));
  auto columns = [&](const Tensor& w) {
    Program p = SgdStep(w, lr);
    p.params = {{DType::kFloat64, {rows, 3}}, {DType::kFloat64, {rows, 2}}};
    p.steps = {
        ProgramStep::PushTape(0),
        {"ReadVariableOp", {R::Constant(0)}, {{"dtype", DType::kFloat64}}},
        {"MatMul", {R::Param(0), R::Step(1)}, {}},
        {"Sub", {R::Step(2), R::Param(1)}, {}},
        {"Square", {R::Step(3)}, {}},
        {"Sum",
         {R::Step(4)},
         {{"axis", std::vector<int64_t>{0}}, {"keep_dims", false}}},
        {"Mul", {R::Step(5), R::Step(5)}, {}},
        {"Sum", {R::Step(6)}, {}},
        ProgramStep::PopTape(0),
        ProgramStep::Gradient(0, {R::Step(7)}, {R::Constant(0)}),
        {"ResourceApplyGradientDescent",
         {R::Constant(0), R::Constant(1), R::Step(9)},
         {}}};
    p.outputs = {R::Step(7)};
    return p;
  };
  const PlanOps ops = ExpectFusedSameAsUnfused(columns, [&](int call) {
    return std::vector<Tensor>{Arg(Random({rows, 3}, 100 + call)),
                               Arg(Random({rows, 2}, 200 + call))};
  });
  int sums = 0;
  for (const auto& loop : ops.loops) {
    for (const FusedLoop::ColumnSum& sum : loop->column_sums) {
      ++sums;
      EXPECT_EQ(loop->ops[sum.op].code, FusedLoop::kSquare);
      EXPECT_EQ(std::count(loop->outputs.begin(), loop->outputs.end(), sum.op),
                0);
      EXPECT_EQ(sum.shape, (Shape{2}));
    }
  }
  EXPECT_EQ(sums, 1);
}

// Ends an attention block's program (below) after its last step, a
// [rows, h * d] result: the squared distance to param 1 as the loss and
// its output, its gradient for the variable (constant 0) on a tape pushed
// at step 0, and a descent step at the rate of constant 1.
void EndWithSquaredErrorDescent(Program& p) {
  using R = ProgramRef;
  const int out = static_cast<int>(p.steps.size()) - 1;
  p.steps.push_back({"Sub", {R::Step(out), R::Param(1)}, {}});
  p.steps.push_back({"Square", {R::Step(out + 1)}, {}});
  p.steps.push_back({"Sum", {R::Step(out + 2)}, {}});
  p.steps.push_back(ProgramStep::PopTape(0));
  p.steps.push_back(
      ProgramStep::Gradient(0, {R::Step(out + 3)}, {R::Constant(0)}));
  p.steps.push_back({"ResourceApplyGradientDescent",
                     {R::Constant(0), R::Constant(1), R::Step(out + 5)},
                     {}});
  p.outputs = {R::Step(out + 3)};
}

// An attention head block: x @ w_qkv as q, k and v of 2 heads (Reshape,
// Transpose, Unpack), softmax(q k^T * c) v back to rows (Transpose,
// Reshape), a squared error. The folded plan reads q, k and v and the
// output's gradient where they lie, and writes the head outputs and the
// gradients of q, k and v (their Pack) in the layout read next; the
// Softmax joins the scaling's loop. No Transpose, Unpack, Pack or Softmax
// step is left (nor a Reshape of theirs: the one left shapes the loss's
// gradient), and the bits are the unfolded plan's.
TEST_F(FusedPlanTest, LayoutsFoldIntoStridedProducts) {
  using R = ProgramRef;
  constexpr int64_t b = 2, t = 3, h = 2, d = 2;
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  const Tensor scale = Arg(Tensor::Scalar<double>(0.7));
  auto attention = [&](const Tensor& w) {
    Program p;
    p.params = {{DType::kFloat64, {b * t, 3}},
                {DType::kFloat64, {b * t, h * d}}};
    p.constants = {w, lr, scale};
    auto ints = [](std::vector<int64_t> v) { return v; };
    p.steps = {
        ProgramStep::PushTape(0),
        {"ReadVariableOp", {R::Constant(0)}, {{"dtype", DType::kFloat64}}},
        {"MatMul", {R::Param(0), R::Step(1)}, {}},
        {"Reshape", {R::Step(2)}, {{"shape", ints({b, t, 3, h, d})}}},
        {"Transpose", {R::Step(3)}, {{"perm", ints({2, 0, 3, 1, 4})}}},
        {"Unpack", {R::Step(4)}, {{"num", int64_t{3}}, {"axis", int64_t{0}}}},
        {"BatchMatMulV2",
         {R::Step(5, 0), R::Step(5, 1)},
         {{"adj_x", false}, {"adj_y", true}}},
        {"Mul", {R::Step(6), R::Constant(2)}, {}},
        {"Softmax", {R::Step(7)}, {}},
        {"BatchMatMulV2",
         {R::Step(8), R::Step(5, 2)},
         {{"adj_x", false}, {"adj_y", false}}},
        {"Transpose", {R::Step(9)}, {{"perm", ints({0, 2, 1, 3})}}},
        {"Reshape", {R::Step(10)}, {{"shape", ints({b * t, h * d})}}}};
    EndWithSquaredErrorDescent(p);
    return p;
  };
  const PlanOps ops = ExpectFusedSameAsUnfused(
      attention,
      [&](int call) {
        return std::vector<Tensor>{Arg(Random({b * t, 3}, 100 + call)),
                                   Arg(Random({b * t, h * d}, 200 + call))};
      },
      {3, 3 * h * d});
  for (const char* op : {"Transpose", "Unpack", "Pack", "Softmax"}) {
    EXPECT_EQ(ops.unfused.count(op), 1u) << op;
    EXPECT_EQ(ops.fused.count(op), 0u) << op;
  }
  // The scores, the head outputs, the probabilities' gradient, and the
  // gradients of q, k and v as one step of three products.
  ASSERT_EQ(ops.matmuls.size(), 4u);
  EXPECT_EQ(ops.matmuls[1]->shape, (Shape{b * t, h * d}));
  EXPECT_EQ(ops.matmuls[3]->products.size(), 3u);
  EXPECT_EQ(ops.matmuls[3]->shape, (Shape{b * t, 3 * h * d}));
}

// The same block through other layouts: q, k and v unpacked along axis 2
// of [b, t, 3, h, d] and each transposed, the heads' output carried on by
// a Transpose that is not its own inverse ([b, h, t, d] to [t, b, h, d]),
// so the gradients come back through other permutations and a Pack along
// axis 2 of Transposes (which stays a step). The unfolded plan's bits; no
// Unpack is left.
TEST_F(FusedPlanTest, LayoutsFoldThroughOtherPermutations) {
  using R = ProgramRef;
  constexpr int64_t b = 2, t = 3, h = 2, d = 2;
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  auto attention = [&](const Tensor& w) {
    Program p;
    p.params = {{DType::kFloat64, {b * t, 3}},
                {DType::kFloat64, {t * b, h * d}}};
    p.constants = {w, lr};
    auto ints = [](std::vector<int64_t> v) { return v; };
    const AttrMap heads = {{"perm", ints({0, 2, 1, 3})}};
    p.steps = {
        ProgramStep::PushTape(0),
        {"ReadVariableOp", {R::Constant(0)}, {{"dtype", DType::kFloat64}}},
        {"MatMul", {R::Param(0), R::Step(1)}, {}},
        {"Reshape", {R::Step(2)}, {{"shape", ints({b, t, 3, h, d})}}},
        {"Unpack", {R::Step(3)}, {{"num", int64_t{3}}, {"axis", int64_t{2}}}},
        {"Transpose", {R::Step(4, 0)}, heads},
        {"Transpose", {R::Step(4, 1)}, heads},
        {"Transpose", {R::Step(4, 2)}, heads},
        {"BatchMatMulV2",
         {R::Step(5), R::Step(6)},
         {{"adj_x", false}, {"adj_y", true}}},
        {"Softmax", {R::Step(8)}, {}},
        {"BatchMatMulV2",
         {R::Step(9), R::Step(7)},
         {{"adj_x", false}, {"adj_y", false}}},
        {"Transpose", {R::Step(10)}, {{"perm", ints({2, 0, 1, 3})}}},
        {"Reshape", {R::Step(11)}, {{"shape", ints({t * b, h * d})}}}};
    EndWithSquaredErrorDescent(p);
    return p;
  };
  const PlanOps ops = ExpectFusedSameAsUnfused(
      attention,
      [&](int call) {
        return std::vector<Tensor>{Arg(Random({b * t, 3}, 300 + call)),
                                   Arg(Random({t * b, h * d}, 400 + call))};
      },
      {3, 3 * h * d});
  EXPECT_EQ(ops.unfused.count("Unpack"), 1u);
  EXPECT_EQ(ops.fused.count("Unpack"), 0u);
  EXPECT_GE(ops.matmuls.size(), 4u);
}

// A persistent tape (or a second one) could record a backward's ops for a
// gradient to differentiate: such a program is not planned, and runs.
TEST_F(ProgramTrainingTest, APersistentTapeMeansNoPlan) {
  const Tensor w = NewVariable(5);
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  Program p = SgdStep(w, lr);
  p.steps[0] = ProgramStep::PushTape(0, /*persistent=*/true);
  ASSERT_TRUE(Validate(p).ok());
  PlannedProgram planned(p, nullptr);
  const Tensor x = Arg(Random({4, 3}, 1));
  const Tensor y = Arg(Random({4, 2}, 2));
  ASSERT_TRUE(planned.Run(exec_, {x, y}).ok());
  ASSERT_TRUE(planned.Run(exec_, {x, y}).ok());
  EXPECT_FALSE(planned.planned());
  EXPECT_EQ(planned.not_planned(),
            "it has more than one tape, or a persistent one");
}

// A call that a tape outside the program could record runs as defined (the
// tape records the program's ops), and makes no plan; the next one does.
TEST_F(ProgramTrainingTest, ACallUnderAnOuterTapeRunsAsDefined) {
  const Tensor w = NewVariable(5);
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  Program p = SgdStep(w, lr);
  ASSERT_TRUE(Validate(p).ok());
  PlannedProgram planned(p, nullptr);
  const Tensor x = Arg(Random({4, 3}, 1));
  const Tensor y = Arg(Random({4, 2}, 2));
  ASSERT_TRUE(exec_.tapes().Push(9, false, false).ok());
  (*exec_.tapes().Find(9))->Watch(x);
  ASSERT_TRUE(planned.Run(exec_, {x, y}).ok());
  EXPECT_GT((*exec_.tapes().Find(9))->num_entries(), 0u);
  ASSERT_TRUE(exec_.tapes().Delete(9).ok());
  EXPECT_FALSE(planned.planned());
  EXPECT_EQ(planned.not_planned(), "");
  ASSERT_TRUE(planned.Run(exec_, {x, y}).ok());
  EXPECT_TRUE(planned.planned());
}

// One tensor passed as both params of a * b: the tape sees one value and
// gives 2a for each; a plan traced with two values would give a. Such a
// call runs as defined; the plan stays for the others.
TEST_F(ProgramTest, ACallPassingOneTensorTwiceRunsAsDefined) {
  using R = ProgramRef;
  Program p;
  p.params = {{DType::kFloat64, {3}}, {DType::kFloat64, {3}}};
  p.steps = {
      ProgramStep::PushTape(0),
      ProgramStep::Watch(0, {R::Param(0), R::Param(1)}),
      {"Mul", {R::Param(0), R::Param(1)}, {}},
      {"Sum", {R::Step(2)}, {}},
      ProgramStep::PopTape(0),
      ProgramStep::Gradient(0, {R::Step(3)}, {R::Param(0), R::Param(1)})};
  p.outputs = {R::Step(5, 0), R::Step(5, 1)};
  ASSERT_TRUE(Validate(p).ok());
  PlannedProgram planned(p, nullptr);
  const Tensor a = Arg(Random({3}, 1));
  const Tensor b = Arg(Random({3}, 2));
  ASSERT_TRUE(planned.Run(exec_, {a, b}).ok());
  ASSERT_TRUE(planned.planned()) << planned.not_planned();
  absl::StatusOr<Tensors> twice = planned.Run(exec_, {a, a});
  absl::StatusOr<Tensors> defined = RunProgram(exec_, p, {a, a});
  ASSERT_TRUE(twice.ok() && defined.ok());
  EXPECT_TRUE(SameBits((*twice)[0], (*defined)[0]));
  EXPECT_EQ((*twice)[0].data<double>()[0], 2 * a.data<double>()[0]);
  absl::StatusOr<Tensors> apart = planned.Run(exec_, {a, b});
  ASSERT_TRUE(apart.ok());
  EXPECT_TRUE(SameBits((*apart)[0], b));
  EXPECT_TRUE(planned.planned());
}

// A differentiable op's integer input computed from a param (Tile's
// multiples): its backward could read it, so no plan; the calls still run.
TEST_F(ProgramTest, AnIntegerInputFromTheParamsMeansNoPlan) {
  using R = ProgramRef;
  Program p;
  p.params = {{DType::kFloat64, {2}}, {DType::kInt32, {1}}};
  p.steps = {ProgramStep::PushTape(0),
             ProgramStep::Watch(0, {R::Param(0)}),
             {"Tile", {R::Param(0), R::Param(1)}, {}},
             {"Sum", {R::Step(2)}, {}},
             ProgramStep::PopTape(0),
             ProgramStep::Gradient(0, {R::Step(3)}, {R::Param(0)})};
  p.outputs = {R::Step(5)};
  ASSERT_TRUE(Validate(p).ok());
  PlannedProgram planned(p, nullptr);
  const Tensor x = Arg(Random({2}, 1));
  for (int32_t m : {3, 4}) {
    absl::StatusOr<Tensors> g =
        planned.Run(exec_, {x, Arg(Tensor::FromVector<int32_t>({1}, {m}))});
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ((*g)[0].data<double>()[0], m);
  }
  EXPECT_FALSE(planned.planned());
  EXPECT_EQ(planned.not_planned(),
            "step 2 (Tile) input 1 is int32[1] computed from the call's "
            "inputs; its backward may read it");
}

// A step whose shape depends on a param's value: the plan is traced with
// one shape; a call that gives another fails the plan's shape check, runs
// as defined (right results) and drops the plan for good.
TEST_F(ProgramTest, AStepOfAnotherShapeDropsThePlan) {
  using R = ProgramRef;
  Program p;
  p.params = {{DType::kFloat64, {}}, {DType::kInt32, {}}};
  p.constants = {Arg(Tensor::Scalar<int32_t>(0)),
                 Arg(Tensor::Scalar<int32_t>(1))};
  p.steps = {ProgramStep::PushTape(0),
             ProgramStep::Watch(0, {R::Param(0)}),
             {"Range",
              {R::Constant(0), R::Param(1), R::Constant(1)},
              {{"Tidx", DType::kInt32}}},
             {"Cast", {R::Step(2)}, {{"DstT", DType::kFloat64}}},
             {"Mul", {R::Param(0), R::Step(3)}, {}},
             {"Sum", {R::Step(4)}, {}},
             ProgramStep::PopTape(0),
             ProgramStep::Gradient(0, {R::Step(5)}, {R::Param(0)})};
  p.outputs = {R::Step(7)};
  ASSERT_TRUE(Validate(p).ok());
  PlannedProgram planned(p, nullptr);
  const Tensor x = Arg(Tensor::Scalar<double>(2));
  auto grad = [&](int32_t limit) {
    absl::StatusOr<Tensors> g =
        planned.Run(exec_, {x, Arg(Tensor::Scalar<int32_t>(limit))});
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? (*g)[0].data<double>()[0] : -1.0;
  };
  EXPECT_EQ(grad(3), 3.0);  // 0 + 1 + 2
  EXPECT_EQ(grad(3), 3.0);
  EXPECT_TRUE(planned.planned()) << planned.not_planned();
  EXPECT_EQ(grad(5), 10.0);
  EXPECT_FALSE(planned.planned());
  EXPECT_EQ(planned.not_planned(),
            "a planned call failed where the program ran: plan step 0 "
            "(Range): output 0 is int32[5]; the plan was traced with int32[3]");
  EXPECT_EQ(grad(4), 6.0);
}

// A planned call that fails (an index out of range) is undone and fails as
// the program defined fails, naming its step; the plan stays.
TEST_F(ProgramTrainingTest, AFailingPlannedCallFailsAsDefinedAndKeepsThePlan) {
  using R = ProgramRef;
  const Tensor w = NewVariable(5);
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  Program p;
  p.params = {{DType::kInt32, {2}}};
  p.constants = {w, lr};
  p.steps = {ProgramStep::PushTape(0),
             {"ResourceGather",
              {R::Constant(0), R::Param(0)},
              {{"dtype", DType::kFloat64}}},
             {"Sum", {R::Step(1)}, {}},
             ProgramStep::PopTape(0),
             ProgramStep::Gradient(0, {R::Step(2)}, {R::Constant(0)}),
             {"ResourceApplyGradientDescent",
              {R::Constant(0), R::Constant(1), R::Step(4)},
              {}}};
  p.outputs = {R::Step(2)};
  ASSERT_TRUE(Validate(p).ok());
  PlannedProgram planned(p, nullptr);
  const Tensor rows = Arg(Tensor::FromVector<int32_t>({2}, {0, 2}));
  ASSERT_TRUE(planned.Run(exec_, {rows}).ok());
  ASSERT_TRUE(planned.Run(exec_, {rows}).ok());
  ASSERT_TRUE(planned.planned()) << planned.not_planned();
  const Tensor before = ValueOf(w);
  const Tensor bad = Arg(Tensor::FromVector<int32_t>({2}, {0, 7}));
  absl::StatusOr<Tensors> out = planned.Run(exec_, {bad});
  absl::StatusOr<Tensors> defined = RunProgram(exec_, p, {bad});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status(), defined.status());
  EXPECT_TRUE(absl::StrContains(out.status().message(),
                                "program step 1 (ResourceGather)"))
      << out.status();
  EXPECT_EQ(ValueOf(w).raw_data(), before.raw_data());
  EXPECT_TRUE(planned.planned());
  EXPECT_EQ(exec_.tapes().num_tapes(), 0u);
}

// The plan's structure is charged to the account while the plan lives; an
// account that cannot take it gets no plan, and the calls run as defined.
TEST_F(ProgramTrainingTest, APlanIsChargedAndRefusedPastTheLimit) {
  const Tensor w = NewVariable(5);
  const Tensor lr = Arg(Tensor::Scalar<double>(0.05));
  Program p = SgdStep(w, lr);
  ASSERT_TRUE(Validate(p).ok());
  const Tensor x = Arg(Random({4, 3}, 1));
  const Tensor y = Arg(Random({4, 2}, 2));
  auto account = std::make_shared<MemoryAccount>();
  {
    PlannedProgram planned(p, account);
    ASSERT_TRUE(planned.Run(exec_, {x, y}).ok());
    ASSERT_TRUE(planned.planned()) << planned.not_planned();
    EXPECT_GT(planned.plan_bytes(), 0);
    EXPECT_EQ(account->bytes(), planned.plan_bytes());
  }
  EXPECT_EQ(account->bytes(), 0);
  account->set_limit(64);
  PlannedProgram refused(p, account);
  ASSERT_TRUE(refused.Run(exec_, {x, y}).ok());
  EXPECT_FALSE(refused.planned());
  EXPECT_TRUE(
      absl::StrContains(refused.not_planned(), "would pass the memory limit"))
      << refused.not_planned();
  EXPECT_EQ(account->bytes(), 0);
  ASSERT_TRUE(refused.Run(exec_, {x, y}).ok());
}

}  // namespace
}  // namespace gradtape
