// Tensors larger than one chunk (SessionOptions::chunk_bytes): chunked
// puts and fetches on the session's stream.
//
// How it works. A put larger than a chunk is one PutTensorBegin (the server
// charges the whole tensor then) followed by PutTensorChunk commands, each
// flushed as a batch of its own, in order; like any put it does not wait,
// and its errors surface at the next wait point. A fetch always asks for at
// most one chunk (FetchTensor.max_bytes), so a small tensor still takes one
// round trip; when the first chunk's total_bytes says there is more, the
// remaining chunks are requested each in a batch of its own with up to
// kFetchWindow of them in flight, and copied into place as they arrive.
#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/src/session_core.h"
#include "core/base/status_macros.h"

namespace gradtape::client::internal {
namespace {

// Chunk fetches in flight at once: enough to keep the connection busy
// while one reply is copied, few enough to bound the memory held in replies.
constexpr int kFetchWindow = 4;

v1::Command FetchCommand(int64_t id, int64_t offset, int64_t max_bytes) {
  v1::Command command;
  v1::FetchTensor* fetch = command.mutable_fetch();
  fetch->set_id(id);
  fetch->set_offset(offset);
  fetch->set_max_bytes(max_bytes);
  return command;
}

absl::Status BadChunk(int64_t id, const v1::CommandResult& result,
                      absl::string_view why) {
  return absl::InternalError(absl::StrCat("Fetch of tensor id ", id,
                                          ": the server's result for command ",
                                          result.seq(), " ", why));
}

}  // namespace

void SessionCore::PutInChunks(int64_t id, DType dtype,
                              absl::Span<const int64_t> shape,
                              absl::string_view bytes) {
  Enqueue([&](v1::Command& command) {
    v1::PutTensorBegin* begin = command.mutable_put_begin();
    begin->set_id(id);
    begin->set_dtype(static_cast<v1::DType>(dtype));
    begin->mutable_shape()->Add(shape.begin(), shape.end());
  });
  const int64_t total = static_cast<int64_t>(bytes.size());
  for (int64_t offset = 0; offset < total; offset += options_.chunk_bytes) {
    Flush();  // the chunk goes alone
    // The copy is made outside the session lock and moved into the buffer.
    std::string data(bytes.substr(static_cast<size_t>(offset),
                                  static_cast<size_t>(options_.chunk_bytes)));
    Enqueue([&](v1::Command& command) {
      v1::PutTensorChunk* chunk = command.mutable_put_chunk();
      chunk->set_id(id);
      chunk->set_offset(offset);
      chunk->set_data(std::move(data));
    });
  }
  Flush();
}

absl::StatusOr<SessionCore::Sent> SessionCore::SendForResult(
    v1::Command command) {
  const int64_t seq = Enqueue(command);
  if (seq == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("gradtape session ", session_id_, " is closed"));
  }
  return Sent{seq, FlushForWait(), std::move(command)};
}

absl::StatusOr<v1::CommandResult> SessionCore::AwaitResult(Sent sent) {
  // A read whose result the server no longer kept after a resume is sent
  // again with a new seq (bounded: it can only happen after a resume).
  constexpr int kMaxRereads = 3;
  for (int reread = 0;; ++reread) {
    absl::Status status = WaitAndTakeErrors(sent.batch_id);
    {
      absl::MutexLock lock(&mu_);
      auto it = results_.find(sent.seq);
      const bool stale = stale_reads_.erase(sent.seq) > 0;
      if (!status.ok()) {
        if (it != results_.end()) results_.erase(it);
        return status;
      }
      if (it != results_.end()) {
        v1::CommandResult result = std::move(it->second);
        results_.erase(it);
        return result;
      }
      if (!stale || reread == kMaxRereads) {
        return absl::InternalError(absl::StrCat(
            "the server sent no result for command ", sent.seq, " of session ",
            session_id_,
            stale ? " (its result was no longer kept, 4 times)" : ""));
      }
      ++counters_.refetches;
    }
    ASSIGN_OR_RETURN(sent, SendForResult(std::move(sent.command)));
  }
}

absl::StatusOr<HostTensor> SessionCore::FetchInChunks(int64_t id) {
  const int64_t chunk = options_.chunk_bytes;
  ASSIGN_OR_RETURN(v1::CommandResult first, Call(FetchCommand(id, 0, chunk)));
  if (first.has_tensor()) return FromProto(first.mutable_tensor());
  if (!first.has_chunk()) return BadChunk(id, first, "holds no tensor");
  v1::TensorChunk& head = *first.mutable_chunk();
  HostTensor out;
  out.dtype = static_cast<DType>(head.dtype());
  out.shape.assign(head.shape().begin(), head.shape().end());
  const int64_t total = head.total_bytes();
  if (head.offset() != 0 || total < 0 ||
      static_cast<int64_t>(head.data().size()) != std::min(chunk, total)) {
    return BadChunk(id, first, "is not the tensor's first chunk");
  }
  if (total == static_cast<int64_t>(head.data().size())) {
    out.bytes = std::move(*head.mutable_data());
    return out;
  }
  out.bytes.resize(static_cast<size_t>(total));
  std::memcpy(out.bytes.data(), head.data().data(), head.data().size());
  // The rest, pipelined: up to kFetchWindow requests in flight.
  std::deque<std::pair<Sent, int64_t>> in_flight;  // with their offsets
  int64_t next = chunk;
  absl::Status failure;
  while (next < total || !in_flight.empty()) {
    while (failure.ok() && next < total &&
           static_cast<int>(in_flight.size()) < kFetchWindow) {
      absl::StatusOr<Sent> sent = SendForResult(FetchCommand(id, next, chunk));
      if (!sent.ok()) return sent.status();
      in_flight.emplace_back(*sent, next);
      next += chunk;
    }
    if (in_flight.empty()) break;
    auto [sent, offset] = in_flight.front();
    in_flight.pop_front();
    absl::StatusOr<v1::CommandResult> result = AwaitResult(sent);
    if (!failure.ok()) continue;  // collect what is in flight, then fail
    if (!result.ok()) {
      failure = result.status();
      continue;
    }
    const v1::TensorChunk& part = result->chunk();
    const int64_t size = std::min(chunk, total - offset);
    if (!result->has_chunk() || part.offset() != offset ||
        part.total_bytes() != total ||
        static_cast<int64_t>(part.data().size()) != size) {
      failure = BadChunk(id, *result,
                         absl::StrCat("is not the chunk at offset ", offset,
                                      " of ", total, " bytes"));
      continue;
    }
    std::memcpy(out.bytes.data() + offset, part.data().data(),
                static_cast<size_t>(size));
  }
  if (!failure.ok()) return failure;
  return out;
}

}  // namespace gradtape::client::internal
