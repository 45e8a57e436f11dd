// The reply budget of a batch: how many encoded bytes a BatchReply's results
// may take, what a result would take before it is built, the memory its
// copies are charged to, and the wording of a refusal (server/batch.h
// states the contract; server/prediction.h and server/commands.h use it).
//
// Every result is charged with its exact encoded size once it is in the
// reply. A command that puts data in the reply is checked against what
// remains before it is applied (FetchTensor measures the tensor it read
// before serialising it); if the data would not fit, the command fails
// alone with RESOURCE_EXHAUSTED and the batch goes on. kStopReserve is kept
// for the one error that ends a batch whose reply is full even of errors.
//
// Not thread-safe: one ReplyBudget per batch being applied.
#ifndef GRADTAPE_SERVER_REPLY_BUDGET_H_
#define GRADTAPE_SERVER_REPLY_BUDGET_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/session/session.h"
#include "core/tensor/tensor.h"
#include "gradtape/v1/tape_service.pb.h"

namespace gradtape::server {

// Memory: a reply's results are charged to the process's account (the
// server-wide budget, ProcessMemoryAccount) from before their data is
// copied until the reply is written, at twice their encoded bytes (the
// reply message and its serialised copy). A command that returns data
// (FetchTensor, chunk or whole; Gradient, Jacobian, FetchJvp with return
// values) reserves them first and, if the budget cannot fit them, fails
// alone with RESOURCE_EXHAUSTED "server memory budget exceeded" (nothing
// applied; its result ids poisoned). The caller holds the ReplyMemory with
// the serialised reply and lets it go once the reply is written.
class ReplyMemory {
 public:
  ReplyMemory() = default;
  ~ReplyMemory() { ShrinkTo(0); }
  ReplyMemory(ReplyMemory&& other) noexcept : bytes_(other.bytes_) {
    other.bytes_ = 0;
  }
  ReplyMemory& operator=(ReplyMemory&& other) noexcept;
  ReplyMemory(const ReplyMemory&) = delete;
  ReplyMemory& operator=(const ReplyMemory&) = delete;

  // Charges `bytes` unless the budget cannot fit them: then the account
  // that refused (nothing charged).
  const MemoryAccount* TryReserve(int64_t bytes);
  // Charges `bytes` without a check (data already in memory).
  void Add(int64_t bytes);
  // Refunds all but `bytes` (the message is gone, the serialised copy
  // stays).
  void ShrinkTo(int64_t bytes);
  int64_t bytes() const { return bytes_; }
  // Over every ReplyMemory in the process (metrics).
  static int64_t TotalBytes();

 private:
  void Charge(int64_t delta);

  int64_t bytes_ = 0;
};

inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// Room kept for the error that stops a full batch (its message is bounded).
inline constexpr int64_t kStopReserve = 1024;
// ApplyBatch raises a smaller limit to this.
inline constexpr int64_t kMinReplyBytes = 4 * kStopReserve;

// a + b, or kInt64Max when that overflows (sizes never wrap).
int64_t SaturatingAdd(int64_t a, int64_t b);

// Bytes of a CommandResult in the reply (its field in BatchReply included).
int64_t ReplyBytes(const v1::CommandResult& result);

// The encoded size of a result value: a TensorValue of `dtype` and `shape`
// with `num_elements` elements (-1: unknown, counted as too large).
struct ValueSize {
  DType dtype = DType::kInvalid;
  Shape shape;
  int64_t data_bytes = 0;
  int64_t encoded_bytes = 0;  // the TensorValue, saturated at kInt64Max
};
ValueSize SizeOfValue(DType dtype, Shape shape, int64_t num_elements);
ValueSize SizeOfTensor(const Tensor& t);
// The encoded size of the TensorChunk of `slice` (data_bytes: its length).
ValueSize SizeOfChunk(const Session::TensorSlice& slice);

// What a result would hold: its encoded size (the whole CommandResult in the
// reply) and the values, for messages.
struct ResultSize {
  int64_t reply_bytes = 0;
  std::vector<ValueSize> values;
};
// A CommandResult of `seq` holding `values` (GradientValues at `field`, or
// one TensorValue when `single_tensor`).
ResultSize SizeOfResult(int64_t seq, int field, std::vector<ValueSize> values,
                        bool single_tensor);

class ReplyBudget {
 public:
  // `memory` (may be null: not charged) gets twice every result's bytes.
  ReplyBudget(int64_t limit, ReplyMemory* memory);
  ~ReplyBudget();
  ReplyBudget(const ReplyBudget&) = delete;
  ReplyBudget& operator=(const ReplyBudget&) = delete;

  int64_t limit() const { return limit_; }
  // What results may still take (kStopReserve kept back).
  int64_t remaining() const { return limit_ - kStopReserve - used_; }
  bool Fits(int64_t reply_bytes) const { return reply_bytes <= remaining(); }
  // Only the stopping error may use the reserve.
  bool FitsInReserve(int64_t reply_bytes) const {
    return reply_bytes <= limit_ - used_;
  }
  void Charge(int64_t reply_bytes);
  // Before `seq`'s values of `reply_bytes` are copied (`what`: "FetchTensor
  // id 3 (float32[4])"): RESOURCE_EXHAUSTED when the server's budget cannot
  // fit them. What is reserved counts towards the result's Charge.
  absl::Status ReserveMemory(int64_t seq, absl::string_view command,
                             absl::string_view what, int64_t reply_bytes);

 private:
  const int64_t limit_;
  int64_t used_ = 0;
  ReplyMemory* const memory_;
  int64_t reserved_ = 0;  // by ReserveMemory, not yet charged
};

// Messages. "[1,2,3]", at most 8 ids shown.
std::string ListForMessage(absl::Span<const int64_t> ids);
// "float32[2,3], float64[]", at most 4 values shown.
std::string ValuesForMessage(absl::Span<const ValueSize> values);
// "N of the reply's L bytes remain" or, when the data alone exceeds a
// whole reply, says so.
std::string RoomForMessage(const ReplyBudget& budget, int64_t reply_bytes);
// The advice that ends a refusal of a tensor that may exceed a whole reply.
inline constexpr char kChunkedLater[] =
    "; a tensor larger than a whole reply moves in chunks (chunked transfer: "
    "FetchTensor with max_bytes)";

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_REPLY_BUDGET_H_
