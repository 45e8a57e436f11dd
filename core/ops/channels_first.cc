#include "core/ops/channels_first.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/ops/kernel_util.h"

namespace gradtape {
namespace {

// The attrs with one entry per dim of the data layout.
constexpr const char* kPerDimAttrs[] = {"strides", "ksize", "dilations",
                                        "input_sizes", "orig_input_shape"};

// v (one entry per dim, or `per_dim` entries per dim) reordered by perm.
std::vector<int64_t> Permuted(const std::vector<int64_t>& v,
                              const std::vector<int64_t>& perm, int per_dim) {
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (int64_t p : perm) {
    for (int j = 0; j < per_dim; ++j) out.push_back(v[p * per_dim + j]);
  }
  return out;
}

// The attrs of a channels-first op for its channels-last kernel; a list of
// the wrong length stays as it is, for the kernel to refuse.
AttrMap ChannelsLastAttrs(const AttrMap& attrs, int spatial,
                          const std::vector<int64_t>& to_last) {
  const size_t rank = to_last.size();
  AttrMap out = attrs;
  out.Set("data_format", std::string(ChannelsLastName(spatial)));
  for (const char* name : kPerDimAttrs) {
    const AttrValue* v = attrs.Find(name);
    if (v == nullptr) continue;
    const auto& list = std::get<std::vector<int64_t>>(*v);
    if (list.size() == rank) out.Set(name, Permuted(list, to_last, 1));
  }
  if (const AttrValue* v = attrs.Find("explicit_paddings"); v != nullptr) {
    const auto& list = std::get<std::vector<int64_t>>(*v);
    if (list.size() == 2 * rank) {
      out.Set("explicit_paddings", Permuted(list, to_last, 2));
    }
  }
  return out;
}

absl::Status RunChannelsFirst(const ChannelsFirstSpec& spec,
                              const ForwardFn& kernel, KernelContext& ctx) {
  const int rank = spec.spatial + 2;
  // NCHW -> NHWC: [0, 2, ..., rank - 1, 1]; NHWC -> NCHW: [0, rank - 1, 1,
  // ..., rank - 2].
  std::vector<int64_t> to_last{0}, to_first{0, rank - 1};
  for (int i = 2; i < rank; ++i) to_last.push_back(i);
  to_last.push_back(1);
  for (int i = 1; i < rank - 1; ++i) to_first.push_back(i);

  std::vector<Tensor> inputs(ctx.num_inputs());
  for (int i = 0; i < ctx.num_inputs(); ++i) inputs[i] = ctx.input(i);
  for (int i : spec.activations) {
    const Tensor& x = ctx.input(i);
    if (x.rank() != rank) {
      return ctx.InvalidArgument(ctx.op().input_names[i], " must have rank ",
                                 rank, " (", ChannelsFirstName(spec.spatial),
                                 "), got ", x.DebugString());
    }
    ASSIGN_OR_RETURN(inputs[i], Transposed(ctx, x, to_last));
  }
  const AttrMap attrs = ChannelsLastAttrs(ctx.attrs(), spec.spatial, to_last);
  Tensors outputs(ctx.op().num_outputs());
  KernelContext last(ctx.op(), inputs, attrs, &outputs);
  if (absl::Status s = kernel(last); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat(s.message(), " (data_format ",
                               ChannelsFirstName(spec.spatial), ": run as ",
                               ChannelsLastName(spec.spatial),
                               "; the shapes and per-dim attrs above are in ",
                               ChannelsLastName(spec.spatial), " order)"));
  }
  for (int i = 0; i < static_cast<int>(outputs.size()); ++i) {
    if (i == 0 && spec.output_is_activation) {
      ASSIGN_OR_RETURN(Tensor y, Transposed(ctx, outputs[0], to_first));
      ctx.set_output(0, std::move(y));
    } else {
      ctx.set_output(i, std::move(outputs[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* ChannelsLastName(int spatial) {
  return spatial == 3 ? "NDHWC" : "NHWC";
}
const char* ChannelsFirstName(int spatial) {
  return spatial == 3 ? "NCDHW" : "NCHW";
}

ForwardFn WithChannelsFirst(ChannelsFirstSpec spec, ForwardFn kernel) {
  return [spec = std::move(spec),
          kernel = std::move(kernel)](KernelContext& ctx) -> absl::Status {
    const std::string& format = ctx.attrs().Get<std::string>("data_format");
    if (format == ChannelsLastName(spec.spatial)) return kernel(ctx);
    if (format == ChannelsFirstName(spec.spatial)) {
      return RunChannelsFirst(spec, kernel, ctx);
    }
    return ctx.InvalidArgument("data_format '", format, "' must be ",
                               ChannelsLastName(spec.spatial), " or ",
                               ChannelsFirstName(spec.spatial));
  };
}

}  // namespace gradtape
