#include "core/registry/op_registry.h"

#include <cstdio>
#include <cstdlib>

#include "core/base/status_macros.h"

namespace gradtape {
namespace {

[[noreturn]] void RegistrationError(const std::string& op,
                                    const std::string& what) {
  std::fprintf(stderr, "gradtape: bad registration of op %s: %s\n", op.c_str(),
               what.c_str());
  std::abort();
}

// One rule per output: the declared one or input 0's dtype. Aborts on a
// rule that can never apply (no such input, no such type attr).
void CheckDTypeRule(const OpDef& def, const DTypeRule& rule) {
  switch (rule.kind) {
    case DTypeRule::Kind::kSameAsInput:
    case DTypeRule::Kind::kRealOfInput:
    case DTypeRule::Kind::kComplexOfInput:
      if (rule.input < 0 || rule.input >= def.num_inputs()) {
        RegistrationError(def.name,
                          absl::StrCat("OutputDType: ", rule.DebugString(),
                                       ": no such input"));
      }
      break;
    case DTypeRule::Kind::kFromAttr: {
      const AttrSpec* spec = def.FindAttr(rule.attr);
      if (spec == nullptr || spec->type != AttrType::kType) {
        RegistrationError(
            def.name, absl::StrCat("OutputDType: no type attr ", rule.attr));
      }
      break;
    }
    case DTypeRule::Kind::kFixed:
      if (rule.dtype == DType::kInvalid) {
        RegistrationError(def.name, "OutputDType: Fixed(kInvalid)");
      }
      break;
  }
}

// `per_output` (Op::OutputDTypes), when given, has one rule per output.
std::vector<DTypeRule> OutputDTypes(
    const OpDef& def, const std::optional<DTypeRule>& declared,
    const std::optional<std::vector<DTypeRule>>& per_output) {
  if (per_output.has_value()) {
    if (declared.has_value() ||
        static_cast<int>(per_output->size()) != def.num_outputs()) {
      RegistrationError(def.name,
                        "OutputDTypes: one rule per output, and no "
                        "OutputDType beside it");
    }
    for (const DTypeRule& rule : *per_output) CheckDTypeRule(def, rule);
    return *per_output;
  }
  if (!declared.has_value() && def.num_inputs() == 0 && def.num_outputs() > 0) {
    RegistrationError(def.name, "no inputs: declare its OutputDType");
  }
  const DTypeRule rule = declared.value_or(DTypeRule::SameAsInput(0));
  CheckDTypeRule(def, rule);
  return std::vector<DTypeRule>(def.num_outputs(), rule);
}

// The flat position of declared input p when the list input has n elements.
int FlatInput(const OpDef& def, int p, int n) {
  if (!def.list_input.present() || p <= def.list_input.index) return p;
  return p + n - 1;
}

absl::StatusOr<int> ListLength(const OpDef& def, const ListArg& list,
                               const AttrMap& attrs) {
  const AttrValue* value = attrs.Find(list.attr);
  const int64_t* n = value == nullptr ? nullptr : std::get_if<int64_t>(value);
  if (n == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        def.name, ": required attr '", list.attr, "' (int) is missing"));
  }
  if (*n < list.min_length || *n > OpDef::kMaxListLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        def.name, ": attr '", list.attr, "' (a list length) must be in [",
        list.min_length, ", ", OpDef::kMaxListLength, "], got ", *n));
  }
  return static_cast<int>(*n);
}

// Rewrites the per-input vectors of `inst` (a copy of `def`) for a list
// input of n elements.
void ExpandInputs(const OpDef& def, int n, OpDef* inst) {
  inst->input_names.clear();
  inst->input_saved.clear();
  inst->input_differentiable.clear();
  inst->input_kinds.clear();
  inst->saved_inputs.clear();
  for (int p = 0; p < def.num_inputs(); ++p) {
    const bool list = def.list_input.present() && p == def.list_input.index;
    for (int k = 0; k < (list ? n : 1); ++k) {
      if (def.input_saved[p]) {
        inst->saved_inputs.push_back(inst->num_inputs());
      }
      inst->input_names.push_back(
          list ? absl::StrCat(def.input_names[p], "_", k) : def.input_names[p]);
      inst->input_saved.push_back(def.input_saved[p]);
      inst->input_differentiable.push_back(def.input_differentiable[p]);
      inst->input_kinds.push_back(def.input_kinds[p]);
    }
  }
}

// Same for the outputs: m of them for a list output; the dtype rules'
// inputs move to their flat positions.
void ExpandOutputs(const OpDef& def, int n, int m, OpDef* inst) {
  if (def.list_output.present()) {
    inst->output_names.clear();
    inst->output_saved.assign(m, def.output_saved[0]);
    inst->output_dtypes.assign(m, def.output_dtypes[0]);
    inst->saved_outputs.clear();
    for (int k = 0; k < m; ++k) {
      inst->output_names.push_back(absl::StrCat(def.output_names[0], "_", k));
      if (def.output_saved[0]) inst->saved_outputs.push_back(k);
    }
  }
  for (DTypeRule& rule : inst->output_dtypes) {
    rule.input = FlatInput(def, rule.input, n);
  }
}

// Aborts on a list declaration that cannot work (no such input or int attr,
// a list output on an op with several declared outputs).
void CheckLists(const OpDef& def) {
  auto check_attr = [&](const ListArg& list) {
    const AttrSpec* spec = def.FindAttr(list.attr);
    if (spec == nullptr || spec->type != AttrType::kInt) {
      RegistrationError(def.name, absl::StrCat("list length attr '", list.attr,
                                               "' is not an int attr"));
    }
  };
  if (def.list_input.present()) {
    check_attr(def.list_input);
    if (def.list_input.index < 0 || def.list_input.index >= def.num_inputs() ||
        def.list_input.min_length < 1) {
      RegistrationError(def.name, "ListInput: no such input, or min < 1");
    }
  }
  if (def.list_output.present()) {
    check_attr(def.list_output);
    if (def.num_outputs() != 1 || def.list_output.min_length < 0) {
      RegistrationError(def.name, "ListOutput: needs exactly one output");
    }
  }
}

}  // namespace

absl::StatusOr<OpDef::Arity> OpDef::FlatArity(const AttrMap& given) const {
  Arity arity{num_inputs(), num_outputs()};
  if (!has_lists()) return arity;  // no copy of the attrs
  AttrMap attrs = given;
  RETURN_IF_ERROR(ResolveAttrs(&attrs));
  if (list_input.present()) {
    ASSIGN_OR_RETURN(int n, ListLength(*this, list_input, attrs));
    arity.inputs += n - 1;
  }
  if (list_output.present()) {
    ASSIGN_OR_RETURN(arity.outputs, ListLength(*this, list_output, attrs));
  }
  return arity;
}

absl::StatusOr<std::shared_ptr<const OpDef>> OpDef::Instantiate(
    const AttrMap& attrs, int given_inputs) const {
  if (!has_lists()) {
    return std::shared_ptr<const OpDef>(std::shared_ptr<const OpDef>(), this);
  }
  ASSIGN_OR_RETURN(Arity arity, FlatArity(attrs));
  if (given_inputs != arity.inputs) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": takes ", arity.inputs, " inputs (",
        list_input.present() ? absl::StrCat("attr '", list_input.attr, "' = ",
                                            arity.inputs - num_inputs() + 1,
                                            " ", input_names[list_input.index])
                             : "no list input",
        "), got ", given_inputs));
  }
  auto inst = std::make_shared<OpDef>(*this);
  const int n = arity.inputs - num_inputs() + 1;
  if (list_input.present()) ExpandInputs(*this, n, inst.get());
  ExpandOutputs(*this, n, arity.outputs, inst.get());
  inst->list_input = ListArg();
  inst->list_output = ListArg();
  return std::shared_ptr<const OpDef>(std::move(inst));
}

DType DTypeRule::Apply(absl::Span<const DType> input_dtypes,
                       const AttrMap& attrs) const {
  const bool has_input =
      input >= 0 && input < static_cast<int>(input_dtypes.size());
  switch (kind) {
    case Kind::kSameAsInput:
      return has_input ? input_dtypes[input] : DType::kInvalid;
    case Kind::kFromAttr: {
      const AttrValue* value = attrs.Find(attr);
      const DType* d = value == nullptr ? nullptr : std::get_if<DType>(value);
      return d == nullptr ? DType::kInvalid : *d;
    }
    case Kind::kFixed:
      return dtype;
    case Kind::kRealOfInput:
      return has_input ? RealDType(input_dtypes[input]) : DType::kInvalid;
    case Kind::kComplexOfInput:
      return has_input ? ComplexDType(input_dtypes[input]) : DType::kInvalid;
  }
  return DType::kInvalid;
}

std::string DTypeRule::DebugString() const {
  switch (kind) {
    case Kind::kSameAsInput:
      return absl::StrCat("same as input ", input);
    case Kind::kFromAttr:
      return absl::StrCat("attr ", attr);
    case Kind::kFixed:
      return std::string(DTypeName(dtype));
    case Kind::kRealOfInput:
      return absl::StrCat("real of input ", input);
    case Kind::kComplexOfInput:
      return absl::StrCat("complex of input ", input);
  }
  return "?";
}

KernelContext::KernelContext(const OpDef& op, absl::Span<const Tensor> inputs,
                             const AttrMap& attrs, Tensors* outputs)
    : op_(op), inputs_(inputs), attrs_(attrs), outputs_(outputs) {}

absl::string_view KernelContext::OpName() const { return op_.name; }

std::string KernelContext::InputName(int i) const {
  return absl::StrCat("input ", i, " (", op_.input_names[i], ")");
}

absl::Status KernelContext::Annotate(const absl::Status& status) const {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(OpName(), ": ", status.message()));
}

absl::Status KernelContext::RequireFloat(int i) const {
  if (IsFloating(input(i).dtype())) return absl::OkStatus();
  return InvalidArgument(InputName(i), " must be float32 or float64, got ",
                         input(i).DebugString());
}

absl::Status KernelContext::RequireNumeric(int i) const {
  if (input(i).dtype() != DType::kBool) return absl::OkStatus();
  return InvalidArgument(InputName(i), " must be numeric, got ",
                         input(i).DebugString());
}

absl::Status KernelContext::RequireSameDType(int i, int j) const {
  if (input(i).dtype() == input(j).dtype()) return absl::OkStatus();
  return InvalidArgument(
      InputName(i), " and ", InputName(j), " must have the same dtype, got ",
      input(i).DebugString(), " and ", input(j).DebugString());
}

absl::Status KernelContext::RequireRank(int i, int rank) const {
  if (input(i).rank() == rank) return absl::OkStatus();
  return InvalidArgument(InputName(i), " must have rank ", rank, ", got shape ",
                         ShapeString(input(i).shape()));
}

absl::Status KernelContext::RequireIndexDType(int i) const {
  DType d = input(i).dtype();
  if (d == DType::kInt32 || d == DType::kInt64) return absl::OkStatus();
  return InvalidArgument(InputName(i), " must be int32 or int64, got ",
                         input(i).DebugString());
}

const AttrSpec* OpDef::FindAttr(absl::string_view attr_name) const {
  for (const AttrSpec& spec : attrs) {
    if (spec.name == attr_name) return &spec;
  }
  return nullptr;
}

absl::Status OpDef::ResolveAttrs(AttrMap* given) const {
  for (const auto& [attr_name, value] : *given) {
    const AttrSpec* spec = FindAttr(attr_name);
    if (spec == nullptr) {
      std::string known;
      for (const AttrSpec& s : attrs) absl::StrAppend(&known, " ", s.name);
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": unknown attr '", attr_name,
                       "' (known:", known.empty() ? " none" : known, ")"));
    }
    if (TypeOf(value) != spec->type) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": attr '", attr_name, "' must be ", AttrTypeName(spec->type),
          ", got ", AttrTypeName(TypeOf(value)), " ", AttrValueString(value)));
    }
    if (const DType* dtype = std::get_if<DType>(&value);
        dtype != nullptr && *dtype == DType::kResource) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": attr '", attr_name,
          "' cannot be resource: variable handles are made by VarHandleOp "
          "and read with ReadVariableOp"));
    }
  }
  if (given->size() == attrs.size()) return absl::OkStatus();
  for (const AttrSpec& spec : attrs) {
    if (given->Find(spec.name) != nullptr) continue;
    if (!spec.default_value.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": required attr '", spec.name, "' (",
                       AttrTypeName(spec.type), ") is missing"));
    }
    given->Set(spec.name, *spec.default_value);
  }
  return absl::OkStatus();
}

absl::Status OpDef::CheckInputKinds(absl::Span<const Tensor> inputs) const {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool handle = inputs[i].dtype() == DType::kResource;
    const InputKind kind = input_kinds[i];
    if (kind == InputKind::kAny || handle == (kind == InputKind::kHandle)) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": input ", i, " (", input_names[i], ") ",
        handle ? "is a variable handle; read its value with ReadVariableOp "
                 "first"
               : absl::StrCat("must be a variable handle (VarHandleOp's "
                              "output), got ",
                              inputs[i].DebugString())));
  }
  return absl::OkStatus();
}

Op::Op(std::string name) { def_.name = std::move(name); }

Op& Op::Inputs(std::vector<std::string> names) {
  def_.input_names = std::move(names);
  return *this;
}

Op& Op::Outputs(std::vector<std::string> names) {
  def_.output_names = std::move(names);
  return *this;
}

Op& Op::Attr(std::string name, AttrType type) {
  def_.attrs.push_back({std::move(name), type, std::nullopt});
  return *this;
}

Op& Op::Attr(std::string name, AttrValue default_value) {
  AttrType type = TypeOf(default_value);
  def_.attrs.push_back({std::move(name), type, std::move(default_value)});
  return *this;
}

Op& Op::OutputDType(DTypeRule rule) {
  output_dtype_ = std::move(rule);
  return *this;
}

Op& Op::OutputDTypes(std::vector<DTypeRule> rules) {
  output_dtypes_ = std::move(rules);
  return *this;
}

Op& Op::Forward(ForwardFn fn) {
  def_.forward = std::move(fn);
  return *this;
}

Op& Op::Backward(BackwardFn fn) {
  def_.backward = std::move(fn);
  declared_backward_ = true;
  return *this;
}

Op& Op::SavesInputs(std::vector<int> indices) {
  def_.saved_inputs = std::move(indices);
  return *this;
}

Op& Op::SavesOutputs(std::vector<int> indices) {
  def_.saved_outputs = std::move(indices);
  return *this;
}

Op& Op::NonDifferentiableInputs(std::vector<int> indices) {
  non_differentiable_inputs_ = std::move(indices);
  return *this;
}

Op& Op::ResourceInputs(std::vector<int> indices) {
  resource_inputs_ = std::move(indices);
  return *this;
}

Op& Op::AnyKindInputs(std::vector<int> indices) {
  any_kind_inputs_ = std::move(indices);
  return *this;
}

Op& Op::NotDifferentiable() {
  declared_not_differentiable_ = true;
  return *this;
}

Op& Op::BackwardUnsupported(std::string reason) {
  if (reason.empty())
    RegistrationError(def_.name, "empty BackwardUnsupported reason");
  def_.backward_unsupported = reason;
  return *this;
}

Op& Op::Jvp(JvpFn fn) {
  def_.jvp = std::move(fn);
  return *this;
}

Op& Op::Summary(std::string text) {
  def_.summary = std::move(text);
  return *this;
}

Op& Op::ListInput(int index, std::string length_attr, int min_length) {
  def_.list_input = {index, std::move(length_attr), min_length};
  return *this;
}

Op& Op::ListOutput(std::string length_attr, int min_length) {
  def_.list_output = {0, std::move(length_attr), min_length};
  return *this;
}

void OpRegistry::Add(Op op) {
  auto def = std::make_unique<OpDef>(std::move(op.def_));
  const std::string& name = def->name;
  if (name.empty()) RegistrationError("<unnamed>", "empty name");
  if (by_name_.contains(name)) RegistrationError(name, "registered twice");
  if (!def->forward) RegistrationError(name, "no Forward");
  if (def->output_names.empty() && !op.declared_not_differentiable_) {
    RegistrationError(name, "a differentiable op needs outputs");
  }
  if (def->differentiable() == op.declared_not_differentiable_) {
    RegistrationError(name,
                      "declare exactly one of Backward or NotDifferentiable");
  }
  if (!def->backward_supported() &&
      (!def->saved_inputs.empty() || !def->saved_outputs.empty())) {
    RegistrationError(name, "saves tensors but has no Backward");
  }
  if (op.declared_backward_ && !def->backward_unsupported.empty()) {
    RegistrationError(name,
                      "declare at most one of Backward or BackwardUnsupported");
  }
  if (!def->differentiable() && def->jvp) {
    RegistrationError(name, "a Jvp rule on a NotDifferentiable op");
  }
  auto mark = [&](const std::vector<int>& indices, int n, const char* what,
                  std::vector<bool>* saved) {
    saved->assign(n, false);
    for (int i : indices) {
      if (i < 0 || i >= n) {
        RegistrationError(name, absl::StrCat("saved ", what, " index ", i,
                                             " out of range [0, ", n, ")"));
      }
      if ((*saved)[i]) {
        RegistrationError(name, absl::StrCat("saved ", what, " ", i, " twice"));
      }
      (*saved)[i] = true;
    }
  };
  mark(def->saved_inputs, def->num_inputs(), "input", &def->input_saved);
  mark(def->saved_outputs, def->num_outputs(), "output", &def->output_saved);
  def->input_differentiable.assign(def->num_inputs(), true);
  for (int i : op.non_differentiable_inputs_) {
    if (i < 0 || i >= def->num_inputs()) {
      RegistrationError(
          name, absl::StrCat("non-differentiable input ", i, " out of range"));
    }
    def->input_differentiable[i] = false;
  }
  def->input_kinds.assign(def->num_inputs(), OpDef::InputKind::kValue);
  auto mark_kind = [&](const std::vector<int>& indices, OpDef::InputKind kind) {
    for (int i : indices) {
      if (i < 0 || i >= def->num_inputs() ||
          def->input_kinds[i] != OpDef::InputKind::kValue) {
        RegistrationError(name, absl::StrCat("input kind of input ", i,
                                             " out of range or given twice"));
      }
      def->input_kinds[i] = kind;
    }
  };
  mark_kind(op.resource_inputs_, OpDef::InputKind::kHandle);
  mark_kind(op.any_kind_inputs_, OpDef::InputKind::kAny);
  def->output_dtypes = OutputDTypes(*def, op.output_dtype_, op.output_dtypes_);
  CheckLists(*def);
  def->index = static_cast<int>(ops_.size());
  by_name_[name] = def.get();
  ops_.push_back(std::move(def));
}

const OpDef* OpRegistry::Find(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

}  // namespace gradtape
