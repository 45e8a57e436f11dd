// SessionCore's entry points for language bindings (the Python extension,
// client/python/native): enqueue without flushing, a bounded sync, ListOps,
// and what a binding reports (closed, lost, command labels).
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/src/session_core.h"
#include "google/protobuf/descriptor.h"

namespace gradtape::client::internal {

SessionCore::Enqueued SessionCore::EnqueueNoFlush(CommandFill fill) {
  absl::MutexLock lock(&mu_);
  Enqueued out;
  if (closed_) return out;
  if (!lost_.ok()) {
    out.lost = true;
    return out;
  }
  out.seq = AppendLocked(fill, &out.flush_due);
  return out;
}

absl::Status SessionCore::SyncUntil(absl::Time deadline) {
  return WaitAndTakeErrors(FlushForWait(), deadline);
}

absl::StatusOr<v1::ListOpsResponse> SessionCore::ListOps() {
  {
    absl::MutexLock lock(&mu_);
    if (!lost_.ok()) return lost_;
  }
  grpc::ClientContext context;
  AddSessionMetadata(&context);
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  v1::ListOpsResponse response;
  grpc::Status s = stub_->ListOps(&context, v1::ListOpsRequest(), &response);
  if (!s.ok()) {
    return FromGrpc(s, absl::StrCat("ListOps (session ", session_id_, ")"));
  }
  return response;
}

bool SessionCore::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

absl::Status SessionCore::lost() const {
  absl::MutexLock lock(&mu_);
  return lost_;
}

std::string SessionCore::CommandLabelLocked(int64_t seq) const {
  for (const SentBatch& sent : unacked_) {
    if (sent.last_seq < seq) continue;
    for (const v1::Command& command : sent.buffer->batch().commands()) {
      if (command.seq() != seq) continue;
      if (command.has_execute()) return command.execute().op();
      const google::protobuf::FieldDescriptor* field =
          v1::Command::descriptor()->FindFieldByNumber(command.kind_case());
      if (field == nullptr || field->message_type() == nullptr) return "";
      return field->message_type()->name();
    }
    return "";
  }
  return "";
}

}  // namespace gradtape::client::internal
