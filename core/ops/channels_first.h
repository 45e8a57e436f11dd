// data_format NCHW / NCDHW for the window ops (convolutions and pooling),
// whose kernels walk channels-last data with the channels innermost.
//
// A channels-first op runs as its channels-last self on transposed copies:
// the activation inputs go NCHW -> NHWC, the attrs with one entry per dim
// (strides, ksize, dilations, input_sizes, orig_input_shape) or two
// (explicit_paddings) are permuted the same way, the kernel runs with
// data_format NHWC, and an activation output comes back NHWC -> NCHW. It
// costs two or three copies of the activations and keeps one kernel per
// op. The op's backward passes data_format on, so its gradients run
// channels-first too.
#ifndef GRADTAPE_CORE_OPS_CHANNELS_FIRST_H_
#define GRADTAPE_CORE_OPS_CHANNELS_FIRST_H_

#include <vector>

#include "core/registry/op_registry.h"

namespace gradtape {

// "NHWC" / "NDHWC" and "NCHW" / "NCDHW" for 2 or 3 spatial dims.
const char* ChannelsLastName(int spatial);
const char* ChannelsFirstName(int spatial);

// Which tensors of an op follow its data_format.
struct ChannelsFirstSpec {
  int spatial = 2;                   // 2 (NHWC / NCHW) or 3 (NDHWC / NCDHW)
  std::vector<int> activations;      // the inputs laid out per data_format
  bool output_is_activation = true;  // output 0 too (else a filter's shape)
};

// `kernel` (written for channels-last data) for an op whose data_format attr
// may be either layout: channels-last runs `kernel` as it is; channels-first
// runs it on transposed copies as above; any other value is INVALID_ARGUMENT.
// Errors the kernel reports on a channels-first op say that their shapes and
// attrs are the channels-last transposes.
ForwardFn WithChannelsFirst(ChannelsFirstSpec spec, ForwardFn kernel);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_OPS_CHANNELS_FIRST_H_
