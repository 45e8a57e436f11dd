// gradtape-train-example: trains an MLP with Adam entirely on a gradtape
// server (parameters and optimizer state are server variables; no wait
// inside a step except reading the loss every --log_every steps), saves a
// checkpoint, restores it into a fresh session and shows the same loss.
//
//   gradtape-server --checkpoint_dir=/tmp/gradtape-checkpoints &
//   gradtape-train-example --address=127.0.0.1:50051 --steps=600
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "client/examples/adam_mlp.h"

ABSL_FLAG(std::string, address, "127.0.0.1:50051", "gradtape server address");
ABSL_FLAG(int, steps, 600, "Adam steps");
ABSL_FLAG(double, learning_rate, 0.02, "Adam learning rate");
ABSL_FLAG(int, hidden, 32, "hidden units");
ABSL_FLAG(uint64_t, seed, 1, "seed of the data set and the weights");
ABSL_FLAG(std::string, dataset, "spiral", "spiral or blobs");
ABSL_FLAG(int, points_per_class, 100, "points per class");
ABSL_FLAG(int, log_every, 100, "print the loss every this many steps");
ABSL_FLAG(std::string, checkpoint, "adam-mlp",
          "checkpoint name (a file in the server's --checkpoint_dir)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Trains an MLP with Adam on a gradtape server, checkpoints it and "
      "restores it into a fresh session.");
  absl::ParseCommandLine(argc, argv);
  namespace ex = gradtape::examples;

  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const int ppc = absl::GetFlag(FLAGS_points_per_class);
  const std::string dataset = absl::GetFlag(FLAGS_dataset);
  absl::StatusOr<ex::Dataset> made = ex::MakeDataset(dataset, ppc, seed);
  if (!made.ok()) {
    std::fprintf(stderr, "--dataset: %s\n",
                 std::string(made.status().message()).c_str());
    return 2;
  }
  const ex::Dataset& data = *made;

  ex::TrainExampleOptions options;
  options.steps = absl::GetFlag(FLAGS_steps);
  options.log_every = absl::GetFlag(FLAGS_log_every);
  options.checkpoint = absl::GetFlag(FLAGS_checkpoint);
  options.model.hidden = absl::GetFlag(FLAGS_hidden);
  options.model.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  options.model.seed = seed;
  const std::string address = absl::GetFlag(FLAGS_address);
  std::printf("%s: %lld points, %d classes; Adam lr %g on %s\n",
              dataset.c_str(), static_cast<long long>(data.num_points),
              data.num_classes, options.model.learning_rate, address.c_str());
  absl::StatusOr<ex::TrainExampleReport> report =
      ex::RunTrainExample(address, data, options, [](int step, double loss) {
        std::printf("step %5d  loss %.6f\n", step, loss);
        std::fflush(stdout);
      });
  if (!report.ok()) {
    std::fprintf(stderr, "train example failed: %s\n",
                 report.status().ToString().c_str());
    return 1;
  }
  std::printf("trained %d steps in %.2f s (%lld batches sent): accuracy %.3f\n",
              options.steps, report->train_seconds,
              static_cast<long long>(report->batches_sent), report->accuracy);
  std::printf("checkpoint '%s': %zu variables, %lld bytes\n",
              report->checkpoint.name.c_str(),
              report->checkpoint.variables.size(),
              static_cast<long long>(report->checkpoint.file_bytes));
  std::printf("loss at save       %.9g\n", report->saved_loss);
  std::printf(
      "loss after restore %.9g (fresh session) %s\n", report->restored_loss,
      report->restored_loss == report->saved_loss ? "identical" : "DIFFERENT");
  std::printf(
      "%d more steps:     %.9g vs %.9g %s\n", options.steps_after_restore,
      report->continued_loss, report->continued_restored_loss,
      report->continued_loss == report->continued_restored_loss ? "identical"
                                                                : "DIFFERENT");
  const bool same = report->restored_loss == report->saved_loss &&
                    report->continued_loss == report->continued_restored_loss;
  return same ? 0 : 1;
}
