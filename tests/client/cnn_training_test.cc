// A small CNN trained through a real server on loopback:
//   Conv2D(3x3, SAME) + BiasAdd + Relu + MaxPool(2x2) + Reshape + MatMul +
//   BiasAdd + SparseSoftmaxCrossEntropyWithLogits + Mean, plain SGD as
// server ops. The images are 8x8 with a horizontal bar, a vertical bar or a
// diagonal (three classes) plus noise. The loss must fall and the training
// accuracy reach 0.9.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/examples/mlp.h"
#include "gradtape/client/client.h"
#include "gtest/gtest.h"
#include "server/server.h"

namespace gradtape::client {
namespace {

constexpr int kSide = 8;
constexpr int kClasses = 3;

struct Images {
  std::vector<float> pixels;  // [n, 8, 8, 1]
  std::vector<int32_t> labels;
};

Images MakeImages(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::uniform_int_distribution<int> pos(1, kSide - 2);
  Images out;
  for (int i = 0; i < n; ++i) {
    const int label = i % kClasses;
    const int p = pos(rng);
    for (int r = 0; r < kSide; ++r) {
      for (int c = 0; c < kSide; ++c) {
        const bool on = (label == 0 && r == p) || (label == 1 && c == p) ||
                        (label == 2 && r == c);
        out.pixels.push_back((on ? 1.0f : 0.0f) + noise(rng));
      }
    }
    out.labels.push_back(label);
  }
  return out;
}

std::vector<float> Random(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(CnnTraining, LossFallsThroughTheServer) {
  server::ServerOptions options;
  options.address = "127.0.0.1:0";
  auto server = server::Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto session =
      Session::Connect(absl::StrCat("127.0.0.1:", (*server)->port()), {});
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;

  constexpr int kBatch = 48, kFilters = 4;
  const Images data = MakeImages(kBatch, 7);
  Tensor x = s.Put<float>({kBatch, kSide, kSide, 1}, data.pixels);
  Tensor labels = s.Put<int32_t>({kBatch}, data.labels);
  std::mt19937 rng(3);
  Tensor filter =
      s.Put<float>({3, 3, 1, kFilters}, Random(9 * kFilters, 0.5f, rng));
  Tensor conv_bias = s.Put<float>({kFilters}, std::vector<float>(kFilters));
  const int64_t flat = (kSide / 2) * (kSide / 2) * kFilters;
  Tensor w = s.Put<float>({flat, kClasses}, Random(flat * kClasses, 0.2f, rng));
  Tensor b = s.Put<float>({kClasses}, std::vector<float>(kClasses));
  Tensor lr = s.Put<float>({}, {0.5f});

  auto forward = [&](Tensor* logits_out) {
    Tensor conv = Execute("Conv2D", {x, filter},
                          {{"strides", std::vector<int64_t>{1, 1, 1, 1}},
                           {"padding", std::string("SAME")}})[0];
    Tensor act = Relu(BiasAdd(conv, conv_bias));
    Tensor pooled = Execute("MaxPool", {act},
                            {{"ksize", std::vector<int64_t>{1, 2, 2, 1}},
                             {"strides", std::vector<int64_t>{1, 2, 2, 1}},
                             {"padding", std::string("VALID")}})[0];
    Tensor logits = BiasAdd(MatMul(Reshape(pooled, {kBatch, flat}), w), b);
    if (logits_out != nullptr) *logits_out = logits;
    return Mean(SparseSoftmaxCrossEntropyWithLogits(logits, labels).loss);
  };

  std::vector<double> losses;
  for (int step = 0; step < 80; ++step) {
    GradientTape tape(s);
    tape.Watch(std::vector<Tensor>{filter, conv_bias, w, b});
    Tensor loss = forward(nullptr);
    tape.Stop();
    auto grads = tape.Gradient({loss}, {filter, conv_bias, w, b});
    ASSERT_TRUE(grads.ok()) << grads.status();
    filter = filter - lr * (*grads)[0];
    conv_bias = conv_bias - lr * (*grads)[1];
    w = w - lr * (*grads)[2];
    b = b - lr * (*grads)[3];
    if (step % 20 == 0) {
      auto value = s.Fetch(loss);
      ASSERT_TRUE(value.ok()) << value.status();
      losses.push_back(value->ToDoubles()[0]);
    }
  }
  Tensor logits;
  auto final_loss = s.Fetch(forward(&logits));
  ASSERT_TRUE(final_loss.ok()) << final_loss.status();
  auto values = s.Fetch(logits);
  ASSERT_TRUE(values.ok());
  absl::StatusOr<double> accuracy =
      examples::ClassificationAccuracy(*values, data.labels, kClasses);
  ASSERT_TRUE(accuracy.ok()) << accuracy.status();
  const double last = final_loss->ToDoubles()[0];
  ASSERT_FALSE(losses.empty());
  EXPECT_LT(last, 0.5 * losses[0]) << "first loss " << losses[0];
  EXPECT_GE(*accuracy, 0.9);
  ASSERT_TRUE(s.Close().ok());
}

}  // namespace
}  // namespace gradtape::client
