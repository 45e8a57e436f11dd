// gradtape-mlp-demo: trains a 2-layer MLP on a synthetic 3-class spiral,
// entirely on a gradtape server, and prints the loss and final accuracy.
//
//   gradtape-mlp-demo --address=127.0.0.1:50051 --steps=2000 --seed=1
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/clock.h"
#include "client/examples/mlp.h"
#include "gradtape/client/session.h"

ABSL_FLAG(std::string, address, "127.0.0.1:50051", "gradtape server address");
ABSL_FLAG(int, steps, 2000, "SGD steps");
ABSL_FLAG(uint64_t, seed, 1, "seed of the data set and the weights");
ABSL_FLAG(std::string, dataset, "spiral", "spiral or blobs");
ABSL_FLAG(int, points_per_class, 100, "points per class");
ABSL_FLAG(int, hidden, 64, "hidden units");
ABSL_FLAG(double, learning_rate, 1.0, "SGD learning rate");
ABSL_FLAG(int, log_every, 200, "print the loss every this many steps");
ABSL_FLAG(int, batch_size, 512, "commands per batch sent to the server");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Trains a 2-layer MLP on a synthetic 3-class data set on a gradtape "
      "server.");
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

  const std::string address = absl::GetFlag(FLAGS_address);
  gradtape::client::SessionOptions session_options;
  session_options.batch_size = absl::GetFlag(FLAGS_batch_size);
  auto session = gradtape::client::Session::Connect(address, session_options);
  if (!session.ok()) {
    std::fprintf(stderr, "cannot connect to %s: %s\n", address.c_str(),
                 session.status().ToString().c_str());
    return 1;
  }
  std::printf("session %s on %s: %s, %lld points, %d classes\n",
              (*session)->id().c_str(), address.c_str(), dataset.c_str(),
              static_cast<long long>(data.num_points), data.num_classes);

  ex::MlpOptions options;
  options.steps = absl::GetFlag(FLAGS_steps);
  options.hidden = absl::GetFlag(FLAGS_hidden);
  options.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  options.log_every = absl::GetFlag(FLAGS_log_every);
  options.seed = seed;
  const absl::Time start = absl::Now();
  absl::StatusOr<ex::MlpReport> report =
      ex::TrainMlp(**session, data, options, [](int step, double loss) {
        std::printf("step %5d  loss %.4f\n", step, loss);
        std::fflush(stdout);
      });
  if (!report.ok()) {
    std::fprintf(stderr, "training failed: %s\n",
                 report.status().ToString().c_str());
    return 1;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const gradtape::client::ClientCounters counters = (*session)->counters();
  std::printf("final accuracy %.3f (loss %.4f) after %d steps in %.2f s\n",
              report->accuracy, report->final_loss, options.steps, seconds);
  std::printf("sent %lld commands in %lld batches\n",
              static_cast<long long>(counters.commands_sent),
              static_cast<long long>(counters.batches_sent));
  if (absl::Status s = (*session)->Close(); !s.ok()) {
    std::fprintf(stderr, "close: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
