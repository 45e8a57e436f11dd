// Session: the state behind one client session, and the command semantics of
// the wire protocol without the wire.
//
// Tensors are named by client-chosen ids (nonzero int64, per session). Each
// id names one slot: a live tensor, a poisoned output of a failed command, or
// a None gradient. Every command is atomic: it checks everything it needs
// before changing anything, so a failed command leaves the session as it
// was, except that the output ids it would have filled become poisoned (when
// they were free). A later command that reads a poisoned id fails with
// FAILED_PRECONDITION naming the original failure (async error propagation,
// as in TensorFlow's remote eager service). Error messages name the op, the
// command's sequence number and the offending id or shape.
//
// Not thread-safe: the server applies one session's commands in order under
// that session's lock.
#ifndef GRADTAPE_CORE_SESSION_SESSION_H_
#define GRADTAPE_CORE_SESSION_SESSION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/autodiff/custom_gradient.h"
#include "core/autodiff/op_executor.h"
#include "core/autodiff/program.h"
#include "core/autodiff/program_plan.h"
#include "core/registry/op_registry.h"
#include "core/session/checkpoint.h"
#include "core/session/command.h"
#include "core/tensor/tensor.h"

namespace gradtape {

struct SessionOptions {
  int64_t memory_limit_bytes = 0;  // 0: unlimited
  // An account (a tenant's) that every charge of the session's account also
  // goes to and must fit (MemoryAccount's parent); null: the process's
  // (ProcessMemoryAccount), which is a tenant's parent too.
  std::shared_ptr<MemoryAccount> parent_account;
  // Where SaveCheckpoint / RestoreCheckpoint read and write files; empty:
  // checkpoints are disabled (FAILED_PRECONDITION).
  std::string checkpoint_dir;
  // Plan each program's gradient at its first call (PlannedProgram,
  // core/autodiff/program_plan.h); off: every call runs the program's tape
  // steps as defined.
  bool plan_programs = true;
  // In those plans, run runs of elementwise steps as one fused loop.
  bool fuse_programs = true;
};

struct SessionStats {
  int64_t live_tensors = 0;  // ids holding a tensor
  int64_t poisoned_ids = 0;
  int64_t bytes_in_use = 0;  // every buffer charged to the session
  int64_t tapes = 0;
  int64_t tape_entries = 0;      // recorded ops over all tapes
  int64_t tape_saved_bytes = 0;  // tensors kept for backward, over all tapes
};

// The dtype and shape of a value a command will return.
struct ValueSpec {
  DType dtype = DType::kInvalid;
  Shape shape;
};

struct GradientRequest {
  int64_t tape = 0;
  std::vector<int64_t> targets;
  std::vector<int64_t> sources;
  // Empty, or one per target; 0 means "ones".
  std::vector<int64_t> output_gradients;
  Unconnected unconnected = Unconnected::kNone;
  // One per source: where each gradient is stored.
  std::vector<int64_t> result_ids;
  // Optional. Called once every check passed (tape, targets, sources,
  // output gradients, free result ids) and before anything is computed,
  // with what each gradient will be: its source's value dtype and shape
  // (ValueDType / ValueShape; a None gradient is smaller). An error it
  // returns is the command's (its result ids poisoned, nothing computed).
  // The server measures a reply's room here, on the sources the command
  // resolved.
  std::function<absl::Status(absl::Span<const ValueSpec>)> before_compute;
};

// A program as a client defines it (DefineProgram): its kConstant
// references index `captured_ids`, session ids resolved at definition (the
// program holds their tensors); `program.constants` is left empty.
struct ProgramDefinition {
  Program program;
  std::vector<int64_t> captured_ids;
};

struct ProgramInfo {
  int64_t id = 0;
  int params = 0;
  int steps = 0;
  int outputs = 0;
  int64_t bytes = 0;        // charged to the session (its plan's included)
  int64_t calls = 0;        // that succeeded
  int64_t plan_steps = 0;   // 0: no plan
  std::string not_planned;  // why there is no plan (empty: there is one,
                            // or the next call may make it)
};

struct JacobianRequest {
  int64_t tape = 0;
  int64_t target = 0;
  std::vector<int64_t> sources;
  Unconnected unconnected = Unconnected::kNone;
  // batch_jacobian: target and sources share their first (batch) dim.
  bool batch = false;
  // One per source.
  std::vector<int64_t> result_ids;
};

class Session {
 public:
  Session(const OpRegistry& registry, SessionOptions options);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session();

  absl::Status ExecuteOp(int64_t seq, absl::string_view op,
                         absl::Span<const int64_t> inputs,
                         absl::Span<const int64_t> outputs, AttrMap attrs);
  // Copies little-endian `bytes` into a new tensor at `id`.
  absl::Status PutTensor(int64_t seq, int64_t id, DType dtype,
                         absl::Span<const int64_t> shape,
                         absl::string_view bytes);
  absl::Status PutTensor(int64_t seq, int64_t id, const Tensor& value);
  absl::StatusOr<Tensor> FetchTensor(int64_t seq, int64_t id);

  // Tensors larger than one message (core/session/session_chunks.cc).
  //
  // PutTensorBegin checks `shape` (CheckedTensorSize) and charges the whole
  // tensor to the session's account (and its parent's) before any data is
  // stored: RESOURCE_EXHAUSTED then, `id` poisoned. On success `id` is
  // *pending*: reading it fails with FAILED_PRECONDITION "tensor N is being
  // put: K of M bytes received", writing it with ALREADY_EXISTS, and
  // ReleaseTensors drops it with its charge. A tensor of 0 bytes is live at
  // once.
  absl::Status PutTensorBegin(int64_t seq, int64_t id, DType dtype,
                              absl::Span<const int64_t> shape);
  // Appends little-endian `bytes` to the pending put at `id`. `offset` must
  // be the bytes received so far and the chunk must end within the tensor
  // (INVALID_ARGUMENT otherwise); a failed chunk changes nothing and
  // poisons nothing. The chunk that completes the data makes the tensor
  // live.
  absl::Status PutTensorChunk(int64_t seq, int64_t id, int64_t offset,
                              absl::string_view bytes);
  // The data bytes [offset, offset + length) of the tensor at `id`: length
  // is max_bytes, or what is left at the end. INVALID_ARGUMENT for a
  // negative offset or a max_bytes below 1, OUT_OF_RANGE for an offset past
  // the end (offset == total bytes gives an empty slice).
  struct TensorSlice {
    Tensor tensor;
    int64_t offset = 0;
    int64_t length = 0;
  };
  absl::StatusOr<TensorSlice> FetchTensorChunk(int64_t seq, int64_t id,
                                               int64_t offset,
                                               int64_t max_bytes);
  absl::Status ReleaseTensors(int64_t seq, absl::Span<const int64_t> ids);
  absl::Status PushTape(int64_t seq, int64_t tape, bool persistent,
                        bool watch_accessed_variables);
  absl::Status PopTape(int64_t seq, int64_t tape);
  absl::Status DeleteTape(int64_t seq, int64_t tape);
  absl::Status Watch(int64_t seq, int64_t tape, absl::Span<const int64_t> ids);
  absl::Status StopRecording(int64_t seq);
  absl::Status StartRecording(int64_t seq);
  // Stores the gradients at request.result_ids and returns them (an invalid
  // Tensor for a None gradient).
  absl::StatusOr<std::vector<Tensor>> Gradient(int64_t seq,
                                               const GradientRequest& request);

  // Records a command that failed before reaching the session (e.g. it
  // could not be decoded): poisons its free output ids, advances last_seq.
  // The ids share one copy of the failure (bounded length), charged to the
  // session's memory account like every slot.
  void Fail(int64_t seq, absl::Span<const int64_t> outputs,
            const absl::Status& failure);
  // Records a command refused without being processed (its seq is out of
  // order: the server did not apply it): poisons its free output ids with
  // `failure`, so that a later command reading one quotes it, and changes
  // nothing else (last_seq stays).
  void PoisonRefused(int64_t seq, absl::Span<const int64_t> outputs,
                     const absl::Status& failure);

  // Training: checkpoints of variables (core/session/checkpoint.h), in the
  // directory options.checkpoint_dir, file `name`. `variable_ids` name
  // variable handles; empty means every variable whose handle a live id of
  // the session holds (saved sorted by name). Variables are matched by name
  // (VarHandleOp's shared_name) on restore, which assigns all of them or
  // none. Checkpoints do not poison ids.
  absl::StatusOr<CheckpointSummary> SaveCheckpoint(
      int64_t seq, absl::string_view name,
      absl::Span<const int64_t> variable_ids);
  absl::StatusOr<CheckpointSummary> RestoreCheckpoint(
      int64_t seq, absl::string_view name,
      absl::Span<const int64_t> variable_ids);

  // Jacobians, forward mode, custom gradients
  // (core/session/session_autodiff.cc).
  //
  // Jacobian / batch Jacobian of one target on a tape
  // (core/autodiff/jacobian.h), stored at result_ids (a None slot for an
  // unconnected source with Unconnected::kNone) and returned.
  absl::StatusOr<std::vector<Tensor>> Jacobian(int64_t seq,
                                               const JacobianRequest& request);
  // The ids that name a variable handle the tape watched, in watch order;
  // a variable named by several ids gives all of them (ascending), a
  // variable whose ids were all released gives none.
  absl::StatusOr<std::vector<int64_t>> WatchedVariables(int64_t seq,
                                                        int64_t tape);
  // Forward accumulators (core/autodiff/forward_mode.h), by client-chosen id.
  absl::Status PushAccumulator(int64_t seq, int64_t accumulator);
  absl::Status PopAccumulator(int64_t seq, int64_t accumulator);
  absl::Status DeleteAccumulator(int64_t seq, int64_t accumulator);
  // Gives ids[i] the tangent tangent_ids[i] (same dtype and shape).
  absl::Status AccumulatorWatch(int64_t seq, int64_t accumulator,
                                absl::Span<const int64_t> ids,
                                absl::Span<const int64_t> tangent_ids);
  // Stores the JVP of `id` at `result_id` and returns it (invalid: None, for
  // a tensor without a tangent and Unconnected::kNone).
  absl::StatusOr<Tensor> FetchJvp(int64_t seq, int64_t accumulator, int64_t id,
                                  int64_t result_id, Unconnected unconnected);
  // ExecuteOp with a custom backward for this execution
  // (core/autodiff/custom_gradient.h); kTensor references name session ids.
  absl::Status ExecuteOpWithGradient(int64_t seq, absl::string_view op,
                                     absl::Span<const int64_t> inputs,
                                     absl::Span<const int64_t> outputs,
                                     AttrMap attrs, GradientProgram program);

  // Captured steps (core/autodiff/program.h, core/session/session_programs.cc).
  //
  // Checks `definition` (ValidateProgram; captured ids must hold tensors)
  // and keeps it under `program_id` (nonzero, not in use: ALREADY_EXISTS),
  // charged to the session's account for its structure (RESOURCE_EXHAUSTED
  // past the limit). At most kMaxPrograms programs.
  absl::Status DefineProgram(int64_t seq, int64_t program_id,
                             ProgramDefinition definition);
  // Runs program `program_id` on `inputs` (one per param) into `outputs`
  // (one per program output, free; a None gradient output becomes a None
  // slot). Atomic: a failure leaves the session as it was (RunProgram
  // undoes the run), its output ids poisoned.
  absl::Status CallProgram(int64_t seq, int64_t program_id,
                           absl::Span<const int64_t> inputs,
                           absl::Span<const int64_t> outputs);
  absl::Status DeleteProgram(int64_t seq, int64_t program_id);
  // The session's programs by id.
  std::vector<ProgramInfo> ListPrograms(int64_t seq);
  static constexpr int kMaxPrograms = 1024;

  // What one id's slot costs the account besides its tensor's buffer: the
  // map entry with the map's spare capacity (checked by a static_assert).
  static constexpr int64_t kSlotBytes = 192;
  // Longest failure text kept for poisoned ids (longer ones are cut).
  static constexpr size_t kMaxReasonBytes = 1024;

  SessionStats Stats() const;
  // The tensor at `id` without running a command (no seq is used, nothing
  // changes): for callers that must size a result before applying it.
  absl::StatusOr<Tensor> Peek(int64_t id) const;
  // Stats as a command of the log (advances last_seq).
  SessionStats Stats(int64_t seq);
  // Sequence number of the last command processed (applied or failed).
  int64_t last_seq() const { return last_seq_; }
  // True if a live id holds a variable handle (what SaveCheckpoint with no
  // ids would save).
  bool HoldsVariables() const;
  OpExecutor& executor() { return exec_; }

 private:
  struct Slot {
    // kPending: a chunked put in progress (PutTensorBegin); `tensor` holds
    // the buffer being filled, charged in full.
    enum Kind { kTensor, kPoisoned, kNone, kPending } kind = kTensor;
    Tensor tensor;
    // kPoisoned: the first failure of the chain that poisoned the id, shared
    // by every id it poisoned; kNone: why the id holds no tensor.
    std::shared_ptr<const std::string> reason;
    int64_t poisoned_by = 0;  // kPoisoned: seq of the command that failed
    int64_t received = 0;     // kPending: data bytes received so far
  };
  // "tensor N is being put: K of M bytes received" for a kPending slot.
  static std::string PendingString(int64_t id, const Slot& slot);

  // Runs one command; every command of the session goes through here. It
  // records `seq` as the last command processed, makes the session's memory
  // account current (every allocation is charged to it, and refused past
  // its limit), runs `body(cmd)` and, when that fails, poisons the free ids
  // among `outputs` with the failure. A body checks everything before it
  // changes anything, so a failed command leaves the session as it was but
  // for the poisoned ids. `body` returns absl::Status or absl::StatusOr.
  template <typename Body>
  auto Run(int64_t seq, absl::string_view what,
           absl::Span<const int64_t> outputs, Body&& body) {
    last_seq_ = seq;
    ScopedMemoryAccount scope(account_);
    const Command cmd{seq, what};
    auto result = body(cmd);
    if (!result.ok()) Poison(seq, outputs, StatusOf(result));
    return result;
  }
  static const absl::Status& StatusOf(const absl::Status& s) { return s; }
  template <typename T>
  static const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
    return s.status();
  }

  // The checks ExecuteOp and ExecuteOpWithGradient share: the op exists,
  // the id counts match its arity, the inputs resolve and the outputs are
  // free. Fills `in` and returns the op.
  // A list op's arity follows from `attrs` (OpDef::FlatArity).
  absl::StatusOr<const OpDef*> PrepareOp(const Command& cmd,
                                         absl::Span<const int64_t> inputs,
                                         absl::Span<const int64_t> outputs,
                                         const AttrMap& attrs,
                                         Tensors* in) const;
  // Runs `op` on `in` (with the custom backward, if any) and stores its
  // outputs at `outputs`.
  absl::Status ExecuteAndStore(const Command& cmd, const OpDef& op,
                               absl::Span<const int64_t> inputs,
                               const Tensors& in,
                               absl::Span<const int64_t> outputs, AttrMap attrs,
                               std::shared_ptr<const GradientProgram> custom);
  // What Gradient and Jacobian share before they differentiate: one result
  // id per source, at least one target, the tape, the targets and sources.
  struct Differentiation {
    Tape* tape = nullptr;
    Tensors targets;
    Tensors sources;
  };
  absl::StatusOr<Differentiation> PrepareDifferentiation(
      const Command& cmd, int64_t tape, absl::Span<const int64_t> targets,
      absl::Span<const int64_t> sources, absl::Span<const int64_t> result_ids);
  // ... and after: stores results[i] at result_ids[i], a None slot (saying
  // `none_reason(i)`) for an invalid one. A tensor returned for two
  // sources gets a second handle, so each id owns its own.
  template <typename NoneReason>
  void StoreResults(std::vector<Tensor>& results,
                    absl::Span<const int64_t> result_ids,
                    NoneReason none_reason);

  // The tensor behind `id`, or an error naming the command and id.
  absl::StatusOr<Tensor> Resolve(const Command& cmd, int64_t id) const;
  absl::Status ResolveAll(const Command& cmd, absl::Span<const int64_t> ids,
                          Tensors* out) const;
  // OK if every id is nonzero, distinct and free (unused or poisoned/None).
  absl::Status CheckFreeOutputs(const Command& cmd,
                                absl::Span<const int64_t> ids) const;
  // Poisons the free ids among `ids` for command `seq`'s failure. When the
  // command failed because it read a poisoned id, its ids inherit that
  // id's first failure instead of nesting the message.
  void Poison(int64_t seq, absl::Span<const int64_t> ids,
              const absl::Status& failure);
  void Store(int64_t id, Tensor t);
  // Marks `id` as a None result (a gradient, Jacobian or JVP) for `reason`.
  void StoreNone(int64_t id, std::string reason);
  void Drop(int64_t id);
  // The slot of `id`, inserted (and charged) if new.
  Slot& SlotFor(int64_t id);
  // `text`, cut to kMaxReasonBytes, charged to the account while it lives.
  std::shared_ptr<const std::string> MakeReason(std::string text) const;
  // For checkpoint command `cmd` on checkpoint `name`: the variables
  // behind `ids` (all of the session's, by name, when empty), after checking
  // that checkpoints are enabled and the name is valid; or an error naming
  // the command and the offending id or name.
  absl::StatusOr<std::vector<Variable*>> CheckpointVariables(
      const Command& cmd, absl::string_view name,
      absl::Span<const int64_t> ids) const;

  struct StoredProgram {
    Program program;
    std::unique_ptr<PlannedProgram> planned;  // of `program`
    int64_t bytes = 0;                        // charged to account_
    int64_t calls = 0;
  };

  std::shared_ptr<MemoryAccount> account_;
  OpExecutor exec_;
  // Declared after exec_: programs hold tensors, dropped before the
  // executor.
  absl::flat_hash_map<int64_t, std::unique_ptr<StoredProgram>> programs_;
  absl::flat_hash_map<int64_t, Slot> slots_;
  // The first failure behind the last poisoned id that Resolve refused, and
  // the command that read it: Poison lets that command's outputs inherit it.
  mutable int64_t poisoned_read_seq_ = 0;
  mutable std::weak_ptr<const std::string> poisoned_read_reason_;
  int64_t last_seq_ = 0;
  std::string checkpoint_dir_;
  bool plan_programs_ = true;
  bool fuse_programs_ = true;
};

template <typename NoneReason>
void Session::StoreResults(std::vector<Tensor>& results,
                           absl::Span<const int64_t> result_ids,
                           NoneReason none_reason) {
  absl::flat_hash_set<int64_t> stored;
  for (size_t i = 0; i < results.size(); ++i) {
    Tensor& r = results[i];
    if (!r.valid()) {
      StoreNone(result_ids[i], none_reason(i));
      continue;
    }
    // One id, one handle: a repeated source gets its own copy of the id.
    if (!stored.insert(r.id()).second) r = exec_.Adopt(r);
    Store(result_ids[i], r);
  }
}

}  // namespace gradtape

#endif  // GRADTAPE_CORE_SESSION_SESSION_H_
