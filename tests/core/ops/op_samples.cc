#include "tests/core/ops/op_samples.h"

#include <memory>
#include <random>

#include "core/autodiff/op_executor.h"
#include "core/ops/ops.h"
#include "core/tensor/variable.h"

namespace gradtape::testing {

Tensor RandomTensor(Shape shape, double lo, double hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = Tensor::Empty(DType::kFloat64, shape).value();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    t.mutable_data<double>()[i] = dist(rng);
  }
  return t;
}

Tensor RandomAwayFromZero(Shape shape, double hi, double margin,
                          uint32_t seed) {
  Tensor t = RandomTensor(shape, margin, hi, seed);
  std::mt19937 rng(seed + 1);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (rng() % 2) t.mutable_data<double>()[i] *= -1;
  }
  return t;
}

void SampleList::Add(std::string op, std::string label,
                     std::vector<Tensor> inputs, AttrMap attrs) {
  samples_.push_back(
      {std::move(op), std::move(label), std::move(inputs), std::move(attrs)});
}

const std::vector<OpSample>& AllOpSamples() {
  static const std::vector<OpSample>* samples = [] {
    SampleList list;
    AddMathSamples(list);
    AddArraySamples(list);
    AddSliceSamples(list);
    AddLayoutSamples(list);
    AddNnSamples(list);
    AddConvSamples(list);
    AddPoolSamples(list);
    AddNormSamples(list);
    AddLinalgSamples(list);
    AddEinsumSamples(list);
    AddSegmentSamples(list);
    AddComplexSamples(list);
    AddVariableSamples(list);
    AddTrainingSamples(list);
    AddRandomSamples(list);
    AddGatherSamples(list);
    AddConcatSamples(list);
    return new std::vector<OpSample>(list.Take());
  }();
  return *samples;
}

std::shared_ptr<const OpDef> SampleOpDef(const OpSample& s) {
  const OpDef* op = DefaultRegistry().Find(s.op);
  if (op == nullptr) return nullptr;
  AttrMap attrs = s.attrs;
  if (!op->ResolveAttrs(&attrs).ok()) return nullptr;
  absl::StatusOr<std::shared_ptr<const OpDef>> inst =
      op->Instantiate(attrs, static_cast<int>(s.inputs.size()));
  return inst.ok() ? *inst : nullptr;
}

OpSample ChannelsFirstTwin(const OpSample& sample,
                           const std::vector<int>& activations) {
  const int rank = sample.inputs[activations.front()].rank();
  // NHWC -> NCHW: dim i of the twin is dim to_first[i] of the sample.
  std::vector<int64_t> to_first{0, rank - 1};
  for (int i = 1; i < rank - 1; ++i) to_first.push_back(i);
  OpSample twin = sample;
  twin.label += rank == 5 ? ", as NCDHW" : ", as NCHW";
  twin.attrs.Set("data_format", std::string(rank == 5 ? "NCDHW" : "NCHW"));
  for (int i : activations) {
    OpExecutor executor(DefaultRegistry());
    Tensors out;
    if (!executor
             .Execute("Transpose", {sample.inputs[i]}, {{"perm", to_first}},
                      &out)
             .ok()) {
      return OpSample{};  // an empty op name fails the sample's checks
    }
    twin.inputs[i] = out[0];
  }
  auto permute = [&](const char* name, int per_dim) {
    const AttrValue* v = sample.attrs.Find(name);
    if (v == nullptr) return;
    const auto& list = std::get<std::vector<int64_t>>(*v);
    if (list.size() != to_first.size() * per_dim) return;  // e.g. empty
    std::vector<int64_t> permuted;
    for (int64_t d : to_first) {
      for (int j = 0; j < per_dim; ++j) {
        permuted.push_back(list[d * per_dim + j]);
      }
    }
    twin.attrs.Set(name, std::move(permuted));
  };
  for (const char* name :
       {"strides", "ksize", "dilations", "input_sizes", "orig_input_shape"}) {
    permute(name, 1);
  }
  permute("explicit_paddings", 2);
  return twin;
}

void AddWithChannelsFirstTwins(
    SampleList& s, SampleList channels_last,
    const std::function<std::vector<int>(const std::string&)>& activations) {
  for (OpSample& x : channels_last.Take()) {
    OpSample twin = ChannelsFirstTwin(x, activations(x.op));
    s.Add(std::move(x.op), std::move(x.label), std::move(x.inputs),
          std::move(x.attrs));
    s.Add(std::move(twin.op), std::move(twin.label), std::move(twin.inputs),
          std::move(twin.attrs));
  }
}

Tensor VariableHandle(Tensor value) {
  auto var = std::make_shared<Variable>();
  var->dtype = value.dtype();
  var->shape = value.shape();
  var->name = "sample";
  var->value = std::move(value);
  return Tensor::Resource(std::move(var), 1).value();
}

}  // namespace gradtape::testing
