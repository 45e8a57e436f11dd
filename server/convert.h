// The one place where proto messages meet core types: dtypes, tensors, attrs,
// id lists, gradient and Jacobian requests, custom gradient programs,
// returned values, checkpoint summaries, statistics, the op registry and
// statuses. Everything here is a pure function of its arguments
// (thread-safe). Messages say what is wrong but not where: callers prefix
// them with the op and command.
#ifndef GRADTAPE_SERVER_CONVERT_H_
#define GRADTAPE_SERVER_CONVERT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/registry/op_registry.h"
#include "core/session/session.h"
#include "core/tensor/attrs.h"
#include "core/tensor/tensor.h"
#include "google/protobuf/map.h"
#include "google/protobuf/repeated_field.h"
#include "gradtape/v1/tape_service.pb.h"
#include "grpcpp/support/status.h"

namespace gradtape::server {

// A dtype from the wire. DTYPE_INVALID (0, unset) becomes DType::kInvalid,
// which the core rejects with "dtype is not set"; a value outside the enum
// (proto3 keeps unknown values) is INVALID_ARGUMENT "unknown dtype <n>"
// listing the known ones. The caller prefixes the message with where the
// dtype came from.
absl::StatusOr<DType> FromProto(v1::DType dtype);
v1::DType ToProto(DType dtype);

// Copies dtype, shape and the little-endian bytes of `tensor`. INTERNAL
// (and `out` untouched) if the tensor is invalid or has no buffer for its
// bytes: a core bug, reported instead of reading through a null pointer.
absl::Status ToProto(const Tensor& tensor, v1::TensorValue* out);
// A chunk of `slice.tensor`: its dtype and whole shape, total_bytes, and the
// data bytes [slice.offset, slice.offset + slice.length) (the caller checked
// that they lie within the tensor). INTERNAL as ToProto(Tensor).
absl::Status ToProto(const Session::TensorSlice& slice, v1::TensorChunk* out);

// INVALID_ARGUMENT naming `attr_name` when the oneof is unset or a type attr
// holds no dtype ("dtype is not set") or an unknown one ("unknown dtype 99").
absl::StatusOr<AttrValue> FromProto(absl::string_view attr_name,
                                    const v1::AttrValue& value);
void ToProto(const AttrValue& value, v1::AttrValue* out);

// The attrs of an op or a custom gradient step: every entry through
// FromProto(name, value). The first entry that does not convert fails the
// whole map with FromProto's message.
absl::StatusOr<AttrMap> AttrsFromProto(
    const google::protobuf::Map<std::string, v1::AttrValue>& attrs);

// A repeated id field as the span core takes (no copy; valid while `ids`
// is).
inline absl::Span<const int64_t> Ids(
    const google::protobuf::RepeatedField<int64_t>& ids) {
  return absl::MakeConstSpan(ids.data(), ids.size());
}

// UNCONNECTED_ZERO is kZero; everything else (UNCONNECTED_NONE, an unknown
// value) is kNone.
Unconnected FromProto(v1::UnconnectedGradients unconnected);
GradientRequest FromProto(const v1::Gradient& cmd);
JacobianRequest FromProto(const v1::Jacobian& cmd);

// One reference of a custom gradient program. INVALID_ARGUMENT "<where> sets
// no reference (...)" when the oneof is unset.
absl::StatusOr<GradientRef> FromProto(const v1::GradientRef& ref,
                                      absl::string_view where);
// The program of `cmd`: its steps and input_gradients (cmd.op() is the
// caller's). INVALID_ARGUMENT naming the step and input for a reference
// that is not set, or the step for an attr that does not convert.
absl::StatusOr<GradientProgram> GradientProgramFromProto(
    const v1::ExecuteWithGradient& cmd);

// Returned values, in order; an invalid Tensor is a None value (is_none,
// an empty TensorValue). INTERNAL "value <i> cannot be returned: ..." for a
// value ToProto(Tensor) refuses; `out` then holds the values before it.
// Captured steps: a DefineProgram as the session takes it (captured ids
// deduplicated into ProgramDefinition::captured_ids). INVALID_ARGUMENT naming
// the step and input for a reference with nothing set, a step with no kind,
// or attrs that do not convert; more than `max_steps` steps is refused
// before any step is converted.
absl::StatusOr<ProgramDefinition> ProgramFromProto(const v1::DefineProgram& cmd,
                                                   int64_t max_steps);
void ToProto(absl::Span<const ProgramInfo> programs, v1::ProgramList* out);

absl::Status ToProto(absl::Span<const Tensor> values, v1::GradientValues* out);

void ToProto(const CheckpointSummary& summary, v1::CheckpointInfo* out);

void ToProto(const SessionStats& stats, v1::SessionStats* out);
void ToProto(const OpDef& op, v1::OpInfo* out);

// THE status conversion: absl::Status -> grpc::Status. The codes share their
// numbering (google.rpc.Code). The message is kept, made safe for the wire:
// bytes that are not UTF-8 become '?' (proto3 strings must be UTF-8, or the
// client cannot parse the reply), and a message longer than
// `max_message_bytes` is cut at a character boundary and says how much was
// cut. The default bounds the status of a call (it travels in the trailing
// metadata, which clients limit to 8 KiB by default).
inline constexpr size_t kMaxCallMessageBytes = 2048;
// Per-command errors travel in the reply body.
inline constexpr size_t kMaxCommandMessageBytes = 16384;
grpc::Status ToGrpcStatus(const absl::Status& status,
                          size_t max_message_bytes = kMaxCallMessageBytes);
// The same status as a per-command proto Error (via ToGrpcStatus, with
// kMaxCommandMessageBytes).
void ToProto(const absl::Status& status, v1::Error* out);

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_CONVERT_H_
