// WorkerPool: the threads that apply batches, so that kernels do not run on
// gRPC's callback threads, with fair scheduling across sessions and
// admission of in-flight batches.
//
// How it works. Each session with work has a FIFO queue of tasks (its
// batches); a session whose queue is not empty and which is not running is
// in the run queue, once. A free worker takes the session at the front of
// the run queue, runs the front task of its queue, and puts the session back
// at the END of the run queue if more of its tasks wait. So one session's
// batches run in order and one at a time, and sessions take turns batch by
// batch (round-robin): a session with a 2-second op holds one worker, and
// the others keep serving everyone else.
//
// Admission: at most `max_inflight` tasks (queued plus running) across the
// server; 0 = unlimited. Submit with Admission::kRefuse fails past the limit
// (the caller answers RESOURCE_EXHAUSTED); Admission::kWait parks the task
// instead, FIFO, until a task ends (back-pressure: the stream that submitted
// it reads nothing more meanwhile, since it has one batch in flight).
//
// Inline mode (threads == 0): Submit runs the task on the calling thread at
// once (the behaviour before the pool: kernels on gRPC's threads). Kept to
// compare both in one benchmark run; admission counts tasks the same way,
// and kWait behaves as kRefuse (a gRPC thread must not block).
//
// Thread-safety: all methods may be called from any thread, tasks included.
// The destructor runs the tasks still queued, then joins the workers.
#ifndef GRADTAPE_SERVER_WORKER_POOL_H_
#define GRADTAPE_SERVER_WORKER_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace gradtape::server {

class WorkerPool {
 public:
  using Task = std::function<void()>;
  enum class Admission { kRefuse, kWait };

  // `threads` workers (0: inline), at most `max_inflight` tasks (0: no
  // limit).
  WorkerPool(int threads, int64_t max_inflight);
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  ~WorkerPool();

  // Queues `task` behind the tasks of `session` (any stable address naming
  // the session while its tasks are queued; tasks of one key run in order,
  // one at a time). RESOURCE_EXHAUSTED naming the limit when it is reached
  // and `admission` is kRefuse (the task is dropped, not run).
  absl::Status Submit(const void* session, Task task, Admission admission);

  int threads() const { return static_cast<int>(workers_.size()); }
  int64_t max_inflight() const { return max_inflight_; }
  // Queued plus running tasks (monitoring, tests).
  int64_t inflight() const;

  // The default number of workers: 4 per core, at least 8.
  static int DefaultThreads();

 private:
  struct SessionQueue {
    std::deque<Task> tasks;
    bool running = false;
  };
  struct Parked {
    const void* session;
    Task task;
  };

  void WorkerLoop();
  // Adds an admitted task to its session's queue.
  void EnqueueLocked(const void* session, Task task)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One task ended: admit the oldest parked one, if any.
  void ReleaseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_inflight_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<const void*, SessionQueue> queues_ ABSL_GUARDED_BY(mu_);
  // Sessions with queued tasks and none running, each once, in turn order.
  std::deque<const void*> run_queue_ ABSL_GUARDED_BY(mu_);
  std::deque<Parked> parked_ ABSL_GUARDED_BY(mu_);  // waiting for admission
  int64_t inflight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_WORKER_POOL_H_
