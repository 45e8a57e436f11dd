// Memory: what a tape retains, and whether closed sessions give memory back.
//
// 1. Tape retention. An MLP forward (batch 64, 784-256-10, float32) and a
//    CNN forward (batch 16, 28x28x1, conv3x3x16-relu-maxpool-conv3x3x32-
//    relu-maxpool-dense-10) run under a tape that watches the parameters.
//    After the forward (the peak: every entry is alive) it prints the bytes
//    the tape retains with per-index elision (Tape::SavedBytes) and the bytes
//    it would retain keeping every input and output of every recorded entry
//    (summed from the entries' metadata), and the saving.
// 2. Server RSS (--sessions > 0): an in-process server on 127.0.0.1; RSS of
//    the process (server + one client channel) before and after --sessions
//    sessions are created, used (a tape, a put of float32[64,64], 5 recorded
//    ops, a gradient, all in one Run) and closed. "Before" is measured after
//    10 warm-up sessions, so one-time allocations (gRPC, the op registry)
//    are not counted as growth.
//
// Run: build-perf/bench/memory_bench [--sessions=1000]
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/server.h"

ABSL_FLAG(int, sessions, 1000, "sessions for the RSS check (0: skip)");

namespace gradtape {
namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "memory_bench: %s\n", what.c_str());
  std::exit(1);
}

Tensor Run(OpExecutor& ctx, const char* op, std::vector<Tensor> in,
           AttrMap attrs = {}, int output = 0) {
  Tensors out;
  absl::Status s = ctx.Execute(op, in, std::move(attrs), &out);
  if (!s.ok()) Die(s.ToString());
  return out[output];
}

int64_t Bytes(const TensorMeta& m) {
  return NumElements(m.shape) * static_cast<int64_t>(DTypeSize(m.dtype));
}

void Report(const char* model, OpExecutor& ctx) {
  Tape& tape = **ctx.tapes().Find(1);
  int64_t keep_all = 0;
  tape.ForEachEntry([&](int64_t, const TapeEntry& entry) {
    for (const TensorMeta& m : entry.inputs) keep_all += Bytes(m);
    for (const TensorMeta& m : entry.outputs) keep_all += Bytes(m);
  });
  const int64_t elided = tape.SavedBytes();
  std::printf(
      "tape %s: %zu entries, retained with elision %lld bytes, keeping every "
      "input and output %lld bytes, saving %.1f%% (%.2fx less)\n",
      model, tape.num_entries(), static_cast<long long>(elided),
      static_cast<long long>(keep_all), 100.0 * (keep_all - elided) / keep_all,
      static_cast<double>(keep_all) / static_cast<double>(elided));
}

Tensor Param(OpExecutor& ctx, std::vector<int64_t> shape) {
  Tensor t = ctx.Adopt(Tensor::Filled(DType::kFloat32, shape, 0.01).value());
  (*ctx.tapes().Find(1))->Watch(t);
  return t;
}

void Mlp() {
  OpExecutor ctx(DefaultRegistry());
  (void)ctx.tapes().Push(1, /*persistent=*/false, false);
  Tensor x = ctx.Adopt(Tensor::Filled(DType::kFloat32, {64, 784}, 0.5).value());
  Tensor y = ctx.Adopt(Tensor::Filled(DType::kInt32, {64}, 3).value());
  Tensor w1 = Param(ctx, {784, 256}), b1 = Param(ctx, {256});
  Tensor w2 = Param(ctx, {256, 10}), b2 = Param(ctx, {10});
  Tensor h = Run(ctx, "Relu",
                 {Run(ctx, "BiasAdd", {Run(ctx, "MatMul", {x, w1}), b1})});
  Tensor logits = Run(ctx, "BiasAdd", {Run(ctx, "MatMul", {h, w2}), b2});
  Tensor loss =
      Run(ctx, "Mean",
          {Run(ctx, "SparseSoftmaxCrossEntropyWithLogits", {logits, y})},
          {{"axis", std::vector<int64_t>{0}}});
  Report("MLP (64x784-256-10)", ctx);
}

void Cnn() {
  OpExecutor ctx(DefaultRegistry());
  (void)ctx.tapes().Push(1, /*persistent=*/false, false);
  Tensor x =
      ctx.Adopt(Tensor::Filled(DType::kFloat32, {16, 28, 28, 1}, 0.5).value());
  Tensor y = ctx.Adopt(Tensor::Filled(DType::kInt32, {16}, 3).value());
  Tensor k1 = Param(ctx, {3, 3, 1, 16}), c1 = Param(ctx, {16});
  Tensor k2 = Param(ctx, {3, 3, 16, 32}), c2 = Param(ctx, {32});
  Tensor w = Param(ctx, {7 * 7 * 32, 10}), b = Param(ctx, {10});
  auto conv = [&](Tensor in, Tensor k, Tensor bias) {
    Tensor c = Run(ctx, "Conv2D", {in, k},
                   {{"strides", std::vector<int64_t>{1, 1, 1, 1}},
                    {"padding", std::string("SAME")}});
    Tensor r = Run(ctx, "Relu", {Run(ctx, "BiasAdd", {c, bias})});
    return Run(ctx, "MaxPool", {r},
               {{"ksize", std::vector<int64_t>{1, 2, 2, 1}},
                {"strides", std::vector<int64_t>{1, 2, 2, 1}},
                {"padding", std::string("VALID")}});
  };
  Tensor p2 = conv(conv(x, k1, c1), k2, c2);
  Tensor flat = Run(ctx, "Reshape", {p2},
                    {{"shape", std::vector<int64_t>{16, 7 * 7 * 32}}});
  Tensor logits = Run(ctx, "BiasAdd", {Run(ctx, "MatMul", {flat, w}), b});
  Run(ctx, "Mean",
      {Run(ctx, "SparseSoftmaxCrossEntropyWithLogits", {logits, y})},
      {{"axis", std::vector<int64_t>{0}}});
  Report("CNN (16x28x28x1, 2 conv + dense)", ctx);
}

int64_t RssKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

void UseOneSession(v1::TapeService::Stub& stub) {
  v1::CreateSessionResponse created;
  {
    grpc::ClientContext ctx;
    grpc::Status s =
        stub.CreateSession(&ctx, v1::CreateSessionRequest(), &created);
    if (!s.ok()) Die("CreateSession: " + s.error_message());
  }
  auto meta = [&](grpc::ClientContext* ctx) {
    ctx->AddMetadata("gradtape-session-id", created.session_id());
    ctx->AddMetadata("gradtape-session-token", created.token());
  };
  v1::CommandBatch batch;
  int64_t seq = 0;
  auto add = [&] {
    v1::Command* c = batch.add_commands();
    c->set_seq(++seq);
    return c;
  };
  add()->mutable_push_tape()->set_tape_id(1);
  v1::PutTensor* put = add()->mutable_put();
  put->set_id(1);
  put->mutable_value()->set_dtype(v1::DTYPE_FLOAT32);
  put->mutable_value()->add_shape(64);
  put->mutable_value()->add_shape(64);
  put->mutable_value()->set_data(std::string(64 * 64 * 4, '\0'));
  v1::Watch* watch = add()->mutable_watch();
  watch->set_tape_id(1);
  watch->add_ids(1);
  const char* ops[] = {"MatMul", "Tanh", "MatMul", "Relu", "Sum"};
  for (int i = 0; i < 5; ++i) {
    v1::ExecuteOp* op = add()->mutable_execute();
    op->set_op(ops[i]);
    op->add_input_ids(i + 1);
    if (i == 0 || i == 2) op->add_input_ids(1);
    op->add_output_ids(i + 2);
    if (i == 4) {
      v1::AttrValue axis;
      axis.mutable_ints()->add_values(0);
      axis.mutable_ints()->add_values(1);
      (*op->mutable_attrs())["axis"] = axis;
    }
  }
  v1::Gradient* g = add()->mutable_gradient();
  g->set_tape_id(1);
  g->add_target_ids(6);
  g->add_source_ids(1);
  g->add_result_ids(7);
  v1::BatchReply reply;
  {
    grpc::ClientContext ctx;
    meta(&ctx);
    grpc::Status s = stub.Run(&ctx, batch, &reply);
    if (!s.ok()) Die("Run: " + s.error_message());
  }
  for (const auto& r : reply.results()) {
    if (r.has_error()) Die("command failed: " + r.error().message());
  }
  grpc::ClientContext ctx;
  meta(&ctx);
  v1::CloseSessionResponse closed;
  grpc::Status s = stub.CloseSession(&ctx, v1::CloseSessionRequest(), &closed);
  if (!s.ok()) Die("CloseSession: " + s.error_message());
}

void Rss(int sessions) {
  server::ServerOptions options;
  options.address = "127.0.0.1:0";
  auto server = server::Server::Start(options);
  if (!server.ok()) Die(server.status().ToString());
  auto stub = v1::TapeService::NewStub(grpc::CreateChannel(
      (*server)->address(), grpc::InsecureChannelCredentials()));
  for (int i = 0; i < 10; ++i) UseOneSession(*stub);
  const int64_t before = RssKb();
  for (int i = 0; i < sessions; ++i) UseOneSession(*stub);
  const int64_t after = RssKb();
  std::printf(
      "server rss: before %lld KiB, after %d sessions created, used and "
      "closed %lld KiB, change %+.1f%% (open sessions now %d)\n",
      static_cast<long long>(before), sessions, static_cast<long long>(after),
      100.0 * (after - before) / before, (*server)->num_sessions());
  (*server)->Shutdown();
}

}  // namespace
}  // namespace gradtape

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  gradtape::Mlp();
  gradtape::Cnn();
  if (absl::GetFlag(FLAGS_sessions) > 0) {
    gradtape::Rss(absl::GetFlag(FLAGS_sessions));
  }
  return 0;
}
