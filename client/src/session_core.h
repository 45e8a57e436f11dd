// SessionCore: the state behind a client Session, shared by the Session, its
// tensor handles and its tapes (so that handles may outlive the Session).
//
// Two locks. `write_mu_` serialises taking the buffered commands and writing
// them to the stream, so batches go out in buffer order; `mu_` guards
// everything else and is never held across a blocking gRPC call. Lock order:
// write_mu_, then mu_. The reader thread takes only mu_. No Tensor is ever
// destroyed while either lock is held (a handle's destructor takes mu_).
//
// Commands are built in place in the buffer's protobuf arena (see
// CommandBuffer): a buffered op costs no heap allocation for its proto.
#ifndef GRADTAPE_CLIENT_SRC_SESSION_CORE_H_
#define GRADTAPE_CLIENT_SRC_SESSION_CORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "google/protobuf/arena.h"
#include "gradtape/client/session.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace gradtape::client::internal {

// Proto conversions shared by session.cc and autodiff.cc.
// `t`'s dtype and shape with `bytes` moved in (no copy, also into an arena
// message).
void ToProto(const HostTensor& t, std::string bytes, v1::TensorValue* out);
// The tensor in `value`, its bytes moved out.
HostTensor FromProto(v1::TensorValue* value);
void ToProto(const AttrValue& attr, v1::AttrValue* out);
v1::UnconnectedGradients ToProto(Unconnected u);

// What a Tensor handle shares: the id and its session. The destructor
// buffers the id's release.
struct TensorRef {
  TensorRef(std::shared_ptr<SessionCore> core, int64_t id)
      : core(std::move(core)), id(id) {}
  ~TensorRef();
  std::shared_ptr<SessionCore> core;
  int64_t id;
};

// A CommandBatch in its own arena: commands are allocated and filled in the
// arena, and Clear() frees them all at once (the arena keeps no block
// between batches, so an idle session holds no buffer memory).
class CommandBuffer {
 public:
  CommandBuffer();
  CommandBuffer(const CommandBuffer&) = delete;
  CommandBuffer& operator=(const CommandBuffer&) = delete;

  v1::CommandBatch& batch() { return *batch_; }
  void Clear();

 private:
  google::protobuf::Arena arena_;
  v1::CommandBatch* batch_;
};

class SessionCore : public std::enable_shared_from_this<SessionCore> {
 public:
  explicit SessionCore(SessionOptions options);
  SessionCore(const SessionCore&) = delete;
  SessionCore& operator=(const SessionCore&) = delete;
  // Ends the stream if Close() was not called.
  ~SessionCore();

  // CreateSession, then opens the stream and starts the reader thread.
  absl::Status Open(absl::string_view address);

  const std::string& id() const { return session_id_; }
  int64_t keep_alive_seconds() const { return keep_alive_seconds_; }
  int64_t chunk_bytes() const { return options_.chunk_bytes; }

  int64_t NewTensorId() { return next_tensor_id_.fetch_add(1) + 1; }
  int64_t NewTapeId() { return next_tape_id_.fetch_add(1) + 1; }
  // A handle owning `id`.
  Tensor MakeTensor(int64_t id);
  static SessionCore* Of(const Tensor& t) {
    return t.ref_ ? t.ref_->core.get() : nullptr;
  }

  // The id of `t` for a command of this session, or 0 with a description of
  // the problem appended to `*problem` (null handle, other session).
  int64_t IdFor(const Tensor& t, absl::string_view role, std::string* problem);
  // The same, with the role "<role> <index>" (formatted only on a problem).
  int64_t IdFor(const Tensor& t, absl::string_view role, size_t index,
                std::string* problem);

  // Appends a command to the buffer with the next sequence number (returned;
  // 0 if the session is closed and the command was dropped) and sends the
  // buffer if it is full. `fill` sets the command's kind in place (in the
  // buffer's arena, under the session lock: it must not block, call back
  // into the session or destroy a Tensor). A non-empty `local_error` is
  // recorded as that command's INVALID_ARGUMENT error (the command is still
  // sent, so the server poisons its outputs; its own error for it is then
  // not reported).
  using CommandFill = absl::FunctionRef<void(v1::Command&)>;
  int64_t Enqueue(CommandFill fill, absl::string_view what = "",
                  absl::string_view local_error = "");
  // The same for a command built by the caller (copied into the buffer).
  int64_t Enqueue(const v1::Command& command, absl::string_view what = "",
                  absl::string_view local_error = "");
  std::vector<Tensor> Execute(absl::string_view op,
                              absl::Span<const Tensor> inputs,
                              const Attrs& attrs, int num_outputs);
  // Buffers the release of `id`: one ReleaseTensors for every id released
  // since the last command goes into the buffer before the next command (or
  // at the next flush).
  void Release(int64_t id);

  void Flush();
  // Wait point: flush, wait for every reply, report the first error.
  absl::Status Sync();
  // Wait point for a command that returns something: enqueue, flush, wait,
  // and return its result (or the first unreported error).
  absl::StatusOr<v1::CommandResult> Call(v1::Command command);
  absl::Status KeepAlive();
  absl::Status Close();

  // Tensors larger than one chunk (client/src/chunks.cc).
  // Buffers PutTensorBegin at `id`, then sends each chunk of `value` in a
  // batch of its own (errors surface at the next wait point).
  void PutInChunks(int64_t id, const HostTensor& value);
  // Wait point: the tensor at `id`, fetched in chunks of at most
  // options.chunk_bytes (one round trip when it fits in one).
  absl::StatusOr<HostTensor> FetchInChunks(int64_t id);
  ClientCounters counters() const;
  int64_t last_seq() const;

 private:
  struct CommandError {
    int64_t seq;
    absl::Status status;
  };

  void AddSessionMetadata(grpc::ClientContext* context) const;
  // `authorization: Bearer <api_key>` when SessionOptions::api_key is set.
  void AddKeyMetadata(grpc::ClientContext* context) const;
  // Moves the buffered releases into the buffer as one ReleaseTensors.
  void AppendReleasesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the buffer (plus pending releases) as one batch. Unless
  // `reply_wanted` (a wait point follows), the batch goes out
  // reply_optional: the server answers it only if it has results.
  void FlushLocked(bool reply_wanted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Drops the buffered commands and releases.
  void ClearPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Flushes and returns the id of the last batch sent.
  int64_t FlushForWait();
  // Waits for the reply to `batch_id`, then reports errors: the stream's
  // failure if it ended first, else the earliest unreported command error.
  // DEADLINE_EXCEEDED if no reply came by `deadline`.
  absl::Status WaitAndTakeErrors(int64_t batch_id,
                                 absl::Time deadline = absl::InfiniteFuture());
  absl::Status TakeErrorsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After the stream ended: joins the reader and calls Finish once; returns
  // the stream's status as a client error.
  absl::Status FinishStreamLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  void ReadLoop();
  // A command sent in a batch of its own, and collecting its result: Call
  // in two halves, so that several can be in flight (chunk fetches).
  struct Sent {
    int64_t seq = 0;
    int64_t batch_id = 0;
  };
  absl::StatusOr<Sent> SendForResult(const v1::Command& command);
  absl::StatusOr<v1::CommandResult> AwaitResult(Sent sent);

  const SessionOptions options_;
  std::string session_id_;
  std::string token_;
  int64_t keep_alive_seconds_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TapeService::Stub> stub_;
  std::atomic<int64_t> next_tensor_id_{0};
  std::atomic<int64_t> next_tape_id_{0};

  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::unique_ptr<grpc::ClientContext> stream_context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::CommandBatch, v1::BatchReply>>
      stream_;
  std::thread reader_;
  // The batch being written; swapped with pending_ by FlushLocked.
  std::unique_ptr<CommandBuffer> sending_ ABSL_GUARDED_BY(write_mu_) =
      std::make_unique<CommandBuffer>();
  bool stream_finished_ ABSL_GUARDED_BY(write_mu_) = false;
  absl::Status stream_status_ ABSL_GUARDED_BY(write_mu_);

  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // signalled on every reply and when the stream ends
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool stream_done_ ABSL_GUARDED_BY(mu_) = false;  // no more replies
  std::unique_ptr<CommandBuffer> pending_ ABSL_GUARDED_BY(mu_) =
      std::make_unique<CommandBuffer>();
  int64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // serialized, roughly
  std::vector<int64_t> pending_releases_ ABSL_GUARDED_BY(mu_);
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_batch_id_ ABSL_GUARDED_BY(mu_) = 0;     // sent
  int64_t last_answered_id_ ABSL_GUARDED_BY(mu_) = 0;  // acknowledged
  // Whether batch last_batch_id_ went out reply_optional.
  bool last_reply_optional_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<CommandError> errors_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int64_t> local_failures_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, v1::CommandResult> results_ ABSL_GUARDED_BY(mu_);
  ClientCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradtape::client::internal

#endif  // GRADTAPE_CLIENT_SRC_SESSION_CORE_H_
