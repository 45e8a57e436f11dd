// libFuzzer target: the input is a gradtape.v1.CommandBatch (binary proto),
// applied with server::ApplyBatch to one live core Session, the same path a
// Run or Stream call takes after authentication. The session is kept across
// inputs (so state gets deep: tensors, tapes, variables, checkpoints built by
// earlier inputs) and replaced every kResetEvery inputs so it stays bounded.
// Unparsable input is ignored.
//
// Exactly-once: the session is sequenced (a server::ResultCache, small so
// that eviction and tombstones happen). Most inputs are renumbered to seqs
// above the last applied one, as a client's would be, so they apply (and
// seeds compose; their ack_seq stays as given, mostly 0, so results pile up
// and get evicted); inputs whose batch_id is 3 mod 4 keep their own seqs,
// so duplicates (with kept, evicted and forgotten results), seqs
// below 1, seqs out of order (below the last applied, never applied; and
// below the runs floor) and repeats inside a batch are fuzzed too; every
// command of a batch must be answered (proto: "Exactly-once application").
// Inputs whose batch_id is 2 mod 4 are renumbered and their ack_seq is
// relative to the last applied seq before the batch (0: everything so far,
// -2: all but the last two, 1: one above it), so acknowledgements land
// among the kept results and tombstones whatever the session's history.
//
// Random byte mutations rarely keep a protobuf parsable (length prefixes),
// so a custom mutator edits most inputs as messages (through protobuf
// reflection): it sets an integer anywhere in the batch to a size that
// overflows or exhausts memory, an op name to a registered op, an enum to
// an unknown value, or copies, drops and reorders commands; crossover
// splices the commands of two inputs. The rest get libFuzzer's byte
// mutations, which test the parser.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/ops/ops.h"
#include "core/registry/op_registry.h"
#include "core/session/session.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/stubs/logging.h"
#include "gradtape/v1/tape_service.pb.h"
#include "server/batch.h"
#include "server/convert.h"
#include "server/result_cache.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/proto_mutator.h"
#include "tests/temp_dir.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

constexpr int kResetEvery = 256;
constexpr int64_t kMemoryLimitBytes = int64_t{64} << 20;  // 64 MiB

constexpr int64_t kResultCacheBytes = int64_t{4} << 20;
constexpr int64_t kResultCacheTombstones = 64;
constexpr int64_t kResultCacheRuns = 16;

struct State {
  gradtape::testing::TempDir dir;
  std::unique_ptr<gradtape::Session> session;
  std::unique_ptr<gradtape::server::ResultCache> results;
  int inputs = 0;

  void Reset() {
    gradtape::fuzz::Require(!dir.path().empty(), "a scratch directory");
    session.reset();
    gradtape::server::ResultCache::Options cache;
    cache.max_bytes = kResultCacheBytes;
    cache.max_tombstones = kResultCacheTombstones;
    cache.max_runs = kResultCacheRuns;
    results = std::make_unique<gradtape::server::ResultCache>(cache);
    dir.Clear();
    gradtape::SessionOptions options;
    options.memory_limit_bytes = kMemoryLimitBytes;
    options.checkpoint_dir = dir.path();
    session = std::make_unique<gradtape::Session>(gradtape::DefaultRegistry(),
                                                  options);
  }
};

State& GetState() {
  static State* state = [] {
    // Inputs with invalid UTF-8 in string fields fail to parse, and
    // protobuf logs each one: keep the fuzzer's output readable.
    google::protobuf::SetLogHandler(nullptr);
    auto* s = new State;  // never destroyed: no exit-time order issues
    s->Reset();
    return s;
  }();
  return *state;
}

void MutateCommands(gradtape::v1::CommandBatch* batch, std::minstd_rand& rng) {
  auto* commands = batch->mutable_commands();
  const int n = commands->size();
  if (n == 0) return;
  switch (rng() % 3) {
    case 0:  // duplicate one
      *batch->add_commands() = commands->Get(static_cast<int>(rng() % n));
      break;
    case 1:  // drop one
      commands->DeleteSubrange(static_cast<int>(rng() % n), 1);
      break;
    default:  // swap two
      commands->SwapElements(static_cast<int>(rng() % n),
                             static_cast<int>(rng() % n));
      break;
  }
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size,
                                          size_t max_size, unsigned int seed) {
  std::minstd_rand rng(seed);
  gradtape::v1::CommandBatch batch;
  if (rng() % 5 == 0 || !batch.ParseFromArray(data, static_cast<int>(size))) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  const int rounds = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < rounds; ++i) {
    if (rng() % 6 == 0) {
      MutateCommands(&batch, rng);
      continue;
    }
    if (!gradtape::fuzz::MutateOneField(&batch, rng)) break;
  }
  const size_t n = gradtape::fuzz::Serialize(batch, data, max_size);
  return n > 0 ? n : LLVMFuzzerMutate(data, size, max_size);
}

extern "C" size_t LLVMFuzzerCustomCrossOver(const uint8_t* data1, size_t size1,
                                            const uint8_t* data2, size_t size2,
                                            uint8_t* out, size_t max_out_size,
                                            unsigned int seed) {
  std::minstd_rand rng(seed);
  gradtape::v1::CommandBatch a, b;
  if (!a.ParseFromArray(data1, static_cast<int>(size1)) ||
      !b.ParseFromArray(data2, static_cast<int>(size2))) {
    return 0;
  }
  // A prefix of a's commands, then a suffix of b's.
  const int keep_a = a.commands_size() > 0
                         ? static_cast<int>(rng() % (a.commands_size() + 1))
                         : 0;
  const int from_b = b.commands_size() > 0
                         ? static_cast<int>(rng() % (b.commands_size() + 1))
                         : 0;
  a.mutable_commands()->DeleteSubrange(keep_a, a.commands_size() - keep_a);
  for (int i = from_b; i < b.commands_size(); ++i) {
    *a.add_commands() = b.commands(i);
  }
  return gradtape::fuzz::Serialize(a, out, max_out_size);
}

namespace {

int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? INT64_MAX : INT64_MIN;
}

// `t`'s dtype is valid and its shape holds exactly `bytes` bytes (a wrapped
// size computation shows up here even without a crash). t.data() is not
// read.
void CheckTensorBytes(const gradtape::v1::TensorValue& t, uint64_t bytes_said) {
  const absl::StatusOr<gradtape::DType> parsed =
      gradtape::server::FromProto(t.dtype());
  gradtape::fuzz::Require(parsed.ok() && *parsed != gradtape::DType::kInvalid,
                          "reply tensor has a valid dtype");
  const gradtape::DType dtype = *parsed;
  unsigned __int128 bytes = gradtape::DTypeSize(dtype);
  for (int64_t d : t.shape()) {
    gradtape::fuzz::Require(d >= 0, "reply shape dims are >= 0");
    bytes *= static_cast<uint64_t>(d);
    if (bytes > (static_cast<unsigned __int128>(1) << 64)) bytes = 0;
  }
  gradtape::fuzz::Require(bytes == bytes_said,
                          "reply tensor bytes match dtype and shape");
}

// A tensor in a reply has exactly the bytes its dtype and shape say.
void CheckTensor(const gradtape::v1::TensorValue& t) {
  CheckTensorBytes(t, t.data().size());
}

// A chunk of a chunked fetch: total_bytes is what the dtype and shape say,
// and the data lies within it.
void CheckChunk(const gradtape::v1::TensorChunk& c) {
  gradtape::v1::TensorValue whole;
  whole.set_dtype(c.dtype());
  *whole.mutable_shape() = c.shape();
  CheckTensorBytes(whole, c.total_bytes());
  gradtape::fuzz::Require(
      c.offset() >= 0 && c.offset() <= c.total_bytes() &&
          static_cast<int64_t>(c.data().size()) <= c.total_bytes() - c.offset(),
      "reply chunk lies within its tensor");
}

// Every result answers a command of `batch` (renumbered: never a
// duplicate), and the reply says the session's last applied seq.
void CheckReply(const gradtape::v1::CommandBatch& batch,
                const gradtape::v1::BatchReply& reply, int64_t last_applied) {
  gradtape::fuzz::Require(reply.last_seq() == last_applied,
                          "reply last_seq is the last applied seq");
  const bool renumbered = batch.batch_id() % 4 != 3;
  for (const gradtape::v1::CommandResult& r : reply.results()) {
    gradtape::fuzz::Require(
        std::any_of(batch.commands().begin(), batch.commands().end(),
                    [&](const auto& c) { return c.seq() == r.seq(); }),
        "a result's seq is one of the batch's commands'");
    gradtape::fuzz::Require(!renumbered || !r.duplicate(),
                            "new seqs get no duplicate result");
    if (r.has_tensor()) CheckTensor(r.tensor());
    if (r.has_chunk()) CheckChunk(r.chunk());
    for (const gradtape::v1::GradientValues* g :
         {&r.gradient(), &r.jacobian(), &r.jvp()}) {
      for (int i = 0; i < g->values_size(); ++i) {
        if (i < g->is_none_size() && g->is_none(i)) continue;
        CheckTensor(g->values(i));
      }
    }
  }
}

// Every command of `batch` is answered: a command not applied now (a seq
// below 1, or not above the last applied seq at its turn, `last` before
// the batch) has a result of its own. A command applied now may have none
// (OK without data). A batch stopped by a full reply accounts for the rest
// itself, so it is not checked.
void CheckEveryCommandAnswered(const gradtape::v1::CommandBatch& batch,
                               const gradtape::v1::BatchReply& reply,
                               int64_t last) {
  absl::flat_hash_map<int64_t, int> results;  // by seq
  for (const gradtape::v1::CommandResult& r : reply.results()) {
    if (r.error().message().find("the reply is full") != std::string::npos) {
      return;
    }
    ++results[r.seq()];
  }
  absl::flat_hash_map<int64_t, int> owed;  // answers owed, by seq
  for (const gradtape::v1::Command& cmd : batch.commands()) {
    if (cmd.seq() >= 1 && cmd.seq() > last) {
      last = cmd.seq();  // applied now
    } else {
      ++owed[cmd.seq()];
    }
  }
  for (const auto& [seq, count] : owed) {
    gradtape::fuzz::Require(results[seq] >= count,
                            "every command not applied now is answered");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gradtape::v1::CommandBatch batch;
  if (!batch.ParseFromArray(data, static_cast<int>(size))) return 0;
  State& state = GetState();
  // Renumbering must not overflow after a raw input's huge seq.
  constexpr int64_t kMaxBase = int64_t{1} << 62;
  if (++state.inputs % kResetEvery == 0 ||
      state.results->last_applied() > kMaxBase) {
    state.Reset();
  }
  if (batch.batch_id() % 4 != 3) {  // a client's seqs: all new
    const int64_t base = state.results->last_applied();
    for (int i = 0; i < batch.commands_size(); ++i) {
      batch.mutable_commands(i)->set_seq(base + 1 + i);
    }
    if (batch.batch_id() % 4 == 2) {
      batch.set_ack_seq(SaturatingAdd(base, batch.ack_seq()));
    }
  }
  const int64_t last_before = state.results->last_applied();
  gradtape::v1::BatchReply reply;
  // A small reply budget, so the fuzzer reaches the refusals of results
  // that do not fit as well as the answers.
  constexpr int64_t kMaxReplyBytes = 1 << 20;
  gradtape::server::ApplyBatch(*state.session, batch, kMaxReplyBytes,
                               /*cancel=*/nullptr, &reply, {}, nullptr,
                               gradtape::server::RpcMethod::kRun,
                               state.results.get())
      .IgnoreError();
  gradtape::fuzz::Require(
      state.results->kept_bytes() <= kResultCacheBytes &&
          state.results->tombstones() <= kResultCacheTombstones &&
          state.results->runs() <= kResultCacheRuns,
      "the result cache stays within its bounds");
  // The reply must be something the server can send.
  std::string wire;
  gradtape::fuzz::Require(reply.SerializeToString(&wire),
                          "BatchReply serializes");
  CheckReply(batch, reply, state.results->last_applied());
  CheckEveryCommandAnswered(batch, reply, last_before);
  // GRADTAPE_FUZZ_VERBOSE=1: print the batch and the reply (to read a
  // finding or check that a seed does what it should).
  static const bool verbose = std::getenv("GRADTAPE_FUZZ_VERBOSE") != nullptr;
  if (verbose) {
    std::fprintf(stderr, "== batch\n%s== reply\n%s",
                 batch.DebugString().c_str(), reply.DebugString().c_str());
  }
  return 0;
}
