// docs/ELISION.md is generated from the registry (what ListOps serves) and
// must be current. Regenerate with:
//   GRADTAPE_UPDATE_DOCS=1 build/tests/core/gradtape_core_test
//       --gtest_filter='ElisionTable.*'
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"

namespace gradtape {
namespace {

// TensorFlow's "Record gradient in C" change: the two hand-written sets.
const absl::flat_hash_set<std::string>& SeedNoOutputs() {
  static const auto* set =
      new absl::flat_hash_set<std::string>{"Identity",
                                           "MatMul",
                                           "Conv2DBackpropInput",
                                           "Conv2DBackpropFilter",
                                           "Conv3D",
                                           "Conv3DBackpropInputV2",
                                           "AvgPool3D",
                                           "AvgPool3DGrad",
                                           "MaxPool3D",
                                           "MaxPool3DGrad",
                                           "MaxPool3DGradGrad",
                                           "BiasAdd",
                                           "BiasAddV1",
                                           "BiasAddGrad",
                                           "Relu6",
                                           "Softplus",
                                           "SoftplusGrad",
                                           "Softsign",
                                           "ReluGrad",
                                           "Conv2D",
                                           "DepthwiseConv2dNative",
                                           "Dilation2D",
                                           "AvgPool",
                                           "AvgPoolGrad",
                                           "BatchNormWithGlobalNormalization",
                                           "L2Loss",
                                           "Sum",
                                           "Prod",
                                           "SegmentSum",
                                           "SegmentMean",
                                           "SparseSegmentSum",
                                           "SparseSegmentMean",
                                           "SparseSegmentSqrtN",
                                           "SegmentMin",
                                           "SegmentMax",
                                           "UnsortedSegmentSum",
                                           "UnsortedSegmentMax",
                                           "Abs",
                                           "Neg",
                                           "ReciprocalGrad",
                                           "Square",
                                           "Expm1",
                                           "Log",
                                           "Log1p",
                                           "TanhGrad",
                                           "SigmoidGrad",
                                           "Sign",
                                           "Sin",
                                           "Cos",
                                           "Tan",
                                           "Add",
                                           "Sub",
                                           "Mul",
                                           "Div",
                                           "RealDiv",
                                           "Maximum",
                                           "Minimum",
                                           "SquaredDifference",
                                           "Select",
                                           "SparseMatMul",
                                           "BatchMatMul",
                                           "Complex",
                                           "Real",
                                           "Imag",
                                           "Angle",
                                           "Conj",
                                           "Cast",
                                           "Cross",
                                           "Cumsum",
                                           "Cumprod",
                                           "ReadVariableOp",
                                           "VarHandleOp",
                                           "Shape"};
  return *set;
}
const absl::flat_hash_set<std::string>& SeedNoInputs() {
  static const auto* set = new absl::flat_hash_set<std::string>{
      "Identity",
      "Softmax",
      "LogSoftmax",
      "BiasAdd",
      "Relu",
      "Elu",
      "Selu",
      "SparseSoftmaxCrossEntropyWithLogits",
      "Neg",
      "Inv",
      "Reciprocal",
      "Sqrt",
      "Exp",
      "Tanh",
      "Sigmoid",
      "Real",
      "Imag",
      "Conj",
      "ReadVariableOp",
      "VarHandleOp",
      "Shape"};
  return *set;
}

std::string Kept(const std::vector<int>& indices,
                 const std::vector<std::string>& names) {
  if (indices.empty()) return "-";
  std::vector<std::string> parts;
  for (int i : indices) parts.push_back(absl::StrCat(i, " ", names[i]));
  return absl::StrJoin(parts, ", ");
}

// How gradtape's declaration compares with what the seed's sets implied
// (an op in neither set kept every input and output).
std::string Compare(const OpDef& op) {
  if (!op.differentiable()) return "not differentiable: nothing kept";
  if (!op.backward_supported()) {
    return "recorded, gradient unsupported (an error): nothing kept";
  }
  const bool no_out = SeedNoOutputs().contains(op.name);
  const bool no_in = SeedNoInputs().contains(op.name);
  std::vector<std::string> notes;
  if (no_out && !op.saved_outputs.empty()) {
    notes.push_back("**seed wrong**: the backward reads outputs");
  }
  if (no_in && !op.saved_inputs.empty()) {
    notes.push_back(op.name == "SparseSoftmaxCrossEntropyWithLogits"
                        ? "keeps more: the int labels, for the second-order "
                          "term"
                        : "**seed wrong**: the backward reads inputs");
  }
  if (!no_in && static_cast<int>(op.saved_inputs.size()) < op.num_inputs()) {
    notes.push_back(absl::StrCat("finer: ", op.saved_inputs.size(), " of ",
                                 op.num_inputs(), " inputs"));
  }
  if (!no_out && static_cast<int>(op.saved_outputs.size()) < op.num_outputs()) {
    notes.push_back(absl::StrCat("finer: ", op.saved_outputs.size(), " of ",
                                 op.num_outputs(), " outputs"));
  }
  if (!no_out && !no_in) {
    notes.insert(notes.begin(), "not in the seed's sets");
  }
  return notes.empty() ? "same as the seed" : absl::StrJoin(notes, "; ");
}

std::string RenderTable() {
  std::ostringstream out;
  out << "# What the tape keeps, per op\n\n"
      << "Generated from the op registry (the data `ListOps` serves) by\n"
      << "`tests/core/ops/elision_table_test.cc`, which fails when this file "
         "is\n"
      << "stale. Regenerate: `GRADTAPE_UPDATE_DOCS=1 "
         "build/tests/core/gradtape_core_test --gtest_filter='ElisionTable.*'`"
      << ".\n\n"
      << "\"Seed\" is TensorFlow's \"Record gradient in C\" change: one set "
         "of ops whose backward needs no outputs, one of ops whose backward "
         "needs no inputs; an op in neither set kept everything. gradtape "
         "declares kept inputs and outputs per index where the backward is "
         "written; `tests/core/ops/elision_test.cc` checks each declaration is "
         "sufficient (the backward runs on exactly the kept tensors) and "
         "minimal (spoiling any kept tensor changes the gradient).\n\n"
      << "| op | inputs kept | outputs kept | seed: no outputs | seed: no "
         "inputs | compared with the seed |\n"
      << "|---|---|---|---|---|---|\n";
  std::vector<const OpDef*> ops;
  for (const auto& op : DefaultRegistry().ops()) ops.push_back(op.get());
  std::sort(ops.begin(), ops.end(),
            [](const OpDef* a, const OpDef* b) { return a->name < b->name; });
  for (const OpDef* op : ops) {
    out << "| " << op->name << " | " << Kept(op->saved_inputs, op->input_names)
        << " | " << Kept(op->saved_outputs, op->output_names) << " | "
        << (SeedNoOutputs().contains(op->name) ? "yes" : "") << " | "
        << (SeedNoInputs().contains(op->name) ? "yes" : "") << " | "
        << Compare(*op) << " |\n";
  }
  return out.str();
}

std::string DocPath() {
  return std::string(GRADTAPE_SOURCE_DIR) + "/docs/ELISION.md";
}

TEST(ElisionTable, DocsAreCurrent) {
  const std::string table = RenderTable();
  if (std::getenv("GRADTAPE_UPDATE_DOCS") != nullptr) {
    std::ofstream(DocPath()) << table;
  }
  std::ifstream in(DocPath());
  std::stringstream current;
  current << in.rdbuf();
  EXPECT_EQ(current.str(), table)
      << "docs/ELISION.md is stale; regenerate it (see the top of "
      << "tests/core/ops/elision_table_test.cc)";
}

TEST(ElisionTable, EverySeedOpIsRegistered) {
  for (const auto* set : {&SeedNoOutputs(), &SeedNoInputs()}) {
    for (const std::string& name : *set) {
      EXPECT_NE(DefaultRegistry().Find(name), nullptr) << name;
    }
  }
}

TEST(ElisionTable, SeedMistakeOnSegmentMinMaxIsShown) {
  for (const char* name : {"SegmentMin", "SegmentMax"}) {
    const OpDef* op = DefaultRegistry().Find(name);
    ASSERT_NE(op, nullptr);
    EXPECT_EQ(op->saved_outputs, std::vector<int>{0}) << name;
    EXPECT_NE(Compare(*op).find("seed wrong"), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace gradtape
