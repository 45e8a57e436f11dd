// Shared by the server's end-to-end tests: an in-process Server on
// 127.0.0.1 (a free port), the generated stubs, a CommandBatch builder and
// tensor helpers.
#ifndef GRADTAPE_TESTS_SERVER_SERVER_TEST_UTIL_H_
#define GRADTAPE_TESTS_SERVER_SERVER_TEST_UTIL_H_

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/server.h"

namespace gradtape::server {

inline constexpr grpc::StatusCode kOk = grpc::StatusCode::OK;

struct SessionCreds {
  std::string id;
  std::string token;
};

inline void Authorize(const SessionCreds& creds, grpc::ClientContext* context) {
  context->AddMetadata("gradtape-session-id", creds.id);
  context->AddMetadata("gradtape-session-token", creds.token);
}

template <typename T>
inline v1::TensorValue Value(v1::DType dtype, std::vector<int64_t> shape,
                             const std::vector<T>& values) {
  v1::TensorValue value;
  value.set_dtype(dtype);
  for (int64_t d : shape) value.add_shape(d);
  value.set_data(reinterpret_cast<const char*>(values.data()),
                 values.size() * sizeof(T));
  return value;
}

inline v1::TensorValue Doubles(std::vector<int64_t> shape,
                               const std::vector<double>& values) {
  return Value(v1::DTYPE_FLOAT64, std::move(shape), values);
}

inline std::vector<double> AsDoubles(const v1::TensorValue& value) {
  EXPECT_EQ(value.dtype(), v1::DTYPE_FLOAT64);
  std::vector<double> out(value.data().size() / sizeof(double));
  std::memcpy(out.data(), value.data().data(), out.size() * sizeof(double));
  return out;
}

// Builds a CommandBatch.
class Batch {
 public:
  explicit Batch(int64_t batch_id = 0) { batch_.set_batch_id(batch_id); }

  Batch& Put(int64_t seq, int64_t id, v1::TensorValue value) {
    v1::Command* cmd = Add(seq);
    cmd->mutable_put()->set_id(id);
    *cmd->mutable_put()->mutable_value() = std::move(value);
    return *this;
  }
  Batch& Exec(int64_t seq, const std::string& op, std::vector<int64_t> inputs,
              std::vector<int64_t> outputs,
              std::vector<std::pair<std::string, v1::AttrValue>> attrs = {}) {
    v1::ExecuteOp* exec = Add(seq)->mutable_execute();
    exec->set_op(op);
    for (int64_t id : inputs) exec->add_input_ids(id);
    for (int64_t id : outputs) exec->add_output_ids(id);
    for (auto& [name, value] : attrs) (*exec->mutable_attrs())[name] = value;
    return *this;
  }
  Batch& Fetch(int64_t seq, int64_t id) {
    Add(seq)->mutable_fetch()->set_id(id);
    return *this;
  }
  // Chunked transfer: PutTensorBegin, PutTensorChunk, FetchTensor with
  // offset and max_bytes.
  Batch& PutBegin(int64_t seq, int64_t id, v1::DType dtype,
                  std::vector<int64_t> shape) {
    v1::PutTensorBegin* begin = Add(seq)->mutable_put_begin();
    begin->set_id(id);
    begin->set_dtype(dtype);
    for (int64_t d : shape) begin->add_shape(d);
    return *this;
  }
  Batch& PutChunk(int64_t seq, int64_t id, int64_t offset, std::string data) {
    v1::PutTensorChunk* chunk = Add(seq)->mutable_put_chunk();
    chunk->set_id(id);
    chunk->set_offset(offset);
    chunk->set_data(std::move(data));
    return *this;
  }
  Batch& FetchChunk(int64_t seq, int64_t id, int64_t offset,
                    int64_t max_bytes) {
    v1::FetchTensor* fetch = Add(seq)->mutable_fetch();
    fetch->set_id(id);
    fetch->set_offset(offset);
    fetch->set_max_bytes(max_bytes);
    return *this;
  }
  Batch& Release(int64_t seq, std::vector<int64_t> ids) {
    v1::ReleaseTensors* release = Add(seq)->mutable_release();
    for (int64_t id : ids) release->add_ids(id);
    return *this;
  }
  Batch& PushTape(int64_t seq, int64_t tape, bool persistent = false) {
    v1::Command* cmd = Add(seq);
    cmd->mutable_push_tape()->set_tape_id(tape);
    cmd->mutable_push_tape()->set_persistent(persistent);
    return *this;
  }
  Batch& Watch(int64_t seq, int64_t tape, std::vector<int64_t> ids) {
    v1::Watch* watch = Add(seq)->mutable_watch();
    watch->set_tape_id(tape);
    for (int64_t id : ids) watch->add_ids(id);
    return *this;
  }
  Batch& Gradient(int64_t seq, int64_t tape, std::vector<int64_t> targets,
                  std::vector<int64_t> sources, std::vector<int64_t> results,
                  bool return_values) {
    v1::Gradient* grad = Add(seq)->mutable_gradient();
    grad->set_tape_id(tape);
    for (int64_t id : targets) grad->add_target_ids(id);
    for (int64_t id : sources) grad->add_source_ids(id);
    for (int64_t id : results) grad->add_result_ids(id);
    grad->set_return_values(return_values);
    return *this;
  }
  Batch& Stats(int64_t seq) {
    Add(seq)->mutable_stats();
    return *this;
  }
  Batch& Jacobian(int64_t seq, int64_t tape, int64_t target,
                  std::vector<int64_t> sources, std::vector<int64_t> results,
                  bool return_values) {
    v1::Jacobian* jac = Add(seq)->mutable_jacobian();
    jac->set_tape_id(tape);
    jac->set_target_id(target);
    for (int64_t id : sources) jac->add_source_ids(id);
    for (int64_t id : results) jac->add_result_ids(id);
    jac->set_return_values(return_values);
    return *this;
  }
  Batch& PushAccumulator(int64_t seq, int64_t accumulator) {
    Add(seq)->mutable_push_accumulator()->set_accumulator_id(accumulator);
    return *this;
  }
  Batch& AccumulatorWatch(int64_t seq, int64_t accumulator, int64_t id,
                          int64_t tangent_id) {
    v1::AccumulatorWatch* watch = Add(seq)->mutable_accumulator_watch();
    watch->set_accumulator_id(accumulator);
    watch->add_ids(id);
    watch->add_tangent_ids(tangent_id);
    return *this;
  }
  Batch& FetchJvp(int64_t seq, int64_t accumulator, int64_t id,
                  int64_t result_id, bool return_value) {
    v1::FetchJvp* fetch = Add(seq)->mutable_fetch_jvp();
    fetch->set_accumulator_id(accumulator);
    fetch->set_id(id);
    fetch->set_result_id(result_id);
    fetch->set_return_value(return_value);
    return *this;
  }
  Batch& Empty(int64_t seq) {
    Add(seq);
    return *this;
  }
  Batch& ReplyOptional() {
    batch_.set_reply_optional(true);
    return *this;
  }
  // Any command: `cmd` with `seq` set.
  Batch& Command(int64_t seq, v1::Command cmd) {
    cmd.set_seq(seq);
    *batch_.add_commands() = std::move(cmd);
    return *this;
  }
  const v1::CommandBatch& proto() const { return batch_; }

 private:
  v1::Command* Add(int64_t seq) {
    v1::Command* cmd = batch_.add_commands();
    cmd->set_seq(seq);
    return cmd;
  }
  v1::CommandBatch batch_;
};

inline v1::AttrValue TypeAttr(v1::DType t) {
  v1::AttrValue a;
  a.set_type(t);
  return a;
}
inline v1::AttrValue IntsAttr(std::vector<int64_t> ints) {
  v1::AttrValue a;
  for (int64_t i : ints) a.mutable_ints()->add_values(i);
  return a;
}
inline v1::AttrValue StringAttr(const std::string& s) {
  v1::AttrValue a;
  a.set_s(s);
  return a;
}
inline v1::AttrValue BoolAttr(bool b) {
  v1::AttrValue value;
  value.set_b(b);
  return value;
}

// The result for `seq`, or a failure.
inline const v1::CommandResult* Find(const v1::BatchReply& reply, int64_t seq) {
  for (const v1::CommandResult& result : reply.results()) {
    if (result.seq() == seq) return &result;
  }
  ADD_FAILURE() << "no result for seq " << seq << " in "
                << reply.ShortDebugString();
  return nullptr;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(ServerOptions()); }

  void StartServer(ServerOptions options) {
    stub_.reset();
    server_.reset();
    options.address = "127.0.0.1:0";
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_GT(server_->port(), 0);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::TapeService::NewStub(channel_);
  }

  static void SetDeadline(grpc::ClientContext* context) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  }

  grpc::Status CreateSession(const v1::CreateSessionRequest& request,
                             SessionCreds* creds) {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::CreateSessionResponse response;
    grpc::Status status = stub_->CreateSession(&context, request, &response);
    if (creds != nullptr) *creds = {response.session_id(), response.token()};
    return status;
  }

  SessionCreds NewSession(int64_t keep_alive_seconds = 0) {
    v1::CreateSessionRequest request;
    request.set_keep_alive_seconds(keep_alive_seconds);
    SessionCreds creds;
    grpc::Status status = CreateSession(request, &creds);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return creds;
  }

  grpc::Status KeepAlive(const SessionCreds& creds) {
    grpc::ClientContext context;
    SetDeadline(&context);
    Authorize(creds, &context);
    v1::KeepAliveResponse response;
    return stub_->KeepAlive(&context, v1::KeepAliveRequest(), &response);
  }

  grpc::Status RunStatus(const SessionCreds* creds, const Batch& batch,
                         v1::BatchReply* reply) {
    grpc::ClientContext context;
    SetDeadline(&context);
    if (creds != nullptr) Authorize(*creds, &context);
    return stub_->Run(&context, batch.proto(), reply);
  }

  // Runs a batch that must succeed at the RPC level.
  v1::BatchReply Run(const SessionCreds& creds, const Batch& batch) {
    v1::BatchReply reply;
    grpc::Status status = RunStatus(&creds, batch, &reply);
    EXPECT_TRUE(status.ok())
        << status.error_code() << " " << status.error_message();
    return reply;
  }

  // Sends the batches over one Stream and returns the replies (one per
  // batch, in order), half-closing at the end.
  std::vector<v1::BatchReply> StreamBatches(const SessionCreds& creds,
                                            const std::vector<Batch>& batches,
                                            grpc::Status* final_status) {
    grpc::ClientContext context;
    SetDeadline(&context);
    Authorize(creds, &context);
    auto stream = stub_->Stream(&context);
    // Pipelined: every batch goes out before the first reply is read.
    for (const Batch& batch : batches) {
      if (!stream->Write(batch.proto())) break;
    }
    stream->WritesDone();
    std::vector<v1::BatchReply> replies;
    v1::BatchReply reply;
    while (stream->Read(&reply)) replies.push_back(reply);
    *final_status = stream->Finish();
    return replies;
  }

  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TapeService::Stub> stub_;
};

}  // namespace gradtape::server

#endif  // GRADTAPE_TESTS_SERVER_SERVER_TEST_UTIL_H_
