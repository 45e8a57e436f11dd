// No stale byte reaches a result: kernels may write into buffers that are
// not zeroed (Tensor::Uninitialized, a freed tensor's old bytes), so every
// op sample runs, forward and through the tape's gradient, once on buffers
// pre-filled with zeros and once on buffers filled with a poison pattern,
// and the two runs must agree bit for bit. A kernel that leaves an element
// unwritten shows the poison (0xA5 bytes) in its result.
#include <cstring>
#include <string>
#include <vector>

#include "core/autodiff/gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_samples.h"

namespace gradtape {
namespace {

using testing::AllOpSamples;
using testing::OpSample;

// The op's outputs and, where it has a gradient, the gradients of its
// differentiable inputs for a seed of ones on every trainable output; every
// buffer Tensor::Uninitialized hands out is filled with `fill`.
std::vector<Tensor> RunSample(const OpSample& s, int fill) {
  SetUninitializedFillForTesting(fill);
  std::vector<Tensor> results;
  const std::shared_ptr<const OpDef> op = testing::SampleOpDef(s);
  OpExecutor ctx(DefaultRegistry());
  std::vector<Tensor> inputs;
  for (const Tensor& t : s.inputs) inputs.push_back(ctx.Adopt(t));
  std::vector<Tensor> sources;
  for (int i = 0; i < op->num_inputs(); ++i) {
    const DType dtype = inputs[i].dtype();
    if (op->input_differentiable[i] && IsTrainable(dtype) &&
        dtype != DType::kResource) {
      sources.push_back(inputs[i]);
    }
  }
  const bool gradient =
      op->differentiable() && op->backward_supported() && !sources.empty();
  if (gradient) {
    EXPECT_TRUE(ctx.tapes().Push(1, /*persistent=*/false, false).ok());
    for (const Tensor& t : sources) (*ctx.tapes().Find(1))->Watch(t);
  }
  Tensors out;
  const absl::Status status = ctx.Execute(s.op, inputs, s.attrs, &out);
  EXPECT_TRUE(status.ok()) << status;
  for (const Tensor& t : out) results.push_back(t);
  if (gradient && status.ok()) {
    EXPECT_TRUE(ctx.tapes().Pop(1).ok());
    std::vector<Tensor> targets, seeds;
    for (const Tensor& t : out) {
      if (!IsTrainable(t.dtype())) continue;
      targets.push_back(t);
      seeds.push_back(Tensor::Filled(t.dtype(), t.shape(), 1.0).value());
    }
    if (!targets.empty()) {
      absl::StatusOr<std::vector<Tensor>> grads =
          Gradient(ctx, **ctx.tapes().Find(1), targets, sources, seeds,
                   Unconnected::kZero);
      EXPECT_TRUE(grads.ok()) << grads.status();
      if (grads.ok()) {
        for (const Tensor& g : *grads) results.push_back(g);
      }
    }
  }
  SetUninitializedFillForTesting(-1);
  return results;
}

bool SameBits(const std::vector<Tensor>& a, const std::vector<Tensor>& b,
              std::string* diff) {
  if (a.size() != b.size()) {
    *diff = "a different number of results";
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].dtype() != b[i].dtype() || a[i].shape() != b[i].shape() ||
        (a[i].num_bytes() > 0 && std::memcmp(a[i].raw_data(), b[i].raw_data(),
                                             a[i].num_bytes()) != 0)) {
      *diff = "result " + std::to_string(i) + " (" + a[i].DebugString() + ")";
      return false;
    }
  }
  return true;
}

// One test over every sample (not one ctest process per sample: the suite
// runs each discovered test as a process of its own, and 600 start-ups cost
// more than the runs).
TEST(Poison, ResultsDoNotDependOnWhatBuffersHeld) {
  int checked = 0;
  for (const OpSample& s : AllOpSamples()) {
    SCOPED_TRACE(::testing::PrintToString(s));
    ASSERT_NE(testing::SampleOpDef(s), nullptr);
    const std::vector<Tensor> zeroed = RunSample(s, 0x00);
    std::string diff;
    if (!SameBits(zeroed, RunSample(s, 0x00), &diff)) {
      continue;  // not deterministic (a fresh resource handle per run)
    }
    EXPECT_TRUE(SameBits(zeroed, RunSample(s, 0xA5), &diff))
        << s.op << " (" << s.label << "): " << diff
        << " depends on the old contents of an uninitialized buffer";
    ++checked;
  }
  // Every sample but the few nondeterministic ones (VarHandleOp's handle).
  EXPECT_GT(checked, static_cast<int>(AllOpSamples().size()) - 5);
}

// The fill really reaches kernels' outputs: a kernel that writes nothing
// (here, a tensor taken uninitialized and read back) shows it.
TEST(PoisonFill, ReachesUninitializedBuffers) {
  SetUninitializedFillForTesting(0xA5);
  Tensor t = Tensor::Uninitialized(DType::kInt32, {4}).value();
  SetUninitializedFillForTesting(-1);
  EXPECT_EQ(static_cast<uint32_t>(t.data<int32_t>()[3]), 0xA5A5A5A5u);
  Tensor z = Tensor::Empty(DType::kInt32, {4}).value();
  EXPECT_EQ(z.data<int32_t>()[3], 0);
}

}  // namespace
}  // namespace gradtape
