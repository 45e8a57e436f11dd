// Exactly-once application over a real channel (proto: "Exactly-once
// application"): every command of a batch is answered; duplicates are not
// applied and get their kept result or a duplicate mark, evicted results
// get ABORTED, ack_seq frees results, seqs below 1 fail, a seq at or below
// the last applied one that was never applied (out of order: a second
// writer, or a seq sent late) fails and poisons its outputs,
// unsequenced sessions apply repeats, KeepAlive reports the last applied
// seq, a batch cut by its deadline and resent applies only the rest, and
// Run and Stream share one seq space. Also the server-status trailer
// (gradtape-server-status) on every non-OK status the server sends.
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/ops/ops.h"
#include "core/session/session.h"
#include "gmock/gmock.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/batch.h"
#include "server/result_cache.h"
#include "server/server.h"
#include "tests/server/server_test_util.h"

namespace gradtape::server {
namespace {

using ::testing::HasSubstr;

// Variable commands: VarHandleOp "v" (float64 [1]) at id 1, assigned
// `initial` (seqs 1 to 3); id 2 holds the increment 1.0 (seq 4).
Batch SetupVariable(double initial) {
  Batch batch(1);
  batch
      .Exec(1, "VarHandleOp", {}, {1},
            {{"dtype", TypeAttr(v1::DTYPE_FLOAT64)},
             {"shape", IntsAttr({1})},
             {"shared_name", StringAttr("v")}})
      .Put(2, 1001, Doubles({1}, {initial}))
      .Exec(3, "AssignVariableOp", {1, 1001}, {})
      .Put(4, 2, Doubles({1}, {1.0}));
  return batch;
}

// Adds 1 to the variable (seq), reads it into `read_id` (seq + 1) and
// fetches it (seq + 2).
Batch& AddOneAndRead(Batch& batch, int64_t seq, int64_t read_id) {
  return batch.Exec(seq, "AssignAddVariableOp", {1, 2}, {})
      .Exec(seq + 1, "ReadVariableOp", {1}, {read_id})
      .Fetch(seq + 2, read_id);
}

// The trailer `key`, or "" if absent.
std::string Trailer(const grpc::ClientContext& context, const char* key) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(key);
  if (it == trailers.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

std::string ServerStatusTrailer(const grpc::ClientContext& context) {
  return Trailer(context, "gradtape-server-status");
}

// The answer contract (proto: "Exactly-once application"): every command of
// `batch` has exactly one result in `reply` (its result, a duplicate's
// answer or an error) except the ones in `silent`, which the test applied
// now, succeeded and return no data: those have none, and reply.last_seq
// covers them. Returns the results by seq.
std::map<int64_t, const v1::CommandResult*> ExpectEveryCommandAnswered(
    const v1::CommandBatch& batch, const v1::BatchReply& reply,
    const std::set<int64_t>& silent = {}) {
  std::map<int64_t, const v1::CommandResult*> by_seq;
  for (const v1::CommandResult& result : reply.results()) {
    EXPECT_TRUE(by_seq.emplace(result.seq(), &result).second)
        << "two results for seq " << result.seq();
  }
  std::set<int64_t> seqs;
  for (const v1::Command& cmd : batch.commands()) {
    seqs.insert(cmd.seq());
    if (silent.count(cmd.seq()) > 0) {
      EXPECT_EQ(by_seq.count(cmd.seq()), 0u) << "seq " << cmd.seq();
      EXPECT_LE(cmd.seq(), reply.last_seq());
      continue;
    }
    auto it = by_seq.find(cmd.seq());
    EXPECT_NE(it, by_seq.end())
        << "command " << cmd.seq()
        << " has no answer: " << reply.ShortDebugString();
    if (it == by_seq.end()) continue;
    const v1::CommandResult& result = *it->second;
    EXPECT_TRUE(result.kind_case() != v1::CommandResult::KIND_NOT_SET ||
                result.duplicate())
        << result.ShortDebugString();
  }
  for (const auto& [seq, result] : by_seq) {
    EXPECT_EQ(seqs.count(seq), 1u)
        << "a result for seq " << seq << ", which the batch does not hold";
  }
  return by_seq;
}

// A duplicate without a result: seq and duplicate, no kind.
void ExpectMark(const v1::CommandResult* result, int64_t seq) {
  ASSERT_NE(result, nullptr);
  EXPECT_EQ(result->seq(), seq);
  EXPECT_TRUE(result->duplicate());
  EXPECT_EQ(result->kind_case(), v1::CommandResult::KIND_NOT_SET)
      << result->ShortDebugString();
}

class ExactlyOnceTest : public ServerTest {
 protected:
  // One Stream carrying `batches`; replies in order.
  std::vector<v1::BatchReply> Stream(const SessionCreds& creds,
                                     const std::vector<Batch>& batches) {
    grpc::Status status;
    std::vector<v1::BatchReply> replies =
        StreamBatches(creds, batches, &status);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return replies;
  }

  v1::SessionStats Stats(const SessionCreds& creds, int64_t seq) {
    v1::BatchReply reply = Run(creds, Batch().Stats(seq));
    const v1::CommandResult* stats = Find(reply, seq);
    return stats != nullptr ? stats->stats() : v1::SessionStats();
  }

  int64_t LastApplied(const SessionCreds& creds) {
    grpc::ClientContext context;
    SetDeadline(&context);
    Authorize(creds, &context);
    v1::KeepAliveResponse response;
    grpc::Status status =
        stub_->KeepAlive(&context, v1::KeepAliveRequest(), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.last_applied_seq();
  }
};

// The reply of a Stream batch is lost (the client never read it) and the
// client resends the batch twice on a new Stream: the AssignAddVariableOp
// is applied once, and every resend gets the kept fetch result as a
// duplicate.
TEST_F(ExactlyOnceTest, StreamBatchResentAfterALostReplyAppliesNothingTwice) {
  SessionCreds s = NewSession();
  Run(s, SetupVariable(10.0));
  Batch step(2);
  AddOneAndRead(step, 5, 3);
  std::vector<v1::BatchReply> first = Stream(s, {step});
  ASSERT_EQ(first.size(), 1u);
  const v1::CommandResult* original = Find(first[0], 7);
  ASSERT_NE(original, nullptr);
  EXPECT_FALSE(original->duplicate());
  EXPECT_EQ(AsDoubles(original->tensor()), std::vector<double>{11.0});

  std::vector<v1::BatchReply> resent = Stream(s, {step, step});
  ASSERT_EQ(resent.size(), 2u);
  for (const v1::BatchReply& reply : resent) {
    EXPECT_EQ(reply.last_seq(), 7);
    auto answers = ExpectEveryCommandAnswered(step.proto(), reply);
    ASSERT_EQ(reply.results_size(), 3) << reply.ShortDebugString();
    ExpectMark(answers[5], 5);  // applied, no result
    ExpectMark(answers[6], 6);
    const v1::CommandResult* kept = answers[7];
    ASSERT_NE(kept, nullptr);
    EXPECT_TRUE(kept->duplicate());
    EXPECT_EQ(AsDoubles(kept->tensor()), std::vector<double>{11.0});
  }
  // The variable was incremented once: 11, not 13.
  Batch read(3);
  read.Exec(8, "ReadVariableOp", {1}, {4}).Fetch(9, 4);
  v1::BatchReply now = Run(s, read);
  const v1::CommandResult* value = Find(now, 9);
  ASSERT_NE(value, nullptr);
  EXPECT_EQ(AsDoubles(value->tensor()), std::vector<double>{11.0});
  const v1::SessionStats stats = Stats(s, 10);
  EXPECT_EQ(stats.duplicate_commands(), 6);
  EXPECT_EQ(stats.commands_applied(), 10);  // seqs 1 to 10, Stats included
}

// A failed command's error is kept too: its duplicate gets the same error
// (duplicate set) and poisons nothing more; a new command still runs.
TEST_F(ExactlyOnceTest, DuplicatesGetTheKeptErrorAndChangeNothing) {
  SessionCreds s = NewSession();
  Batch batch;
  batch.Put(1, 1, Doubles({1}, {2.0}))
      .Exec(2, "NoSuchOp", {1}, {2})
      .Exec(3, "Neg", {1}, {3})
      .Fetch(4, 3);
  v1::BatchReply reply = Run(s, batch);
  ASSERT_EQ(reply.results_size(), 2) << reply.ShortDebugString();
  const v1::CommandResult original = reply.results(0);
  EXPECT_EQ(original.seq(), 2);
  EXPECT_EQ(original.error().code(), grpc::StatusCode::NOT_FOUND);

  v1::BatchReply again = Run(s, batch);
  EXPECT_EQ(again.last_seq(), 4);
  auto answers = ExpectEveryCommandAnswered(batch.proto(), again);
  ASSERT_EQ(again.results_size(), 4) << again.ShortDebugString();
  ExpectMark(answers[1], 1);
  ExpectMark(answers[3], 3);
  ASSERT_NE(answers[2], nullptr);
  EXPECT_TRUE(answers[2]->duplicate());
  EXPECT_EQ(answers[2]->error().code(), original.error().code());
  EXPECT_EQ(answers[2]->error().message(), original.error().message());
  ASSERT_NE(answers[4], nullptr);
  EXPECT_TRUE(answers[4]->duplicate());
  EXPECT_EQ(AsDoubles(answers[4]->tensor()), std::vector<double>{-2.0});
  // Id 1 still holds its tensor (the resent Put was not applied: no
  // "id 1 is in use" error), id 3 too.
  v1::BatchReply after = Run(s, Batch().Fetch(5, 1).Fetch(6, 3));
  ASSERT_EQ(after.results_size(), 2) << after.ShortDebugString();
  EXPECT_EQ(AsDoubles(after.results(0).tensor()), std::vector<double>{2.0});
  EXPECT_FALSE(after.results(0).duplicate());
}

class SmallResultCacheTest : public ExactlyOnceTest {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.result_cache_bytes = 20000;
    StartServer(options);
  }
};

// A fetch whose result the server no longer keeps: its duplicate gets
// ABORTED (duplicate set) and nothing is poisoned; fetching again with a
// new seq works. Eviction is oldest first; a result larger than the whole
// cache is never kept.
TEST_F(SmallResultCacheTest, EvictedFetchIsAbortedAndARefetchWorks) {
  SessionCreds s = NewSession();
  const std::vector<double> small(1000, 1.5);  // 8000 bytes of data
  const std::vector<double> large(3000, 2.5);  // 24000: more than the cache
  Batch batch;
  batch.Put(1, 1, Doubles({1000}, small))
      .Put(2, 2, Doubles({3000}, large))
      .Fetch(3, 1)   // evicted by the two after it
      .Fetch(4, 1)   // kept
      .Fetch(5, 1)   // kept
      .Fetch(6, 2);  // never kept
  v1::BatchReply reply = Run(s, batch);
  ASSERT_EQ(reply.results_size(), 4) << reply.ShortDebugString();

  v1::BatchReply again = Run(s, batch);
  ExpectEveryCommandAnswered(batch.proto(), again);
  ASSERT_EQ(again.results_size(), 6);
  ExpectMark(Find(again, 1), 1);  // the puts had no result
  ExpectMark(Find(again, 2), 2);
  for (int64_t seq : {3, 6}) {
    const v1::CommandResult* gone = Find(again, seq);
    ASSERT_NE(gone, nullptr);
    EXPECT_TRUE(gone->duplicate());
    EXPECT_EQ(gone->error().code(), grpc::StatusCode::ABORTED);
    EXPECT_THAT(gone->error().message(),
                HasSubstr(absl::StrCat("FetchTensor (command ", seq,
                                       "): already applied; its result is no "
                                       "longer kept: fetch again")));
  }
  for (int64_t seq : {4, 5}) {
    const v1::CommandResult* kept = Find(again, seq);
    ASSERT_NE(kept, nullptr);
    EXPECT_TRUE(kept->duplicate());
    EXPECT_EQ(AsDoubles(kept->tensor()), small);
  }
  v1::BatchReply refetch = Run(s, Batch().Fetch(7, 1).Fetch(8, 2));
  ASSERT_EQ(refetch.results_size(), 2) << refetch.ShortDebugString();
  EXPECT_EQ(AsDoubles(refetch.results(0).tensor()), small);
  EXPECT_EQ(AsDoubles(refetch.results(1).tensor()), large);
}

// ack_seq frees the results up to it: their duplicates get a mark only.
TEST_F(ExactlyOnceTest, AckSeqFreesKeptResults) {
  SessionCreds s = NewSession();
  Batch fetch;
  fetch.Put(1, 1, Doubles({1}, {4.0})).Fetch(2, 1).Fetch(3, 1);
  Run(s, fetch);
  Batch ack;
  ack.Stats(4);
  v1::CommandBatch acked = ack.proto();
  acked.set_ack_seq(2);
  v1::BatchReply reply;
  grpc::ClientContext context;
  SetDeadline(&context);
  Authorize(s, &context);
  ASSERT_TRUE(stub_->Run(&context, acked, &reply).ok());

  v1::BatchReply again = Run(s, fetch);
  // Seq 2 was acknowledged: a mark; seq 3 was not: its kept result.
  ExpectEveryCommandAnswered(fetch.proto(), again);
  ASSERT_EQ(again.results_size(), 3) << again.ShortDebugString();
  ExpectMark(Find(again, 1), 1);
  ExpectMark(Find(again, 2), 2);
  const v1::CommandResult* kept = Find(again, 3);
  ASSERT_NE(kept, nullptr);
  EXPECT_TRUE(kept->duplicate());
  EXPECT_EQ(AsDoubles(kept->tensor()), std::vector<double>{4.0});
  EXPECT_EQ(Stats(s, 5).duplicate_commands(), 3);
}

// A seq below 1 fails its command alone (nothing applied, nothing poisoned);
// the batch goes on.
TEST_F(ExactlyOnceTest, SeqBelowOneFailsWithInvalidArgument) {
  SessionCreds s = NewSession();
  Batch batch;
  batch.Put(0, 1, Doubles({1}, {1.0}))
      .Put(-5, 2, Doubles({1}, {1.0}))
      .Put(1, 3, Doubles({1}, {3.0}))
      .Fetch(2, 3);
  v1::BatchReply reply = Run(s, batch);
  EXPECT_EQ(reply.last_seq(), 2);
  ASSERT_EQ(reply.results_size(), 3) << reply.ShortDebugString();
  for (int i : {0, 1}) {
    EXPECT_EQ(reply.results(i).error().code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(reply.results(i).error().message(),
                HasSubstr(absl::StrCat("PutTensor (command ", i == 0 ? 0 : -5,
                                       "): seq must be at least 1")));
  }
  EXPECT_EQ(AsDoubles(reply.results(2).tensor()), std::vector<double>{3.0});
  // Ids 1 and 2 are free (never stored, not poisoned).
  v1::BatchReply after = Run(s, Batch()
                                    .Put(3, 1, Doubles({1}, {5.0}))
                                    .Put(4, 2, Doubles({1}, {6.0}))
                                    .Fetch(5, 1));
  ASSERT_EQ(after.results_size(), 1) << after.ShortDebugString();
  EXPECT_EQ(AsDoubles(after.results(0).tensor()), std::vector<double>{5.0});
  EXPECT_EQ(LastApplied(s), 5);
}

// CreateSessionRequest.unsequenced: seqs are labels and repeats apply.
TEST_F(ExactlyOnceTest, UnsequencedSessionsApplyRepeats) {
  v1::CreateSessionRequest request;
  request.set_unsequenced(true);
  SessionCreds s;
  ASSERT_TRUE(CreateSession(request, &s).ok());
  Run(s, SetupVariable(0.0));
  Batch step;
  AddOneAndRead(step, 0, 3);
  step.Release(0, {3});
  for (int i = 1; i <= 3; ++i) {
    v1::BatchReply reply = Run(s, step);
    ASSERT_EQ(reply.results_size(), 1) << reply.ShortDebugString();
    EXPECT_FALSE(reply.results(0).duplicate());
    EXPECT_EQ(AsDoubles(reply.results(0).tensor()),
              std::vector<double>{static_cast<double>(i)});
  }
  const v1::SessionStats stats = Stats(s, 1);
  EXPECT_EQ(stats.duplicate_commands(), 0);
  EXPECT_EQ(stats.commands_applied(), 4 + 3 * 4 + 1);
}

// KeepAlive answers the last applied seq: 0 first; a failed command counts;
// duplicates and commands refused as out of order do not move it.
TEST_F(ExactlyOnceTest, KeepAliveGivesTheLastAppliedSeq) {
  SessionCreds s = NewSession();
  EXPECT_EQ(LastApplied(s), 0);
  Batch batch;
  batch.Put(3, 1, Doubles({1}, {1.0})).Exec(7, "NoSuchOp", {1}, {2});
  EXPECT_EQ(Run(s, batch).last_seq(), 7);
  EXPECT_EQ(LastApplied(s), 7);
  EXPECT_EQ(Run(s, Batch().Fetch(5, 1)).last_seq(), 7);  // out of order
  EXPECT_EQ(Run(s, Batch().Stats(7)).last_seq(), 7);     // a duplicate
  EXPECT_EQ(LastApplied(s), 7);
}

// One seq space across Run and Stream: what a Run applied is a duplicate
// on a Stream and the other way round.
TEST_F(ExactlyOnceTest, RunAndStreamShareOneSeqSpace) {
  SessionCreds s = NewSession();
  Run(s, SetupVariable(0.0));
  Batch step;
  AddOneAndRead(step, 5, 3);
  Run(s, step);
  std::vector<v1::BatchReply> streamed = Stream(s, {step});
  ASSERT_EQ(streamed.size(), 1u);
  ExpectEveryCommandAnswered(step.proto(), streamed[0]);
  ASSERT_EQ(streamed[0].results_size(), 3);
  const v1::CommandResult* fetched = Find(streamed[0], 7);
  ASSERT_NE(fetched, nullptr);
  EXPECT_TRUE(fetched->duplicate());
  Batch next;
  AddOneAndRead(next, 8, 4);
  Stream(s, {next});
  v1::BatchReply by_run = Run(s, next);
  ExpectEveryCommandAnswered(next.proto(), by_run);
  ASSERT_EQ(by_run.results_size(), 3);
  const v1::CommandResult* value = Find(by_run, 10);
  ASSERT_NE(value, nullptr);
  EXPECT_TRUE(value->duplicate());
  EXPECT_EQ(AsDoubles(value->tensor()), std::vector<double>{2.0});
  EXPECT_EQ(Stats(s, 11).duplicate_commands(), 6);
}

// Issue 25: the batch [Reshape seq 2, GatherV2 seq 4] sent after a put
// with seq 3. The Reshape's seq is below the last applied one and was never
// applied: it fails with FAILED_PRECONDITION "out of order" (not silence),
// its output id is poisoned with that error, and the GatherV2 that reads it
// quotes it (not "unknown tensor id"). Sent again with new seqs, both run.
TEST_F(ExactlyOnceTest, OutOfOrderCommandFailsAndItsReaderQuotesIt) {
  SessionCreds s = NewSession();
  Run(s, Batch().Put(1, 1, Doubles({2, 2}, {1.0, 2.0, 3.0, 4.0})));
  Run(s, Batch().Put(3, 3, Value<int32_t>(v1::DTYPE_INT32, {2}, {3, 0})));
  Batch late;
  late.Exec(2, "Reshape", {1}, {10}, {{"shape", IntsAttr({4})}})
      .Exec(4, "GatherV2", {10, 3}, {11})
      .Fetch(5, 11);
  v1::BatchReply reply = Run(s, late);
  EXPECT_EQ(reply.last_seq(), 5);
  auto answers = ExpectEveryCommandAnswered(late.proto(), reply);
  const v1::CommandResult* reshape = answers[2];
  ASSERT_NE(reshape, nullptr);
  EXPECT_FALSE(reshape->duplicate());
  EXPECT_EQ(reshape->error().code(), grpc::StatusCode::FAILED_PRECONDITION);
  const std::string refused =
      "Reshape (command 2): seq 2 is out of order (last applied 3); not "
      "applied";
  EXPECT_THAT(reshape->error().message(), HasSubstr(refused));
  for (int64_t seq : {4, 5}) {
    const v1::CommandResult* reader = answers[seq];
    ASSERT_NE(reader, nullptr);
    EXPECT_EQ(reader->error().code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(reader->error().message(), HasSubstr(refused));
    EXPECT_THAT(reader->error().message(),
                ::testing::Not(HasSubstr("unknown tensor id")));
  }
  EXPECT_THAT(answers[4]->error().message(),
              HasSubstr("GatherV2 (command 4): tensor id 10 is poisoned: "
                        "command 2"));
  // Nothing was applied: sent again above the last applied seq, it runs.
  Batch again;
  again.Exec(6, "Reshape", {1}, {10}, {{"shape", IntsAttr({4})}})
      .Exec(7, "GatherV2", {10, 3}, {12})
      .Fetch(8, 12);
  v1::BatchReply rerun = Run(s, again);
  auto rerun_answers =
      ExpectEveryCommandAnswered(again.proto(), rerun, /*silent=*/{6, 7});
  ASSERT_NE(rerun_answers[8], nullptr);
  EXPECT_EQ(AsDoubles(rerun_answers[8]->tensor()),
            (std::vector<double>{4.0, 1.0}));
  const v1::SessionStats stats = Stats(s, 9);
  EXPECT_EQ(stats.duplicate_commands(), 0);
  EXPECT_EQ(stats.commands_applied(), 8);  // all but the refused seq 2
}

// Issue 25: two Streams write to one session at once, with interleaved
// seqs (one odd, one even), each sending its batches of fetches in
// lockstep. Whatever the interleaving, every fetch of every batch is
// answered: its value (applied), or FAILED_PRECONDITION "out of order"
// (its seq was below the other writer's); none is left without a word, and
// no seq is applied twice or refused and applied.
TEST_F(ExactlyOnceTest, TwoConcurrentWritersGetAnAnswerForEveryCommand) {
  SessionCreds s = NewSession();
  Run(s, Batch().Put(1, 1, Doubles({1}, {7.0})));
  constexpr int kBatches = 30;
  constexpr int kFetches = 5;
  struct Writer {
    std::vector<Batch> batches;
    std::vector<v1::BatchReply> replies;
    grpc::Status status;
  };
  Writer writers[2];
  for (int w = 0; w < 2; ++w) {
    for (int b = 0; b < kBatches; ++b) {
      Batch batch(b + 1);
      for (int f = 0; f < kFetches; ++f) {
        batch.Fetch(2 + 2 * (b * kFetches + f) + w, 1);
      }
      writers[w].batches.push_back(batch);
    }
  }
  std::promise<void> go;
  std::shared_future<void> start = go.get_future().share();
  const auto write = [&](Writer& writer) {
    grpc::ClientContext context;
    SetDeadline(&context);
    Authorize(s, &context);
    auto stream = stub_->Stream(&context);
    start.wait();
    for (const Batch& batch : writer.batches) {
      v1::BatchReply reply;
      if (!stream->Write(batch.proto()) || !stream->Read(&reply)) break;
      writer.replies.push_back(reply);
    }
    stream->WritesDone();
    writer.status = stream->Finish();
  };
  std::thread first(write, std::ref(writers[0]));
  std::thread second(write, std::ref(writers[1]));
  go.set_value();
  first.join();
  second.join();

  std::set<int64_t> applied, refused;
  for (const Writer& writer : writers) {
    EXPECT_TRUE(writer.status.ok()) << writer.status.error_message();
    ASSERT_EQ(writer.replies.size(), static_cast<size_t>(kBatches));
    for (int b = 0; b < kBatches; ++b) {
      const v1::CommandBatch& batch = writer.batches[b].proto();
      const v1::BatchReply& reply = writer.replies[b];
      auto answers = ExpectEveryCommandAnswered(batch, reply);
      for (const v1::Command& cmd : batch.commands()) {
        const v1::CommandResult* answer = answers[cmd.seq()];
        if (answer == nullptr) continue;
        EXPECT_FALSE(answer->duplicate());  // disjoint seqs
        if (answer->has_tensor()) {
          EXPECT_EQ(AsDoubles(answer->tensor()), std::vector<double>{7.0});
          EXPECT_LE(cmd.seq(), reply.last_seq());
          applied.insert(cmd.seq());
          continue;
        }
        EXPECT_EQ(answer->error().code(), grpc::StatusCode::FAILED_PRECONDITION)
            << answer->ShortDebugString();
        EXPECT_THAT(answer->error().message(),
                    HasSubstr(absl::StrCat("FetchTensor (command ", cmd.seq(),
                                           "): seq ", cmd.seq(),
                                           " is out of order (last applied ")));
        refused.insert(cmd.seq());
      }
    }
  }
  EXPECT_EQ(applied.size() + refused.size(), 2u * kBatches * kFetches);
  const int64_t stats_seq = 2 + 2 * kBatches * kFetches + 2;
  const v1::SessionStats stats = Stats(s, stats_seq);
  EXPECT_EQ(stats.commands_applied(),
            1 + static_cast<int64_t>(applied.size()) + 1);
  EXPECT_EQ(stats.duplicate_commands(), 0);
}

// A Run cut by its deadline in the middle of a batch, then resent whole
// without a deadline: the commands before the cut (and the stopped MatMul,
// processed) are duplicates, only the rest is applied: the variable is
// incremented once per AssignAdd, not twice.
TEST_F(ExactlyOnceTest, BatchCutByItsDeadlineThenResentAppliesOnlyTheRest) {
  SessionCreds s = NewSession();
  Run(s, SetupVariable(0.0));
  Batch setup;
  setup.Put(5, 1000, Value<float>(v1::DTYPE_FLOAT32, {1, 1}, {0.5f}))
      .Exec(6, "BroadcastTo", {1000}, {10},
            {{"shape", IntsAttr({8192, 8192})}});
  Run(s, setup);
  Batch batch;
  batch.Exec(7, "AssignAddVariableOp", {1, 2}, {})
      .Exec(8, "MatMul", {10, 10}, {11})  // seconds on any core
      .Exec(9, "AssignAddVariableOp", {1, 2}, {})
      .Exec(10, "ReadVariableOp", {1}, {3})
      .Fetch(11, 3);
  {
    grpc::ClientContext context;
    Authorize(s, &context);
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    v1::BatchReply reply;
    grpc::Status status = stub_->Run(&context, batch.proto(), &reply);
    ASSERT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << status.error_message();
    // On a loaded machine the client's own deadline may fire before the
    // server's answer arrives (then there is no trailer).
    const std::string trailer = Trailer(context, "gradtape-last-applied-seq");
    if (!trailer.empty()) {
      EXPECT_EQ(trailer, "8");
      EXPECT_EQ(ServerStatusTrailer(context), "1");
    }
  }
  // The stopped MatMul counts as applied once its kernel stopped.
  for (const absl::Time end = absl::Now() + absl::Seconds(30);
       LastApplied(s) < 8 && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(LastApplied(s), 8);
  v1::BatchReply resent = Run(s, batch);
  EXPECT_EQ(resent.last_seq(), 11);
  const v1::CommandResult* stopped = Find(resent, 8);
  ASSERT_NE(stopped, nullptr);
  EXPECT_TRUE(stopped->duplicate());
  EXPECT_EQ(stopped->error().code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  const v1::CommandResult* value = Find(resent, 11);
  ASSERT_NE(value, nullptr);
  EXPECT_FALSE(value->duplicate());
  EXPECT_EQ(AsDoubles(value->tensor()), std::vector<double>{2.0});
  EXPECT_EQ(Stats(s, 12).duplicate_commands(), 2);
}

// A duplicate's kept result counts against the reply's bytes like any
// result: one that no longer fits gets RESOURCE_EXHAUSTED (duplicate set),
// and a resend in a batch of its own gets the value.
TEST(ExactlyOnceReplyTest, DuplicateResultsCountAgainstTheReplyLimit) {
  Session session(DefaultRegistry(), SessionOptions());
  ResultCache results;
  const std::vector<double> values(700, 3.0);  // 5600 bytes of data
  Batch first;
  first.Put(1, 1, Doubles({700}, values)).Fetch(2, 1);
  v1::BatchReply reply;
  ASSERT_TRUE(ApplyBatch(session, first.proto(), 8192, nullptr, &reply, {},
                         nullptr, RpcMethod::kRun, &results)
                  .ok());
  ASSERT_EQ(reply.results_size(), 1);
  // Resent behind another fetch of the same size: the first fits, the
  // duplicate does not.
  Batch both;
  both.Fetch(3, 1).Fetch(2, 1);
  v1::BatchReply full;
  ASSERT_TRUE(ApplyBatch(session, both.proto(), 8192, nullptr, &full, {},
                         nullptr, RpcMethod::kRun, &results)
                  .ok());
  ASSERT_EQ(full.results_size(), 2) << full.ShortDebugString();
  const v1::CommandResult& refused = full.results(1);
  EXPECT_EQ(refused.seq(), 2);
  EXPECT_TRUE(refused.duplicate());
  EXPECT_EQ(refused.error().code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.ShortDebugString();
  v1::BatchReply alone;
  ASSERT_TRUE(ApplyBatch(session, Batch().Fetch(2, 1).proto(), 8192, nullptr,
                         &alone, {}, nullptr, RpcMethod::kRun, &results)
                  .ok());
  ASSERT_EQ(alone.results_size(), 1);
  EXPECT_TRUE(alone.results(0).duplicate());
  EXPECT_EQ(AsDoubles(alone.results(0).tensor()), values);
}

// --- The server-status trailer ------------------------------------------

class ServerStatusTrailerTest : public ServerTest {};

TEST_F(ServerStatusTrailerTest, EveryNonOkStatusOfTheServerCarriesIt) {
  SessionCreds s = NewSession();
  {  // OK: no trailer.
    grpc::ClientContext context;
    SetDeadline(&context);
    Authorize(s, &context);
    v1::KeepAliveResponse response;
    ASSERT_TRUE(
        stub_->KeepAlive(&context, v1::KeepAliveRequest(), &response).ok());
    EXPECT_EQ(ServerStatusTrailer(context), "");
  }
  {  // KeepAlive of an unknown session: NOT_FOUND.
    grpc::ClientContext context;
    SetDeadline(&context);
    Authorize({"0123456789abcdef0123456789abcdef", "x"}, &context);
    v1::KeepAliveResponse response;
    grpc::Status status =
        stub_->KeepAlive(&context, v1::KeepAliveRequest(), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(ServerStatusTrailer(context), "1");
  }
  {  // CreateSession with a malformed id: INVALID_ARGUMENT.
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::CreateSessionRequest request;
    request.set_session_id("nothex");
    v1::CreateSessionResponse response;
    grpc::Status status = stub_->CreateSession(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(ServerStatusTrailer(context), "1");
  }
  {  // Run with a wrong token: PERMISSION_DENIED.
    grpc::ClientContext context;
    SetDeadline(&context);
    Authorize({s.id, "wrong"}, &context);
    v1::BatchReply reply;
    grpc::Status status =
        stub_->Run(&context, Batch().Stats(1).proto(), &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(ServerStatusTrailer(context), "1");
  }
  {  // Stream of an unknown session: NOT_FOUND.
    grpc::ClientContext context;
    SetDeadline(&context);
    Authorize({"0123456789abcdef0123456789abcdef", "x"}, &context);
    auto stream = stub_->Stream(&context);
    stream->WritesDone();
    v1::BatchReply reply;
    while (stream->Read(&reply)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(ServerStatusTrailer(context), "1");
  }
  {  // Stream with a message that is not a batch: INVALID_ARGUMENT (proto3
     // strings must be UTF-8: the typed stub sends it, the server cannot
     // parse it).
    grpc::ClientContext context;
    SetDeadline(&context);
    Authorize(s, &context);
    auto stream = stub_->Stream(&context);
    v1::CommandBatch bad;
    v1::Command* cmd = bad.add_commands();
    cmd->set_seq(1);
    cmd->mutable_execute()->set_op("\xff");
    stream->Write(bad);
    stream->WritesDone();
    v1::BatchReply reply;
    while (stream->Read(&reply)) {
    }
    EXPECT_EQ(stream->Finish().error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(ServerStatusTrailer(context), "1");
  }
}

// The drain's UNAVAILABLE (an open Stream ends with it) is the server's: it
// carries the trailer.
TEST_F(ServerStatusTrailerTest, DrainStatusesCarryIt) {
  SessionCreds s = NewSession();
  grpc::ClientContext context;
  Authorize(s, &context);
  SetDeadline(&context);
  auto stream = stub_->Stream(&context);
  ASSERT_TRUE(stream->Write(Batch(1).Stats(1).proto()));
  v1::BatchReply reply;
  ASSERT_TRUE(stream->Read(&reply));
  std::thread drain([this] { server_->Drain(absl::Seconds(10)); });
  while (stream->Read(&reply)) {
  }
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
  EXPECT_EQ(ServerStatusTrailer(context), "1");
  drain.join();
}

}  // namespace
}  // namespace gradtape::server
