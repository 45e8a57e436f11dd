// Gradient tapes (semantics of TensorFlow's tensorflow/c/eager/tape.h).
//
// A Tape records, for every op whose input it watches, one TapeEntry: the
// op, its attrs, the id/dtype/shape of each input and output, and the tensors
// the op's backward reads -- only those, as the OpDef declares (elision).
//
// Identity is by tensor id (Tensor::id), never by address. A tensor is "on
// the tape" if it was watched or produced by a recorded op. Op ids increase
// with recording order, so an op's inputs were produced by ops with smaller
// ids: descending op id is a reverse topological order, which is what
// the gradient engine (core/autodiff/gradient.h) walks.
//
// Lifetime (DeleteTrace): every tensor on the tape has a usage count of one
// for the handle that names it plus one per recorded op that consumes it.
// When no output of an op is used any more, the entry is erased, which
// frees its saved tensors, takes its outputs off the tape and releases its
// inputs in turn. When the handle of a tensor is released and no recorded op
// uses it, the tensor leaves the tape -- unless its producer's entry stays
// (another output is used) and saves it for its backward: then it stays on
// the tape, unused, until the entry goes. A backward that reads a saved
// tensor runs ops on it, and a tape that records those ops (a gradient of a
// gradient) must see them depend on the tensor's producer, whatever the
// client released. A released tensor that nothing saves leaves at once.
//
// Not thread-safe: a tape belongs to one session, whose lock guards it.
#ifndef GRADTAPE_CORE_AUTODIFF_TAPE_H_
#define GRADTAPE_CORE_AUTODIFF_TAPE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/registry/op_registry.h"
#include "core/tensor/attrs.h"
#include "core/tensor/tensor.h"

namespace gradtape {

struct GradientProgram;

struct TensorMeta {
  int64_t id = 0;
  DType dtype = DType::kInvalid;
  Shape shape;
};

struct TapeEntry {
  const OpDef* op = nullptr;
  // Owns `op` when it is a list op's instance (OpDef::Instantiate).
  std::shared_ptr<const OpDef> instance;
  std::shared_ptr<const AttrMap> attrs;  // null: no attrs
  absl::InlinedVector<TensorMeta, 2> inputs;
  absl::InlinedVector<TensorMeta, 1> outputs;
  // One slot per input / output; valid only where the op declares it saved
  // (or, with `custom`, where that program reads it).
  Tensors saved_inputs;
  Tensors saved_outputs;
  // Non-null: a client-given backward for this one execution, run instead
  // of the op's (core/autodiff/custom_gradient.h).
  std::shared_ptr<const GradientProgram> custom;
};

class Tape {
 public:
  // Producer() of a source, and of a tensor that is not on the tape.
  static constexpr int64_t kWatched = -1;
  static constexpr int64_t kNotOnTape = -2;

  // The tape's own memory is charged to the thread's current account.
  Tape(bool persistent, bool watch_accessed_variables)
      : persistent_(persistent),
        watch_accessed_variables_(watch_accessed_variables),
        charge_(kTapeBytes) {}
  // What an empty tape costs its account (the object and its maps' first
  // allocations).
  static constexpr int64_t kTapeBytes = 1024;
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  bool persistent() const { return persistent_; }
  // Jacobian computes many gradients on one tape: it makes a non-persistent
  // tape persistent for that long, then marks it used.
  void set_persistent(bool persistent) { persistent_ = persistent; }
  bool watch_accessed_variables() const { return watch_accessed_variables_; }

  // True if any input is on the tape and has a trainable dtype.
  bool ShouldRecord(absl::Span<const Tensor> inputs) const;
  void Watch(const Tensor& tensor);
  // Records `op`; the caller has checked ShouldRecord.
  void RecordOperation(const OpDef& op, std::shared_ptr<const AttrMap> attrs,
                       absl::Span<const Tensor> inputs,
                       absl::Span<const Tensor> outputs,
                       std::shared_ptr<const GradientProgram> custom = nullptr,
                       std::shared_ptr<const OpDef> instance = nullptr);
  // The variable handles this tape watched (explicitly, or as accessed
  // variables), in watch order, one per variable (TensorFlow's
  // watched_variables). The tape keeps them alive.
  const std::vector<Tensor>& watched_variables() const {
    return watched_variables_;
  }
  // The handle of tensor `id` was released.
  void DeleteTrace(int64_t id);

  // For the gradient engine and introspection.
  // The op that produced tensor `id` on this tape, kWatched or kNotOnTape.
  int64_t Producer(int64_t id) const {
    auto it = tensors_.find(id);
    return it == tensors_.end() ? kNotOnTape : it->second.producer;
  }
  // The entry of op `op_id`, or null if it was erased (or never recorded).
  const TapeEntry* FindEntry(int64_t op_id) const {
    return entries_.Find(op_id);
  }
  // Live entries, and fn(op_id, entry) for each in op id order.
  size_t num_entries() const { return entries_.size(); }
  template <typename Fn>
  void ForEachEntry(Fn&& fn) const {
    entries_.ForEach(fn);
  }
  // Drops the entry's saved tensors (non-persistent tapes, after its backward
  // ran).
  void ForgetEntry(int64_t op_id) { entries_.Erase(op_id); }
  // After a non-persistent tape computed its gradient: drops everything.
  void MarkUsed();
  bool used() const { return used_; }
  // Bytes of the tensors held by entries (shared buffers counted per entry).
  int64_t SavedBytes() const;

 private:
  bool persistent_;
  bool watch_accessed_variables_;
  bool used_ = false;
  // Entries by op id. Op ids are dense and increasing, so they index a
  // deque of fixed-size chunks: recording appends without rehashing (or
  // moving) earlier entries; a chunk is freed once all its entries are.
  class EntryStore {
   public:
    int64_t next_id() const { return first_id_ + slots(); }
    TapeEntry& Append();
    const TapeEntry* Find(int64_t op_id) const;
    TapeEntry* Find(int64_t op_id);
    void Erase(int64_t op_id);
    void Clear();
    size_t size() const { return live_; }
    template <typename Fn>
    void ForEach(Fn& fn) const {
      for (int64_t id = first_id_; id < next_id(); ++id) {
        if (const TapeEntry* e = Find(id)) fn(id, *e);
      }
    }

   private:
    static constexpr int64_t kChunk = 64;
    struct Chunk {
      TapeEntry entries[kChunk];  // op == nullptr: erased or not yet used
      int64_t erased = 0;
      // The chunk, and an allowance for the tape's per-tensor map entries
      // of its ops, on the session's account.
      MemoryCharge charge;
    };
    int64_t slots() const {
      return static_cast<int64_t>(chunks_.size()) * kChunk - unused_;
    }
    std::deque<std::unique_ptr<Chunk>> chunks_;
    int64_t first_id_ = 0;  // op id of chunks_.front()->entries[0]
    int64_t unused_ = 0;    // slots not yet appended in the last chunk
    size_t live_ = 0;
  };

  // Drops one use of tensor `id`; when that frees its producer's entry,
  // appends the entry's inputs to `released` (DeleteTrace's work list).
  void DeleteOne(int64_t id, std::vector<int64_t>* released);
  // Erases live entry `op_id` (`entry`) and its outputs' states, and
  // appends its inputs to `released`.
  void EraseEntry(int64_t op_id, TapeEntry& entry,
                  std::vector<int64_t>* released);

  // Per tensor id, one lookup for both: the op that produced it (kWatched,
  // or kNotOnTape for a tensor only consumed by recorded ops) and its usage
  // (live handles + recorded consumers). An id leaves the map when it is
  // neither on the tape nor used, but an output its live producer entry
  // saves stays with usage 0; a source stays for the tape's life.
  struct TensorState {
    int64_t producer = kNotOnTape;
    int64_t usage = 0;
  };
  absl::flat_hash_map<int64_t, TensorState> tensors_;
  EntryStore entries_;
  std::vector<Tensor> watched_variables_;
  MemoryCharge charge_;
};

// The tapes of one session: all tapes by client-chosen tape id, the active
// (pushed) ones in push order, and the stop/start recording flag.
class TapeSet {
 public:
  // The fast path: false when no tape can record anything (none active, or
  // recording stopped), checked before looking at any input.
  bool CouldRecord() const { return !stopped_ && !active_.empty(); }

  // Records the op on every active tape that should record it.
  void Record(const OpDef& op, const AttrMap& attrs,
              absl::Span<const Tensor> inputs, absl::Span<const Tensor> outputs,
              std::shared_ptr<const GradientProgram> custom = nullptr,
              std::shared_ptr<const OpDef> instance = nullptr);
  // Handle of `id` released: tell every tape, active or not.
  void DeleteTrace(int64_t id);

  // Creates tape `tape_id` and makes it record; a popped tape with the same
  // flags records again, keeping its entries (ALREADY_EXISTS otherwise).
  absl::Status Push(int64_t tape_id, bool persistent,
                    bool watch_accessed_variables);
  // Stops recording into the tape; it stays usable for gradients.
  absl::Status Pop(int64_t tape_id);
  // Frees the tape (popping it first if active).
  absl::Status Delete(int64_t tape_id);
  absl::StatusOr<Tape*> Find(int64_t tape_id);
  bool IsActive(const Tape* tape) const;

  void StopRecording() { stopped_ = true; }
  void StartRecording() { stopped_ = false; }
  bool stopped() const { return stopped_; }

  const std::vector<Tape*>& active() const { return active_; }
  size_t num_tapes() const { return tapes_.size(); }
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const auto& [id, tape] : tapes_) fn(*tape);
  }

  // Keeps `tape` from recording while it exists (a gradient on a tape that
  // is still pushed must not record its own backward).
  class ScopedSuspend {
   public:
    ScopedSuspend(TapeSet& set, Tape* tape);
    ~ScopedSuspend();

   private:
    TapeSet& set_;
    Tape* tape_;
    int position_ = -1;
  };

  // Makes `tape` (not one of the set's: an internal tape, e.g. forward
  // mode's) record as the innermost active tape while it exists.
  class ScopedActivate {
   public:
    ScopedActivate(TapeSet& set, Tape* tape);
    ~ScopedActivate();

   private:
    TapeSet& set_;
    Tape* tape_;
  };

  // Stops recording on every tape while it exists (restores the flag).
  class ScopedStop {
   public:
    explicit ScopedStop(TapeSet& set) : set_(set), was_(set.stopped_) {
      set_.stopped_ = true;
    }
    ~ScopedStop() { set_.stopped_ = was_; }

   private:
    TapeSet& set_;
    bool was_;
  };

 private:
  absl::flat_hash_map<int64_t, std::unique_ptr<Tape>> tapes_;
  std::vector<Tape*> active_;
  bool stopped_ = false;
};

}  // namespace gradtape

#endif  // GRADTAPE_CORE_AUTODIFF_TAPE_H_
