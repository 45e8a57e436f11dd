#include "server/rpc_observer.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gradtape/v1/metadata.h"
#include "gradtape/v1/tape_service.pb.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"

namespace gradtape::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

// A session id is 32 hex digits; a longer header value is cut in the log.
constexpr size_t kMaxLoggedSessionId = 64;

// Encoded bytes of a received message of `method` (raw for Stream and Run,
// the generated request type otherwise; 0 for other services, whose types
// this server does not know).
int64_t ReceivedBytes(RpcMethod method, const void* message) {
  switch (method) {
    case RpcMethod::kStream:
    case RpcMethod::kRun:
      return static_cast<int64_t>(
          static_cast<const grpc::ByteBuffer*>(message)->Length());
    case RpcMethod::kCreateSession:
      return static_cast<const v1::CreateSessionRequest*>(message)
          ->ByteSizeLong();
    case RpcMethod::kCloseSession:
      return static_cast<const v1::CloseSessionRequest*>(message)
          ->ByteSizeLong();
    case RpcMethod::kKeepAlive:
      return static_cast<const v1::KeepAliveRequest*>(message)->ByteSizeLong();
    case RpcMethod::kListOps:
      return static_cast<const v1::ListOpsRequest*>(message)->ByteSizeLong();
    case RpcMethod::kOther:
      break;
  }
  return 0;
}

}  // namespace

// One per call; gRPC deletes it when the call ends.
class RpcObserver::Interceptor final : public grpc::experimental::Interceptor {
 public:
  Interceptor(RpcObserver* observer, grpc::experimental::ServerRpcInfo* info)
      : observer_(observer),
        context_(info->server_context()),
        method_(RpcMethodFromPath(info->method())),
        start_(absl::Now()) {
    if (observer_->access_log_ != nullptr) observer_->Track(context_);
  }

  ~Interceptor() override {
    // A call that ended without sending a status (cancelled). Its context
    // may be gone: the line has no peer.
    if (!reported_) {
      Report(static_cast<int>(grpc::StatusCode::CANCELLED), /*ended=*/true);
    }
  }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      ReadSessionId(*methods->GetRecvInitialMetadata());
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE)) {
      const void* message = methods->GetRecvMessage();
      if (message != nullptr && observer_->metrics_ != nullptr) {
        observer_->metrics_->AddReceivedBytes(method_,
                                              ReceivedBytes(method_, message));
      }
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      if (method_ == RpcMethod::kCreateSession) {
        // The created session's id (the response also holds its token,
        // which is never read here).
        const void* message = methods->GetSendMessage();
        if (message != nullptr) {
          session_ = static_cast<const v1::CreateSessionResponse*>(message)
                         ->session_id();
        }
      }
      if (observer_->metrics_ != nullptr) {
        const grpc::ByteBuffer* bytes = methods->GetSerializedSendMessage();
        if (bytes != nullptr) {
          observer_->metrics_->AddSentBytes(
              method_, static_cast<int64_t>(bytes->Length()));
        }
      }
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      if (!status.ok()) {
        // The one place that marks the server's own statuses.
        methods->GetSendTrailingMetadata()->emplace(v1::kServerStatusTrailer,
                                                    "1");
      }
      Report(static_cast<int>(status.error_code()), /*ended=*/false);
    }
    methods->Proceed();
  }

 private:
  void ReadSessionId(
      const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
    auto it = metadata.find(v1::kSessionIdHeader);
    if (it == metadata.end()) return;
    session_.assign(it->second.data(),
                    std::min(it->second.size(), kMaxLoggedSessionId));
  }

  // `ended`: called from the destructor (the context is not read).
  void Report(int code, bool ended) {
    reported_ = true;
    const absl::Time now = absl::Now();
    const double seconds = absl::ToDoubleSeconds(now - start_);
    if (observer_->metrics_ != nullptr) {
      observer_->metrics_->ObserveRpc(method_, code, seconds);
    }
    if (observer_->access_log_ != nullptr) {
      const CallInfo call = observer_->Untrack(context_);
      const std::string peer = ended ? std::string() : context_->peer();
      AccessLogEntry entry;
      entry.time = now;
      entry.peer = peer;
      entry.tenant = call.tenant;
      entry.session = session_;
      entry.method = RpcMethodName(method_);
      entry.commands = call.commands;
      entry.code = CodeName(code);
      entry.duration_seconds = seconds;
      observer_->access_log_->Write(entry);
    }
  }

  RpcObserver* const observer_;
  grpc::ServerContextBase* const context_;
  const RpcMethod method_;
  const absl::Time start_;
  std::string session_;
  bool reported_ = false;
};

class RpcObserver::Factory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(RpcObserver* observer) : observer_(observer) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new Interceptor(observer_, info);
  }

 private:
  RpcObserver* const observer_;
};

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RpcObserver::NewInterceptorFactory() {
  return std::make_unique<Factory>(this);
}

void RpcObserver::Track(const grpc::ServerContextBase* context) {
  absl::MutexLock lock(&mu_);
  calls_[context] = CallInfo();
}

RpcObserver::CallInfo RpcObserver::Untrack(
    const grpc::ServerContextBase* context) {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(context);
  if (it == calls_.end()) return {};
  CallInfo call = std::move(it->second);
  calls_.erase(it);
  return call;
}

void RpcObserver::AddCommands(const grpc::ServerContextBase* context,
                              int64_t commands) {
  if (access_log_ == nullptr) return;
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(context);
  if (it != calls_.end()) it->second.commands += commands;
}

void RpcObserver::SetTenant(const grpc::ServerContextBase* context,
                            absl::string_view tenant) {
  if (access_log_ == nullptr) return;
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(context);
  if (it != calls_.end()) it->second.tenant = std::string(tenant);
}

}  // namespace gradtape::server
