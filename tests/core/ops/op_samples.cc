#include "tests/core/ops/op_samples.h"

#include <memory>
#include <random>

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

Tensor VariableHandle(Tensor value) {
  auto var = std::make_shared<Variable>();
  var->dtype = value.dtype();
  var->shape = value.shape();
  var->name = "sample";
  var->value = std::move(value);
  return Tensor::Resource(std::move(var), 1).value();
}

}  // namespace gradtape::testing
