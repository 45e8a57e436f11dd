// SessionCore: the state behind a client Session, shared by the Session, its
// tensor handles and its tapes (so that handles may outlive the Session).
//
// Two locks. `write_mu_` serialises taking the buffered commands and writing
// them to the stream, so batches go out in buffer order; `mu_` guards
// everything else and is never held across a blocking gRPC call. Lock order:
// write_mu_, then mu_. The reader thread takes only mu_. No Tensor is ever
// destroyed while either lock is held (a handle's destructor takes mu_).
//
// Two threads per session: the supervisor owns the stream's life (it starts
// a reader thread per stream, finishes the stream when the reader ends,
// and on a transport failure reconnects and resends the unacknowledged
// batches, holding write_mu_ from the failure to the end of the resend so
// that no new batch overtakes them; client/src/resume.h).
//
// Commands are built in place in the buffer's protobuf arena (see
// CommandBuffer): a buffered op costs no heap allocation for its proto.
#ifndef GRADTAPE_CLIENT_SRC_SESSION_CORE_H_
#define GRADTAPE_CLIENT_SRC_SESSION_CORE_H_

#include <atomic>
#include <cstdint>
#include <deque>
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
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "google/protobuf/arena.h"
#include "gradtape/client/session.h"
#include "gradtape/v1/metadata.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace gradtape::client::internal {

using ::gradtape::v1::kSessionIdHeader;  // gradtape/v1/metadata.h
// Released ids batched into one ReleaseTensors (SessionCore::AppendLocked).
inline constexpr size_t kReleaseBatch = 16;
using ::gradtape::v1::kSessionTokenHeader;
// Payloads of a command's error status: its seq and op label
// (CommandLabelLocked), for bindings that report them as fields.
inline constexpr char kCommandSeqPayload[] = "gradtape-command-seq";
inline constexpr char kCommandOpPayload[] = "gradtape-command-op";

// gRPC helpers shared by session.cc and session_resume.cc.
// `s` as an absl::Status, its message prefixed with `what`.
absl::Status FromGrpc(const grpc::Status& s, absl::string_view what);
// 128 random bits as 32 lowercase hex digits.
std::string RandomSessionId();
// Whether the call's status carries the server's gradtape-server-status
// trailer (client/src/resume.h).
bool HasServerTrailer(const grpc::ClientContext& context);
// Whether the call's status carries the proxy's replica-unreachable verdict
// (kProxyVerdictTrailer, client/src/resume.h).
bool HasReplicaUnreachableVerdict(const grpc::ClientContext& context);

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
  // The first of `n` (>= 1) consecutive new tensor ids.
  int64_t NewTensorIds(int64_t n) { return next_tensor_id_.fetch_add(n) + 1; }
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
  // Enqueue without the flush (client/src/session_bindings.cc): for callers
  // that must not block here (a binding that first releases its
  // interpreter lock, a finalizer). `flush_due`: the buffer is full, call
  // Flush(). A lost session buffers nothing (`lost`: report lost()).
  struct Enqueued {
    int64_t seq = 0;  // 0: closed or lost, nothing buffered
    bool flush_due = false;
    bool lost = false;
  };
  Enqueued EnqueueNoFlush(CommandFill fill);
  // The same for a command built by the caller (copied into the buffer).
  int64_t Enqueue(const v1::Command& command, absl::string_view what = "",
                  absl::string_view local_error = "");
  std::vector<Tensor> Execute(absl::string_view op,
                              absl::Span<const Tensor> inputs,
                              const Attrs& attrs, int num_outputs);
  // Buffers the release of `id`: one ReleaseTensors for every id released
  // since the last command goes into the buffer before the next command (or
  // at the next flush). While a recording is on, the id is held in it.
  void Release(int64_t id);

  // Captured steps (client/src/program.cc). While a recording is on, every
  // command appended is copied into it, and released ids are held in it
  // instead of released (so every id the recorded commands name is still
  // alive when the program that captures them is defined; the caller
  // releases them after that).
  struct Recording {
    std::vector<v1::Command> commands;
    std::vector<int64_t> held_releases;
  };
  void BeginRecording(Recording* recording);
  void EndRecording();

  void Flush();
  // Wait point: flush, wait for every reply, report the first error.
  absl::Status Sync();
  // Sync bounded by `deadline` (DEADLINE_EXCEEDED past it).
  absl::Status SyncUntil(absl::Time deadline);
  // Wait point for a command that returns something: enqueue, flush, wait,
  // and return its result (or the first unreported error).
  absl::StatusOr<v1::CommandResult> Call(v1::Command command);
  absl::Status KeepAlive();
  absl::Status Close();

  // Tensors larger than one chunk (client/src/chunks.cc).
  // Buffers PutTensorBegin at `id`, then sends each chunk of `bytes` in a
  // batch of its own (errors surface at the next wait point). `bytes` is
  // read while this runs, not kept: each chunk is copied once, outside the
  // session lock (the Python extension passes its array's buffer).
  void PutInChunks(int64_t id, DType dtype, absl::Span<const int64_t> shape,
                   absl::string_view bytes);
  void PutInChunks(int64_t id, const HostTensor& value) {
    PutInChunks(id, value.dtype, value.shape, value.bytes);
  }
  // Wait point: the tensor at `id`, fetched in chunks of at most
  // options.chunk_bytes (one round trip when it fits in one).
  absl::StatusOr<HostTensor> FetchInChunks(int64_t id);
  ClientCounters counters() const;
  int64_t last_seq() const;

  // For language bindings (client/src/session_bindings.cc).
  // Unary ListOps with the session's metadata.
  absl::StatusOr<v1::ListOpsResponse> ListOps();
  bool closed() const;
  // OK, or the error every wait returns once the session is lost (its
  // payloads: kLostReasonPayload (client/src/resume.h), kLostAttemptsPayload,
  // kLostSecondsPayload, kLastAppliedSeqPayload).
  absl::Status lost() const;
  const std::string& token() const { return token_; }

 private:
  struct CommandError {
    int64_t seq;
    absl::Status status;
  };

  // A batch sent and not acknowledged yet, kept for a resend.
  struct SentBatch {
    int64_t batch_id;
    int64_t last_seq;  // the last seq sent up to it (its own last command's)
    int64_t bytes;
    std::shared_ptr<CommandBuffer> buffer;
  };

  // CreateSession, retried in transport with a new id (resume.h).
  absl::Status CreateSession();
  void AddSessionMetadata(grpc::ClientContext* context) const;
  // `authorization: Bearer <api_key>` when SessionOptions::api_key is set.
  void AddKeyMetadata(grpc::ClientContext* context) const;
  // Moves the buffered releases into the buffer as one ReleaseTensors.
  void AppendReleasesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the buffer (plus pending releases) as one batch and keeps it
  // until acknowledged. Unless `reply_wanted` (a wait point follows, or the
  // unacknowledged bytes grew past a quarter of max_unacked_bytes), the
  // batch goes out reply_optional: the server answers it only if it has
  // results. Waits while the unacknowledged bytes exceed max_unacked_bytes.
  void FlushLocked(bool reply_wanted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // FlushLocked's bookkeeping: the batch to write (null: nothing to write,
  // or the stream is broken and the batch waits for the resend).
  std::shared_ptr<CommandBuffer> TakeBatchLocked(bool reply_wanted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Flush (or FlushForWait) that does not wait for a reconnect in
  // progress: while the stream is broken the batch is only kept for the
  // supervisor's resend. Returns the id of the last batch sent or kept.
  int64_t FlushUnlessReconnecting(bool reply_wanted);
  // Drops the buffered commands and releases.
  void ClearPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<CommandBuffer> NewBufferLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Flushes and returns the id of the last batch sent.
  int64_t FlushForWait();
  // Waits for the reply to `batch_id`, then reports errors: the session's
  // loss if it is lost, else the earliest unreported command error.
  // DEADLINE_EXCEEDED if no reply came by `deadline`.
  absl::Status WaitAndTakeErrors(int64_t batch_id,
                                 absl::Time deadline = absl::InfiniteFuture());
  absl::Status TakeErrorsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends a command with the next seq; sets `*full` when the buffer is.
  int64_t AppendLocked(CommandFill fill, bool* full)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The op (ExecuteOp) or command kind ("FetchTensor", "Gradient", ...) of
  // the unacknowledged command `seq`, or "" if it is not kept.
  std::string CommandLabelLocked(int64_t seq) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The supervisor thread's body (see the top of this file).
  void Supervise();
  // The reader thread's body: records the replies of `stream` until it
  // ends, then marks it broken.
  void ReadReplies(
      grpc::ClientReaderWriter<v1::CommandBatch, v1::BatchReply>* stream);
  void HandleReplyLocked(v1::BatchReply& reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the command `seq` (still kept) is a read that may be sent again
  // with a new seq (FetchTensor, Stats).
  bool IsRereadableLocked(int64_t seq) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After the reader ended: finishes the stream and either reconnects (true:
  // a new stream is open, its resend to do) or marks the session lost or
  // closed (false).
  bool RecoverLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  bool ReconnectLocked(const absl::Status& cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // KeepAlive with the session's metadata: a reconnect's probe. Sets
  // `*server_trailer` when the status carries the server's trailer and
  // `*replica_unreachable` when it carries the proxy's verdict.
  absl::Status ProbeSession(absl::Time deadline, bool* server_trailer,
                            bool* replica_unreachable,
                            int64_t* last_applied_seq);
  void OpenStreamLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  void ResendLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // The server's last applied seq at the last successful probe.
  int64_t probe_applied_seq_ ABSL_GUARDED_BY(write_mu_) = 0;
  void SetLostLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CloseSession, retried in transport within rpc_timeout.
  absl::Status CloseOnServer();
  // Sleeps until `until` or Close; false on Close.
  bool SleepUnlessClosing(absl::Time until);
  // A command sent in a batch of its own, and collecting its result: Call
  // in two halves, so that several can be in flight (chunk fetches).
  struct Sent {
    int64_t seq = 0;
    int64_t batch_id = 0;
    v1::Command command;  // sent again if its result was no longer kept
  };
  absl::StatusOr<Sent> SendForResult(v1::Command command);
  absl::StatusOr<v1::CommandResult> AwaitResult(Sent sent);

  const SessionOptions options_;
  std::string address_;
  std::string session_id_;
  std::string token_;
  int64_t keep_alive_seconds_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TapeService::Stub> stub_;
  std::atomic<int64_t> next_tensor_id_{0};
  std::atomic<int64_t> next_tape_id_{0};

  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // The current stream: replaced by the supervisor under both locks.
  std::unique_ptr<grpc::ClientContext> stream_context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::CommandBatch, v1::BatchReply>>
      stream_;
  std::thread supervisor_;

  mutable absl::Mutex mu_;
  // Signalled on every reply, when a stream breaks, when the session is
  // lost, and on Close.
  absl::CondVar cv_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;  // the stream ends on purpose
  // The current stream's reader has ended (its batches wait for a resend).
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  // Not OK once the session is lost: every wait returns it.
  absl::Status lost_ ABSL_GUARDED_BY(mu_);
  bool supervisor_done_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<CommandBuffer> pending_ ABSL_GUARDED_BY(mu_) =
      std::make_shared<CommandBuffer>();
  std::vector<std::shared_ptr<CommandBuffer>> spare_buffers_
      ABSL_GUARDED_BY(mu_);
  int64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // serialized, roughly
  std::vector<int64_t> pending_releases_ ABSL_GUARDED_BY(mu_);
  Recording* recording_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_sent_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_batch_id_ ABSL_GUARDED_BY(mu_) = 0;     // sent
  int64_t last_answered_id_ ABSL_GUARDED_BY(mu_) = 0;  // acknowledged
  // Whether batch last_batch_id_ went out reply_optional.
  bool last_reply_optional_ ABSL_GUARDED_BY(mu_) = false;
  // Sent, not acknowledged, in batch order; their bytes; the bytes sent
  // since the last reply-wanted batch; the last seq acknowledged.
  std::deque<SentBatch> unacked_ ABSL_GUARDED_BY(mu_);
  int64_t unacked_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_since_reply_wanted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t acked_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<CommandError> errors_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int64_t> local_failures_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, v1::CommandResult> results_ ABSL_GUARDED_BY(mu_);
  // Reads whose duplicate's result was no longer kept: Call sends them
  // again with a new seq.
  absl::flat_hash_set<int64_t> stale_reads_ ABSL_GUARDED_BY(mu_);
  ClientCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradtape::client::internal

#endif  // GRADTAPE_CLIENT_SRC_SESSION_CORE_H_
