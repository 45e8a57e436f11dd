// The training example (client/examples/adam_mlp.h) against an in-process
// server on loopback with a temporary checkpoint directory: Adam on server
// variables reaches the stated accuracy, and the checkpoint restored into a
// fresh session reproduces the loss exactly, also after more steps (so the
// optimizer's slots and step count were restored). Plus the client pieces:
// Variable, each optimizer wrapper against a host computation, checkpoint
// errors as statuses.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/examples/adam_mlp.h"
#include "gradtape/client/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/temp_dir.h"

namespace gradtape::client {
namespace {

class TrainingClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    server::ServerOptions options;
    options.address = "127.0.0.1:0";
    options.checkpoint_dir = dir_.path();
    auto server = server::Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override { server_.reset(); }
  std::unique_ptr<Session> Connect() {
    auto s = Session::Connect(server_->address());
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  testing::TempDir dir_;  // outlives server_ (declared first)
  std::unique_ptr<server::Server> server_;
};

TEST_F(TrainingClientTest, AdamMlpTrainsAndTheRestoredSessionReproducesIt) {
  const examples::Dataset data = examples::MakeSpiral(100, 3, 0.2, 1);
  examples::TrainExampleOptions options;
  options.steps = 600;
  options.log_every = 100;
  absl::StatusOr<examples::TrainExampleReport> report =
      examples::RunTrainExample(server_->address(), data, options);
  ASSERT_TRUE(report.ok()) << report.status();
  // Stated accuracy: a 32-unit MLP fits the 3-arm spiral to >= 95% in 600
  // full-batch Adam steps (lr 0.02).
  EXPECT_GE(report->accuracy, 0.95);
  ASSERT_EQ(report->losses.size(), 6u);
  EXPECT_LT(report->losses.back().second, report->losses.front().second);
  EXPECT_LT(report->saved_loss, 0.2);
  // 4 parameters, 8 Adam slots, 2 beta powers.
  EXPECT_EQ(report->checkpoint.variables.size(), 14u);
  // Exact, not approximately equal.
  EXPECT_EQ(report->restored_loss, report->saved_loss);
  EXPECT_EQ(report->continued_restored_loss, report->continued_loss);
  EXPECT_NE(report->continued_loss, report->saved_loss);
  // Pipelined: far fewer batches than steps (one per logged loss, plus the
  // wait points after training).
  EXPECT_LT(report->batches_sent, options.steps / 10);
}

TEST_F(TrainingClientTest, VariableCreateReadAssign) {
  std::unique_ptr<Session> s = Connect();
  ASSERT_NE(s, nullptr);
  Variable a = Variable::Create(
      *s, "a", HostTensor::FromVector<double>({2}, {1.0, 2.0}));
  Tensor t = s->Put<double>({2}, {10, 20});
  Variable b = Variable::Create(*s, "b", t, DType::kFloat64, {2});
  const Tensor before = a.Read();
  a.AssignAdd(b.Read());
  const Tensor middle = a.Read();
  a.AssignSub(s->Put<double>({2}, {1, 1}));
  b.Assign(s->Put<double>({2}, {0, 0}));
  auto values = [&](const Tensor& x) {
    absl::StatusOr<HostTensor> v = s->Fetch(x);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? v->ToDoubles() : std::vector<double>{};
  };
  EXPECT_EQ(values(before), (std::vector<double>{1, 2}));
  EXPECT_EQ(values(middle), (std::vector<double>{11, 22}));
  EXPECT_EQ(values(a.Read()), (std::vector<double>{10, 21}));
  EXPECT_EQ(values(b.Read()), (std::vector<double>{0, 0}));
  EXPECT_EQ(values(t), (std::vector<double>{10, 20}));  // a copy was assigned
  Variable u = Variable::Declare(*s, "u", DType::kFloat64, {2});
  absl::StatusOr<HostTensor> uninit = s->Fetch(u.Read());
  EXPECT_EQ(uninit.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(uninit.status().message(), "'u'"))
      << uninit.status();
  EXPECT_TRUE(s->Sync().ok());
}

// Each wrapper, two steps on a float64 vector, against the formulas
// evaluated on the host (the ops themselves are checked against reference
// values in tests/core/ops/training_ops_test.cc).
TEST_F(TrainingClientTest, OptimizerWrappersMatchTheHostFormulas) {
  std::unique_ptr<Session> s = Connect();
  ASSERT_NE(s, nullptr);
  const std::vector<double> w0 = {1.0, -2.0};
  const std::vector<std::vector<double>> g = {{0.5, -1.0}, {0.25, 2.0}};
  auto run = [&](optimizers::Optimizer& opt, const std::string& name) {
    Variable w =
        Variable::Create(*s, name, HostTensor::FromVector<double>({2}, w0));
    for (const auto& grad : g) {
      EXPECT_TRUE(opt.Apply({w}, {s->Put<double>({2}, grad)}).ok());
    }
    absl::StatusOr<HostTensor> v = s->Fetch(w.Read());
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? v->ToDoubles() : std::vector<double>(2);
  };
  auto near = [](const std::vector<double>& got,
                 const std::vector<double>& want, const std::string& what) {
    for (int i = 0; i < 2; ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-12) << what << " element " << i;
    }
  };
  {
    optimizers::SGD sgd(*s, 0.1);
    near(run(sgd, "sgd"), {1 - 0.1 * 0.75, -2 - 0.1 * 1.0}, "SGD");
  }
  {
    optimizers::Momentum mom(*s, 0.1, 0.9);
    std::vector<double> w = w0, acc = {0, 0};
    for (const auto& grad : g) {
      for (int i = 0; i < 2; ++i) {
        acc[i] = acc[i] * 0.9 + grad[i];
        w[i] -= 0.1 * acc[i];
      }
    }
    near(run(mom, "momentum"), w, "Momentum");
  }
  {
    optimizers::AdamOptions options;
    options.learning_rate = 0.1;
    optimizers::Adam adam(*s, options);
    std::vector<double> w = w0, m = {0, 0}, v = {0, 0};
    for (int t = 1; t <= 2; ++t) {
      const double alpha =
          0.1 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
      for (int i = 0; i < 2; ++i) {
        const double gi = g[t - 1][i];
        m[i] += (gi - m[i]) * 0.1;
        v[i] += (gi * gi - v[i]) * 0.001;
        w[i] -= m[i] * alpha / (std::sqrt(v[i]) + 1e-7);
      }
    }
    near(run(adam, "adam"), w, "Adam");
    EXPECT_EQ(adam.variables().size(), 4u);  // m, v, beta1_power, beta2_power
  }
  {
    optimizers::Adagrad adagrad(*s, 0.1);
    std::vector<double> w = w0, acc = {0.1, 0.1};
    for (const auto& grad : g) {
      for (int i = 0; i < 2; ++i) {
        acc[i] += grad[i] * grad[i];
        w[i] -= 0.1 * grad[i] / std::sqrt(acc[i]);
      }
    }
    near(run(adagrad, "adagrad"), w, "Adagrad");
  }
  {
    optimizers::RMSPropOptions options;
    options.learning_rate = 0.01;
    options.momentum = 0.5;
    optimizers::RMSProp rms(*s, options);
    std::vector<double> w = w0, ms = {1, 1}, mom = {0, 0};
    for (const auto& grad : g) {
      for (int i = 0; i < 2; ++i) {
        ms[i] += (grad[i] * grad[i] - ms[i]) * 0.1;
        mom[i] = mom[i] * 0.5 + 0.01 * grad[i] / std::sqrt(ms[i] + 1e-7);
        w[i] -= mom[i];
      }
    }
    near(run(rms, "rmsprop"), w, "RMSProp");
  }
  EXPECT_TRUE(s->Sync().ok());
}

TEST_F(TrainingClientTest, LocalMisuseAndCheckpointErrors) {
  std::unique_ptr<Session> s = Connect();
  ASSERT_NE(s, nullptr);
  Variable w = Variable::Create(
      *s, "w", HostTensor::FromVector<float>({2}, {1.0f, 2.0f}));
  Variable d = Variable::Create(
      *s, "d", HostTensor::FromVector<double>({2}, {1.0, 2.0}));
  optimizers::SGD sgd(*s, 0.1);
  EXPECT_EQ(sgd.Apply({w}, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sgd.Apply({w}, {Tensor()}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(sgd.Apply({w}, {s->Put<float>({2}, {1, 1})}).ok());
  absl::Status mixed = sgd.Apply({d}, {s->Put<double>({2}, {1, 1})});
  EXPECT_EQ(mixed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(mixed.message(), "float32")) << mixed;

  absl::StatusOr<CheckpointInfo> bad = SaveCheckpoint(*s, "../x");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<CheckpointInfo> missing = RestoreCheckpoint(*s, "nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<CheckpointInfo> saved = SaveCheckpoint(*s, "wd", {w, d});
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->variables, (std::vector<std::string>{"w", "d"}));
  // The session keeps working after the failures.
  absl::StatusOr<HostTensor> value = s->Fetch(w.Read());
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_NEAR(value->at(0), 0.9, 1e-6);
  EXPECT_NEAR(value->at(1), 1.9, 1e-6);
}

}  // namespace
}  // namespace gradtape::client
