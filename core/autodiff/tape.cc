#include "core/autodiff/tape.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/autodiff/custom_gradient.h"
#include "core/autodiff/elision_stats.h"

namespace gradtape {
namespace {

std::atomic<int64_t> elision_saved_bytes{0};

}  // namespace

int64_t ElisionSavedBytesTotal() {
  return elision_saved_bytes.load(std::memory_order_relaxed);
}

bool Tape::ShouldRecord(absl::Span<const Tensor> inputs) const {
  for (const Tensor& t : inputs) {
    if (t.id() != 0 && IsTrainable(t.dtype()) &&
        Producer(t.id()) != kNotOnTape) {
      return true;
    }
  }
  return false;
}

void Tape::Watch(const Tensor& tensor) {
  if (tensor.id() == 0) return;
  TensorState& state = tensors_[tensor.id()];
  if (state.producer != kNotOnTape) return;  // already on the tape
  state.producer = kWatched;
  state.usage += 1;
  if (tensor.dtype() == DType::kResource) {
    const void* var = tensor.resource<void>();
    for (const Tensor& w : watched_variables_) {
      if (w.resource<void>() == var) return;
    }
    watched_variables_.push_back(tensor);
  }
}

void Tape::RecordOperation(const OpDef& op,
                           std::shared_ptr<const AttrMap> attrs,
                           absl::Span<const Tensor> inputs,
                           absl::Span<const Tensor> outputs,
                           std::shared_ptr<const GradientProgram> custom,
                           std::shared_ptr<const OpDef> instance) {
  const int64_t op_id = entries_.next_id();
  TapeEntry& entry = entries_.Append();
  entry.op = &op;
  entry.instance = std::move(instance);
  entry.attrs = std::move(attrs);
  const std::vector<bool>& input_saved =
      custom ? CustomSavedInputs(*custom) : op.input_saved;
  const std::vector<bool>& output_saved =
      custom ? CustomSavedOutputs(*custom) : op.output_saved;
  entry.custom = std::move(custom);
  const int n_in = static_cast<int>(inputs.size());
  const int n_out = static_cast<int>(outputs.size());
  int64_t elided_bytes = 0;  // of the tensors not saved
  entry.inputs.resize(n_in);
  entry.saved_inputs.resize(n_in);
  for (int i = 0; i < n_in; ++i) {
    const Tensor& t = inputs[i];
    entry.inputs[i] = {t.id(), t.dtype(), t.shape()};
    if (input_saved[i]) {
      entry.saved_inputs[i] = t;
    } else if (t.valid()) {
      elided_bytes += static_cast<int64_t>(t.num_bytes());
    }
    if (t.id() != 0) tensors_[t.id()].usage += 1;
  }
  entry.outputs.resize(n_out);
  entry.saved_outputs.resize(n_out);
  for (int i = 0; i < n_out; ++i) {
    const Tensor& t = outputs[i];
    entry.outputs[i] = {t.id(), t.dtype(), t.shape()};
    if (output_saved[i]) {
      entry.saved_outputs[i] = t;
    } else if (t.valid()) {
      elided_bytes += static_cast<int64_t>(t.num_bytes());
    }
    tensors_[t.id()] = {op_id, 1};
  }
  if (elided_bytes > 0) {
    elision_saved_bytes.fetch_add(elided_bytes, std::memory_order_relaxed);
  }
}

void Tape::DeleteTrace(int64_t id) {
  // A work list, not recursion: releasing the end of a chain of n recorded
  // ops frees n entries, and a recursion that deep (one frame per op, a
  // chain of 40,000 AddV2 from a client) overflowed the stack.
  std::vector<int64_t> released = {id};
  while (!released.empty()) {
    const int64_t next = released.back();
    released.pop_back();
    DeleteOne(next, &released);
  }
}

void Tape::DeleteOne(int64_t id, std::vector<int64_t>* released) {
  auto it = tensors_.find(id);
  if (it == tensors_.end() || it->second.usage == 0) return;
  if (--it->second.usage > 0) return;
  const int64_t op_id = it->second.producer;
  if (op_id == kWatched) return;  // Sources stay watched for the tape's life.
  TapeEntry* entry = op_id >= 0 ? entries_.Find(op_id) : nullptr;
  if (entry == nullptr) {
    // Not produced here, or the producer was consumed by a gradient.
    tensors_.erase(it);
    return;
  }
  bool saved = false;  // by this entry, for its backward
  bool alive = false;  // another output is used
  for (size_t j = 0; j < entry->outputs.size(); ++j) {
    if (entry->outputs[j].id == id) {
      saved = entry->saved_outputs[j].valid();
      continue;
    }
    auto out_it = tensors_.find(entry->outputs[j].id);
    alive = alive || (out_it != tensors_.end() && out_it->second.usage > 0);
  }
  if (!alive) {
    EraseEntry(op_id, *entry, released);
    return;
  }
  // The entry stays. An output it saves stays on the tape with it, unused:
  // the ops its backward runs on the saved tensor must be recorded (by an
  // outer tape) as depending on this op.
  if (!saved) tensors_.erase(it);
}

void Tape::EraseEntry(int64_t op_id, TapeEntry& entry,
                      std::vector<int64_t>* released) {
  // Its outputs leave the tape (the unused saved ones were kept for it).
  for (const TensorMeta& out : entry.outputs) {
    auto out_it = tensors_.find(out.id);
    if (out_it != tensors_.end() && out_it->second.producer == op_id) {
      tensors_.erase(out_it);
    }
  }
  for (const TensorMeta& in : entry.inputs) {
    if (in.id != 0) released->push_back(in.id);
  }
  entries_.Erase(op_id);
}

void Tape::MarkUsed() {
  used_ = true;
  entries_.Clear();
  tensors_.clear();
}

int64_t Tape::SavedBytes() const {
  int64_t bytes = 0;
  ForEachEntry([&](int64_t, const TapeEntry& entry) {
    for (const Tensor& t : entry.saved_inputs) {
      if (t.valid()) bytes += t.num_bytes();
    }
    for (const Tensor& t : entry.saved_outputs) {
      if (t.valid()) bytes += t.num_bytes();
    }
  });
  return bytes;
}

TapeEntry& Tape::EntryStore::Append() {
  if (unused_ == 0) {
    chunks_.push_back(std::make_unique<Chunk>());
    chunks_.back()->charge =
        MemoryCharge(static_cast<int64_t>(sizeof(Chunk)) + kChunk * 64);
    unused_ = kChunk;
  }
  TapeEntry& e = chunks_.back()->entries[kChunk - unused_];
  --unused_;
  ++live_;
  return e;
}

const TapeEntry* Tape::EntryStore::Find(int64_t op_id) const {
  if (op_id < first_id_ || op_id >= next_id()) return nullptr;
  const int64_t i = op_id - first_id_;
  const TapeEntry& e = chunks_[i / kChunk]->entries[i % kChunk];
  return e.op != nullptr ? &e : nullptr;
}

TapeEntry* Tape::EntryStore::Find(int64_t op_id) {
  return const_cast<TapeEntry*>(std::as_const(*this).Find(op_id));
}

void Tape::EntryStore::Erase(int64_t op_id) {
  TapeEntry* e = Find(op_id);
  if (e == nullptr) return;
  *e = TapeEntry();  // frees what the entry kept
  --live_;
  const int64_t i = op_id - first_id_;
  ++chunks_[i / kChunk]->erased;
  // Free leading chunks whose every entry was appended and erased.
  while (!chunks_.empty() && chunks_.front()->erased == kChunk) {
    chunks_.pop_front();
    first_id_ += kChunk;
  }
}

void Tape::EntryStore::Clear() {
  first_id_ = next_id();
  chunks_.clear();
  unused_ = 0;
  live_ = 0;
}

void TapeSet::Record(const OpDef& op, const AttrMap& attrs,
                     absl::Span<const Tensor> inputs,
                     absl::Span<const Tensor> outputs,
                     std::shared_ptr<const GradientProgram> custom,
                     std::shared_ptr<const OpDef> instance) {
  std::shared_ptr<const AttrMap> shared_attrs;
  for (Tape* tape : active_) {
    if (tape->watch_accessed_variables()) {
      for (const Tensor& t : inputs) {
        if (t.dtype() == DType::kResource) tape->Watch(t);
      }
    }
    if (!tape->ShouldRecord(inputs)) continue;
    if (shared_attrs == nullptr && !attrs.empty()) {
      shared_attrs = std::make_shared<const AttrMap>(attrs);
    }
    tape->RecordOperation(op, shared_attrs, inputs, outputs, custom, instance);
  }
}

void TapeSet::DeleteTrace(int64_t id) {
  for (auto& [tape_id, tape] : tapes_) tape->DeleteTrace(id);
}

absl::Status TapeSet::Push(int64_t tape_id, bool persistent,
                           bool watch_accessed_variables) {
  if (tape_id == 0) {
    return absl::InvalidArgumentError(
        "tape id 0 is reserved; tape ids are nonzero");
  }
  auto [it, inserted] = tapes_.try_emplace(tape_id);
  if (!inserted) {
    // A popped tape is pushed again (TensorFlow's tape.stop_recording()
    // and re-entering a tape): it keeps what it recorded.
    Tape* tape = it->second.get();
    if (IsActive(tape) || tape->persistent() != persistent ||
        tape->watch_accessed_variables() != watch_accessed_variables) {
      return absl::AlreadyExistsError(
          absl::StrCat("tape ", tape_id,
                       IsActive(tape) ? " already exists and is recording"
                                      : " already exists with other flags",
                       "; delete it first"));
    }
    active_.push_back(tape);
    return absl::OkStatus();
  }
  it->second = std::make_unique<Tape>(persistent, watch_accessed_variables);
  active_.push_back(it->second.get());
  return absl::OkStatus();
}

absl::Status TapeSet::Pop(int64_t tape_id) {
  auto tape = Find(tape_id);
  if (!tape.ok()) return tape.status();
  auto it = std::find(active_.begin(), active_.end(), *tape);
  if (it == active_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("tape ", tape_id, " is not recording (already popped)"));
  }
  active_.erase(it);
  return absl::OkStatus();
}

absl::Status TapeSet::Delete(int64_t tape_id) {
  auto it = tapes_.find(tape_id);
  if (it == tapes_.end()) {
    return absl::NotFoundError(absl::StrCat("tape ", tape_id, " not found"));
  }
  active_.erase(std::remove(active_.begin(), active_.end(), it->second.get()),
                active_.end());
  tapes_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<Tape*> TapeSet::Find(int64_t tape_id) {
  auto it = tapes_.find(tape_id);
  if (it == tapes_.end()) {
    return absl::NotFoundError(
        absl::StrCat("tape ", tape_id, " not found (push it first)"));
  }
  return it->second.get();
}

bool TapeSet::IsActive(const Tape* tape) const {
  return std::find(active_.begin(), active_.end(), tape) != active_.end();
}

TapeSet::ScopedSuspend::ScopedSuspend(TapeSet& set, Tape* tape)
    : set_(set), tape_(tape) {
  auto it = std::find(set_.active_.begin(), set_.active_.end(), tape_);
  if (it == set_.active_.end()) return;
  position_ = static_cast<int>(it - set_.active_.begin());
  set_.active_.erase(it);
}

TapeSet::ScopedSuspend::~ScopedSuspend() {
  if (position_ < 0) return;
  set_.active_.insert(set_.active_.begin() + position_, tape_);
}

TapeSet::ScopedActivate::ScopedActivate(TapeSet& set, Tape* tape)
    : set_(set), tape_(tape) {
  set_.active_.push_back(tape_);
}

TapeSet::ScopedActivate::~ScopedActivate() {
  set_.active_.erase(
      std::remove(set_.active_.begin(), set_.active_.end(), tape_),
      set_.active_.end());
}

}  // namespace gradtape
