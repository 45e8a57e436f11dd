#include "server/tape_service.h"

#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/base/status_macros.h"
#include "google/protobuf/arena.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "server/batch.h"
#include "server/convert.h"

namespace gradtape::server {
namespace {

// Replies queued before the stream stops reading more batches (back-pressure
// on a client that sends without reading): this many, or as many bytes as
// one full reply may take.
constexpr size_t kMaxQueuedReplies = 8;

// Each incoming batch is parsed (from the call's bytes) into an arena that is
// reset once the batch has been applied: a batch of 512 commands is a few block
// allocations instead of several small ones per command (the ExecuteOp, its id
// lists, its attrs map entries). Blocks grow to 64 KiB.
google::protobuf::ArenaOptions BatchArenaOptions() {
  google::protobuf::ArenaOptions options;
  options.start_block_size = 4096;
  options.max_block_size = 64 << 10;
  return options;
}

absl::string_view Metadata(const grpc::CallbackServerContext& context,
                           absl::string_view key) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(grpc::string_ref(key.data(), key.size()));
  if (it == metadata.end()) return {};
  return absl::string_view(it->second.data(), it->second.size());
}

// Applies `batch` to the session; NOT_FOUND if the session closed meanwhile.
// With an observer, the batch is counted for the call of `context` (metrics,
// access log).
absl::Status RunBatch(SessionEntry& entry, const v1::CommandBatch& batch,
                      int64_t max_reply_bytes, v1::BatchReply* reply,
                      RpcObserver* observer,
                      const grpc::CallbackServerContext* context,
                      RpcMethod method) {
  SessionEntry::ActiveCall active(&entry);
  Metrics* metrics = observer != nullptr ? observer->metrics() : nullptr;
  if (observer != nullptr) {
    observer->AddCommands(context, batch.commands_size());
  }
  return entry.WithSession([&](Session& session) {
    ApplyBatch(session, batch, max_reply_bytes, reply, metrics, method);
  });
}

// Parses the bytes of one message into `batch` (which may live in an arena).
// `buffer` is consumed (cleared).
bool ParseBatch(grpc::ByteBuffer* buffer, v1::CommandBatch* batch) {
  bool parsed;
  {
    grpc::ProtoBufferReader reader(buffer);
    parsed = reader.status().ok() && batch->ParseFromZeroCopyStream(&reader);
  }
  buffer->Clear();
  return parsed;
}

// INVALID_ARGUMENT for a message that is not a CommandBatch.
absl::Status NotABatch(absl::string_view what, size_t bytes) {
  return absl::InvalidArgumentError(absl::StrCat(
      what, " (bytes ", bytes, ") is not a valid gradtape.v1.CommandBatch"));
}

// Serialises `reply` into `out`. INTERNAL (naming the size) if protobuf
// cannot (above 2 GiB: ApplyBatch's reply budget keeps replies far below).
absl::Status SerializeReply(const v1::BatchReply& reply,
                            grpc::ByteBuffer* out) {
  bool own_buffer;
  grpc::Status status = grpc::SerializationTraits<v1::BatchReply>::Serialize(
      reply, out, &own_buffer);
  if (status.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cannot serialise a reply of ",
                                          reply.ByteSizeLong(), " bytes (",
                                          reply.results_size(), " results)"));
}

// The Stream call. Lifecycle, the only one in the server:
//  * one read outstanding at a time; each batch is applied as it arrives and
//    its reply queued, so replies keep the batches' order (a reply_optional
//    batch without results gets none: the next reply acknowledges it);
//  * one write outstanding at a time, from the front of the queue; while
//    kMaxQueuedReplies replies, or a full reply's worth of bytes, wait, no
//    new read starts;
//  * reading stops on the client's half-close, a broken or cancelled call
//    (a read or write fails), or an RPC-level error (the session closed);
//    then the call finishes once the queued replies are written (or at once
//    if writing failed);
//  * messages arrive as bytes and are parsed here: one that is not a
//    CommandBatch stops reading and finishes the call with INVALID_ARGUMENT
//    "Stream: batch N (bytes K) is not a valid gradtape.v1.CommandBatch"
//    (N counts the stream's messages from 1) once the queued replies are
//    written; the batches before it stay applied and answered;
//  * gRPC calls OnDone after Finish and every other reaction; it deletes the
//    reactor. The reactor owns a reference to its session entry.
class StreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // Finishes at once with the error if `entry` is one.
  StreamReactor(absl::StatusOr<std::shared_ptr<SessionEntry>> entry,
                int64_t max_reply_bytes, RpcObserver* observer,
                const grpc::CallbackServerContext* context)
      : max_reply_bytes_(max_reply_bytes),
        observer_(observer),
        context_(context) {
    if (!entry.ok()) {
      Finish(ToGrpcStatus(entry.status()));
      return;
    }
    entry_ = *std::move(entry);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // half-close, cancellation or a broken connection
      StopReadingAndMaybeFinish(absl::OkStatus());
      return;
    }
    ++batches_read_;
    const size_t bytes = request_.Length();
    v1::CommandBatch* batch = NewBatch();
    if (!ParseBatch(&request_, batch)) {
      arena_.Reset();
      StopReadingAndMaybeFinish(
          NotABatch(absl::StrCat("Stream: batch ", batches_read_), bytes));
      return;
    }
    v1::BatchReply reply;
    absl::Status status = RunBatch(*entry_, *batch, max_reply_bytes_, &reply,
                                   observer_, context_, RpcMethod::kStream);
    const bool reply_optional = batch->reply_optional();
    arena_.Reset();
    if (!status.ok()) {
      StopReadingAndMaybeFinish(status);
      return;
    }
    if (reply_optional && reply.results().empty()) {
      // Acknowledged by the next reply (replies are cumulative).
      StartRead(&request_);
      return;
    }
    grpc::ByteBuffer serialized;
    if (absl::Status s = SerializeReply(reply, &serialized); !s.ok()) {
      StopReadingAndMaybeFinish(s);
      return;
    }
    absl::MutexLock lock(&mu_);
    const size_t length = serialized.Length();
    queued_bytes_ += length;
    replies_.push_back({std::move(serialized), length});
    if (!writing_) {
      writing_ = true;
      StartWrite(&replies_.front().bytes);
    }
    if (!QueueFullLocked()) {
      StartRead(&request_);
    } else {
      read_paused_ = true;
    }
  }

  void OnWriteDone(bool ok) override {
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      queued_bytes_ -= replies_.front().length;
      replies_.pop_front();
      if (!ok) {
        // The call is dead: drop the rest; an outstanding read fails too.
        replies_.clear();
        queued_bytes_ = 0;
        if (read_paused_) {
          read_paused_ = false;
          reads_done_ = true;
        }
      } else {
        if (!replies_.empty()) {
          writing_ = true;
          StartWrite(&replies_.front().bytes);
        }
        if (read_paused_ && !QueueFullLocked()) {
          read_paused_ = false;
          StartRead(&request_);
        }
      }
      finish = ShouldFinishLocked(&status);
    }
    if (finish) Finish(status);
  }

  void OnDone() override { delete this; }

 private:
  // Called when no read is outstanding and none will start.
  void StopReadingAndMaybeFinish(const absl::Status& error) {
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      reads_done_ = true;
      if (!error.ok()) status_ = ToGrpcStatus(error);
      finish = ShouldFinishLocked(&status);
    }
    if (finish) Finish(status);
  }

  bool QueueFullLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return replies_.size() >= kMaxQueuedReplies ||
           queued_bytes_ >= static_cast<size_t>(max_reply_bytes_);
  }

  // True (once) when reading stopped and no write is outstanding; the caller
  // then calls Finish(*status) outside the lock.
  bool ShouldFinishLocked(grpc::Status* status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!reads_done_ || writing_ || finish_called_) return false;
    finish_called_ = true;
    *status = status_;
    return true;
  }

  v1::CommandBatch* NewBatch() {
    return google::protobuf::Arena::CreateMessage<v1::CommandBatch>(&arena_);
  }

  const int64_t max_reply_bytes_;
  RpcObserver* const observer_;  // may be null
  const grpc::CallbackServerContext* const context_;
  std::shared_ptr<SessionEntry> entry_;
  // Only touched by the single outstanding read and its OnReadDone: the
  // message being read, and the batch parsed from it in arena_ (reset after
  // each batch is applied).
  grpc::ByteBuffer request_;
  int64_t batches_read_ = 0;
  google::protobuf::Arena arena_{BatchArenaOptions()};

  absl::Mutex mu_;
  // Replies not yet written; the front one is being written if writing_.
  // A deque keeps the front's address stable while more are queued.
  struct QueuedReply {
    grpc::ByteBuffer bytes;
    size_t length;  // bytes.Length() when queued
  };
  std::deque<QueuedReply> replies_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of replies_
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::shared_ptr<SessionEntry>> TapeServiceImpl::Authenticate(
    const grpc::CallbackServerContext& context) {
  return sessions_.Authenticate(Metadata(context, kSessionIdHeader),
                                Metadata(context, kSessionTokenHeader));
}

grpc::ServerUnaryReactor* TapeServiceImpl::CreateSession(
    grpc::CallbackServerContext* context,
    const v1::CreateSessionRequest* request,
    v1::CreateSessionResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // The routing header and the body must agree; either may name the id.
  absl::string_view routed_id = Metadata(*context, kSessionIdHeader);
  absl::string_view id = request->session_id();
  if (id.empty()) {
    id = routed_id;
  } else if (!routed_id.empty() && routed_id != id) {
    reactor->Finish(ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("metadata ", kSessionIdHeader, " '", routed_id,
                     "' differs from the requested session_id '", id, "'"))));
    return reactor;
  }
  absl::StatusOr<SessionManager::Created> created =
      sessions_.Create(id, absl::Seconds(request->keep_alive_seconds()));
  if (created.ok()) {
    response->set_session_id(created->entry->id());
    response->set_token(created->token);
    response->set_keep_alive_seconds(
        absl::ToInt64Seconds(created->entry->lease()));
  }
  reactor->Finish(ToGrpcStatus(created.status()));
  return reactor;
}

grpc::ServerUnaryReactor* TapeServiceImpl::CloseSession(
    grpc::CallbackServerContext* context,
    const v1::CloseSessionRequest* request,
    v1::CloseSessionResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::shared_ptr<SessionEntry>> entry = Authenticate(*context);
  absl::Status status =
      entry.ok() ? sessions_.Close((*entry)->id()) : entry.status();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* TapeServiceImpl::KeepAlive(
    grpc::CallbackServerContext* context, const v1::KeepAliveRequest* request,
    v1::KeepAliveResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Authenticate refreshes the lease.
  reactor->Finish(ToGrpcStatus(Authenticate(*context).status()));
  return reactor;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
TapeServiceImpl::Stream(grpc::CallbackServerContext* context) {
  return new StreamReactor(Authenticate(*context), max_reply_bytes_, observer_,
                           context);
}

grpc::ServerUnaryReactor* TapeServiceImpl::Run(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::shared_ptr<SessionEntry> entry,
                     Authenticate(*context));
    google::protobuf::Arena arena(BatchArenaOptions());
    v1::CommandBatch* batch =
        google::protobuf::Arena::CreateMessage<v1::CommandBatch>(&arena);
    grpc::ByteBuffer bytes(*request);  // shares the slices
    if (!ParseBatch(&bytes, batch)) {
      return NotABatch("Run: the request", request->Length());
    }
    // The results move into the reply: keep it off the arena.
    v1::BatchReply reply;
    RETURN_IF_ERROR(RunBatch(*entry, *batch, max_reply_bytes_, &reply,
                             observer_, context, RpcMethod::kRun));
    return SerializeReply(reply, response);
  }();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* TapeServiceImpl::ListOps(
    grpc::CallbackServerContext* context, const v1::ListOpsRequest* request,
    v1::ListOpsResponse* response) {
  for (const auto& op : registry_.ops()) ToProto(*op, response->add_ops());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace gradtape::server
