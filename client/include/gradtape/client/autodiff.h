// Forward mode, stop_gradient and custom gradients for the gradtape C++
// client (Jacobians are GradientTape methods, session.h).
//
// Every call is buffered like the rest of the client (see session.h); only
// the *Value methods wait.
#ifndef GRADTAPE_CLIENT_AUTODIFF_H_
#define GRADTAPE_CLIENT_AUTODIFF_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gradtape/client/session.h"

namespace gradtape::client {

// A forward accumulator on the server (TensorFlow's ForwardAccumulator),
// RAII: the constructor pushes it; from then on every op whose input has a
// tangent computes its outputs' tangents (JVPs) until Stop(). The destructor
// stops and deletes it. Accumulators nest with tapes: a gradient computed
// while one is active gets tangents (Hessian-vector products by
// forward-over-reverse).
class ForwardAccumulator {
 public:
  explicit ForwardAccumulator(Session& session);
  ~ForwardAccumulator();
  ForwardAccumulator(const ForwardAccumulator&) = delete;
  ForwardAccumulator& operator=(const ForwardAccumulator&) = delete;

  int64_t id() const { return id_; }
  // Gives `t` the tangent `tangent` (same dtype and shape).
  void Watch(const Tensor& t, const Tensor& tangent);
  // Stops accumulating; Jvp still reads what was computed. Idempotent.
  void Stop();
  // The JVP of `t` as a handle, at once: a None handle when `t` has no
  // tangent (zeros with Unconnected::kZero). Null if `t` is null.
  Tensor Jvp(const Tensor& t, Unconnected unconnected = Unconnected::kNone);
  // Wait point: the JVP's value, std::nullopt for None.
  absl::StatusOr<std::optional<HostTensor>> JvpValue(
      const Tensor& t, Unconnected unconnected = Unconnected::kNone);

 private:
  std::shared_ptr<internal::SessionCore> core_;
  int64_t id_ = 0;
  bool active_ = false;
};

// TensorFlow's stop_gradient: x, with no gradient (or tangent) through it.
Tensor StopGradient(const Tensor& x);

// A backward for one op execution, as a program of server ops (see
// ExecuteWithGradient in proto/gradtape/v1/tape_service.proto).
class GradientProgram {
 public:
  // A value the program can use.
  class Ref {
   public:
    static Ref Upstream(int output) { return Ref(kUpstream, output); }
    static Ref Input(int i) { return Ref(kInput, i); }
    static Ref Output(int i) { return Ref(kOutput, i); }
    static Ref Step(int step, int output = 0) {
      Ref r(kStep, step);
      r.output_ = output;
      return r;
    }
    // A tensor of the session (e.g. a clipping bound).
    static Ref Captured(const Tensor& t) {
      Ref r(kTensor, 0);
      r.tensor_ = t;
      return r;
    }

   private:
    friend class GradientProgram;
    friend std::vector<Tensor> ExecuteWithGradient(absl::string_view,
                                                   absl::Span<const Tensor>,
                                                   const Attrs&, int,
                                                   const GradientProgram&);
    enum Kind { kUpstream, kInput, kOutput, kStep, kTensor };
    Ref(Kind kind, int index) : kind_(kind), index_(index) {}
    Kind kind_;
    int index_;
    int output_ = 0;
    Tensor tensor_;
  };

  // Appends a step running `op`; returns its index (for Ref::Step).
  int AddStep(std::string op, std::vector<Ref> inputs, Attrs attrs = {});
  // The gradient of op input i (inputs without one get none).
  void SetInputGradient(int i, Ref ref);

 private:
  friend std::vector<Tensor> ExecuteWithGradient(absl::string_view,
                                                 absl::Span<const Tensor>,
                                                 const Attrs&, int,
                                                 const GradientProgram&);
  struct Step {
    std::string op;
    std::vector<Ref> inputs;
    Attrs attrs;
  };
  std::vector<Step> steps_;
  std::vector<std::optional<Ref>> input_gradients_;
};

// Like Execute (ops.h), but the tapes record the op with `gradient` as its
// backward for this execution. Example, gradient clipping:
//   GradientProgram clip;
//   int s = clip.AddStep("Maximum", {Ref::Upstream(0), Ref::Captured(lo)});
//   s = clip.AddStep("Minimum", {Ref::Step(s), Ref::Captured(hi)});
//   clip.SetInputGradient(0, Ref::Step(s));
//   Tensor h = ExecuteWithGradient("Identity", {x}, {}, 1, clip)[0];
std::vector<Tensor> ExecuteWithGradient(absl::string_view op,
                                        absl::Span<const Tensor> inputs,
                                        const Attrs& attrs, int num_outputs,
                                        const GradientProgram& gradient);

}  // namespace gradtape::client

#endif  // GRADTAPE_CLIENT_AUTODIFF_H_
