// Training over gRPC: variables updated by optimizer ops, SaveCheckpoint and
// RestoreCheckpoint commands between two sessions, their errors as
// per-command results (the session stays usable), and a server without a
// checkpoint directory. An in-process Server on 127.0.0.1 (a free port).
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"
#include "tests/temp_dir.h"

namespace gradtape::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A session of the server driven by unary Run calls.
class RemoteSession {
 public:
  RemoteSession(v1::TapeService::Stub* stub) : stub_(stub) {
    grpc::ClientContext context;
    Deadline(&context);
    v1::CreateSessionResponse response;
    status_ =
        stub_->CreateSession(&context, v1::CreateSessionRequest(), &response);
    id_ = response.session_id();
    token_ = response.token();
  }
  const grpc::Status& status() const { return status_; }

  v1::Command* Add() {
    v1::Command* cmd = batch_.add_commands();
    cmd->set_seq(++seq_);
    return cmd;
  }
  int64_t seq() const { return seq_; }
  void Put(int64_t id, v1::TensorValue value) {
    v1::PutTensor* put = Add()->mutable_put();
    put->set_id(id);
    *put->mutable_value() = std::move(value);
  }
  void Exec(const std::string& op, std::vector<int64_t> in,
            std::vector<int64_t> out = {},
            std::vector<std::pair<std::string, v1::AttrValue>> attrs = {}) {
    v1::ExecuteOp* e = Add()->mutable_execute();
    e->set_op(op);
    for (int64_t id : in) e->add_input_ids(id);
    for (int64_t id : out) e->add_output_ids(id);
    for (auto& [k, v] : attrs) (*e->mutable_attrs())[k] = v;
  }
  // VarHandleOp `name` (float64 [n]) at `handle`, uninitialized.
  void Declare(int64_t handle, const std::string& name, int64_t n) {
    Exec("VarHandleOp", {}, {handle},
         {{"dtype", TypeAttr(v1::DTYPE_FLOAT64)},
          {"shape", IntsAttr({n})},
          {"shared_name", StringAttr(name)}});
  }
  // The same, assigned `v`.
  void Var(int64_t handle, const std::string& name, std::vector<double> v) {
    Declare(handle, name, static_cast<int64_t>(v.size()));
    Put(handle + 1000, Doubles({static_cast<int64_t>(v.size())}, v));
    Exec("AssignVariableOp", {handle, handle + 1000});
  }
  void Save(const std::string& name, std::vector<int64_t> ids = {}) {
    v1::SaveCheckpoint* s = Add()->mutable_save_checkpoint();
    s->set_name(name);
    for (int64_t id : ids) s->add_variable_ids(id);
  }
  void Restore(const std::string& name, std::vector<int64_t> ids = {}) {
    v1::RestoreCheckpoint* r = Add()->mutable_restore_checkpoint();
    r->set_name(name);
    for (int64_t id : ids) r->add_variable_ids(id);
  }
  // Reads the variable into `id` and fetches it.
  void Read(int64_t handle, int64_t id) {
    Exec("ReadVariableOp", {handle}, {id});
    Add()->mutable_fetch()->set_id(id);
  }

  // Sends the buffered commands as one Run call.
  v1::BatchReply Run() {
    grpc::ClientContext context;
    Deadline(&context);
    context.AddMetadata("gradtape-session-id", id_);
    context.AddMetadata("gradtape-session-token", token_);
    v1::BatchReply reply;
    grpc::Status s = stub_->Run(&context, batch_, &reply);
    EXPECT_TRUE(s.ok()) << s.error_message();
    batch_.Clear();
    return reply;
  }

 private:
  static void Deadline(grpc::ClientContext* c) {
    c->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  }
  v1::TapeService::Stub* stub_;
  grpc::Status status_;
  std::string id_, token_;
  v1::CommandBatch batch_;
  int64_t seq_ = 0;
};

const v1::CommandResult* Find(const v1::BatchReply& reply, int64_t seq) {
  for (const v1::CommandResult& r : reply.results()) {
    if (r.seq() == seq) return &r;
  }
  return nullptr;
}

class TrainingServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    Start(dir_.path());
  }
  void TearDown() override {
    stub_.reset();
    server_.reset();  // stops the server
  }
  void Start(const std::string& checkpoint_dir) {
    stub_.reset();
    server_.reset();
    ServerOptions options;
    options.address = "127.0.0.1:0";
    options.checkpoint_dir = checkpoint_dir;
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::TapeService::NewStub(grpc::CreateChannel(
        server_->address(), grpc::InsecureChannelCredentials()));
  }

  testing::TempDir dir_;  // outlives server_ (declared first)
  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::TapeService::Stub> stub_;
};

TEST_F(TrainingServerTest, OptimizerStepsSaveAndRestoreIntoANewSession) {
  RemoteSession a(stub_.get());
  ASSERT_TRUE(a.status().ok()) << a.status().error_message();
  a.Var(1, "w", {1.0, -2.0, 0.5});
  a.Var(2, "w/Momentum", {0, 0, 0});
  a.Put(3, Doubles({}, {0.1}));  // lr
  a.Put(4, Doubles({}, {0.9}));  // momentum
  a.Put(5, Doubles({3}, {0.1, -0.2, 0.3}));
  a.Exec("ResourceApplyMomentum", {1, 2, 3, 5, 4});
  a.Put(6, Doubles({3}, {-0.4, 0.5, 0.6}));
  a.Exec("ResourceApplyMomentum", {1, 2, 3, 6, 4});
  a.Save("model");
  const int64_t save_seq = a.seq();
  a.Read(1, 10);
  const int64_t fetch_seq = a.seq();
  v1::BatchReply reply = a.Run();
  const v1::CommandResult* saved = Find(reply, save_seq);
  ASSERT_NE(saved, nullptr) << reply.ShortDebugString();
  ASSERT_TRUE(saved->has_checkpoint()) << saved->ShortDebugString();
  EXPECT_EQ(saved->checkpoint().name(), "model");
  EXPECT_THAT(saved->checkpoint().variable_names(),
              ElementsAre("w", "w/Momentum"));
  const v1::CommandResult* w = Find(reply, fetch_seq);
  ASSERT_NE(w, nullptr);
  const std::vector<double> trained = AsDoubles(w->tensor());
  const std::vector<double> want = {1.021, -2.012, 0.383};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(trained[i], want[i], 1e-12);

  // A new session: same names, uninitialized; restore, then one more step
  // continues where the first session stopped (the slot came back too).
  RemoteSession b(stub_.get());
  b.Declare(1, "w", 3);
  b.Declare(2, "w/Momentum", 3);
  b.Restore("model");
  const int64_t restore_seq = b.seq();
  b.Read(1, 10);
  const int64_t restored_seq = b.seq();
  b.Put(3, Doubles({}, {0.1}));
  b.Put(4, Doubles({}, {0.9}));
  b.Put(5, Doubles({3}, {0.7, -0.8, -0.9}));
  b.Exec("ResourceApplyMomentum", {1, 2, 3, 5, 4});
  b.Read(1, 11);
  const int64_t step_seq = b.seq();
  reply = b.Run();
  const v1::CommandResult* restored = Find(reply, restore_seq);
  ASSERT_NE(restored, nullptr) << reply.ShortDebugString();
  ASSERT_TRUE(restored->has_checkpoint()) << restored->ShortDebugString();
  EXPECT_THAT(restored->checkpoint().variable_names(),
              ElementsAre("w", "w/Momentum"));
  ASSERT_NE(Find(reply, restored_seq), nullptr);
  EXPECT_EQ(AsDoubles(Find(reply, restored_seq)->tensor()), trained);
  ASSERT_NE(Find(reply, step_seq), nullptr) << reply.ShortDebugString();
  const std::vector<double> step3 = AsDoubles(Find(reply, step_seq)->tensor());
  const std::vector<double> want3 = {0.9789, -1.9608, 0.3947};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(step3[i], want3[i], 1e-12);
}

TEST_F(TrainingServerTest, ErrorsArePerCommandAndTheSessionStaysUsable) {
  RemoteSession a(stub_.get());
  a.Var(1, "w", {1, 2});
  a.Save("../escape");
  const int64_t bad_name = a.seq();
  a.Restore("missing");
  const int64_t missing = a.seq();
  a.Save("model", {12345});
  const int64_t unknown = a.seq();
  a.Save("model");
  const int64_t good = a.seq();
  a.Put(5, Doubles({}, {0.5}));
  a.Put(6, Doubles({3}, {1, 1, 1}));
  a.Exec("ResourceApplyGradientDescent", {1, 5, 6});
  const int64_t bad_shape = a.seq();
  a.Read(1, 10);
  const int64_t read = a.seq();
  v1::BatchReply reply = a.Run();
  auto error = [&](int64_t seq) -> v1::Error {
    const v1::CommandResult* r = Find(reply, seq);
    EXPECT_NE(r, nullptr) << "seq " << seq << ": " << reply.ShortDebugString();
    return r ? r->error() : v1::Error();
  };
  EXPECT_EQ(error(bad_name).code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(error(bad_name).message(), HasSubstr("bad checkpoint name"));
  EXPECT_THAT(error(bad_name).message(),
              HasSubstr(absl::StrCat("command ", bad_name)));
  EXPECT_EQ(error(missing).code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(error(missing).message(), HasSubstr("'missing'"));
  EXPECT_EQ(error(unknown).code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(error(unknown).message(), HasSubstr("12345"));
  ASSERT_NE(Find(reply, good), nullptr);
  EXPECT_TRUE(Find(reply, good)->has_checkpoint());
  EXPECT_EQ(error(bad_shape).code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(error(bad_shape).message(),
              HasSubstr("ResourceApplyGradientDescent"));
  EXPECT_THAT(error(bad_shape).message(), HasSubstr("float64[3]"));
  EXPECT_THAT(error(bad_shape).message(), HasSubstr("float64[2]"));
  ASSERT_NE(Find(reply, read), nullptr);
  EXPECT_EQ(AsDoubles(Find(reply, read)->tensor()),
            (std::vector<double>{1, 2}));

  // A corrupted file: DATA_LOSS, the variable keeps its value.
  {
    std::fstream f(dir_.path() + "/model",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30);
    f.put('\x7f');
  }
  a.Put(7, Doubles({2}, {5, 5}));
  a.Exec("AssignVariableOp", {1, 7});
  a.Restore("model");
  const int64_t corrupt = a.seq();
  a.Read(1, 11);
  const int64_t after = a.seq();
  reply = a.Run();
  EXPECT_EQ(error(corrupt).code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_THAT(error(corrupt).message(), HasSubstr("corrupt checkpoint"));
  ASSERT_NE(Find(reply, after), nullptr);
  EXPECT_EQ(AsDoubles(Find(reply, after)->tensor()),
            (std::vector<double>{5, 5}));
}

TEST_F(TrainingServerTest, DisabledCheckpointsFailWithAnActionableMessage) {
  Start("");
  RemoteSession a(stub_.get());
  a.Var(1, "w", {1});
  a.Save("model");
  const int64_t save = a.seq();
  v1::BatchReply reply = a.Run();
  const v1::CommandResult* r = Find(reply, save);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->error().code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(r->error().message(), HasSubstr("--checkpoint_dir"));
}

}  // namespace
}  // namespace gradtape::server
