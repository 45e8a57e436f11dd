// Forward-mode differentiation: forward accumulators (TensorFlow's
// tf.autodiff.ForwardAccumulator).
//
// How it works. An accumulator maps tensor ids to tangents. The client
// watches tensors with tangents; from then on, every op that runs while the
// accumulator is active (pushed, recording not stopped) and has an input
// with a tangent gets output tangents, computed right after the op ran (and
// was recorded on the tapes):
//  * with the op's forward rule (`.Jvp(...)` in its registration), which
//    builds output tangents from input tangents with registered ops, like a
//    backward function does; or
//  * for ops without a rule, with the double-VJP trick: the VJP
//    g(u) = J^T u is linear in u, so with u a dummy output gradient watched
//    by a fresh internal tape, d<g(u), t>/du = J t is the JVP. It needs the
//    op's backward (and that backward to be differentiable in its upstream
//    gradient).
// The tangent ops go through OpExecutor::Execute like any op, so tapes record
// them (reverse-over-forward) and so do accumulators pushed earlier than the
// one computing (forward-over-forward); a gradient computed while an
// accumulator is active gets tangents too (forward-over-reverse: Hessian-
// vector products). Accumulators pushed later do not see an earlier one's
// tangent computation.
//
// An op registered NotDifferentiable gives no tangents (its outputs carry no
// derivative, e.g. StopGradient). A tensor without a tangent has a "None"
// JVP (zeros on request). Intermediate tensors of a tangent computation
// leave every tape and accumulator once it is done.
//
// Not thread-safe: owned by a session's OpExecutor, guarded by its lock.
#ifndef GRADTAPE_CORE_AUTODIFF_FORWARD_MODE_H_
#define GRADTAPE_CORE_AUTODIFF_FORWARD_MODE_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/autodiff/rule_context.h"
#include "core/registry/op_registry.h"
#include "core/tensor/attrs.h"
#include "core/tensor/tensor.h"

namespace gradtape {

class OpExecutor;

// What a forward rule (OpDef::jvp) sees: the op's inputs and outputs (all of
// them: nothing is elided in forward mode), the input tangents, and the
// executor. Errors are sticky, as in GradContext.
class JvpContext : public RuleContext {
 public:
  JvpContext(OpExecutor& ctx, const OpDef& op, const AttrMap& attrs,
             absl::Span<const Tensor> inputs, absl::Span<const Tensor> outputs,
             Tensors input_tangents);

  const OpDef& op() const { return op_; }
  const AttrMap& attrs() const { return attrs_; }
  const Tensor& Input(int i) const { return inputs_[i]; }
  const Tensor& Output(int i) const { return outputs_[i]; }
  bool HasTangent(int i) const { return tangents_[i].valid(); }
  // The tangent of input i; zeros of its shape if it has none.
  Tensor Tangent(int i);
  void SetTangent(int o, Tensor tangent);

  Tensors& output_tangents() { return output_tangents_; }

 private:
  const OpDef& op_;
  const AttrMap& attrs_;
  absl::Span<const Tensor> inputs_;
  absl::Span<const Tensor> outputs_;
  Tensors tangents_;
  Tensors output_tangents_;
};

// Common forward rules.
// A linear unary op: the tangent is the op itself applied to the tangent
// (Identity, Neg, Reshape, Transpose, Sum, Mean, ...).
void LinearUnaryJvp(JvpContext& j);

// One accumulator: tensor id -> tangent.
class ForwardAccumulator {
 public:
  struct Entry {
    Tensor tangent;
    // True if the tangent was made by a tangent computation and no client
    // handle names it: dropping it deletes its trace on the tapes.
    bool owned = false;
  };

  const Entry* Find(int64_t id) const {
    auto it = tangents_.find(id);
    return it == tangents_.end() ? nullptr : &it->second;
  }
  Entry* FindMutable(int64_t id) {
    auto it = tangents_.find(id);
    return it == tangents_.end() ? nullptr : &it->second;
  }
  void Set(int64_t id, Entry entry) { tangents_[id] = std::move(entry); }
  // Drops the tangent of `id`; returns it (invalid if none).
  Entry Take(int64_t id);
  size_t size() const { return tangents_.size(); }
  int64_t TangentBytes() const;
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const auto& [id, entry] : tangents_) fn(id, entry);
  }

 private:
  absl::flat_hash_map<int64_t, Entry> tangents_;
};

// The accumulators of one session, by client-chosen id, and the active
// (pushed) ones in push order.
class AccumulatorSet {
 public:
  // The fast path of OpExecutor::Execute: one check.
  bool CouldAccumulate() const { return !active_.empty(); }

  absl::Status Push(int64_t id);
  // Stops accumulating; the tangents stay readable.
  absl::Status Pop(int64_t id);
  // Frees the accumulator and its tangents (popping it first if active).
  // Returns the ids of owned tangents (for the caller to delete their
  // traces).
  absl::StatusOr<std::vector<int64_t>> Delete(int64_t id);
  absl::StatusOr<ForwardAccumulator*> Find(int64_t id);
  // Drops the tangents of tensor `id` from every accumulator; appends the
  // ids of owned tangents dropped to `owned`.
  void Forget(int64_t id, std::vector<int64_t>* owned);
  size_t size() const { return accumulators_.size(); }
  const std::vector<ForwardAccumulator*>& active() const { return active_; }
  int64_t TangentBytes() const;

  // Restricts the active accumulators to the first `n` for its lifetime
  // (while accumulator n computes its tangents).
  class ScopedTruncate {
   public:
    ScopedTruncate(AccumulatorSet& set, size_t n);
    ~ScopedTruncate();

   private:
    AccumulatorSet& set_;
    std::vector<ForwardAccumulator*> saved_;
  };

 private:
  absl::flat_hash_map<int64_t, std::unique_ptr<ForwardAccumulator>>
      accumulators_;
  std::vector<ForwardAccumulator*> active_;
};

// Computes the output tangents of an op that just ran, for every active
// accumulator in which an input has a tangent (see the top of this file).
// Called by OpExecutor::Execute; on error the caller undoes the op.
absl::Status Accumulate(OpExecutor& ctx, const OpDef& op, const AttrMap& attrs,
                        absl::Span<const Tensor> inputs,
                        absl::Span<const Tensor> outputs);

}  // namespace gradtape

#endif  // GRADTAPE_CORE_AUTODIFF_FORWARD_MODE_H_
