// The one place where proto messages meet core types: dtypes, tensors, attrs,
// statistics, the op registry and statuses. Everything here is a pure
// function of its arguments (thread-safe).
#ifndef GRADTAPE_SERVER_CONVERT_H_
#define GRADTAPE_SERVER_CONVERT_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/attrs.h"
#include "core/op_registry.h"
#include "core/session.h"
#include "core/tensor.h"
#include "gradtape/v1/tape_service.pb.h"
#include "grpcpp/support/status.h"

namespace gradtape::server {

// Unknown wire values (proto3 keeps them) become DType::kInvalid, which the
// core rejects with INVALID_ARGUMENT.
DType FromProto(v1::DType dtype);
v1::DType ToProto(DType dtype);

// Copies dtype, shape and the little-endian bytes of `tensor` (valid).
void ToProto(const Tensor& tensor, v1::TensorValue* out);

// INVALID_ARGUMENT naming `attr_name` when the oneof is unset or a type attr
// holds an unknown dtype.
absl::StatusOr<AttrValue> FromProto(absl::string_view attr_name,
                                    const v1::AttrValue& value);
void ToProto(const AttrValue& value, v1::AttrValue* out);

void ToProto(const SessionStats& stats, v1::SessionStats* out);
void ToProto(const OpDef& op, v1::OpInfo* out);

// THE status conversion: absl::Status -> grpc::Status. The codes share their
// numbering (google.rpc.Code), the message is kept.
grpc::Status ToGrpcStatus(const absl::Status& status);
// The same status as a per-command proto Error (via ToGrpcStatus).
void ToProto(const absl::Status& status, v1::Error* out);

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_CONVERT_H_
