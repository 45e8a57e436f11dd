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

absl::Status Session::Annotate(const absl::Status& s, int64_t seq,
                               absl::string_view what,
                               absl::string_view where) {
  absl::string_view detail = s.message();
  std::string prefix = absl::StrCat(what, ": ");
  if (absl::StartsWith(detail, prefix)) detail.remove_prefix(prefix.size());
  return absl::Status(
      s.code(), absl::StrCat(what, " (command ", seq, where.empty() ? "" : ", ",
                             where, "): ", detail));
}

Session::Session(const OpRegistry& registry, SessionOptions options)
    : account_(std::make_shared<MemoryAccount>()), ctx_(registry) {
  ctx_.SetMemoryLimit(account_, options.memory_limit_bytes);
  checkpoint_dir_ = options.checkpoint_dir;
}

Session::~Session() {
  // Tapes hold tensors too; drop everything while the account is current.
  ScopedMemoryAccount scope(account_);
  account_->Add(-kSlotBytes * static_cast<int64_t>(slots_.size()));
  slots_.clear();
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

absl::StatusOr<Tensor> Session::Resolve(int64_t seq, absl::string_view what,
                                        int64_t id) const {
  auto it = slots_.find(id);
  if (it == slots_.end()) {
    return absl::NotFoundError(absl::StrCat(what, " (command ", seq,
                                            "): unknown tensor id ", id,
                                            " (never created, or released)"));
  }
  const Slot& slot = it->second;
  if (slot.kind == Slot::kTensor) return slot.tensor;
  if (slot.kind == Slot::kNone) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " (command ", seq, "): tensor id ", id, " ", *slot.reason));
  }
  poisoned_read_seq_ = seq;
  poisoned_read_reason_ = slot.reason;
  return absl::FailedPreconditionError(absl::StrCat(
      what, " (command ", seq, "): tensor id ", id, " is poisoned: command ",
      slot.poisoned_by,
      ", which should have produced it, failed; the first failure was: ",
      *slot.reason));
}

absl::Status Session::ResolveAll(int64_t seq, absl::string_view what,
                                 absl::Span<const int64_t> ids,
                                 Tensors* out) const {
  out->clear();
  out->reserve(ids.size());
  for (int64_t id : ids) {
    ASSIGN_OR_RETURN(Tensor t, Resolve(seq, what, id));
    out->push_back(std::move(t));
  }
  return absl::OkStatus();
}

absl::Status Session::CheckFreeOutputs(int64_t seq, absl::string_view what,
                                       absl::Span<const int64_t> ids) const {
  absl::flat_hash_set<int64_t> seen;
  seen.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t id = ids[i];
    if (id == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " (command ", seq,
                       "): output id 0 is reserved; ids are "
                       "nonzero"));
    }
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " (command ", seq, "): output id ", id,
                       " appears twice in ", IdList(ids)));
    }
    auto it = slots_.find(id);
    if (it != slots_.end() && it->second.kind == Slot::kTensor) {
      return absl::AlreadyExistsError(absl::StrCat(
          what, " (command ", seq, "): output id ", id,
          " already holds a tensor (", it->second.tensor.DebugString(),
          "); release it first or choose a new id"));
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
    if (it != slots_.end() && it->second.kind == Slot::kTensor) continue;
    if (reason == nullptr) {
      reason = MakeReason(absl::StrCat(absl::StatusCodeToString(failure.code()),
                                       ": ", failure.message()));
    }
    SlotFor(id) = Slot{Slot::kPoisoned, Tensor(), reason, seq};
  }
}

void Session::Fail(int64_t seq, absl::Span<const int64_t> outputs,
                   const absl::Status& failure) {
  last_seq_ = seq;
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
  if (tensor_id != 0) ctx_.Forget(tensor_id);
}

absl::Status Session::ExecuteOp(int64_t seq, absl::string_view op_name,
                                absl::Span<const int64_t> inputs,
                                absl::Span<const int64_t> outputs,
                                AttrMap attrs) {
  last_seq_ = seq;
  ScopedMemoryAccount scope(account_);
  absl::Status status = [&]() -> absl::Status {
    const OpDef* op = ctx_.registry().Find(op_name);
    if (op == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("command ", seq, ": unknown op ", QuoteName(op_name),
                       " (ListOps returns the registered ops)"));
    }
    if (static_cast<int>(outputs.size()) != op->num_outputs()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op_name, " (command ", seq, "): has ", op->num_outputs(),
          " outputs, got ", outputs.size(), " output ids ", IdList(outputs)));
    }
    if (static_cast<int>(inputs.size()) != op->num_inputs()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op_name, " (command ", seq, "): takes ", op->num_inputs(),
          " inputs, got ", inputs.size(), " input ids ", IdList(inputs)));
    }
    Tensors in;
    RETURN_IF_ERROR(ResolveAll(seq, op_name, inputs, &in));
    RETURN_IF_ERROR(CheckFreeOutputs(seq, op_name, outputs));
    Tensors out;
    if (absl::Status s = ctx_.Execute(*op, in, std::move(attrs), &out);
        !s.ok()) {
      return Annotate(s, seq, op_name,
                      absl::StrCat("input ids ", IdList(inputs)));
    }
    for (size_t i = 0; i < outputs.size(); ++i) Store(outputs[i], out[i]);
    return absl::OkStatus();
  }();
  if (!status.ok()) Poison(seq, outputs, status);
  return status;
}

absl::Status Session::PutTensor(int64_t seq, int64_t id, DType dtype,
                                absl::Span<const int64_t> shape,
                                absl::string_view bytes) {
  last_seq_ = seq;
  ScopedMemoryAccount scope(account_);
  int64_t ids[] = {id};
  absl::Status status = CheckFreeOutputs(seq, "PutTensor", ids);
  if (status.ok()) {
    absl::StatusOr<Tensor> t = Tensor::FromBytes(dtype, shape, bytes);
    if (!t.ok()) {
      status = Annotate(t.status(), seq, "PutTensor", absl::StrCat("id ", id));
    } else {
      Store(id, ctx_.Adopt(*std::move(t)));
    }
  }
  if (!status.ok()) Poison(seq, ids, status);
  return status;
}

absl::Status Session::PutTensor(int64_t seq, int64_t id, const Tensor& value) {
  return PutTensor(seq, id, value.dtype(), value.shape(),
                   absl::string_view(static_cast<const char*>(value.raw_data()),
                                     value.num_bytes()));
}

absl::StatusOr<Tensor> Session::FetchTensor(int64_t seq, int64_t id) {
  last_seq_ = seq;
  return Resolve(seq, "FetchTensor", id);
}

absl::Status Session::ReleaseTensors(int64_t seq,
                                     absl::Span<const int64_t> ids) {
  last_seq_ = seq;
  for (int64_t id : ids) {
    if (!slots_.contains(id)) {
      return absl::NotFoundError(absl::StrCat("ReleaseTensors (command ", seq,
                                              "): unknown tensor id ", id,
                                              "; nothing was released"));
    }
  }
  ScopedMemoryAccount scope(account_);
  for (int64_t id : ids) Drop(id);
  return absl::OkStatus();
}

absl::Status Session::PushTape(int64_t seq, int64_t tape, bool persistent,
                               bool watch_accessed_variables) {
  last_seq_ = seq;
  if (account_->remaining() < Tape::kTapeBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "PushTape (command ", seq, "): session memory limit exceeded (",
        account_->bytes(), " bytes in use, limit ", account_->limit(),
        "); release tensors or delete tapes"));
  }
  ScopedMemoryAccount scope(account_);
  absl::Status s =
      ctx_.tapes().Push(tape, persistent, watch_accessed_variables);
  return s.ok() ? s : Annotate(s, seq, "PushTape");
}

absl::Status Session::PopTape(int64_t seq, int64_t tape) {
  last_seq_ = seq;
  absl::Status s = ctx_.tapes().Pop(tape);
  return s.ok() ? s : Annotate(s, seq, "PopTape");
}

absl::Status Session::DeleteTape(int64_t seq, int64_t tape) {
  last_seq_ = seq;
  ScopedMemoryAccount scope(account_);
  absl::Status s = ctx_.tapes().Delete(tape);
  return s.ok() ? s : Annotate(s, seq, "DeleteTape");
}

absl::Status Session::Watch(int64_t seq, int64_t tape_id,
                            absl::Span<const int64_t> ids) {
  last_seq_ = seq;
  absl::StatusOr<Tape*> tape = ctx_.tapes().Find(tape_id);
  if (!tape.ok()) return Annotate(tape.status(), seq, "Watch");
  Tensors tensors;
  RETURN_IF_ERROR(ResolveAll(seq, "Watch", ids, &tensors));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!IsTrainable(tensors[i].dtype())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Watch (command ", seq, "): tensor id ", ids[i], " is ",
          tensors[i].DebugString(),
          "; only floating, complex and variable-handle tensors can be "
          "watched"));
    }
  }
  for (const Tensor& t : tensors) (*tape)->Watch(t);
  return absl::OkStatus();
}

absl::Status Session::StopRecording(int64_t seq) {
  last_seq_ = seq;
  ctx_.tapes().StopRecording();
  return absl::OkStatus();
}

absl::Status Session::StartRecording(int64_t seq) {
  last_seq_ = seq;
  ctx_.tapes().StartRecording();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> Session::Gradient(
    int64_t seq, const GradientRequest& request) {
  last_seq_ = seq;
  ScopedMemoryAccount scope(account_);
  std::vector<Tensor> results;
  absl::Status status = [&]() -> absl::Status {
    if (request.result_ids.size() != request.sources.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Gradient (command ", seq, "): ", request.sources.size(),
          " sources but ", request.result_ids.size(), " result ids"));
    }
    if (request.targets.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gradient (command ", seq, "): no targets"));
    }
    absl::StatusOr<Tape*> tape = ctx_.tapes().Find(request.tape);
    if (!tape.ok()) return Annotate(tape.status(), seq, "Gradient");
    Tensors targets, sources, output_grads;
    RETURN_IF_ERROR(ResolveAll(seq, "Gradient", request.targets, &targets));
    RETURN_IF_ERROR(ResolveAll(seq, "Gradient", request.sources, &sources));
    for (int64_t id : request.output_gradients) {
      if (id == 0) {
        output_grads.push_back(Tensor());
        continue;
      }
      ASSIGN_OR_RETURN(Tensor t, Resolve(seq, "Gradient", id));
      output_grads.push_back(std::move(t));
    }
    RETURN_IF_ERROR(CheckFreeOutputs(seq, "Gradient", request.result_ids));
    absl::StatusOr<std::vector<Tensor>> grads = gradtape::Gradient(
        ctx_, **tape, targets, sources, output_grads, request.unconnected);
    if (!grads.ok()) {
      return Annotate(grads.status(), seq, "Gradient",
                      absl::StrCat("tape ", request.tape));
    }
    results = *std::move(grads);
    absl::flat_hash_set<int64_t> stored;
    for (size_t i = 0; i < results.size(); ++i) {
      Tensor& r = results[i];
      if (!r.valid()) {
        StoreNone(request.result_ids[i],
                  absl::StrCat(
                      "is a None gradient: source id ", request.sources[i],
                      " is not connected to the targets on tape ", request.tape,
                      " (ask for unconnected_gradients=ZERO to get "
                      "zeros)"));
        continue;
      }
      // One id, one handle: a repeated source gets its own copy of the id.
      if (!stored.insert(r.id()).second) r = ctx_.Adopt(r);
      Store(request.result_ids[i], r);
    }
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    Poison(seq, request.result_ids, status);
    return status;
  }
  return results;
}

// --- Training: checkpoints --------------------------------------------------

absl::StatusOr<std::vector<Variable*>> Session::CheckpointVariables(
    int64_t seq, absl::string_view what, absl::string_view name,
    absl::Span<const int64_t> ids) const {
  if (checkpoint_dir_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " (command ", seq,
        "): checkpoints are disabled on this server; start gradtape-server "
        "with --checkpoint_dir=DIR"));
  }
  if (absl::Status s = ValidateCheckpointName(name); !s.ok()) {
    return Annotate(s, seq, what);
  }
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
          absl::StrCat(what, " (command ", seq, ", checkpoint '", name,
                       "'): the session holds no variable handle"));
    }
    return vars;
  }
  for (int64_t id : ids) {
    ASSIGN_OR_RETURN(Tensor t, Resolve(seq, what, id));
    Variable* var = VariableOf(t);
    if (var == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " (command ", seq, "): id ", id, " is ", t.DebugString(),
          ", not a variable handle (VarHandleOp's output)"));
    }
    if (seen.insert(var).second) vars.push_back(var);
  }
  return vars;
}

absl::StatusOr<CheckpointSummary> Session::SaveCheckpoint(
    int64_t seq, absl::string_view name,
    absl::Span<const int64_t> variable_ids) {
  last_seq_ = seq;
  ASSIGN_OR_RETURN(
      std::vector<Variable*> vars,
      CheckpointVariables(seq, "SaveCheckpoint", name, variable_ids));
  absl::StatusOr<CheckpointSummary> summary =
      SaveVariables(checkpoint_dir_, name, vars);
  if (!summary.ok()) {
    return Annotate(summary.status(), seq, "SaveCheckpoint",
                    absl::StrCat("checkpoint '", name, "'"));
  }
  return summary;
}

absl::StatusOr<CheckpointSummary> Session::RestoreCheckpoint(
    int64_t seq, absl::string_view name,
    absl::Span<const int64_t> variable_ids) {
  last_seq_ = seq;
  ScopedMemoryAccount scope(account_);
  ASSIGN_OR_RETURN(
      std::vector<Variable*> vars,
      CheckpointVariables(seq, "RestoreCheckpoint", name, variable_ids));
  absl::StatusOr<CheckpointSummary> summary = RestoreVariables(
      checkpoint_dir_, name, vars,
      // The file may use what is left of the budget.
      std::min(account_->remaining(), kMaxCheckpointFileBytes));
  if (!summary.ok()) {
    return Annotate(summary.status(), seq, "RestoreCheckpoint",
                    absl::StrCat("checkpoint '", name, "'"));
  }
  return summary;
}

absl::StatusOr<Tensor> Session::Peek(int64_t id) const {
  auto it = slots_.find(id);
  if (it == slots_.end() || it->second.kind != Slot::kTensor) {
    return absl::NotFoundError(absl::StrCat("no tensor at id ", id));
  }
  return it->second.tensor;
}

SessionStats Session::Stats() const {
  SessionStats stats;
  for (const auto& [id, slot] : slots_) {
    if (slot.kind == Slot::kTensor) ++stats.live_tensors;
    if (slot.kind == Slot::kPoisoned) ++stats.poisoned_ids;
  }
  stats.bytes_in_use = account_->bytes();
  stats.tapes = ctx_.tapes().num_tapes();
  ctx_.tapes().ForEach([&](const Tape& tape) {
    stats.tape_entries += tape.num_entries();
    stats.tape_saved_bytes += tape.SavedBytes();
  });
  return stats;
}

}  // namespace gradtape
