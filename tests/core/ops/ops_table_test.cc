// docs/OPS.md is generated from the registry (what ListOps serves), one
// table per op family, and must be current, as docs/ELISION.md
// (elision_table_test.cc). Regenerate with:
//   GRADTAPE_UPDATE_DOCS=1 build/tests/core/gradtape_core_test
//       --gtest_filter='OpsTable.*'
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "gtest/gtest.h"

namespace gradtape {
namespace {

struct Family {
  const char* name;  // the heading, and the anchor OP_FAMILIES.md uses
  const char* register_fn;
  void (*add)(OpRegistry&);
};

// The families in RegisterAllOps' order (core/ops/ops.cc).
const std::vector<Family>& Families() {
  static const auto* families = new std::vector<Family>{
      {"unary", "RegisterUnaryOps", RegisterUnaryOps},
      {"binary", "RegisterBinaryOps", RegisterBinaryOps},
      {"comparison", "RegisterComparisonOps", RegisterComparisonOps},
      {"reduction", "RegisterReductionOps", RegisterReductionOps},
      {"scan", "RegisterScanOps", RegisterScanOps},
      {"array", "RegisterArrayOps", RegisterArrayOps},
      {"slice", "RegisterSliceOps", RegisterSliceOps},
      {"layout", "RegisterLayoutOps", RegisterLayoutOps},
      {"nn", "RegisterNnOps", RegisterNnOps},
      {"conv", "RegisterConvOps", RegisterConvOps},
      {"pool", "RegisterPoolOps", RegisterPoolOps},
      {"norm", "RegisterNormOps", RegisterNormOps},
      {"linalg", "RegisterLinalgOps", RegisterLinalgOps},
      {"einsum", "RegisterEinsumOps", RegisterEinsumOps},
      {"segment", "RegisterSegmentOps", RegisterSegmentOps},
      {"complex", "RegisterComplexOps", RegisterComplexOps},
      {"variable", "RegisterVariableOps", RegisterVariableOps},
      {"training", "RegisterTrainingOps", RegisterTrainingOps},
      {"random", "RegisterRandomOps", RegisterRandomOps},
      {"gather", "RegisterGatherOps", RegisterGatherOps},
      {"concat", "RegisterConcatOps", RegisterConcatOps},
  };
  return *families;
}

// The names of a family's ops, in registration order.
std::vector<std::string> FamilyOps(const Family& family) {
  OpRegistry registry;
  family.add(registry);
  std::vector<std::string> names;
  for (const auto& op : registry.ops()) names.push_back(op->name);
  return names;
}

// A table cell: no '|' or newline may break the row.
std::string Cell(const std::string& text) {
  return absl::StrReplaceAll(text, {{"|", "\\|"}, {"\n", " "}});
}

std::string Input(const OpDef& op, int i) {
  std::string s = absl::StrCat("`", op.input_names[i], "`");
  if (op.list_input.present() && op.list_input.index == i) {
    absl::StrAppend(&s, " (list of `", op.list_input.attr, "`, at least ",
                    op.list_input.min_length, ")");
  }
  if (op.input_kinds[i] == OpDef::InputKind::kHandle) {
    absl::StrAppend(&s, " (variable handle)");
  } else if (op.input_kinds[i] == OpDef::InputKind::kAny) {
    absl::StrAppend(&s, " (handle or value)");
  }
  if (op.differentiable() && !op.input_differentiable[i]) {
    absl::StrAppend(&s, " (no gradient)");
  }
  return s;
}

std::string Inputs(const OpDef& op) {
  std::vector<std::string> parts;
  for (int i = 0; i < op.num_inputs(); ++i) parts.push_back(Input(op, i));
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

std::string Outputs(const OpDef& op) {
  std::vector<std::string> parts;
  for (int i = 0; i < op.num_outputs(); ++i) {
    std::string s = absl::StrCat("`", op.output_names[i], "`");
    if (op.list_output.present()) {
      absl::StrAppend(&s, " (list of `", op.list_output.attr, "`)");
    }
    absl::StrAppend(&s, ": ", op.output_dtypes[i].DebugString());
    parts.push_back(std::move(s));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

std::string Attrs(const OpDef& op) {
  std::vector<std::string> parts;
  for (const AttrSpec& a : op.attrs) {
    std::string s = absl::StrCat("`", a.name, "`: ", AttrTypeName(a.type));
    absl::StrAppend(&s,
                    a.default_value.has_value()
                        ? absl::StrCat(" = ", AttrValueString(*a.default_value))
                        : " (required)");
    parts.push_back(std::move(s));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

std::string Indices(const char* what, const std::vector<int>& indices,
                    const std::vector<std::string>& names) {
  std::vector<std::string> parts;
  for (int i : indices) parts.push_back(absl::StrCat(i, " `", names[i], "`"));
  return absl::StrCat(what, " ", absl::StrJoin(parts, ", "));
}

// What the tape keeps for the backward: the elision declaration.
std::string Kept(const OpDef& op) {
  if (!op.backward_supported()) return "-";
  std::vector<std::string> parts;
  if (!op.saved_inputs.empty()) {
    parts.push_back(Indices("inputs", op.saved_inputs, op.input_names));
  }
  if (!op.saved_outputs.empty()) {
    parts.push_back(Indices("outputs", op.saved_outputs, op.output_names));
  }
  return parts.empty() ? "nothing" : absl::StrJoin(parts, "; ");
}

std::string Gradient(const OpDef& op) {
  if (!op.differentiable()) return "none (not recorded)";
  if (!op.backward_supported()) {
    return absl::StrCat("unsupported: ", op.backward_unsupported);
  }
  return op.jvp ? "backward, JVP rule" : "backward (JVP: double-VJP)";
}

std::string Row(const OpDef& op) {
  return absl::StrCat("| ", op.name, " | ", Cell(Inputs(op)), " | ",
                      Cell(Outputs(op)), " | ", Cell(Attrs(op)), " | ",
                      Cell(Kept(op)), " | ", Cell(Gradient(op)), " | ",
                      Cell(op.summary), " |\n");
}

std::string Header() {
  std::ostringstream out;
  out << "# Ops\n\n"
      << "Generated from the op registry (the data `ListOps` serves) by\n"
      << "`tests/core/ops/ops_table_test.cc`, which fails when this file is\n"
      << "stale. Regenerate: `GRADTAPE_UPDATE_DOCS=1 "
         "build/tests/core/gradtape_core_test --gtest_filter='OpsTable.*'`.\n\n"
      << "One table per op family (a `Register...Ops` function in "
         "`core/ops/`), ops in registration order. Per op: its inputs "
         "(marked when an input is a list, a variable handle, or gets no "
         "gradient), its outputs with how each output's dtype follows from "
         "the inputs and attrs, its attrs with type and default, what the "
         "tape keeps for the backward (the elision registry; "
         "[ELISION.md](ELISION.md) compares it with TensorFlow's two "
         "hand-written sets), whether it has a gradient (and a forward-mode "
         "rule, or the double-VJP fallback) and its one-line summary.\n\n"
      << "The registry does not declare the input dtypes an op accepts (each "
         "kernel checks them) nor where an op departs from TensorFlow: "
         "[OP_FAMILIES.md](OP_FAMILIES.md) gives both, per family, with the "
         "layouts and TensorFlow conventions the family follows.\n\n";
  return out.str();
}

std::string RenderOps() {
  std::ostringstream out;
  out << Header();
  std::vector<std::string> index;
  for (const Family& f : Families()) {
    index.push_back(absl::StrCat("[", f.name, "](#", f.name, ") (",
                                 FamilyOps(f).size(), ")"));
  }
  out << DefaultRegistry().ops().size()
      << " ops: " << absl::StrJoin(index, ", ") << ".\n";
  for (const Family& f : Families()) {
    out << "\n## " << f.name << "\n\n`" << f.register_fn << "`\n\n"
        << "| op | inputs | outputs: dtype | attrs | tape keeps | gradient | "
           "summary |\n"
        << "|---|---|---|---|---|---|---|\n";
    for (const std::string& name : FamilyOps(f)) {
      out << Row(*DefaultRegistry().Find(name));
    }
  }
  return out.str();
}

std::string DocPath() {
  return std::string(GRADTAPE_SOURCE_DIR) + "/docs/OPS.md";
}

TEST(OpsTable, EveryOpIsInExactlyOneFamily) {
  std::vector<std::string> listed;
  for (const Family& f : Families()) {
    for (std::string& name : FamilyOps(f)) listed.push_back(std::move(name));
  }
  std::vector<std::string> registered;
  for (const auto& op : DefaultRegistry().ops()) {
    registered.push_back(op->name);
  }
  // RegisterAllOps calls the families in this order, so the lists match
  // exactly, and a family missing here (or added there) fails.
  EXPECT_EQ(listed, registered);
}

TEST(OpsTable, DocsAreCurrent) {
  const std::string table = RenderOps();
  if (std::getenv("GRADTAPE_UPDATE_DOCS") != nullptr) {
    std::ofstream(DocPath()) << table;
  }
  std::ifstream in(DocPath());
  std::stringstream current;
  current << in.rdbuf();
  EXPECT_EQ(current.str(), table)
      << "docs/OPS.md is stale; regenerate it (see the top of "
      << "tests/core/ops/ops_table_test.cc)";
}

TEST(OpsTable, RowsShowTheRegistration) {
  // Spot checks that the table says what the registration says.
  EXPECT_EQ(Kept(*DefaultRegistry().Find("Exp")), "outputs 0 `y`");
  const std::string matmul = Attrs(*DefaultRegistry().Find("MatMul"));
  EXPECT_NE(matmul.find("`transpose_a`: bool = false"), std::string::npos)
      << matmul;
  EXPECT_EQ(Gradient(*DefaultRegistry().Find("Equal")), "none (not recorded)");
  const std::string concat = Inputs(*DefaultRegistry().Find("ConcatV2"));
  EXPECT_NE(concat.find("(list of `N`"), std::string::npos) << concat;
  const std::string read = Inputs(*DefaultRegistry().Find("ReadVariableOp"));
  EXPECT_NE(read.find("(variable handle)"), std::string::npos) << read;
}

}  // namespace
}  // namespace gradtape
