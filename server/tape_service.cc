#include "server/tape_service.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/cancellation.h"
#include "core/base/status_macros.h"
#include "google/protobuf/arena.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "server/batch.h"
#include "server/convert.h"
#include "server/memory_budget.h"
#include "server/worker_pool.h"

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

// Applies `batch` to the session; NOT_FOUND if the session closed meanwhile,
// DEADLINE_EXCEEDED / CANCELLED when `cancel` stopped it (ApplyBatch). The
// one place where a batch is applied: it runs on a worker of the pool (or,
// inline, on the gRPC thread). With an observer, the batch is counted for
// the call of `context` (metrics, access log).
absl::Status RunBatch(SessionEntry& entry, const v1::CommandBatch& batch,
                      int64_t max_reply_bytes, Cancellation* cancel,
                      v1::BatchReply* reply, RpcObserver* observer,
                      const grpc::CallbackServerContext* context,
                      RpcMethod method, ReplyMemory* reply_memory) {
  SessionEntry::ActiveCall active(&entry);
  Metrics* metrics = observer != nullptr ? observer->metrics() : nullptr;
  if (observer != nullptr) {
    observer->AddCommands(context, batch.commands_size());
  }
  PutLimit put_limit;  // the tenant's, read per batch (reloads change it)
  if (const Tenant* tenant = entry.tenant().get()) {
    put_limit = {tenant->name(), tenant->max_put_bytes()};
  }
  absl::Status stopped;
  RETURN_IF_ERROR(entry.WithSessionAndResults([&](Session& session,
                                                  ResultCache& results) {
    stopped = ApplyBatch(session, batch, max_reply_bytes, cancel, reply,
                         put_limit, metrics, method, &results, reply_memory);
  }));
  return stopped;
}

// The deadline a batch stops at: the call's, less a margin (a fifth of the
// time the call had left when it arrived, at most kMaxDeadlineMargin) so
// that the answer naming the last applied seq reaches the client before
// its own deadline fires (past it, the client reports DEADLINE_EXCEEDED by
// itself, without the server's status). InfiniteFuture without a deadline.
// A kernel stops within one block (tens of ms on a loaded core), then the
// answer is written.
constexpr absl::Duration kMaxDeadlineMargin = absl::Milliseconds(250);

absl::Time CallDeadline(const grpc::CallbackServerContext& context) {
  const auto chrono_deadline = context.deadline();
  if (chrono_deadline == std::chrono::system_clock::time_point::max()) {
    return absl::InfiniteFuture();
  }
  const absl::Time deadline = absl::FromChrono(chrono_deadline);
  const absl::Duration left = deadline - absl::Now();
  return deadline -
         std::clamp(left / 5, absl::ZeroDuration(), kMaxDeadlineMargin);
}

// What OnCancel reports: DEADLINE_EXCEEDED once the deadline passed (gRPC
// cancels a call at its deadline), else CANCELLED (the client cancelled, or
// the connection broke).
absl::StatusCode CancelCode(const Cancellation& cancel) {
  return absl::Now() >= cancel.deadline() ? absl::StatusCode::kDeadlineExceeded
                                          : absl::StatusCode::kCancelled;
}

// A call's OnCancel: a passed deadline stops the batch at once (kernels
// included), a cancellation before the next command.
void StopOnCancel(Cancellation& cancel) {
  const absl::StatusCode code = CancelCode(cancel);
  if (code == absl::StatusCode::kDeadlineExceeded) {
    cancel.Cancel(code);
  } else {
    cancel.CancelBetweenCommands(code);
  }
}

// A batch stopped by its call's deadline or cancellation: the status names
// `what` and the last applied seq, which also goes out as trailing metadata
// (v1::kLastAppliedSeqTrailer) so that clients read it without parsing text.
bool IsStop(const absl::Status& status) {
  return status.code() == absl::StatusCode::kDeadlineExceeded ||
         status.code() == absl::StatusCode::kCancelled;
}
absl::Status Stopped(grpc::CallbackServerContext* context,
                     absl::string_view what, const absl::Status& status,
                     int64_t last_seq) {
  context->AddTrailingMetadata(v1::kLastAppliedSeqTrailer,
                               absl::StrCat(last_seq));
  return absl::Status(status.code(),
                      absl::StrCat(what, ": ", status.message()));
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
//  * one read outstanding at a time; each batch, once read and parsed, is
//    handed to the worker pool (queued behind the session's earlier
//    batches; with --max_inflight_batches reached it waits for admission:
//    back-pressure) and OnReadDone returns; no read is outstanding while it
//    waits or runs. The pool thread applies it (ApplyAndReply) and queues
//    its reply, so replies keep the batches' order (a reply_optional batch
//    without results gets none: the next reply acknowledges it), then
//    starts the next read;
//  * one write outstanding at a time, from the front of the queue; while
//    kMaxQueuedReplies replies, or a full reply's worth of bytes, wait, no
//    new read starts;
//  * reading stops on the client's half-close, a broken or cancelled call
//    (a read or write fails), an RPC-level error (the session closed), or a
//    batch stopped by the call's deadline or cancellation (OnCancel requests
//    it; the batch stops before its next command, its reply is dropped, and
//    the call ends with DEADLINE_EXCEEDED / CANCELLED naming the last
//    applied seq, also in the trailer gradtape-last-applied-seq); then the
//    call finishes once the queued replies are written (or at once if
//    writing failed);
//  * messages arrive as bytes and are parsed here: one that is not a
//    CommandBatch stops reading and finishes the call with INVALID_ARGUMENT
//    "Stream: batch N (bytes K) is not a valid gradtape.v1.CommandBatch"
//    (N counts the stream's messages from 1) once the queued replies are
//    written; the batches before it stay applied and answered;
//  * drain (server/drain.h): BeginDrain stops reading as a half-close would,
//    after the batch in progress, and the call finishes with UNAVAILABLE
//    kStreamDrainMessage; a batch read after that is dropped unapplied;
//  * with API keys, a batch that arrives after a reload of the keys first
//    re-checks the call's key: a key that was removed (UNAUTHENTICATED) or
//    now names another tenant (NOT_FOUND) ends the call before the batch;
//  * gRPC calls OnDone after Finish and every other reaction; it deletes the
//    reactor (unless the drain registry holds it: DrainRegistry::Unregister).
//    Finish waits for reads_done_, which a batch in the pool has not set
//    yet, so the reactor outlives its queued batch. The reactor owns a
//    reference to its session entry.
class StreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public DrainableCall {
 public:
  // Finishes at once with the error if `entry` is one, or with the drain
  // status during a drain. `keys` (may be null) were at `keys_generation`
  // when the call's key was checked.
  StreamReactor(grpc::CallbackServerContext* context,
                absl::StatusOr<std::shared_ptr<SessionEntry>> entry,
                int64_t max_reply_bytes, WorkerPool& pool, DrainRegistry& drain,
                const ApiKeys* keys, uint64_t keys_generation,
                RpcObserver* observer)
      : context_(context),
        max_reply_bytes_(max_reply_bytes),
        observer_(observer),
        pool_(pool),
        drain_(drain),
        keys_(keys),
        keys_generation_(keys_generation),
        cancel_(CallDeadline(*context)) {
    if (!entry.ok()) {
      Finish(ToGrpcStatus(entry.status()));
      return;
    }
    if (!drain_.Register(this)) {
      Finish(DrainStatus());
      return;
    }
    entry_ = *std::move(entry);
    bool drained;
    {
      absl::MutexLock lock(&mu_);
      drained = draining_;  // BeginDrain came before the first read
      if (!drained) {
        reading_ = true;
        StartRead(&request_);
      }
    }
    if (drained) StopReadingForDrain();
  }

  void BeginDrain() override {
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (draining_) return;
      draining_ = true;
      // A batch queued or being applied on the pool (neither reading nor
      // paused) stops reading in ApplyAndReply, after its reply is queued.
      if (!reading_ && !read_paused_) return;
      read_paused_ = false;
      StopReadingForDrainLocked();
      finish = ShouldFinishLocked(&status);
    }
    // With a read outstanding, Finish makes it complete with ok = false.
    if (finish) Finish(status);
  }

  void OnReadDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      // The drain stopped reading while this read was outstanding: the
      // batch is not applied (the client is told to reconnect).
      if (reads_done_) return;
    }
    if (!ok) {  // half-close, cancellation or a broken connection
      StopReadingAndMaybeFinish(absl::OkStatus());
      return;
    }
    ++batches_read_;
    if (absl::Status s = RecheckKey(); !s.ok()) {
      StopReadingAndMaybeFinish(s);
      return;
    }
    const size_t bytes = request_.Length();
    v1::CommandBatch* batch = NewBatch();
    // The parsed copy lives until the arena is reset: the budget counts it
    // (it is in memory already, so the charge cannot refuse; the commands'
    // own allocations then see it).
    batch_charge_ = MemoryCharge(static_cast<int64_t>(bytes));
    batch_bytes_ = bytes;
    if (!ParseBatch(&request_, batch)) {
      ResetArena();
      StopReadingAndMaybeFinish(
          NotABatch(absl::StrCat("Stream: batch ", batches_read_), bytes));
      return;
    }
    absl::Status submitted = pool_.Submit(
        entry_.get(), [this, batch] { ApplyAndReply(batch); },
        WorkerPool::Admission::kWait);
    if (!submitted.ok()) {  // inline mode over the in-flight limit
      ResetArena();
      StopReadingAndMaybeFinish(submitted);
    }
  }

  void OnWriteDone(bool ok) override {
    bool finish = false;
    grpc::Status status;
    size_t written = 0;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      queued_bytes_ -= replies_.front().length;
      written = replies_.front().length;
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
          reading_ = true;
          StartRead(&request_);
        }
      }
      finish = ShouldFinishLocked(&status);
    }
    TrimFreedMemory(written);
    if (finish) Finish(status);
  }

  // The client cancelled, the deadline passed or the connection broke: the
  // batch running or queued stops before its next command. A passed
  // deadline also stops the command in progress (kernels check it); a
  // client gone lets it finish (Cancellation::CancelBetweenCommands says
  // why).
  void OnCancel() override { StopOnCancel(cancel_); }

  void OnDone() override {
    if (drain_.Unregister(this)) delete this;
  }

 private:
  static grpc::Status DrainStatus() {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, kStreamDrainMessage);
  }

  // Reading stops for the drain; the call ends with DrainStatus unless an
  // error is already its status.
  void StopReadingForDrainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reads_done_ = true;
    if (status_.ok()) status_ = DrainStatus();
  }
  // Frees the parsed batch, refunds its charge, and gives the heap back
  // after a large one (TrimFreedMemory).
  void ResetArena() {
    arena_.Reset();
    batch_charge_ = MemoryCharge();
    TrimFreedMemory(batch_bytes_);
  }

  // The same when no read is outstanding and none will start.
  void StopReadingForDrain() {
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      StopReadingForDrainLocked();
      finish = ShouldFinishLocked(&status);
    }
    if (finish) Finish(status);
  }

  // On a pool thread: applies the batch parsed in arena_, queues its reply
  // and starts the next read (or stops reading).
  void ApplyAndReply(v1::CommandBatch* batch) {
    v1::BatchReply reply;
    ReplyMemory memory;
    absl::Status status =
        RunBatch(*entry_, *batch, max_reply_bytes_, &cancel_, &reply, observer_,
                 context_, RpcMethod::kStream, &memory);
    const bool reply_optional = batch->reply_optional();
    ResetArena();
    if (IsStop(status)) {
      status = Stopped(context_, absl::StrCat("Stream: batch ", batches_read_),
                       status, reply.last_seq());
    }
    if (!status.ok()) {
      StopReadingAndMaybeFinish(status);
      return;
    }
    if (reply_optional && reply.results().empty()) {
      // Acknowledged by the next reply (replies are cumulative).
      bool drained;
      {
        absl::MutexLock lock(&mu_);
        drained = draining_;
        if (!drained) {
          reading_ = true;
          StartRead(&request_);
        }
      }
      if (drained) StopReadingForDrain();
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
    memory.ShrinkTo(static_cast<int64_t>(length));  // the message goes
    replies_.push_back({std::move(serialized), length, std::move(memory)});
    if (!writing_) {
      writing_ = true;
      StartWrite(&replies_.front().bytes);
    }
    if (draining_) {
      StopReadingForDrainLocked();  // finishes when the write is done
    } else if (!QueueFullLocked()) {
      reading_ = true;
      StartRead(&request_);
    } else {
      read_paused_ = true;
    }
  }

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

  // After a reload of the keys: the call's key must still name the
  // session's tenant.
  absl::Status RecheckKey() {
    if (keys_ == nullptr) return absl::OkStatus();
    const uint64_t generation = keys_->generation();
    if (generation == keys_generation_) return absl::OkStatus();
    absl::StatusOr<std::shared_ptr<Tenant>> tenant =
        keys_->Authenticate(Metadata(*context_, v1::kAuthorizationHeader));
    if (!tenant.ok()) return tenant.status();
    if (*tenant != entry_->tenant()) {
      return absl::NotFoundError(
          absl::StrCat("unknown session ", entry_->id(),
                       " (never created, closed, or idle past its lease)"));
    }
    keys_generation_ = generation;
    return absl::OkStatus();
  }

  v1::CommandBatch* NewBatch() {
    return google::protobuf::Arena::CreateMessage<v1::CommandBatch>(&arena_);
  }

  grpc::CallbackServerContext* const context_;
  const int64_t max_reply_bytes_;
  RpcObserver* const observer_;  // may be null
  WorkerPool& pool_;
  DrainRegistry& drain_;
  const ApiKeys* const keys_;
  uint64_t keys_generation_;  // only touched by OnReadDone
  std::shared_ptr<SessionEntry> entry_;
  // Requested by OnCancel (or by its deadline, polled); seen by every batch.
  Cancellation cancel_;
  // Only touched by the single outstanding read and its OnReadDone, then by
  // the batch's task on the pool (which starts the next read): the message
  // being read, and the batch parsed from it in arena_ (reset after each
  // batch is applied).
  grpc::ByteBuffer request_;
  int64_t batches_read_ = 0;
  google::protobuf::Arena arena_{BatchArenaOptions()};
  // The server's budget is charged for the batch in arena_ (its bytes).
  MemoryCharge batch_charge_;
  size_t batch_bytes_ = 0;

  absl::Mutex mu_;
  // Replies not yet written; the front one is being written if writing_.
  // A deque keeps the front's address stable while more are queued.
  struct QueuedReply {
    grpc::ByteBuffer bytes;
    size_t length;       // bytes.Length() when queued
    ReplyMemory memory;  // charged to the server's budget until written
  };
  std::deque<QueuedReply> replies_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of replies_
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  // Drain: a read is outstanding; BeginDrain was called.
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

// The Run call: authenticates and parses on the gRPC thread, hands the
// batch to the worker pool (RESOURCE_EXHAUSTED at once when
// --max_inflight_batches are in flight) and returns; the pool thread applies
// it and finishes the call. OnCancel requests the batch's cancellation.
// gRPC calls OnDone after Finish; it deletes the reactor, which owns the
// parsed batch (in arena_) and a reference to the session entry.
class RunReactor final : public grpc::ServerUnaryReactor {
 public:
  RunReactor(grpc::CallbackServerContext* context, grpc::ByteBuffer* response,
             int64_t max_reply_bytes, DrainRegistry& drain,
             RpcObserver* observer)
      : context_(context),
        response_(response),
        max_reply_bytes_(max_reply_bytes),
        observer_(observer),
        cancel_(CallDeadline(*context)),
        in_flight_(drain) {}

  // Finishes the call with the error, or submits the batch.
  void Start(absl::StatusOr<std::shared_ptr<SessionEntry>> entry,
             const grpc::ByteBuffer& request, WorkerPool& pool) {
    absl::Status status = [&]() -> absl::Status {
      ASSIGN_OR_RETURN(entry_, std::move(entry));
      batch_ =
          google::protobuf::Arena::CreateMessage<v1::CommandBatch>(&arena_);
      grpc::ByteBuffer bytes(request);  // shares the slices
      // The parsed copy lives as long as the reactor (see Stream).
      batch_charge_ = MemoryCharge(static_cast<int64_t>(request.Length()));
      request_bytes_ = request.Length();
      if (!ParseBatch(&bytes, batch_)) {
        return NotABatch("Run: the request", request.Length());
      }
      return pool.Submit(
          entry_.get(), [this] { Apply(); }, WorkerPool::Admission::kRefuse);
    }();
    if (!status.ok()) Finish(ToGrpcStatus(status));
  }

  void OnCancel() override { StopOnCancel(cancel_); }
  void OnDone() override {
    const size_t bytes = std::max(request_bytes_, response_bytes_);
    delete this;
    TrimFreedMemory(bytes);  // the parsed request is freed with the reactor
  }

 private:
  // On a pool thread.
  void Apply() {
    // The results move into the reply: keep it off the arena.
    v1::BatchReply reply;
    absl::Status status =
        RunBatch(*entry_, *batch_, max_reply_bytes_, &cancel_, &reply,
                 observer_, context_, RpcMethod::kRun, &reply_memory_);
    if (IsStop(status)) {
      status = Stopped(context_, "Run", status, reply.last_seq());
    }
    if (status.ok()) status = SerializeReply(reply, response_);
    response_bytes_ = status.ok() ? response_->Length() : 0;
    reply_memory_.ShrinkTo(static_cast<int64_t>(response_bytes_));
    Finish(ToGrpcStatus(status));
  }

  grpc::CallbackServerContext* const context_;
  grpc::ByteBuffer* const response_;
  const int64_t max_reply_bytes_;
  RpcObserver* const observer_;  // may be null
  Cancellation cancel_;
  // A drain waits for this Run until the reactor is deleted (OnDone).
  DrainRegistry::InFlight in_flight_;
  // The reply's charge to the server's budget, until the reactor goes.
  ReplyMemory reply_memory_;
  MemoryCharge batch_charge_;  // the parsed batch's
  size_t request_bytes_ = 0;
  size_t response_bytes_ = 0;
  std::shared_ptr<SessionEntry> entry_;
  google::protobuf::Arena arena_{BatchArenaOptions()};
  v1::CommandBatch* batch_ = nullptr;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Tenant>> TapeServiceImpl::AuthenticateKey(
    const grpc::CallbackServerContext& context) const {
  if (api_keys_ == nullptr) return std::shared_ptr<Tenant>();
  absl::StatusOr<std::shared_ptr<Tenant>> tenant =
      api_keys_->Authenticate(Metadata(context, v1::kAuthorizationHeader));
  // The access log names the tenant of an authenticated call.
  if (tenant.ok() && observer_ != nullptr) {
    observer_->SetTenant(&context, (*tenant)->name());
  }
  return tenant;
}

// The key comes first: without a valid one nothing is said about sessions.
// With one, the session is looked up among its tenant's only, and the token
// is checked last, so another tenant's id and token get NOT_FOUND, exactly
// what an id that never existed gets.
absl::StatusOr<std::shared_ptr<SessionEntry>> TapeServiceImpl::Authenticate(
    const grpc::CallbackServerContext& context) {
  ASSIGN_OR_RETURN(std::shared_ptr<Tenant> tenant, AuthenticateKey(context));
  return sessions_.Authenticate(Metadata(context, v1::kSessionIdHeader),
                                Metadata(context, v1::kSessionTokenHeader),
                                tenant.get());
}

grpc::ServerUnaryReactor* TapeServiceImpl::CreateSession(
    grpc::CallbackServerContext* context,
    const v1::CreateSessionRequest* request,
    v1::CreateSessionResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (drain_.draining()) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::UNAVAILABLE, kCreateDrainMessage));
    return reactor;
  }
  absl::StatusOr<std::shared_ptr<Tenant>> tenant = AuthenticateKey(*context);
  if (!tenant.ok()) {
    reactor->Finish(ToGrpcStatus(tenant.status()));
    return reactor;
  }
  // The routing header and the body must agree; either may name the id.
  absl::string_view routed_id = Metadata(*context, v1::kSessionIdHeader);
  absl::string_view id = request->session_id();
  if (id.empty()) {
    id = routed_id;
  } else if (!routed_id.empty() && routed_id != id) {
    reactor->Finish(ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("metadata ", v1::kSessionIdHeader, " '", routed_id,
                     "' differs from the requested session_id '", id, "'"))));
    return reactor;
  }
  absl::StatusOr<SessionManager::Created> created =
      sessions_.Create(id, absl::Seconds(request->keep_alive_seconds()),
                       *tenant, request->unsequenced());
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
      entry.ok() ? sessions_.Close((*entry)->id(), (*entry)->tenant().get())
                 : entry.status();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* TapeServiceImpl::KeepAlive(
    grpc::CallbackServerContext* context, const v1::KeepAliveRequest* request,
    v1::KeepAliveResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Authenticate refreshes the lease.
  absl::StatusOr<std::shared_ptr<SessionEntry>> entry = Authenticate(*context);
  if (entry.ok()) response->set_last_applied_seq((*entry)->last_applied_seq());
  reactor->Finish(ToGrpcStatus(entry.status()));
  return reactor;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
TapeServiceImpl::Stream(grpc::CallbackServerContext* context) {
  // The generation is read before the key is checked: a reload in between
  // makes the first batch check again.
  const uint64_t generation =
      api_keys_ == nullptr ? 0 : api_keys_->generation();
  return new StreamReactor(context, Authenticate(*context), max_reply_bytes_,
                           pool_, drain_, api_keys_, generation, observer_);
}

grpc::ServerUnaryReactor* TapeServiceImpl::Run(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  auto* reactor =
      new RunReactor(context, response, max_reply_bytes_, drain_, observer_);
  reactor->Start(Authenticate(*context), *request, pool_);
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
