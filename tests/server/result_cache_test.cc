// ResultCache (server/result_cache.h): verdicts, kept results, eviction to
// tombstones, the tombstone bound, acknowledgement, unsequenced sessions.
#include "server/result_cache.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradtape::server {
namespace {

using ::testing::HasSubstr;
using Verdict = ResultCache::Verdict;

// A result of about `bytes` encoded bytes (a tensor's data).
v1::CommandResult DataResult(int64_t seq, size_t bytes) {
  v1::CommandResult result;
  result.set_seq(seq);
  result.mutable_tensor()->set_dtype(v1::DTYPE_INT32);
  result.mutable_tensor()->set_data(std::string(bytes, 'x'));
  return result;
}

ResultCache::Options Small(int64_t max_bytes, int64_t max_tombstones = 100) {
  ResultCache::Options options;
  options.max_bytes = max_bytes;
  options.max_tombstones = max_tombstones;
  return options;
}

TEST(ResultCacheTest, ClassifiesBySeq) {
  ResultCache cache;
  EXPECT_EQ(cache.Classify(0), Verdict::kBadSeq);
  EXPECT_EQ(cache.Classify(-1), Verdict::kBadSeq);
  EXPECT_EQ(cache.Classify(1), Verdict::kApply);
  cache.Applied(5, nullptr);
  EXPECT_EQ(cache.last_applied(), 5);
  EXPECT_EQ(cache.Classify(5), Verdict::kDuplicate);
  EXPECT_EQ(cache.Classify(2), Verdict::kDuplicate);
  EXPECT_EQ(cache.Classify(6), Verdict::kApply);
  EXPECT_EQ(cache.commands_applied(), 1);
  EXPECT_THAT(std::string(ResultCache::BadSeqError(0, "MatMul").message()),
              HasSubstr("MatMul (command 0): seq must be at least 1"));
}

TEST(ResultCacheTest, DuplicatesGetTheKeptResultOrNone) {
  ResultCache cache;
  cache.Applied(1, nullptr);
  const v1::CommandResult kept = DataResult(2, 10);
  cache.Applied(2, &kept);
  v1::CommandResult answer;
  EXPECT_FALSE(cache.AnswerDuplicate(1, "PutTensor", &answer));  // none
  ASSERT_TRUE(cache.AnswerDuplicate(2, "FetchTensor", &answer));
  EXPECT_TRUE(answer.duplicate());
  EXPECT_EQ(answer.seq(), 2);
  EXPECT_EQ(answer.tensor().data(), kept.tensor().data());
  EXPECT_EQ(cache.duplicates(), 2);
  EXPECT_EQ(cache.kept_results(), 1);
}

TEST(ResultCacheTest, EvictsOldestFirstLeavingTombstones) {
  const int64_t one =
      DataResult(1, 1000).ByteSizeLong() + ResultCache::kEntryOverheadBytes;
  ResultCache cache(Small(2 * one));
  for (int64_t seq = 1; seq <= 3; ++seq) {
    const v1::CommandResult r = DataResult(seq, 1000);
    cache.Applied(seq, &r);
  }
  EXPECT_EQ(cache.kept_results(), 2);
  EXPECT_EQ(cache.kept_bytes(), 2 * one);
  EXPECT_EQ(cache.tombstones(), 1);
  v1::CommandResult answer;
  ASSERT_TRUE(cache.AnswerDuplicate(1, "FetchTensor", &answer));
  EXPECT_TRUE(answer.duplicate());
  EXPECT_EQ(answer.error().code(),
            static_cast<int>(absl::StatusCode::kAborted));
  EXPECT_THAT(answer.error().message(),
              HasSubstr("FetchTensor (command 1): already applied; its result "
                        "is no longer kept: fetch again"));
  ASSERT_TRUE(cache.AnswerDuplicate(3, "FetchTensor", &answer));
  EXPECT_TRUE(answer.has_tensor());
  // Larger than the whole cache: a tombstone at once.
  const v1::CommandResult huge = DataResult(4, 10 * 1000);
  cache.Applied(4, &huge);
  EXPECT_EQ(cache.kept_results(), 2);
  ASSERT_TRUE(cache.AnswerDuplicate(4, "FetchTensor", &answer));
  EXPECT_EQ(answer.error().code(),
            static_cast<int>(absl::StatusCode::kAborted));
}

TEST(ResultCacheTest, TombstonesAreBoundedAndTheFloorIsReported) {
  ResultCache cache(Small(/*max_bytes=*/0, /*max_tombstones=*/3));
  for (int64_t seq = 1; seq <= 10; ++seq) {
    const v1::CommandResult r = DataResult(seq, 10);
    cache.Applied(seq, &r);  // never kept: a tombstone each
  }
  EXPECT_EQ(cache.tombstones(), 3);  // 8, 9, 10
  v1::CommandResult answer;
  ASSERT_TRUE(cache.AnswerDuplicate(9, "FetchTensor", &answer));
  EXPECT_THAT(answer.error().message(), HasSubstr("no longer kept"));
  ASSERT_TRUE(cache.AnswerDuplicate(2, "FetchTensor", &answer));
  EXPECT_EQ(answer.error().code(),
            static_cast<int>(absl::StatusCode::kAborted));
  EXPECT_THAT(answer.error().message(),
              HasSubstr("whether it had a result is no longer known"));
  // Seqs without a result above the floor still get none.
  cache.Applied(11, nullptr);
  EXPECT_FALSE(cache.AnswerDuplicate(11, "Stats", &answer));
}

TEST(ResultCacheTest, AcknowledgeDropsResultsAndTombstones) {
  const int64_t one =
      DataResult(1, 100).ByteSizeLong() + ResultCache::kEntryOverheadBytes;
  ResultCache cache(Small(2 * one, /*max_tombstones=*/2));
  for (int64_t seq = 1; seq <= 6; ++seq) {
    const v1::CommandResult r = DataResult(seq, 100);
    cache.Applied(seq, &r);
  }
  // Kept 5, 6; tombstones 3, 4; floor 2.
  cache.Acknowledge(4);
  EXPECT_EQ(cache.tombstones(), 0);
  EXPECT_EQ(cache.kept_results(), 2);
  v1::CommandResult answer;
  EXPECT_FALSE(cache.AnswerDuplicate(1, "FetchTensor", &answer));
  EXPECT_FALSE(cache.AnswerDuplicate(3, "FetchTensor", &answer));
  cache.Acknowledge(2);  // never decreases
  EXPECT_EQ(cache.acknowledged(), 4);
  cache.Acknowledge(100);  // at most the last applied seq
  EXPECT_EQ(cache.acknowledged(), 6);
  EXPECT_EQ(cache.kept_results(), 0);
  EXPECT_EQ(cache.kept_bytes(), 0);
}

TEST(ResultCacheTest, UnsequencedAppliesEverythingAndKeepsNothing) {
  ResultCache::Options options;
  options.sequenced = false;
  ResultCache cache(options);
  const v1::CommandResult r = DataResult(3, 10);
  cache.Applied(3, &r);
  EXPECT_EQ(cache.Classify(3), Verdict::kApply);
  EXPECT_EQ(cache.Classify(0), Verdict::kApply);
  EXPECT_EQ(cache.kept_results(), 0);
  EXPECT_EQ(cache.commands_applied(), 1);
}

}  // namespace
}  // namespace gradtape::server
