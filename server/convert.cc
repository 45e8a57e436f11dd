#include "server/convert.h"

#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gradtape::server {

DType FromProto(v1::DType dtype) {
  int value = static_cast<int>(dtype);
  return IsValidDType(value) ? static_cast<DType>(value) : DType::kInvalid;
}

v1::DType ToProto(DType dtype) {
  // Core and wire share the numbering (core/tensor.h).
  return static_cast<v1::DType>(static_cast<int>(dtype));
}

void ToProto(const Tensor& tensor, v1::TensorValue* out) {
  out->set_dtype(ToProto(tensor.dtype()));
  out->mutable_shape()->Assign(tensor.shape().begin(), tensor.shape().end());
  out->set_data(static_cast<const char*>(tensor.raw_data()),
                tensor.num_bytes());
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
      DType dtype = FromProto(value.type());
      if (dtype == DType::kInvalid) {
        return absl::InvalidArgumentError(
            absl::StrCat("attr '", attr_name, "': invalid dtype ",
                         static_cast<int>(value.type())));
      }
      return AttrValue(dtype);
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
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

void ToProto(const absl::Status& status, v1::Error* out) {
  grpc::Status converted = ToGrpcStatus(status);
  out->set_code(static_cast<int32_t>(converted.error_code()));
  out->set_message(converted.error_message());
}

}  // namespace gradtape::server
