// Sample inputs for every registered op, used by the generic gradient check,
// the elision checks and the coverage test (an op without a sample fails).
#ifndef GRADTAPE_TESTS_CORE_OP_SAMPLES_H_
#define GRADTAPE_TESTS_CORE_OP_SAMPLES_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/registry/op_registry.h"
#include "core/tensor/attrs.h"
#include "core/tensor/tensor.h"

namespace gradtape::testing {

struct OpSample {
  std::string op;
  std::string label;  // what this sample exercises
  std::vector<Tensor> inputs;
  AttrMap attrs;
};

// gtest prints a sample as "Op (label)".
inline void PrintTo(const OpSample& s, std::ostream* os) {
  *os << s.op << " (" << s.label << ")";
}

// Every sample of every family. Float inputs are float64, kept away from
// kinks and domain edges.
const std::vector<OpSample>& AllOpSamples();

class SampleList {
 public:
  void Add(std::string op, std::string label, std::vector<Tensor> inputs,
           AttrMap attrs = {});
  std::vector<OpSample> Take() { return std::move(samples_); }

 private:
  std::vector<OpSample> samples_;
};

// The op a sample runs as: its registered OpDef, or for an op with list
// arguments its flat instance for the sample's attrs and inputs (what the
// executor runs and the tape records). Null for an unknown op or bad attrs.
std::shared_ptr<const OpDef> SampleOpDef(const OpSample& s);

// The channels-first twin of a channels-last sample of a convolution or
// pooling op: the inputs at `activations` transposed NHWC -> NCHW (NDHWC ->
// NCDHW), the attrs with one entry per dim (strides, ksize, dilations,
// input_sizes, orig_input_shape) or two (explicit_paddings) permuted the
// same way, data_format NCHW / NCDHW, label + ", as NCHW".
OpSample ChannelsFirstTwin(const OpSample& sample,
                           const std::vector<int>& activations);
// Adds each sample of `channels_last` to `s`, followed by its channels-first
// twin; activations(op) names the inputs of `op` that follow data_format.
void AddWithChannelsFirstTwins(
    SampleList& s, SampleList channels_last,
    const std::function<std::vector<int>(const std::string&)>& activations);

// One function per op family file (tests/core/ops/samples_<family>.cc).
void AddMathSamples(SampleList& s);
void AddArraySamples(SampleList& s);
void AddSliceSamples(SampleList& s);
void AddLayoutSamples(SampleList& s);
void AddNnSamples(SampleList& s);
void AddConvSamples(SampleList& s);
void AddPoolSamples(SampleList& s);
void AddNormSamples(SampleList& s);
void AddLinalgSamples(SampleList& s);
void AddEinsumSamples(SampleList& s);
void AddSegmentSamples(SampleList& s);
void AddComplexSamples(SampleList& s);
void AddVariableSamples(SampleList& s);
void AddTrainingSamples(SampleList& s);
void AddRandomSamples(SampleList& s);
void AddGatherSamples(SampleList& s);
void AddConcatSamples(SampleList& s);

// Uniform float64 values in [lo, hi]; deterministic for a seed.
Tensor RandomTensor(Shape shape, double lo, double hi, uint32_t seed);
// Like RandomTensor, with |x| >= margin (away from kinks at 0).
Tensor RandomAwayFromZero(Shape shape, double hi, double margin, uint32_t seed);

// Shorthands for sample files: uniform in [-1, 1]; in [0.5, 2]; an int list.
inline Tensor R(Shape shape, uint32_t seed) {
  return RandomTensor(shape, -1, 1, seed);
}
inline Tensor Positive(Shape shape, uint32_t seed) {
  return RandomTensor(shape, 0.5, 2.0, seed);
}
inline std::vector<int64_t> L(std::initializer_list<int64_t> v) { return v; }
// A resource handle (id 1) to a fresh variable named "sample" that holds
// `value`, as VarHandleOp's output would be.
Tensor VariableHandle(Tensor value);

}  // namespace gradtape::testing

#endif  // GRADTAPE_TESTS_CORE_OP_SAMPLES_H_
