// Captured steps (docs/CAPTURE.md): a function of tensors traced once and run
// by the server as one program.
//
//   client::Function step(*session, {{DType::kFloat32, {32, 64}}},
//       [&](absl::Span<const Tensor> x) { ...ops, a tape, an update...;
//                                         return std::vector<Tensor>{loss}; });
//   for (...) { auto out = step({batch}); }
//
// The first call runs `body` eagerly while the session records what it
// sends, then defines those commands as a program (DefineProgram: ops, tape
// commands, variable updates; tensors the body reads that are neither
// arguments nor made by it, and tensors it puts, are captured by value, as
// tf.function captures eager tensors: a value the body computes on the
// client and puts on each call is frozen at the recorded call). Every later
// call sends one CallProgram with the arguments' ids and returns fresh handles,
// with the eager commands' results bit for bit. C++ side effects of `body` run
// on the first call only.
//
// A body that reads a value (Fetch, Stats, a gradient with values) or
// differentiates a tape it did not push cannot be a program: the Function then
// runs `body` eagerly on every call, and capture_status() says why. A first
// call that created a variable (VarHandleOp: layers and optimizer slots built
// on first use) is not kept: the second call records again, as tf.function
// traces twice then.
//
// The signature is fixed: the arguments' dtypes and shapes. The server
// refuses a call whose arguments differ (INVALID_ARGUMENT at the next wait
// point). Not thread-safe.
#ifndef GRADTAPE_CLIENT_PROGRAM_H_
#define GRADTAPE_CLIENT_PROGRAM_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gradtape/client/host_tensor.h"
#include "gradtape/client/session.h"

namespace gradtape::client {

struct TensorSpec {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
};

class Function {
 public:
  using Body = std::function<std::vector<Tensor>(absl::Span<const Tensor>)>;
  Function(Session& session, std::vector<TensorSpec> signature, Body body);
  Function(const Function&) = delete;
  Function& operator=(const Function&) = delete;
  ~Function();

  // INVALID_ARGUMENT for a wrong number of arguments or a null handle;
  // failures of the commands surface at the next wait point, as for ops.
  absl::StatusOr<std::vector<Tensor>> operator()(absl::Span<const Tensor> args);

  // True once the program is defined (calls are one command each).
  bool captured() const { return program_id_ != 0; }
  int64_t program_id() const { return program_id_; }
  // Calls that ran `body` (recorded or eager).
  int traces() const { return traces_; }
  // OK, or why `body` cannot be a program (it then runs eagerly).
  const absl::Status& capture_status() const { return capture_status_; }

 private:
  Session& session_;
  std::vector<TensorSpec> signature_;
  Body body_;
  int64_t program_id_ = 0;
  int num_outputs_ = 0;
  int traces_ = 0;
  absl::Status capture_status_;
};

}  // namespace gradtape::client

#endif  // GRADTAPE_CLIENT_PROGRAM_H_
