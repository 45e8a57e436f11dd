#include "server/worker_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gradtape::server {

int WorkerPool::DefaultThreads() {
  // Workers mostly wait on their session's kernels or sleep; a long op holds
  // one. Four per core (at least 8) keep small sessions served while up to
  // that many sessions run long ops at once (docs/OPERATING.md "Deadlines,
  // scheduling and admission").
  return static_cast<int>(
      std::max(8u, 4 * std::thread::hardware_concurrency()));
}

WorkerPool::WorkerPool(int threads, int64_t max_inflight)
    : max_inflight_(max_inflight) {
  for (int i = 0; i < threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

int64_t WorkerPool::inflight() const {
  absl::MutexLock lock(&mu_);
  return inflight_;
}

absl::Status WorkerPool::Submit(const void* session, Task task,
                                Admission admission) {
  absl::MutexLock lock(&mu_);
  if (max_inflight_ > 0 && inflight_ >= max_inflight_) {
    if (admission == Admission::kWait && !workers_.empty()) {
      parked_.push_back({session, std::move(task)});
      return absl::OkStatus();
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "the server has ", inflight_,
        " batches queued or running, its limit (--max_inflight_batches=",
        max_inflight_, "); retry later"));
  }
  ++inflight_;
  if (workers_.empty()) {  // inline: run here, outside the lock
    mu_.Unlock();
    task();
    mu_.Lock();
    --inflight_;
    return absl::OkStatus();
  }
  EnqueueLocked(session, std::move(task));
  return absl::OkStatus();
}

void WorkerPool::EnqueueLocked(const void* session, Task task) {
  SessionQueue& queue = queues_[session];
  queue.tasks.push_back(std::move(task));
  // A running session goes back into the run queue when its task ends.
  if (!queue.running && queue.tasks.size() == 1) run_queue_.push_back(session);
}

void WorkerPool::ReleaseLocked() {
  --inflight_;
  if (parked_.empty() || (max_inflight_ > 0 && inflight_ >= max_inflight_)) {
    return;
  }
  Parked next = std::move(parked_.front());
  parked_.pop_front();
  ++inflight_;
  EnqueueLocked(next.session, std::move(next.task));
}

void WorkerPool::WorkerLoop() {
  auto has_work_or_stops = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !run_queue_.empty() || (stopping_ && inflight_ == 0);
  };
  absl::MutexLock lock(&mu_);
  for (;;) {
    mu_.Await(absl::Condition(&has_work_or_stops));
    if (run_queue_.empty()) return;  // stopping, nothing left anywhere
    const void* session = run_queue_.front();
    run_queue_.pop_front();
    SessionQueue& queue = queues_[session];
    Task task = std::move(queue.tasks.front());
    queue.tasks.pop_front();
    queue.running = true;
    mu_.Unlock();
    task();
    task = nullptr;  // drop what it holds before taking the lock
    mu_.Lock();
    SessionQueue& after = queues_[session];  // the map may have rehashed
    after.running = false;
    if (after.tasks.empty()) {
      queues_.erase(session);
    } else {
      run_queue_.push_back(session);  // its next turn, after the others
    }
    ReleaseLocked();
  }
}

}  // namespace gradtape::server
