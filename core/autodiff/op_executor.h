// OpExecutor: runs the ops of one session. Every op -- a client's, or one a
// backward function runs -- goes through Execute, which runs the kernel,
// gives the outputs fresh tensor ids and records the op on the tapes that
// watch an input. That is why gradients of gradients need nothing special.
// Gradients are computed by Gradient (core/autodiff/gradient.h) on top of it.
//
// Not thread-safe: owned by a session, guarded by its lock.
#ifndef GRADTAPE_CORE_AUTODIFF_OP_EXECUTOR_H_
#define GRADTAPE_CORE_AUTODIFF_OP_EXECUTOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/autodiff/forward_mode.h"
#include "core/autodiff/tape.h"
#include "core/registry/op_registry.h"
#include "core/tensor/attrs.h"
#include "core/tensor/tensor.h"

namespace gradtape {

// What a gradient (or Jacobian) gives a source the targets do not depend
// on: None (an invalid Tensor) or zeros.
enum class Unconnected { kNone, kZero };
struct GradientProgram;

class OpExecutor {
 public:
  explicit OpExecutor(const OpRegistry& registry) : registry_(registry) {}
  OpExecutor(const OpExecutor&) = delete;
  OpExecutor& operator=(const OpExecutor&) = delete;

  const OpRegistry& registry() const { return registry_; }
  // Sets the session's limit (0: none). Tensor allocations are refused
  // before they exceed it or an ancestor's (Tensor::Empty); an op also fails
  // with RESOURCE_EXHAUSTED when, after the kernel ran, one of them is past
  // its limit through bookkeeping that is charged without a check (tape chunks,
  // failure reasons). Nothing is recorded then.
  void SetMemoryLimit(std::shared_ptr<MemoryAccount> account,
                      int64_t limit_bytes) {
    account_ = std::move(account);
    memory_limit_ = limit_bytes;
    account_->set_limit(limit_bytes);
  }
  TapeSet& tapes() { return tapes_; }
  const TapeSet& tapes() const { return tapes_; }

  // Runs `op`. `attrs` are checked and completed with defaults. On success
  // `outputs` holds the op's outputs with fresh ids, the op is recorded
  // on every active tape that watches one of the inputs, and active forward
  // accumulators computed the outputs' tangents. On error nothing changed.
  // With `custom` (core/autodiff/custom_gradient.h), the tapes record the op
  // with that backward instead of the registered one (even if the op is not
  // differentiable).
  absl::Status Execute(const OpDef& op, absl::Span<const Tensor> inputs,
                       AttrMap attrs, Tensors* outputs,
                       std::shared_ptr<const GradientProgram> custom = nullptr);
  // Execute by name (NOT_FOUND for an unknown op).
  absl::Status Execute(absl::string_view op_name,
                       absl::Span<const Tensor> inputs, AttrMap attrs,
                       Tensors* outputs);

  // RESOURCE_EXHAUSTED "<what>: ..." if the account or an ancestor (the
  // tenant's, the process's) is over its limit.
  absl::Status CheckMemoryLimit(absl::string_view what) const;

  AccumulatorSet& accumulators() { return accumulators_; }
  const AccumulatorSet& accumulators() const { return accumulators_; }
  // Tensor `id` has no handle any more (released, or an intermediate): it
  // leaves every tape (DeleteTrace) and every accumulator (with the tangents
  // only accumulators held).
  void Forget(int64_t id);

  // Collects in `ids` the ids of the tensors ops create while it lives.
  // Scopes nest; an inner scope hides its ids from the outer one, except
  // those it passes up.
  class ScopedCreatedIds {
   public:
    ScopedCreatedIds(OpExecutor& ctx, std::vector<int64_t>* ids)
        : ctx_(ctx), outer_(ctx.created_ids_) {
      ctx.created_ids_ = ids;
    }
    ~ScopedCreatedIds() { ctx_.created_ids_ = outer_; }
    // Reports `id` to the enclosing scope, if any.
    void PassUp(int64_t id) {
      if (outer_ != nullptr) outer_->push_back(id);
    }

   private:
    OpExecutor& ctx_;
    std::vector<int64_t>* outer_;
  };

  // Sees every op Execute runs and every constant a backward makes, while
  // set: a program's plan is traced this way (core/autodiff/program_plan.h).
  class Observer {
   public:
    virtual ~Observer() = default;
    // After `op` (as declared; `attrs` resolved) ran and its outputs got ids.
    virtual void Executed(const OpDef& op, const AttrMap& attrs,
                          absl::Span<const Tensor> inputs,
                          const Tensors& outputs) = 0;
    // `t` (no id) was made from a dtype, a shape and one value (a gradient's
    // seed, RuleContext::Filled), not from any tensor's values.
    virtual void Constant(const Tensor& t) = 0;
  };
  Observer* observer() const { return observer_; }
  void set_observer(Observer* observer) { observer_ = observer; }
  void NoteConstant(const Tensor& t) {
    if (observer_ != nullptr) observer_->Constant(t);
  }

  // Gives `t` a fresh id: the tensor enters the session.
  Tensor Adopt(Tensor t) {
    t.set_id(++last_id_);
    return t;
  }

 private:
  const OpRegistry& registry_;
  TapeSet tapes_;
  AccumulatorSet accumulators_;
  int64_t last_id_ = 0;
  std::shared_ptr<MemoryAccount> account_;
  int64_t memory_limit_ = 0;
  // While a gradient runs: ids of the tensors its backward functions made.
  std::vector<int64_t>* created_ids_ = nullptr;
  Observer* observer_ = nullptr;
};

}  // namespace gradtape

#endif  // GRADTAPE_CORE_AUTODIFF_OP_EXECUTOR_H_
