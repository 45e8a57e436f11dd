#include "server/server.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "core/tensor/tensor.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/access_log.h"
#include "server/api_keys.h"
#include "server/drain.h"
#include "server/memory_budget.h"
#include "server/metrics.h"
#include "server/reply_budget.h"
#include "server/result_cache.h"
#include "server/rpc_observer.h"
#include "server/session_manager.h"
#include "server/tape_service.h"
#include "server/tls.h"
#include "server/worker_pool.h"

namespace gradtape::server {

namespace {

// INVALID_ARGUMENT naming the first option out of range (the transport's
// are checked by server/tls.h).
absl::Status CheckOptions(const ServerOptions& options) {
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
  if (options.memory_budget_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory_budget_bytes must be >= 0, got ", options.memory_budget_bytes));
  }
  if (options.max_message_bytes < ServerOptions::kMinMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_message_bytes must be at least ", ServerOptions::kMinMessageBytes,
        ", got ", options.max_message_bytes));
  }
  if (options.shutdown_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shutdown_grace must not be negative, got ",
                     absl::FormatDuration(options.shutdown_grace)));
  }
  if (options.checkpoint_on_drain && options.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(
        "checkpoint_on_drain needs a checkpoint_dir (--checkpoint_dir=DIR)");
  }
  if (options.result_cache_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "result_cache_bytes must be >= 0, got ", options.result_cache_bytes));
  }
  if (options.worker_threads < -1 || options.max_inflight_batches < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker_threads must be >= 0 (or -1: the default) and "
        "max_inflight_batches >= 0, got ",
        options.worker_threads, " and ", options.max_inflight_batches));
  }
  if (options.address.rfind(':') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address '", options.address, "' has no port (host:port)"));
  }
  return absl::OkStatus();
}

// The keys of options.api_keys_file, or null without one.
absl::StatusOr<std::unique_ptr<ApiKeys>> LoadApiKeys(
    const ServerOptions& options) {
  if (options.api_keys_file.empty()) return nullptr;
  return ApiKeys::Load(options.api_keys_file);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Start(
    const ServerOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  // Transport: TLS credentials and keepalive (server/tls.h).
  if (absl::Status s = CheckKeepaliveOptions(options); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options);
  if (!credentials.ok()) return credentials.status();

  // One-time process settings; calling them again is harmless.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  // Before the Server exists: its destructor expects a started server.
  absl::StatusOr<std::unique_ptr<ApiKeys>> api_keys = LoadApiKeys(options);
  if (!api_keys.ok()) return api_keys.status();
  std::unique_ptr<Server> server(new Server());
  server->api_keys_ = *std::move(api_keys);
  if (absl::Status s = server->StartReporting(options); !s.ok()) return s;
  server->CreateService(options);
  if (absl::Status s = server->Listen(options, *credentials); !s.ok()) {
    return s;
  }
  server->shutdown_grace_ = options.shutdown_grace;
  server->checkpoint_on_drain_ = options.checkpoint_on_drain;
  server->checkpoint_dir_ = options.checkpoint_dir;
  // The service's own health name serves beside "" (which gRPC sets).
  server->SetHealth(true);
  return server;
}

absl::Status Server::StartReporting(const ServerOptions& options) {
  // Metrics and access log, before anything reports to them.
  if (!options.metrics_address.empty()) {
    absl::StatusOr<std::unique_ptr<Metrics>> metrics =
        Metrics::Start(options.metrics_address, DefaultRegistry());
    if (!metrics.ok()) return metrics.status();
    metrics_ = *std::move(metrics);
  }
  if (!options.access_log.empty()) {
    absl::StatusOr<std::unique_ptr<AccessLog>> log =
        AccessLog::Open(options.access_log);
    if (!log.ok()) return log.status();
    access_log_ = *std::move(log);
  }
  // Always: its interceptor also marks the server's own non-OK statuses
  // (v1::kServerStatusTrailer).
  observer_ = std::make_unique<RpcObserver>(metrics_.get(), access_log_.get());
  return absl::OkStatus();
}

void Server::CreateService(const ServerOptions& options) {
  // One budget per process: the last server started sets it.
  ProcessMemoryAccount()->set_limit(options.memory_budget_bytes);
  SetKeptResultsLimit(options.memory_budget_bytes);
  SetBufferPoolLimit(BufferPoolLimitFor(options.memory_budget_bytes));
  SessionManagerOptions session_options;
  session_options.max_sessions = options.max_sessions;
  session_options.session_memory_limit_bytes =
      options.session_memory_limit_bytes;
  session_options.checkpoint_dir = options.checkpoint_dir;
  session_options.plan_programs = options.plan_programs;
  session_options.fuse_programs = options.fuse_programs;
  session_options.default_lease = absl::Seconds(options.keep_alive_seconds);
  session_options.result_cache_bytes = options.result_cache_bytes;
  session_options.metrics = metrics_.get();
  sessions_ =
      std::make_unique<SessionManager>(DefaultRegistry(), session_options);
  pool_ = std::make_unique<WorkerPool>(options.worker_threads < 0
                                           ? WorkerPool::DefaultThreads()
                                           : options.worker_threads,
                                       options.max_inflight_batches);
  service_ = std::make_unique<TapeServiceImpl>(
      DefaultRegistry(), *sessions_,
      options.max_message_bytes - ServerOptions::kReplyMarginBytes,
      api_keys_.get(), *pool_, observer_.get());
  if (metrics_ == nullptr) return;
  metrics_->SetMemorySource([sessions = sessions_.get()] {
    MemoryTotals totals = sessions->MemoryForMetrics();
    totals.budget_bytes = ProcessMemoryAccount()->limit();
    totals.in_use_bytes = ProcessMemoryAccount()->bytes();
    totals.reply_bytes = ReplyMemory::TotalBytes();
    totals.result_cache_bytes = KeptResultsAccount()->bytes();  // exact
    totals.buffer_pool_bytes = BufferPoolAccount()->bytes();
    return totals;
  });
}

absl::Status Server::Listen(
    const ServerOptions& options,
    const std::shared_ptr<grpc::ServerCredentials>& credentials) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, credentials, &port_);
  ApplyKeepaliveOptions(options, builder);
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(observer_->NewInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || port_ == 0) {
    return FailStart(absl::StrCat("cannot listen on ", options.address));
  }
  if (!options.health_address.empty()) {
    grpc::ServerBuilder health_builder;  // the default health service only
    health_builder.AddListeningPort(options.health_address,
                                    grpc::InsecureServerCredentials(),
                                    &health_port_);
    health_server_ = health_builder.BuildAndStart();
    if (health_server_ == nullptr || health_port_ == 0) {
      return FailStart(absl::StrCat("cannot listen on health_address ",
                                    options.health_address));
    }
  }
  const std::string& address = options.address;
  address_ = absl::StrCat(address.substr(0, address.rfind(':')), ":", port_);
  return absl::OkStatus();
}

absl::Status Server::FailStart(std::string message) {
  for (std::unique_ptr<grpc::Server>* s : {&grpc_server_, &health_server_}) {
    if (*s == nullptr) continue;
    (*s)->Shutdown();
    (*s)->Wait();
    s->reset();
  }
  // The destructor's Drain finds no gRPC server and frees the rest.
  return absl::UnavailableError(std::move(message));
}

void Server::SetHealth(bool serving) {
  for (grpc::Server* s : {grpc_server_.get(), health_server_.get()}) {
    if (s == nullptr) continue;
    if (grpc::HealthCheckServiceInterface* health =
            s->GetHealthCheckService()) {
      health->SetServingStatus("", serving);
      health->SetServingStatus(v1::TapeService::service_full_name(), serving);
    }
  }
}

Server::~Server() { Shutdown(); }

int Server::port() const { return port_; }

void Server::Shutdown() { Drain(shutdown_grace_); }

void Server::Drain(absl::Duration grace) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  if (grpc_server_ == nullptr) {  // Start failed (FailStart, or before)
    if (metrics_ != nullptr) metrics_->SetMemorySource(nullptr);
    if (sessions_ != nullptr) sessions_->Shutdown();
    shut_down_ = true;
    return;
  }
  const absl::Time deadline = absl::Now() + grace;
  SetHealth(false);
  DrainRegistry& drain = service_->drain();
  drain.BeginDrain();
  drain.AwaitIdle(deadline);
  // Returns when every call has finished (running ones are cancelled at the
  // deadline), so no reactor touches the sessions after this.
  grpc_server_->Shutdown(absl::ToChronoTime(deadline));
  grpc_server_->Wait();
  if (health_server_ != nullptr) {
    health_server_->Shutdown();  // answers NOT_SERVING until here
    health_server_->Wait();
  }
  if (checkpoint_on_drain_) CheckpointSessions(*sessions_, checkpoint_dir_);
  pool_.reset();  // every call has finished: its queue is empty
  if (metrics_ != nullptr) metrics_->SetMemorySource(nullptr);
  sessions_->Shutdown();
  shut_down_ = true;
}

void Server::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&shut_down_));
}

int Server::num_sessions() const { return sessions_->num_sessions(); }

int64_t Server::inflight_batches() const { return pool_->inflight(); }

absl::Status Server::ReloadApiKeys() {
  if (api_keys_ == nullptr) {
    return absl::FailedPreconditionError(
        "the server was started without --api_keys_file: no keys to reload");
  }
  return api_keys_->Reload();
}

int Server::metrics_port() const {
  return metrics_ != nullptr ? metrics_->port() : 0;
}

}  // namespace gradtape::server
