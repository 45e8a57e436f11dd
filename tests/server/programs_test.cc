// Captured steps over a real channel (proto: "Captured steps"): a training
// step defined once and called gives the eager commands' losses and weights
// bit for bit; hostile definitions and calls get precise statuses and leave
// the session usable; a failed call changes nothing but its poisoned
// outputs; a resent call is applied once; programs are listed, charged to
// the session's memory and deleted.
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"

namespace gradtape::server {
namespace {

using ::testing::HasSubstr;

v1::ProgramRef Param(int i) {
  v1::ProgramRef ref;
  ref.set_param(i);
  return ref;
}
v1::ProgramRef Captured(int64_t id) {
  v1::ProgramRef ref;
  ref.set_captured_id(id);
  return ref;
}
v1::ProgramRef StepRef(int step, int output = 0) {
  v1::ProgramRef ref;
  ref.mutable_step()->set_step(step);
  ref.mutable_step()->set_output(output);
  return ref;
}

// Builds a DefineProgram step by step.
class ProgramBuilder {
 public:
  explicit ProgramBuilder(int64_t id) {
    cmd_.mutable_define_program()->set_program_id(id);
  }
  ProgramBuilder& Param(v1::DType dtype, std::vector<int64_t> shape) {
    v1::ProgramParam* p = def()->add_params();
    p->set_dtype(dtype);
    for (int64_t d : shape) p->add_shape(d);
    return *this;
  }
  ProgramBuilder& Op(const std::string& op, std::vector<v1::ProgramRef> inputs,
                     std::map<std::string, v1::AttrValue> attrs = {}) {
    v1::ProgramOp* step = def()->add_steps()->mutable_op();
    step->set_op(op);
    for (auto& r : inputs) *step->add_inputs() = r;
    for (auto& [name, value] : attrs) (*step->mutable_attrs())[name] = value;
    return *this;
  }
  ProgramBuilder& PushTape(int tape) {
    v1::ProgramPushTape* step = def()->add_steps()->mutable_push_tape();
    step->set_tape(tape);
    step->set_watch_accessed_variables(true);
    return *this;
  }
  ProgramBuilder& PopTape(int tape) {
    def()->add_steps()->mutable_pop_tape()->set_tape(tape);
    return *this;
  }
  ProgramBuilder& Gradient(int tape, v1::ProgramRef target,
                           v1::ProgramRef source) {
    v1::ProgramGradient* g = def()->add_steps()->mutable_gradient();
    g->set_tape(tape);
    *g->add_targets() = target;
    *g->add_sources() = source;
    return *this;
  }
  ProgramBuilder& Output(v1::ProgramRef ref) {
    *def()->add_outputs() = ref;
    return *this;
  }
  v1::Command Build() const { return cmd_; }

 private:
  v1::DefineProgram* def() { return cmd_.mutable_define_program(); }
  v1::Command cmd_;
};

v1::Command Call(int64_t program, std::vector<int64_t> inputs,
                 std::vector<int64_t> outputs) {
  v1::Command cmd;
  v1::CallProgram* call = cmd.mutable_call_program();
  call->set_program_id(program);
  for (int64_t id : inputs) call->add_input_ids(id);
  for (int64_t id : outputs) call->add_output_ids(id);
  return cmd;
}

std::string Bits(const v1::TensorValue& value) {
  return absl::StrCat(value.dtype(), ":", value.data());
}

class ProgramsTest : public ServerTest {
 protected:
  // A variable (VarHandleOp at `handle`, float64 [3, 2], assigned from id
  // handle + 1) and the learning rate 0.05 at id 9: seqs seq..seq+3.
  static Batch& Setup(Batch& batch, int64_t seq, int64_t handle) {
    std::vector<double> w(6);
    for (int i = 0; i < 6; ++i) w[i] = 0.1 * (i + 1) - 0.3;
    return batch
        .Exec(seq, "VarHandleOp", {}, {handle},
              {{"dtype", TypeAttr(v1::DTYPE_FLOAT64)},
               {"shape", IntsAttr({3, 2})}})
        .Put(seq + 1, handle + 1, Doubles({3, 2}, w))
        .Exec(seq + 2, "AssignVariableOp", {handle, handle + 1}, {})
        .Put(seq + 3, 9, Doubles({}, {0.05}));
  }
  // One SGD step of sum((x @ w - y)^2) on the variable at id 1 with the
  // learning rate at id 9: params x [4,3], y [4,2]; returns the loss.
  static v1::Command SgdProgram(int64_t id) {
    return ProgramBuilder(id)
        .Param(v1::DTYPE_FLOAT64, {4, 3})
        .Param(v1::DTYPE_FLOAT64, {4, 2})
        .PushTape(0)
        .Op("ReadVariableOp", {Captured(1)},
            {{"dtype", TypeAttr(v1::DTYPE_FLOAT64)}})
        .Op("MatMul", {Param(0), StepRef(1)})
        .Op("Sub", {StepRef(2), Param(1)})
        .Op("Square", {StepRef(3)})
        .Op("Sum", {StepRef(4)})
        .PopTape(0)
        .Gradient(0, StepRef(5), Captured(1))
        .Op("ResourceApplyGradientDescent",
            {Captured(1), Captured(9), StepRef(7)})
        .Output(StepRef(5))
        .Build();
  }
  static v1::TensorValue Data(std::vector<int64_t> shape, int step, int salt) {
    std::vector<double> v(shape[0] * shape[1]);
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = std::sin(0.37 * (i + 1) * (step + 1) + salt);
    }
    return Doubles(shape, v);
  }
  // The error of `seq` in `reply` (an empty Error if it succeeded).
  static v1::Error ErrorOf(const v1::BatchReply& reply, int64_t seq) {
    for (const v1::CommandResult& r : reply.results()) {
      if (r.seq() == seq) return r.error();
    }
    return v1::Error();
  }
};

// Five SGD steps: called as a program in one session and sent as the same
// commands in another, the losses and the final weights are the same bits.
TEST_F(ProgramsTest, CalledStepEqualsEagerCommandsBitForBit) {
  SessionCreds captured = NewSession();
  SessionCreds eager = NewSession();
  Batch setup;
  Setup(setup, 1, 1).Command(5, SgdProgram(7));
  v1::BatchReply reply = Run(captured, setup);
  ASSERT_EQ(reply.results_size(), 0) << reply.ShortDebugString();
  Batch eager_setup;
  Setup(eager_setup, 1, 1);
  Run(eager, eager_setup);

  int64_t seq_c = 6, seq_e = 5;
  for (int step = 0; step < 5; ++step) {
    const int64_t x = 100 + 10 * step, y = x + 1, loss = x + 2;
    Batch c;
    c.Put(seq_c, x, Data({4, 3}, step, 0))
        .Put(seq_c + 1, y, Data({4, 2}, step, 1))
        .Command(seq_c + 2, Call(7, {x, y}, {loss}))
        .Fetch(seq_c + 3, loss);
    v1::BatchReply rc = Run(captured, c);
    seq_c += 4;
    v1::Command push;
    push.mutable_push_tape()->set_tape_id(5);
    push.mutable_push_tape()->set_watch_accessed_variables(true);
    Batch e;
    e.Put(seq_e, x, Data({4, 3}, step, 0))
        .Put(seq_e + 1, y, Data({4, 2}, step, 1))
        .Command(seq_e + 2, push)
        .Exec(seq_e + 3, "ReadVariableOp", {1}, {x + 3},
              {{"dtype", TypeAttr(v1::DTYPE_FLOAT64)}})
        .Exec(seq_e + 4, "MatMul", {x, x + 3}, {x + 4})
        .Exec(seq_e + 5, "Sub", {x + 4, y}, {x + 5})
        .Exec(seq_e + 6, "Square", {x + 5}, {x + 6})
        .Exec(seq_e + 7, "Sum", {x + 6}, {loss});
    v1::Command pop;
    pop.mutable_pop_tape()->set_tape_id(5);
    e.Command(seq_e + 8, pop)
        .Gradient(seq_e + 9, 5, {loss}, {1}, {x + 7}, false)
        .Exec(seq_e + 10, "ResourceApplyGradientDescent", {1, 9, x + 7}, {});
    v1::Command del;
    del.mutable_delete_tape()->set_tape_id(5);
    e.Command(seq_e + 11, del).Fetch(seq_e + 12, loss);
    v1::BatchReply re = Run(eager, e);
    ASSERT_EQ(re.results_size(), 1) << re.ShortDebugString();
    ASSERT_EQ(rc.results_size(), 1) << rc.ShortDebugString();
    const v1::CommandResult* lc = Find(rc, seq_c - 1);
    const v1::CommandResult* le = Find(re, seq_e + 12);
    seq_e += 13;
    ASSERT_NE(lc, nullptr);
    ASSERT_NE(le, nullptr);
    EXPECT_EQ(Bits(lc->tensor()), Bits(le->tensor())) << step;
  }
  Batch read_c, read_e;
  read_c.Exec(seq_c, "ReadVariableOp", {1}, {50}).Fetch(seq_c + 1, 50);
  read_e.Exec(seq_e, "ReadVariableOp", {1}, {50}).Fetch(seq_e + 1, 50);
  const v1::BatchReply reply_c = Run(captured, read_c);
  const v1::BatchReply reply_e = Run(eager, read_e);
  const v1::CommandResult* wc = Find(reply_c, seq_c + 1);
  const v1::CommandResult* we = Find(reply_e, seq_e + 1);
  ASSERT_NE(wc, nullptr);
  ASSERT_NE(we, nullptr);
  ASSERT_TRUE(wc->has_tensor()) << wc->ShortDebugString();
  EXPECT_EQ(Bits(wc->tensor()), Bits(we->tensor()));
  EXPECT_NE(AsDoubles(wc->tensor())[0], -0.2);  // it trained
  // The program's tapes are gone; it is listed with its calls.
  v1::Command list;
  list.mutable_list_programs();
  v1::BatchReply listed =
      Run(captured, Batch().Command(seq_c + 2, list).Stats(seq_c + 3));
  const v1::CommandResult* programs = Find(listed, seq_c + 2);
  ASSERT_NE(programs, nullptr);
  ASSERT_EQ(programs->programs().programs_size(), 1);
  const v1::ProgramInfo& info = programs->programs().programs(0);
  EXPECT_EQ(info.program_id(), 7);
  EXPECT_EQ(info.params(), 2);
  EXPECT_EQ(info.steps(), 9);
  EXPECT_EQ(info.outputs(), 1);
  EXPECT_EQ(info.calls(), 5);
  EXPECT_GT(info.bytes(), 0);
  EXPECT_EQ(Find(listed, seq_c + 3)->stats().tapes(), 0);
}

// Hostile definitions: each fails alone with a precise status naming the
// command, the program and the step; the session stays usable.
TEST_F(ProgramsTest, HostileDefinitionsGetPreciseStatuses) {
  SessionCreds s = NewSession();
  Batch setup;
  Setup(setup, 1, 1);
  Run(s, setup);
  struct Case {
    v1::Command cmd;
    grpc::StatusCode code;
    std::vector<std::string> says;
  };
  std::vector<Case> cases;
  cases.push_back({ProgramBuilder(1).Op("NoSuchOp", {}).Build(),
                   grpc::StatusCode::NOT_FOUND,
                   {"DefineProgram (command 5, program 1)",
                    "program step 0 runs unknown op 'NoSuchOp'"}});
  cases.push_back(
      {ProgramBuilder(1).Op("Neg", {StepRef(0)}).Build(),
       grpc::StatusCode::INVALID_ARGUMENT,
       {"program step 0 (Neg) input 0 refers to step 0 output 0, but no step "
        "comes before it"}});  // a cycle: a step reading itself
  cases.push_back({ProgramBuilder(1)
                       .Param(v1::DTYPE_FLOAT64, {2})
                       .Op("AddV2", {Param(0)})
                       .Build(),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   {"program step 0 (AddV2) has 1 inputs, the op takes 2"}});
  cases.push_back(
      {ProgramBuilder(1)
           .Param(v1::DTYPE_FLOAT64, {int64_t{1} << 40, int64_t{1} << 40})
           .Build(),
       grpc::StatusCode::INVALID_ARGUMENT,
       {"program param 0"}});
  cases.push_back({ProgramBuilder(1).Op("Neg", {Captured(12345)}).Build(),
                   grpc::StatusCode::NOT_FOUND,
                   {"unknown tensor id 12345"}});
  cases.push_back({ProgramBuilder(1).Op("Neg", {v1::ProgramRef()}).Build(),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   {"program step 0 (Neg) input 0 has no reference set"}});
  cases.push_back({ProgramBuilder(1).PopTape(0).Build(),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   {"program step 0 (PopTape): tape 0 is not recording"}});
  cases.push_back({ProgramBuilder(0).Build(),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   {"program ids are nonzero"}});
  {
    ProgramBuilder huge(1);
    huge.Param(v1::DTYPE_FLOAT64, {2});
    for (int i = 0; i <= 100000; ++i) huge.Op("Neg", {Param(0)});
    cases.push_back({huge.Build(),
                     grpc::StatusCode::INVALID_ARGUMENT,
                     {"program has 100001 steps, more than the limit of "
                      "100000"}});
  }
  int64_t seq = 5;
  for (const Case& c : cases) {
    v1::BatchReply reply = Run(s, Batch().Command(seq, c.cmd));
    const v1::Error error = ErrorOf(reply, seq);
    EXPECT_EQ(error.code(), c.code) << error.message();
    for (const std::string& piece : c.says) {
      EXPECT_THAT(error.message(), HasSubstr(piece));
    }
    EXPECT_THAT(error.message(), HasSubstr(absl::StrCat("command ", seq)));
    ++seq;
  }
  // A program id in use.
  Run(s, Batch().Command(seq, SgdProgram(3)));
  v1::BatchReply again = Run(s, Batch().Command(seq + 1, SgdProgram(3)));
  EXPECT_EQ(ErrorOf(again, seq + 1).code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(ErrorOf(again, seq + 1).message(),
              HasSubstr("program 3 is already defined"));
  seq += 2;
  // Hostile calls: unknown program, wrong count, wrong shape, wrong dtype.
  Batch calls;
  calls.Put(seq, 20, Doubles({4, 3}, std::vector<double>(12, 0.5)))
      .Put(seq + 1, 21, Doubles({4, 2}, std::vector<double>(8, 0.5)))
      .Put(seq + 2, 22, Doubles({2, 3}, std::vector<double>(6, 0.5)))
      .Put(seq + 3, 23,
           Value(v1::DTYPE_FLOAT32, {4, 2}, std::vector<float>(8, 0.5f)))
      .Command(seq + 4, Call(99, {20, 21}, {30}))
      .Command(seq + 5, Call(3, {20}, {30}))
      .Command(seq + 6, Call(3, {22, 21}, {30}))
      .Command(seq + 7, Call(3, {20, 23}, {30}))
      .Command(seq + 8, Call(3, {20, 21}, {30, 31}))
      .Command(seq + 9, Call(3, {20, 21}, {32}))
      .Fetch(seq + 10, 32);
  v1::BatchReply reply = Run(s, calls);
  EXPECT_EQ(ErrorOf(reply, seq + 4).code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(ErrorOf(reply, seq + 4).message(),
              HasSubstr("unknown program 99"));
  EXPECT_THAT(ErrorOf(reply, seq + 5).message(),
              HasSubstr("program 3 takes 2 inputs, got 1"));
  EXPECT_THAT(ErrorOf(reply, seq + 6).message(),
              HasSubstr("program 3 input 0 (id 22) is float64[2,3]"));
  EXPECT_THAT(ErrorOf(reply, seq + 7).message(),
              HasSubstr("program 3 input 1 (id 23) is float32[4,2]"));
  EXPECT_THAT(ErrorOf(reply, seq + 8).message(),
              HasSubstr("program 3 has 1 outputs, got 2 output ids"));
  // The session is usable: the good call ran after all of those.
  const v1::CommandResult* loss = Find(reply, seq + 10);
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->kind_case(), v1::CommandResult::kTensor)
      << loss->ShortDebugString();
}

// A call whose step fails after the variable update: the variable keeps its
// value, the output is poisoned (a read names the failure), and the next
// good call runs.
TEST_F(ProgramsTest, AFailedCallChangesNothingButItsPoisonedOutputs) {
  SessionCreds s = NewSession();
  Batch setup;
  Setup(setup, 1, 1);
  v1::Command bad = SgdProgram(4);
  // After the update: MatMul(x [4,3], y [4,2]) fails.
  v1::ProgramOp* late = bad.mutable_define_program()->add_steps()->mutable_op();
  late->set_op("MatMul");
  *late->add_inputs() = Param(0);
  *late->add_inputs() = Param(1);
  *bad.mutable_define_program()->add_outputs() = StepRef(9);
  setup.Command(5, bad)
      .Put(6, 20, Data({4, 3}, 0, 0))
      .Put(7, 21, Data({4, 2}, 0, 1))
      .Exec(8, "ReadVariableOp", {1}, {40})
      .Fetch(9, 40)
      .Command(10, Call(4, {20, 21}, {30, 31}))
      .Exec(11, "ReadVariableOp", {1}, {41})
      .Fetch(12, 41)
      .Fetch(13, 30);
  v1::BatchReply reply = Run(s, setup);
  const v1::Error failed = ErrorOf(reply, 10);
  EXPECT_EQ(failed.code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(failed.message(),
              HasSubstr("CallProgram (command 10, program 4): program step 9 "
                        "(MatMul)"));
  ASSERT_NE(Find(reply, 9), nullptr);
  ASSERT_NE(Find(reply, 12), nullptr);
  EXPECT_EQ(Bits(Find(reply, 9)->tensor()), Bits(Find(reply, 12)->tensor()));
  EXPECT_EQ(ErrorOf(reply, 13).code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(ErrorOf(reply, 13).message(), HasSubstr("poisoned"));
}

// The reply of a batch with a call is lost and the batch is resent: the
// call (an SGD update) is applied once, and the duplicate fetch gets the
// kept loss.
TEST_F(ProgramsTest, AResentCallIsAppliedOnce) {
  SessionCreds s = NewSession();
  Batch setup;
  Setup(setup, 1, 1).Command(5, SgdProgram(7));
  Run(s, setup);
  Batch step(2);
  step.Put(6, 20, Data({4, 3}, 0, 0))
      .Put(7, 21, Data({4, 2}, 0, 1))
      .Command(8, Call(7, {20, 21}, {30}))
      .Exec(9, "ReadVariableOp", {1}, {31})
      .Fetch(10, 31);
  v1::BatchReply first = Run(s, step);
  v1::BatchReply resent = Run(s, step);
  ASSERT_NE(Find(first, 10), nullptr);
  const v1::CommandResult* kept = Find(resent, 10);
  ASSERT_NE(kept, nullptr);
  EXPECT_TRUE(kept->duplicate());
  Batch read;
  read.Exec(11, "ReadVariableOp", {1}, {32}).Fetch(12, 32);
  const v1::BatchReply after = Run(s, read);
  const v1::CommandResult* now = Find(after, 12);
  ASSERT_NE(now, nullptr);
  EXPECT_EQ(Bits(now->tensor()), Bits(Find(first, 10)->tensor()));
}

// Programs are charged to the session: a session limit refuses a program
// too large for it, and deleting one frees its charge.
class ProgramMemoryTest : public ProgramsTest {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.session_memory_limit_bytes = 4 << 20;
    StartServer(options);
  }
};

TEST_F(ProgramMemoryTest, AProgramPastTheSessionLimitIsRefused) {
  SessionCreds s = NewSession();
  ProgramBuilder big(1);
  big.Param(v1::DTYPE_FLOAT64, {2});
  for (int i = 0; i < 40000; ++i) big.Op("Neg", {Param(0)});
  v1::BatchReply reply = Run(s, Batch().Command(1, big.Build()));
  const v1::Error error = ErrorOf(reply, 1);
  EXPECT_EQ(error.code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(error.message(),
              HasSubstr("DefineProgram (command 1, program 1)"));
  EXPECT_THAT(error.message(), HasSubstr("program 1's steps"));
  // A small one fits, is charged, and its charge goes with it.
  Batch small;
  small.Stats(2)
      .Command(3, ProgramBuilder(2)
                      .Param(v1::DTYPE_FLOAT64, {2})
                      .Op("Neg", {Param(0)})
                      .Output(StepRef(0))
                      .Build())
      .Stats(4);
  v1::Command del;
  del.mutable_delete_program()->set_program_id(2);
  small.Command(5, del).Stats(6).Command(7, del);
  v1::BatchReply r = Run(s, small);
  const int64_t before = Find(r, 2)->stats().bytes_in_use();
  EXPECT_GT(Find(r, 4)->stats().bytes_in_use(), before);
  EXPECT_EQ(Find(r, 6)->stats().bytes_in_use(), before);
  EXPECT_EQ(ErrorOf(r, 7).code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(ErrorOf(r, 7).message(), HasSubstr("unknown program 2"));
}

}  // namespace
}  // namespace gradtape::server
