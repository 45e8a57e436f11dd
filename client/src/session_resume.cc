// The resume machinery of SessionCore (client/src/resume.h): CreateSession
// with retries, the supervisor and reader threads, reconnecting, resending.
#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/src/resume.h"
#include "client/src/session_core.h"

namespace gradtape::client::internal {

// The public payload name (session.h cannot include the proto target's
// headers) is the server's trailer name.
static_assert(absl::string_view(kLastAppliedSeqPayload) ==
              v1::kLastAppliedSeqTrailer);

absl::Status SessionCore::CreateSession() {
  const absl::Time start = absl::Now();
  ReconnectBackoff backoff(options_.initial_backoff, options_.max_backoff,
                           std::random_device()());
  for (int attempt = 1;; ++attempt) {
    session_id_ =
        options_.session_id.empty() ? RandomSessionId() : options_.session_id;
    v1::CreateSessionRequest request;
    request.set_session_id(session_id_);
    request.set_keep_alive_seconds(options_.keep_alive_seconds);
    v1::CreateSessionResponse response;
    grpc::ClientContext context;
    context.AddMetadata(kSessionIdHeader, session_id_);
    AddKeyMetadata(&context);
    context.set_wait_for_ready(true);
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
    grpc::Status s = stub_->CreateSession(&context, request, &response);
    if (s.ok()) {
      session_id_ = response.session_id();
      token_ = response.token();
      keep_alive_seconds_ = response.keep_alive_seconds();
      return absl::OkStatus();
    }
    // A transport failure (e.g. a proxy that cannot reach the replica this
    // id hashes to) is retried with a new id, within reconnect_timeout.
    // The caller's own id is tried once (it would reach the same replica).
    const absl::Duration delay = backoff.Next();
    if (!IsTransportFailure(static_cast<absl::StatusCode>(s.error_code()),
                            HasServerTrailer(context)) ||
        !options_.session_id.empty() ||
        absl::Now() + delay - start > options_.reconnect_timeout) {
      return FromGrpc(
          s, absl::StrCat(
                 "CreateSession at ", address_,
                 attempt > 1 ? absl::StrCat(" (attempt ", attempt, ")") : ""));
    }
    absl::SleepFor(delay);
  }
}

void SessionCore::Supervise() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // True while this thread holds write_mu_ from a reconnect: the resend
  // goes out before any new batch.
  bool resend = false;
  for (;;) {
    auto* stream = stream_.get();
    std::thread reader([this, stream] { ReadReplies(stream); });
    if (resend) {
      ResendLocked();
      write_mu_.Unlock();
    }
    reader.join();
    write_mu_.Lock();
    if (!RecoverLocked()) break;
    resend = true;
  }
  write_mu_.Unlock();
  absl::MutexLock lock(&mu_);
  supervisor_done_ = true;
  cv_.SignalAll();
}

void SessionCore::ReadReplies(
    grpc::ClientReaderWriter<v1::CommandBatch, v1::BatchReply>* stream) {
  v1::BatchReply reply;
  while (stream->Read(&reply)) {
    absl::MutexLock lock(&mu_);
    HandleReplyLocked(reply);
  }
  absl::MutexLock lock(&mu_);
  broken_ = true;
  cv_.SignalAll();
}

void SessionCore::HandleReplyLocked(v1::BatchReply& reply) {
  for (v1::CommandResult& result : *reply.mutable_results()) {
    if (result.duplicate()) {
      ++counters_.duplicate_results;
      // A mark (no kind): applied before, its result delivered or not
      // kept. Nothing to store; a read waiting on it is read again.
      if (result.kind_case() == v1::CommandResult::KIND_NOT_SET) {
        if (IsRereadableLocked(result.seq())) stale_reads_.insert(result.seq());
        continue;
      }
      // A read whose kept result is gone (ABORTED) or no longer fits the
      // reply of the resent batch (RESOURCE_EXHAUSTED) is read again.
      const auto code = static_cast<absl::StatusCode>(result.error().code());
      if (result.has_error() &&
          (code == absl::StatusCode::kAborted ||
           code == absl::StatusCode::kResourceExhausted) &&
          IsRereadableLocked(result.seq())) {
        stale_reads_.insert(result.seq());
        continue;
      }
    }
    if (result.has_error()) {
      if (local_failures_.erase(result.seq()) > 0) continue;
      absl::Status error(static_cast<absl::StatusCode>(result.error().code()),
                         result.error().message());
      error.SetPayload(kCommandSeqPayload,
                       absl::Cord(absl::StrCat(result.seq())));
      error.SetPayload(kCommandOpPayload,
                       absl::Cord(CommandLabelLocked(result.seq())));
      errors_.push_back({result.seq(), std::move(error)});
    } else {
      const int64_t seq = result.seq();
      results_[seq] = std::move(result);
    }
  }
  // The reply acknowledges its batch and every earlier one.
  while (!unacked_.empty() && unacked_.front().batch_id <= reply.batch_id()) {
    SentBatch& sent = unacked_.front();
    acked_seq_ = std::max(acked_seq_, sent.last_seq);
    unacked_bytes_ -= sent.bytes;
    if (sent.buffer.use_count() == 1 && spare_buffers_.size() < 2) {
      sent.buffer->Clear();
      spare_buffers_.push_back(std::move(sent.buffer));
    }
    unacked_.pop_front();
  }
  last_answered_id_ = std::max(last_answered_id_, reply.batch_id());
  ++counters_.batches_answered;
  cv_.SignalAll();
}

bool SessionCore::IsRereadableLocked(int64_t seq) const {
  for (const SentBatch& sent : unacked_) {
    if (sent.last_seq < seq) continue;
    for (const v1::Command& command : sent.buffer->batch().commands()) {
      if (command.seq() != seq) continue;
      return command.has_fetch() || command.has_stats();
    }
    return false;
  }
  return false;
}

bool SessionCore::RecoverLocked() {
  const grpc::Status s = stream_->Finish();
  const bool server_trailer = HasServerTrailer(*stream_context_);
  absl::Status cause =
      s.ok() ? absl::UnavailableError("the server ended the command stream")
             : FromGrpc(s, "gradtape command stream");
  // A stream stopped by its deadline or cancellation names where the
  // session stands.
  const auto& trailers = stream_context_->GetServerTrailingMetadata();
  absl::optional<absl::Cord> last_applied;
  if (auto it = trailers.find(v1::kLastAppliedSeqTrailer);
      !s.ok() && it != trailers.end()) {
    last_applied =
        absl::Cord(absl::string_view(it->second.data(), it->second.size()));
  }
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return false;
    if (s.ok() || !IsTransportFailure(cause.code(), server_trailer)) {
      absl::Status final_status =
          FinalStreamError(session_id_, address_, cause);
      // A clean end is no drain (that one carries the server's trailer).
      if (s.ok() ||
          (cause.code() == absl::StatusCode::kUnavailable && !server_trailer)) {
        final_status.SetPayload(kLostReasonPayload, absl::Cord("ended"));
      }
      if (last_applied.has_value()) {
        final_status.SetPayload(kLastAppliedSeqPayload, *last_applied);
      }
      SetLostLocked(std::move(final_status));
      return false;
    }
    ++counters_.transport_failures;
    if (options_.reconnect_timeout <= absl::ZeroDuration()) {
      SetLostLocked(ConnectionLostError(session_id_, address_, cause));
      return false;
    }
  }
  return ReconnectLocked(cause);
}

bool SessionCore::ReconnectLocked(const absl::Status& cause) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options_.reconnect_timeout;
  ReconnectBackoff backoff(options_.initial_backoff, options_.max_backoff,
                           std::random_device()());
  // The proxy's replica-unreachable verdicts (resume.h): the probe at the
  // grace's end comes on time, not a whole backoff later.
  ReplicaVerdicts verdicts;
  absl::Status last_error = cause;
  for (int64_t attempts = 0;; ++attempts) {
    if (attempts > 0 && !SleepUnlessClosing(std::min(
                            {absl::Now() + backoff.Next(), deadline,
                             std::max(verdicts.ProbeBy(),
                                      absl::Now() + absl::Milliseconds(1))}))) {
      return false;
    }
    if (absl::Now() >= deadline) {
      absl::MutexLock lock(&mu_);
      SetLostLocked(UnreachableError(session_id_, address_, absl::Now() - start,
                                     attempts, last_error));
      return false;
    }
    {
      absl::MutexLock lock(&mu_);
      ++counters_.reconnect_attempts;
    }
    bool server_trailer = false;
    bool replica_unreachable = false;
    absl::Status probe = ProbeSession(
        std::min(deadline, absl::Now() + options_.rpc_timeout), &server_trailer,
        &replica_unreachable, &probe_applied_seq_);
    if (probe.ok()) {
      OpenStreamLocked();
      return true;
    }
    if (!IsTransportFailure(probe.code(), server_trailer,
                            /*own_deadline=*/true)) {
      absl::MutexLock lock(&mu_);
      SetLostLocked(FinalStreamError(session_id_, address_, probe));
      return false;
    }
    last_error = std::move(probe);
    if (verdicts.Record(replica_unreachable, absl::Now())) {
      absl::MutexLock lock(&mu_);
      SetLostLocked(UnreachableError(session_id_, address_, absl::Now() - start,
                                     attempts + 1, last_error));
      return false;
    }
  }
}

absl::Status SessionCore::ProbeSession(absl::Time deadline,
                                       bool* server_trailer,
                                       bool* replica_unreachable,
                                       int64_t* last_applied_seq) {
  grpc::ClientContext context;
  AddSessionMetadata(&context);
  context.set_deadline(absl::ToChronoTime(deadline));
  v1::KeepAliveResponse response;
  grpc::Status s =
      stub_->KeepAlive(&context, v1::KeepAliveRequest(), &response);
  *server_trailer = !s.ok() && HasServerTrailer(context);
  *replica_unreachable = !s.ok() && HasReplicaUnreachableVerdict(context);
  if (s.ok()) *last_applied_seq = response.last_applied_seq();
  return FromGrpc(s, "KeepAlive");
}

void SessionCore::OpenStreamLocked() {
  auto context = std::make_unique<grpc::ClientContext>();
  AddSessionMetadata(context.get());
  auto stream = stub_->Stream(context.get());
  absl::MutexLock lock(&mu_);
  // The old stream is finished and its reader joined.
  std::swap(stream_context_, context);
  std::swap(stream_, stream);
  broken_ = false;
  ++counters_.resumes;
  cv_.SignalAll();
}

void SessionCore::ResendLocked() {
  // The batches stay alive while written even if a reply on the new stream
  // acknowledges them meanwhile.
  std::vector<std::shared_ptr<CommandBuffer>> batches;
  {
    absl::MutexLock lock(&mu_);
    for (const SentBatch& sent : unacked_) {
      batches.push_back(sent.buffer);
      counters_.commands_resent += sent.buffer->batch().commands_size();
      for (const v1::Command& command : sent.buffer->batch().commands()) {
        if (command.seq() <= probe_applied_seq_) {
          ++counters_.resent_already_applied;
        }
      }
    }
    counters_.batches_resent += static_cast<int64_t>(batches.size());
  }
  for (const auto& batch : batches) {
    // A failed write: the reader sees this stream end too.
    if (!stream_->Write(batch->batch())) return;
  }
}

void SessionCore::SetLostLocked(absl::Status status) {
  if (lost_.ok()) lost_ = std::move(status);
  cv_.SignalAll();
}

bool SessionCore::SleepUnlessClosing(absl::Time until) {
  absl::MutexLock lock(&mu_);
  while (!closing_) {
    if (cv_.WaitWithDeadline(&mu_, until)) break;
  }
  return !closing_;
}

absl::Status SessionCore::CloseOnServer() {
  // Retried in transport (unless resuming is off) within rpc_timeout.
  const absl::Time deadline =
      absl::Now() + (options_.reconnect_timeout > absl::ZeroDuration()
                         ? options_.rpc_timeout
                         : absl::ZeroDuration());
  ReconnectBackoff backoff(options_.initial_backoff, options_.max_backoff,
                           std::random_device()());
  for (;;) {
    grpc::ClientContext context;
    AddSessionMetadata(&context);
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
    v1::CloseSessionResponse response;
    grpc::Status s =
        stub_->CloseSession(&context, v1::CloseSessionRequest(), &response);
    const absl::Duration delay = backoff.Next();
    if (s.ok() ||
        !IsTransportFailure(static_cast<absl::StatusCode>(s.error_code()),
                            HasServerTrailer(context)) ||
        absl::Now() + delay > deadline) {
      return FromGrpc(s, "CloseSession");
    }
    absl::SleepFor(delay);
  }
}

}  // namespace gradtape::client::internal
