// Exactly-once application in a batch (server/batch.h states the contract,
// server/result_cache.h keeps the records): the verdict on each command,
// the answer of one that is not applied now, and the records of one that
// is. ExactlyOnce wraps the session's ResultCache, which may be null (an
// unsequenced caller: every command applied, nothing counted).
//
// Not thread-safe: the caller holds the session's lock, which guards the
// ResultCache.
#ifndef GRADTAPE_SERVER_EXACTLY_ONCE_H_
#define GRADTAPE_SERVER_EXACTLY_ONCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/session/session.h"
#include "gradtape/v1/tape_service.pb.h"
#include "server/metrics.h"
#include "server/result_cache.h"

namespace gradtape::server {

// The command's name in messages: the op of an ExecuteOp, else its kind's
// message type ("FetchTensor", "Gradient").
std::string CommandName(const v1::Command& cmd);

// The ids a command fills (poisoned when it is refused as out of order).
std::vector<int64_t> OutputIds(const v1::Command& cmd);

class ExactlyOnce {
 public:
  // `results` and `metrics` may be null.
  ExactlyOnce(Session& session, ResultCache* results, Metrics* metrics)
      : session_(session), results_(results), metrics_(metrics) {}

  // The batch's ack_seq: kept results at or below it are dropped.
  void Acknowledge(int64_t ack_seq);
  // kApply, or why `seq` is not applied now.
  ResultCache::Verdict Classify(int64_t seq) const;
  // Answers a command that is not applied (verdict other than kApply) in
  // `result`, without running it: a duplicate's kept result (counted), or
  // the error for out of order (its free output ids poisoned with it),
  // unknown or bad seq.
  void AnswerUnapplied(ResultCache::Verdict verdict, const v1::Command& cmd,
                       v1::CommandResult* result);
  // An applied Stats result gets commands_applied (counting itself) and
  // duplicate_commands.
  void CountInStats(v1::CommandResult* result) const;
  // Records that `seq` was applied, with the result its reply got (null:
  // none, answered by the reply's last_seq): what its duplicates get.
  void Applied(int64_t seq, const v1::CommandResult* result);
  // The last applied seq: the cache's for a sequenced session, else the
  // session's last processed one.
  int64_t LastSeq() const;

 private:
  Session& session_;
  ResultCache* const results_;
  Metrics* const metrics_;
};

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_EXACTLY_ONCE_H_
