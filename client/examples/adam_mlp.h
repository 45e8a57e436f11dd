// An MLP classifier trained with Adam entirely on a gradtape server, then
// checkpointed and restored into a fresh session: the logic of
// gradtape-train-example, shared with tests/client/train_example_test.cc.
//
// Model: logits = relu(x @ w1 + b1) @ w2 + b2; loss = mean(sparse softmax
// cross-entropy). The parameters are server variables, Adam's slots and
// step state are server variables too (optimizers::Adam), and a step is a
// run of buffered commands: reads under a tape, the gradient, one
// ResourceApplyAdam per parameter. The client waits only to read the loss
// every `log_every` steps.
#ifndef GRADTAPE_CLIENT_EXAMPLES_ADAM_MLP_H_
#define GRADTAPE_CLIENT_EXAMPLES_ADAM_MLP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/examples/mlp.h"
#include "gradtape/client/session.h"
#include "gradtape/client/training.h"

namespace gradtape::examples {

struct AdamMlpOptions {
  int hidden = 32;
  double learning_rate = 0.02;
  uint64_t seed = 1;  // weight initialisation
  client::DType dtype = client::DType::kFloat32;
  std::string name = "mlp";  // variable names: "<name>/w1", ...
};

// The model and its optimizer on one session. The Session must outlive it.
class AdamMlp {
 public:
  // Creates the data tensors, the parameters and Adam's state on `session`.
  // With `initialize` the parameters get He-initialised values (from
  // options.seed); without, they are declared uninitialized, ready for
  // Restore.
  AdamMlp(client::Session& session, const Dataset& data,
          const AdamMlpOptions& options, bool initialize = true);

  // `steps` Adam steps. Pipelined: the loss is fetched (a wait point) only
  // every `log_every` steps (0: never) and reported to on_log(step, loss),
  // step counting from the start of this call.
  absl::Status Train(int steps, int log_every = 0,
                     const std::function<void(int, double)>& on_log = nullptr);
  // Wait point: the full-batch loss with the current parameters.
  absl::StatusOr<double> Loss();
  // Wait point: training-set accuracy (argmax of the logits).
  absl::StatusOr<double> Accuracy();

  // Parameters, then Adam's slots and beta powers: what a checkpoint holds.
  std::vector<client::Variable> variables() const;
  absl::StatusOr<client::CheckpointInfo> Save(const std::string& checkpoint);
  absl::StatusOr<client::CheckpointInfo> Restore(const std::string& checkpoint);

 private:
  client::Tensor Logits();
  client::Tensor LossTensor();

  client::Session& session_;
  const Dataset& data_;
  client::Tensor x_, y_;
  std::vector<client::Variable> params_;  // w1, b1, w2, b2
  client::optimizers::Adam adam_;
};

struct TrainExampleOptions {
  AdamMlpOptions model;
  int steps = 600;
  int log_every = 100;
  // Steps run after the restore in both sessions, to show the optimizer
  // state came back too (the losses must agree exactly).
  int steps_after_restore = 20;
  std::string checkpoint = "adam-mlp";
};

struct TrainExampleReport {
  std::vector<std::pair<int, double>> losses;  // logged in the first session
  double accuracy = 0;                         // after training, first session
  double saved_loss = 0;     // first session, at the checkpoint
  double restored_loss = 0;  // the fresh session, right after the restore
  // Both sessions after steps_after_restore more steps.
  double continued_loss = 0;
  double continued_restored_loss = 0;
  client::CheckpointInfo checkpoint;
  int64_t batches_sent = 0;  // first session, whole run
  double train_seconds = 0;
};

// The whole example against the server at `address` (which needs a
// checkpoint directory): train in one session, save, restore into a fresh
// session, compare losses, train both a little further and compare again.
absl::StatusOr<TrainExampleReport> RunTrainExample(
    const std::string& address, const Dataset& data,
    const TrainExampleOptions& options,
    const std::function<void(int, double)>& on_log = nullptr);

}  // namespace gradtape::examples

#endif  // GRADTAPE_CLIENT_EXAMPLES_ADAM_MLP_H_
