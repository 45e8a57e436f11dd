// The oneDNN path of Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter
// (core/ops/dnnl_conv.h) against the im2col + GEMM path (forced with
// SetDnnlConvModeForTesting(kOff)) on random float32 inputs over a grid of
// layouts, strides, dilations, paddings, sizes and channels; chunked calls;
// run-to-run determinism; cancellation between chunks.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/autodiff/op_executor.h"
#include "core/base/cancellation.h"
#include "core/ops/dnnl_conv.h"
#include "core/ops/ops.h"
#include "gtest/gtest.h"
#include "tests/core/ops/op_samples.h"
#include "tests/core/ops/op_test_util.h"

namespace gradtape {
namespace {

using IntList = std::vector<int64_t>;

Tensor Random32(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  Tensor t = Tensor::Empty(DType::kFloat32, shape).value();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    t.mutable_data<float>()[i] = dist(rng);
  }
  return t;
}

// One convolution of the grid, channels-last sizes.
struct Case {
  bool nchw;
  int64_t stride, dilation;
  std::string padding;  // SAME, VALID or EXPLICIT
  int64_t batch, channels, kh, kw;
};

std::string Name(const Case& c) {
  return absl::StrCat(c.nchw ? "NCHW" : "NHWC", " s", c.stride, " d",
                      c.dilation, " ", c.padding, " n", c.batch, " c",
                      c.channels, " k", c.kh, "x", c.kw);
}

constexpr int64_t kH = 11, kW = 7, kOut = 5;

// A channels-last shape [N, H, W, C] in the case's layout.
IntList InLayout(const Case& c, IntList nhwc) {
  if (!c.nchw) return nhwc;
  return {nhwc[0], nhwc[3], nhwc[1], nhwc[2]};
}

AttrMap Attrs(const Case& c) {
  AttrMap a{{"strides", InLayout(c, {1, c.stride, c.stride, 1})},
            {"dilations", InLayout(c, {1, c.dilation, c.dilation, 1})},
            {"padding", c.padding},
            {"data_format", std::string(c.nchw ? "NCHW" : "NHWC")}};
  if (c.padding == "EXPLICIT") {
    // Before / after of H: 1, 2; of W: 2, 0.
    a.Set("explicit_paddings", c.nchw ? IntList{0, 0, 0, 0, 1, 2, 2, 0}
                                      : IntList{0, 0, 1, 2, 2, 0, 0, 0});
  }
  return a;
}

Shape ToShape(const IntList& v) { return Shape(v.begin(), v.end()); }

// Max |a - b| over max(1, max |b|): float32 sums of at most 80 products.
double RelativeError(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  EXPECT_EQ(a.dtype(), DType::kFloat32);
  double err = 0, scale = 1;
  for (int64_t i = 0; i < b.num_elements(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    err = std::max(err, std::abs(x - y));
    scale = std::max(scale, std::abs(y));
  }
  return err / scale;
}

class DnnlConvTest : public testing::OpTest {
 protected:
  void SetUp() override {
    if (!DnnlConvAvailable()) {
      GTEST_SKIP() << "oneDNN is not available (a sanitizer build, or "
                      "libdnnl could not be opened): convolutions use im2col";
    }
  }
  ~DnnlConvTest() override {
    SetDnnlConvModeForTesting(DnnlConvMode::kAuto);
    SetDnnlChunkMacsForTesting(0);
  }

  // The op through oneDNN (which must take it) and through the reference
  // path; their relative difference.
  double Compare(const std::string& op, std::vector<Tensor> in,
                 const AttrMap& attrs) {
    SetDnnlConvModeForTesting(DnnlConvMode::kAlways);
    const int64_t before = DnnlConvCallsForTesting();
    Tensor fast = MustRun(op, in, attrs);
    EXPECT_GT(DnnlConvCallsForTesting(), before) << op << " declined";
    SetDnnlConvModeForTesting(DnnlConvMode::kOff);
    Tensor ref = MustRun(op, in, attrs);
    SetDnnlConvModeForTesting(DnnlConvMode::kAuto);
    if (!fast.valid() || !ref.valid()) return 1e9;
    return RelativeError(fast, ref);
  }

  // All three ops of case c, each within 1e-4 of the reference.
  void CheckCase(const Case& c, uint32_t seed) {
    SCOPED_TRACE(Name(c));
    const AttrMap attrs = Attrs(c);
    Tensor x =
        Random32(ToShape(InLayout(c, {c.batch, kH, kW, c.channels})), seed);
    Tensor f = Random32({c.kh, c.kw, c.channels, kOut}, seed + 1);
    Tensor y = MustRun("Conv2D", {x, f}, attrs);
    ASSERT_TRUE(y.valid());
    Tensor dy = Random32(y.shape(), seed + 2);
    EXPECT_LT(Compare("Conv2D", {x, f}, attrs), 1e-4);
    AttrMap in_attrs = attrs;
    in_attrs.Set("input_sizes", IntList(x.shape().begin(), x.shape().end()));
    EXPECT_LT(Compare("Conv2DBackpropInput", {f, dy}, in_attrs), 1e-4);
    AttrMap f_attrs = attrs;
    f_attrs.Set("filter_sizes", IntList(f.shape().begin(), f.shape().end()));
    EXPECT_LT(Compare("Conv2DBackpropFilter", {x, dy}, f_attrs), 1e-4);
  }
};

TEST_F(DnnlConvTest, MatchesReferenceOverTheGrid) {
  uint32_t seed = 1;
  int cases = 0;
  for (bool nchw : {false, true}) {
    for (int64_t stride : {1, 2}) {
      for (int64_t dilation : {1, 2}) {
        for (const char* padding : {"SAME", "VALID", "EXPLICIT"}) {
          for (int64_t batch : {1, 3}) {
            for (int64_t channels : {1, 3, 8}) {
              for (auto [kh, kw] :
                   {std::pair<int64_t, int64_t>{1, 1}, {3, 3}, {5, 2}}) {
                CheckCase(
                    {nchw, stride, dilation, padding, batch, channels, kh, kw},
                    seed += 3);
                ++cases;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 432);
}

TEST_F(DnnlConvTest, ChunkedCallsMatchReference) {
  // About one image per oneDNN call: 3 and 5 images run 3 and 5 chunks (the
  // filter gradient summed over them).
  SetDnnlChunkMacsForTesting(kH * kW * kOut * 9 * 8);
  for (int64_t batch : {3, 5}) {
    CheckCase({false, 1, 1, "SAME", batch, 8, 3, 3}, 100 + batch);
    CheckCase({false, 2, 1, "VALID", batch, 8, 3, 3}, 200 + batch);
  }
  // Two images per call: 5 images end with a shorter chunk.
  SetDnnlChunkMacsForTesting(2 * kH * kW * kOut * 9 * 8);
  CheckCase({true, 1, 2, "EXPLICIT", 5, 8, 3, 3}, 300);
}

// Two runs with the same inputs (and thread count) give the same bits.
TEST_F(DnnlConvTest, RunsAreBitwiseDeterministic) {
  const AttrMap attrs{{"strides", IntList{1, 1, 1, 1}}, {"padding", "SAME"}};
  Tensor x = Random32({8, 16, 16, 16}, 7);
  Tensor f = Random32({3, 3, 16, 32}, 8);
  Tensor dy = Random32({8, 16, 16, 32}, 9);
  AttrMap in_attrs = attrs, f_attrs = attrs;
  in_attrs.Set("input_sizes", IntList{8, 16, 16, 16});
  f_attrs.Set("filter_sizes", IntList{3, 3, 16, 32});
  struct Run {
    const char* op;
    std::vector<Tensor> in;
    AttrMap attrs;
  };
  for (const Run& r : {Run{"Conv2D", {x, f}, attrs},
                       Run{"Conv2DBackpropInput", {f, dy}, in_attrs},
                       Run{"Conv2DBackpropFilter", {x, dy}, f_attrs}}) {
    SCOPED_TRACE(r.op);
    const int64_t before = DnnlConvCallsForTesting();
    Tensor a = MustRun(r.op, r.in, r.attrs);
    Tensor b = MustRun(r.op, r.in, r.attrs);
    EXPECT_EQ(DnnlConvCallsForTesting(), before + 2);
    ASSERT_TRUE(a.valid() && b.valid());
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()), 0);
    // A digest of the bits, so runs with different GRADTAPE_INTRA_OP_THREADS
    // can be compared by hand (they may differ: see dnnl_conv.h).
    uint64_t digest = 1469598103934665603u;  // FNV-1a
    for (size_t i = 0; i < a.num_bytes(); ++i) {
      digest = (digest ^ static_cast<const uint8_t*>(a.raw_data())[i]) *
               1099511628211u;
    }
    RecordProperty(r.op, absl::StrCat(digest));
  }
}

TEST_F(DnnlConvTest, CancelledBeforeAChunkStops) {
  SetDnnlConvModeForTesting(DnnlConvMode::kAlways);
  Tensor x = Random32({2, 8, 8, 4}, 11);
  Tensor f = Random32({3, 3, 4, 4}, 12);
  Cancellation cancel;
  cancel.Cancel(absl::StatusCode::kCancelled);
  ScopedCancellation scope(&cancel);
  absl::StatusOr<Tensor> y =
      Run1("Conv2D", {x, f},
           {{"strides", IntList{1, 1, 1, 1}}, {"padding", "SAME"}});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kCancelled) << y.status();
}

// Sessions run convolutions at once on their own threads (each with its
// own OpenMP team): each gets the result it gets alone.
TEST_F(DnnlConvTest, ConcurrentCallsMatchASingleCall) {
  const AttrMap attrs{{"strides", IntList{1, 1, 1, 1}}, {"padding", "SAME"}};
  Tensor x = Random32({4, 16, 16, 16}, 21);
  Tensor f = Random32({3, 3, 16, 16}, 22);
  Tensor alone = MustRun("Conv2D", {x, f}, attrs);
  ASSERT_TRUE(alone.valid());
  const int64_t before = DnnlConvCallsForTesting();
  constexpr int kThreads = 3, kCalls = 20;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      OpExecutor ctx(DefaultRegistry());
      for (int i = 0; i < kCalls; ++i) {
        Tensors out;
        if (!ctx.Execute("Conv2D", {x, f}, attrs, &out).ok() ||
            std::memcmp(out[0].raw_data(), alone.raw_data(),
                        alone.num_bytes()) != 0) {
          ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << t;
  EXPECT_EQ(DnnlConvCallsForTesting(), before + kThreads * kCalls);
}

// The output, the scratchpad and the reordered filter are charged: a limit
// that cannot hold them refuses the op, naming it.
TEST_F(DnnlConvTest, MemoryLimitRefusesTheOp) {
  Tensor x = Random32({4, 16, 16, 16}, 23);
  Tensor f = Random32({3, 3, 16, 16}, 24);
  auto account = std::make_shared<MemoryAccount>();
  account->set_limit(4096);
  ScopedMemoryAccount scope(account);
  absl::StatusOr<Tensor> y =
      Run1("Conv2D", {x, f},
           {{"strides", IntList{1, 1, 1, 1}}, {"padding", "SAME"}});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kResourceExhausted)
      << y.status();
  EXPECT_NE(y.status().message().find("Conv2D"), absl::string_view::npos)
      << y.status();
}

// The reordered filter (and scratchpad) are tensors: the peak of live
// tensor bytes during the op holds the output and the blocked filter.
TEST_F(DnnlConvTest, FilterBufferIsATensor) {
  Tensor x = Random32({4, 16, 16, 16}, 25);
  Tensor f = Random32({3, 3, 16, 16}, 26);
  const int64_t live = LiveTensorBytes();
  ResetPeakTensorBytes();
  const int64_t before = DnnlConvCallsForTesting();
  Tensor y = MustRun("Conv2D", {x, f},
                     {{"strides", IntList{1, 1, 1, 1}}, {"padding", "SAME"}});
  EXPECT_EQ(DnnlConvCallsForTesting(), before + 1);
  EXPECT_GE(PeakTensorBytes() - live,
            static_cast<int64_t>(y.num_bytes() + f.num_bytes()));
}

// Small convolutions stay on the reference path unless forced.
TEST_F(DnnlConvTest, SmallConvolutionsAreNotRouted) {
  const int64_t before = DnnlConvCallsForTesting();
  MustRun("Conv2D", {Random32({1, 5, 5, 2}, 15), Random32({3, 3, 2, 2}, 16)},
          {{"strides", IntList{1, 1, 1, 1}}, {"padding", "SAME"}});
  EXPECT_EQ(DnnlConvCallsForTesting(), before);
}

// float64 stays on the reference path.
TEST_F(DnnlConvTest, Float64IsNotRouted) {
  SetDnnlConvModeForTesting(DnnlConvMode::kAlways);
  const int64_t before = DnnlConvCallsForTesting();
  Tensor x = testing::RandomTensor({1, 5, 5, 2}, -1, 1, 13);
  Tensor f = testing::RandomTensor({3, 3, 2, 2}, -1, 1, 14);
  MustRun("Conv2D", {x, f},
          {{"strides", IntList{1, 1, 1, 1}}, {"padding", "SAME"}});
  EXPECT_EQ(DnnlConvCallsForTesting(), before);
}

}  // namespace
}  // namespace gradtape
