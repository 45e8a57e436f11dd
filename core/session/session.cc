#include "core/session/session.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/autodiff/gradient.h"
#include "core/base/status_macros.h"
#include "core/tensor/variable.h"

namespace gradtape {
namespace {

// "[1,2,3]", or the first kShown ids and the count, so a message stays
// short whatever a command sends.
std::string IdList(absl::Span<const int64_t> ids) {
  constexpr size_t kShown = 8;
  if (ids.size() <= kShown) {
    return absl::StrCat("[", absl::StrJoin(ids, ","), "]");
  }
  return absl::StrCat("[", absl::StrJoin(ids.subspan(0, kShown), ","), ",... (",
                      ids.size(), " ids)]");
}

// `text` cut to at most `max` bytes, at a UTF-8 character boundary.
std::string CutUtf8(std::string text, size_t max) {
  if (text.size() <= max) return text;
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
    --end;
  }
  text.resize(end);
  text += "...";
  return text;
}

}  // namespace

Session::Session(const OpRegistry& registry, SessionOptions options)
    : account_(std::make_shared<MemoryAccount>(options.parent_account != nullptr
                                                   ? options.parent_account
                                                   : ProcessMemoryAccount())),
      exec_(registry) {
  exec_.SetMemoryLimit(account_, options.memory_limit_bytes);
  checkpoint_dir_ = options.checkpoint_dir;
  plan_programs_ = options.plan_programs;
  fuse_programs_ = options.fuse_programs;
}

Session::~Session() {
  // Tapes hold tensors too; drop everything while the account is current.
  ScopedMemoryAccount scope(account_);
  account_->Add(-kSlotBytes * static_cast<int64_t>(slots_.size()));
  slots_.clear();
  for (const auto& [id, stored] : programs_) account_->Add(-stored->bytes);
  programs_.clear();
}

Session::Slot& Session::SlotFor(int64_t id) {
  // A slot's charge covers its map entry (with the map's spare capacity).
  static_assert(sizeof(std::pair<const int64_t, Slot>) * 3 / 2 <= kSlotBytes);
  auto [it, inserted] = slots_.try_emplace(id);
  if (inserted) account_->Add(kSlotBytes);
  return it->second;
}

std::shared_ptr<const std::string> Session::MakeReason(std::string text) const {
  text = CutUtf8(std::move(text), kMaxReasonBytes);
  const int64_t bytes = static_cast<int64_t>(text.capacity()) + 32;
  account_->Add(bytes);
  std::shared_ptr<MemoryAccount> account = account_;
  return std::shared_ptr<const std::string>(
      new std::string(std::move(text)), [account, bytes](const std::string* p) {
        account->Add(-bytes);
        delete p;
      });
}

absl::StatusOr<Tensor> Session::Resolve(const Command& cmd, int64_t id) const {
  auto it = slots_.find(id);
  if (it == slots_.end()) {
    return cmd.Error(absl::StatusCode::kNotFound, "unknown tensor id ", id,
                     " (never created, or released)");
  }
  const Slot& slot = it->second;
  if (slot.kind == Slot::kTensor) return slot.tensor;
  if (slot.kind == Slot::kNone) {
    return cmd.Error(absl::StatusCode::kFailedPrecondition, "tensor id ", id,
                     " ", *slot.reason);
  }
  if (slot.kind == Slot::kPending) {
    return cmd.Error(absl::StatusCode::kFailedPrecondition,
                     PendingString(id, slot),
                     "; send the rest with PutTensorChunk (or release it)");
  }
  poisoned_read_seq_ = cmd.seq;
  poisoned_read_reason_ = slot.reason;
  return cmd.Error(absl::StatusCode::kFailedPrecondition, "tensor id ", id,
                   " is poisoned: command ", slot.poisoned_by,
                   ", which should have produced it, failed; the first "
                   "failure was: ",
                   *slot.reason);
}

absl::Status Session::ResolveAll(const Command& cmd,
                                 absl::Span<const int64_t> ids,
                                 Tensors* out) const {
  out->clear();
  out->reserve(ids.size());
  for (int64_t id : ids) {
    ASSIGN_OR_RETURN(Tensor t, Resolve(cmd, id));
    out->push_back(std::move(t));
  }
  return absl::OkStatus();
}

absl::Status Session::CheckFreeOutputs(const Command& cmd,
                                       absl::Span<const int64_t> ids) const {
  absl::flat_hash_set<int64_t> seen;
  seen.reserve(ids.size());
  for (int64_t id : ids) {
    if (id == 0) {
      return cmd.Error(absl::StatusCode::kInvalidArgument,
                       "output id 0 is reserved; ids are nonzero");
    }
    if (!seen.insert(id).second) {
      return cmd.Error(absl::StatusCode::kInvalidArgument, "output id ", id,
                       " appears twice in ", IdList(ids));
    }
    auto it = slots_.find(id);
    if (it != slots_.end() && it->second.kind == Slot::kTensor) {
      return cmd.Error(absl::StatusCode::kAlreadyExists, "output id ", id,
                       " already holds a tensor (",
                       it->second.tensor.DebugString(),
                       "); release it first or choose a new id");
    }
    if (it != slots_.end() && it->second.kind == Slot::kPending) {
      return cmd.Error(absl::StatusCode::kAlreadyExists, "output id ", id, ": ",
                       PendingString(id, it->second),
                       "; release it first or choose a new id");
    }
  }
  return absl::OkStatus();
}

void Session::Poison(int64_t seq, absl::Span<const int64_t> ids,
                     const absl::Status& failure) {
  std::shared_ptr<const std::string> reason;
  if (poisoned_read_seq_ == seq) reason = poisoned_read_reason_.lock();
  poisoned_read_reason_.reset();
  for (int64_t id : ids) {
    if (id == 0) continue;
    auto it = slots_.find(id);
    // A live tensor or a pending put is not the failed command's to poison.
    if (it != slots_.end() && (it->second.kind == Slot::kTensor ||
                               it->second.kind == Slot::kPending)) {
      continue;
    }
    if (reason == nullptr) {
      reason = MakeReason(absl::StrCat(absl::StatusCodeToString(failure.code()),
                                       ": ", failure.message()));
    }
    SlotFor(id) = Slot{Slot::kPoisoned, Tensor(), reason, seq};
  }
}

void Session::Fail(int64_t seq, absl::Span<const int64_t> outputs,
                   const absl::Status& failure) {
  Run(seq, "", outputs, [&](const Command&) { return failure; }).IgnoreError();
}

void Session::PoisonRefused(int64_t seq, absl::Span<const int64_t> outputs,
                            const absl::Status& failure) {
  ScopedMemoryAccount scope(account_);
  Poison(seq, outputs, failure);
}

void Session::Store(int64_t id, Tensor t) {
  SlotFor(id) = Slot{Slot::kTensor, std::move(t), nullptr, 0};
}

void Session::StoreNone(int64_t id, std::string reason) {
  SlotFor(id) = Slot{Slot::kNone, Tensor(), MakeReason(std::move(reason)), 0};
}

void Session::Drop(int64_t id) {
  auto it = slots_.find(id);
  if (it == slots_.end()) return;
  int64_t tensor_id = it->second.tensor.id();
  slots_.erase(it);
  account_->Add(-kSlotBytes);
  if (tensor_id != 0) exec_.Forget(tensor_id);
}

absl::StatusOr<const OpDef*> Session::PrepareOp(
    const Command& cmd, absl::Span<const int64_t> inputs,
    absl::Span<const int64_t> outputs, const AttrMap& attrs,
    Tensors* in) const {
  const OpDef* op = exec_.registry().Find(cmd.what);
  if (op == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("command ", cmd.seq, ": unknown op ", QuoteName(cmd.what),
                     " (ListOps returns the registered ops)"));
  }
  ASSIGN_OR_RETURN(const OpDef::Arity arity,
                   cmd.Annotate(op->FlatArity(attrs)));
  if (static_cast<int>(outputs.size()) != arity.outputs) {
    return cmd.Error(absl::StatusCode::kInvalidArgument, "has ", arity.outputs,
                     " outputs, got ", outputs.size(), " output ids ",
                     IdList(outputs));
  }
  if (static_cast<int>(inputs.size()) != arity.inputs) {
    return cmd.Error(absl::StatusCode::kInvalidArgument, "takes ", arity.inputs,
                     " inputs, got ", inputs.size(), " input ids ",
                     IdList(inputs));
  }
  RETURN_IF_ERROR(ResolveAll(cmd, inputs, in));
  RETURN_IF_ERROR(CheckFreeOutputs(cmd, outputs));
  return op;
}

absl::Status Session::ExecuteAndStore(
    const Command& cmd, const OpDef& op, absl::Span<const int64_t> inputs,
    const Tensors& in, absl::Span<const int64_t> outputs, AttrMap attrs,
    std::shared_ptr<const GradientProgram> custom) {
  Tensors out;
  RETURN_IF_ERROR(cmd.Annotate(
      exec_.Execute(op, in, std::move(attrs), &out, std::move(custom)),
      [&] { return absl::StrCat("input ids ", IdList(inputs)); }));
  for (size_t i = 0; i < outputs.size(); ++i) Store(outputs[i], out[i]);
  return absl::OkStatus();
}

absl::Status Session::ExecuteOp(int64_t seq, absl::string_view op_name,
                                absl::Span<const int64_t> inputs,
                                absl::Span<const int64_t> outputs,
                                AttrMap attrs) {
  return Run(seq, op_name, outputs, [&](const Command& cmd) -> absl::Status {
    Tensors in;
    ASSIGN_OR_RETURN(const OpDef* op,
                     PrepareOp(cmd, inputs, outputs, attrs, &in));
    return ExecuteAndStore(cmd, *op, inputs, in, outputs, std::move(attrs),
                           nullptr);
  });
}

absl::Status Session::PutTensor(int64_t seq, int64_t id, DType dtype,
                                absl::Span<const int64_t> shape,
                                absl::string_view bytes) {
  const int64_t ids[] = {id};
  return Run(seq, "PutTensor", ids, [&](const Command& cmd) -> absl::Status {
    RETURN_IF_ERROR(CheckFreeOutputs(cmd, ids));
    ASSIGN_OR_RETURN(Tensor t,
                     cmd.Annotate(Tensor::FromBytes(dtype, shape, bytes),
                                  [&] { return absl::StrCat("id ", id); }));
    Store(id, exec_.Adopt(std::move(t)));
    return absl::OkStatus();
  });
}

absl::Status Session::PutTensor(int64_t seq, int64_t id, const Tensor& value) {
  return PutTensor(seq, id, value.dtype(), value.shape(),
                   absl::string_view(static_cast<const char*>(value.raw_data()),
                                     value.num_bytes()));
}

absl::StatusOr<Tensor> Session::FetchTensor(int64_t seq, int64_t id) {
  return Run(seq, "FetchTensor", {},
             [&](const Command& cmd) { return Resolve(cmd, id); });
}

absl::Status Session::ReleaseTensors(int64_t seq,
                                     absl::Span<const int64_t> ids) {
  return Run(
      seq, "ReleaseTensors", {}, [&](const Command& cmd) -> absl::Status {
        for (int64_t id : ids) {
          if (!slots_.contains(id)) {
            return cmd.Error(absl::StatusCode::kNotFound, "unknown tensor id ",
                             id, "; nothing was released");
          }
        }
        for (int64_t id : ids) Drop(id);
        return absl::OkStatus();
      });
}

absl::Status Session::PushTape(int64_t seq, int64_t tape, bool persistent,
                               bool watch_accessed_variables) {
  return Run(seq, "PushTape", {}, [&](const Command& cmd) -> absl::Status {
    // A probe: the tape charges itself when it is made.
    if (const MemoryAccount* refuser =
            account_->TryChargeOrRefuser(Tape::kTapeBytes)) {
      return cmd.Annotate(MemoryRefusal(*refuser, "a tape", Tape::kTapeBytes,
                                        "release tensors or delete tapes"));
    }
    account_->Add(-Tape::kTapeBytes);
    return cmd.Annotate(
        exec_.tapes().Push(tape, persistent, watch_accessed_variables));
  });
}

absl::Status Session::PopTape(int64_t seq, int64_t tape) {
  return Run(seq, "PopTape", {}, [&](const Command& cmd) {
    return cmd.Annotate(exec_.tapes().Pop(tape));
  });
}

absl::Status Session::DeleteTape(int64_t seq, int64_t tape) {
  return Run(seq, "DeleteTape", {}, [&](const Command& cmd) {
    return cmd.Annotate(exec_.tapes().Delete(tape));
  });
}

absl::Status Session::Watch(int64_t seq, int64_t tape_id,
                            absl::Span<const int64_t> ids) {
  return Run(seq, "Watch", {}, [&](const Command& cmd) -> absl::Status {
    ASSIGN_OR_RETURN(Tape * tape, cmd.Annotate(exec_.tapes().Find(tape_id)));
    Tensors tensors;
    RETURN_IF_ERROR(ResolveAll(cmd, ids, &tensors));
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!IsTrainable(tensors[i].dtype())) {
        return cmd.Error(absl::StatusCode::kInvalidArgument, "tensor id ",
                         ids[i], " is ", tensors[i].DebugString(),
                         "; only floating, complex and variable-handle "
                         "tensors can be watched");
      }
    }
    for (const Tensor& t : tensors) tape->Watch(t);
    return absl::OkStatus();
  });
}

absl::Status Session::StopRecording(int64_t seq) {
  return Run(seq, "StopRecording", {}, [&](const Command&) {
    exec_.tapes().StopRecording();
    return absl::OkStatus();
  });
}

absl::Status Session::StartRecording(int64_t seq) {
  return Run(seq, "StartRecording", {}, [&](const Command&) {
    exec_.tapes().StartRecording();
    return absl::OkStatus();
  });
}

absl::StatusOr<Session::Differentiation> Session::PrepareDifferentiation(
    const Command& cmd, int64_t tape, absl::Span<const int64_t> targets,
    absl::Span<const int64_t> sources, absl::Span<const int64_t> result_ids) {
  if (result_ids.size() != sources.size()) {
    return cmd.Error(absl::StatusCode::kInvalidArgument, sources.size(),
                     " sources but ", result_ids.size(), " result ids");
  }
  if (targets.empty()) {
    return cmd.Error(absl::StatusCode::kInvalidArgument, "no targets");
  }
  Differentiation d;
  ASSIGN_OR_RETURN(d.tape, cmd.Annotate(exec_.tapes().Find(tape)));
  RETURN_IF_ERROR(ResolveAll(cmd, targets, &d.targets));
  RETURN_IF_ERROR(ResolveAll(cmd, sources, &d.sources));
  return d;
}

absl::StatusOr<std::vector<Tensor>> Session::Gradient(
    int64_t seq, const GradientRequest& request) {
  return Run(seq, "Gradient", request.result_ids,
             [&](const Command& cmd) -> absl::StatusOr<std::vector<Tensor>> {
               ASSIGN_OR_RETURN(
                   Differentiation d,
                   PrepareDifferentiation(cmd, request.tape, request.targets,
                                          request.sources, request.result_ids));
               Tensors output_grads;
               for (int64_t id : request.output_gradients) {
                 if (id == 0) {
                   output_grads.push_back(Tensor());  // ones
                   continue;
                 }
                 ASSIGN_OR_RETURN(Tensor t, Resolve(cmd, id));
                 output_grads.push_back(std::move(t));
               }
               RETURN_IF_ERROR(CheckFreeOutputs(cmd, request.result_ids));
               if (request.before_compute) {
                 std::vector<ValueSpec> specs;
                 for (const Tensor& source : d.sources) {
                   specs.push_back({ValueDType(source), ValueShape(source)});
                 }
                 RETURN_IF_ERROR(request.before_compute(specs));
               }
               ASSIGN_OR_RETURN(
                   std::vector<Tensor> results,
                   cmd.Annotate(
                       gradtape::Gradient(exec_, *d.tape, d.targets, d.sources,
                                          output_grads, request.unconnected),
                       [&] { return absl::StrCat("tape ", request.tape); }));
               StoreResults(results, request.result_ids, [&](size_t i) {
                 return absl::StrCat(
                     "is a None gradient: source id ", request.sources[i],
                     " is not connected to the targets on tape ", request.tape,
                     " (ask for unconnected_gradients=ZERO to get zeros)");
               });
               return results;
             });
}

// --- Training: checkpoints --------------------------------------------------

absl::StatusOr<std::vector<Variable*>> Session::CheckpointVariables(
    const Command& cmd, absl::string_view name,
    absl::Span<const int64_t> ids) const {
  if (checkpoint_dir_.empty()) {
    return cmd.Error(absl::StatusCode::kFailedPrecondition,
                     "checkpoints are disabled on this server; start "
                     "gradtape-server with --checkpoint_dir=DIR");
  }
  RETURN_IF_ERROR(cmd.Annotate(ValidateCheckpointName(name)));
  std::vector<Variable*> vars;
  absl::flat_hash_set<Variable*> seen;
  if (ids.empty()) {
    for (const auto& [id, slot] : slots_) {
      if (slot.kind != Slot::kTensor) continue;
      Variable* var = VariableOf(slot.tensor);
      if (var != nullptr && seen.insert(var).second) vars.push_back(var);
    }
    std::sort(
        vars.begin(), vars.end(),
        [](const Variable* a, const Variable* b) { return a->name < b->name; });
    if (vars.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(cmd.what, " (command ", cmd.seq, ", checkpoint '", name,
                       "'): the session holds no variable handle"));
    }
    return vars;
  }
  for (int64_t id : ids) {
    ASSIGN_OR_RETURN(Tensor t, Resolve(cmd, id));
    Variable* var = VariableOf(t);
    if (var == nullptr) {
      return cmd.Error(absl::StatusCode::kInvalidArgument, "id ", id, " is ",
                       t.DebugString(),
                       ", not a variable handle (VarHandleOp's output)");
    }
    if (seen.insert(var).second) vars.push_back(var);
  }
  return vars;
}

bool Session::HoldsVariables() const {
  for (const auto& [id, slot] : slots_) {
    if (slot.kind == Slot::kTensor && VariableOf(slot.tensor) != nullptr) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<CheckpointSummary> Session::SaveCheckpoint(
    int64_t seq, absl::string_view name,
    absl::Span<const int64_t> variable_ids) {
  return Run(seq, "SaveCheckpoint", {},
             [&](const Command& cmd) -> absl::StatusOr<CheckpointSummary> {
               ASSIGN_OR_RETURN(std::vector<Variable*> vars,
                                CheckpointVariables(cmd, name, variable_ids));
               return cmd.Annotate(
                   SaveVariables(checkpoint_dir_, name, vars),
                   [&] { return absl::StrCat("checkpoint '", name, "'"); });
             });
}

absl::StatusOr<CheckpointSummary> Session::RestoreCheckpoint(
    int64_t seq, absl::string_view name,
    absl::Span<const int64_t> variable_ids) {
  return Run(
      seq, "RestoreCheckpoint", {},
      [&](const Command& cmd) -> absl::StatusOr<CheckpointSummary> {
        ASSIGN_OR_RETURN(std::vector<Variable*> vars,
                         CheckpointVariables(cmd, name, variable_ids));
        // The file may use what is left of the budget.
        const int64_t max_file_bytes =
            std::min(account_->remaining(), kMaxCheckpointFileBytes);
        return cmd.Annotate(
            RestoreVariables(checkpoint_dir_, name, vars, max_file_bytes),
            [&] { return absl::StrCat("checkpoint '", name, "'"); });
      });
}

absl::StatusOr<Tensor> Session::Peek(int64_t id) const {
  auto it = slots_.find(id);
  if (it == slots_.end() || it->second.kind != Slot::kTensor) {
    return absl::NotFoundError(absl::StrCat("no tensor at id ", id));
  }
  return it->second.tensor;
}

SessionStats Session::Stats(int64_t seq) {
  return *Run(
      seq, "Stats", {},
      [&](const Command&) -> absl::StatusOr<SessionStats> { return Stats(); });
}

SessionStats Session::Stats() const {
  SessionStats stats;
  for (const auto& [id, slot] : slots_) {
    if (slot.kind == Slot::kTensor) ++stats.live_tensors;
    if (slot.kind == Slot::kPoisoned) ++stats.poisoned_ids;
  }
  stats.bytes_in_use = account_->bytes();
  stats.tapes = exec_.tapes().num_tapes();
  exec_.tapes().ForEach([&](const Tape& tape) {
    stats.tape_entries += tape.num_entries();
    stats.tape_saved_bytes += tape.SavedBytes();
  });
  return stats;
}

}  // namespace gradtape
