// float32 Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter through the
// registered ops (OpExecutor::Execute, no tape), on oneDNN (core/ops/
// dnnl_conv.h) and on the im2col + GEMM path (SetDnnlConvModeForTesting
// kOff) in one run: the layers of bench/cnn_bench.py (batch 32, 32x32, 32
// channels; its 3-channel stem) and a tiny convolution whose time is the
// per-call overhead (primitive descriptor creation, primitive cache lookup,
// scratchpad allocation).
//
//   build/bench/conv_bench [--benchmark_repetitions=3]
// Names: BM_Conv/<op>/<shape>/<path>, op 0 Conv2D, 1 BackpropInput,
// 2 BackpropFilter; shape 0 cnn [32,32,32,32] * [3,3,32,32], 1 stem
// [32,32,32,3] * [3,3,3,32], 2 tiny [1,4,4,2] * [3,3,2,2]; path 0 im2col +
// GEMM, 1 oneDNN.
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/dnnl_conv.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"

namespace gradtape {
namespace {

using IntList = std::vector<int64_t>;

struct ConvShape {
  IntList input, filter;
};
const ConvShape kShapes[] = {
    {{32, 32, 32, 32}, {3, 3, 32, 32}},
    {{32, 32, 32, 3}, {3, 3, 3, 32}},
    {{1, 4, 4, 2}, {3, 3, 2, 2}},
};
const char* const kOps[] = {"Conv2D", "Conv2DBackpropInput",
                            "Conv2DBackpropFilter"};

Tensor Filled(const IntList& shape, double v) {
  return Tensor::Filled(DType::kFloat32, Shape(shape.begin(), shape.end()), v)
      .value();
}

void BM_Conv(benchmark::State& state) {
  const int op = static_cast<int>(state.range(0));
  const ConvShape& s = kShapes[state.range(1)];
  // oneDNN even below kDnnlMinMacs, so the tiny case shows its overhead.
  SetDnnlConvModeForTesting(state.range(2) == 1 ? DnnlConvMode::kAlways
                                                : DnnlConvMode::kOff);
  OpExecutor ctx(DefaultRegistry());
  AttrMap attrs{{"strides", IntList{1, 1, 1, 1}},
                {"padding", std::string("SAME")}};
  const Tensor x = Filled(s.input, 0.5), f = Filled(s.filter, 0.25);
  const Tensor dy =
      Filled({s.input[0], s.input[1], s.input[2], s.filter[3]}, 0.125);
  std::vector<Tensor> in;
  switch (op) {
    case 0:
      in = {x, f};
      break;
    case 1:
      in = {f, dy};
      attrs.Set("input_sizes", s.input);
      break;
    default:
      in = {x, dy};
      attrs.Set("filter_sizes", s.filter);
      break;
  }
  Tensors out;
  for (auto _ : state) {
    out.clear();
    absl::Status status = ctx.Execute(kOps[op], in, attrs, &out);
    if (!status.ok()) {
      state.SkipWithError(std::string(status.message()).c_str());
      break;
    }
  }
  SetDnnlConvModeForTesting(DnnlConvMode::kAuto);
}
BENCHMARK(BM_Conv)
    ->ArgsProduct({{0, 1, 2}, {0, 1, 2}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace gradtape

BENCHMARK_MAIN();
