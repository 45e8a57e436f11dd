// Kernels through the registered ops (OpExecutor::Execute, no tape): float32
// MatMul at n x n and elementwise ops on large float32 vectors. Prints one
// line per case, median of --reps runs:
//   matmul n=<n> <gflops> GFLOP/s
//   elementwise op=<op> elems=<n> <gbs> GB/s   (bytes read + written)
//   transformer op=<op> <what> <us> us   (the transformer step's kernels)
//   window op=<op> data_format=<NHWC|NCHW> input=<shape> <ms> ms
//   fused loop=<what> <shape> <us> us   (the transformer plan's fused loops)
//   gemm <what> <m>x<n>x<k> <ta><tb> openblas <us> us onednn <us> us
//       ratio <x>   (float32 Gemm in each library, the transformer's sizes)
// (the window lines: a convolution layer and a max pooling in both layouts
// on the same data, so the cost of channels-first, which runs the
// channels-last kernel on transposed copies, is their ratio)
// after a "# gradtape: ..." line naming the OpenBLAS kernels and the vector
// instruction set chosen for this CPU.
// bench/numpy_bench.py prints the same lines for numpy; bench/run_all.sh
// puts them side by side.
//
// Run: build-perf/bench/kernel_bench [--reps=5] [--only=fused,transformer]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/fused_loop.h"
#include "core/ops/gemm.h"
#include "core/ops/ops.h"
#include "core/ops/parallel.h"
#include "core/ops/vector_math.h"
#include "core/registry/op_registry.h"

ABSL_FLAG(int, reps, 5, "runs per case; the median is printed");
ABSL_FLAG(int64_t, elems, int64_t{1} << 24, "elements of elementwise inputs");
ABSL_FLAG(int64_t, pool_mb, 256,
          "the tensor buffer pool's limit (gradtape-server's --buffer_pool_mb "
          "default); 0: no pool, so large outputs page-fault on every call");
ABSL_FLAG(std::string, only, "",
          "run only these sections, comma-separated: matmul, elementwise, "
          "transformer, fused, gemm, window (default: all)");
ABSL_FLAG(double, warmup_s, 0.2,
          "seconds each case runs before it is timed (at least one call)");

namespace gradtape {
namespace {

using Clock = std::chrono::steady_clock;

// Warm-up: calls fn for at least --warmup_s first, so that a case starts
// with the pool's worker awake and placed (on this VM a process's first
// milliseconds of two-thread work are often much slower than the rest).
template <typename Fn>
double MedianSeconds(int reps, Fn fn) {
  const Clock::time_point warm_until =
      Clock::now() +
      std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(absl::GetFlag(FLAGS_warmup_s)));
  do {
    fn();
  } while (Clock::now() < warm_until);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const Clock::time_point start = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Whether --only lets `section` run.
bool Wanted(absl::string_view section) {
  const std::string only = absl::GetFlag(FLAGS_only);
  if (only.empty()) return true;
  for (absl::string_view s : absl::StrSplit(only, ',')) {
    if (s == section) return true;
  }
  return false;
}

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "kernel_bench: %s\n", s.ToString().c_str());
    std::exit(1);
  }
}

Tensor Ints(std::vector<int32_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::FromVector<int32_t>({n}, std::move(v));
}

// The kernels the character transformer's training step spends most time
// in (bench/transformer_bench.py's model, batch 32: docs/PERFORMANCE.md,
// change 29), at its shapes, one line each:
//   transformer op=<op> <what> <us> us
void TransformerKernels(OpExecutor& ctx, int reps) {
  auto filled = [](Shape shape, double v) {
    return Tensor::Filled(DType::kFloat32, shape, v).value();
  };
  const Tensor scores = filled({32, 4, 64, 64}, 0.5);
  const Tensor head = filled({32, 4, 64, 16}, 0.25);
  const Tensor qkv = filled({3, 32, 4, 64, 16}, 0.5);
  const Tensor x = filled({32, 64, 64}, 0.5);
  Tensors mask;
  Check(
      ctx.Execute("GreaterEqual", {scores, filled({}, 0.5)}, AttrMap(), &mask));
  // The model's scores after its causal mask: -1e9 above the diagonal.
  std::vector<float> causal(32 * 4 * 64 * 64, 0.5f);
  for (size_t i = 0; i < causal.size(); ++i) {
    if (i % 64 > (i / 64) % 64) causal[i] = -1e9f;
  }
  const Tensor masked =
      Tensor::FromVector<float>({32, 4, 64, 64}, std::move(causal));
  AttrMap shrink{{"shrink_axis_mask", int64_t{1}}};
  struct Case {
    const char* op;
    const char* what;
    std::vector<Tensor> in;
    AttrMap attrs;
  };
  const Case cases[] = {
      {"BatchMatMulV2", "[32,4,64,64] x [32,4,64,16]", {scores, head}, {}},
      {"BatchMatMulV2",
       "[32,4,64,16] x [32,4,64,16]^T",
       {head, head},
       {{"adj_y", true}}},
      {"Softmax", "[32,4,64,64]", {scores}, {}},
      {"Softmax", "[32,4,64,64] causal-masked", {masked}, {}},
      {"StatelessRandomUniformV2",
       "[32,4,64,64]",
       {Ints({32, 4, 64, 64}), Tensor::FromVector<int64_t>({1}, {7}),
        Tensor::FromVector<int64_t>({2}, {3, 1}), Tensor::Scalar<int32_t>(1)},
       {{"dtype", DType::kFloat32}}},
      {"Cast",
       "bool [32,4,64,64] to float32",
       {mask[0]},
       {{"DstT", DType::kFloat32}}},
      {"StridedSlice",
       "[3,32,4,64,16][0]",
       {qkv, Ints({0}), Ints({1}), Ints({1})},
       shrink},
      {"StridedSliceGrad",
       "[32,4,64,16] into [3,32,4,64,16][0]",
       {Ints({3, 32, 4, 64, 16}), Ints({0}), Ints({1}), Ints({1}), head},
       shrink},
      {"Transpose",
       "[32,64,3,4,16] perm [2,0,3,1,4]",
       {filled({32, 64, 3, 4, 16}, 0.5)},
       {{"perm", std::vector<int64_t>{2, 0, 3, 1, 4}}}},
      {"Mul", "[32,64,64] x [32,64,1]", {x, filled({32, 64, 1}, 2.0)}, {}},
      {"Sum",
       "[2048,256] over axis 0 (a bias gradient)",
       {filled({2048, 256}, 0.5)},
       {{"axis", std::vector<int64_t>{0}}}},
      {"Sum",
       "[32,64,64] over axes 0, 1",
       {x},
       {{"axis", std::vector<int64_t>{0, 1}}}},
      {"Erf", "[2048,256]", {filled({2048, 256}, 0.5)}, {}},
      {"Unpack", "[3,32,4,64,16] num=3", {qkv}, {{"num", int64_t{3}}}},
      {"Pack", "3 x [32,4,64,16]", {head, head, head}, {{"N", int64_t{3}}}},
      {"SparseSoftmaxCrossEntropyWithLogits",
       "[2048,100] (the loss)",
       {filled({2048, 100}, 0.5),
        Tensor::Filled(DType::kInt32, {2048}, 7).value()},
       {}},
  };
  Tensors out;
  for (const Case& c : cases) {
    double s = MedianSeconds(reps * 4, [&] {
      out.clear();
      Check(ctx.Execute(c.op, c.in, c.attrs, &out));
    });
    std::printf("transformer op=%s %s %.1f us\n", c.op, c.what, s * 1e6);
  }
}

// The heaviest fused loops of the transformer's captured step, as its plan
// builds them (docs/CAPTURE.md, "Fused loops"), one line each:
//   fused loop=<what> <shape> <us> us
void TransformerLoops(int reps) {
  using L = FusedLoop;
  auto filled = [](Shape shape, double v) {
    return Tensor::Filled(DType::kFloat32, shape, v).value();
  };
  const Tensor one = filled({}, 0.5);
  const Tensor wide = filled({2048, 256}, 0.25);
  const Tensor x = filled({32, 64, 64}, 0.5);
  const Tensor stat = filled({32, 64, 1}, 2.0);
  const Tensor probs = filled({32, 4, 64, 64}, 0.25);
  struct Case {
    const char* what;
    L loop;
    std::vector<Tensor> in;
  };
  // Operand k < num_inputs is input k; above, op k - num_inputs.
  const Case cases[] = {
      {"gelu-backward",
       {6,
        {{L::kMul, 2, 4},
         {L::kErf, 6, 6},
         {L::kAdd, 7, 5},
         {L::kMul, 0, 1},
         {L::kMul, 9, 8},
         {L::kMul, 9, 2},
         {L::kMul, 6, 6},
         {L::kNeg, 12, 12},
         {L::kExp, 13, 13},
         {L::kMul, 3, 14},
         {L::kMul, 11, 15},
         {L::kMul, 16, 4},
         {L::kAdd, 10, 17}},
        {12}},
       {wide, one, wide, one, one, one}},
      {"bias+gelu",
       {5,
        {{L::kAdd, 0, 1},
         {L::kMul, 5, 2},
         {L::kErf, 6, 6},
         {L::kAdd, 7, 3},
         {L::kMul, 5, 8},
         {L::kMul, 9, 4}},
        {0, 5}},
       {wide, filled({256}, 0.5), one, one, one}},
      {"layer-norm-backward",
       {4,
        {{L::kCopy, 0, 0},
         {L::kDiv, 4, 1},
         {L::kMul, 5, 2},
         {L::kMul, 5, 2},
         {L::kAdd, 3, 6},
         {L::kAdd, 8, 7},
         {L::kNeg, 9, 9}},
        {5},
        std::nullopt,
        {{6}}},
       {stat, one, x, x}},
      {"softmax-backward",
       {4, {{L::kSub, 0, 1}, {L::kMul, 4, 2}, {L::kMul, 5, 3}}, {2}},
       {probs, filled({32, 4, 64, 1}, 1.0), probs, one}},
      {"dropout-backward+row-sum",
       {3, {{L::kMul, 0, 1}, {L::kMul, 3, 2}}, {1}, std::nullopt, {{1}}},
       {probs, probs, probs}},
      // scores * c + mask, softmax, dropout: probabilities, mask, result.
      {"attention-forward",
       {6,
        {{L::kMul, 0, 1},
         {L::kAdd, 6, 2},
         {L::kSoftmax, 7, 7},
         {L::kGreaterEqual, 3, 4},
         {L::kCopy, 9, 9},
         {L::kMul, 10, 5},
         {L::kMul, 8, 11}},
        {2, 5, 6}},
       {probs, one, filled({64, 64}, -1.0), probs, filled({}, 0.1),
        filled({}, 1.1)}},
  };
  for (const Case& c : cases) {
    Tensors out;
    double s = MedianSeconds(reps * 4, [&] {
      out.clear();
      Check(RunFusedLoop(c.loop, c.in, &out));
    });
    std::printf("fused loop=%s %s %.1f us\n", c.what,
                ShapeString(out[0].shape()).c_str(), s * 1e6);
  }
  // The attention's forward as it ran before the softmax joined the loop:
  // a loop, the Softmax kernel, a loop.
  const Case& joined = cases[sizeof(cases) / sizeof(cases[0]) - 1];
  L before{3, {{L::kMul, 0, 1}, {L::kAdd, 3, 2}}, {1}};
  L after{4,
          {{L::kGreaterEqual, 0, 1},
           {L::kCopy, 4, 4},
           {L::kMul, 5, 2},
           {L::kMul, 3, 6}},
          {2, 3}};
  OpExecutor ctx(DefaultRegistry());
  Tensors s1, s2, s3;
  double s = MedianSeconds(reps * 4, [&] {
    s1.clear(), s2.clear(), s3.clear();
    Check(
        RunFusedLoop(before, {joined.in[0], joined.in[1], joined.in[2]}, &s1));
    Check(ctx.Execute("Softmax", {s1[0]}, AttrMap(), &s2));
    Check(RunFusedLoop(after, {joined.in[3], joined.in[4], joined.in[5], s2[0]},
                       &s3));
  });
  std::printf("fused loop=attention-forward-as-three-steps %s %.1f us\n",
              ShapeString(s3[0].shape()).c_str(), s * 1e6);
}

// float32 Gemm with each library, one after the other per case (median
// us of each): the character transformer's products at batch 32 x 64
// positions (forward, data gradient NT, weight gradient TN) and two sizes
// each side of gemm.cc's kDnnlMinWork. Single-threaded products are what
// each block of a split product is; this runs Gemm as kernels call it
// (split between the pool's threads).
void GemmLibraries(int reps) {
  struct Case {
    const char* what;
    bool ta, tb;
    int64_t m, n, k;
  };
  const Case cases[] = {
      {"qkv", false, false, 2048, 192, 64},
      {"attention-out", false, false, 2048, 64, 64},
      {"mlp-in", false, false, 2048, 256, 64},
      {"mlp-out", false, false, 2048, 64, 256},
      {"mlp-in-data-grad", false, true, 2048, 64, 256},
      {"qkv-data-grad", false, true, 2048, 64, 192},
      {"mlp-in-weight-grad", true, false, 64, 256, 2048},
      {"qkv-weight-grad", true, false, 64, 192, 2048},
      {"mlp-out-weight-grad", true, false, 256, 64, 2048},
      {"logits-weight-grad", true, false, 64, 100, 2048},
      {"attention-out-weight-grad", true, false, 64, 64, 2048},
      {"below-threshold", false, false, 64, 128, 64},
      {"at-threshold", false, false, 256, 64, 64},
  };
  const GemmLibrary before = GetGemmLibrary();
  for (const Case& c : cases) {
    std::vector<float> a(c.m * c.k, 0.5f), b(c.k * c.n, 0.25f), y(c.m * c.n);
    const int64_t lda = c.ta ? c.m : c.k, ldb = c.tb ? c.k : c.n;
    double us[2];
    for (int lib = 0; lib < 2; ++lib) {
      SetGemmLibrary(lib == 0 ? GemmLibrary::kOpenBlas : GemmLibrary::kAuto);
      us[lib] = 1e6 * MedianSeconds(reps * 20, [&] {
                  Check(Gemm<float>(c.ta, c.tb, c.m, c.n, c.k, a.data(), lda,
                                    b.data(), ldb, y.data(), c.n));
                });
    }
    std::printf(
        "gemm %s %lldx%lldx%lld %c%c openblas %.1f us onednn %.1f us ratio "
        "%.2f\n",
        c.what, static_cast<long long>(c.m), static_cast<long long>(c.n),
        static_cast<long long>(c.k), c.ta ? 'T' : 'N', c.tb ? 'T' : 'N', us[0],
        us[1], us[0] / us[1]);
  }
  SetGemmLibrary(before);
}

}  // namespace
}  // namespace gradtape

int main(int argc, char** argv) {
  using namespace gradtape;
  absl::ParseCommandLine(argc, argv);
  SetBufferPoolLimit(absl::GetFlag(FLAGS_pool_mb) << 20);
  const int reps = absl::GetFlag(FLAGS_reps);
  OpExecutor ctx(DefaultRegistry());
  Tensors out;
  std::printf("# gradtape: GEMM kernels %s, vector math %s, GEMM threads %d\n",
              GemmKernelsName().c_str(), VectorMathIsa(), ParallelismDegree());
  for (int64_t n : {256, 512, 1024}) {
    if (!Wanted("matmul")) break;
    Tensor a = Tensor::Filled(DType::kFloat32, {n, n}, 0.5).value();
    Tensor b = Tensor::Filled(DType::kFloat32, {n, n}, 0.25).value();
    const Tensor in[] = {a, b};
    const int r = n <= 256 ? reps * 4 : reps;
    double s = MedianSeconds(
        r, [&] { Check(ctx.Execute("MatMul", in, AttrMap(), &out)); });
    std::printf("matmul n=%lld %.2f GFLOP/s\n", static_cast<long long>(n),
                2.0 * n * n * n / s / 1e9);
  }
  const int64_t elems = absl::GetFlag(FLAGS_elems);
  Tensor x = Tensor::Filled(DType::kFloat32, {elems}, 0.5).value();
  Tensor y = Tensor::Filled(DType::kFloat32, {elems}, 0.25).value();
  struct Case {
    const char* op;
    int arity;
  };
  for (const Case& c : {Case{"AddV2", 2}, Case{"Mul", 2}, Case{"Exp", 1},
                        Case{"Log", 1}, Case{"Sigmoid", 1}, Case{"Relu", 1}}) {
    if (!Wanted("elementwise")) break;
    const Tensor in[] = {x, y};
    double s = MedianSeconds(reps, [&] {
      out.clear();  // free the previous output before the next allocation
      Check(
          ctx.Execute(c.op, absl::MakeConstSpan(in, c.arity), AttrMap(), &out));
    });
    const double bytes = 4.0 * elems * (c.arity + 1);
    std::printf("elementwise op=%s elems=%lld %.2f GB/s\n", c.op,
                static_cast<long long>(elems), bytes / s / 1e9);
  }
  if (Wanted("transformer")) TransformerKernels(ctx, reps);
  if (Wanted("fused")) TransformerLoops(reps);
  if (Wanted("gemm")) GemmLibraries(reps);
  // A ResNet-style 3x3 layer and a 2x2 max pooling, channels-last and
  // channels-first (the same values transposed).
  struct Window {
    const char* op;
    std::vector<Tensor> nhwc;
    AttrMap attrs;
  };
  const Tensor image =
      Tensor::Filled(DType::kFloat32, {16, 28, 28, 64}, 0.5).value();
  const Tensor filter =
      Tensor::Filled(DType::kFloat32, {3, 3, 64, 64}, 0.25).value();
  const std::vector<int64_t> ones{1, 1, 1, 1};
  const Window windows[] = {
      {"Conv2D",
       {image, filter},
       {{"strides", ones}, {"padding", std::string("SAME")}}},
      {"MaxPool",
       {image},
       {{"ksize", std::vector<int64_t>{1, 2, 2, 1}},
        {"strides", std::vector<int64_t>{1, 2, 2, 1}},
        {"padding", std::string("VALID")}}},
  };
  for (const Window& w : windows) {
    if (!Wanted("window")) break;
    for (const char* format : {"NHWC", "NCHW"}) {
      std::vector<Tensor> in = w.nhwc;
      AttrMap attrs = w.attrs;
      if (format[1] == 'C') {
        // [N,H,W,C] -> [N,C,H,W], and ksize / strides with it.
        const std::vector<int64_t> perm{0, 3, 1, 2};
        Check(ctx.Execute("Transpose", {in[0]}, {{"perm", perm}}, &out));
        in[0] = out[0];
        for (const char* name : {"ksize", "strides"}) {
          if (attrs.Find(name) == nullptr) continue;
          const std::vector<int64_t>& v = attrs.IntList(name);
          attrs.Set(name, std::vector<int64_t>{v[0], v[3], v[1], v[2]});
        }
        attrs.Set("data_format", std::string(format));
      }
      double s = MedianSeconds(reps, [&] {
        out.clear();
        Check(ctx.Execute(w.op, in, attrs, &out));
      });
      std::printf("window op=%s data_format=%s input=%s %.3f ms\n", w.op,
                  format, in[0].DebugString().c_str(), s * 1e3);
    }
  }
  return 0;
}
