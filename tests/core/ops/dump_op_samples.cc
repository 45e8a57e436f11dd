// Prints every op sample (op_samples.h) as one JSON object per line, for the
// client conformance test (tests/python/test_client_conformance.py), which
// runs each sample through every client and holds what the client predicts
// (output shapes, dtypes, recording, None gradients) to what the server did:
//
//   {"op": "MatMul", "label": "...",
//    "inputs": [{"dtype": "float64", "shape": [2, 3], "data": "<base64>"},
//               {"variable": {"dtype": ..., "shape": ..., "data": ...}}],
//    "attrs": {"transpose_a": {"type": "bool", "value": true}, ...}}
//
// An input that is a variable handle (ReadVariableOp's resource) carries the
// variable's value: the client creates a Variable from it and passes that.
// Data is the row-major little-endian bytes of the proto's TensorValue.
#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>
#include <variant>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/tensor/attrs.h"
#include "core/tensor/tensor.h"
#include "core/tensor/variable.h"
#include "tests/core/ops/op_samples.h"

namespace gradtape::testing {
namespace {

// A JSON string: quotes and backslashes escaped, control bytes as \u00XX.
std::string Quoted(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string TensorJson(const Tensor& t) {
  std::string data(static_cast<const char*>(t.raw_data()), t.num_bytes());
  return absl::StrCat("{\"dtype\": ", Quoted(DTypeName(t.dtype())),
                      ", \"shape\": [", absl::StrJoin(t.shape(), ", "),
                      "], \"data\": ", Quoted(absl::Base64Escape(data)), "}");
}

std::string InputJson(const Tensor& t) {
  if (t.dtype() != DType::kResource) return TensorJson(t);
  const Variable* var = t.resource<Variable>();
  return absl::StrCat("{\"variable\": ", TensorJson(var->value), "}");
}

std::string AttrJson(const AttrValue& value) {
  std::string type(AttrTypeName(TypeOf(value)));
  std::string json = std::visit(
      [](const auto& v) -> std::string {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<V, int64_t>) {
          return absl::StrCat(v);
        } else if constexpr (std::is_same_v<V, double>) {
          // Every sample's float attr is finite; %.17g round-trips.
          char buf[32];
          std::snprintf(buf, sizeof(buf), "%.17g", v);
          return buf;
        } else if constexpr (std::is_same_v<V, std::string>) {
          return Quoted(v);
        } else if constexpr (std::is_same_v<V, DType>) {
          return Quoted(DTypeName(v));
        } else {
          return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
        }
      },
      value);
  return absl::StrCat("{\"type\": ", Quoted(type), ", \"value\": ", json, "}");
}

std::string SampleJson(const OpSample& s) {
  std::vector<std::string> inputs, attrs;
  for (const Tensor& t : s.inputs) inputs.push_back(InputJson(t));
  for (const auto& [name, value] : s.attrs) {
    attrs.push_back(absl::StrCat(Quoted(name), ": ", AttrJson(value)));
  }
  return absl::StrCat("{\"op\": ", Quoted(s.op),
                      ", \"label\": ", Quoted(s.label), ", \"inputs\": [",
                      absl::StrJoin(inputs, ", "), "], \"attrs\": {",
                      absl::StrJoin(attrs, ", "), "}}");
}

}  // namespace
}  // namespace gradtape::testing

int main() {
  for (const auto& sample : gradtape::testing::AllOpSamples()) {
    std::printf("%s\n", gradtape::testing::SampleJson(sample).c_str());
  }
  return 0;
}
