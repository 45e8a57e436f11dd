#include "server/server.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/access_log.h"
#include "server/metrics.h"
#include "server/rpc_observer.h"
#include "server/session_manager.h"
#include "server/tape_service.h"

namespace gradtape::server {
namespace {

// How long Shutdown lets running calls finish before cancelling them.
constexpr absl::Duration kShutdownGrace = absl::Seconds(1);

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Start(
    const ServerOptions& options) {
  if (options.max_sessions <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_sessions must be positive, got ", options.max_sessions));
  }
  if (options.session_memory_limit_bytes < 0 ||
      options.keep_alive_seconds <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session_memory_limit_bytes must be >= 0 and keep_alive_seconds > 0, "
        "got ",
        options.session_memory_limit_bytes, " and ",
        options.keep_alive_seconds));
  }
  if (options.max_message_bytes < ServerOptions::kMinMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_message_bytes must be at least ", ServerOptions::kMinMessageBytes,
        ", got ", options.max_message_bytes));
  }
  auto colon = options.address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address '", options.address, "' has no port (host:port)"));
  }

  // One-time process settings; calling them again is harmless.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  std::unique_ptr<Server> server(new Server());
  // Metrics and access log, before anything reports to them.
  if (!options.metrics_address.empty()) {
    absl::StatusOr<std::unique_ptr<Metrics>> metrics =
        Metrics::Start(options.metrics_address, DefaultRegistry());
    if (!metrics.ok()) return metrics.status();
    server->metrics_ = *std::move(metrics);
  }
  if (!options.access_log.empty()) {
    absl::StatusOr<std::unique_ptr<AccessLog>> log =
        AccessLog::Open(options.access_log);
    if (!log.ok()) return log.status();
    server->access_log_ = *std::move(log);
  }
  if (server->metrics_ != nullptr || server->access_log_ != nullptr) {
    server->observer_ = std::make_unique<RpcObserver>(
        server->metrics_.get(), server->access_log_.get());
  }
  SessionManagerOptions session_options;
  session_options.max_sessions = options.max_sessions;
  session_options.session_memory_limit_bytes =
      options.session_memory_limit_bytes;
  session_options.checkpoint_dir = options.checkpoint_dir;
  session_options.default_lease = absl::Seconds(options.keep_alive_seconds);
  session_options.metrics = server->metrics_.get();
  server->sessions_ =
      std::make_unique<SessionManager>(DefaultRegistry(), session_options);
  if (server->metrics_ != nullptr) {
    server->metrics_->SetMemorySource([sessions = server->sessions_.get()] {
      return sessions->MemoryForMetrics();
    });
  }
  server->service_ = std::make_unique<TapeServiceImpl>(
      DefaultRegistry(), *server->sessions_,
      options.max_message_bytes - ServerOptions::kReplyMarginBytes,
      server->observer_.get());

  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(),
                           &server->port_);
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  if (server->observer_ != nullptr) {
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(server->observer_->NewInterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
  }
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr || server->port_ == 0) {
    server->grpc_server_.reset();
    if (server->metrics_ != nullptr) server->metrics_->SetMemorySource(nullptr);
    server->sessions_->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.address));
  }
  server->address_ =
      absl::StrCat(options.address.substr(0, colon), ":", server->port_);
  return server;
}

Server::~Server() { Shutdown(); }

int Server::port() const { return port_; }

void Server::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  // Returns when every call has finished (running ones are cancelled at the
  // deadline), so no reactor touches the sessions after this.
  // (A Server that failed to start has no gRPC server, maybe no sessions.)
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(absl::ToChronoTime(absl::Now() + kShutdownGrace));
    grpc_server_->Wait();
  }
  if (metrics_ != nullptr) metrics_->SetMemorySource(nullptr);
  if (sessions_ != nullptr) sessions_->Shutdown();
  shut_down_ = true;
}

void Server::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&shut_down_));
}

int Server::num_sessions() const { return sessions_->num_sessions(); }

int Server::metrics_port() const {
  return metrics_ != nullptr ? metrics_->port() : 0;
}

}  // namespace gradtape::server
