// The recording path in-process, kernel excluded: what a tape costs an op.
//
//   RecordHook/no_tape     no tape pushed: the fast path returns at once
//   RecordHook/unwatched   a tape is active but watches neither input
//   RecordHook/recorded    the op is recorded (MatMul: both inputs kept),
//                          then its output released, which erases the entry
//   Execute/...            the same three through OpExecutor::Execute with the
//                          Identity kernel (a buffer-sharing copy), i.e. the
//                          whole per-op overhead an op pays in the executor
//
// Run: build/bench/recording_bench --benchmark_repetitions=5
//        --benchmark_report_aggregates_only=true
#include "benchmark/benchmark.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"

namespace gradtape {
namespace {

enum Mode { kNoTape = 0, kUnwatched = 1, kRecorded = 2 };

void SetUp(OpExecutor& ctx, Mode mode, const Tensor& watched) {
  if (mode == kNoTape) return;
  (void)ctx.tapes().Push(1, /*persistent=*/false, false);
  if (mode == kRecorded) (*ctx.tapes().Find(1))->Watch(watched);
}

void BM_RecordHook(benchmark::State& state) {
  const Mode mode = static_cast<Mode>(state.range(0));
  OpExecutor ctx(DefaultRegistry());
  const OpDef& op = *DefaultRegistry().Find("MatMul");
  Tensor a = ctx.Adopt(Tensor::Filled(DType::kFloat32, {2, 2}, 1.0).value());
  Tensor b = ctx.Adopt(Tensor::Filled(DType::kFloat32, {2, 2}, 1.0).value());
  Tensor out = Tensor::Filled(DType::kFloat32, {2, 2}, 2.0).value();
  SetUp(ctx, mode, a);
  const Tensor inputs[] = {a, b};
  AttrMap attrs;
  int64_t next_id = 1 << 20;
  TapeSet& tapes = ctx.tapes();
  for (auto _ : state) {
    out.set_id(++next_id);
    if (tapes.CouldRecord()) {
      tapes.Record(op, attrs, inputs, absl::MakeConstSpan(&out, 1));
      if (mode == kRecorded) tapes.DeleteTrace(out.id());
    }
    benchmark::DoNotOptimize(out);
  }
  state.SetLabel(mode == kNoTape      ? "no_tape"
                 : mode == kUnwatched ? "unwatched"
                                      : "recorded+released");
}
BENCHMARK(BM_RecordHook)->Arg(kNoTape)->Arg(kUnwatched)->Arg(kRecorded);

void BM_Execute(benchmark::State& state) {
  const Mode mode = static_cast<Mode>(state.range(0));
  OpExecutor ctx(DefaultRegistry());
  const OpDef& op = *DefaultRegistry().Find("Identity");
  Tensor x = ctx.Adopt(Tensor::Filled(DType::kFloat32, {4}, 1.0).value());
  SetUp(ctx, mode, x);
  Tensors out;
  for (auto _ : state) {
    absl::Status s = ctx.Execute(op, {&x, 1}, AttrMap(), &out);
    if (mode == kRecorded) ctx.tapes().DeleteTrace(out[0].id());
    benchmark::DoNotOptimize(s);
  }
  state.SetLabel(mode == kNoTape      ? "no_tape"
                 : mode == kUnwatched ? "unwatched"
                                      : "recorded+released");
}
BENCHMARK(BM_Execute)->Arg(kNoTape)->Arg(kUnwatched)->Arg(kRecorded);

}  // namespace
}  // namespace gradtape

BENCHMARK_MAIN();
