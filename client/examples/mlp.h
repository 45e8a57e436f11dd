// A 2-layer MLP classifier trained entirely on a gradtape server: the
// training logic of gradtape-mlp-demo, shared with the client tests.
//
// Model: logits = relu(x @ w1 + b1) @ w2 + b2; loss = mean(sparse softmax
// cross-entropy). Plain SGD written as server ops (p <- p - lr * dp), the
// old parameter handles released every step. Only the loss (every
// `log_every` steps) and the final logits come back to the client.
#ifndef GRADTAPE_CLIENT_EXAMPLES_MLP_H_
#define GRADTAPE_CLIENT_EXAMPLES_MLP_H_

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gradtape/client/session.h"

namespace gradtape::examples {

// A labelled 2-D point set.
struct Dataset {
  int64_t num_points = 0;
  int num_classes = 0;
  std::vector<double> features;  // [num_points, 2], row-major
  std::vector<int32_t> labels;   // [num_points], in [0, num_classes)
};

// CS231n's interleaved spirals: `num_classes` arms of `points_per_class`
// points, angle noise `noise` (radians). Deterministic for a seed.
Dataset MakeSpiral(int points_per_class, int num_classes, double noise,
                   uint64_t seed);
// Gaussian blobs (stddev `spread`) around `num_classes` centers on a circle
// of radius 2.
Dataset MakeBlobs(int points_per_class, int num_classes, double spread,
                  uint64_t seed);

struct MlpOptions {
  int hidden = 64;
  int steps = 1000;
  double learning_rate = 1.0;
  uint64_t seed = 1;    // weight initialisation
  int log_every = 100;  // fetch the loss every this many steps (0: never)
  client::DType dtype = client::DType::kFloat32;
};

struct MlpReport {
  std::vector<std::pair<int, double>> losses;  // (step, loss) as logged
  double final_loss = 0;
  double accuracy = 0;  // on the training set, argmax of the final logits
};

// The examples' data sets by name: "spiral" (noise 0.2) or "blobs" (spread
// 0.6), 3 classes; INVALID_ARGUMENT for another name.
absl::StatusOr<Dataset> MakeDataset(absl::string_view name,
                                    int points_per_class, uint64_t seed);

// `values` as a host tensor of `dtype` (float32 or float64).
client::HostTensor HostValues(client::DType dtype, std::vector<int64_t> shape,
                              const std::vector<double>& values);
// He-initialised weights [rows, cols]: normal with stddev sqrt(2 / rows).
client::HostTensor HeWeights(client::DType dtype, int64_t rows, int64_t cols,
                             std::mt19937_64& gen);
// The share of rows of `logits` ([labels.size(), num_classes]) whose argmax
// is the label; INTERNAL if the logits have another number of elements.
absl::StatusOr<double> ClassificationAccuracy(
    const client::HostTensor& logits, const std::vector<int32_t>& labels,
    int num_classes);

// Trains on `session`. `on_log(step, loss)` is called for every logged
// loss. Errors are the session's (see gradtape/client/session.h).
absl::StatusOr<MlpReport> TrainMlp(
    client::Session& session, const Dataset& data, const MlpOptions& options,
    const std::function<void(int, double)>& on_log = nullptr);

}  // namespace gradtape::examples

#endif  // GRADTAPE_CLIENT_EXAMPLES_MLP_H_
