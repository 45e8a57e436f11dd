// gradtape::server::Metrics: the server's Prometheus metrics (prometheus-cpp),
// served over HTTP at http://<metrics_address>/metrics.
//
// One Metrics object per Server. The parts that count get a pointer to it:
// the SessionManager (sessions), ApplyBatch (commands, batch durations) and
// the RPC interceptor (server/rpc_observer.h: RPC durations, codes, bytes).
// Every name has the gradtape_ prefix and a base unit; every label is bounded:
//
//   gradtape_sessions_open{tenant}                      gauge
//   gradtape_sessions_created_total{tenant}             counter
//   gradtape_sessions_closed_total{tenant}              counter (CloseSession)
//   gradtape_sessions_reaped_total{tenant}              counter (lease expired)
//   gradtape_commands_total{kind,op,code}               counter
//   gradtape_duplicate_commands_total                   counter
//   gradtape_batch_duration_seconds{method}             histogram
//   gradtape_rpcs_total{method,code}                    counter
//   gradtape_rpc_duration_seconds{method}               histogram
//   gradtape_received_bytes_total{method}               counter
//   gradtape_sent_bytes_total{method}                   counter
//   gradtape_live_tensor_bytes                          gauge (at scrape)
//   gradtape_tape_saved_bytes                           gauge (at scrape)
//   gradtape_result_cache_bytes                         gauge (at scrape)
//   gradtape_memory_budget_bytes                        gauge (at scrape)
//   gradtape_memory_in_use_bytes{kind}                  gauge (at scrape)
//   gradtape_elision_saved_bytes_total                  counter (at scrape)
//
// In gradtape_memory_in_use_bytes, kind is "tensors" (tensor buffers and
// the sessions' and tapes' bookkeeping), "kept_results", "replies" or
// "buffer_pool" (freed buffers kept for reuse, core/tensor/tensor.h); the
// four add up to what is charged to the budget.
// In the command counters, kind is the Command's oneof field name ("execute",
// "put", ...); op is a registered op name for execute and execute_with_gradient
// ("unknown" for any other name) and empty for the other kinds; code is the
// gRPC code name
// ("OK", "INVALID_ARGUMENT", ...); method is a TapeService method name or
// "other" (health, reflection); tenant is the session's tenant ("" until
// tenants exist). Session ids are never labels.
//
// Hot path: counting a command (CommandTally, in ApplyBatch) costs one
// registry lookup of the op name (the session does the same one) and a
// search of the batch's few distinct counters; at the end of the batch, an
// index into a table of counter pointers built lazily (a series appears on
// its first use) and an atomic add per distinct counter. No strings are
// built and no lock is taken once a series exists.
//
// Thread-safety: every method may be called from any thread.
#ifndef GRADTAPE_SERVER_METRICS_H_
#define GRADTAPE_SERVER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/registry/op_registry.h"
#include "gradtape/v1/tape_service.pb.h"

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace gradtape::server {

// The RPC methods metrics and the access log tell apart.
enum class RpcMethod : int {
  kCreateSession = 0,
  kCloseSession,
  kKeepAlive,
  kStream,
  kRun,
  kListOps,
  kOther,  // health checking, reflection, anything else
};
inline constexpr int kNumRpcMethods = 7;
// "CreateSession", ..., "other".
absl::string_view RpcMethodName(RpcMethod method);
// From a call's path, "/gradtape.v1.TapeService/Run".
RpcMethod RpcMethodFromPath(absl::string_view path);
// "OK", "INVALID_ARGUMENT", ... (gRPC's and absl's codes are the same).
absl::string_view CodeName(int code);

// Tensor memory over all sessions, taken when /metrics is scraped.
struct MemoryTotals {
  int64_t live_tensor_bytes = 0;   // every buffer charged to a session
  int64_t tape_saved_bytes = 0;    // tensors tapes keep for backward
  int64_t result_cache_bytes = 0;  // kept results (server/result_cache.h)
  // The server-wide budget (server/memory_budget.h; 0: none), what is
  // charged to it in all, and of that the replies being sent.
  int64_t budget_bytes = 0;
  int64_t in_use_bytes = 0;
  int64_t reply_bytes = 0;
  int64_t buffer_pool_bytes = 0;
};

class Metrics {
 public:
  // Serves /metrics on `address` (host:port; port 0 picks a free one).
  // INVALID_ARGUMENT for an address without a port, UNAVAILABLE if it
  // cannot be bound. `registry` must outlive the Metrics.
  static absl::StatusOr<std::unique_ptr<Metrics>> Start(
      const std::string& address, const OpRegistry& registry);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The bound port of the HTTP endpoint.
  int port() const { return port_; }

  // Called at every scrape for the memory gauges (under a lock: it never
  // runs after a later SetMemorySource(nullptr) returned). Null: zeros.
  void SetMemorySource(std::function<MemoryTotals()> source);

  // Sessions, by tenant.
  void SessionCreated(absl::string_view tenant);
  void SessionClosed(absl::string_view tenant);
  void SessionReaped(absl::string_view tenant);

  // One duplicate command (its seq was already applied: not applied, not
  // in gradtape_commands_total; server/result_cache.h).
  void CountDuplicate();

  // One command applied (or refused) with `code`.
  void CountCommand(const v1::Command& cmd, absl::StatusCode code);

  // Counts the commands of one batch locally and adds them to the counters
  // when it goes (or fills): one atomic add per distinct (kind, op, code)
  // of a batch instead of one per command, so sessions on different cores
  // do not contend for a counter's cache line per command. `metrics` may be
  // null (then Count does nothing). Not thread-safe: one per batch.
  class CommandTally {
   public:
    explicit CommandTally(Metrics* metrics) : metrics_(metrics) {}
    ~CommandTally() { Flush(); }
    CommandTally(const CommandTally&) = delete;
    CommandTally& operator=(const CommandTally&) = delete;

    void Count(const v1::Command& cmd, absl::StatusCode code) {
      if (metrics_ != nullptr) Add(metrics_->CommandSlot(cmd, code));
    }
    void Flush();

   private:
    static constexpr int kSlots = 16;
    void Add(int slot);

    Metrics* const metrics_;
    int n_ = 0;
    int slots_[kSlots];
    int64_t counts_[kSlots];
  };
  // One batch applied in `seconds` (ApplyBatch).
  void ObserveBatch(RpcMethod method, double seconds);
  // One finished RPC (the interceptor).
  void ObserveRpc(RpcMethod method, int code, double seconds);
  // A message of `bytes` received or sent (counted as it passes, so a
  // long-lived Stream shows its traffic before it ends).
  void AddReceivedBytes(RpcMethod method, int64_t bytes);
  void AddSentBytes(RpcMethod method, int64_t bytes);

 private:
  class ScrapeTimeMetrics;
  struct TenantSeries {
    prometheus::Gauge* open;
    prometheus::Counter* created;
    prometheus::Counter* closed;
    prometheus::Counter* reaped;
  };
  static constexpr int kNumCodes = 17;
  static constexpr int kNumKindRows = 64;  // Command oneof field numbers

  explicit Metrics(const OpRegistry& registry);
  TenantSeries& Tenant(absl::string_view tenant)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tenants_mu_);
  int CommandRow(const v1::Command& cmd) const;
  // The index of cmd's counter in command_counters_.
  int CommandSlot(const v1::Command& cmd, absl::StatusCode code) const;
  prometheus::Counter& CommandCounter(int slot);
  prometheus::Counter& NewCommandCounter(int row, int code);

  const OpRegistry& registry_;
  const int num_ops_;
  std::shared_ptr<prometheus::Registry> registry_prom_;
  std::shared_ptr<ScrapeTimeMetrics> scrape_time_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;

  prometheus::Family<prometheus::Gauge>* sessions_open_;
  prometheus::Family<prometheus::Counter>* sessions_created_;
  prometheus::Family<prometheus::Counter>* sessions_closed_;
  prometheus::Family<prometheus::Counter>* sessions_reaped_;
  prometheus::Family<prometheus::Counter>* commands_;
  prometheus::Family<prometheus::Counter>* rpcs_;
  prometheus::Counter* duplicates_;
  absl::Mutex tenants_mu_;
  absl::flat_hash_map<std::string, TenantSeries> tenants_
      ABSL_GUARDED_BY(tenants_mu_);

  // Rows: execute with op index i (i < num_ops_) or unknown (num_ops_);
  // execute_with_gradient the same, offset by num_ops_ + 1; then one row per
  // other Command kind (by field number). Columns: status codes. Filled
  // lazily; Family::Add returns the same series for the same labels, so a
  // race only stores the same pointer twice.
  std::vector<std::atomic<prometheus::Counter*>> command_counters_;
  std::vector<std::atomic<prometheus::Counter*>> rpc_counters_;
  std::vector<prometheus::Histogram*> batch_seconds_;  // by method
  std::vector<prometheus::Histogram*> rpc_seconds_;    // by method
  std::vector<prometheus::Counter*> received_bytes_;   // by method
  std::vector<prometheus::Counter*> sent_bytes_;       // by method
};

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_METRICS_H_
