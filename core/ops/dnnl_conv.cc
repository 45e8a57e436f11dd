// oneDNN's convolution primitives through its C API (dnnl.h): the C++ API
// (dnnl.hpp) reports failures by exceptions, and none may cross a module
// boundary here. Every dnnl_* status other than success makes DnnlConv2D
// decline. See dnnl_conv.h.
#include "core/ops/dnnl_conv.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "core/base/cancellation.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"
#include "core/ops/parallel.h"
#include "dnnl.h"

namespace gradtape {
namespace {

std::atomic<DnnlConvMode> mode{DnnlConvMode::kAuto};
std::atomic<int64_t> calls{0};
std::atomic<int64_t> chunk_macs{kDnnlChunkMacs};

struct PdDeleter {
  void operator()(dnnl_primitive_desc_t p) const {
    dnnl_primitive_desc_destroy(p);
  }
};
struct PrimitiveDeleter {
  void operator()(dnnl_primitive_t p) const { dnnl_primitive_destroy(p); }
};
struct AttrDeleter {
  void operator()(dnnl_primitive_attr_t p) const {
    dnnl_primitive_attr_destroy(p);
  }
};
struct MemoryDeleter {
  void operator()(dnnl_memory_t p) const { dnnl_memory_destroy(p); }
};
using PdPtr = std::unique_ptr<dnnl_primitive_desc, PdDeleter>;
using PrimitivePtr = std::unique_ptr<dnnl_primitive, PrimitiveDeleter>;
using AttrPtr = std::unique_ptr<dnnl_primitive_attr, AttrDeleter>;
using MemoryPtr = std::unique_ptr<dnnl_memory, MemoryDeleter>;

// The CPU engine, made once (null if oneDNN could not make it; never
// destroyed, so no static destruction order matters).
dnnl_engine_t Engine() {
  static dnnl_engine_t engine = []() -> dnnl_engine_t {
    dnnl_engine_t e = nullptr;
    if (dnnl_engine_create(&e, dnnl_cpu, 0) != dnnl_success) return nullptr;
    return e;
  }();
  return engine;
}

// This thread's stream (a CPU stream runs on the calling thread).
dnnl_stream_t ThreadStream() {
  struct Holder {
    dnnl_stream_t stream = nullptr;
    ~Holder() {
      if (stream != nullptr) dnnl_stream_destroy(stream);
    }
  };
  thread_local Holder holder;
  if (holder.stream == nullptr && Engine() != nullptr) {
    if (dnnl_stream_create(&holder.stream, Engine(),
                           dnnl_stream_default_flags) != dnnl_success) {
      holder.stream = nullptr;
    }
  }
  return holder.stream;
}

// The calling thread's OpenMP team size follows ParallelismDegree().
void SetThreads() {
  thread_local int set = 0;
  const int degree = ParallelismDegree();
  if (set != degree) {
    omp_set_num_threads(degree);
    set = degree;
  }
}

absl::Status PollCancelled() {
  Cancellation* cancel = CurrentCancellation();
  if (cancel == nullptr || !cancel->Poll()) return absl::OkStatus();
  return cancel->Check("convolution");
}

// One primitive for chunks of `images` images.
struct Primitive {
  int64_t images = 0;
  dnnl_memory_desc_t src, weights, dst;  // plain nhwc / hwio / nhwc
  PdPtr pd;
  PrimitivePtr primitive;
  size_t scratchpad_bytes = 0;
};

// The descriptor parameters of g: strides, dilations (oneDNN counts the
// gaps: d - 1), padding before and after (the least that gives g.out).
struct Window {
  dnnl_dims_t strides, dilates, pad_l, pad_r;
  explicit Window(const DnnlConvGeometry& g) {
    for (int i = 0; i < 2; ++i) {
      strides[i] = g.stride[i];
      dilates[i] = g.dilation[i] - 1;
      pad_l[i] = g.pad_before[i];
      const int64_t span = (g.k[i] - 1) * g.dilation[i] + 1;
      pad_r[i] = std::max<int64_t>(
          0, (g.out[i] - 1) * g.stride[i] + span - g.in[i] - g.pad_before[i]);
    }
  }
};

bool InitMemoryDescs(const DnnlConvGeometry& g, Primitive* p) {
  const dnnl_dims_t src{p->images, g.in_channels, g.in[0], g.in[1]};
  const dnnl_dims_t weights{g.out_channels, g.in_channels, g.k[0], g.k[1]};
  const dnnl_dims_t dst{p->images, g.out_channels, g.out[0], g.out[1]};
  return dnnl_memory_desc_init_by_tag(&p->src, 4, src, dnnl_f32, dnnl_nhwc) ==
             dnnl_success &&
         dnnl_memory_desc_init_by_tag(&p->weights, 4, weights, dnnl_f32,
                                      dnnl_hwio) == dnnl_success &&
         dnnl_memory_desc_init_by_tag(&p->dst, 4, dst, dnnl_f32, dnnl_nhwc) ==
             dnnl_success;
}

// The forward descriptor (also the hint the backward ones need).
bool InitForwardDesc(const Window& w, const Primitive& p,
                     dnnl_convolution_desc_t* desc) {
  return dnnl_dilated_convolution_forward_desc_init(
             desc, dnnl_forward_training, dnnl_convolution_direct, &p.src,
             &p.weights, nullptr, &p.dst, w.strides, w.dilates, w.pad_l,
             w.pad_r) == dnnl_success;
}

bool InitBackwardDesc(DnnlConvOp op, const Window& w, const Primitive& p,
                      dnnl_convolution_desc_t* desc) {
  if (op == DnnlConvOp::kBackpropInput) {
    return dnnl_dilated_convolution_backward_data_desc_init(
               desc, dnnl_convolution_direct, &p.src, &p.weights, &p.dst,
               w.strides, w.dilates, w.pad_l, w.pad_r) == dnnl_success;
  }
  return dnnl_dilated_convolution_backward_weights_desc_init(
             desc, dnnl_convolution_direct, &p.src, &p.weights, nullptr, &p.dst,
             w.strides, w.dilates, w.pad_l, w.pad_r) == dnnl_success;
}

// Creates p's primitive descriptor (scratchpad in user mode); false if
// oneDNN declines.
bool CreatePd(DnnlConvOp op, const Window& w, Primitive* p) {
  dnnl_primitive_attr_t raw_attr = nullptr;
  if (dnnl_primitive_attr_create(&raw_attr) != dnnl_success) return false;
  AttrPtr attr(raw_attr);
  if (dnnl_primitive_attr_set_scratchpad_mode(
          attr.get(), dnnl_scratchpad_mode_user) != dnnl_success) {
    return false;
  }
  dnnl_convolution_desc_t forward;
  if (!InitForwardDesc(w, *p, &forward)) return false;
  PdPtr hint;
  dnnl_primitive_desc_t raw = nullptr;
  if (op == DnnlConvOp::kForward) {
    if (dnnl_primitive_desc_create(&raw, &forward, attr.get(), Engine(),
                                   nullptr) != dnnl_success) {
      return false;
    }
    p->pd.reset(raw);
    return true;
  }
  if (dnnl_primitive_desc_create(&raw, &forward, nullptr, Engine(), nullptr) !=
      dnnl_success) {
    return false;
  }
  hint.reset(raw);
  dnnl_convolution_desc_t backward;
  if (!InitBackwardDesc(op, w, *p, &backward) ||
      dnnl_primitive_desc_create(&raw, &backward, attr.get(), Engine(),
                                 hint.get()) != dnnl_success) {
    return false;
  }
  p->pd.reset(raw);
  return true;
}

// The primitive for chunks of `images` images (oneDNN's primitive cache
// makes a repeated shape cheap); false if oneDNN declines.
bool MakePrimitive(DnnlConvOp op, const DnnlConvGeometry& g, int64_t images,
                   Primitive* p) {
  p->images = images;
  if (!InitMemoryDescs(g, p) || !CreatePd(op, Window(g), p)) return false;
  dnnl_primitive_t raw = nullptr;
  if (dnnl_primitive_create(&raw, p->pd.get()) != dnnl_success) return false;
  p->primitive.reset(raw);
  const dnnl_memory_desc_t* scratch =
      dnnl_primitive_desc_query_md(p->pd.get(), dnnl_query_scratchpad_md, 0);
  p->scratchpad_bytes =
      scratch == nullptr ? 0 : dnnl_memory_desc_get_size(scratch);
  return true;
}

MemoryPtr WrapMemory(const dnnl_memory_desc_t& md, const void* data) {
  dnnl_memory_t m = nullptr;
  if (dnnl_memory_create(&m, &md, Engine(), const_cast<void*>(data)) !=
      dnnl_success) {
    return nullptr;
  }
  return MemoryPtr(m);
}

// The three data pointers of one chunk, in the primitive's argument order:
// (src or diff_src, weights or diff_weights, dst or diff_dst).
struct ChunkData {
  const void* src;
  const void* weights;
  const void* dst;
};

// Runs p on one chunk; false if oneDNN fails.
bool Execute(DnnlConvOp op, const Primitive& p, const ChunkData& d,
             void* scratchpad) {
  MemoryPtr src = WrapMemory(p.src, d.src);
  MemoryPtr weights = WrapMemory(p.weights, d.weights);
  MemoryPtr dst = WrapMemory(p.dst, d.dst);
  const dnnl_memory_desc_t* scratch_md =
      dnnl_primitive_desc_query_md(p.pd.get(), dnnl_query_scratchpad_md, 0);
  MemoryPtr scratch =
      p.scratchpad_bytes == 0 ? nullptr : WrapMemory(*scratch_md, scratchpad);
  if (src == nullptr || weights == nullptr || dst == nullptr ||
      (p.scratchpad_bytes != 0 && scratch == nullptr)) {
    return false;
  }
  const bool forward = op == DnnlConvOp::kForward;
  std::vector<dnnl_exec_arg_t> args = {
      {forward || op == DnnlConvOp::kBackpropFilter ? DNNL_ARG_SRC
                                                    : DNNL_ARG_DIFF_SRC,
       src.get()},
      {op == DnnlConvOp::kBackpropFilter ? DNNL_ARG_DIFF_WEIGHTS
                                         : DNNL_ARG_WEIGHTS,
       weights.get()},
      {forward ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST, dst.get()}};
  if (scratch != nullptr) args.push_back({DNNL_ARG_SCRATCHPAD, scratch.get()});
  dnnl_stream_t stream = ThreadStream();
  return stream != nullptr &&
         dnnl_primitive_execute(p.primitive.get(), stream,
                                static_cast<int>(args.size()),
                                args.data()) == dnnl_success &&
         dnnl_stream_wait(stream) == dnnl_success;
}

Shape OutputShape(DnnlConvOp op, const DnnlConvGeometry& g) {
  switch (op) {
    case DnnlConvOp::kForward:
      return {g.batch, g.out[0], g.out[1], g.out_channels};
    case DnnlConvOp::kBackpropInput:
      return {g.batch, g.in[0], g.in[1], g.in_channels};
    case DnnlConvOp::kBackpropFilter:
      return {g.k[0], g.k[1], g.in_channels, g.out_channels};
  }
  return {};
}

// Images per oneDNN call: about kDnnlChunkMacs multiply-adds, at least one.
int64_t ImagesPerCall(const DnnlConvGeometry& g) {
  const double per_image = static_cast<double>(g.out[0]) * g.out[1] *
                           g.out_channels * g.k[0] * g.k[1] * g.in_channels;
  const double images =
      static_cast<double>(chunk_macs.load(std::memory_order_relaxed)) /
      per_image;
  return images >= static_cast<double>(g.batch)
             ? g.batch
             : std::max<int64_t>(1, static_cast<int64_t>(images));
}

// The pointers of the chunk at image b: a, b and out as DnnlConv2D has them,
// df the filter gradient buffer of this chunk.
ChunkData ChunkPointers(DnnlConvOp op, const DnnlConvGeometry& g, int64_t b,
                        const float* a, const float* bt, float* out,
                        float* df) {
  const int64_t in_image = g.in[0] * g.in[1] * g.in_channels;
  const int64_t out_image = g.out[0] * g.out[1] * g.out_channels;
  switch (op) {
    case DnnlConvOp::kForward:
      return {a + b * in_image, bt, out + b * out_image};
    case DnnlConvOp::kBackpropInput:
      return {out + b * in_image, a, bt + b * out_image};
    case DnnlConvOp::kBackpropFilter:
      return {a + b * in_image, df, bt + b * out_image};
  }
  return {};
}

// The primitives of a call: one for full chunks, one for the last chunk
// when it is shorter. False if oneDNN declines.
bool MakePrimitives(DnnlConvOp op, const DnnlConvGeometry& g,
                    std::vector<Primitive>* ps) {
  const int64_t chunk = ImagesPerCall(g);
  ps->resize(g.batch % chunk == 0 ? 1 : 2);
  if (!MakePrimitive(op, g, chunk, &(*ps)[0])) return false;
  return ps->size() == 1 || MakePrimitive(op, g, g.batch % chunk, &(*ps)[1]);
}

// Runs the chunks into out (scratch: the scratchpad, partial: a filter-sized
// buffer for the filter gradient of every chunk after the first). OK with
// *ran false when oneDNN failed.
absl::Status RunChunks(DnnlConvOp op, const DnnlConvGeometry& g,
                       const std::vector<Primitive>& ps, const float* a,
                       const float* b, float* out, void* scratch,
                       float* partial, bool* ran) {
  *ran = false;
  const int64_t chunk = ps[0].images;
  const int64_t filter_size = g.k[0] * g.k[1] * g.in_channels * g.out_channels;
  for (int64_t start = 0; start < g.batch; start += chunk) {
    RETURN_IF_ERROR(PollCancelled());
    const Primitive& p = g.batch - start < chunk ? ps[1] : ps[0];
    float* df = start == 0 ? out : partial;
    if (!Execute(op, p, ChunkPointers(op, g, start, a, b, out, df), scratch)) {
      return absl::OkStatus();
    }
    if (op == DnnlConvOp::kBackpropFilter && start != 0) {
      for (int64_t i = 0; i < filter_size; ++i) out[i] += partial[i];
    }
  }
  *ran = true;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> DnnlConv2D(const KernelContext& ctx, DnnlConvOp op,
                                  const DnnlConvGeometry& g, const Tensor& a,
                                  const Tensor& b) {
  if (mode.load(std::memory_order_relaxed) == DnnlConvMode::kOff ||
      a.dtype() != DType::kFloat32 || b.dtype() != DType::kFloat32 ||
      Engine() == nullptr || g.batch <= 0 || g.in_channels <= 0 ||
      g.out_channels <= 0) {
    return Tensor();
  }
  SetThreads();
  std::vector<Primitive> ps;
  if (!MakePrimitives(op, g, &ps)) return Tensor();
  size_t scratch_bytes = 0;
  for (const Primitive& p : ps) {
    scratch_bytes = std::max(scratch_bytes, p.scratchpad_bytes);
  }
  ASSIGN_OR_RETURN(Tensor out,
                   AllocateOutput(ctx, DType::kFloat32, OutputShape(op, g)));
  ASSIGN_OR_RETURN(
      Tensor scratch,
      AllocateOutput(ctx, DType::kInt32,
                     {static_cast<int64_t>((scratch_bytes + 3) / 4)}));
  Tensor partial;
  if (op == DnnlConvOp::kBackpropFilter && ps[0].images < g.batch) {
    ASSIGN_OR_RETURN(partial,
                     AllocateOutput(ctx, DType::kFloat32, out.shape()));
  }
  bool ran = false;
  RETURN_IF_ERROR(RunChunks(
      op, g, ps, a.data<float>(), b.data<float>(), out.mutable_data<float>(),
      scratch.raw_mutable_data(),
      partial.valid() ? partial.mutable_data<float>() : nullptr, &ran));
  if (!ran) return Tensor();
  calls.fetch_add(1, std::memory_order_relaxed);
  return out;
}

void SetDnnlConvModeForTesting(DnnlConvMode m) { mode.store(m); }
DnnlConvMode GetDnnlConvMode() { return mode.load(); }
int64_t DnnlConvCallsForTesting() { return calls.load(); }
void SetDnnlChunkMacsForTesting(int64_t macs) {
  chunk_macs.store(macs > 0 ? macs : kDnnlChunkMacs);
}

}  // namespace gradtape
