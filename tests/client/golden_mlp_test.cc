// The golden MLP that the Go client (client/go) checks against.
//
// A fixed 2-layer MLP in float64: loss = mean(sparse softmax cross-entropy(
// tanh(x @ w1 + b1) @ w2 + b2, labels)). This test computes its loss and the
// gradients of the loss with respect to w1, b1, w2, b2 twice: with the core
// (gradtape::Session, the same code the server runs) and with a plain C++
// forward/backward written out below, asserts that they agree, and writes
// the inputs and the core's values to <build dir>/golden/mlp_golden.json.
// client/go/mlp_test.go replays the inputs through a real server over gRPC
// and compares with that file, so the Go test depends on ctest having run
// this test first (scripts/test.sh runs ctest before the Go test).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/registry/op_registry.h"
#include "core/session/session.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/client/core_mlp.h"

namespace gradtape {
namespace {

constexpr int64_t kBatch = 4, kIn = 3, kHidden = 5, kClasses = 3;

// Deterministic, irregular values in about [-1, 1].
std::vector<double> Values(int64_t n, double phase) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(0.7 * i + phase) * 0.9;
  return v;
}

struct Golden {
  std::vector<double> x, w1, b1, w2, b2;
  std::vector<int32_t> labels = {0, 2, 1, 2};
  double loss = 0;
  std::vector<std::vector<double>> grads;  // w1, b1, w2, b2
};

Golden Inputs() {
  Golden g;
  g.x = Values(kBatch * kIn, 0.3);
  g.w1 = Values(kIn * kHidden, 1.1);
  g.b1 = Values(kHidden, 2.0);
  g.w2 = Values(kHidden * kClasses, 0.5);
  g.b2 = Values(kClasses, 2.9);
  return g;
}

// The same model in plain loops: forward, then backward by hand.
void Reference(Golden& g) {
  std::vector<double> h(kBatch * kHidden), logits(kBatch * kClasses);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t j = 0; j < kHidden; ++j) {
      double s = g.b1[j];
      for (int64_t i = 0; i < kIn; ++i)
        s += g.x[b * kIn + i] * g.w1[i * kHidden + j];
      h[b * kHidden + j] = std::tanh(s);
    }
    for (int64_t c = 0; c < kClasses; ++c) {
      double s = g.b2[c];
      for (int64_t j = 0; j < kHidden; ++j)
        s += h[b * kHidden + j] * g.w2[j * kClasses + c];
      logits[b * kClasses + c] = s;
    }
  }
  // dlogits = (softmax - onehot) / batch
  std::vector<double> dlogits(kBatch * kClasses);
  g.loss = 0;
  for (int64_t b = 0; b < kBatch; ++b) {
    double m = logits[b * kClasses];
    for (int64_t c = 1; c < kClasses; ++c)
      m = std::max(m, logits[b * kClasses + c]);
    double z = 0;
    for (int64_t c = 0; c < kClasses; ++c)
      z += std::exp(logits[b * kClasses + c] - m);
    for (int64_t c = 0; c < kClasses; ++c) {
      const double p = std::exp(logits[b * kClasses + c] - m) / z;
      dlogits[b * kClasses + c] = (p - (c == g.labels[b] ? 1.0 : 0.0)) / kBatch;
    }
    g.loss += (std::log(z) + m - logits[b * kClasses + g.labels[b]]) / kBatch;
  }
  std::vector<double> dw1(kIn * kHidden, 0), db1(kHidden, 0),
      dw2(kHidden * kClasses, 0), db2(kClasses, 0), dh(kBatch * kHidden, 0);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t c = 0; c < kClasses; ++c) {
      const double d = dlogits[b * kClasses + c];
      db2[c] += d;
      for (int64_t j = 0; j < kHidden; ++j) {
        dw2[j * kClasses + c] += h[b * kHidden + j] * d;
        dh[b * kHidden + j] += g.w2[j * kClasses + c] * d;
      }
    }
    for (int64_t j = 0; j < kHidden; ++j) {
      const double hj = h[b * kHidden + j];
      const double ds = dh[b * kHidden + j] * (1 - hj * hj);  // tanh'
      db1[j] += ds;
      for (int64_t i = 0; i < kIn; ++i)
        dw1[i * kHidden + j] += g.x[b * kIn + i] * ds;
    }
  }
  g.grads = {dw1, db1, dw2, db2};
}

// JSON through protobuf's well-known Struct/Value (doubles printed so that
// they parse back to the same bits).
using ::google::protobuf::ListValue;
using ::google::protobuf::Struct;
using ::google::protobuf::Value;

template <typename T>
void AddNumbers(const std::vector<T>& v, ListValue* out) {
  for (T x : v) out->add_values()->set_number_value(static_cast<double>(x));
}

// {"shape": [...], "values": [...]}
template <typename T>
Value JsonTensor(std::vector<int64_t> shape, const std::vector<T>& v) {
  Value tensor;
  auto& fields = *tensor.mutable_struct_value()->mutable_fields();
  AddNumbers(shape, fields["shape"].mutable_list_value());
  AddNumbers(v, fields["values"].mutable_list_value());
  return tensor;
}

TEST(GoldenMlpTest, CoreMatchesHandWrittenBackpropAndWritesTheGoldenFile) {
  Golden ref = Inputs();
  Reference(ref);

  absl::StatusOr<testing::MlpResult> core =
      testing::CoreMlp({kBatch, kIn, kHidden, kClasses, ref.x, ref.w1, ref.b1,
                        ref.w2, ref.b2, ref.labels});
  ASSERT_TRUE(core.ok()) << core.status();

  Golden got = Inputs();
  got.loss = core->loss;
  EXPECT_NEAR(got.loss, ref.loss, 1e-12);
  ASSERT_EQ(core->grads.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    const std::vector<double>& values = core->grads[k];
    ASSERT_EQ(values.size(), ref.grads[k].size());
    double norm = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_NEAR(values[i], ref.grads[k][i], 1e-12)
          << "gradient " << k << " element " << i;
      norm += std::abs(values[i]);
    }
    EXPECT_GT(norm, 0.01) << "gradient " << k;
    got.grads.push_back(values);
  }

  const std::filesystem::path dir =
      std::filesystem::path(GRADTAPE_BINARY_DIR) / "golden";
  std::filesystem::create_directories(dir);
  const std::filesystem::path path = dir / "mlp_golden.json";
  const std::filesystem::path tmp = dir / "mlp_golden.json.tmp";
  Struct golden;
  auto& fields = *golden.mutable_fields();
  fields["generated_by"].set_string_value(
      "tests/client/golden_mlp_test.cc (gradtape core, float64)");
  fields["model"].set_string_value(
      "loss = "
      "mean(SparseSoftmaxCrossEntropyWithLogits(BiasAdd(MatMul(Tanh(BiasAdd("
      "MatMul(x, w1), b1)), w2), b2), labels).loss)");
  fields["x"] = JsonTensor({kBatch, kIn}, got.x);
  fields["labels"] = JsonTensor({kBatch}, got.labels);
  fields["w1"] = JsonTensor({kIn, kHidden}, got.w1);
  fields["b1"] = JsonTensor({kHidden}, got.b1);
  fields["w2"] = JsonTensor({kHidden, kClasses}, got.w2);
  fields["b2"] = JsonTensor({kClasses}, got.b2);
  fields["loss"].set_number_value(got.loss);
  auto& gradients =
      *fields["gradients"].mutable_struct_value()->mutable_fields();
  gradients["w1"] = JsonTensor({kIn, kHidden}, got.grads[0]);
  gradients["b1"] = JsonTensor({kHidden}, got.grads[1]);
  gradients["w2"] = JsonTensor({kHidden, kClasses}, got.grads[2]);
  gradients["b2"] = JsonTensor({kClasses}, got.grads[3]);
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  std::string json;
  ASSERT_TRUE(
      google::protobuf::util::MessageToJsonString(golden, &json, options).ok());
  json.push_back('\n');
  // What the Go test reads back: the same numbers, bit for bit.
  Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok());
  EXPECT_EQ(parsed.fields().at("loss").number_value(), got.loss);
  EXPECT_EQ(parsed.fields()
                .at("gradients")
                .struct_value()
                .fields()
                .at("w1")
                .struct_value()
                .fields()
                .at("values")
                .list_value()
                .values(0)
                .number_value(),
            got.grads[0][0]);
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  ASSERT_NE(f, nullptr) << "cannot write " << tmp;
  ASSERT_EQ(std::fwrite(json.data(), 1, json.size(), f), json.size());
  ASSERT_EQ(std::fclose(f), 0);
  std::filesystem::rename(tmp, path);  // atomic: readers never see half a file
}

}  // namespace
}  // namespace gradtape
