// Training on the server: variables, optimizers and checkpoints for the
// gradtape C++ client.
//
// Everything here is built from ops and commands of the session (see
// session.h): creating a variable, reading it, assigning it and applying an
// optimizer are buffered like any op and never wait for the server. Only the
// checkpoint calls are wait points. So a training step (forward under a
// tape, gradient, optimizer update) is a run of buffered commands, and the
// parameters, gradients and optimizer state never leave the server.
//
//   Variable w = Variable::Create(session, "dense/w", HostTensor...);
//   optimizers::Adam adam(session);  // AdamOptions: learning_rate, ...
//   for (...) {
//     GradientTape tape(session);  // watches the variables it reads
//     Tensor loss = LossOf(w.Read(), ...);
//     tape.Stop();
//     auto grads = tape.Gradient(loss, {w.handle()});
//     adam.Apply({w}, *grads);
//   }
//   SaveCheckpoint(session, "model");  // w and Adam's slots
//
// Thread-safety: as for Session; an optimizer is used by one thread at a
// time.
#ifndef GRADTAPE_CLIENT_TRAINING_H_
#define GRADTAPE_CLIENT_TRAINING_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "gradtape/client/host_tensor.h"
#include "gradtape/client/session.h"

namespace gradtape::client {

// A resource variable on the server (VarHandleOp): a handle plus the
// variable's name, dtype and shape, known to the client. Copies share the
// variable. The name (VarHandleOp's shared_name) is what checkpoints match
// on, so give every variable of a model a distinct, stable name.
//
// A variable is kept alive by its handle (and by whatever on the server
// still refers to it); the client releases the handle when the last copy of
// the Variable is gone.
class Variable {
 public:
  Variable() = default;

  // VarHandleOp, then AssignVariableOp with `initial` (sent with Put).
  static Variable Create(Session& session, std::string name,
                         const HostTensor& initial);
  // VarHandleOp, then AssignVariableOp with the server tensor `initial`,
  // which must have `dtype` and `shape` (checked by the server: a mismatch
  // surfaces at the next wait point and leaves the variable uninitialized).
  static Variable Create(Session& session, std::string name,
                         const Tensor& initial, DType dtype,
                         std::vector<int64_t> shape);
  // VarHandleOp only: an uninitialized variable (reading it fails with
  // FAILED_PRECONDITION until it is assigned or restored from a checkpoint).
  static Variable Declare(Session& session, std::string name, DType dtype,
                          std::vector<int64_t> shape);

  bool is_null() const { return handle_.is_null(); }
  const Tensor& handle() const { return handle_; }
  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }

  // ReadVariableOp: the current value. Recorded on tapes that watch the
  // handle or were started with watch_accessed_variables (the default), so
  // tape.Gradient(loss, {v.handle()}) is d loss / d v.
  Tensor Read() const;
  // AssignVariableOp / AssignAddVariableOp / AssignSubVariableOp (same
  // dtype and shape). A tensor read before keeps the old value.
  void Assign(const Tensor& value) const;
  void AssignAdd(const Tensor& delta) const;
  void AssignSub(const Tensor& delta) const;

 private:
  Variable(Tensor handle, std::string name, DType dtype,
           std::vector<int64_t> shape)
      : handle_(std::move(handle)),
        name_(std::move(name)),
        dtype_(dtype),
        shape_(std::move(shape)) {}

  Tensor handle_;
  std::string name_;
  DType dtype_ = DType::kInvalid;
  std::vector<int64_t> shape_;
};

// gradtape.v1.CheckpointInfo.
struct CheckpointInfo {
  std::string name;
  std::vector<std::string> variables;  // saved (file order) or restored
  int64_t file_bytes = 0;
};

// Wait points: SaveCheckpoint / RestoreCheckpoint commands, after every
// earlier command of the session. `variables` empty means every variable
// whose handle the session holds. Checkpoints live in the server's
// checkpoint directory (docs/CHECKPOINT_FORMAT.md); variables are matched by
// name, and a restore assigns all of them or none. Errors: the session's
// first unreported error, or this command's (INVALID_ARGUMENT for a bad
// name, NOT_FOUND for a missing checkpoint or variable, DATA_LOSS for a
// damaged file, FAILED_PRECONDITION when the server has no checkpoint
// directory).
absl::StatusOr<CheckpointInfo> SaveCheckpoint(
    Session& session, absl::string_view name,
    absl::Span<const Variable> variables = {});
absl::StatusOr<CheckpointInfo> RestoreCheckpoint(
    Session& session, absl::string_view name,
    absl::Span<const Variable> variables = {});

namespace optimizers {

// Base of the optimizers: applies one server op per variable
// (ResourceApply*), with slot variables created on the server next to each
// variable, named "<variable>/<optimizer name>/<slot>". Nothing waits.
//
// The optimizer's dtype is that of the first variable it sees; all
// variables must share it (float32 or float64). Hyperparameters are sent
// once as scalars. The Session must outlive the optimizer.
class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Creates the slots of `vars` now (Apply does it on first use). Call it
  // before RestoreCheckpoint in a fresh session, so the slots exist to be
  // restored. Fails (locally) like Apply.
  absl::Status Build(absl::Span<const Variable> vars);
  // Buffers one update per (variable, gradient) pair. Local errors only
  // (INVALID_ARGUMENT): different lengths, a null variable or gradient, a
  // dtype other than the optimizer's; nothing is sent then. Server errors
  // (shape mismatch, ...) surface at the next wait point.
  absl::Status Apply(absl::Span<const Variable> vars,
                     absl::Span<const Tensor> grads);

  // The optimizer's own variables: slots (by variable, in Build order),
  // then step state (Adam's beta powers). For checkpoints.
  std::vector<Variable> variables() const;
  const std::string& name() const { return name_; }

 protected:
  Optimizer(Session& session, std::string name);

  // Slot names and initial values, in the op's input order.
  virtual std::vector<std::pair<std::string, double>> Slots() const = 0;
  // Called once with the optimizer's dtype, before any slot exists.
  virtual void Prepare() {}
  // Buffers the update of one variable.
  virtual void ApplyOne(const Variable& var, const std::vector<Variable>& slots,
                        const Tensor& grad) = 0;
  // Around the per-variable updates of one Apply.
  virtual void BeginStep() {}
  virtual void EndStep() {}

  // A scalar of the optimizer's dtype (sent once per call; keep it).
  Tensor Constant(double value);
  // A non-slot variable of the optimizer, "<optimizer name>/<suffix>".
  Variable MakeState(const std::string& suffix, double initial);
  DType dtype() const { return dtype_; }
  Session& session() { return session_; }

 private:
  absl::Status CheckAndBuild(absl::Span<const Variable> vars,
                             absl::Span<const Tensor> grads, bool apply);

  Session& session_;
  std::string name_;
  DType dtype_ = DType::kInvalid;
  // Slots by handle id, and the order variables were built in.
  std::map<int64_t, std::vector<Variable>> slots_;
  std::vector<int64_t> order_;
  std::vector<Variable> state_;
};

// var -= learning_rate * grad (ResourceApplyGradientDescent).
class SGD : public Optimizer {
 public:
  explicit SGD(Session& session, double learning_rate = 0.01,
               std::string name = "SGD");

 protected:
  std::vector<std::pair<std::string, double>> Slots() const override {
    return {};
  }
  void Prepare() override;
  void ApplyOne(const Variable& var, const std::vector<Variable>& slots,
                const Tensor& grad) override;

 private:
  double learning_rate_;
  Tensor lr_;
};

// ResourceApplyMomentum: slot "momentum" (zeros).
class Momentum : public Optimizer {
 public:
  Momentum(Session& session, double learning_rate, double momentum,
           bool use_nesterov = false, std::string name = "Momentum");

 protected:
  std::vector<std::pair<std::string, double>> Slots() const override {
    return {{"momentum", 0.0}};
  }
  void Prepare() override;
  void ApplyOne(const Variable& var, const std::vector<Variable>& slots,
                const Tensor& grad) override;

 private:
  double learning_rate_, momentum_;
  bool use_nesterov_;
  Tensor lr_, momentum_t_;
};

struct AdamOptions {
  double learning_rate = 0.001;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-7;
  bool use_nesterov = false;
  std::string name = "Adam";
};

// ResourceApplyAdam: slots "m" and "v" (zeros); beta1^t and beta2^t are
// server variables "<name>/beta1_power", "<name>/beta2_power" (TensorFlow
// 1's AdamOptimizer), multiplied by beta after every Apply, so the step
// count is saved with a checkpoint.
class Adam : public Optimizer {
 public:
  explicit Adam(Session& session, AdamOptions options = {});

 protected:
  std::vector<std::pair<std::string, double>> Slots() const override {
    return {{"m", 0.0}, {"v", 0.0}};
  }
  void Prepare() override;
  void BeginStep() override;
  void ApplyOne(const Variable& var, const std::vector<Variable>& slots,
                const Tensor& grad) override;
  void EndStep() override;

 private:
  AdamOptions options_;
  Tensor lr_, beta1_, beta2_, epsilon_;
  Variable beta1_power_, beta2_power_;
  Tensor beta1_power_t_, beta2_power_t_;  // read at the start of a step
};

// ResourceApplyAdagrad: slot "accumulator" (initial_accumulator_value).
class Adagrad : public Optimizer {
 public:
  Adagrad(Session& session, double learning_rate,
          double initial_accumulator_value = 0.1, std::string name = "Adagrad");

 protected:
  std::vector<std::pair<std::string, double>> Slots() const override {
    return {{"accumulator", initial_accumulator_value_}};
  }
  void Prepare() override;
  void ApplyOne(const Variable& var, const std::vector<Variable>& slots,
                const Tensor& grad) override;

 private:
  double learning_rate_, initial_accumulator_value_;
  Tensor lr_;
};

struct RMSPropOptions {
  double learning_rate = 0.001;
  double rho = 0.9;
  double momentum = 0.0;
  double epsilon = 1e-7;
  std::string name = "RMSProp";
};

// ResourceApplyRMSProp: slots "rms" (ones, as TensorFlow 1's
// RMSPropOptimizer) and "momentum" (zeros).
class RMSProp : public Optimizer {
 public:
  explicit RMSProp(Session& session, RMSPropOptions options = {});

 protected:
  std::vector<std::pair<std::string, double>> Slots() const override {
    return {{"rms", 1.0}, {"momentum", 0.0}};
  }
  void Prepare() override;
  void ApplyOne(const Variable& var, const std::vector<Variable>& slots,
                const Tensor& grad) override;

 private:
  RMSPropOptions options_;
  Tensor lr_, rho_, momentum_, epsilon_;
};

}  // namespace optimizers
}  // namespace gradtape::client

#endif  // GRADTAPE_CLIENT_TRAINING_H_
