#include "gradtape/client/host_tensor.h"

#include <complex>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gradtape::client {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
    case DType::kComplex64:
    case DType::kResource:
      return 8;
    case DType::kComplex128:
      return 16;
    case DType::kBool:
      return 1;
    default:
      return 0;
  }
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBool:
      return "bool";
    case DType::kComplex64:
      return "complex64";
    case DType::kComplex128:
      return "complex128";
    case DType::kResource:
      return "resource";
    default:
      return "invalid";
  }
}

namespace {

template <typename T>
T Load(const std::string& bytes, int64_t i) {
  T value;
  std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void Store(std::string& bytes, int64_t i, T value) {
  std::memcpy(bytes.data() + i * sizeof(T), &value, sizeof(T));
}

}  // namespace

HostTensor HostTensor::Filled(DType dtype, std::vector<int64_t> shape,
                              double value) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  const int64_t n = t.num_elements();
  if (n < 0 || DTypeSize(dtype) == 0) return t;
  t.bytes.resize(n * DTypeSize(dtype));
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::kFloat32:
        Store(t.bytes, i, static_cast<float>(value));
        break;
      case DType::kFloat64:
        Store(t.bytes, i, value);
        break;
      case DType::kInt32:
        Store(t.bytes, i, static_cast<int32_t>(value));
        break;
      case DType::kInt64:
        Store(t.bytes, i, static_cast<int64_t>(value));
        break;
      case DType::kBool:
        Store(t.bytes, i, static_cast<uint8_t>(value != 0.0));
        break;
      case DType::kComplex64:
        Store(t.bytes, i, std::complex<float>(static_cast<float>(value)));
        break;
      case DType::kComplex128:
        Store(t.bytes, i, std::complex<double>(value));
        break;
      default:
        break;
    }
  }
  return t;
}

int64_t HostTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    n *= d;
  }
  return n;
}

absl::Status HostTensor::Validate() const {
  if (DTypeSize(dtype) == 0) {
    return absl::InvalidArgumentError("HostTensor has no valid dtype");
  }
  const int64_t n = num_elements();
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostTensor has a negative dim: ", DebugString()));
  }
  if (static_cast<int64_t>(bytes.size()) !=
      n * static_cast<int64_t>(DTypeSize(dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostTensor ", DebugString(), " needs ",
                     n * DTypeSize(dtype), " bytes, holds ", bytes.size()));
  }
  return absl::OkStatus();
}

double HostTensor::at(int64_t i) const {
  switch (dtype) {
    case DType::kFloat32:
      return Load<float>(bytes, i);
    case DType::kFloat64:
      return Load<double>(bytes, i);
    case DType::kInt32:
      return Load<int32_t>(bytes, i);
    case DType::kInt64:
      return static_cast<double>(Load<int64_t>(bytes, i));
    case DType::kBool:
      return Load<uint8_t>(bytes, i) != 0 ? 1.0 : 0.0;
    case DType::kComplex64:
      return Load<std::complex<float>>(bytes, i).real();
    case DType::kComplex128:
      return Load<std::complex<double>>(bytes, i).real();
    case DType::kResource:
      return static_cast<double>(Load<int64_t>(bytes, i));
    default:
      return 0.0;
  }
}

std::vector<double> HostTensor::ToDoubles() const {
  std::vector<double> out;
  if (!Validate().ok()) return out;
  const int64_t n = num_elements();
  out.reserve(n);
  for (int64_t i = 0; i < n; ++i) out.push_back(at(i));
  return out;
}

std::string HostTensor::DebugString() const {
  return absl::StrCat(DTypeName(dtype), "[", absl::StrJoin(shape, ","), "]");
}

}  // namespace gradtape::client
