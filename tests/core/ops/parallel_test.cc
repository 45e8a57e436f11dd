// ParallelFor (core/ops/parallel.h): every item exactly once, from one caller
// and from several callers at once (as sessions on different server threads
// would), including more callers than the pool has workers.
#include "core/ops/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gradtape {
namespace {

TEST(ParallelForTest, RunsEveryItemOnce) {
  EXPECT_GE(ParallelismDegree(), 1);
  for (int n : {0, 1, 2, 3, 17, 1000}) {
    std::vector<std::atomic<int>> runs(n);
    ParallelFor(n, [&](int i) { runs[i].fetch_add(1); });
    for (int i = 0; i < n; ++i) ASSERT_EQ(runs[i].load(), 1) << "n=" << n;
  }
}

TEST(ParallelForTest, ConcurrentCallersEachGetTheirItems) {
  constexpr int kCallers = 8, kRounds = 200, kItems = 5;
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kCallers; ++t) {
    callers.emplace_back([&wrong] {
      for (int r = 0; r < kRounds; ++r) {
        std::vector<std::atomic<int>> runs(kItems);
        ParallelFor(kItems, [&](int i) { runs[i].fetch_add(1); });
        for (auto& count : runs) {
          if (count.load() != 1) wrong.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// Items of one call may run on two threads at once when the pool has a
// worker; the results must not depend on it.
TEST(ParallelForTest, ItemsWriteDisjointResults) {
  std::vector<long> sums(64, 0);
  ParallelFor(64, [&](int i) {
    long s = 0;
    for (int j = 0; j <= i * 1000; ++j) s += j;
    sums[i] = s;
  });
  for (int i = 0; i < 64; ++i) {
    const long n = i * 1000L;
    EXPECT_EQ(sums[i], n * (n + 1) / 2) << i;
  }
}

// Each thread starts on its own contiguous share of the items: the caller
// on item 0, a pool worker on the first item of a later share (n * k /
// shares), never in the middle of one. Each thread's first item waits (at
// most 5 s) until every thread has begun one, so none can finish its share
// and claim another's first (a worker that finds the job before the caller
// runs may otherwise take every item; the test then skips if a thread never
// came, e.g. a pool kept busy).
TEST(ParallelForTest, EachThreadStartsOnItsOwnShare) {
  const int threads = ParallelismDegree();
  if (threads < 2) GTEST_SKIP() << "one thread: no pool";
  constexpr int kItems = 64;
  const int shares = std::min(kItems, threads);
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex mu;
  std::map<std::thread::id, int> first_item;
  std::atomic<int> started{0};
  ParallelFor(kItems, [&](int i) {
    bool first;
    {
      std::lock_guard<std::mutex> lock(mu);
      first = first_item.emplace(std::this_thread::get_id(), i).second;
    }
    if (!first) return;
    started.fetch_add(1);
    const auto give_up =
        std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (started.load() < shares &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::yield();
    }
  });
  if (started.load() < shares) {
    GTEST_SKIP() << started.load() << " of " << shares
                 << " threads joined in 5 s";
  }
  ASSERT_EQ(first_item.count(caller), 1u);
  EXPECT_EQ(first_item.at(caller), 0);
  for (const auto& [thread, item] : first_item) {
    if (thread == caller) continue;
    bool starts_a_share = false;
    for (int k = 1; k < shares; ++k) {
      starts_a_share |= item == kItems * k / shares;
    }
    EXPECT_TRUE(starts_a_share) << "a worker began at item " << item;
  }
}

// ParallelRange: blocks cover [0, n) exactly once, in order within a block,
// at least `grain` long except for the last, and a range within one grain
// runs as one call on the caller's thread.
TEST(ParallelRangeTest, CoversTheRangeOnceInBlocksOfAtLeastTheGrain) {
  for (int64_t n : {0, 1, 7, 100, 4096, 100000}) {
    for (int64_t grain : {1, 3, 64, 1000, 1 << 20}) {
      std::vector<std::atomic<int>> runs(n);
      std::atomic<int> calls{0}, short_blocks{0};
      ParallelRange(n, grain, [&](int64_t begin, int64_t end) {
        calls.fetch_add(1);
        if (end - begin < grain && end != n) short_blocks.fetch_add(1);
        for (int64_t i = begin; i < end; ++i) runs[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(runs[i].load(), 1) << "n=" << n << " grain=" << grain;
      }
      EXPECT_EQ(short_blocks.load(), 0) << "n=" << n << " grain=" << grain;
      if (n > 0 && n <= grain) {
        EXPECT_EQ(calls.load(), 1);
      }
      EXPECT_LE(calls.load(), 4 * ParallelismDegree());
    }
  }
}

TEST(ParallelRangeTest, SmallRangesStayOnTheCaller) {
  const std::thread::id caller = std::this_thread::get_id();
  bool on_caller = false;
  ParallelRange(100, kElementwiseGrain, [&](int64_t, int64_t) {
    on_caller = std::this_thread::get_id() == caller;
  });
  EXPECT_TRUE(on_caller);
}

}  // namespace
}  // namespace gradtape
