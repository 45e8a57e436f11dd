// What counting costs on the command path (server/metrics.h): ApplyBatch of
// a batch of 256 float32[4] AddV2 commands (no tape) and one release, with
// and without a Metrics object, in one process. Reported per command; the
// difference is the per-command counter plus the per-batch histogram.
//
//   build/bench/metrics_bench --benchmark_repetitions=9 \
//       --benchmark_report_aggregates_only=true
#include <cstdint>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/ops/ops.h"
#include "core/session/session.h"
#include "core/tensor/tensor.h"
#include "gradtape/v1/tape_service.pb.h"
#include "server/batch.h"
#include "server/metrics.h"

namespace gradtape::server {
namespace {

constexpr int kCommands = 256;

// Puts ids 1 and 2, then a batch: AddV2(1, 2) into ids 10.., and a release
// of those ids, so the batch applies again and again (with new seqs).
struct Fixture {
  Fixture() : session(DefaultRegistry(), SessionOptions{}) {
    const std::vector<float> values = {1, 2, 3, 4};
    Tensor t = Tensor::FromVector<float>({4}, values);
    (void)session.PutTensor(++seq, 1, t);
    (void)session.PutTensor(++seq, 2, t);
    v1::ReleaseTensors* release = nullptr;
    for (int i = 0; i < kCommands; ++i) {
      v1::ExecuteOp* exec = batch.add_commands()->mutable_execute();
      exec->set_op("AddV2");
      exec->add_input_ids(1);
      exec->add_input_ids(2);
      exec->add_output_ids(10 + i);
    }
    release = batch.add_commands()->mutable_release();
    for (int i = 0; i < kCommands; ++i) release->add_ids(10 + i);
  }
  void Renumber() {
    for (v1::Command& cmd : *batch.mutable_commands()) cmd.set_seq(++seq);
  }

  Session session;
  v1::CommandBatch batch;
  int64_t seq = 0;
};

void BM_ApplyBatch(benchmark::State& state) {
  const bool with_metrics = state.range(0) != 0;
  std::unique_ptr<Metrics> metrics;
  if (with_metrics) {
    auto started = Metrics::Start("127.0.0.1:0", DefaultRegistry());
    if (!started.ok()) {
      state.SkipWithError("cannot start metrics");
      return;
    }
    metrics = *std::move(started);
  }
  Fixture f;
  for (auto _ : state) {
    f.Renumber();
    v1::BatchReply reply;
    ApplyBatch(f.session, f.batch, 1 << 20, /*cancel=*/nullptr, &reply,
               /*put_limit=*/{}, metrics.get(), RpcMethod::kStream);
    if (!reply.results().empty()) {
      state.SkipWithError("a command failed");
      return;
    }
    benchmark::DoNotOptimize(reply);
  }
  state.SetItemsProcessed(state.iterations() * (kCommands + 1));
  state.SetLabel(with_metrics ? "metrics" : "no metrics");
}
BENCHMARK(BM_ApplyBatch)->ArgName("metrics")->Arg(0)->Arg(1);

// CountCommand alone (execute of a registered op, OK).
void BM_CountCommand(benchmark::State& state) {
  auto metrics = Metrics::Start("127.0.0.1:0", DefaultRegistry());
  if (!metrics.ok()) {
    state.SkipWithError("cannot start metrics");
    return;
  }
  v1::Command cmd;
  cmd.mutable_execute()->set_op("AddV2");
  for (auto _ : state) (*metrics)->CountCommand(cmd, absl::StatusCode::kOk);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CountCommand);

// The same through a CommandTally of a 256-command batch (what ApplyBatch
// does): per command.
void BM_CommandTally(benchmark::State& state) {
  auto metrics = Metrics::Start("127.0.0.1:0", DefaultRegistry());
  if (!metrics.ok()) {
    state.SkipWithError("cannot start metrics");
    return;
  }
  v1::Command cmd;
  cmd.mutable_execute()->set_op("AddV2");
  for (auto _ : state) {
    Metrics::CommandTally tally(metrics->get());
    for (int i = 0; i < kCommands; ++i) {
      tally.Count(cmd, absl::StatusCode::kOk);
    }
  }
  state.SetItemsProcessed(state.iterations() * kCommands);
}
BENCHMARK(BM_CommandTally);

}  // namespace
}  // namespace gradtape::server

BENCHMARK_MAIN();
