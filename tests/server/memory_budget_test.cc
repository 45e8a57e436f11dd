// The server-wide memory budget (server/memory_budget.h): where the limit
// is read from (cgroup v2, cgroup v1, MemTotal, under a fake root), the
// defaults derived from it, and what the server charges to it besides
// tensors: kept results (server/result_cache.h) and replies being sent
// (server/batch.h, ReplyMemory).
#include "server/memory_budget.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/ops/ops.h"
#include "core/session/session.h"
#include "core/tensor/tensor.h"
#include "gradtape/v1/tape_service.pb.h"
#include "gtest/gtest.h"
#include "server/batch.h"
#include "server/result_cache.h"
#include "tests/temp_dir.h"

namespace gradtape::server {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// A directory laid out like "/" for DetectMemoryLimit, removed with
// everything below it.
class FakeRoot {
 public:
  ~FakeRoot() {
    std::error_code ignored;
    for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
      std::filesystem::remove_all(entry.path(), ignored);
    }
  }
  void Write(const std::string& path, const std::string& text) {
    const std::filesystem::path full =
        std::filesystem::path(dir_.path()) / path;
    std::filesystem::create_directories(full.parent_path());
    std::ofstream(full) << text;
  }
  std::string root() const { return dir_.path(); }

 private:
  testing::TempDir dir_;
};

constexpr char kMeminfo[] =
    "MemTotal:       24576000 kB\nMemFree:        1000 kB\n";

// The buffer pool's share: an eighth of the budget, at most 1 GiB, and
// 1 GiB when there is no budget.
TEST(BufferPoolLimitTest, AnEighthOfTheBudgetAtMostOneGiB) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  EXPECT_EQ(BufferPoolLimitFor(1024 * kMiB), 128 * kMiB);
  EXPECT_EQ(BufferPoolLimitFor(64 * kMiB), 8 * kMiB);
  EXPECT_EQ(BufferPoolLimitFor(int64_t{64} << 30), kMaxBufferPoolBytes);
  EXPECT_EQ(BufferPoolLimitFor(0), kMaxBufferPoolBytes);
}

TEST(DetectMemoryLimitTest, MemTotalWithoutACgroupLimit) {
  FakeRoot fake;
  fake.Write("proc/meminfo", kMeminfo);
  fake.Write("proc/self/cgroup", "0::/\n");
  fake.Write("sys/fs/cgroup/memory.max", "max\n");
  absl::StatusOr<MemoryLimit> limit = DetectMemoryLimit(fake.root());
  ASSERT_TRUE(limit.ok()) << limit.status();
  EXPECT_EQ(limit->bytes, int64_t{24576000} * 1024);
  EXPECT_EQ(limit->source, "MemTotal of /proc/meminfo");
}

TEST(DetectMemoryLimitTest,
     CgroupV2TakesTheSmallestOfTheCgroupAndItsAncestors) {
  FakeRoot fake;
  fake.Write("proc/meminfo", kMeminfo);
  fake.Write("proc/self/cgroup", "0::/kubepods/pod1/c1\n");
  fake.Write("sys/fs/cgroup/kubepods/memory.max", std::to_string(8 * kGiB));
  fake.Write("sys/fs/cgroup/kubepods/pod1/memory.max",
             std::to_string(2 * kGiB) + "\n");
  fake.Write("sys/fs/cgroup/kubepods/pod1/c1/memory.max", "max\n");
  absl::StatusOr<MemoryLimit> limit = DetectMemoryLimit(fake.root());
  ASSERT_TRUE(limit.ok()) << limit.status();
  EXPECT_EQ(limit->bytes, 2 * kGiB);
  EXPECT_TRUE(absl::StartsWith(limit->source, "cgroup v2 "));
  EXPECT_TRUE(absl::EndsWith(limit->source, "kubepods/pod1/memory.max"))
      << limit->source;
}

TEST(DetectMemoryLimitTest, CgroupV1MemoryControllerAndItsUnlimitedValue) {
  FakeRoot fake;
  fake.Write("proc/meminfo", kMeminfo);
  fake.Write("proc/self/cgroup",
             "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n");
  fake.Write("sys/fs/cgroup/memory/memory.limit_in_bytes",
             "9223372036854771712\n");  // v1's "no limit"
  fake.Write("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
             std::to_string(3 * kGiB));
  absl::StatusOr<MemoryLimit> limit = DetectMemoryLimit(fake.root());
  ASSERT_TRUE(limit.ok()) << limit.status();
  EXPECT_EQ(limit->bytes, 3 * kGiB);
  EXPECT_TRUE(absl::StartsWith(limit->source, "cgroup v1 ")) << limit->source;
}

TEST(DetectMemoryLimitTest, ANamespacedPathFallsBackToTheMount) {
  // Inside a container, /proc/self/cgroup may name the host's path while
  // the mount is the container's own cgroup.
  FakeRoot fake;
  fake.Write("proc/meminfo", kMeminfo);
  fake.Write("proc/self/cgroup", "4:memory:/kubepods/pod9/c9\n");
  fake.Write("sys/fs/cgroup/memory/memory.limit_in_bytes",
             std::to_string(512 * kMiB));
  absl::StatusOr<MemoryLimit> limit = DetectMemoryLimit(fake.root());
  ASSERT_TRUE(limit.ok()) << limit.status();
  EXPECT_EQ(limit->bytes, 512 * kMiB);
}

TEST(DetectMemoryLimitTest, NothingReadableIsNotFound) {
  FakeRoot fake;
  fake.Write("proc/self/cgroup", "0::/\n");
  absl::StatusOr<MemoryLimit> limit = DetectMemoryLimit(fake.root());
  EXPECT_EQ(limit.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(
      absl::StrContains(limit.status().message(), "--memory_budget_mb"));
}

TEST(MemorySettingsTest, DerivedDefaultsFitTheBudget) {
  const MemoryLimit pod{10 * kGiB, "cgroup v1 /x"};
  absl::StatusOr<MemorySettings> s = ResolveMemorySettings(-1, -1, -1, pod);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->budget_bytes, 8 * kGiB);  // a fifth kept for the process
  EXPECT_EQ(s->session_limit_bytes, 2 * kGiB);
  EXPECT_EQ(s->max_tensor_bytes, 2 * kGiB);
  EXPECT_TRUE(absl::StrContains(DescribeMemorySettings(*s),
                                "memory budget 8192 MiB (derived: 10240 MiB "
                                "from cgroup v1 /x"))
      << DescribeMemorySettings(*s);
  // A small pod keeps at least 256 MiB of headroom.
  s = ResolveMemorySettings(-1, -1, -1, MemoryLimit{512 * kMiB, "x"});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->budget_bytes, 256 * kMiB);
  // An explicit session limit leaves the tensor cap at the budget's quarter
  // (a tensor past the session limit is refused with that limit's message).
  s = ResolveMemorySettings(-1, 16, -1, pod);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->session_limit_bytes, 16 * kMiB);
  EXPECT_EQ(s->max_tensor_bytes, 2 * kGiB);
  // A large machine: the tensor cap stays at 16 GiB.
  s = ResolveMemorySettings(-1, -1, -1, MemoryLimit{1024 * kGiB, "x"});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->max_tensor_bytes, 16 * kGiB);
}

TEST(MemorySettingsTest, ExplicitFlagsWin) {
  absl::StatusOr<MemorySettings> s = ResolveMemorySettings(
      1000, 0, 300, absl::NotFoundError("not read when the budget is given"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->budget_bytes, 1000 * kMiB);
  EXPECT_EQ(s->session_limit_bytes, 0);
  EXPECT_EQ(s->max_tensor_bytes, 300 * kMiB);
  // No budget at all: the old behaviour, a session limit only if asked.
  s = ResolveMemorySettings(0, -1, -1, MemoryLimit{kGiB, "x"});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->budget_bytes, 0);
  EXPECT_EQ(s->session_limit_bytes, 0);
  EXPECT_EQ(s->max_tensor_bytes, 16 * kGiB);
}

TEST(MemorySettingsTest, BadValuesAreRefused) {
  const MemoryLimit any{kGiB, "x"};
  for (auto [budget, session, tensor] :
       {std::tuple{-2, -1, -1}, std::tuple{-1, -5, -1},
        std::tuple{-1, -1, 0}}) {
    absl::StatusOr<MemorySettings> s =
        ResolveMemorySettings(budget, session, tensor, any);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument)
        << budget << " " << session << " " << tensor;
  }
  EXPECT_EQ(ResolveMemorySettings(-1, -1, -1, absl::NotFoundError("x"))
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

// Sets the process's budget to what is in use plus `room` for one test.
class ProcessBudget {
 public:
  explicit ProcessBudget(int64_t room) {
    ProcessMemoryAccount()->set_limit(ProcessMemoryAccount()->bytes() + room);
  }
  ~ProcessBudget() { ProcessMemoryAccount()->set_limit(0); }
};

v1::CommandResult ResultOfBytes(int64_t seq, size_t bytes) {
  v1::CommandResult result;
  result.set_seq(seq);
  result.mutable_tensor()->set_data(std::string(bytes, 'x'));
  return result;
}

TEST(KeptResultsTest, SetWithTheBudgetToAnEighthOfIt) {
  SetKeptResultsLimit(800 * kMiB);
  EXPECT_EQ(KeptResultsAccount()->limit(), 100 * kMiB);
  EXPECT_EQ(KeptResultsAccount()->parent(), ProcessMemoryAccount().get());
  SetKeptResultsLimit(0);
  EXPECT_EQ(KeptResultsAccount()->limit(), 0);
}

TEST(KeptResultsTest, ChargedToTheBudgetAndDroppedWhenItIsFull) {
  const int64_t before = ProcessMemoryAccount()->bytes();
  {
    ResultCache cache;
    const v1::CommandResult small = ResultOfBytes(1, 1000);
    cache.Applied(1, &small);
    EXPECT_EQ(cache.kept_results(), 1);
    EXPECT_EQ(ProcessMemoryAccount()->bytes() - before, cache.kept_bytes());
    {
      ProcessBudget budget(50000);
      const v1::CommandResult large = ResultOfBytes(2, 100000);
      cache.Applied(2, &large);  // does not fit the budget: a tombstone
      EXPECT_EQ(cache.kept_results(), 1);
      EXPECT_EQ(cache.tombstones(), 1);
      // Nor does one that fits the budget but not the kept results' share.
      KeptResultsAccount()->set_limit(KeptResultsAccount()->bytes() + 20000);
      const v1::CommandResult share = ResultOfBytes(4, 30000);
      cache.Applied(4, &share);
      KeptResultsAccount()->set_limit(0);
      EXPECT_EQ(cache.kept_results(), 1);
      EXPECT_EQ(cache.tombstones(), 2);
      v1::CommandResult answer;
      cache.AnswerDuplicate(2, "FetchTensor", &answer);
      EXPECT_EQ(answer.error().code(),
                static_cast<int>(absl::StatusCode::kAborted));
    }
    cache.Acknowledge(1);
    EXPECT_EQ(ProcessMemoryAccount()->bytes(), before);
    const v1::CommandResult fifth = ResultOfBytes(5, 2000);
    cache.Applied(5, &fifth);
    EXPECT_GT(ProcessMemoryAccount()->bytes(), before);
  }
  // A closed session's cache refunds everything.
  EXPECT_EQ(ProcessMemoryAccount()->bytes(), before);
}

TEST(ReplyMemoryTest, AFetchTheBudgetCannotCopyIsRefusedAndTheBatchGoesOn) {
  Session session(DefaultRegistry(), SessionOptions());
  v1::CommandBatch batch;
  auto* put = batch.add_commands();
  put->set_seq(1);
  put->mutable_put()->set_id(1);
  put->mutable_put()->mutable_value()->set_dtype(v1::DTYPE_FLOAT32);
  put->mutable_put()->mutable_value()->add_shape(25000);
  put->mutable_put()->mutable_value()->set_data(std::string(100000, '\0'));
  v1::BatchReply first;
  ASSERT_TRUE(ApplyBatch(session, batch, 1 << 20, nullptr, &first).ok());
  ASSERT_EQ(first.results_size(), 0);

  v1::CommandBatch fetches;
  for (int64_t seq : {2, 3}) {
    auto* fetch = fetches.add_commands();
    fetch->set_seq(seq);
    fetch->mutable_fetch()->set_id(1);
  }
  const int64_t before = ProcessMemoryAccount()->bytes();
  {
    // Room for one copy of the reply (twice 100 KB), not for two.
    ProcessBudget budget(300000);
    ReplyMemory memory;
    v1::BatchReply reply;
    ASSERT_TRUE(ApplyBatch(session, fetches, 1 << 20, nullptr, &reply, {},
                           nullptr, RpcMethod::kRun, nullptr, &memory)
                    .ok());
    ASSERT_EQ(reply.results_size(), 2);
    EXPECT_TRUE(reply.results(0).has_tensor());
    const v1::Error& refused = reply.results(1).error();
    EXPECT_EQ(refused.code(),
              static_cast<int>(absl::StatusCode::kResourceExhausted));
    for (const char* part :
         {"FetchTensor (command 3)", "server memory budget exceeded",
          "the reply's copy of tensor id 1 (float32[25000])",
          "fetch it in chunks", "nothing was applied"}) {
      EXPECT_TRUE(absl::StrContains(refused.message(), part))
          << part << " in " << refused.message();
    }
    // The reply holds its charge (twice its result) until it is let go.
    EXPECT_GE(memory.bytes(), 200000);
    EXPECT_EQ(ProcessMemoryAccount()->bytes() - before, memory.bytes());
    EXPECT_EQ(ReplyMemory::TotalBytes(), memory.bytes());
  }
  EXPECT_EQ(ProcessMemoryAccount()->bytes(), before);
  EXPECT_EQ(ReplyMemory::TotalBytes(), 0);
}

}  // namespace
}  // namespace gradtape::server
