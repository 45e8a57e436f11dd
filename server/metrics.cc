#include "server/metrics.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/autodiff/elision_stats.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace gradtape::server {
namespace {

constexpr absl::string_view kMethodNames[kNumRpcMethods] = {
    "CreateSession", "CloseSession", "KeepAlive", "Stream",
    "Run",           "ListOps",      "other"};

constexpr absl::string_view kCodeNames[] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

// 50 us to 10 s: a small batch on loopback takes tens of microseconds, a
// large MatMul seconds.
prometheus::Histogram::BucketBoundaries DurationBuckets() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,    0.1,    0.25,    0.5,    1.0,   2.5,    5.0,   10.0};
}

int CodeIndex(int code) {
  return code >= 0 && code < static_cast<int>(std::size(kCodeNames)) ? code : 2;
}

prometheus::MetricFamily OneValue(std::string name, std::string help,
                                  prometheus::MetricType type, double value) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
  return family;
}

}  // namespace

absl::string_view RpcMethodName(RpcMethod method) {
  return kMethodNames[static_cast<int>(method)];
}

RpcMethod RpcMethodFromPath(absl::string_view path) {
  constexpr absl::string_view kService = "/gradtape.v1.TapeService/";
  if (!absl::ConsumePrefix(&path, kService)) return RpcMethod::kOther;
  for (int i = 0; i < kNumRpcMethods - 1; ++i) {
    if (path == kMethodNames[i]) return static_cast<RpcMethod>(i);
  }
  return RpcMethod::kOther;
}

absl::string_view CodeName(int code) { return kCodeNames[CodeIndex(code)]; }

namespace {

// gradtape_memory_in_use_bytes{kind}: what is charged to the budget, by
// kind; "tensors" is the rest after the kept results, the replies and the
// buffer pool.
prometheus::MetricFamily MemoryInUse(const MemoryTotals& totals) {
  prometheus::MetricFamily family;
  family.name = "gradtape_memory_in_use_bytes";
  family.help =
      "Bytes charged to the server's memory budget, by kind (tensors: "
      "tensor buffers with the sessions' and tapes' bookkeeping; "
      "kept_results; replies: being built or sent; buffer_pool: freed "
      "buffers kept for reuse).";
  family.type = prometheus::MetricType::Gauge;
  const int64_t kept = totals.result_cache_bytes;
  const int64_t replies = totals.reply_bytes;
  const int64_t pooled = totals.buffer_pool_bytes;
  const int64_t tensors =
      std::max<int64_t>(0, totals.in_use_bytes - kept - replies - pooled);
  for (auto [kind, bytes] :
       {std::pair{"tensors", tensors}, std::pair{"kept_results", kept},
        std::pair{"replies", replies}, std::pair{"buffer_pool", pooled}}) {
    prometheus::ClientMetric metric;
    metric.label.push_back({"kind", kind});
    metric.gauge.value = static_cast<double>(bytes);
    family.metric.push_back(std::move(metric));
  }
  return family;
}

}  // namespace

// The values read when /metrics is scraped: memory over the sessions (from
// the server's source) and the core's elision total.
class Metrics::ScrapeTimeMetrics final : public prometheus::Collectable {
 public:
  void SetSource(std::function<MemoryTotals()> source) {
    absl::MutexLock lock(&mu_);
    source_ = std::move(source);
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    MemoryTotals totals;
    {
      absl::MutexLock lock(&mu_);
      if (source_) totals = source_();
    }
    std::vector<prometheus::MetricFamily> families;
    families.push_back(OneValue(
        "gradtape_live_tensor_bytes",
        "Bytes of tensor memory charged to open sessions (tensors, tape "
        "storage).",
        prometheus::MetricType::Gauge,
        static_cast<double>(totals.live_tensor_bytes)));
    families.push_back(OneValue(
        "gradtape_tape_saved_bytes",
        "Bytes of the tensors that tapes of open sessions keep for backward.",
        prometheus::MetricType::Gauge,
        static_cast<double>(totals.tape_saved_bytes)));
    families.push_back(OneValue(
        "gradtape_result_cache_bytes",
        "Bytes of command results open sessions keep until their clients "
        "acknowledge them (exactly-once; not in live tensor bytes).",
        prometheus::MetricType::Gauge,
        static_cast<double>(totals.result_cache_bytes)));
    families.push_back(
        OneValue("gradtape_memory_budget_bytes",
                 "The server-wide memory budget every charge must fit "
                 "(--memory_budget_mb; 0: none).",
                 prometheus::MetricType::Gauge,
                 static_cast<double>(totals.budget_bytes)));
    families.push_back(MemoryInUse(totals));
    families.push_back(OneValue(
        "gradtape_elision_saved_bytes_total",
        "Bytes the elision registry kept off the tapes: inputs and outputs "
        "of recorded ops that their backward does not read.",
        prometheus::MetricType::Counter,
        static_cast<double>(ElisionSavedBytesTotal())));
    return families;
  }

 private:
  mutable absl::Mutex mu_;
  std::function<MemoryTotals()> source_ ABSL_GUARDED_BY(mu_);
};

Metrics::Metrics(const OpRegistry& registry)
    : registry_(registry),
      num_ops_(static_cast<int>(registry.ops().size())),
      registry_prom_(std::make_shared<prometheus::Registry>()),
      scrape_time_(std::make_shared<ScrapeTimeMetrics>()),
      command_counters_((2 * (num_ops_ + 1) + kNumKindRows) * kNumCodes),
      rpc_counters_(kNumRpcMethods * kNumCodes) {
  prometheus::Registry& r = *registry_prom_;
  sessions_open_ = &prometheus::BuildGauge()
                        .Name("gradtape_sessions_open")
                        .Help("Open sessions.")
                        .Register(r);
  sessions_created_ = &prometheus::BuildCounter()
                           .Name("gradtape_sessions_created_total")
                           .Help("Sessions created.")
                           .Register(r);
  sessions_closed_ = &prometheus::BuildCounter()
                          .Name("gradtape_sessions_closed_total")
                          .Help("Sessions closed by CloseSession.")
                          .Register(r);
  sessions_reaped_ = &prometheus::BuildCounter()
                          .Name("gradtape_sessions_reaped_total")
                          .Help("Sessions closed because their lease expired.")
                          .Register(r);
  commands_ = &prometheus::BuildCounter()
                   .Name("gradtape_commands_total")
                   .Help(
                       "Commands applied or refused, by command kind, op "
                       "(execute kinds) and status code.")
                   .Register(r);
  duplicates_ = &prometheus::BuildCounter()
                     .Name("gradtape_duplicate_commands_total")
                     .Help(
                         "Commands not applied because their seq was already "
                         "applied (exactly-once: resent after a lost reply).")
                     .Register(r)
                     .Add({});
  rpcs_ = &prometheus::BuildCounter()
               .Name("gradtape_rpcs_total")
               .Help("Finished RPCs by method and status code.")
               .Register(r);
  auto& batch_family = prometheus::BuildHistogram()
                           .Name("gradtape_batch_duration_seconds")
                           .Help("Time to apply one command batch.")
                           .Register(r);
  auto& rpc_family = prometheus::BuildHistogram()
                         .Name("gradtape_rpc_duration_seconds")
                         .Help("Time from the start of an RPC to its status.")
                         .Register(r);
  auto& received = prometheus::BuildCounter()
                       .Name("gradtape_received_bytes_total")
                       .Help("Bytes of request messages received, by method.")
                       .Register(r);
  auto& sent = prometheus::BuildCounter()
                   .Name("gradtape_sent_bytes_total")
                   .Help("Bytes of response messages sent, by method.")
                   .Register(r);
  for (int i = 0; i < kNumRpcMethods; ++i) {
    const prometheus::Labels labels = {
        {"method", std::string(kMethodNames[i])}};
    const auto method = static_cast<RpcMethod>(i);
    batch_seconds_.push_back(method == RpcMethod::kRun ||
                                     method == RpcMethod::kStream
                                 ? &batch_family.Add(labels, DurationBuckets())
                                 : nullptr);
    rpc_seconds_.push_back(&rpc_family.Add(labels, DurationBuckets()));
    received_bytes_.push_back(&received.Add(labels));
    sent_bytes_.push_back(&sent.Add(labels));
  }
}

Metrics::~Metrics() {
  // Stop serving before the families go.
  exposer_.reset();
}

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Start(
    const std::string& address, const OpRegistry& registry) {
  if (address.rfind(':') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics_address '", address, "' has no port (host:port)"));
  }
  std::unique_ptr<Metrics> metrics(new Metrics(registry));
  // civetweb reports a port it cannot bind with an exception: keep it here.
  try {
    metrics->exposer_ = std::make_unique<prometheus::Exposer>(address, 2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
  metrics->exposer_->RegisterCollectable(metrics->registry_prom_);
  metrics->exposer_->RegisterCollectable(metrics->scrape_time_);
  const std::vector<int> ports = metrics->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address));
  }
  metrics->port_ = ports.front();
  return metrics;
}

void Metrics::SetMemorySource(std::function<MemoryTotals()> source) {
  scrape_time_->SetSource(std::move(source));
}

Metrics::TenantSeries& Metrics::Tenant(absl::string_view tenant) {
  auto it = tenants_.find(tenant);
  if (it != tenants_.end()) return it->second;
  const prometheus::Labels labels = {{"tenant", std::string(tenant)}};
  TenantSeries series{
      &sessions_open_->Add(labels), &sessions_created_->Add(labels),
      &sessions_closed_->Add(labels), &sessions_reaped_->Add(labels)};
  return tenants_.emplace(std::string(tenant), series).first->second;
}

void Metrics::SessionCreated(absl::string_view tenant) {
  absl::MutexLock lock(&tenants_mu_);
  TenantSeries& series = Tenant(tenant);
  series.created->Increment();
  series.open->Increment();
}

void Metrics::SessionClosed(absl::string_view tenant) {
  absl::MutexLock lock(&tenants_mu_);
  TenantSeries& series = Tenant(tenant);
  series.closed->Increment();
  series.open->Decrement();
}

void Metrics::SessionReaped(absl::string_view tenant) {
  absl::MutexLock lock(&tenants_mu_);
  TenantSeries& series = Tenant(tenant);
  series.reaped->Increment();
  series.open->Decrement();
}

void Metrics::CountDuplicate() { duplicates_->Increment(); }

int Metrics::CommandRow(const v1::Command& cmd) const {
  const std::string* op = nullptr;
  int base = 0;
  switch (cmd.kind_case()) {
    case v1::Command::kExecute:
      op = &cmd.execute().op();
      break;
    case v1::Command::kExecuteWithGradient:
      op = &cmd.execute_with_gradient().op().op();
      base = num_ops_ + 1;
      break;
    default: {
      const int kind = static_cast<int>(cmd.kind_case());
      return 2 * (num_ops_ + 1) + (kind < kNumKindRows ? kind : 0);
    }
  }
  const OpDef* def = registry_.Find(*op);
  return base + (def != nullptr ? def->index : num_ops_);
}

prometheus::Counter& Metrics::NewCommandCounter(int row, int code) {
  std::string kind, op;
  const int execute_rows = num_ops_ + 1;
  if (row < 2 * execute_rows) {
    kind = row < execute_rows ? "execute" : "execute_with_gradient";
    const int index = row % execute_rows;
    op = index < num_ops_ ? registry_.ops()[index]->name : "unknown";
  } else {
    const google::protobuf::FieldDescriptor* field =
        v1::Command::descriptor()->FindFieldByNumber(row - 2 * execute_rows);
    kind = field != nullptr ? field->name() : "none";
  }
  return commands_->Add({{"kind", std::move(kind)},
                         {"op", std::move(op)},
                         {"code", std::string(CodeName(code))}});
}

int Metrics::CommandSlot(const v1::Command& cmd, absl::StatusCode code) const {
  return CommandRow(cmd) * kNumCodes + CodeIndex(static_cast<int>(code));
}

prometheus::Counter& Metrics::CommandCounter(int slot) {
  std::atomic<prometheus::Counter*>& entry = command_counters_[slot];
  prometheus::Counter* counter = entry.load(std::memory_order_acquire);
  if (counter == nullptr) {
    counter = &NewCommandCounter(slot / kNumCodes, slot % kNumCodes);
    entry.store(counter, std::memory_order_release);
  }
  return *counter;
}

void Metrics::CountCommand(const v1::Command& cmd, absl::StatusCode code) {
  CommandCounter(CommandSlot(cmd, code)).Increment();
}

void Metrics::CommandTally::Add(int slot) {
  for (int i = n_ - 1; i >= 0; --i) {  // the latest first: runs of one op
    if (slots_[i] == slot) {
      ++counts_[i];
      return;
    }
  }
  if (n_ == kSlots) Flush();
  slots_[n_] = slot;
  counts_[n_] = 1;
  ++n_;
}

void Metrics::CommandTally::Flush() {
  for (int i = 0; i < n_; ++i) {
    metrics_->CommandCounter(slots_[i]).Increment(
        static_cast<double>(counts_[i]));
  }
  n_ = 0;
}

void Metrics::ObserveBatch(RpcMethod method, double seconds) {
  prometheus::Histogram* histogram = batch_seconds_[static_cast<int>(method)];
  if (histogram != nullptr) histogram->Observe(seconds);
}

void Metrics::ObserveRpc(RpcMethod method, int code, double seconds) {
  const int m = static_cast<int>(method);
  const int column = CodeIndex(code);
  std::atomic<prometheus::Counter*>& slot =
      rpc_counters_[m * kNumCodes + column];
  prometheus::Counter* counter = slot.load(std::memory_order_acquire);
  if (counter == nullptr) {
    counter = &rpcs_->Add({{"method", std::string(kMethodNames[m])},
                           {"code", std::string(CodeName(column))}});
    slot.store(counter, std::memory_order_release);
  }
  counter->Increment();
  rpc_seconds_[m]->Observe(seconds);
}

void Metrics::AddReceivedBytes(RpcMethod method, int64_t bytes) {
  received_bytes_[static_cast<int>(method)]->Increment(
      static_cast<double>(bytes));
}

void Metrics::AddSentBytes(RpcMethod method, int64_t bytes) {
  sent_bytes_[static_cast<int>(method)]->Increment(static_cast<double>(bytes));
}

}  // namespace gradtape::server
