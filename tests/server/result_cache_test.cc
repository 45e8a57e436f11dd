// ResultCache (server/result_cache.h): verdicts, runs of applied seqs (a
// duplicate told from a command never applied, and their bound), kept
// results, eviction to tombstones, the tombstone bound, acknowledgement,
// unsequenced sessions.
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

// The answer to a duplicate without a result: seq and duplicate, no kind.
void ExpectMark(const v1::CommandResult& answer, int64_t seq) {
  EXPECT_EQ(answer.seq(), seq);
  EXPECT_TRUE(answer.duplicate());
  EXPECT_EQ(answer.kind_case(), v1::CommandResult::KIND_NOT_SET)
      << answer.ShortDebugString();
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
  EXPECT_EQ(cache.Classify(2), Verdict::kOutOfOrder);  // never applied
  EXPECT_EQ(cache.Classify(6), Verdict::kApply);
  EXPECT_EQ(cache.commands_applied(), 1);
  EXPECT_THAT(std::string(ResultCache::BadSeqError(0, "MatMul").message()),
              HasSubstr("MatMul (command 0): seq must be at least 1"));
}

TEST(ResultCacheTest, DuplicatesGetTheKeptResultOrAMark) {
  ResultCache cache;
  cache.Applied(1, nullptr);
  const v1::CommandResult kept = DataResult(2, 10);
  cache.Applied(2, &kept);
  v1::CommandResult answer = DataResult(7, 3);  // overwritten
  cache.AnswerDuplicate(1, "PutTensor", &answer);
  ExpectMark(answer, 1);
  cache.AnswerDuplicate(2, "FetchTensor", &answer);
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
  cache.AnswerDuplicate(1, "FetchTensor", &answer);
  EXPECT_TRUE(answer.duplicate());
  EXPECT_EQ(answer.error().code(),
            static_cast<int>(absl::StatusCode::kAborted));
  EXPECT_THAT(answer.error().message(),
              HasSubstr("FetchTensor (command 1): already applied; its result "
                        "is no longer kept: fetch again"));
  cache.AnswerDuplicate(3, "FetchTensor", &answer);
  EXPECT_TRUE(answer.has_tensor());
  // Larger than the whole cache: a tombstone at once.
  const v1::CommandResult huge = DataResult(4, 10 * 1000);
  cache.Applied(4, &huge);
  EXPECT_EQ(cache.kept_results(), 2);
  cache.AnswerDuplicate(4, "FetchTensor", &answer);
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
  cache.AnswerDuplicate(9, "FetchTensor", &answer);
  EXPECT_THAT(answer.error().message(), HasSubstr("no longer kept"));
  cache.AnswerDuplicate(2, "FetchTensor", &answer);
  EXPECT_EQ(answer.error().code(),
            static_cast<int>(absl::StatusCode::kAborted));
  EXPECT_THAT(answer.error().message(),
              HasSubstr("whether it had a result is no longer known"));
  // Seqs without a result above the floor still get none.
  cache.Applied(11, nullptr);
  cache.AnswerDuplicate(11, "Stats", &answer);
  ExpectMark(answer, 11);
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
  cache.AnswerDuplicate(1, "FetchTensor", &answer);  // the client has it
  ExpectMark(answer, 1);
  cache.AnswerDuplicate(3, "FetchTensor", &answer);
  ExpectMark(answer, 3);
  cache.Acknowledge(2);  // never decreases
  EXPECT_EQ(cache.acknowledged(), 4);
  cache.Acknowledge(100);  // at most the last applied seq
  EXPECT_EQ(cache.acknowledged(), 6);
  EXPECT_EQ(cache.kept_results(), 0);
  EXPECT_EQ(cache.kept_bytes(), 0);
}

// Seqs 1-3 and 7-8 applied (4-6 never: a stopped batch's rest, or another
// writer's): a resend of 2 is a duplicate, of 5 out of order.
TEST(ResultCacheTest, RunsTellADuplicateFromACommandNeverApplied) {
  ResultCache cache;
  for (int64_t seq : {1, 2, 3, 7, 8}) cache.Applied(seq, nullptr);
  EXPECT_EQ(cache.runs(), 2);
  EXPECT_EQ(cache.Classify(2), Verdict::kDuplicate);
  EXPECT_EQ(cache.Classify(3), Verdict::kDuplicate);
  EXPECT_EQ(cache.Classify(4), Verdict::kOutOfOrder);
  EXPECT_EQ(cache.Classify(6), Verdict::kOutOfOrder);
  EXPECT_EQ(cache.Classify(7), Verdict::kDuplicate);
  EXPECT_EQ(cache.Classify(9), Verdict::kApply);
  const absl::Status error = cache.OutOfOrderError(5, "Reshape");
  EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(error.message()),
              HasSubstr("Reshape (command 5): seq 5 is out of order (last "
                        "applied 8); not applied"));
  // Acknowledging results does not forget what was applied.
  cache.Acknowledge(8);
  EXPECT_EQ(cache.Classify(5), Verdict::kOutOfOrder);
  EXPECT_EQ(cache.Classify(2), Verdict::kDuplicate);
}

TEST(ResultCacheTest, AContiguousStreamIsOneRun) {
  ResultCache::Options options;
  options.max_runs = 1;
  ResultCache cache(options);
  for (int64_t seq = 1; seq <= 10000; ++seq) cache.Applied(seq, nullptr);
  EXPECT_EQ(cache.runs(), 1);
  EXPECT_EQ(cache.runs_floor(), 0);
  EXPECT_EQ(cache.Classify(1), Verdict::kDuplicate);
}

// Past max_runs the oldest run is dropped: at or below its last seq the
// cache says it cannot tell (ABORTED), never a guess.
TEST(ResultCacheTest, RunsAreBoundedAndBelowTheFloorTheCacheCannotTell) {
  ResultCache::Options options;
  options.max_runs = 2;
  ResultCache cache(options);
  for (int64_t seq : {1, 3, 5, 7}) cache.Applied(seq, nullptr);
  EXPECT_EQ(cache.runs(), 2);  // 5, 7
  EXPECT_EQ(cache.runs_floor(), 3);
  EXPECT_EQ(cache.Classify(1), Verdict::kUnknown);
  EXPECT_EQ(cache.Classify(2), Verdict::kUnknown);
  EXPECT_EQ(cache.Classify(3), Verdict::kUnknown);
  EXPECT_EQ(cache.Classify(4), Verdict::kOutOfOrder);
  EXPECT_EQ(cache.Classify(5), Verdict::kDuplicate);
  EXPECT_EQ(cache.Classify(6), Verdict::kOutOfOrder);
  EXPECT_EQ(cache.Classify(7), Verdict::kDuplicate);
  const absl::Status error = cache.UnknownError(2, "MatMul");
  EXPECT_EQ(error.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(error.message()),
              HasSubstr("MatMul (command 2): seq 2 is at or below the last "
                        "applied seq 7, and whether it was applied is no "
                        "longer known"));
  EXPECT_THAT(std::string(error.message()), HasSubstr("not applied now"));
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
