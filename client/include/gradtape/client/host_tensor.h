// HostTensor: a tensor value held by the client (dtype + shape + raw bytes),
// what Session::Put sends and Session::Fetch returns.
//
// A plain value type: copyable, no invariants enforced on construction. The
// bytes are row-major and little-endian, bool is one byte per element, as on
// the wire (gradtape.v1.TensorValue). A HostTensor whose byte count does not
// match its dtype and shape is rejected by the server when it is Put (the
// error surfaces at the next wait point, see session.h); Validate() checks
// the same thing locally.
#ifndef GRADTAPE_CLIENT_HOST_TENSOR_H_
#define GRADTAPE_CLIENT_HOST_TENSOR_H_

#include <complex>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gradtape::client {

// Numbering matches gradtape.v1.DType.
enum class DType : int8_t {
  kInvalid = 0,
  kFloat32 = 1,
  kFloat64 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kBool = 5,
  kComplex64 = 6,   // two float32: real, imaginary
  kComplex128 = 7,  // two float64: real, imaginary
  // A variable's handle (VarHandleOp's output): fetched as its 8-byte id;
  // it can't be put.
  kResource = 8,
};

// Bytes per element (0 for kInvalid).
size_t DTypeSize(DType dtype);
// "float32", "float64", "int32", "int64", "bool", "complex64", "complex128",
// "resource", "invalid".
absl::string_view DTypeName(DType dtype);

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kFloat64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kInt32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kInt64;
};
template <>
struct DTypeOf<std::complex<float>> {
  static constexpr DType value = DType::kComplex64;
};
template <>
struct DTypeOf<std::complex<double>> {
  static constexpr DType value = DType::kComplex128;
};

struct HostTensor {
  DType dtype = DType::kInvalid;
  std::vector<int64_t> shape;  // empty: a scalar
  std::string bytes;           // row-major, little-endian

  // `values` laid out row-major in `shape`. A size mismatch is not checked
  // here (see Validate).
  template <typename T>
  static HostTensor FromVector(std::vector<int64_t> shape,
                               const std::vector<T>& values) {
    HostTensor t;
    t.dtype = DTypeOf<T>::value;
    t.shape = std::move(shape);
    t.bytes.resize(values.size() * sizeof(T));
    if (!values.empty()) {
      std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    }
    return t;
  }
  template <typename T>
  static HostTensor Scalar(T value) {
    return FromVector<T>({}, std::vector<T>{value});
  }
  // A tensor of `dtype` with every element equal to `value` (converted;
  // complex: real part `value`; resource: zero bytes, which no server
  // takes, as no client may put a handle).
  static HostTensor Filled(DType dtype, std::vector<int64_t> shape,
                           double value);

  // Product of the dims (1 for a scalar; -1 if a dim is negative).
  int64_t num_elements() const;
  // OK if the dtype is valid and bytes.size() matches dtype and shape.
  absl::Status Validate() const;
  // Every element converted to double (bool: 0 or 1; complex: the real
  // part; resource: the handle's id). Empty if invalid.
  std::vector<double> ToDoubles() const;
  // Element i converted to double as ToDoubles does; i must be in range.
  double at(int64_t i) const;
  // "float64[2,3]".
  std::string DebugString() const;
};

}  // namespace gradtape::client

#endif  // GRADTAPE_CLIENT_HOST_TENSOR_H_
