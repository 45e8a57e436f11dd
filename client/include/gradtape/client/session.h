// The gradtape C++ client: a session on a gradtape server, tensor handles,
// and gradient tapes.
//
// How it works. Every call that changes server state (Put, Execute, Watch,
// Gradient, releasing a handle, ...) appends one command to the session's
// buffer and returns at once: tensor and tape ids are chosen by the client,
// so an op's outputs can be named before the server has run it. The buffer
// is sent as one CommandBatch on the session's bidi Stream when it holds
// `SessionOptions::batch_size` commands, or at a *wait point*: Sync, Fetch,
// Stats, GradientTape::GradientValues, Close. Batches are pipelined: the
// sender never waits for the reply to the previous batch; a reader thread
// collects the replies (one per batch, in order) and records errors and
// results.
//
// Errors. The server applies commands one at a time; a failed command
// changes nothing and poisons the ids it would have filled, so later
// commands using them fail with FAILED_PRECONDITION quoting the first
// failure. The client reports command errors at the next wait point: that
// call returns the earliest error not reported yet (code and message as the
// server sent them; the message names the op, the command's sequence number
// and the ids or shapes), noting how many more followed it. A wait point
// reports every error received up to it, then forgets them.
//
// Lost connections. A stream that ends in transport (a dropped connection,
// a proxy's RST_STREAM) is resumed: the session reconnects and resends what
// the server has not acknowledged, and the server applies each command once
// (SessionOptions::reconnect_timeout). A session that cannot be resumed
// (unreachable past the timeout; the server no longer has it, NOT_FOUND;
// the server is draining; any other error of the stream) is lost: every
// later wait returns the same one error naming the session and the cause.
//
// Thread-safety: Session and Tensor may be used from several threads;
// commands are applied in the order their calls entered the buffer. Sends
// happen on the calling thread (one at a time); replies are read on the
// session's reader thread, and a supervisor thread reconnects and resends
// after a transport failure (client/src/resume.h). A GradientTape is used by
// one thread at a time. Typically one thread drives a session.
#ifndef GRADTAPE_CLIENT_SESSION_H_
#define GRADTAPE_CLIENT_SESSION_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "gradtape/client/host_tensor.h"

namespace grpc {
class ChannelCredentials;
}  // namespace grpc

namespace gradtape::client {

namespace internal {
class SessionCore;
struct TensorRef;
}  // namespace internal

class Session;

// A handle to a tensor held by the server: an id in one session.
//
// Copies share the id; when the last copy is destroyed a ReleaseTensors
// command for it is buffered (sent with the next batch), which frees the
// server's tensor and lets tapes forget it. A handle may outlive its
// Session: releasing it then does nothing.
//
// A handle can name a tensor that does not exist (yet): the command that
// fills it may still be in flight, may have failed (the id is poisoned) or
// may have produced a None gradient. Using such a handle fails on the
// server, and the error surfaces at the next wait point.
//
// A default-constructed Tensor is null (id 0); ops given a null input fail
// with INVALID_ARGUMENT at the next wait point.
class Tensor {
 public:
  Tensor() = default;

  // 0 for a null handle.
  int64_t id() const;
  bool is_null() const { return ref_ == nullptr; }
  explicit operator bool() const { return ref_ != nullptr; }

 private:
  friend class internal::SessionCore;
  explicit Tensor(std::shared_ptr<const internal::TensorRef> ref)
      : ref_(std::move(ref)) {}
  std::shared_ptr<const internal::TensorRef> ref_;
};

// One op attribute (gradtape.v1.AttrValue). Constructors are implicit so
// that attrs read like {{"transpose_a", true}, {"axis", {0, 1}}}.
class AttrValue {
 public:
  using Value = std::variant<bool, int64_t, double, std::string, DType,
                             std::vector<int64_t>>;
  AttrValue(bool b) : value_(b) {}                                   // NOLINT
  AttrValue(int i) : value_(int64_t{i}) {}                           // NOLINT
  AttrValue(int64_t i) : value_(i) {}                                // NOLINT
  AttrValue(double f) : value_(f) {}                                 // NOLINT
  AttrValue(const char* s) : value_(std::string(s)) {}               // NOLINT
  AttrValue(std::string s) : value_(std::move(s)) {}                 // NOLINT
  AttrValue(DType t) : value_(t) {}                                  // NOLINT
  AttrValue(std::vector<int64_t> ints) : value_(std::move(ints)) {}  // NOLINT
  AttrValue(std::initializer_list<int64_t> ints)                     // NOLINT
      : value_(std::vector<int64_t>(ints)) {}

  const Value& value() const { return value_; }

 private:
  Value value_;
};
using Attrs = std::vector<std::pair<std::string, AttrValue>>;

// Transport security and HTTP/2 keepalive of a client's channel
// (docs/OPERATING.md "Transport security (TLS and mTLS)";
// client/src/channel.cc).
//
// TLS: the server's certificate is checked against root_certificates and
// the host of the address (or server_name_override). mTLS: private_key and
// certificate_chain are the client's certificate, for a server started with
// --tls_client_ca_file.
struct TlsOptions {
  std::string root_certificates;  // PEM bundle; empty: gRPC's default roots
  std::string private_key;        // PEM; set with certificate_chain, or not
  std::string certificate_chain;  // PEM
  // The name the server's certificate must hold, instead of the address's
  // host (e.g. "localhost" when connecting to an IP address).
  std::string server_name_override;
};
// Keepalive pings detect a dead connection (or keep an idle one open
// through proxies and NAT). gradtape-server accepts pings no more often
// than every --keepalive_min_ping_interval_seconds (10 s by default) and
// sends GOAWAY too_many_pings to clients that ping faster.
struct KeepaliveOptions {
  absl::Duration time = absl::ZeroDuration();  // ping interval; 0: no pings
  absl::Duration timeout = absl::Seconds(20);  // wait for the ping's ack
  bool permit_without_calls = false;           // also ping with no call open
};
// The last applied seq of a stream the server stopped because its deadline
// passed or it was cancelled (DEADLINE_EXCEEDED / CANCELLED): the server's
// trailer gradtape-last-applied-seq, carried by the session's error as a
// payload. nullopt for other errors, or when the client's own deadline fired
// first (no trailer arrived).
std::optional<int64_t> LastAppliedSeq(const absl::Status& status);
inline constexpr char kLastAppliedSeqPayload[] = "gradtape-last-applied-seq";

struct SessionOptions {
  // Commands per batch: the buffer is sent when it reaches this size (and at
  // every wait point). At least 1.
  int batch_size = 512;
  // The buffer is also sent once its commands hold this many bytes (large
  // Puts). A single command must fit the server's message limit (256 MiB
  // for gradtape-server).
  int64_t max_batch_bytes = int64_t{16} << 20;
  // Tensors larger than this move in chunks of this many bytes (Put: one
  // PutTensorBegin, then one PutTensorChunk per batch; Fetch: every fetch
  // asks for at most this many bytes, and a larger tensor's remaining
  // chunks are fetched pipelined). A chunk must fit the server's message
  // limit (256 MiB for gradtape-server, --max_message_mb) with a margin.
  // At least 1.
  int64_t chunk_bytes = int64_t{64} << 20;
  // Proposed session id (32 lowercase hex digits); empty: 128 random bits.
  std::string session_id;
  // Idle time after which the server collects the session; 0: the server's
  // default. Every batch refreshes the lease; see also Session::KeepAlive.
  int64_t keep_alive_seconds = 0;
  // Deadline for connecting and for each unary call (CreateSession,
  // CloseSession, KeepAlive).
  absl::Duration rpc_timeout = absl::Seconds(10);
  // Null: insecure (plaintext) credentials, fine for loopback.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Transport security and keepalive (see TlsOptions). `tls` and
  // `credentials` are exclusive: Connect fails with INVALID_ARGUMENT if
  // both are set.
  std::optional<TlsOptions> tls;
  KeepaliveOptions keepalive;
  // API key of a server started with --api_keys_file: sent as
  // `authorization: Bearer <api_key>` on every call (CreateSession, the
  // Stream, KeepAlive, CloseSession). Empty: none. Send it over TLS only,
  // except on loopback.
  std::string api_key;

  // Resume after a transport failure (docs/RELIABILITY.md "Resuming
  // clients"; client/src/resume.h). When the stream ends in transport
  // (UNAVAILABLE, INTERNAL or UNKNOWN without the server's
  // gradtape-server-status trailer), the session reconnects on its own:
  // KeepAlive probes with exponential backoff (initial_backoff doubling to
  // max_backoff, with jitter) for at most reconnect_timeout since the failure,
  // then a new Stream on the same session that resends every command not yet
  // acknowledged, with its seq (the server applies each seq once). Callers
  // see a delay; past reconnect_timeout every wait returns UNAVAILABLE
  // "session <id>: server <addr> unreachable for <T> s (<N> reconnect
  // attempts): ...", and so it does sooner once the probes have carried a
  // proxy's replica-unreachable verdict for 2 s in a row
  // (docs/RELIABILITY.md "A replica lost behind the proxy";
  // client/src/resume.h). 0 turns resuming off. A
  // CreateSession that fails in transport is retried within the same bound,
  // with a new random session id (a caller's own session_id is tried once). A
  // wait waits for a reconnect in progress (at most this long), Close at most
  // rpc_timeout (the reconnect then gives up); Flush does not wait for it (the
  // batch joins the resend).
  absl::Duration reconnect_timeout = absl::Seconds(30);
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  // The bytes of sent commands kept for a resend until a reply
  // acknowledges them: past a quarter of it the next batch asks for a
  // reply, past all of it a flush waits for replies.
  int64_t max_unacked_bytes = int64_t{256} << 20;
};

// gradtape.v1.SessionStats.
struct SessionStats {
  int64_t live_tensors = 0;
  int64_t poisoned_ids = 0;
  int64_t bytes_in_use = 0;
  int64_t tapes = 0;
  int64_t tape_entries = 0;
  int64_t tape_saved_bytes = 0;
  // Commands applied (or failed) since the session was created, and
  // duplicates skipped (seqs sent again after a resume).
  int64_t commands_applied = 0;
  int64_t duplicate_commands = 0;
};

// Client-side counters (not a round trip).
struct ClientCounters {
  int64_t commands_sent = 0;
  int64_t batches_sent = 0;
  // Replies received. Batches sent because the buffer filled are answered
  // only if they have results (CommandBatch.reply_optional); a reply
  // acknowledges every earlier batch too.
  int64_t batches_answered = 0;
  // Resume (SessionOptions::reconnect_timeout): streams that ended in
  // transport, KeepAlive probes while reconnecting, streams re-opened with
  // the unacknowledged batches resent, those batches and their commands,
  // results the server marked duplicate, and fetches sent again with a new
  // seq because the server no longer kept their result.
  int64_t transport_failures = 0;
  int64_t reconnect_attempts = 0;
  int64_t resumes = 0;
  int64_t batches_resent = 0;
  int64_t commands_resent = 0;
  // Of the commands resent, those at or below the server's last applied seq
  // when the session was probed (the server skips them).
  int64_t resent_already_applied = 0;
  int64_t duplicate_results = 0;
  int64_t refetches = 0;
};

class Session {
 public:
  // Opens a channel to `address` ("host:port"), creates a session (sending
  // the proposed id as `gradtape-session-id` metadata, for proxies that
  // route on it) and opens the command stream. Blocks up to
  // options.rpc_timeout for the server to become reachable.
  static absl::StatusOr<std::unique_ptr<Session>> Connect(
      absl::string_view address, const SessionOptions& options = {});

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  // Close()s the session, ignoring its status.
  ~Session();

  // The session id (32 hex digits) and the server's lease.
  const std::string& id() const;
  int64_t keep_alive_seconds() const;

  // Buffers a PutTensor of `value` at a fresh id (larger than
  // options.chunk_bytes: sent in chunks, each in a batch of its own).
  Tensor Put(const HostTensor& value);
  template <typename T>
  Tensor Put(std::vector<int64_t> shape, const std::vector<T>& values) {
    return Put(HostTensor::FromVector<T>(std::move(shape), values));
  }
  // A scalar of `dtype` (a constant such as a learning rate).
  Tensor Scalar(double value, DType dtype = DType::kFloat32);

  // Buffers an ExecuteOp of `op` on `inputs` and returns handles to its
  // `num_outputs` outputs (fresh ids). Attrs the op does not list fail on
  // the server; missing optional ones take the op's defaults.
  std::vector<Tensor> Execute(absl::string_view op,
                              absl::Span<const Tensor> inputs,
                              const Attrs& attrs = {}, int num_outputs = 1);

  // Wait point: flushes, waits for the reply and returns the value, or the
  // first unreported error of the session (which may come from an earlier
  // command; the fetched value is then dropped). A value larger than
  // options.chunk_bytes comes in chunks: the first tells its size, the
  // rest are fetched pipelined.
  absl::StatusOr<HostTensor> Fetch(const Tensor& tensor);

  // Stop / start recording on every tape of the session (buffered).
  void StopRecording();
  void StartRecording();

  // Wait point: flushes and waits for the replies to everything sent;
  // returns the first unreported error, or OK.
  absl::Status Sync();
  // Wait point: the server's session statistics after every earlier command.
  absl::StatusOr<SessionStats> Stats();
  // Sends the buffered commands without waiting for their replies (nor for
  // a reconnect in progress: they are then resent with the rest).
  void Flush();
  // Unary KeepAlive call (refreshes the lease of an idle session).
  absl::Status KeepAlive();
  ClientCounters counters() const;
  // Sequence number of the last command buffered so far (what the server's
  // error messages quote as "(command N)"): call it right after an op to
  // learn that op's number. 0 before the first command.
  int64_t last_seq() const;

  // Wait point (bounded by options.rpc_timeout), then ends the stream and
  // closes the session on the server. Returns the first unreported error,
  // if any. Idempotent; later commands are dropped and later wait points
  // fail with FAILED_PRECONDITION.
  absl::Status Close();

  // For GradientTape and the op helpers.
  const std::shared_ptr<internal::SessionCore>& core() const { return core_; }

 private:
  explicit Session(std::shared_ptr<internal::SessionCore> core);
  std::shared_ptr<internal::SessionCore> core_;
};

// The session a handle belongs to: its core, or null for a null handle.
internal::SessionCore* SessionOf(const Tensor& t);

// Stops recording on every tape of the session for its lifetime.
class RecordingPause {
 public:
  explicit RecordingPause(Session& session);
  ~RecordingPause();
  RecordingPause(const RecordingPause&) = delete;
  RecordingPause& operator=(const RecordingPause&) = delete;

 private:
  std::shared_ptr<internal::SessionCore> core_;
};

enum class Unconnected {
  kNone,  // an unconnected source gets a None gradient
  kZero,  // an unconnected source gets zeros of its shape
};

struct GradientOptions {
  // Empty, or one per target: the gradient flowing into that target. A null
  // Tensor entry means ones (the default seed).
  std::vector<Tensor> output_gradients;
  Unconnected unconnected = Unconnected::kNone;
};

struct TapeOptions {
  // A persistent tape computes any number of gradients; otherwise one (the
  // second fails with FAILED_PRECONDITION).
  bool persistent = false;
  bool watch_accessed_variables = true;
};

// A gradient tape on the server (RAII). The constructor pushes the tape
// (client-chosen tape id): from then on it records every op touching a
// watched tensor until Stop(). The destructor pops the tape if it is still
// recording and deletes it, freeing what it kept. Every call is buffered;
// only GradientValues waits.
//
// Tapes nest like TensorFlow's: an outer tape records the ops the inner
// tape's gradient runs (higher-order gradients). The tape keeps a reference
// to the session's core, so it may outlive the Session (its calls are then
// dropped).
class GradientTape {
 public:
  explicit GradientTape(Session& session, TapeOptions options = {});
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  int64_t id() const { return id_; }
  bool recording() const { return recording_; }
  bool persistent() const { return options_.persistent; }

  void Watch(const Tensor& t);
  void Watch(absl::Span<const Tensor> ts);
  // Pops the tape: it stops recording but can still compute gradients.
  // Idempotent.
  void Stop();

  // d(sum of targets)/d(source) for each source, as handles, without
  // waiting. A source unconnected to the targets gets, with
  // Unconnected::kNone, a handle to a None gradient: the server marks its
  // id, and any later use of it (Fetch, an op) fails with
  // FAILED_PRECONDITION saying it is a None gradient; with kZero, zeros.
  // Errors here are local misuse only (no sources, null sources, wrong
  // number of output_gradients); server errors surface at the next wait
  // point.
  absl::StatusOr<std::vector<Tensor>> Gradient(
      absl::Span<const Tensor> targets, absl::Span<const Tensor> sources,
      const GradientOptions& options = {});
  absl::StatusOr<std::vector<Tensor>> Gradient(
      const Tensor& target, absl::Span<const Tensor> sources,
      const GradientOptions& options = {}) {
    return Gradient(absl::Span<const Tensor>(&target, 1), sources, options);
  }
  // Wait point: the gradient values, std::nullopt for a None gradient.
  absl::StatusOr<std::vector<std::optional<HostTensor>>> GradientValues(
      absl::Span<const Tensor> targets, absl::Span<const Tensor> sources,
      const GradientOptions& options = {});
  absl::StatusOr<std::vector<std::optional<HostTensor>>> GradientValues(
      const Tensor& target, absl::Span<const Tensor> sources,
      const GradientOptions& options = {}) {
    return GradientValues(absl::Span<const Tensor>(&target, 1), sources,
                          options);
  }

  // Jacobians and watched variables (client/src/autodiff.cc).
  //
  // d target / d source for each source (TensorFlow's tape.jacobian),
  // computed on the server in one command: shape target.shape +
  // source.shape. Handles at once, like Gradient; an unconnected source gets
  // a None handle (or zeros with Unconnected::kZero). A non-persistent tape
  // computes one Jacobian.
  absl::StatusOr<std::vector<Tensor>> Jacobian(
      const Tensor& target, absl::Span<const Tensor> sources,
      Unconnected unconnected = Unconnected::kNone);
  // tape.batch_jacobian: target and sources share their first (batch) dim;
  // shape [batch] + target.shape[1:] + source.shape[1:].
  absl::StatusOr<std::vector<Tensor>> BatchJacobian(
      const Tensor& target, absl::Span<const Tensor> sources,
      Unconnected unconnected = Unconnected::kNone);
  // Wait point: the ids of the variable handles this tape watched
  // (explicitly, or by reading them with watch_accessed_variables), in watch
  // order; compare them with Tensor::id(). A variable named by several live
  // handles gives each id; one whose handles were all released gives none.
  absl::StatusOr<std::vector<int64_t>> WatchedVariableIds();

 private:
  std::shared_ptr<internal::SessionCore> core_;
  TapeOptions options_;
  int64_t id_ = 0;
  bool recording_ = false;
};

}  // namespace gradtape::client

#endif  // GRADTAPE_CLIENT_SESSION_H_
