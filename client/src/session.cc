#include "gradtape/client/session.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/src/channel.h"
#include "client/src/resume.h"
#include "client/src/session_core.h"
#include "core/base/status_macros.h"

namespace gradtape::client {
namespace internal {
namespace {

// How long Close waits for the server to end the stream after WritesDone.
constexpr absl::Duration kStreamDrainTimeout = absl::Seconds(5);

google::protobuf::ArenaOptions BufferArenaOptions() {
  google::protobuf::ArenaOptions options;
  options.start_block_size = 4096;
  options.max_block_size = 64 << 10;
  return options;
}

// Roughly the serialized size of `command` (what max_batch_bytes counts),
// without ByteSizeLong's walk over every field for the common kinds: what
// matters is that large Puts fill a batch.
int64_t ApproxBytes(const v1::Command& command) {
  switch (command.kind_case()) {
    case v1::Command::kPut:
      return 32 + 10 * command.put().value().shape_size() +
             static_cast<int64_t>(command.put().value().data().size());
    case v1::Command::kExecute: {
      const v1::ExecuteOp& e = command.execute();
      return 32 + static_cast<int64_t>(e.op().size()) +
             10 * (e.input_ids_size() + e.output_ids_size()) +
             32 * static_cast<int64_t>(e.attrs_size());
    }
    default:
      return static_cast<int64_t>(command.ByteSizeLong());
  }
}

}  // namespace

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

std::string RandomSessionId() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                      static_cast<uint64_t>(absl::GetCurrentTimeNanos()));
  return absl::StrFormat("%016x%016x", gen(), gen());
}

bool HasServerTrailer(const grpc::ClientContext& context) {
  return context.GetServerTrailingMetadata().count(kServerStatusTrailer) > 0;
}

bool HasReplicaUnreachableVerdict(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto [begin, end] = trailers.equal_range(kProxyVerdictTrailer);
  for (auto it = begin; it != end; ++it) {
    if (absl::string_view(it->second.data(), it->second.size()) ==
        kReplicaUnreachableVerdict) {
      return true;
    }
  }
  return false;
}

// DType is the proto's enum under C++ names (tape_service.proto is the one
// table): the same numbers, and every proto dtype has a name here.
static_assert(static_cast<int>(DType::kFloat32) == v1::DTYPE_FLOAT32 &&
              static_cast<int>(DType::kFloat64) == v1::DTYPE_FLOAT64 &&
              static_cast<int>(DType::kInt32) == v1::DTYPE_INT32 &&
              static_cast<int>(DType::kInt64) == v1::DTYPE_INT64 &&
              static_cast<int>(DType::kBool) == v1::DTYPE_BOOL &&
              static_cast<int>(DType::kComplex64) == v1::DTYPE_COMPLEX64 &&
              static_cast<int>(DType::kComplex128) == v1::DTYPE_COMPLEX128 &&
              static_cast<int>(DType::kResource) == v1::DTYPE_RESOURCE &&
              v1::DType_MAX == v1::DTYPE_RESOURCE);

void ToProto(const HostTensor& t, std::string bytes, v1::TensorValue* out) {
  out->set_dtype(static_cast<v1::DType>(t.dtype));
  for (int64_t d : t.shape) out->add_shape(d);
  out->set_data(std::move(bytes));
}

HostTensor FromProto(v1::TensorValue* value) {
  HostTensor t;
  t.dtype = static_cast<DType>(value->dtype());
  t.shape.assign(value->shape().begin(), value->shape().end());
  t.bytes = std::move(*value->mutable_data());
  return t;
}

void ToProto(const AttrValue& attr, v1::AttrValue* out) {
  struct Visitor {
    v1::AttrValue* out;
    void operator()(bool b) { out->set_b(b); }
    void operator()(int64_t i) { out->set_i(i); }
    void operator()(double f) { out->set_f(f); }
    void operator()(const std::string& s) { out->set_s(s); }
    void operator()(DType t) { out->set_type(static_cast<v1::DType>(t)); }
    void operator()(const std::vector<int64_t>& ints) {
      auto* list = out->mutable_ints();
      for (int64_t i : ints) list->add_values(i);
    }
  };
  std::visit(Visitor{out}, attr.value());
}

v1::UnconnectedGradients ToProto(Unconnected u) {
  return u == Unconnected::kZero ? v1::UNCONNECTED_ZERO : v1::UNCONNECTED_NONE;
}

TensorRef::~TensorRef() { core->Release(id); }

CommandBuffer::CommandBuffer()
    : arena_(BufferArenaOptions()),
      batch_(
          google::protobuf::Arena::CreateMessage<v1::CommandBatch>(&arena_)) {}

void CommandBuffer::Clear() {
  arena_.Reset();
  batch_ = google::protobuf::Arena::CreateMessage<v1::CommandBatch>(&arena_);
}

SessionCore::SessionCore(SessionOptions options)
    : options_(std::move(options)) {}

SessionCore::~SessionCore() {
  // Session's destructor closes; this only matters if Open failed half-way
  // or Close was not called.
  if (supervisor_.joinable()) {
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;
      cv_.SignalAll();
      stream_context_->TryCancel();
    }
    supervisor_.join();
  }
}

absl::Status SessionCore::Open(absl::string_view address) {
  if (options_.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SessionOptions::batch_size must be at least 1, got ",
                     options_.batch_size));
  }
  if (options_.max_unacked_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SessionOptions::max_unacked_bytes must be at least 1, "
                     "got ",
                     options_.max_unacked_bytes));
  }
  if (options_.chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SessionOptions::chunk_bytes must be at least 1, got ",
                     options_.chunk_bytes));
  }
  address_ = std::string(address);
  // Credentials, TLS and keepalive: client/src/channel.cc.
  ASSIGN_OR_RETURN(channel_, MakeChannel(address, options_));
  stub_ = v1::TapeService::NewStub(channel_);
  RETURN_IF_ERROR(CreateSession());
  stream_context_ = std::make_unique<grpc::ClientContext>();
  AddSessionMetadata(stream_context_.get());
  stream_ = stub_->Stream(stream_context_.get());
  supervisor_ = std::thread([this] { Supervise(); });
  return absl::OkStatus();
}

void SessionCore::AddSessionMetadata(grpc::ClientContext* context) const {
  context->AddMetadata(kSessionIdHeader, session_id_);
  context->AddMetadata(kSessionTokenHeader, token_);
  AddKeyMetadata(context);
}

void SessionCore::AddKeyMetadata(grpc::ClientContext* context) const {
  if (options_.api_key.empty()) return;
  context->AddMetadata(v1::kAuthorizationHeader,
                       absl::StrCat("Bearer ", options_.api_key));
}

Tensor SessionCore::MakeTensor(int64_t id) {
  return Tensor(std::make_shared<const TensorRef>(shared_from_this(), id));
}

int64_t SessionCore::IdFor(const Tensor& t, absl::string_view role,
                           std::string* problem) {
  if (t.is_null()) {
    absl::StrAppend(problem, problem->empty() ? "" : "; ", role,
                    " is a null Tensor");
    return 0;
  }
  if (t.ref_->core.get() != this) {
    absl::StrAppend(problem, problem->empty() ? "" : "; ", role, " (id ",
                    t.ref_->id, ") belongs to another session");
    return 0;
  }
  return t.ref_->id;
}

int64_t SessionCore::IdFor(const Tensor& t, absl::string_view role,
                           size_t index, std::string* problem) {
  if (!t.is_null() && t.ref_->core.get() == this) return t.ref_->id;
  return IdFor(t, absl::StrCat(role, " ", index), problem);
}

int64_t SessionCore::Enqueue(const v1::Command& command, absl::string_view what,
                             absl::string_view local_error) {
  return Enqueue([&](v1::Command& c) { c = command; }, what, local_error);
}

int64_t SessionCore::Enqueue(CommandFill fill, absl::string_view what,
                             absl::string_view local_error) {
  int64_t seq;
  bool full;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return 0;
    seq = AppendLocked(fill, &full);
    if (!local_error.empty()) {
      errors_.push_back(
          {seq, absl::InvalidArgumentError(absl::StrCat(what, " (command ", seq,
                                                        "): ", local_error))});
      local_failures_.insert(seq);
    }
  }
  if (full) Flush();
  return seq;
}

int64_t SessionCore::AppendLocked(CommandFill fill, bool* full) {
  v1::Command& command = *pending_->batch().add_commands();
  fill(command);
  if (recording_ != nullptr) recording_->commands.push_back(command);
  // Handles dropped are released in one ReleaseTensors before the command
  // once kReleaseBatch of them wait, and before any command that is not an
  // op (a fetch, a gradient, stats, ... see the releases at once): the
  // server frees their tensors within a few ops instead of holding them
  // until the batch ends, and a chain of ops does not cost two commands per
  // op (an op, then the release of its input). A release after commands
  // that name its id is always safe: a dropped handle is never named again.
  if (!pending_releases_.empty() &&
      (pending_releases_.size() >= kReleaseBatch || !command.has_execute())) {
    AppendReleasesLocked();
    auto* commands = pending_->batch().mutable_commands();
    commands->SwapElements(commands->size() - 1, commands->size() - 2);
    // `command` still refers to the same message, now second to last; the
    // release took the next seq, the command takes the one after it.
  }
  const int64_t seq = ++next_seq_;
  command.set_seq(seq);
  pending_bytes_ += ApproxBytes(command);
  *full = pending_->batch().commands_size() >= options_.batch_size ||
          pending_bytes_ >= options_.max_batch_bytes;
  return seq;
}

std::vector<Tensor> SessionCore::Execute(absl::string_view op,
                                         absl::Span<const Tensor> inputs,
                                         const Attrs& attrs, int num_outputs) {
  std::string problem;
  absl::InlinedVector<int64_t, 4> input_ids(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    input_ids[i] = IdFor(inputs[i], "input", i, &problem);
  }
  std::vector<Tensor> outputs;
  outputs.reserve(std::max(num_outputs, 0));
  for (int i = 0; i < num_outputs; ++i) {
    outputs.push_back(MakeTensor(NewTensorId()));
  }
  Enqueue(
      [&](v1::Command& command) {
        v1::ExecuteOp* execute = command.mutable_execute();
        execute->set_op(op.data(), op.size());
        execute->mutable_input_ids()->Add(input_ids.begin(), input_ids.end());
        execute->mutable_output_ids()->Reserve(
            static_cast<int>(outputs.size()));
        for (const Tensor& t : outputs) execute->add_output_ids(t.ref_->id);
        auto* attr_map = execute->mutable_attrs();
        for (const auto& [name, value] : attrs) {
          ToProto(value, &(*attr_map)[name]);
        }
      },
      op, problem);
  return outputs;
}

void SessionCore::Release(int64_t id) {
  absl::MutexLock lock(&mu_);
  if (closed_) return;
  if (recording_ != nullptr) {
    recording_->held_releases.push_back(id);
    return;
  }
  pending_releases_.push_back(id);
}

void SessionCore::BeginRecording(Recording* recording) {
  absl::MutexLock lock(&mu_);
  recording_ = recording;
}

void SessionCore::EndRecording() {
  absl::MutexLock lock(&mu_);
  recording_ = nullptr;
}

void SessionCore::AppendReleasesLocked() {
  if (closed_ || pending_releases_.empty()) return;
  v1::Command* release = pending_->batch().add_commands();
  release->set_seq(++next_seq_);
  release->mutable_release()->mutable_ids()->Add(pending_releases_.begin(),
                                                 pending_releases_.end());
  pending_bytes_ += 8 * static_cast<int64_t>(pending_releases_.size());
  pending_releases_.clear();
}

void SessionCore::Flush() { FlushUnlessReconnecting(/*reply_wanted=*/false); }

int64_t SessionCore::FlushUnlessReconnecting(bool reply_wanted)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (!write_mu_.TryLock()) {
    {
      absl::MutexLock lock(&mu_);
      // The supervisor holds write_mu_ while it reconnects: the batch joins
      // the unacknowledged ones it resends (in order: it takes them only
      // once the new stream is open).
      if (broken_) {
        (void)TakeBatchLocked(reply_wanted);
        return last_batch_id_;
      }
    }
    write_mu_.Lock();
  }
  FlushLocked(reply_wanted);
  int64_t batch_id;
  {
    absl::MutexLock lock(&mu_);
    batch_id = last_batch_id_;
  }
  write_mu_.Unlock();
  return batch_id;
}

void SessionCore::ClearPendingLocked() {
  pending_->Clear();
  pending_bytes_ = 0;
  pending_releases_.clear();
}

std::shared_ptr<CommandBuffer> SessionCore::NewBufferLocked() {
  if (spare_buffers_.empty()) return std::make_shared<CommandBuffer>();
  std::shared_ptr<CommandBuffer> buffer = std::move(spare_buffers_.back());
  spare_buffers_.pop_back();
  return buffer;
}

void SessionCore::FlushLocked(bool reply_wanted) {
  std::shared_ptr<CommandBuffer> sending;
  {
    absl::MutexLock lock(&mu_);
    sending = TakeBatchLocked(reply_wanted);
  }
  // A failed write needs nothing here: the reader sees the stream end.
  if (sending != nullptr) (void)stream_->Write(sending->batch());
}

std::shared_ptr<CommandBuffer> SessionCore::TakeBatchLocked(bool reply_wanted) {
  std::shared_ptr<CommandBuffer> sending;
  if (closed_ || !lost_.ok()) {
    // Nobody will answer: every wait reports the loss instead.
    ClearPendingLocked();
    return nullptr;
  }
  AppendReleasesLocked();
  if (pending_->batch().commands_size() == 0) {
    // Nothing new, but a wait needs a reply to the last batch: if that
    // one went out reply_optional and may stay unanswered, an empty batch
    // asks for the reply that acknowledges it.
    if (!reply_wanted || !last_reply_optional_ ||
        last_answered_id_ >= last_batch_id_) {
      return nullptr;
    }
  }
  // Back-pressure on what a resend would need: replies come (every
  // quarter of the limit asked for one) or the stream breaks (the batch
  // is then kept for the resend).
  while (unacked_bytes_ > options_.max_unacked_bytes && !broken_ &&
         lost_.ok()) {
    cv_.Wait(&mu_);
  }
  if (!lost_.ok()) {
    ClearPendingLocked();
    return nullptr;
  }
  sending = std::exchange(pending_, NewBufferLocked());
  const int64_t bytes = std::exchange(pending_bytes_, 0);
  v1::CommandBatch& batch = sending->batch();
  if (batch.commands_size() > 0) {
    last_sent_seq_ = batch.commands(batch.commands_size() - 1).seq();
  }
  if (bytes_since_reply_wanted_ + bytes >= options_.max_unacked_bytes / 4) {
    reply_wanted = true;
  }
  bytes_since_reply_wanted_ =
      reply_wanted ? 0 : bytes_since_reply_wanted_ + bytes;
  batch.set_batch_id(++last_batch_id_);
  batch.set_reply_optional(!reply_wanted);
  batch.set_ack_seq(acked_seq_);
  last_reply_optional_ = !reply_wanted;
  unacked_.push_back({last_batch_id_, last_sent_seq_, bytes, sending});
  unacked_bytes_ += bytes;
  counters_.commands_sent += batch.commands_size();
  ++counters_.batches_sent;
  // A broken stream: the supervisor resends the batch on the next one.
  if (broken_) return nullptr;
  return sending;
}

int64_t SessionCore::FlushForWait() {
  return FlushUnlessReconnecting(/*reply_wanted=*/true);
}

absl::Status SessionCore::WaitAndTakeErrors(int64_t batch_id,
                                            absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (closed_) {
    return absl::FailedPreconditionError(
        absl::StrCat("gradtape session ", session_id_, " is closed"));
  }
  while (last_answered_id_ < batch_id && lost_.ok()) {
    if (cv_.WaitWithDeadline(&mu_, deadline)) break;
  }
  // A lost session fails every wait point with the same error.
  if (!lost_.ok()) return lost_;
  if (last_answered_id_ < batch_id) {
    return absl::DeadlineExceededError(absl::StrCat(
        "gradtape session ", session_id_, ": no reply to batch ", batch_id,
        " in time (last answered: ", last_answered_id_, ")"));
  }
  return TakeErrorsLocked();
}

absl::Status SessionCore::TakeErrorsLocked() {
  if (errors_.empty()) return absl::OkStatus();
  auto first =
      std::min_element(errors_.begin(), errors_.end(),
                       [](const CommandError& a, const CommandError& b) {
                         return a.seq < b.seq;
                       });
  absl::Status status = first->status;
  if (errors_.size() > 1) {
    status = absl::Status(
        status.code(),
        absl::StrCat(status.message(), " [and ", errors_.size() - 1,
                     " later command error(s) in this session]"));
    first->status.ForEachPayload(
        [&](absl::string_view key, const absl::Cord& value) {
          status.SetPayload(key, value);
        });
  }
  errors_.clear();
  return status;
}

absl::Status SessionCore::Sync() { return WaitAndTakeErrors(FlushForWait()); }

absl::StatusOr<v1::CommandResult> SessionCore::Call(v1::Command command) {
  {
    // Releases buffered so far go first, so that what the command observes
    // (Stats) reflects them.
    absl::MutexLock lock(&mu_);
    AppendReleasesLocked();
  }
  ASSIGN_OR_RETURN(Sent sent, SendForResult(std::move(command)));
  return AwaitResult(std::move(sent));
}

absl::Status SessionCore::KeepAlive() {
  {
    // A lost session answers every call with its one error.
    absl::MutexLock lock(&mu_);
    if (!lost_.ok()) return lost_;
  }
  grpc::ClientContext context;
  AddSessionMetadata(&context);
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  v1::KeepAliveResponse response;
  return FromGrpc(stub_->KeepAlive(&context, v1::KeepAliveRequest(), &response),
                  "KeepAlive");
}

absl::Status SessionCore::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::OkStatus();
  }
  // FlushForWait does not wait for a reconnect in progress.
  absl::Status status =
      WaitAndTakeErrors(FlushForWait(), absl::Now() + options_.rpc_timeout);
  {
    // A reconnect in progress gives up now (its sleep wakes): whatever it
    // would resend was waited for above.
    absl::MutexLock lock(&mu_);
    closing_ = true;
    cv_.SignalAll();
  }
  bool lost;
  {
    absl::MutexLock write_lock(&write_mu_);
    bool writes_done;
    {
      absl::MutexLock lock(&mu_);
      closed_ = true;
      closing_ = true;
      ClearPendingLocked();
      lost = !lost_.ok();
      writes_done = !supervisor_done_ && !broken_;
      cv_.SignalAll();
    }
    // The server ends the stream cleanly after WritesDone.
    if (writes_done) stream_->WritesDone();
  }
  {
    absl::MutexLock lock(&mu_);
    const absl::Time deadline = absl::Now() + kStreamDrainTimeout;
    while (!supervisor_done_) {
      if (cv_.WaitWithDeadline(&mu_, deadline)) break;
    }
    if (!supervisor_done_) stream_context_->TryCancel();
  }
  if (supervisor_.joinable()) supervisor_.join();
  // A lost session has nothing left to close on the server.
  if (lost) return status;
  absl::Status closed = CloseOnServer();
  return status.ok() ? closed : status;
}

ClientCounters SessionCore::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

int64_t SessionCore::last_seq() const {
  absl::MutexLock lock(&mu_);
  return next_seq_;
}

}  // namespace internal

std::optional<int64_t> LastAppliedSeq(const absl::Status& status) {
  auto payload = status.GetPayload(kLastAppliedSeqPayload);
  int64_t seq;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &seq)) {
    return std::nullopt;
  }
  return seq;
}

// ---------------------------------------------------------------------------

int64_t Tensor::id() const { return ref_ ? ref_->id : 0; }

internal::SessionCore* SessionOf(const Tensor& t) {
  return internal::SessionCore::Of(t);
}

absl::StatusOr<std::unique_ptr<Session>> Session::Connect(
    absl::string_view address, const SessionOptions& options) {
  auto core = std::make_shared<internal::SessionCore>(options);
  RETURN_IF_ERROR(core->Open(address));
  return std::unique_ptr<Session>(new Session(std::move(core)));
}

Session::Session(std::shared_ptr<internal::SessionCore> core)
    : core_(std::move(core)) {}

Session::~Session() { (void)core_->Close(); }

const std::string& Session::id() const { return core_->id(); }
int64_t Session::keep_alive_seconds() const {
  return core_->keep_alive_seconds();
}

Tensor Session::Put(const HostTensor& value) {
  const int64_t id = core_->NewTensorId();
  Tensor handle = core_->MakeTensor(id);
  if (static_cast<int64_t>(value.bytes.size()) > core_->chunk_bytes()) {
    core_->PutInChunks(id, value);
    return handle;
  }
  // The one copy of the bytes is made here, outside the session lock.
  std::string bytes = value.bytes;
  core_->Enqueue([&](v1::Command& command) {
    v1::PutTensor* put = command.mutable_put();
    put->set_id(id);
    internal::ToProto(value, std::move(bytes), put->mutable_value());
  });
  return handle;
}

Tensor Session::Scalar(double value, DType dtype) {
  return Put(HostTensor::Filled(dtype, {}, value));
}

std::vector<Tensor> Session::Execute(absl::string_view op,
                                     absl::Span<const Tensor> inputs,
                                     const Attrs& attrs, int num_outputs) {
  return core_->Execute(op, inputs, attrs, num_outputs);
}

absl::StatusOr<HostTensor> Session::Fetch(const Tensor& tensor) {
  std::string problem;
  const int64_t id = core_->IdFor(tensor, "the tensor", &problem);
  if (!problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("Fetch: ", problem));
  }
  return core_->FetchInChunks(id);
}

void Session::StopRecording() {
  v1::Command command;
  command.mutable_stop_recording();
  core_->Enqueue(command);
}

void Session::StartRecording() {
  v1::Command command;
  command.mutable_start_recording();
  core_->Enqueue(command);
}

absl::Status Session::Sync() { return core_->Sync(); }

absl::StatusOr<SessionStats> Session::Stats() {
  v1::Command command;
  command.mutable_stats();
  ASSIGN_OR_RETURN(v1::CommandResult result, core_->Call(std::move(command)));
  if (!result.has_stats()) {
    return absl::InternalError(
        absl::StrCat("Stats: the server's result for command ", result.seq(),
                     " holds no statistics"));
  }
  const v1::SessionStats& s = result.stats();
  SessionStats stats;
  stats.live_tensors = s.live_tensors();
  stats.poisoned_ids = s.poisoned_ids();
  stats.bytes_in_use = s.bytes_in_use();
  stats.tapes = s.tapes();
  stats.tape_entries = s.tape_entries();
  stats.tape_saved_bytes = s.tape_saved_bytes();
  stats.commands_applied = s.commands_applied();
  stats.duplicate_commands = s.duplicate_commands();
  return stats;
}

void Session::Flush() { core_->Flush(); }
absl::Status Session::KeepAlive() { return core_->KeepAlive(); }
ClientCounters Session::counters() const { return core_->counters(); }
int64_t Session::last_seq() const { return core_->last_seq(); }
absl::Status Session::Close() { return core_->Close(); }

// ---------------------------------------------------------------------------

RecordingPause::RecordingPause(Session& session) : core_(session.core()) {
  v1::Command command;
  command.mutable_stop_recording();
  core_->Enqueue(command);
}

RecordingPause::~RecordingPause() {
  v1::Command command;
  command.mutable_start_recording();
  core_->Enqueue(command);
}

// ---------------------------------------------------------------------------

GradientTape::GradientTape(Session& session, TapeOptions options)
    : core_(session.core()), options_(options), id_(core_->NewTapeId()) {
  core_->Enqueue([&](v1::Command& command) {
    v1::PushTape* push = command.mutable_push_tape();
    push->set_tape_id(id_);
    push->set_persistent(options_.persistent);
    push->set_watch_accessed_variables(options_.watch_accessed_variables);
  });
  recording_ = true;
}

GradientTape::~GradientTape() {
  Stop();
  core_->Enqueue([&](v1::Command& command) {
    command.mutable_delete_tape()->set_tape_id(id_);
  });
}

void GradientTape::Watch(const Tensor& t) {
  Watch(absl::Span<const Tensor>(&t, 1));
}

void GradientTape::Watch(absl::Span<const Tensor> ts) {
  std::string problem;
  absl::InlinedVector<int64_t, 8> ids(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    // A bad handle goes out as id 0: the server fails the whole Watch.
    ids[i] = core_->IdFor(ts[i], "tensor", i, &problem);
  }
  core_->Enqueue(
      [&](v1::Command& command) {
        v1::Watch* watch = command.mutable_watch();
        watch->set_tape_id(id_);
        watch->mutable_ids()->Add(ids.begin(), ids.end());
      },
      "Watch", problem);
}

void GradientTape::Stop() {
  if (!recording_) return;
  recording_ = false;
  core_->Enqueue([&](v1::Command& command) {
    command.mutable_pop_tape()->set_tape_id(id_);
  });
}

namespace {

// Fills `gradient`, with a new result id per source, and returns the
// handles of those results; or returns a local misuse error.
absl::StatusOr<std::vector<Tensor>> BuildGradient(
    internal::SessionCore& core, int64_t tape_id,
    absl::Span<const Tensor> targets, absl::Span<const Tensor> sources,
    const GradientOptions& options, v1::Gradient* gradient) {
  if (targets.empty() || sources.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gradient on tape ", tape_id,
                     ": needs at least one target and one "
                     "source, got ",
                     targets.size(), " and ", sources.size()));
  }
  if (!options.output_gradients.empty() &&
      options.output_gradients.size() != targets.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Gradient on tape ", tape_id,
        ": output_gradients must be empty or "
        "have one entry per target (",
        targets.size(), "), got ", options.output_gradients.size()));
  }
  gradient->set_tape_id(tape_id);
  std::string problem;
  for (size_t i = 0; i < targets.size(); ++i) {
    gradient->add_target_ids(
        core.IdFor(targets[i], absl::StrCat("target ", i), &problem));
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    gradient->add_source_ids(
        core.IdFor(sources[i], absl::StrCat("source ", i), &problem));
  }
  for (size_t i = 0; i < options.output_gradients.size(); ++i) {
    const Tensor& g = options.output_gradients[i];
    // A null entry means "ones" (id 0 on the wire).
    gradient->add_output_gradient_ids(
        g.is_null()
            ? 0
            : core.IdFor(g, absl::StrCat("output gradient ", i), &problem));
  }
  if (!problem.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gradient on tape ", tape_id, ": ", problem));
  }
  gradient->set_unconnected(internal::ToProto(options.unconnected));
  std::vector<Tensor> results;
  results.reserve(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    const int64_t id = core.NewTensorId();
    gradient->add_result_ids(id);
    results.push_back(core.MakeTensor(id));
  }
  return results;
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> GradientTape::Gradient(
    absl::Span<const Tensor> targets, absl::Span<const Tensor> sources,
    const GradientOptions& options) {
  v1::Command command;
  absl::StatusOr<std::vector<Tensor>> results = BuildGradient(
      *core_, id_, targets, sources, options, command.mutable_gradient());
  if (results.ok()) core_->Enqueue(command);
  return results;
}

absl::StatusOr<std::vector<std::optional<HostTensor>>>
GradientTape::GradientValues(absl::Span<const Tensor> targets,
                             absl::Span<const Tensor> sources,
                             const GradientOptions& options) {
  v1::Command command;
  v1::Gradient* gradient = command.mutable_gradient();
  // The results still get ids (released when `handles` goes, after this
  // call).
  ASSIGN_OR_RETURN(
      std::vector<Tensor> handles,
      BuildGradient(*core_, id_, targets, sources, options, gradient));
  gradient->set_return_values(true);
  ASSIGN_OR_RETURN(v1::CommandResult result, core_->Call(std::move(command)));
  v1::GradientValues* values = result.mutable_gradient();
  if (!result.has_gradient() ||
      values->values_size() != static_cast<int>(sources.size())) {
    return absl::InternalError(absl::StrCat(
        "GradientValues on tape ", id_, ": the server's result for command ",
        result.seq(), " does not hold one value per source"));
  }
  std::vector<std::optional<HostTensor>> out(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    const bool is_none =
        static_cast<int>(i) < values->is_none_size() && values->is_none(i);
    if (!is_none) out[i] = internal::FromProto(values->mutable_values(i));
  }
  return out;
}

}  // namespace gradtape::client
