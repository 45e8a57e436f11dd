// MemoryAccount with a parent (a tenant's account over its sessions): a
// charge must fit both limits, refusals name the account that refused, and
// refunds reach the parent. The process's account (the server-wide budget)
// is the root of every session's.
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "core/ops/ops.h"
#include "core/session/session.h"
#include "core/tensor/tensor.h"
#include "gtest/gtest.h"

namespace gradtape {
namespace {

// Puts a float64[1024] (8 KiB) at `id`.
absl::Status Put8KiB(Session& session, int64_t seq, int64_t id) {
  return session.PutTensor(seq, id, DType::kFloat64, {1024},
                           std::string(8 << 10, 0));
}

TEST(MemoryAccountTest, ChargeMustFitParentAndChild) {
  auto tenant = std::make_shared<MemoryAccount>(nullptr, "tenant 'acme'");
  tenant->set_limit(1000);
  MemoryAccount a(tenant), b(tenant);
  a.set_limit(800);
  EXPECT_TRUE(a.TryCharge(600));
  EXPECT_EQ(tenant->bytes(), 600);
  // Fits b's own (unlimited) budget, not the tenant's: nothing is charged.
  EXPECT_EQ(b.TryChargeOrRefuser(500), tenant.get());
  EXPECT_EQ(b.bytes(), 0);
  EXPECT_EQ(tenant->bytes(), 600);
  // Over a's own limit: a refuses, the tenant is not touched.
  EXPECT_EQ(a.TryChargeOrRefuser(300), &a);
  EXPECT_EQ(tenant->bytes(), 600);
  EXPECT_EQ(b.remaining(), 400);
  EXPECT_EQ(a.remaining(), 200);
  EXPECT_TRUE(b.TryCharge(400));
  EXPECT_EQ(a.remaining(), 0);
  // Refunds reach the parent; a raised limit applies to the next charge.
  a.Add(-600);
  EXPECT_EQ(tenant->bytes(), 400);
  tenant->set_limit(2000);
  EXPECT_TRUE(b.TryCharge(1500));
  EXPECT_EQ(tenant->bytes(), 1900);
}

TEST(MemoryAccountTest, TwoSessionsShareTheTenantLimit) {
  auto tenant = std::make_shared<MemoryAccount>(nullptr, "tenant 'acme'");
  tenant->set_limit(ChargedBytes(8 << 10) * 3 / 2);  // one 8 KiB tensor
  SessionOptions options;
  options.parent_account = tenant;
  Session first(DefaultRegistry(), options);
  Session second(DefaultRegistry(), options);
  ASSERT_TRUE(Put8KiB(first, 1, 1).ok());
  absl::Status refused = Put8KiB(second, 1, 1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(),
                                "tenant 'acme' memory limit exceeded"))
      << refused;
  // Freed in the first session, the tenant's bytes are available again.
  ASSERT_TRUE(first.ReleaseTensors(2, {1}).ok());
  EXPECT_TRUE(Put8KiB(second, 3, 1).ok());
}

// Sets the process's budget to what is in use plus `room` for one test.
class ProcessBudget {
 public:
  explicit ProcessBudget(int64_t room) {
    ProcessMemoryAccount()->set_limit(ProcessMemoryAccount()->bytes() + room);
  }
  ~ProcessBudget() { ProcessMemoryAccount()->set_limit(0); }
};

TEST(ProcessMemoryAccountTest, EverySessionChargesTheProcess) {
  const int64_t before = ProcessMemoryAccount()->bytes();
  {
    Session session(DefaultRegistry(), SessionOptions());
    ASSERT_TRUE(Put8KiB(session, 1, 1).ok());
    EXPECT_GE(ProcessMemoryAccount()->bytes() - before, ChargedBytes(8 << 10));
  }
  EXPECT_EQ(ProcessMemoryAccount()->bytes(), before);
}

TEST(ProcessMemoryAccountTest, AllocationsWithoutAnAccountChargeTheProcess) {
  ASSERT_EQ(CurrentMemoryAccount(), nullptr);
  const int64_t before = ProcessMemoryAccount()->bytes();
  {
    absl::StatusOr<Tensor> t = Tensor::Empty(DType::kFloat32, {1000});
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(ProcessMemoryAccount()->bytes() - before, ChargedBytes(4000));
    MemoryCharge bookkeeping(100);
    EXPECT_EQ(ProcessMemoryAccount()->bytes() - before,
              ChargedBytes(4000) + 100);
  }
  EXPECT_EQ(ProcessMemoryAccount()->bytes(), before);
  ProcessBudget budget(1000);
  absl::StatusOr<Tensor> refused = Tensor::Empty(DType::kFloat32, {1000});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "server memory budget exceeded: float32[1000]"))
      << refused.status();
}

TEST(ProcessMemoryAccountTest, TheBudgetRefusesWhatNoSessionLimitWould) {
  SessionOptions options;
  options.memory_limit_bytes = ChargedBytes(8 << 10) * 4;  // each fits its own
  Session first(DefaultRegistry(), options);
  Session second(DefaultRegistry(), options);
  // Room for one 8 KiB tensor (and the sessions' bookkeeping), not two.
  ProcessBudget budget(ChargedBytes(8 << 10) * 3 / 2);
  ASSERT_TRUE(Put8KiB(first, 1, 1).ok());
  absl::Status refused = Put8KiB(second, 1, 1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  for (const char* part :
       {"PutTensor (command 1, id 1)",
        "server memory budget exceeded: float64[1024]",
        "in use by the whole server, budget", "(--memory_budget_mb)"}) {
    EXPECT_TRUE(absl::StrContains(refused.message(), part))
        << part << " in " << refused;
  }
  // Nothing half-applied: the id is poisoned, no tensor exists, and the
  // session goes on once memory is free.
  EXPECT_EQ(second.Stats(2).live_tensors, 0);
  ASSERT_TRUE(first.ReleaseTensors(2, {1}).ok());
  EXPECT_TRUE(Put8KiB(second, 3, 2).ok());
  // An op's output is refused the same way, before its kernel writes.
  const int32_t dims = 4096;
  const float value = 1;
  ASSERT_TRUE(first
                  .PutTensor(4, 10, DType::kInt32, {1},
                             std::string(reinterpret_cast<const char*>(&dims),
                                         sizeof(dims)))
                  .ok());
  ASSERT_TRUE(first
                  .PutTensor(5, 11, DType::kFloat32, {},
                             std::string(reinterpret_cast<const char*>(&value),
                                         sizeof(value)))
                  .ok());
  absl::Status fill = first.ExecuteOp(6, "Fill", {10, 11}, {12}, {});
  EXPECT_EQ(fill.code(), absl::StatusCode::kResourceExhausted) << fill;
  EXPECT_TRUE(
      absl::StrContains(fill.message(), "Fill (command 6, input ids [10,11])"))
      << fill;
  EXPECT_TRUE(absl::StrContains(fill.message(),
                                "server memory budget exceeded: float32[4096]"))
      << fill;
}

// The buffer pool (SetBufferPoolLimit): a freed buffer of a poolable size
// stays charged to the pool's account (a child of the process's), the next
// tensor of its size class takes it, and the pool gives way to the budget.
class BufferPoolOn {
 public:
  explicit BufferPoolOn(int64_t limit) {
    ReleaseBufferPool();
    SetBufferPoolLimit(limit);
  }
  ~BufferPoolOn() { SetBufferPoolLimit(0); }
};

TEST(BufferPoolTest, FreedBuffersAreReusedAndStayCharged) {
  BufferPoolOn pool(int64_t{64} << 20);
  const int64_t before = ProcessMemoryAccount()->bytes();
  const BufferPoolStats start = GetBufferPoolStats();
  const void* data = nullptr;
  {
    Tensor t = Tensor::Empty(DType::kFloat32, {1 << 18}).value();  // 1 MiB
    data = t.raw_data();
  }
  EXPECT_EQ(GetBufferPoolStats().cached_bytes, 1 << 20);
  EXPECT_EQ(BufferPoolAccount()->bytes(), 1 << 20);
  EXPECT_EQ(ProcessMemoryAccount()->bytes() - before, 1 << 20);
  // The same size class (1 MiB rounds to itself; 0.9 MiB rounds up to it).
  Tensor again = Tensor::Uninitialized(DType::kFloat32, {240000}).value();
  EXPECT_EQ(again.raw_data(), data);
  EXPECT_EQ(GetBufferPoolStats().hits, start.hits + 1);
  EXPECT_EQ(BufferPoolAccount()->bytes(), 0);
  EXPECT_EQ(ProcessMemoryAccount()->bytes() - before, ChargedBytes(960000));
  EXPECT_EQ(ChargedBytes(960000), ChargedBytes(1 << 20));
  // A reused buffer from Empty is zeroed again.
  std::memset(again.raw_mutable_data(), 0xA5, again.num_bytes());
  again = Tensor();
  Tensor zeroed = Tensor::Empty(DType::kFloat32, {1 << 18}).value();
  EXPECT_EQ(zeroed.raw_data(), data);
  for (int64_t i = 0; i < zeroed.num_elements(); ++i) {
    ASSERT_EQ(zeroed.data<float>()[i], 0.0f) << i;
  }
}

TEST(BufferPoolTest, TheLimitBoundsWhatIsCached) {
  BufferPoolOn pool(int64_t{3} << 20);
  {
    std::vector<Tensor> tensors;
    for (int i = 0; i < 5; ++i) {
      tensors.push_back(Tensor::Empty(DType::kFloat32, {1 << 18}).value());
    }
  }
  EXPECT_EQ(GetBufferPoolStats().cached_bytes, int64_t{3} << 20);
  SetBufferPoolLimit(0);  // off: everything cached is freed
  EXPECT_EQ(GetBufferPoolStats().cached_bytes, 0);
  EXPECT_EQ(BufferPoolAccount()->bytes(), 0);
}

TEST(BufferPoolTest, TrimFreesWhatNothingTookForAPeriod) {
  BufferPoolOn pool(int64_t{64} << 20);
  TrimBufferPool();  // a new period
  { Tensor a = Tensor::Empty(DType::kFloat32, {1 << 18}).value(); }
  { Tensor b = Tensor::Empty(DType::kFloat32, {1 << 19}).value(); }
  ASSERT_EQ(GetBufferPoolStats().cached_bytes, 3 << 20);
  // Cached in this period: kept by the first trim.
  EXPECT_EQ(TrimBufferPool(), 0);
  // The 1 MiB buffer is taken and given back in the next period; the 2 MiB
  // one is not, and the trim after that frees it alone.
  { Tensor again = Tensor::Empty(DType::kFloat32, {1 << 18}).value(); }
  EXPECT_EQ(TrimBufferPool(), 2 << 20);
  EXPECT_EQ(GetBufferPoolStats().cached_bytes, 1 << 20);
  EXPECT_EQ(TrimBufferPool(), 1 << 20);
  EXPECT_EQ(BufferPoolAccount()->bytes(), 0);
}

TEST(BufferPoolTest, TheBudgetEmptiesThePoolBeforeRefusing) {
  BufferPoolOn pool(int64_t{64} << 20);
  { Tensor t = Tensor::Empty(DType::kFloat32, {1 << 20}).value(); }  // 4 MiB
  ASSERT_EQ(GetBufferPoolStats().cached_bytes, 4 << 20);
  // Room for 3 MiB beyond what is charged now, pool included: a 6 MiB
  // tensor fits only once the pool has let its 4 MiB go.
  ProcessBudget budget(int64_t{3} << 20);
  absl::StatusOr<Tensor> t = Tensor::Empty(DType::kFloat32, {3 << 19});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(GetBufferPoolStats().cached_bytes, 0);
  // Within the budget the pool caches nothing it cannot fit.
  t = Tensor();
  EXPECT_LE(ProcessMemoryAccount()->bytes(), ProcessMemoryAccount()->limit());
}

}  // namespace
}  // namespace gradtape
