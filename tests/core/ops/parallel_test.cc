// ParallelFor (core/ops/parallel.h): every item exactly once, from one caller
// and from several callers at once (as sessions on different server threads
// would), including more callers than the pool has workers.
#include "core/ops/parallel.h"

#include <atomic>
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

}  // namespace
}  // namespace gradtape
