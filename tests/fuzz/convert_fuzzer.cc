// libFuzzer target: the input is parsed both as a gradtape.v1.TensorValue
// and as a gradtape.v1.AttrValue; each is converted to core types the way
// the server does (server/convert.h FromProto, Tensor::FromBytes) and, when
// that succeeds, back to proto, which must give the same value. A custom
// mutator edits most inputs as one of the two messages
// (tests/fuzz/proto_mutator.h): packed shapes and their sizes are out of
// reach of byte mutations.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor/attrs.h"
#include "core/tensor/tensor.h"
#include "google/protobuf/stubs/logging.h"
#include "gradtape/v1/tape_service.pb.h"
#include "server/convert.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/proto_mutator.h"

namespace {

void FuzzTensor(const uint8_t* data, size_t size) {
  gradtape::v1::TensorValue value;
  if (!value.ParseFromArray(data, static_cast<int>(size))) return;
  const absl::StatusOr<gradtape::DType> parsed =
      gradtape::server::FromProto(value.dtype());
  if (!parsed.ok()) return;
  const gradtape::DType dtype = *parsed;
  absl::StatusOr<gradtape::Tensor> tensor = gradtape::Tensor::FromBytes(
      dtype, absl::MakeConstSpan(value.shape().data(), value.shape().size()),
      value.data());
  if (!tensor.ok()) return;
  gradtape::v1::TensorValue back;
  gradtape::fuzz::Require(gradtape::server::ToProto(*tensor, &back).ok(),
                          "a valid tensor converts");
  gradtape::fuzz::Require(back.dtype() == value.dtype(), "dtype round trip");
  gradtape::fuzz::Require(
      std::equal(back.shape().begin(), back.shape().end(),
                 value.shape().begin(), value.shape().end()),
      "shape round trip");
  if (dtype == gradtape::DType::kBool) {  // any nonzero byte is true
    gradtape::fuzz::Require(back.data().size() == value.data().size(),
                            "bool size round trip");
    for (size_t i = 0; i < back.data().size(); ++i) {
      gradtape::fuzz::Require(back.data()[i] == (value.data()[i] != 0 ? 1 : 0),
                              "bool round trip");
    }
  } else {
    gradtape::fuzz::Require(back.data() == value.data(), "bytes round trip");
  }
}

void FuzzAttr(const uint8_t* data, size_t size) {
  gradtape::v1::AttrValue value;
  if (!value.ParseFromArray(data, static_cast<int>(size))) return;
  absl::StatusOr<gradtape::AttrValue> attr =
      gradtape::server::FromProto("fuzz_attr", value);
  if (!attr.ok()) return;
  gradtape::v1::AttrValue back;
  gradtape::server::ToProto(*attr, &back);
  gradtape::fuzz::Require(back.value_case() == value.value_case(),
                          "attr kind round trip");
  value.DiscardUnknownFields();
  std::string a, b;
  gradtape::fuzz::Require(
      value.SerializeToString(&a) && back.SerializeToString(&b),
      "attrs serialize");
  // A double NaN may come back with other payload bits: compare the rest.
  if (value.value_case() != gradtape::v1::AttrValue::kF) {
    gradtape::fuzz::Require(a == b, "attr round trip");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Inputs with invalid UTF-8 in AttrValue.s fail to parse, and protobuf
  // logs each one: keep the fuzzer's output readable.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzTensor(data, size);
  FuzzAttr(data, size);
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size,
                                          size_t max_size, unsigned int seed) {
  std::minstd_rand rng(seed);
  gradtape::v1::TensorValue tensor;
  gradtape::v1::AttrValue attr;
  google::protobuf::Message* m = nullptr;
  if (rng() % 5 != 0) {
    if (rng() % 2 == 0) {
      if (tensor.ParseFromArray(data, static_cast<int>(size))) m = &tensor;
    } else if (attr.ParseFromArray(data, static_cast<int>(size))) {
      m = &attr;
    }
  }
  if (m == nullptr) return LLVMFuzzerMutate(data, size, max_size);
  const int rounds = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < rounds; ++i) gradtape::fuzz::MutateOneField(m, rng);
  const size_t n = gradtape::fuzz::Serialize(*m, data, max_size);
  return n > 0 ? n : LLVMFuzzerMutate(data, size, max_size);
}
