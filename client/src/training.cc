#include "gradtape/client/training.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/src/session_core.h"
#include "core/base/status_macros.h"
#include "gradtape/client/ops.h"

namespace gradtape::client {
namespace {

Tensor NewHandle(Session& session, const std::string& name, DType dtype,
                 const std::vector<int64_t>& shape) {
  return std::move(session.Execute(
      "VarHandleOp", {},
      {{"dtype", dtype}, {"shape", shape}, {"shared_name", name}}, 1)[0]);
}

absl::StatusOr<CheckpointInfo> CheckpointCall(Session& session,
                                              absl::string_view what,
                                              absl::string_view name,
                                              absl::Span<const Variable> vars,
                                              bool save) {
  internal::SessionCore& core = *session.core();
  v1::Command command;
  std::string problem;
  auto fill = [&](auto* cmd) {
    cmd->set_name(std::string(name));
    for (size_t i = 0; i < vars.size(); ++i) {
      cmd->add_variable_ids(
          core.IdFor(vars[i].handle(), absl::StrCat("variable ", i), &problem));
    }
  };
  if (save) {
    fill(command.mutable_save_checkpoint());
  } else {
    fill(command.mutable_restore_checkpoint());
  }
  if (!problem.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", name, "': ", problem));
  }
  ASSIGN_OR_RETURN(v1::CommandResult result, core.Call(std::move(command)));
  if (!result.has_checkpoint()) {
    return absl::InternalError(
        absl::StrCat(what, ": the server's result for command ", result.seq(),
                     " holds no checkpoint info"));
  }
  CheckpointInfo info;
  info.name = result.checkpoint().name();
  info.variables.assign(result.checkpoint().variable_names().begin(),
                        result.checkpoint().variable_names().end());
  info.file_bytes = result.checkpoint().file_bytes();
  return info;
}

}  // namespace

// ---------------------------------------------------------------------------
// Variable

Variable Variable::Create(Session& session, std::string name,
                          const HostTensor& initial) {
  return Create(session, std::move(name), session.Put(initial), initial.dtype,
                initial.shape);
}

Variable Variable::Create(Session& session, std::string name,
                          const Tensor& initial, DType dtype,
                          std::vector<int64_t> shape) {
  Variable var = Declare(session, std::move(name), dtype, std::move(shape));
  var.Assign(initial);
  return var;
}

Variable Variable::Declare(Session& session, std::string name, DType dtype,
                           std::vector<int64_t> shape) {
  Tensor handle = NewHandle(session, name, dtype, shape);
  return Variable(std::move(handle), std::move(name), dtype, std::move(shape));
}

Tensor Variable::Read() const {
  return std::move(Execute("ReadVariableOp", {handle_}, {}, 1)[0]);
}

void Variable::Assign(const Tensor& value) const {
  Execute("AssignVariableOp", {handle_, value}, {}, 0);
}

void Variable::AssignAdd(const Tensor& delta) const {
  Execute("AssignAddVariableOp", {handle_, delta}, {}, 0);
}

void Variable::AssignSub(const Tensor& delta) const {
  Execute("AssignSubVariableOp", {handle_, delta}, {}, 0);
}

// ---------------------------------------------------------------------------
// Checkpoints

absl::StatusOr<CheckpointInfo> SaveCheckpoint(Session& session,
                                              absl::string_view name,
                                              absl::Span<const Variable> vars) {
  return CheckpointCall(session, "SaveCheckpoint", name, vars, true);
}

absl::StatusOr<CheckpointInfo> RestoreCheckpoint(
    Session& session, absl::string_view name, absl::Span<const Variable> vars) {
  return CheckpointCall(session, "RestoreCheckpoint", name, vars, false);
}

// ---------------------------------------------------------------------------
// Optimizers

namespace optimizers {

Optimizer::Optimizer(Session& session, std::string name)
    : session_(session), name_(std::move(name)) {}

Optimizer::~Optimizer() = default;

Tensor Optimizer::Constant(double value) {
  return session_.Scalar(value, dtype_);
}

Variable Optimizer::MakeState(const std::string& suffix, double initial) {
  Variable v = Variable::Create(session_, absl::StrCat(name_, "/", suffix),
                                HostTensor::Filled(dtype_, {}, initial));
  state_.push_back(v);
  return v;
}

absl::Status Optimizer::CheckAndBuild(absl::Span<const Variable> vars,
                                      absl::Span<const Tensor> grads,
                                      bool apply) {
  const std::string what = absl::StrCat(name_, apply ? ".Apply" : ".Build");
  if (apply && vars.size() != grads.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", vars.size(),
                                                   " variables but ",
                                                   grads.size(), " gradients"));
  }
  DType dtype = dtype_;
  for (size_t i = 0; i < vars.size(); ++i) {
    const Variable& v = vars[i];
    if (v.is_null()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": variable ", i, " is null"));
    }
    if (apply && grads[i].is_null()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the gradient of variable '", v.name(),
                       "' is a null Tensor"));
    }
    if (v.dtype() != DType::kFloat32 && v.dtype() != DType::kFloat64) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": variable '", v.name(), "' is ", DTypeName(v.dtype()),
          "; optimizers take float32 or "
          "float64 variables"));
    }
    if (dtype == DType::kInvalid) dtype = v.dtype();
    if (v.dtype() != dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": variable '", v.name(), "' is ",
                       DTypeName(v.dtype()), " but this optimizer works in ",
                       DTypeName(dtype), "; use one optimizer per dtype"));
    }
  }
  if (dtype_ == DType::kInvalid && dtype != DType::kInvalid) {
    dtype_ = dtype;
    Prepare();
  }
  for (const Variable& v : vars) {
    const int64_t key = v.handle().id();
    if (slots_.count(key) > 0) continue;
    std::vector<Variable> slots;
    for (const auto& [slot, initial] : Slots()) {
      // BroadcastTo a scalar: no read of the variable, so slots can be made
      // for an uninitialized variable (before a restore).
      Tensor value = std::move(Execute("BroadcastTo", {Constant(initial)},
                                       {{"shape", v.shape()}}, 1)[0]);
      slots.push_back(Variable::Create(
          session_, absl::StrCat(v.name(), "/", name_, "/", slot), value,
          v.dtype(), v.shape()));
    }
    slots_.emplace(key, std::move(slots));
    order_.push_back(key);
  }
  return absl::OkStatus();
}

absl::Status Optimizer::Build(absl::Span<const Variable> vars) {
  return CheckAndBuild(vars, {}, false);
}

absl::Status Optimizer::Apply(absl::Span<const Variable> vars,
                              absl::Span<const Tensor> grads) {
  RETURN_IF_ERROR(CheckAndBuild(vars, grads, true));
  if (vars.empty()) return absl::OkStatus();
  BeginStep();
  for (size_t i = 0; i < vars.size(); ++i) {
    ApplyOne(vars[i], slots_.at(vars[i].handle().id()), grads[i]);
  }
  EndStep();
  return absl::OkStatus();
}

std::vector<Variable> Optimizer::variables() const {
  std::vector<Variable> out;
  for (int64_t key : order_) {
    const std::vector<Variable>& slots = slots_.at(key);
    out.insert(out.end(), slots.begin(), slots.end());
  }
  out.insert(out.end(), state_.begin(), state_.end());
  return out;
}

SGD::SGD(Session& session, double learning_rate, std::string name)
    : Optimizer(session, std::move(name)), learning_rate_(learning_rate) {}

void SGD::Prepare() { lr_ = Constant(learning_rate_); }

void SGD::ApplyOne(const Variable& var, const std::vector<Variable>&,
                   const Tensor& grad) {
  Execute("ResourceApplyGradientDescent", {var.handle(), lr_, grad}, {}, 0);
}

Momentum::Momentum(Session& session, double learning_rate, double momentum,
                   bool use_nesterov, std::string name)
    : Optimizer(session, std::move(name)),
      learning_rate_(learning_rate),
      momentum_(momentum),
      use_nesterov_(use_nesterov) {}

void Momentum::Prepare() {
  lr_ = Constant(learning_rate_);
  momentum_t_ = Constant(momentum_);
}

void Momentum::ApplyOne(const Variable& var, const std::vector<Variable>& slots,
                        const Tensor& grad) {
  Execute("ResourceApplyMomentum",
          {var.handle(), slots[0].handle(), lr_, grad, momentum_t_},
          {{"use_nesterov", use_nesterov_}}, 0);
}

Adam::Adam(Session& session, AdamOptions options)
    : Optimizer(session, options.name), options_(std::move(options)) {}

void Adam::Prepare() {
  lr_ = Constant(options_.learning_rate);
  beta1_ = Constant(options_.beta1);
  beta2_ = Constant(options_.beta2);
  epsilon_ = Constant(options_.epsilon);
  // beta^t for the coming step t = 1.
  beta1_power_ = MakeState("beta1_power", options_.beta1);
  beta2_power_ = MakeState("beta2_power", options_.beta2);
}

void Adam::BeginStep() {
  beta1_power_t_ = beta1_power_.Read();
  beta2_power_t_ = beta2_power_.Read();
}

void Adam::ApplyOne(const Variable& var, const std::vector<Variable>& slots,
                    const Tensor& grad) {
  Execute("ResourceApplyAdam",
          {var.handle(), slots[0].handle(), slots[1].handle(), beta1_power_t_,
           beta2_power_t_, lr_, beta1_, beta2_, epsilon_, grad},
          {{"use_nesterov", options_.use_nesterov}}, 0);
}

void Adam::EndStep() {
  // The reads above keep the old powers; the next step sees beta^(t+1).
  beta1_power_.Assign(Mul(beta1_power_t_, beta1_));
  beta2_power_.Assign(Mul(beta2_power_t_, beta2_));
  beta1_power_t_ = Tensor();
  beta2_power_t_ = Tensor();
}

Adagrad::Adagrad(Session& session, double learning_rate,
                 double initial_accumulator_value, std::string name)
    : Optimizer(session, std::move(name)),
      learning_rate_(learning_rate),
      initial_accumulator_value_(initial_accumulator_value) {}

void Adagrad::Prepare() { lr_ = Constant(learning_rate_); }

void Adagrad::ApplyOne(const Variable& var, const std::vector<Variable>& slots,
                       const Tensor& grad) {
  Execute("ResourceApplyAdagrad", {var.handle(), slots[0].handle(), lr_, grad},
          {}, 0);
}

RMSProp::RMSProp(Session& session, RMSPropOptions options)
    : Optimizer(session, options.name), options_(std::move(options)) {}

void RMSProp::Prepare() {
  lr_ = Constant(options_.learning_rate);
  rho_ = Constant(options_.rho);
  momentum_ = Constant(options_.momentum);
  epsilon_ = Constant(options_.epsilon);
}

void RMSProp::ApplyOne(const Variable& var, const std::vector<Variable>& slots,
                       const Tensor& grad) {
  Execute("ResourceApplyRMSProp",
          {var.handle(), slots[0].handle(), slots[1].handle(), lr_, rho_,
           momentum_, epsilon_, grad},
          {}, 0);
}

}  // namespace optimizers
}  // namespace gradtape::client
