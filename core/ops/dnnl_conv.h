// float32 2-D convolutions through oneDNN (libdnnl, its C API): the forward
// (Conv2D), backward-data (Conv2DBackpropInput) and backward-weights
// (Conv2DBackpropFilter) primitives on channels-last data (NHWC; NCHW ops
// reach here as NHWC through WithChannelsFirst) with TensorFlow's filter
// layout [KH, KW, C, O] (oneDNN's hwio). conv_ops.cc calls it first for
// those ops and runs its own im2col + GEMM path when this declines
// (float64, Conv3D, depthwise, empty tensors, or a status other than success
// from oneDNN: a refusal is a fallback, never an error or a crash).
//
// Layouts. Activations stay in plain nhwc. The filter goes in the layout
// oneDNN picks (format_tag any: blocked, for its brgconv / jit:avx512_core
// kernels) through a reorder per call; with plain hwio it fell back to its
// im2col + GEMM kernel (gemm:jit), 2-2.5x slower on bench/cnn_bench.py's
// layers (bench/conv_bench.cc). NCHW ops arrive as NHWC through
// WithChannelsFirst's transposed copies: running oneDNN on the nchw data as
// it is was tried and lost (it picks gemm:jit for plain nchw; kernel_bench's
// NCHW 16x64x28x28 layer on one thread 16.5-20.7 ms against 13.4-17.0 ms
// with the copies).
//
// Memory. The output is an AllocateOutput tensor (oneDNN writes every
// element); oneDNN's scratchpad is in user mode, and it and the reordered
// filter are int32 tensors (Tensor::Uninitialized), so the session's memory
// account and the server's budget see them (tens of KiB for the CNN's
// layers). A reorder that would want a scratchpad of its own declines.
//
// Threads. oneDNN here uses OpenMP (Debian's build, libgomp), opened with
// dlopen on first use after OMP_WAIT_POLICY=PASSIVE was set (dnnl_api.h
// says why). The calling thread's OpenMP thread count is set to
// ParallelismDegree() (GRADTAPE_INTRA_OP_THREADS), once per thread. An
// OpenMP team belongs to the thread that starts it, so sessions running
// convolutions at once each get their own team of that many threads: k busy
// sessions run k * degree threads on the cores (the OS shares them out;
// gradtape's own pool is not involved). A team's threads spin briefly after
// a call (libgomp's wait policy) and then sleep.
//
// Cancellation. The batch is split into chunks of about kDnnlChunkMacs
// multiply-adds (one chunk for every convolution of a small model, so no
// speed is lost) and the current cancellation is polled before each chunk;
// one chunk is one oneDNN call, which cannot be interrupted (2^31
// multiply-adds: ~50 ms on one core of the development machine at the
// CNN layers' 45 GMAC/s, a few times that for shapes oneDNN runs slowly).
// Backprop filter sums its chunks' filter gradients in order.
//
// Determinism. For a given input, shape and thread count the result is the
// same bits run after run and process after process
// (tests/core/ops/dnnl_conv_ops_test.cc). Across thread counts: forward and
// backprop input gave the same bits with 1-4 threads on that test's shape,
// backprop filter did not (oneDNN splits its reduction over the batch and
// positions by thread), so a model's results can differ in the last bits
// between GRADTAPE_INTRA_OP_THREADS settings.
#ifndef GRADTAPE_CORE_OPS_DNNL_CONV_H_
#define GRADTAPE_CORE_OPS_DNNL_CONV_H_

#include <array>
#include <cstdint>

#include "absl/status/statusor.h"
#include "core/registry/op_registry.h"
#include "core/tensor/tensor.h"

namespace gradtape {

// Multiply-adds per oneDNN call (a chunk of images, at least one image).
inline constexpr int64_t kDnnlChunkMacs = int64_t{1} << 31;
// Convolutions of fewer multiply-adds stay on the im2col + GEMM path:
// oneDNN's per-call cost (primitive descriptors, cache lookup, waking the
// OpenMP team: 7-30 us on one thread, 30-70 us on two, bench/conv_bench.cc's
// tiny case) exceeds what it saves there.
inline constexpr int64_t kDnnlMinMacs = int64_t{1} << 20;

// A 2-D convolution's sizes as conv_ops.cc resolves them (spatial dims
// [H, W]); pad_before is the padding before each dim, the padding after
// follows from the sizes.
struct DnnlConvGeometry {
  int64_t batch = 0, in_channels = 0, out_channels = 0;
  std::array<int64_t, 2> in{}, k{}, out{}, stride{}, dilation{}, pad_before{};
};

enum class DnnlConvOp {
  kForward,         // a = input [N,H,W,C], b = filter -> [N,OH,OW,O]
  kBackpropInput,   // a = filter, b = out_backprop -> [N,H,W,C]
  kBackpropFilter,  // a = input, b = out_backprop -> [KH,KW,C,O]
};

// Runs `op` on float32 a and b (shapes as g says, checked by the caller).
// An invalid Tensor means oneDNN declined: the caller runs its own path.
// Errors: the memory account refused the output or the scratchpad, or the
// work was cancelled between chunks.
absl::StatusOr<Tensor> DnnlConv2D(const KernelContext& ctx, DnnlConvOp op,
                                  const DnnlConvGeometry& g, const Tensor& a,
                                  const Tensor& b);

// Tests only: kOff makes DnnlConv2D decline every call, so a test can run
// the reference path on the same inputs; kAlways ignores kDnnlMinMacs.
enum class DnnlConvMode { kAuto, kAlways, kOff };
void SetDnnlConvModeForTesting(DnnlConvMode mode);
DnnlConvMode GetDnnlConvMode();
// Whether oneDNN could be opened (libdnnl and libgomp found, an engine
// made); false in sanitizer builds, where every call declines.
bool DnnlConvAvailable();
// Tests only: how many DnnlConv2D calls oneDNN has run (not declined).
int64_t DnnlConvCallsForTesting();
// Tests only: multiply-adds per oneDNN call instead of kDnnlChunkMacs (0
// restores it), so small tests run several chunks.
void SetDnnlChunkMacsForTesting(int64_t macs);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_OPS_DNNL_CONV_H_
