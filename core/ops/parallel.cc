#include "core/ops/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gradtape {
namespace {

// How long a waiting thread (a worker without work, a caller whose
// helpers are not done) spins, yielding, before it sleeps; see Pool::Loop.
constexpr auto kSpin = std::chrono::microseconds(200);

// One ParallelFor call. Its items are cut into one contiguous part per
// thread: the caller takes part 0 and each helper the part of its pool
// index, so consecutive calls over the same rows (a product, then the loop
// that reads its result) give each thread the rows it wrote last time,
// still in its core's second-level cache. A thread runs its own part's
// items first, then claims the other parts' remaining ones, so a busy or
// late thread only shifts items to the others. The last thread to finish
// an item wakes the caller.
struct Job {
  // A part's next unclaimed item and its end, on a cache line of its own.
  struct alignas(64) Part {
    std::atomic<int> next{0};
    int end = 0;
  };

  Job(const std::function<void(int)>& f, int items, int num_parts)
      : fn(&f), n(items), parts(num_parts), part(new Part[num_parts]) {
    for (int p = 0; p < parts; ++p) {
      part[p].next.store(static_cast<int>(int64_t{n} * p / parts),
                         std::memory_order_relaxed);
      part[p].end = static_cast<int>(int64_t{n} * (p + 1) / parts);
    }
  }

  const std::function<void(int)>* fn;
  const int n;
  const int parts;
  std::unique_ptr<Part[]> part;
  std::atomic<int> finished{0};
  std::mutex mu;
  std::condition_variable all_done;

  // Runs items of part `own`, then of the others, until none is left to
  // claim.
  void Work(int own) {
    for (int k = 0; k < parts; ++k) {
      Part& p = part[(own + k) % parts];
      for (int i = p.next.fetch_add(1); i < p.end; i = p.next.fetch_add(1)) {
        (*fn)(i);
        if (finished.fetch_add(1) + 1 == n) {
          std::lock_guard<std::mutex> lock(mu);
          all_done.notify_all();
        }
      }
    }
  }
};

// GRADTAPE_INTRA_OP_THREADS if it is a positive number, else the number of
// cores.
int ConfiguredThreads() {
  if (const char* env = std::getenv("GRADTAPE_INTRA_OP_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

class Pool {
 public:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) {
      threads_.emplace_back([this, i] { Loop(i); });
    }
  }
  // Never destroyed (see Instance): workers wait for jobs until the process
  // exits.

  int workers() const { return static_cast<int>(threads_.size()); }

  // Offers the job to up to `helpers` workers.
  void Offer(const std::shared_ptr<Job>& job, int helpers) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int i = 0; i < helpers; ++i) queue_.push_back(job);
      queued_.fetch_add(helpers, std::memory_order_release);
      wake = sleeping_ > 0;
    }
    if (!wake) return;  // the workers are spinning or busy
    if (helpers == 1) {
      cv_.notify_one();
    } else {
      cv_.notify_all();
    }
  }

  static Pool& Instance() {
    static Pool* const pool = new Pool(ConfiguredThreads() - 1);
    return *pool;
  }

 private:
  // Waits for queued work: first spinning for kSpin (a kernel that splits
  // one product often splits the next one right after, and waking a
  // sleeping thread on this VM often takes longer than a block of a 256^3
  // product, so the caller ends up running both blocks), then asleep on the
  // condition variable. kernel_bench MatMul 256, medians of 6 alternating
  // processes, GFLOP/s: spin 50 us 170 / 170, 200 us 210 / 179, 1 ms 168 /
  // 192 (two sets; 512 and 1024 alike in all): 200 us.
  void Loop(int index) {
    for (;;) {
      const auto spin_end = std::chrono::steady_clock::now() + kSpin;
      while (queued_.load(std::memory_order_acquire) == 0 &&
             std::chrono::steady_clock::now() < spin_end) {
        // Yield rather than pause: if the scheduler put this worker on the
        // caller's core, the caller runs instead of waiting for the spin.
        std::this_thread::yield();
      }
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ++sleeping_;
        cv_.wait(lock, [&] { return !queue_.empty(); });
        --sleeping_;
        job = std::move(queue_.front());
        queue_.pop_front();
        queued_.fetch_sub(1, std::memory_order_relaxed);
      }
      // A job whose items are all claimed already returns at once. Worker
      // `index` takes the same part in every job of as many parts.
      job->Work(1 + index % (job->parts - 1));
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;  // guarded by mu_
  std::atomic<int> queued_{0};              // queue_.size(), read unlocked
  int sleeping_ = 0;                        // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace

int ParallelismDegree() { return Pool::Instance().workers() + 1; }

void ParallelFor(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  Pool& pool = Pool::Instance();
  const int helpers = std::min(n - 1, pool.workers());
  if (helpers == 0) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  auto job = std::make_shared<Job>(fn, n, helpers + 1);
  pool.Offer(job, helpers);
  job->Work(0);
  // The helpers' items usually end within microseconds of the caller's
  // own, and being woken from a condition variable often takes longer than
  // that on this VM (each half of a 256^3 product is ~70 us), so the caller
  // waits spinning first, as the workers do. kernel_bench MatMul 256 / 512,
  // AVX-512 kernels, medians of 8-10 alternating processes, GFLOP/s,
  // without vs with, four sets: 244 / 431 vs 220 / 322, 185 / 318 vs
  // 396 / 437, 260 / 423 vs 310 / 414, 223 / 301 vs 250 / 440 (1024: equal).
  const auto spin_end = std::chrono::steady_clock::now() + kSpin;
  while (job->finished.load(std::memory_order_acquire) != n &&
         std::chrono::steady_clock::now() < spin_end) {
    std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lock(job->mu);
  job->all_done.wait(lock, [&] { return job->finished.load() == n; });
}

void ParallelRange(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t most = 4 * static_cast<int64_t>(ParallelismDegree());
  const int64_t blocks = std::min(n / grain, most);
  if (blocks <= 1) {
    fn(0, n);
    return;
  }
  const int64_t size = (n + blocks - 1) / blocks;
  ParallelFor(static_cast<int>(blocks), [&](int b) {
    const int64_t begin = b * size;
    const int64_t end = std::min(n, begin + size);
    if (begin < end) fn(begin, end);
  });
}

}  // namespace gradtape
