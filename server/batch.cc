#include "server/batch.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "core/base/cancellation.h"
#include "core/base/status_macros.h"
#include "core/session/command.h"
#include "core/tensor/variable.h"
#include "google/protobuf/io/coded_stream.h"
#include "server/convert.h"
#include "server/memory_budget.h"

namespace gradtape::server {
namespace {

// ---------------------------------------------------------------------------
// The reply budget.
//
// Every result is charged with its exact encoded size once it is in the
// reply. A command that puts data in the reply is checked against what
// remains before it is applied (FetchTensor measures the tensor it read
// before serialising it); if the data would not fit, the command fails
// alone with RESOURCE_EXHAUSTED and the batch goes on. kStopReserve is kept
// for the one error that ends a batch whose reply is full even of errors.

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// Room kept for the error that stops a full batch (its message is bounded).
constexpr int64_t kStopReserve = 1024;
// ApplyBatch raises a smaller limit to this.
constexpr int64_t kMinReplyBytes = 4 * kStopReserve;

int64_t SaturatingAdd(int64_t a, int64_t b) {
  return a > kInt64Max - b ? kInt64Max : a + b;
}

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

// Bytes of a CommandResult in the reply (its field in BatchReply included).
int64_t ReplyBytes(const v1::CommandResult& result) {
  return FieldBytes(v1::BatchReply::kResultsFieldNumber,
                    static_cast<int64_t>(result.ByteSizeLong()));
}

// The encoded size of a result value: a TensorValue of `dtype` and `shape`
// with `num_elements` elements (-1: unknown, counted as too large).
struct ValueSize {
  DType dtype = DType::kInvalid;
  Shape shape;
  int64_t data_bytes = 0;
  int64_t encoded_bytes = 0;  // the TensorValue, saturated at kInt64Max
};

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

// What a result would hold: its encoded size (the whole CommandResult in the
// reply) and the values, for messages.
struct ResultSize {
  int64_t reply_bytes = 0;
  std::vector<ValueSize> values;
};

// A CommandResult holding `values` (GradientValues at `field`, or one
// TensorValue when `single_tensor`).
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

class ReplyBudget {
 public:
  // `memory` (may be null: not charged) gets twice every result's bytes.
  ReplyBudget(int64_t limit, ReplyMemory* memory)
      : limit_(std::max(limit, kMinReplyBytes)), memory_(memory) {}
  ~ReplyBudget() {
    if (memory_ != nullptr) memory_->ShrinkTo(memory_->bytes() - reserved_);
  }

  int64_t limit() const { return limit_; }
  // What results may still take (kStopReserve kept back).
  int64_t remaining() const { return limit_ - kStopReserve - used_; }
  bool Fits(int64_t reply_bytes) const { return reply_bytes <= remaining(); }
  // Only the stopping error may use the reserve.
  bool FitsInReserve(int64_t reply_bytes) const {
    return reply_bytes <= limit_ - used_;
  }
  void Charge(int64_t reply_bytes) {
    used_ += reply_bytes;
    if (memory_ == nullptr) return;
    const int64_t memory = 2 * reply_bytes;
    const int64_t taken = std::min(memory, reserved_);
    reserved_ -= taken;
    memory_->Add(memory - taken);
  }
  // Before `seq`'s values of `reply_bytes` are copied (`what`: "FetchTensor
  // id 3 (float32[4])"): RESOURCE_EXHAUSTED when the server's budget cannot
  // fit them. What is reserved counts towards the result's Charge.
  absl::Status ReserveMemory(int64_t seq, absl::string_view command,
                             absl::string_view what, int64_t reply_bytes) {
    if (memory_ == nullptr) return absl::OkStatus();
    const int64_t bytes = SaturatingMul(2, reply_bytes);
    if (const MemoryAccount* refuser = memory_->TryReserve(bytes)) {
      absl::Status refusal = MemoryRefusal(
          *refuser, absl::StrCat("the reply's copy of ", what), bytes,
          "fetch it in chunks (FetchTensor with max_bytes)");
      return Command{seq, command}.Error(refusal.code(), refusal.message(),
                                         "; nothing was applied");
    }
    reserved_ += bytes;
    return absl::OkStatus();
  }

 private:
  const int64_t limit_;
  int64_t used_ = 0;
  ReplyMemory* const memory_;
  int64_t reserved_ = 0;  // by ReserveMemory, not yet charged
};

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

// "N of the reply's L bytes remain" or, when the data alone exceeds a
// whole reply, says so.
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

constexpr char kChunkedLater[] =
    "; a tensor larger than a whole reply moves in chunks (chunked transfer: "
    "FetchTensor with max_bytes)";

// What to do instead of returning values that do not fit.
std::string FetchInsteadAdvice(absl::Span<const int64_t> ids) {
  return absl::StrCat(
      "run it with return_values=false and fetch the result ids ",
      ListForMessage(ids),
      " with FetchTensor, each in a batch of its own if needed");
}

// The tensor behind `id`, without applying a command. Invalid if the id
// does not resolve (the command itself then fails with the precise error).
Tensor Peek(Session& session, int64_t id) {
  absl::StatusOr<Tensor> t = session.Peek(id);
  return t.ok() ? *std::move(t) : Tensor();
}

// The dtype, shape and element count of the value a gradient for `source`
// has: the source's own, or a variable handle's variable's.
ValueSize SizeOfGradientFor(const Tensor& source) {
  if (const Variable* var = VariableOf(source); var != nullptr) {
    return SizeOfValue(var->dtype, var->shape, NumElements(var->shape));
  }
  return SizeOfTensor(source);
}

// The returned values of a command that returns data besides FetchTensor
// (Gradient, Jacobian, FetchJvp with return values), predicted from the
// tensors it names before it is applied. No values when it returns none, or
// when a named id does not resolve (the command then fails by itself).
// Unconnected sources are counted at full size (the prediction may only be
// too large, never too small; a None value is smaller).
struct Prediction {
  const char* what = "";
  ResultSize size;
  std::vector<int64_t> output_ids;  // poisoned when refused
  std::string advice;
};

Prediction Predict(Session& session, const v1::Command& cmd) {
  Prediction p;
  const int64_t seq = cmd.seq();
  switch (cmd.kind_case()) {
    case v1::Command::kGradient: {
      const v1::Gradient& g = cmd.gradient();
      if (!g.return_values()) return p;
      std::vector<ValueSize> values;
      for (int64_t id : g.source_ids()) {
        Tensor source = Peek(session, id);
        if (!source.valid()) return p;
        values.push_back(SizeOfGradientFor(source));
      }
      p.what = "Gradient";
      p.output_ids.assign(g.result_ids().begin(), g.result_ids().end());
      p.size = SizeOfResult(seq, v1::CommandResult::kGradientFieldNumber,
                            std::move(values), /*single_tensor=*/false);
      p.advice = FetchInsteadAdvice(p.output_ids);
      return p;
    }
    case v1::Command::kJacobian: {
      const v1::Jacobian& j = cmd.jacobian();
      if (!j.return_values()) return p;
      Tensor target = Peek(session, j.target_id());
      if (!target.valid()) return p;
      // core/autodiff/jacobian.cc: target.shape + source.shape, or for a batch
      // Jacobian [B] + target.shape[1:] + source.shape[1:].
      if (j.batch() && target.rank() == 0) return p;  // fails by itself
      std::vector<ValueSize> values;
      for (int64_t id : j.source_ids()) {
        Tensor source = Peek(session, id);
        if (!source.valid()) return p;
        ValueSize src = SizeOfGradientFor(source);
        Shape shape;
        int64_t n;
        if (j.batch()) {
          if (src.shape.empty() || src.shape[0] != target.dim(0)) return p;
          shape.push_back(target.dim(0));
          shape.insert(shape.end(), target.shape().begin() + 1,
                       target.shape().end());
          shape.insert(shape.end(), src.shape.begin() + 1, src.shape.end());
        } else {
          shape = target.shape();
          shape.insert(shape.end(), src.shape.begin(), src.shape.end());
        }
        n = NumElements(shape);  // -1 on overflow: counted as too large
        values.push_back(SizeOfValue(src.dtype, std::move(shape), n));
      }
      p.what = j.batch() ? "BatchJacobian" : "Jacobian";
      p.output_ids.assign(j.result_ids().begin(), j.result_ids().end());
      p.size = SizeOfResult(seq, v1::CommandResult::kJacobianFieldNumber,
                            std::move(values), /*single_tensor=*/false);
      p.advice = FetchInsteadAdvice(p.output_ids);
      return p;
    }
    case v1::Command::kFetchJvp: {
      const v1::FetchJvp& f = cmd.fetch_jvp();
      if (!f.return_value()) return p;
      Tensor primal = Peek(session, f.id());
      if (!primal.valid()) return p;
      std::vector<ValueSize> values = {SizeOfTensor(primal)};
      p.what = "FetchJvp";
      p.output_ids = {f.result_id()};
      p.size = SizeOfResult(seq, v1::CommandResult::kJvpFieldNumber,
                            std::move(values), /*single_tensor=*/false);
      p.advice = absl::StrCat(
          "run it with return_value=false and fetch result id ", f.result_id(),
          " with FetchTensor, in a batch of its own if needed");
      return p;
    }
    default:
      return p;
  }
}

// RESOURCE_EXHAUSTED for a command refused before it was applied.
absl::Status Refuse(const Prediction& p, int64_t seq,
                    const ReplyBudget& budget) {
  int64_t data_bytes = 0;
  for (const ValueSize& v : p.size.values) {
    data_bytes = SaturatingAdd(data_bytes, v.data_bytes);
  }
  return Command{seq, p.what}.Error(
      absl::StatusCode::kResourceExhausted, "its returned values (",
      ValuesForMessage(p.size.values), ": ",
      data_bytes == kInt64Max ? std::string("more than 2^63")
                              : absl::StrCat(data_bytes),
      " bytes of data) do not fit in this reply: ",
      RoomForMessage(budget, p.size.reply_bytes),
      "; nothing was applied (result ids ", ListForMessage(p.output_ids),
      " are poisoned); ", p.advice, kChunkedLater);
}

// A command whose op or attrs do not convert fails before it reaches the
// core: INVALID_ARGUMENT "<op> (command <seq>): <why>", its outputs
// poisoned.
absl::Status FailOp(Session& session, int64_t seq, const v1::ExecuteOp& op,
                    const absl::Status& why) {
  absl::Status failure = Command{seq, op.op()}.Error(
      absl::StatusCode::kInvalidArgument, why.message());
  session.Fail(seq, Ids(op.output_ids()), failure);
  return failure;
}

absl::Status Execute(Session& session, int64_t seq, const v1::ExecuteOp& cmd) {
  absl::StatusOr<AttrMap> attrs = AttrsFromProto(cmd.attrs());
  if (!attrs.ok()) return FailOp(session, seq, cmd, attrs.status());
  return session.ExecuteOp(seq, cmd.op(), Ids(cmd.input_ids()),
                           Ids(cmd.output_ids()), *std::move(attrs));
}

// Returned values into `out`. A value that cannot be serialised (a core bug)
// is an INTERNAL error that says the command was applied.
absl::Status ReturnValues(int64_t seq, absl::string_view what,
                          absl::Span<const Tensor> values,
                          v1::GradientValues* out) {
  if (absl::Status s = ToProto(values, out); !s.ok()) {
    return Command{seq, what}.Error(absl::StatusCode::kInternal,
                                    "it was applied, but ", s.message());
  }
  return absl::OkStatus();
}

absl::Status Gradient(Session& session, int64_t seq, const v1::Gradient& cmd,
                      v1::CommandResult* result) {
  ASSIGN_OR_RETURN(std::vector<Tensor> grads,
                   session.Gradient(seq, FromProto(cmd)));
  if (!cmd.return_values()) return absl::OkStatus();
  return ReturnValues(seq, "Gradient", grads, result->mutable_gradient());
}

// Training: SaveCheckpoint / RestoreCheckpoint answer a CheckpointInfo.
absl::Status Checkpoint(absl::StatusOr<CheckpointSummary> summary,
                        v1::CommandResult* result) {
  RETURN_IF_ERROR(summary.status());
  ToProto(*summary, result->mutable_checkpoint());
  return absl::OkStatus();
}

// Jacobians, forward mode, custom gradients.
absl::Status Jacobian(Session& session, int64_t seq, const v1::Jacobian& cmd,
                      v1::CommandResult* result) {
  ASSIGN_OR_RETURN(std::vector<Tensor> jac,
                   session.Jacobian(seq, FromProto(cmd)));
  if (!cmd.return_values()) return absl::OkStatus();
  return ReturnValues(seq, cmd.batch() ? "BatchJacobian" : "Jacobian", jac,
                      result->mutable_jacobian());
}

absl::Status FetchJvp(Session& session, int64_t seq, const v1::FetchJvp& cmd,
                      v1::CommandResult* result) {
  ASSIGN_OR_RETURN(Tensor jvp, session.FetchJvp(seq, cmd.accumulator_id(),
                                                cmd.id(), cmd.result_id(),
                                                FromProto(cmd.unconnected())));
  if (!cmd.return_value()) return absl::OkStatus();
  return ReturnValues(seq, "FetchJvp", absl::MakeConstSpan(&jvp, 1),
                      result->mutable_jvp());
}

absl::Status ExecuteWithGradient(Session& session, int64_t seq,
                                 const v1::ExecuteWithGradient& cmd) {
  const v1::ExecuteOp& op = cmd.op();
  absl::StatusOr<AttrMap> attrs = AttrsFromProto(op.attrs());
  if (!attrs.ok()) return FailOp(session, seq, op, attrs.status());
  absl::StatusOr<GradientProgram> program = GradientProgramFromProto(cmd);
  if (!program.ok()) return FailOp(session, seq, op, program.status());
  return session.ExecuteOpWithGradient(seq, op.op(), Ids(op.input_ids()),
                                       Ids(op.output_ids()), *std::move(attrs),
                                       *std::move(program));
}

// A put (`what`: PutTensor, PutTensorBegin) of `bytes` at `id` past the
// tenant's put limit fails before anything is built, its id poisoned.
absl::Status CheckPutLimit(Session& session, int64_t seq,
                           absl::string_view what, int64_t id, int64_t bytes,
                           PutLimit limit) {
  if (limit.max_bytes <= 0 || bytes <= limit.max_bytes) {
    return absl::OkStatus();
  }
  absl::Status failure = Command{seq, what}.Error(
      absl::StatusCode::kResourceExhausted, "id ", id, ": ", bytes,
      " bytes exceed tenant '", limit.tenant, "''s max_put_mib limit of ",
      limit.max_bytes,
      " bytes; send smaller tensors (ConcatV2 joins them on the server)");
  const int64_t ids[] = {id};
  session.Fail(seq, ids, failure);
  return failure;
}

// The dtype of a put's value, or its failure (INVALID_ARGUMENT naming the
// id; the id poisoned).
absl::StatusOr<DType> PutDType(Session& session, int64_t seq,
                               absl::string_view what, int64_t id,
                               v1::DType wire) {
  absl::StatusOr<DType> dtype = FromProto(wire);
  if (dtype.ok()) return dtype;
  absl::Status failure = Command{seq, what}.Annotate(
      absl::InvalidArgumentError(dtype.status().message()),
      absl::StrCat("id ", id));
  const int64_t ids[] = {id};
  session.Fail(seq, ids, failure);
  return failure;
}

absl::Status Put(Session& session, int64_t seq, const v1::PutTensor& cmd,
                 PutLimit limit) {
  const v1::TensorValue& value = cmd.value();
  const int64_t bytes = static_cast<int64_t>(value.data().size());
  RETURN_IF_ERROR(
      CheckPutLimit(session, seq, "PutTensor", cmd.id(), bytes, limit));
  ASSIGN_OR_RETURN(DType dtype, PutDType(session, seq, "PutTensor", cmd.id(),
                                         value.dtype()));
  return session.PutTensor(seq, cmd.id(), dtype, Ids(value.shape()),
                           value.data());
}

// The tenant's put limit applies to the whole tensor, before it is charged.
// A shape that does not pass the size rule goes on to the session, which
// fails it with the rule's message.
absl::Status PutBegin(Session& session, int64_t seq,
                      const v1::PutTensorBegin& cmd, PutLimit limit) {
  ASSIGN_OR_RETURN(DType dtype, PutDType(session, seq, "PutTensorBegin",
                                         cmd.id(), cmd.dtype()));
  absl::StatusOr<TensorSize> size = CheckedTensorSize(dtype, Ids(cmd.shape()));
  if (size.ok()) {
    RETURN_IF_ERROR(CheckPutLimit(session, seq, "PutTensorBegin", cmd.id(),
                                  size->bytes, limit));
  }
  return session.PutTensorBegin(seq, cmd.id(), dtype, Ids(cmd.shape()));
}

// A chunked fetch (max_bytes > 0), measured like a whole one: the chunk's
// exact encoded size is checked against what remains of the reply before
// its bytes are copied.
absl::Status FetchChunk(Session& session, int64_t seq,
                        const v1::FetchTensor& cmd, ReplyBudget& budget,
                        v1::CommandResult* result) {
  ASSIGN_OR_RETURN(
      Session::TensorSlice slice,
      session.FetchTensorChunk(seq, cmd.id(), cmd.offset(), cmd.max_bytes()));
  ValueSize chunk = SizeOfChunk(slice);
  const int64_t data_bytes = chunk.data_bytes;
  ResultSize size = SizeOfResult(seq, v1::CommandResult::kChunkFieldNumber,
                                 {std::move(chunk)}, /*single_tensor=*/true);
  if (!budget.Fits(size.reply_bytes)) {
    return Command{seq, "FetchTensor"}.Error(
        absl::StatusCode::kResourceExhausted, "chunk of tensor id ", cmd.id(),
        " (", ValuesForMessage(size.values), ", bytes ", slice.offset, " to ",
        slice.offset + data_bytes, ") does not fit in this reply: ",
        RoomForMessage(budget, size.reply_bytes),
        "; ask for a smaller max_bytes, or fetch it in a batch of its own");
  }
  RETURN_IF_ERROR(
      budget.ReserveMemory(seq, "FetchTensor",
                           absl::StrCat("a chunk of tensor id ", cmd.id(), " (",
                                        ValuesForMessage(size.values), ")"),
                           size.reply_bytes));
  if (absl::Status s = ToProto(slice, result->mutable_chunk()); !s.ok()) {
    return Command{seq, "FetchTensor"}.Error(
        absl::StatusCode::kInternal, "tensor id ", cmd.id(), ": ", s.message());
  }
  return absl::OkStatus();
}

// Reads the tensor, then measures it before serialising it: a tensor that
// does not fit in what remains of the reply is refused (FetchTensor changes
// nothing but last_seq, so the refusal is as atomic as any failed fetch).
absl::Status Fetch(Session& session, int64_t seq, const v1::FetchTensor& cmd,
                   ReplyBudget& budget, v1::CommandResult* result) {
  if (cmd.max_bytes() != 0 || cmd.offset() != 0) {
    return FetchChunk(session, seq, cmd, budget, result);
  }
  ASSIGN_OR_RETURN(Tensor tensor, session.FetchTensor(seq, cmd.id()));
  std::vector<ValueSize> values = {SizeOfTensor(tensor)};
  ResultSize size = SizeOfResult(seq, v1::CommandResult::kTensorFieldNumber,
                                 std::move(values), /*single_tensor=*/true);
  if (!budget.Fits(size.reply_bytes)) {
    return Command{seq, "FetchTensor"}.Error(
        absl::StatusCode::kResourceExhausted, "tensor id ", cmd.id(), " (",
        ValuesForMessage(size.values), ", ", size.values[0].data_bytes,
        " bytes) does not fit in this reply: ",
        RoomForMessage(budget, size.reply_bytes),
        "; fetch it in a batch of its own", kChunkedLater);
  }
  RETURN_IF_ERROR(
      budget.ReserveMemory(seq, "FetchTensor",
                           absl::StrCat("tensor id ", cmd.id(), " (",
                                        ValuesForMessage(size.values), ")"),
                           size.reply_bytes));
  if (absl::Status s = ToProto(tensor, result->mutable_tensor()); !s.ok()) {
    return Command{seq, "FetchTensor"}.Error(
        absl::StatusCode::kInternal, "tensor id ", cmd.id(), ": ", s.message());
  }
  return absl::OkStatus();
}

// Applies one command; fills `result` when the command returns something.
absl::Status Apply(Session& session, const v1::Command& cmd,
                   ReplyBudget& budget, PutLimit put_limit,
                   v1::CommandResult* result) {
  const int64_t seq = cmd.seq();
  switch (cmd.kind_case()) {
    case v1::Command::kExecute:
      return Execute(session, seq, cmd.execute());
    case v1::Command::kPut:
      return Put(session, seq, cmd.put(), put_limit);
    case v1::Command::kFetch:
      return Fetch(session, seq, cmd.fetch(), budget, result);
    case v1::Command::kPutBegin:
      return PutBegin(session, seq, cmd.put_begin(), put_limit);
    case v1::Command::kPutChunk:
      return session.PutTensorChunk(seq, cmd.put_chunk().id(),
                                    cmd.put_chunk().offset(),
                                    cmd.put_chunk().data());
    case v1::Command::kRelease:
      return session.ReleaseTensors(seq, Ids(cmd.release().ids()));
    case v1::Command::kPushTape:
      return session.PushTape(seq, cmd.push_tape().tape_id(),
                              cmd.push_tape().persistent(),
                              cmd.push_tape().watch_accessed_variables());
    case v1::Command::kPopTape:
      return session.PopTape(seq, cmd.pop_tape().tape_id());
    case v1::Command::kDeleteTape:
      return session.DeleteTape(seq, cmd.delete_tape().tape_id());
    case v1::Command::kWatch:
      return session.Watch(seq, cmd.watch().tape_id(), Ids(cmd.watch().ids()));
    case v1::Command::kStopRecording:
      return session.StopRecording(seq);
    case v1::Command::kStartRecording:
      return session.StartRecording(seq);
    case v1::Command::kGradient:
      return Gradient(session, seq, cmd.gradient(), result);
    case v1::Command::kStats:
      ToProto(session.Stats(seq), result->mutable_stats());
      return absl::OkStatus();
    case v1::Command::kSaveCheckpoint:
      return Checkpoint(
          session.SaveCheckpoint(seq, cmd.save_checkpoint().name(),
                                 Ids(cmd.save_checkpoint().variable_ids())),
          result);
    case v1::Command::kRestoreCheckpoint:
      return Checkpoint(session.RestoreCheckpoint(
                            seq, cmd.restore_checkpoint().name(),
                            Ids(cmd.restore_checkpoint().variable_ids())),
                        result);
    // Jacobians, forward mode, custom gradients.
    case v1::Command::kJacobian:
      return Jacobian(session, seq, cmd.jacobian(), result);
    case v1::Command::kWatchedVariables: {
      ASSIGN_OR_RETURN(
          std::vector<int64_t> ids,
          session.WatchedVariables(seq, cmd.watched_variables().tape_id()));
      result->mutable_watched_variables()->mutable_ids()->Add(ids.begin(),
                                                              ids.end());
      return absl::OkStatus();
    }
    case v1::Command::kPushAccumulator:
      return session.PushAccumulator(seq,
                                     cmd.push_accumulator().accumulator_id());
    case v1::Command::kPopAccumulator:
      return session.PopAccumulator(seq,
                                    cmd.pop_accumulator().accumulator_id());
    case v1::Command::kDeleteAccumulator:
      return session.DeleteAccumulator(
          seq, cmd.delete_accumulator().accumulator_id());
    case v1::Command::kAccumulatorWatch:
      return session.AccumulatorWatch(
          seq, cmd.accumulator_watch().accumulator_id(),
          Ids(cmd.accumulator_watch().ids()),
          Ids(cmd.accumulator_watch().tangent_ids()));
    case v1::Command::kFetchJvp:
      return FetchJvp(session, seq, cmd.fetch_jvp(), result);
    case v1::Command::kExecuteWithGradient:
      return ExecuteWithGradient(session, seq, cmd.execute_with_gradient());
    case v1::Command::KIND_NOT_SET:
      break;
  }
  absl::Status failure = absl::InvalidArgumentError(absl::StrCat(
      "command ", seq, ": no command kind set (execute, put, fetch, ...)"));
  session.Fail(seq, {}, failure);
  return failure;
}

// The name of the command's kind ("gradient", "stats", ...).
std::string KindName(const v1::Command& cmd) {
  const google::protobuf::FieldDescriptor* field =
      v1::Command::descriptor()->FindFieldByNumber(cmd.kind_case());
  return field != nullptr ? field->name() : "no kind";
}

// The command's name in messages: the op of an ExecuteOp, else its kind's
// message type ("FetchTensor", "Gradient").
std::string CommandName(const v1::Command& cmd) {
  if (cmd.has_execute()) return cmd.execute().op();
  if (cmd.has_execute_with_gradient()) {
    return cmd.execute_with_gradient().op().op();
  }
  const google::protobuf::FieldDescriptor* field =
      v1::Command::descriptor()->FindFieldByNumber(cmd.kind_case());
  return field != nullptr && field->message_type() != nullptr
             ? field->message_type()->name()
             : "command";
}

// The ids a command fills (poisoned when it is refused as out of order).
std::vector<int64_t> OutputIds(const v1::Command& cmd) {
  const auto list = [](absl::Span<const int64_t> ids) {
    return std::vector<int64_t>(ids.begin(), ids.end());
  };
  switch (cmd.kind_case()) {
    case v1::Command::kExecute:
      return list(Ids(cmd.execute().output_ids()));
    case v1::Command::kExecuteWithGradient:
      return list(Ids(cmd.execute_with_gradient().op().output_ids()));
    case v1::Command::kPut:
      return {cmd.put().id()};
    case v1::Command::kPutBegin:
      return {cmd.put_begin().id()};
    case v1::Command::kGradient:
      return list(Ids(cmd.gradient().result_ids()));
    case v1::Command::kJacobian:
      return list(Ids(cmd.jacobian().result_ids()));
    case v1::Command::kFetchJvp:
      return {cmd.fetch_jvp().result_id()};
    default:
      return {};
  }
}

// Exactly-once (server/result_cache.h): answers a command that is not
// applied (verdict other than kApply) in `result`, without running it. An
// out-of-order command's free output ids are poisoned with its error.
void AnswerUnapplied(Session& session, ResultCache& results,
                     ResultCache::Verdict verdict, const v1::Command& cmd,
                     Metrics* metrics, v1::CommandResult* result) {
  const int64_t seq = cmd.seq();
  absl::Status status;
  switch (verdict) {
    case ResultCache::Verdict::kDuplicate:
      if (metrics != nullptr) metrics->CountDuplicate();
      results.AnswerDuplicate(seq, CommandName(cmd), result);
      return;
    case ResultCache::Verdict::kOutOfOrder:
      status = results.OutOfOrderError(seq, CommandName(cmd));
      session.PoisonRefused(seq, OutputIds(cmd), status);
      break;
    case ResultCache::Verdict::kUnknown:
      // It may have been applied: its ids may be live, nothing is poisoned.
      status = results.UnknownError(seq, CommandName(cmd));
      break;
    case ResultCache::Verdict::kBadSeq:
    case ResultCache::Verdict::kApply:  // not called for it
      status = ResultCache::BadSeqError(seq, CommandName(cmd));
      break;
  }
  result->Clear();
  result->set_seq(seq);
  ToProto(status, result->mutable_error());
}

// The error that ends a batch whose reply is full: the result of command
// `seq` (an error, `original`) does not fit, and the commands after it are
// not applied. Its message is bounded so that it fits in kStopReserve.
v1::CommandResult StopResult(int64_t seq, const v1::Error& original,
                             const ReplyBudget& budget,
                             const v1::CommandBatch& batch, int index) {
  constexpr size_t kQuoted = 200;
  absl::string_view quoted = original.message();
  const int rest = batch.commands_size() - index - 1;
  std::string not_applied =
      rest == 0
          ? std::string("it was the batch's last command")
          : absl::StrCat("the ", rest, " commands after it in this batch (seq ",
                         batch.commands(index + 1).seq(), " to ",
                         batch.commands(index + rest).seq(),
                         ") were not applied: send them again in a "
                         "new batch");
  absl::Status status = absl::ResourceExhaustedError(absl::StrCat(
      "command ", seq, ": the reply is full (it may hold ", budget.limit(),
      " bytes): this error stands for the command's own (code ",
      original.code(), "), and ", not_applied, ". The command's error began: ",
      quoted.substr(0, kQuoted), quoted.size() > kQuoted ? "..." : ""));
  v1::CommandResult result;
  result.set_seq(seq);
  ToProto(status, result.mutable_error());
  return result;
}

// DEADLINE_EXCEEDED / CANCELLED for a batch stopped before commands[index]
// (index == size: after its last command, which a kernel's check stopped).
absl::Status StoppedError(const Cancellation& cancel, int64_t last_seq,
                          const v1::CommandBatch& batch, int index) {
  const absl::StatusCode code = cancel.StopCode();
  const int rest = batch.commands_size() - index;
  std::string not_applied =
      rest == 0 ? std::string("no command of the batch remained")
                : absl::StrCat("the ", rest, " commands from seq ",
                               batch.commands(index).seq(), " to ",
                               batch.commands(index + rest - 1).seq(),
                               " were not applied");
  return absl::Status(
      code, absl::StrCat(code == absl::StatusCode::kDeadlineExceeded
                             ? "the call's deadline passed"
                             : "the call was cancelled",
                         ": last applied seq ", last_seq,
                         " (applied commands stay applied; one stopped by the "
                         "deadline or cancellation failed with its outputs "
                         "poisoned); ",
                         not_applied));
}

}  // namespace

ReplyMemory& ReplyMemory::operator=(ReplyMemory&& other) noexcept {
  if (this != &other) {
    ShrinkTo(0);
    bytes_ = other.bytes_;
    other.bytes_ = 0;
  }
  return *this;
}

namespace {
std::atomic<int64_t> g_reply_bytes{0};
}  // namespace

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

absl::Status ApplyBatch(Session& session, const v1::CommandBatch& batch,
                        int64_t max_reply_bytes, Cancellation* cancel,
                        v1::BatchReply* reply, PutLimit put_limit,
                        Metrics* metrics, RpcMethod method,
                        ResultCache* results, ReplyMemory* reply_memory) {
  ScopedCancellation cancel_scope(cancel);
  // Counted and timed however the batch ends (also when it is stopped).
  Metrics::CommandTally tally(metrics);
  struct ObserveOnExit {
    Metrics* metrics;
    RpcMethod method;
    int64_t start_ns;
    ~ObserveOnExit() {
      if (metrics == nullptr) return;
      metrics->ObserveBatch(
          method,
          static_cast<double>(absl::GetCurrentTimeNanos() - start_ns) * 1e-9);
    }
  } observe{metrics, method,
            metrics != nullptr ? absl::GetCurrentTimeNanos() : 0};
  reply->set_batch_id(batch.batch_id());
  ReplyBudget budget(max_reply_bytes, reply_memory);
  if (results != nullptr) results->Acknowledge(batch.ack_seq());
  const auto last_seq = [&] {
    return results != nullptr && results->sequenced() ? results->last_applied()
                                                      : session.last_seq();
  };
  const auto& commands = batch.commands();
  for (int i = 0; i < commands.size(); ++i) {
    if (cancel != nullptr && cancel->PollBetweenCommands()) {
      reply->set_last_seq(last_seq());
      return StoppedError(*cancel, last_seq(), batch, i);
    }
    const v1::Command& cmd = commands[i];
    const int64_t seq = cmd.seq();
    v1::CommandResult result;
    absl::Status status;
    Prediction prediction;
    // Exactly-once (server/result_cache.h): a command not applied now
    // (duplicate, out of order, bad seq) is answered without running it.
    const ResultCache::Verdict verdict = results != nullptr
                                             ? results->Classify(seq)
                                             : ResultCache::Verdict::kApply;
    if (verdict != ResultCache::Verdict::kApply) {
      AnswerUnapplied(session, *results, verdict, cmd, metrics, &result);
    } else {
      prediction = Predict(session, cmd);
      if (prediction.size.reply_bytes > 0 &&
          !budget.Fits(prediction.size.reply_bytes)) {
        status = Refuse(prediction, seq, budget);
        session.Fail(seq, prediction.output_ids, status);
      } else if (prediction.size.reply_bytes > 0 &&
                 !(status = budget.ReserveMemory(
                       seq, prediction.what,
                       absl::StrCat("its returned values (",
                                    ValuesForMessage(prediction.size.values),
                                    ")"),
                       prediction.size.reply_bytes))
                      .ok()) {
        session.Fail(seq, prediction.output_ids, status);
      } else {
        status = Apply(session, cmd, budget, put_limit, &result);
      }
      tally.Count(cmd, status.code());
    }
    const bool applied = verdict == ResultCache::Verdict::kApply;
    if (!status.ok()) {
      result.Clear();
      ToProto(status, result.mutable_error());
    }
    if (applied && result.has_stats() && results != nullptr) {
      // This command counts itself.
      result.mutable_stats()->set_commands_applied(results->commands_applied() +
                                                   1);
      result.mutable_stats()->set_duplicate_commands(results->duplicates());
    }
    // Applied now and OK without data: answered by the reply's last_seq.
    if (result.kind_case() == v1::CommandResult::KIND_NOT_SET &&
        !result.duplicate()) {
      if (applied && results != nullptr) results->Applied(seq, nullptr);
      continue;
    }
    const bool duplicate = result.duplicate();
    result.set_seq(seq);
    int64_t bytes = ReplyBytes(result);
    if (!budget.Fits(bytes) &&
        result.kind_case() != v1::CommandResult::kError) {
      // Larger than predicted, or a result without a prediction (stats,
      // checkpoint info, watched variables): the command was applied.
      const std::string what = absl::StrCat(
          "command ", seq, " (", KindName(cmd),
          "): it was applied, but its result (", bytes,
          " bytes) does not fit in this reply: ", RoomForMessage(budget, bytes),
          "; ");
      std::string advice =
          prediction.output_ids.empty()
              ? std::string("run it again in a batch of its own")
              : absl::StrCat("its values are stored at result ids ",
                             ListForMessage(prediction.output_ids),
                             ": fetch them with FetchTensor, each in a batch "
                             "of its own if needed");
      result.Clear();
      result.set_seq(seq);
      result.set_duplicate(duplicate);
      ToProto(absl::ResourceExhaustedError(absl::StrCat(what, advice)),
              result.mutable_error());
      bytes = ReplyBytes(result);
    }
    // What the command's reply got is what its duplicates get.
    if (applied && results != nullptr) results->Applied(seq, &result);
    if (!budget.Fits(bytes)) {
      result = StopResult(seq, result.error(), budget, batch, i);
      result.set_duplicate(duplicate);
      bytes = ReplyBytes(result);
      if (budget.FitsInReserve(bytes)) {
        budget.Charge(bytes);
        *reply->add_results() = std::move(result);
      }
      break;
    }
    budget.Charge(bytes);
    *reply->add_results() = std::move(result);
  }
  reply->set_last_seq(last_seq());
  // A kernel that stopped for the request failed its command: say so.
  if (cancel != nullptr && cancel->Requested()) {
    return StoppedError(*cancel, last_seq(), batch, commands.size());
  }
  return absl::OkStatus();
}

}  // namespace gradtape::server
