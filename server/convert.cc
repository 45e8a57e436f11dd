#include "server/convert.h"

#include <algorithm>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace gradtape::server {

// Core's DType is the proto's enum under C++ names (tape_service.proto is
// the one table): the same numbers, and every proto dtype has a core one.
static_assert(static_cast<int>(DType::kFloat32) == v1::DTYPE_FLOAT32 &&
              static_cast<int>(DType::kFloat64) == v1::DTYPE_FLOAT64 &&
              static_cast<int>(DType::kInt32) == v1::DTYPE_INT32 &&
              static_cast<int>(DType::kInt64) == v1::DTYPE_INT64 &&
              static_cast<int>(DType::kBool) == v1::DTYPE_BOOL &&
              static_cast<int>(DType::kComplex64) == v1::DTYPE_COMPLEX64 &&
              static_cast<int>(DType::kComplex128) == v1::DTYPE_COMPLEX128 &&
              static_cast<int>(DType::kResource) == v1::DTYPE_RESOURCE &&
              v1::DType_MAX == v1::DTYPE_RESOURCE);

absl::StatusOr<DType> FromProto(v1::DType dtype) {
  const int value = static_cast<int>(dtype);
  if (value == static_cast<int>(DType::kInvalid)) return DType::kInvalid;
  if (!IsValidDType(value)) {
    std::string known;
    for (int v = 0; v < 128; ++v) {
      if (!IsValidDType(v)) continue;
      absl::StrAppend(&known, known.empty() ? "" : ", ", v, " ",
                      DTypeName(static_cast<DType>(v)));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype ", value, " (known: ", known, ")"));
  }
  return static_cast<DType>(value);
}

v1::DType ToProto(DType dtype) {
  // Core and wire share the numbering (core/tensor/tensor.h).
  return static_cast<v1::DType>(static_cast<int>(dtype));
}

absl::Status ToProto(const Tensor& tensor, v1::TensorValue* out) {
  if (!tensor.valid() ||
      (tensor.num_bytes() > 0 && tensor.raw_data() == nullptr)) {
    return absl::InternalError(absl::StrCat(
        "the tensor ", tensor.DebugString(),
        " has no data to return (a server bug: please report it)"));
  }
  out->set_dtype(ToProto(tensor.dtype()));
  out->mutable_shape()->Assign(tensor.shape().begin(), tensor.shape().end());
  out->set_data(static_cast<const char*>(tensor.raw_data()),
                tensor.num_bytes());
  return absl::OkStatus();
}

absl::Status ToProto(const Session::TensorSlice& slice, v1::TensorChunk* out) {
  const Tensor& tensor = slice.tensor;
  if (!tensor.valid() || (slice.length > 0 && tensor.raw_data() == nullptr)) {
    return absl::InternalError(absl::StrCat(
        "the tensor ", tensor.DebugString(),
        " has no data to return (a server bug: please report it)"));
  }
  out->set_dtype(ToProto(tensor.dtype()));
  out->mutable_shape()->Assign(tensor.shape().begin(), tensor.shape().end());
  out->set_offset(slice.offset);
  out->set_total_bytes(static_cast<int64_t>(tensor.num_bytes()));
  out->set_data(static_cast<const char*>(tensor.raw_data()) + slice.offset,
                static_cast<size_t>(slice.length));
  return absl::OkStatus();
}

absl::StatusOr<AttrValue> FromProto(absl::string_view attr_name,
                                    const v1::AttrValue& value) {
  switch (value.value_case()) {
    case v1::AttrValue::kB:
      return AttrValue(value.b());
    case v1::AttrValue::kI:
      return AttrValue(static_cast<int64_t>(value.i()));
    case v1::AttrValue::kF:
      return AttrValue(value.f());
    case v1::AttrValue::kS:
      return AttrValue(value.s());
    case v1::AttrValue::kType: {
      absl::StatusOr<DType> dtype = FromProto(value.type());
      if (!dtype.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("attr '", attr_name, "': ", dtype.status().message()));
      }
      if (*dtype == DType::kInvalid) {
        return absl::InvalidArgumentError(
            absl::StrCat("attr '", attr_name, "': dtype is not set"));
      }
      return AttrValue(*dtype);
    }
    case v1::AttrValue::kInts:
      return AttrValue(std::vector<int64_t>(value.ints().values().begin(),
                                            value.ints().values().end()));
    case v1::AttrValue::VALUE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("attr '", attr_name, "' has no value set"));
}

void ToProto(const AttrValue& value, v1::AttrValue* out) {
  std::visit(
      [out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          out->set_b(v);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          out->set_i(v);
        } else if constexpr (std::is_same_v<T, double>) {
          out->set_f(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          out->set_s(v);
        } else if constexpr (std::is_same_v<T, DType>) {
          out->set_type(ToProto(v));
        } else {
          static_assert(std::is_same_v<T, std::vector<int64_t>>);
          out->mutable_ints()->mutable_values()->Assign(v.begin(), v.end());
        }
      },
      value);
}

absl::StatusOr<AttrMap> AttrsFromProto(
    const google::protobuf::Map<std::string, v1::AttrValue>& attrs) {
  AttrMap out;
  for (const auto& [name, value] : attrs) {
    ASSIGN_OR_RETURN(AttrValue converted, FromProto(name, value));
    out.Set(name, std::move(converted));
  }
  return out;
}

Unconnected FromProto(v1::UnconnectedGradients unconnected) {
  return unconnected == v1::UNCONNECTED_ZERO ? Unconnected::kZero
                                             : Unconnected::kNone;
}

GradientRequest FromProto(const v1::Gradient& cmd) {
  GradientRequest request;
  request.tape = cmd.tape_id();
  request.targets.assign(cmd.target_ids().begin(), cmd.target_ids().end());
  request.sources.assign(cmd.source_ids().begin(), cmd.source_ids().end());
  request.output_gradients.assign(cmd.output_gradient_ids().begin(),
                                  cmd.output_gradient_ids().end());
  request.unconnected = FromProto(cmd.unconnected());
  request.result_ids.assign(cmd.result_ids().begin(), cmd.result_ids().end());
  return request;
}

JacobianRequest FromProto(const v1::Jacobian& cmd) {
  JacobianRequest request;
  request.tape = cmd.tape_id();
  request.target = cmd.target_id();
  request.sources.assign(cmd.source_ids().begin(), cmd.source_ids().end());
  request.unconnected = FromProto(cmd.unconnected());
  request.batch = cmd.batch();
  request.result_ids.assign(cmd.result_ids().begin(), cmd.result_ids().end());
  return request;
}

absl::StatusOr<GradientRef> FromProto(const v1::GradientRef& ref,
                                      absl::string_view where) {
  GradientRef r;
  switch (ref.ref_case()) {
    case v1::GradientRef::kUpstream:
      r.kind = GradientRef::kUpstream;
      r.index = ref.upstream();
      return r;
    case v1::GradientRef::kInput:
      r.kind = GradientRef::kInput;
      r.index = ref.input();
      return r;
    case v1::GradientRef::kOutput:
      r.kind = GradientRef::kOutput;
      r.index = ref.output();
      return r;
    case v1::GradientRef::kStep:
      r.kind = GradientRef::kStep;
      r.index = ref.step().step();
      r.output = ref.step().output();
      return r;
    case v1::GradientRef::kTensorId:
      r.kind = GradientRef::kTensor;
      r.client_id = ref.tensor_id();
      return r;
    case v1::GradientRef::REF_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where,
                   " sets no reference (upstream, input, output, "
                   "step or tensor_id)"));
}

absl::StatusOr<GradientProgram> GradientProgramFromProto(
    const v1::ExecuteWithGradient& cmd) {
  GradientProgram program;
  for (int s = 0; s < cmd.steps_size(); ++s) {
    const v1::GradientStep& step = cmd.steps(s);
    GradientStep out;
    out.op = step.op();
    for (int j = 0; j < step.inputs_size(); ++j) {
      ASSIGN_OR_RETURN(
          GradientRef ref,
          FromProto(step.inputs(j),
                    absl::StrCat("custom gradient step ", s, " input ", j)));
      out.inputs.push_back(std::move(ref));
    }
    absl::StatusOr<AttrMap> attrs = AttrsFromProto(step.attrs());
    if (!attrs.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "custom gradient step ", s, ": ", attrs.status().message()));
    }
    out.attrs = *std::move(attrs);
    program.steps.push_back(std::move(out));
  }
  for (int i = 0; i < cmd.input_gradients_size(); ++i) {
    const v1::InputGradient& g = cmd.input_gradients(i);
    if (!g.has_ref()) {
      program.input_grads.push_back(std::nullopt);
      continue;
    }
    ASSIGN_OR_RETURN(
        GradientRef ref,
        FromProto(g.ref(), absl::StrCat("the custom gradient of input ", i)));
    program.input_grads.push_back(std::move(ref));
  }
  return program;
}

namespace {

// Reads one program reference; captured ids are numbered in order of first
// use in `def`.
absl::StatusOr<ProgramRef> RefFromProto(
    const v1::ProgramRef& ref, const std::string& where, bool ones_allowed,
    ProgramDefinition& def, absl::flat_hash_map<int64_t, int>& captured) {
  switch (ref.ref_case()) {
    case v1::ProgramRef::kParam:
      return ProgramRef::Param(ref.param());
    case v1::ProgramRef::kCapturedId: {
      auto [it, inserted] = captured.try_emplace(
          ref.captured_id(), static_cast<int>(def.captured_ids.size()));
      if (inserted) def.captured_ids.push_back(ref.captured_id());
      return ProgramRef::Constant(it->second);
    }
    case v1::ProgramRef::kStep:
      return ProgramRef::Step(ref.step().step(), ref.step().output());
    case v1::ProgramRef::REF_NOT_SET:
      if (ones_allowed) return ProgramRef::Ones();
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      where, " has no reference set (param, captured_id or step)"));
}

absl::Status RefsFromProto(
    const google::protobuf::RepeatedPtrField<v1::ProgramRef>& refs,
    const std::string& where, bool ones_allowed, ProgramDefinition& def,
    absl::flat_hash_map<int64_t, int>& captured, std::vector<ProgramRef>* out) {
  for (int j = 0; j < refs.size(); ++j) {
    ASSIGN_OR_RETURN(ProgramRef ref,
                     RefFromProto(refs[j], absl::StrCat(where, j), ones_allowed,
                                  def, captured));
    out->push_back(ref);
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// Step `s` of a definition, its references read into `def`'s captured ids.
absl::StatusOr<ProgramStep> StepFromProto(
    const v1::ProgramStep& in, int s, ProgramDefinition& def,
    absl::flat_hash_map<int64_t, int>& captured) {
  const std::string where = absl::StrCat("program step ", s);
  ProgramStep step;
  switch (in.kind_case()) {
    case v1::ProgramStep::kOp: {
      step.op = in.op().op();
      RETURN_IF_ERROR(RefsFromProto(
          in.op().inputs(), absl::StrCat(where, " (", step.op, ") input "),
          false, def, captured, &step.inputs));
      absl::StatusOr<AttrMap> attrs = AttrsFromProto(in.op().attrs());
      if (!attrs.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, " (", step.op, "): ", attrs.status().message()));
      }
      step.attrs = *std::move(attrs);
      return step;
    }
    case v1::ProgramStep::kPushTape:
      return ProgramStep::PushTape(in.push_tape().tape(),
                                   in.push_tape().persistent(),
                                   in.push_tape().watch_accessed_variables());
    case v1::ProgramStep::kPopTape:
      return ProgramStep::PopTape(in.pop_tape().tape());
    case v1::ProgramStep::kStopRecording:
      return ProgramStep::Recording(false);
    case v1::ProgramStep::kStartRecording:
      return ProgramStep::Recording(true);
    case v1::ProgramStep::kWatch:
      step = ProgramStep::Watch(in.watch().tape(), {});
      RETURN_IF_ERROR(RefsFromProto(in.watch().values(),
                                    absl::StrCat(where, " (Watch) value "),
                                    false, def, captured, &step.inputs));
      return step;
    case v1::ProgramStep::kGradient: {
      const v1::ProgramGradient& g = in.gradient();
      std::vector<ProgramRef> targets, sources, grads;
      const std::string name = absl::StrCat(where, " (Gradient) ");
      RETURN_IF_ERROR(RefsFromProto(g.targets(), name + "target ", false, def,
                                    captured, &targets));
      RETURN_IF_ERROR(RefsFromProto(g.sources(), name + "source ", false, def,
                                    captured, &sources));
      RETURN_IF_ERROR(RefsFromProto(g.output_gradients(),
                                    name + "output gradient ", true, def,
                                    captured, &grads));
      return ProgramStep::Gradient(g.tape(), std::move(targets),
                                   std::move(sources), std::move(grads),
                                   FromProto(g.unconnected()));
    }
    case v1::ProgramStep::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where,
                   " has no kind set (op, push_tape, watch, gradient, "
                   "pop_tape, stop_recording, start_recording)"));
}

}  // namespace

absl::StatusOr<ProgramDefinition> ProgramFromProto(const v1::DefineProgram& cmd,
                                                   int64_t max_steps) {
  if (cmd.steps_size() > max_steps) {
    return absl::InvalidArgumentError(
        absl::StrCat("program has ", cmd.steps_size(),
                     " steps, more than the limit of ", max_steps));
  }
  ProgramDefinition def;
  Program& p = def.program;
  absl::flat_hash_map<int64_t, int> captured;
  for (int i = 0; i < cmd.params_size(); ++i) {
    const v1::ProgramParam& param = cmd.params(i);
    absl::StatusOr<DType> dtype = FromProto(param.dtype());
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("program param ", i, ": ", dtype.status().message()));
    }
    p.params.push_back(
        {*dtype, Shape(param.shape().begin(), param.shape().end())});
  }
  p.steps.reserve(cmd.steps_size());
  for (int s = 0; s < cmd.steps_size(); ++s) {
    ASSIGN_OR_RETURN(ProgramStep step,
                     StepFromProto(cmd.steps(s), s, def, captured));
    p.steps.push_back(std::move(step));
  }
  RETURN_IF_ERROR(RefsFromProto(cmd.outputs(), "program output ", false, def,
                                captured, &p.outputs));
  return def;
}

void ToProto(absl::Span<const ProgramInfo> programs, v1::ProgramList* out) {
  for (const ProgramInfo& info : programs) {
    v1::ProgramInfo* p = out->add_programs();
    p->set_program_id(info.id);
    p->set_params(info.params);
    p->set_steps(info.steps);
    p->set_outputs(info.outputs);
    p->set_bytes(info.bytes);
    p->set_calls(info.calls);
    p->set_plan_steps(info.plan_steps);
    p->set_not_planned(info.not_planned);
  }
}

absl::Status ToProto(absl::Span<const Tensor> values, v1::GradientValues* out) {
  for (const Tensor& t : values) {
    v1::TensorValue* value = out->add_values();
    out->add_is_none(!t.valid());
    if (!t.valid()) continue;
    if (absl::Status s = ToProto(t, value); !s.ok()) {
      return absl::InternalError(
          absl::StrCat("value ", out->values_size() - 1,
                       " cannot be returned: ", s.message()));
    }
  }
  return absl::OkStatus();
}

void ToProto(const CheckpointSummary& summary, v1::CheckpointInfo* out) {
  out->set_name(summary.name);
  for (const std::string& name : summary.variables) {
    out->add_variable_names(name);
  }
  out->set_file_bytes(summary.file_bytes);
}

void ToProto(const SessionStats& stats, v1::SessionStats* out) {
  out->set_live_tensors(stats.live_tensors);
  out->set_poisoned_ids(stats.poisoned_ids);
  out->set_bytes_in_use(stats.bytes_in_use);
  out->set_tapes(stats.tapes);
  out->set_tape_entries(stats.tape_entries);
  out->set_tape_saved_bytes(stats.tape_saved_bytes);
}

void ToProto(const OpDef& op, v1::OpInfo* out) {
  out->set_name(op.name);
  for (const std::string& name : op.input_names) out->add_input_names(name);
  for (const std::string& name : op.output_names) out->add_output_names(name);
  for (const AttrSpec& spec : op.attrs) {
    v1::AttrDef* attr = out->add_attrs();
    attr->set_name(spec.name);
    attr->set_type(std::string(AttrTypeName(spec.type)));
    attr->set_required(!spec.default_value.has_value());
    if (spec.default_value.has_value()) {
      ToProto(*spec.default_value, attr->mutable_default_value());
    }
  }
  out->set_differentiable(op.differentiable());
  for (int i : op.saved_inputs) out->add_saved_inputs(i);
  for (int i : op.saved_outputs) out->add_saved_outputs(i);
  for (int i = 0; i < static_cast<int>(op.input_differentiable.size()); ++i) {
    if (!op.input_differentiable[i]) out->add_non_differentiable_inputs(i);
  }
  out->set_summary(op.summary);
  for (const DTypeRule& rule : op.output_dtypes) {
    v1::OutputDTypeRule* r = out->add_output_dtypes();
    switch (rule.kind) {
      case DTypeRule::Kind::kSameAsInput:
        r->set_same_as_input(rule.input);
        break;
      case DTypeRule::Kind::kFromAttr:
        r->set_from_attr(rule.attr);
        break;
      case DTypeRule::Kind::kFixed:
        r->set_fixed(ToProto(rule.dtype));
        break;
      case DTypeRule::Kind::kRealOfInput:
        r->set_real_of_input(rule.input);
        break;
      case DTypeRule::Kind::kComplexOfInput:
        r->set_complex_of_input(rule.input);
        break;
    }
  }
  for (int i = 0; i < op.num_inputs(); ++i) {
    if (op.input_kinds[i] == OpDef::InputKind::kHandle) {
      out->add_resource_inputs(i);
    } else if (op.input_kinds[i] == OpDef::InputKind::kAny) {
      out->add_any_kind_inputs(i);
    }
  }
  if (op.list_input.present()) {
    v1::ListArgument* list = out->mutable_list_input();
    list->set_index(op.list_input.index);
    list->set_length_attr(op.list_input.attr);
    list->set_min_length(op.list_input.min_length);
  }
  if (op.list_output.present()) {
    v1::ListArgument* list = out->mutable_list_output();
    list->set_index(0);
    list->set_length_attr(op.list_output.attr);
    list->set_min_length(op.list_output.min_length);
  }
}

namespace {

// The length of the valid UTF-8 sequence at the start of `s`, or 0.
size_t Utf8SequenceLength(absl::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto continuation = [&](size_t i) {
    return i < s.size() && (byte(i) & 0xC0) == 0x80;
  };
  const unsigned char b = byte(0);
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return continuation(1) ? 2 : 0;
  if (b >= 0xE0 && b <= 0xEF) {
    if (!continuation(1) || !continuation(2)) return 0;
    if (b == 0xE0 && byte(1) < 0xA0) return 0;   // overlong
    if (b == 0xED && byte(1) >= 0xA0) return 0;  // surrogates
    return 3;
  }
  if (b >= 0xF0 && b <= 0xF4) {
    if (!continuation(1) || !continuation(2) || !continuation(3)) return 0;
    if (b == 0xF0 && byte(1) < 0x90) return 0;   // overlong
    if (b == 0xF4 && byte(1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

// `message` as valid UTF-8 of at most about `max_bytes` bytes (see
// ToGrpcStatus).
std::string WireMessage(absl::string_view message, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(message.size(), max_bytes));
  size_t i = 0;
  while (i < message.size()) {
    const size_t n = Utf8SequenceLength(message.substr(i));
    if (out.size() + std::max<size_t>(n, 1) > max_bytes) break;
    if (n == 0) {
      out.push_back('?');
      ++i;
    } else {
      out.append(message.data() + i, n);
      i += n;
    }
  }
  if (i < message.size()) {
    absl::StrAppend(&out, "... (", message.size() - i, " more bytes cut)");
  }
  return out;
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status,
                          size_t max_message_bytes) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      WireMessage(status.message(), max_message_bytes));
}

void ToProto(const absl::Status& status, v1::Error* out) {
  grpc::Status converted = ToGrpcStatus(status, kMaxCommandMessageBytes);
  out->set_code(static_cast<int32_t>(converted.error_code()));
  out->set_message(converted.error_message());
}

}  // namespace gradtape::server
