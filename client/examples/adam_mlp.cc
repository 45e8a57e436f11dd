#include "client/examples/adam_mlp.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/status_macros.h"
#include "gradtape/client/ops.h"

namespace gradtape::examples {

using client::GradientTape;
using client::HostTensor;
using client::Tensor;
using client::Variable;

namespace {

client::optimizers::AdamOptions AdamFor(const AdamMlpOptions& options) {
  client::optimizers::AdamOptions adam;
  adam.learning_rate = options.learning_rate;
  adam.name = absl::StrCat(options.name, "/Adam");
  return adam;
}

}  // namespace

AdamMlp::AdamMlp(client::Session& session, const Dataset& data,
                 const AdamMlpOptions& options, bool initialize)
    : session_(session), data_(data), adam_(session, AdamFor(options)) {
  const client::DType dtype = options.dtype;
  const int64_t n = data.num_points;
  const int64_t k = data.num_classes;
  const int64_t h = options.hidden;
  x_ = session.Put(HostValues(dtype, {n, 2}, data.features));
  y_ = session.Put<int32_t>({n}, data.labels);
  const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"w1", {2, h}}, {"b1", {h}}, {"w2", {h, k}}, {"b2", {k}}};
  std::mt19937_64 gen(options.seed);
  for (const auto& [suffix, shape] : shapes) {
    const std::string name = absl::StrCat(options.name, "/", suffix);
    if (!initialize) {
      params_.push_back(Variable::Declare(session, name, dtype, shape));
    } else if (shape.size() == 2) {
      params_.push_back(Variable::Create(
          session, name, HeWeights(dtype, shape[0], shape[1], gen)));
    } else {
      params_.push_back(
          Variable::Create(session, name, HostTensor::Filled(dtype, shape, 0)));
    }
  }
  // Slots now, so that a restore finds them; cannot fail for these vars.
  (void)adam_.Build(params_);
}

Tensor AdamMlp::Logits() {
  const Tensor hidden = client::Relu(client::BiasAdd(
      client::MatMul(x_, params_[0].Read()), params_[1].Read()));
  return client::BiasAdd(client::MatMul(hidden, params_[2].Read()),
                         params_[3].Read());
}

Tensor AdamMlp::LossTensor() {
  return client::Mean(
      client::SparseSoftmaxCrossEntropyWithLogits(Logits(), y_).loss);
}

absl::Status AdamMlp::Train(int steps, int log_every,
                            const std::function<void(int, double)>& on_log) {
  std::vector<Tensor> handles;
  for (const Variable& v : params_) handles.push_back(v.handle());
  for (int step = 1; step <= steps; ++step) {
    // Watches the variables it reads (watch_accessed_variables).
    GradientTape tape(session_);
    const Tensor loss = LossTensor();
    tape.Stop();
    ASSIGN_OR_RETURN(std::vector<Tensor> grads, tape.Gradient(loss, handles));
    RETURN_IF_ERROR(adam_.Apply(params_, grads));
    if (log_every > 0 && step % log_every == 0) {
      // The only wait inside the loop: the loss before this step's update.
      ASSIGN_OR_RETURN(client::HostTensor value, session_.Fetch(loss));
      if (on_log) on_log(step, value.at(0));
    }
  }
  return session_.Sync();
}

absl::StatusOr<double> AdamMlp::Loss() {
  ASSIGN_OR_RETURN(client::HostTensor value, session_.Fetch(LossTensor()));
  return value.at(0);
}

absl::StatusOr<double> AdamMlp::Accuracy() {
  ASSIGN_OR_RETURN(client::HostTensor logits, session_.Fetch(Logits()));
  return ClassificationAccuracy(logits, data_.labels, data_.num_classes);
}

std::vector<Variable> AdamMlp::variables() const {
  std::vector<Variable> out = params_;
  for (const Variable& v : adam_.variables()) out.push_back(v);
  return out;
}

absl::StatusOr<client::CheckpointInfo> AdamMlp::Save(
    const std::string& checkpoint) {
  return client::SaveCheckpoint(session_, checkpoint, variables());
}

absl::StatusOr<client::CheckpointInfo> AdamMlp::Restore(
    const std::string& checkpoint) {
  return client::RestoreCheckpoint(session_, checkpoint, variables());
}

absl::StatusOr<TrainExampleReport> RunTrainExample(
    const std::string& address, const Dataset& data,
    const TrainExampleOptions& options,
    const std::function<void(int, double)>& on_log) {
  TrainExampleReport report;
  auto first = client::Session::Connect(address);
  if (!first.ok()) return first.status();
  AdamMlp model(**first, data, options.model);
  const absl::Time start = absl::Now();
  absl::Status trained =
      model.Train(options.steps, options.log_every, [&](int step, double loss) {
        report.losses.emplace_back(step, loss);
        if (on_log) on_log(step, loss);
      });
  if (!trained.ok()) return trained;
  report.train_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  ASSIGN_OR_RETURN(report.accuracy, model.Accuracy());
  ASSIGN_OR_RETURN(report.saved_loss, model.Loss());
  ASSIGN_OR_RETURN(report.checkpoint, model.Save(options.checkpoint));

  // A fresh session: same names, nothing initialized, then the restore.
  auto second = client::Session::Connect(address);
  if (!second.ok()) return second.status();
  AdamMlp restored(**second, data, options.model, /*initialize=*/false);
  ASSIGN_OR_RETURN(client::CheckpointInfo info,
                   restored.Restore(options.checkpoint));
  ASSIGN_OR_RETURN(report.restored_loss, restored.Loss());

  // Same steps on both: equal only if Adam's slots and step came back too.
  for (AdamMlp* m : {&model, &restored}) {
    RETURN_IF_ERROR(m->Train(options.steps_after_restore));
  }
  ASSIGN_OR_RETURN(report.continued_loss, model.Loss());
  ASSIGN_OR_RETURN(report.continued_restored_loss, restored.Loss());
  report.batches_sent = (*first)->counters().batches_sent;
  RETURN_IF_ERROR((*second)->Close());
  RETURN_IF_ERROR((*first)->Close());
  return report;
}

}  // namespace gradtape::examples
