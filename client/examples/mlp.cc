#include "client/examples/mlp.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "gradtape/client/ops.h"

namespace gradtape::examples {

using client::GradientTape;
using client::HostTensor;
using client::Tensor;

Dataset MakeSpiral(int points_per_class, int num_classes, double noise,
                   uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Dataset d;
  d.num_classes = num_classes;
  d.num_points = static_cast<int64_t>(points_per_class) * num_classes;
  for (int c = 0; c < num_classes; ++c) {
    for (int i = 0; i < points_per_class; ++i) {
      const double f = points_per_class > 1
                           ? static_cast<double>(i) / (points_per_class - 1)
                           : 0.0;
      const double r = f;
      const double t = 4.0 * (c + f) + noise * normal(gen);
      d.features.push_back(r * std::sin(t));
      d.features.push_back(r * std::cos(t));
      d.labels.push_back(c);
    }
  }
  return d;
}

Dataset MakeBlobs(int points_per_class, int num_classes, double spread,
                  uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, spread);
  Dataset d;
  d.num_classes = num_classes;
  d.num_points = static_cast<int64_t>(points_per_class) * num_classes;
  for (int c = 0; c < num_classes; ++c) {
    const double angle = 2.0 * M_PI * c / num_classes;
    for (int i = 0; i < points_per_class; ++i) {
      d.features.push_back(2.0 * std::cos(angle) + normal(gen));
      d.features.push_back(2.0 * std::sin(angle) + normal(gen));
      d.labels.push_back(c);
    }
  }
  return d;
}

absl::StatusOr<Dataset> MakeDataset(absl::string_view name,
                                    int points_per_class, uint64_t seed) {
  if (name == "spiral") return MakeSpiral(points_per_class, 3, 0.2, seed);
  if (name == "blobs") return MakeBlobs(points_per_class, 3, 0.6, seed);
  return absl::InvalidArgumentError(
      absl::StrCat("data set must be spiral or blobs, got ", name));
}

HostTensor HostValues(client::DType dtype, std::vector<int64_t> shape,
                      const std::vector<double>& values) {
  if (dtype == client::DType::kFloat64) {
    return HostTensor::FromVector<double>(std::move(shape), values);
  }
  return HostTensor::FromVector<float>(
      std::move(shape), std::vector<float>(values.begin(), values.end()));
}

HostTensor HeWeights(client::DType dtype, int64_t rows, int64_t cols,
                     std::mt19937_64& gen) {
  std::normal_distribution<double> normal(0.0, std::sqrt(2.0 / rows));
  std::vector<double> w(rows * cols);
  for (double& v : w) v = normal(gen);
  return HostValues(dtype, {rows, cols}, w);
}

absl::StatusOr<MlpReport> TrainMlp(
    client::Session& session, const Dataset& data, const MlpOptions& options,
    const std::function<void(int, double)>& on_log) {
  const client::DType dtype = options.dtype;
  const int64_t n = data.num_points;
  const int64_t k = data.num_classes;
  const int64_t h = options.hidden;
  std::mt19937_64 gen(options.seed);

  const Tensor x = session.Put(HostValues(dtype, {n, 2}, data.features));
  const Tensor y = session.Put<int32_t>({n}, data.labels);
  const Tensor lr = session.Scalar(options.learning_rate, dtype);
  // w1, b1, w2, b2.
  std::vector<Tensor> params = {
      session.Put(HeWeights(dtype, 2, h, gen)),
      session.Put(HostTensor::Filled(dtype, {h}, 0.0)),
      session.Put(HeWeights(dtype, h, k, gen)),
      session.Put(HostTensor::Filled(dtype, {k}, 0.0)),
  };
  auto logits_of = [&](const std::vector<Tensor>& p) {
    const Tensor hidden =
        client::Relu(client::BiasAdd(client::MatMul(x, p[0]), p[1]));
    return client::BiasAdd(client::MatMul(hidden, p[2]), p[3]);
  };

  MlpReport report;
  for (int step = 0; step <= options.steps; ++step) {
    const bool log = step == options.steps ||
                     (options.log_every > 0 && step % options.log_every == 0);
    GradientTape tape(session);
    tape.Watch(params);
    const Tensor loss = client::Mean(
        client::SparseSoftmaxCrossEntropyWithLogits(logits_of(params), y).loss);
    tape.Stop();
    if (log) {
      ASSIGN_OR_RETURN(HostTensor value, session.Fetch(loss));
      report.final_loss = value.at(0);
      report.losses.emplace_back(step, report.final_loss);
      if (on_log) on_log(step, report.final_loss);
    }
    if (step == options.steps) break;
    ASSIGN_OR_RETURN(std::vector<Tensor> grads, tape.Gradient(loss, params));
    for (size_t i = 0; i < params.size(); ++i) {
      // The old handle dies here: its release rides the next batch.
      params[i] = params[i] - lr * grads[i];
    }
  }

  ASSIGN_OR_RETURN(HostTensor logits, session.Fetch(logits_of(params)));
  ASSIGN_OR_RETURN(report.accuracy, ClassificationAccuracy(logits, data.labels,
                                                           data.num_classes));
  return report;
}

absl::StatusOr<double> ClassificationAccuracy(
    const HostTensor& logits, const std::vector<int32_t>& labels,
    int num_classes) {
  const int64_t n = static_cast<int64_t>(labels.size()), k = num_classes;
  if (n == 0 || logits.num_elements() != n * k) {
    return absl::InternalError(absl::StrCat("logits are ", logits.DebugString(),
                                            ", expected [", n, ",", k, "]"));
  }
  const std::vector<double> z = logits.ToDoubles();
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    for (int64_t c = 1; c < k; ++c) {
      if (z[i * k + c] > z[i * k + best]) best = c;
    }
    correct += best == labels[i];
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

}  // namespace gradtape::examples
