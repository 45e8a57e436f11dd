// Op stream throughput end to end: a client streams a long chain of small
// recorded ops over `Stream` and then asks for the gradient of the chain.
//
//   y_0 = x (float32[4], watched), y_{i+1} = AddV2(y_i, c) or Mul(y_i, c)
//   (alternating), then Gradient(y_N, x) with the values returned.
//
// The client speaks the proto directly (one writer thread building and
// writing CommandBatches of `batch` ExecuteOps, one reader thread taking the
// replies), so the figure is the protocol + server cost, not the C++ client
// library's. As the C++ client does, every batch but the last goes out
// reply_optional (--reply_optional=false: every batch is answered). Every
// run uses a fresh session; every reply is checked for errors (the bench
// exits 1 on any; an error is always answered).
//
// Prints, for each batch size, the median over --reps runs of
//   recorded ops/s (first write to last reply) and the gradient time,
//   scaled to seconds per million ops.
//
// Run: build-perf/bench/stream_bench [--address=HOST:PORT] [--ops=200000]
//   Without --address it starts a gradtape server in-process on 127.0.0.1.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/server.h"

ABSL_FLAG(std::string, address, "",
          "server to use; empty: start one in-process on 127.0.0.1");
ABSL_FLAG(int64_t, ops, 200000, "ops per chain (batch sizes >= 64)");
ABSL_FLAG(int64_t, small_batch_ops, 40000,
          "ops per chain for batch sizes < 64 (they are slow)");
ABSL_FLAG(int, reps, 3, "runs per batch size; the median is printed");
ABSL_FLAG(bool, gradient, true,
          "also time the gradient of the chain (false: profile the stream)");
ABSL_FLAG(bool, watch, true,
          "watch x (false: the same stream with nothing recorded, the "
          "baseline that shows what recording costs)");
ABSL_FLAG(bool, reply_optional, true,
          "send every batch but the last reply_optional (the server answers "
          "only the last, unless a command fails)");
ABSL_FLAG(std::string, batch_sizes, "1,16,64,256,1024,4096",
          "comma-separated ExecuteOps per CommandBatch");

namespace {

namespace v1 = gradtape::v1;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "stream_bench: %s\n", what.c_str());
  std::exit(1);
}

struct Sess {
  std::string id, token;
  void Add(grpc::ClientContext* ctx) const {
    ctx->AddMetadata("gradtape-session-id", id);
    ctx->AddMetadata("gradtape-session-token", token);
  }
};

Sess Create(v1::TapeService::Stub& stub) {
  grpc::ClientContext ctx;
  v1::CreateSessionRequest req;
  v1::CreateSessionResponse resp;
  grpc::Status s = stub.CreateSession(&ctx, req, &resp);
  if (!s.ok()) Die("CreateSession: " + s.error_message());
  return {resp.session_id(), resp.token()};
}

void Close(v1::TapeService::Stub& stub, const Sess& sess) {
  grpc::ClientContext ctx;
  sess.Add(&ctx);
  v1::CloseSessionRequest req;
  v1::CloseSessionResponse resp;
  grpc::Status s = stub.CloseSession(&ctx, req, &resp);
  if (!s.ok()) Die("CloseSession: " + s.error_message());
}

void CheckReply(const v1::BatchReply& reply) {
  for (const v1::CommandResult& r : reply.results()) {
    if (r.has_error()) {
      Die("command " + std::to_string(r.seq()) + ": " + r.error().message());
    }
  }
}

void PutFloats(v1::Command* cmd, int64_t id, float value) {
  v1::PutTensor* put = cmd->mutable_put();
  put->set_id(id);
  put->mutable_value()->set_dtype(v1::DTYPE_FLOAT32);
  put->mutable_value()->add_shape(4);
  float data[4] = {value, value, value, value};
  put->mutable_value()->set_data(data, sizeof(data));
}

struct RunResult {
  double ops_per_s;
  double gradient_s;
};

// ids: 1 = x, 2 = c, 3.. = the chain; tape 1.
RunResult RunChain(v1::TapeService::Stub& stub, int64_t num_ops, int batch) {
  Sess sess = Create(stub);
  grpc::ClientContext ctx;
  sess.Add(&ctx);
  auto stream = stub.Stream(&ctx);
  int64_t seq = 0;
  {
    v1::CommandBatch setup;
    v1::Command* c = setup.add_commands();
    c->set_seq(++seq);
    c->mutable_push_tape()->set_tape_id(1);
    c = setup.add_commands();
    c->set_seq(++seq);
    PutFloats(c, 1, 0.5f);
    c = setup.add_commands();
    c->set_seq(++seq);
    PutFloats(c, 2, 1.0001f);
    if (absl::GetFlag(FLAGS_watch)) {
      c = setup.add_commands();
      c->set_seq(++seq);
      c->mutable_watch()->set_tape_id(1);
      c->mutable_watch()->add_ids(1);
    }
    v1::BatchReply reply;
    if (!stream->Write(setup) || !stream->Read(&reply)) Die("setup failed");
    CheckReply(reply);
  }
  const int64_t num_batches = (num_ops + batch - 1) / batch;
  std::atomic<bool> failed{false};
  const Clock::time_point start = Clock::now();
  const bool reply_optional = absl::GetFlag(FLAGS_reply_optional);
  // Replies are cumulative: the one for the last batch acknowledges all.
  std::thread reader([&] {
    v1::BatchReply reply;
    do {
      if (!stream->Read(&reply)) {
        failed = true;
        return;
      }
      CheckReply(reply);
    } while (reply.batch_id() < num_batches);
  });
  int64_t next = 3;
  v1::CommandBatch out;
  for (int64_t b = 0; b < num_batches; ++b) {
    out.Clear();
    out.set_batch_id(b + 1);
    out.set_reply_optional(reply_optional && b + 1 < num_batches);
    const int64_t n = std::min<int64_t>(batch, num_ops - b * batch);
    for (int64_t i = 0; i < n; ++i) {
      v1::Command* c = out.add_commands();
      c->set_seq(++seq);
      v1::ExecuteOp* op = c->mutable_execute();
      op->set_op((next & 1) ? "AddV2" : "Mul");
      op->add_input_ids(next == 3 ? 1 : next - 1);
      op->add_input_ids(2);
      op->add_output_ids(next);
      ++next;
    }
    if (!stream->Write(out)) Die("stream write failed");
  }
  reader.join();
  if (failed) Die("stream read failed");
  const double elapsed = Seconds(Clock::now() - start);

  if (!absl::GetFlag(FLAGS_gradient) || !absl::GetFlag(FLAGS_watch)) {
    stream->WritesDone();
    (void)stream->Finish();
    Close(stub, sess);
    return {static_cast<double>(num_ops) / elapsed, 0};
  }
  v1::CommandBatch grad;
  v1::Command* c = grad.add_commands();
  c->set_seq(++seq);
  v1::Gradient* g = c->mutable_gradient();
  g->set_tape_id(1);
  g->add_target_ids(next - 1);
  g->add_source_ids(1);
  g->add_result_ids(next);
  g->set_return_values(true);
  const Clock::time_point grad_start = Clock::now();
  v1::BatchReply reply;
  if (!stream->Write(grad) || !stream->Read(&reply)) Die("gradient failed");
  const double grad_s = Seconds(Clock::now() - grad_start);
  CheckReply(reply);
  if (reply.results_size() != 1 || !reply.results(0).has_gradient() ||
      reply.results(0).gradient().values_size() != 1) {
    Die("gradient reply has no value");
  }
  stream->WritesDone();
  grpc::Status s = stream->Finish();
  if (!s.ok()) Die("stream: " + s.error_message());
  Close(stub, sess);
  return {static_cast<double>(num_ops) / elapsed, grad_s};
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::unique_ptr<gradtape::server::Server> server;
  std::string address = absl::GetFlag(FLAGS_address);
  if (address.empty()) {
    gradtape::server::ServerOptions options;
    options.address = "127.0.0.1:0";
    auto started = gradtape::server::Server::Start(options);
    if (!started.ok()) Die(started.status().ToString());
    server = *std::move(started);
    address = server->address();
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args);
  auto stub = v1::TapeService::NewStub(channel);

  std::printf(
      "# stream_bench: chain of float32[4] AddV2/Mul on a %s "
      "tape over Stream, %s, %s server at %s, median of %d runs\n",
      absl::GetFlag(FLAGS_watch) ? "watched" : "pushed but unwatched",
      absl::GetFlag(FLAGS_reply_optional) ? "only the last batch answered"
                                          : "every batch answered",
      server ? "in-process" : "external", address.c_str(),
      absl::GetFlag(FLAGS_reps));
  std::printf("%8s %10s %14s %22s\n", "batch", "ops", "recorded_ops/s",
              "gradient_s_per_1M_ops");
  for (absl::string_view field :
       absl::StrSplit(absl::GetFlag(FLAGS_batch_sizes), ',')) {
    int batch = 0;
    if (!absl::SimpleAtoi(field, &batch) || batch < 1) {
      Die("bad --batch_sizes entry");
    }
    const int64_t ops = batch < 64 ? absl::GetFlag(FLAGS_small_batch_ops)
                                   : absl::GetFlag(FLAGS_ops);
    std::vector<double> rates, grads;
    for (int r = 0; r < absl::GetFlag(FLAGS_reps); ++r) {
      RunResult result = RunChain(*stub, ops, batch);
      rates.push_back(result.ops_per_s);
      grads.push_back(result.gradient_s * 1e6 / static_cast<double>(ops));
    }
    std::printf("%8d %10lld %14.0f %22.3f\n", batch,
                static_cast<long long>(ops), Median(rates), Median(grads));
    std::fflush(stdout);
  }
  if (server) server->Shutdown();
  return 0;
}
