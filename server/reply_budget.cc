#include "server/reply_budget.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/session/command.h"
#include "google/protobuf/io/coded_stream.h"
#include "server/convert.h"
#include "server/memory_budget.h"

namespace gradtape::server {
namespace {

int64_t SaturatingMul(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return kInt64Max;  // unknown: refuse, never wrap
  int64_t product;
  return __builtin_mul_overflow(a, b, &product) ? kInt64Max : product;
}

// Bytes of a length-delimited field: tag, length varint, payload.
int64_t FieldBytes(int field_number, int64_t payload) {
  using google::protobuf::io::CodedOutputStream;
  return SaturatingAdd(payload, CodedOutputStream::VarintSize32(
                                    static_cast<uint32_t>(field_number) << 3) +
                                    CodedOutputStream::VarintSize64(
                                        static_cast<uint64_t>(payload)));
}

std::atomic<int64_t> g_reply_bytes{0};

}  // namespace

int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > kInt64Max - b ? kInt64Max : a + b;
}

int64_t ReplyBytes(const v1::CommandResult& result) {
  return FieldBytes(v1::BatchReply::kResultsFieldNumber,
                    static_cast<int64_t>(result.ByteSizeLong()));
}

ValueSize SizeOfValue(DType dtype, Shape shape, int64_t num_elements) {
  ValueSize size;
  size.dtype = dtype;
  size.shape = std::move(shape);
  size.data_bytes =
      SaturatingMul(num_elements, static_cast<int64_t>(DTypeSize(dtype)));
  v1::TensorValue header;
  header.set_dtype(ToProto(dtype));
  header.mutable_shape()->Add(size.shape.begin(), size.shape.end());
  size.encoded_bytes = static_cast<int64_t>(header.ByteSizeLong());
  if (size.data_bytes > 0) {
    size.encoded_bytes = SaturatingAdd(
        size.encoded_bytes,
        FieldBytes(v1::TensorValue::kDataFieldNumber, size.data_bytes));
  }
  return size;
}

ValueSize SizeOfTensor(const Tensor& t) {
  return SizeOfValue(t.dtype(), t.shape(), t.num_elements());
}

// The encoded size of the TensorChunk of `slice` (data_bytes: its length).
ValueSize SizeOfChunk(const Session::TensorSlice& slice) {
  ValueSize size;
  size.dtype = slice.tensor.dtype();
  size.shape = slice.tensor.shape();
  size.data_bytes = slice.length;
  v1::TensorChunk header;
  header.set_dtype(ToProto(size.dtype));
  header.mutable_shape()->Add(size.shape.begin(), size.shape.end());
  header.set_offset(slice.offset);
  header.set_total_bytes(static_cast<int64_t>(slice.tensor.num_bytes()));
  size.encoded_bytes = static_cast<int64_t>(header.ByteSizeLong());
  if (slice.length > 0) {
    size.encoded_bytes = SaturatingAdd(
        size.encoded_bytes,
        FieldBytes(v1::TensorChunk::kDataFieldNumber, slice.length));
  }
  return size;
}

ResultSize SizeOfResult(int64_t seq, int field, std::vector<ValueSize> values,
                        bool single_tensor) {
  using google::protobuf::io::CodedOutputStream;
  ResultSize size;
  int64_t payload = 0;
  if (single_tensor) {
    payload = values[0].encoded_bytes;
  } else {
    for (const ValueSize& v : values) {
      payload = SaturatingAdd(
          payload,
          FieldBytes(v1::GradientValues::kValuesFieldNumber, v.encoded_bytes));
    }
    // is_none: packed bools, one byte each.
    payload = SaturatingAdd(payload,
                            FieldBytes(v1::GradientValues::kIsNoneFieldNumber,
                                       static_cast<int64_t>(values.size())));
  }
  int64_t result = FieldBytes(field, payload);
  // seq: tag + varint.
  result = SaturatingAdd(
      result, 1 + CodedOutputStream::VarintSize64(static_cast<uint64_t>(seq)));
  size.reply_bytes = FieldBytes(v1::BatchReply::kResultsFieldNumber, result);
  size.values = std::move(values);
  return size;
}

ReplyBudget::ReplyBudget(int64_t limit, ReplyMemory* memory)
    : limit_(std::max(limit, kMinReplyBytes)), memory_(memory) {}

ReplyBudget::~ReplyBudget() {
  if (memory_ != nullptr) memory_->ShrinkTo(memory_->bytes() - reserved_);
}

void ReplyBudget::Charge(int64_t reply_bytes) {
  used_ += reply_bytes;
  if (memory_ == nullptr) return;
  const int64_t memory = 2 * reply_bytes;
  const int64_t taken = std::min(memory, reserved_);
  reserved_ -= taken;
  memory_->Add(memory - taken);
}

absl::Status ReplyBudget::ReserveMemory(int64_t seq, absl::string_view command,
                                        absl::string_view what,
                                        int64_t reply_bytes) {
  if (memory_ == nullptr) return absl::OkStatus();
  const int64_t bytes = SaturatingMul(2, reply_bytes);
  if (const MemoryAccount* refuser = memory_->TryReserve(bytes)) {
    absl::Status refusal =
        MemoryRefusal(*refuser, absl::StrCat("the reply's copy of ", what),
                      bytes, "fetch it in chunks (FetchTensor with max_bytes)");
    return Command{seq, command}.Error(refusal.code(), refusal.message(),
                                       "; nothing was applied");
  }
  reserved_ += bytes;
  return absl::OkStatus();
}

std::string ListForMessage(absl::Span<const int64_t> ids) {
  constexpr size_t kShown = 8;
  std::string out = absl::StrCat(
      "[", absl::StrJoin(ids.subspan(0, std::min(ids.size(), kShown)), ","));
  if (ids.size() > kShown) absl::StrAppend(&out, ",... (", ids.size(), ")");
  return absl::StrCat(out, "]");
}

std::string ValuesForMessage(absl::Span<const ValueSize> values) {
  constexpr size_t kShown = 4;
  std::string out;
  for (size_t i = 0; i < values.size() && i < kShown; ++i) {
    const ValueSize& v = values[i];
    absl::StrAppend(&out, i == 0 ? "" : ", ", DTypeName(v.dtype),
                    ListForMessage(v.shape));
  }
  if (values.size() > kShown) {
    absl::StrAppend(&out, ", ... (", values.size(), " values)");
  }
  return out;
}

std::string RoomForMessage(const ReplyBudget& budget, int64_t reply_bytes) {
  if (reply_bytes > budget.limit() - kStopReserve) {
    return absl::StrCat("it is larger than a whole reply (the reply limit is ",
                        budget.limit(),
                        " bytes: the server's max message size less a "
                        "margin)");
  }
  return absl::StrCat(std::max<int64_t>(budget.remaining(), 0), " of the ",
                      budget.limit(), " bytes a reply may hold remain");
}

ReplyMemory& ReplyMemory::operator=(ReplyMemory&& other) noexcept {
  if (this != &other) {
    ShrinkTo(0);
    bytes_ = other.bytes_;
    other.bytes_ = 0;
  }
  return *this;
}

int64_t ReplyMemory::TotalBytes() {
  return g_reply_bytes.load(std::memory_order_relaxed);
}

// `delta` is charged already (or refunded by the caller).
void ReplyMemory::Charge(int64_t delta) {
  bytes_ += delta;
  g_reply_bytes.fetch_add(delta, std::memory_order_relaxed);
}

const MemoryAccount* ReplyMemory::TryReserve(int64_t bytes) {
  // What earlier large replies left in the heaps goes first.
  TrimFreedMemory(static_cast<size_t>(bytes));
  const MemoryAccount* refuser =
      ProcessMemoryAccount()->TryChargeOrRefuser(bytes);
  if (refuser == nullptr) Charge(bytes);
  return refuser;
}

void ReplyMemory::Add(int64_t bytes) {
  ProcessMemoryAccount()->Add(bytes);
  Charge(bytes);
}

void ReplyMemory::ShrinkTo(int64_t bytes) {
  if (bytes >= bytes_) return;
  ProcessMemoryAccount()->Add(bytes - bytes_);
  Charge(bytes - bytes_);
}

}  // namespace gradtape::server
