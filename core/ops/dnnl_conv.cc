// oneDNN's convolution primitives through its C API (dnnl.h): the C++ API
// (dnnl.hpp) reports failures by exceptions, and none may cross a module
// boundary here. Every dnnl_* status other than success makes DnnlConv2D
// decline. See dnnl_conv.h.
#include "core/ops/dnnl_conv.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "core/base/cancellation.h"
#include "core/base/status_macros.h"
#include "core/ops/dnnl_api.h"
#include "core/ops/kernel_util.h"
#include "core/ops/parallel.h"

namespace gradtape {
namespace {

std::atomic<DnnlConvMode> mode{DnnlConvMode::kAuto};
std::atomic<int64_t> calls{0};
std::atomic<int64_t> chunk_macs{kDnnlChunkMacs};

struct PdDeleter {
  void operator()(dnnl_primitive_desc_t p) const {
    Dnnl().primitive_desc_destroy(p);
  }
};
struct PrimitiveDeleter {
  void operator()(dnnl_primitive_t p) const { Dnnl().primitive_destroy(p); }
};
struct AttrDeleter {
  void operator()(dnnl_primitive_attr_t p) const {
    Dnnl().primitive_attr_destroy(p);
  }
};
struct MemoryDeleter {
  void operator()(dnnl_memory_t p) const { Dnnl().memory_destroy(p); }
};
using PdPtr = std::unique_ptr<dnnl_primitive_desc, PdDeleter>;
using PrimitivePtr = std::unique_ptr<dnnl_primitive, PrimitiveDeleter>;
using AttrPtr = std::unique_ptr<dnnl_primitive_attr, AttrDeleter>;
using MemoryPtr = std::unique_ptr<dnnl_memory, MemoryDeleter>;

// The CPU engine, made once (null if oneDNN could not make it; never
// destroyed, so no static destruction order matters).
dnnl_engine_t Engine() {
  static dnnl_engine_t engine = []() -> dnnl_engine_t {
    if (!Dnnl().ok) return nullptr;
    dnnl_engine_t e = nullptr;
    if (Dnnl().engine_create(&e, dnnl_cpu, 0) != dnnl_success) return nullptr;
    return e;
  }();
  return engine;
}

}  // namespace

bool DnnlConvAvailable() { return Engine() != nullptr; }

namespace {

// This thread's stream (a CPU stream runs on the calling thread).
dnnl_stream_t ThreadStream() {
  struct Holder {
    dnnl_stream_t stream = nullptr;
    ~Holder() {
      if (stream != nullptr) Dnnl().stream_destroy(stream);
    }
  };
  thread_local Holder holder;
  if (holder.stream == nullptr && Engine() != nullptr) {
    if (Dnnl().stream_create(&holder.stream, Engine(),
                             dnnl_stream_default_flags) != dnnl_success) {
      holder.stream = nullptr;
    }
  }
  return holder.stream;
}

// The calling thread's OpenMP team size follows ParallelismDegree().
void SetThreads() { SetDnnlThreads(ParallelismDegree()); }

absl::Status PollCancelled() {
  Cancellation* cancel = CurrentCancellation();
  if (cancel == nullptr || !cancel->Poll()) return absl::OkStatus();
  return cancel->Check("convolution");
}

// One primitive for chunks of `images` images.
// The filter (or its gradient) goes in the layout oneDNN picks for the
// convolution (format_tag any: blocked for its direct JIT kernels), through
// a reorder from / to TensorFlow's hwio when that differs.
struct Primitive {
  int64_t images = 0;
  dnnl_memory_desc_t src, dst;  // plain nhwc
  dnnl_memory_desc_t weights;   // any; then as the primitive descriptor says
  dnnl_memory_desc_t plain_weights;  // hwio
  PdPtr pd;
  PrimitivePtr primitive;
  size_t scratchpad_bytes = 0;
  // Between plain_weights and weights (null when they are equal).
  PdPtr reorder_pd;
  PrimitivePtr reorder;
  size_t weights_bytes = 0;  // of weights, when reordered
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
  return Dnnl().memory_desc_init_by_tag(&p->src, 4, src, dnnl_f32, dnnl_nhwc) ==
             dnnl_success &&
         Dnnl().memory_desc_init_by_tag(&p->weights, 4, weights, dnnl_f32,
                                        dnnl_format_tag_any) == dnnl_success &&
         Dnnl().memory_desc_init_by_tag(&p->plain_weights, 4, weights, dnnl_f32,
                                        dnnl_hwio) == dnnl_success &&
         Dnnl().memory_desc_init_by_tag(&p->dst, 4, dst, dnnl_f32, dnnl_nhwc) ==
             dnnl_success;
}

// The forward descriptor (also the hint the backward ones need).
bool InitForwardDesc(const Window& w, const Primitive& p,
                     dnnl_convolution_desc_t* desc) {
  return Dnnl().dilated_convolution_forward_desc_init(
             desc, dnnl_forward_training, dnnl_convolution_direct, &p.src,
             &p.weights, nullptr, &p.dst, w.strides, w.dilates, w.pad_l,
             w.pad_r) == dnnl_success;
}

bool InitBackwardDesc(DnnlConvOp op, const Window& w, const Primitive& p,
                      dnnl_convolution_desc_t* desc) {
  if (op == DnnlConvOp::kBackpropInput) {
    return Dnnl().dilated_convolution_backward_data_desc_init(
               desc, dnnl_convolution_direct, &p.src, &p.weights, &p.dst,
               w.strides, w.dilates, w.pad_l, w.pad_r) == dnnl_success;
  }
  return Dnnl().dilated_convolution_backward_weights_desc_init(
             desc, dnnl_convolution_direct, &p.src, &p.weights, nullptr, &p.dst,
             w.strides, w.dilates, w.pad_l, w.pad_r) == dnnl_success;
}

// Creates p's primitive descriptor (scratchpad in user mode); false if
// oneDNN declines.
bool CreatePd(DnnlConvOp op, const Window& w, Primitive* p) {
  dnnl_primitive_attr_t raw_attr = nullptr;
  if (Dnnl().primitive_attr_create(&raw_attr) != dnnl_success) return false;
  AttrPtr attr(raw_attr);
  if (Dnnl().primitive_attr_set_scratchpad_mode(
          attr.get(), dnnl_scratchpad_mode_user) != dnnl_success) {
    return false;
  }
  dnnl_convolution_desc_t forward;
  if (!InitForwardDesc(w, *p, &forward)) return false;
  PdPtr hint;
  dnnl_primitive_desc_t raw = nullptr;
  if (op == DnnlConvOp::kForward) {
    if (Dnnl().primitive_desc_create(&raw, &forward, attr.get(), Engine(),
                                     nullptr) != dnnl_success) {
      return false;
    }
    p->pd.reset(raw);
    return true;
  }
  if (Dnnl().primitive_desc_create(&raw, &forward, nullptr, Engine(),
                                   nullptr) != dnnl_success) {
    return false;
  }
  hint.reset(raw);
  dnnl_convolution_desc_t backward;
  if (!InitBackwardDesc(op, w, *p, &backward) ||
      Dnnl().primitive_desc_create(&raw, &backward, attr.get(), Engine(),
                                   hint.get()) != dnnl_success) {
    return false;
  }
  p->pd.reset(raw);
  return true;
}

// The reorder between p's plain and chosen weights layouts, in the direction
// `op` needs (filter in, or filter gradient out), if they differ; false if
// oneDNN declines (or the reorder would need a scratchpad).
bool MakeReorder(DnnlConvOp op, Primitive* p) {
  const dnnl_memory_desc_t* chosen = Dnnl().primitive_desc_query_md(
      p->pd.get(),
      op == DnnlConvOp::kBackpropFilter ? dnnl_query_diff_weights_md
                                        : dnnl_query_weights_md,
      0);
  if (chosen == nullptr) return false;
  p->weights = *chosen;
  if (Dnnl().memory_desc_equal(&p->weights, &p->plain_weights)) return true;
  const bool in = op != DnnlConvOp::kBackpropFilter;
  dnnl_primitive_desc_t raw = nullptr;
  if (Dnnl().reorder_primitive_desc_create(
          &raw, in ? &p->plain_weights : &p->weights, Engine(),
          in ? &p->weights : &p->plain_weights, Engine(),
          nullptr) != dnnl_success) {
    return false;
  }
  p->reorder_pd.reset(raw);
  const dnnl_memory_desc_t* scratch = Dnnl().primitive_desc_query_md(
      p->reorder_pd.get(), dnnl_query_scratchpad_md, 0);
  dnnl_primitive_t prim = nullptr;
  if ((scratch != nullptr && Dnnl().memory_desc_get_size(scratch) != 0) ||
      Dnnl().primitive_create(&prim, p->reorder_pd.get()) != dnnl_success) {
    return false;
  }
  p->reorder.reset(prim);
  p->weights_bytes = Dnnl().memory_desc_get_size(&p->weights);
  return true;
}

// The primitive for chunks of `images` images (oneDNN's primitive cache
// makes a repeated shape cheap); false if oneDNN declines.
bool MakePrimitive(DnnlConvOp op, const DnnlConvGeometry& g, int64_t images,
                   Primitive* p) {
  p->images = images;
  if (!InitMemoryDescs(g, p) || !CreatePd(op, Window(g), p)) return false;
  dnnl_primitive_t raw = nullptr;
  if (Dnnl().primitive_create(&raw, p->pd.get()) != dnnl_success) return false;
  p->primitive.reset(raw);
  const dnnl_memory_desc_t* scratch =
      Dnnl().primitive_desc_query_md(p->pd.get(), dnnl_query_scratchpad_md, 0);
  p->scratchpad_bytes =
      scratch == nullptr ? 0 : Dnnl().memory_desc_get_size(scratch);
  return MakeReorder(op, p);
}

MemoryPtr WrapMemory(const dnnl_memory_desc_t& md, const void* data) {
  dnnl_memory_t m = nullptr;
  if (Dnnl().memory_create(&m, &md, Engine(), const_cast<void*>(data)) !=
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
      Dnnl().primitive_desc_query_md(p.pd.get(), dnnl_query_scratchpad_md, 0);
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
         Dnnl().primitive_execute(p.primitive.get(), stream,
                                  static_cast<int>(args.size()),
                                  args.data()) == dnnl_success &&
         Dnnl().stream_wait(stream) == dnnl_success;
}

// Reorders the filter between from and to (p.reorder's direction).
bool Reorder(DnnlConvOp op, const Primitive& p, const void* from,
             const void* to) {
  const bool in = op != DnnlConvOp::kBackpropFilter;
  MemoryPtr src = WrapMemory(in ? p.plain_weights : p.weights, from);
  MemoryPtr dst = WrapMemory(in ? p.weights : p.plain_weights, to);
  if (src == nullptr || dst == nullptr) return false;
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, src.get()},
                                  {DNNL_ARG_TO, dst.get()}};
  dnnl_stream_t stream = ThreadStream();
  return stream != nullptr &&
         Dnnl().primitive_execute(p.reorder.get(), stream, 2, args) ==
             dnnl_success &&
         Dnnl().stream_wait(stream) == dnnl_success;
}

// Runs p on one chunk whose data d has the filter in hwio, through the
// buffer `blocked` when p reorders it; false if oneDNN fails.
bool RunChunk(DnnlConvOp op, const Primitive& p, ChunkData d, void* scratch,
              void* blocked) {
  if (p.reorder == nullptr) return Execute(op, p, d, scratch);
  const void* plain = d.weights;
  d.weights = blocked;
  if (op != DnnlConvOp::kBackpropFilter && !Reorder(op, p, plain, blocked)) {
    return false;
  }
  if (!Execute(op, p, d, scratch)) return false;
  return op != DnnlConvOp::kBackpropFilter || Reorder(op, p, blocked, plain);
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

// Multiply-adds of one image (double: no overflow).
double ImageMacs(const DnnlConvGeometry& g) {
  return static_cast<double>(g.out[0]) * g.out[1] * g.out_channels * g.k[0] *
         g.k[1] * g.in_channels;
}
double Macs(const DnnlConvGeometry& g) { return ImageMacs(g) * g.batch; }

// Images per oneDNN call: about kDnnlChunkMacs multiply-adds, at least one.
int64_t ImagesPerCall(const DnnlConvGeometry& g) {
  const double per_image = ImageMacs(g);
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
                       float* partial, void* blocked, bool* ran) {
  *ran = false;
  const int64_t chunk = ps[0].images;
  const int64_t filter_size = g.k[0] * g.k[1] * g.in_channels * g.out_channels;
  for (int64_t start = 0; start < g.batch; start += chunk) {
    RETURN_IF_ERROR(PollCancelled());
    const Primitive& p = g.batch - start < chunk ? ps[1] : ps[0];
    float* df = start == 0 ? out : partial;
    if (!RunChunk(op, p, ChunkPointers(op, g, start, a, b, out, df), scratch,
                  blocked)) {
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
  const DnnlConvMode m = mode.load(std::memory_order_relaxed);
  if (m == DnnlConvMode::kOff || a.dtype() != DType::kFloat32 ||
      b.dtype() != DType::kFloat32 || g.batch <= 0 || g.in_channels <= 0 ||
      g.out_channels <= 0 ||
      (m == DnnlConvMode::kAuto && Macs(g) < kDnnlMinMacs) ||
      Engine() == nullptr) {
    return Tensor();
  }
  SetThreads();
  std::vector<Primitive> ps;
  if (!MakePrimitives(op, g, &ps)) return Tensor();
  size_t scratch_bytes = 0, blocked_bytes = 0;
  for (const Primitive& p : ps) {
    scratch_bytes = std::max(scratch_bytes, p.scratchpad_bytes);
    blocked_bytes = std::max(blocked_bytes, p.weights_bytes);
  }
  ASSIGN_OR_RETURN(Tensor out,
                   AllocateOutput(ctx, DType::kFloat32, OutputShape(op, g)));
  ASSIGN_OR_RETURN(
      Tensor scratch,
      AllocateOutput(ctx, DType::kInt32,
                     {static_cast<int64_t>((scratch_bytes + 3) / 4)}));
  // The filter in oneDNN's layout (empty when no primitive reorders it).
  ASSIGN_OR_RETURN(
      Tensor blocked,
      AllocateOutput(ctx, DType::kInt32,
                     {static_cast<int64_t>((blocked_bytes + 3) / 4)}));
  Tensor partial;
  if (op == DnnlConvOp::kBackpropFilter && ps[0].images < g.batch) {
    ASSIGN_OR_RETURN(partial,
                     AllocateOutput(ctx, DType::kFloat32, out.shape()));
  }
  bool ran = false;
  RETURN_IF_ERROR(
      RunChunks(op, g, ps, a.data<float>(), b.data<float>(),
                out.mutable_data<float>(), scratch.raw_mutable_data(),
                partial.valid() ? partial.mutable_data<float>() : nullptr,
                blocked.raw_mutable_data(), &ran));
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
