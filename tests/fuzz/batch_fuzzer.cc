// libFuzzer target: the input is a gradtape.v1.CommandBatch (binary proto),
// applied with server::ApplyBatch to one live core Session, the same path a
// Run or Stream call takes after authentication. The session is kept across
// inputs (so state gets deep: tensors, tapes, variables, checkpoints built by
// earlier inputs) and replaced every kResetEvery inputs so it stays bounded.
// Unparsable input is ignored.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/op_registry.h"
#include "core/session.h"
#include "gradtape/v1/tape_service.pb.h"
#include "server/batch.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

constexpr int kResetEvery = 256;
constexpr int64_t kMemoryLimitBytes = int64_t{64} << 20;  // 64 MiB

struct State {
  gradtape::fuzz::ScratchDir dir;
  std::unique_ptr<gradtape::Session> session;
  int inputs = 0;

  void Reset() {
    session.reset();
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
    auto* s = new State;  // never destroyed: no exit-time order issues
    s->Reset();
    return s;
  }();
  return *state;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gradtape::v1::CommandBatch batch;
  if (!batch.ParseFromArray(data, static_cast<int>(size))) return 0;
  State& state = GetState();
  if (++state.inputs % kResetEvery == 0) state.Reset();
  gradtape::v1::BatchReply reply;
  gradtape::server::ApplyBatch(*state.session, batch, &reply);
  // The reply must be something the server can send.
  std::string wire;
  gradtape::fuzz::Require(reply.SerializeToString(&wire),
                          "BatchReply serializes");
  // GRADTAPE_FUZZ_VERBOSE=1: print the batch and the reply (to read a
  // finding or check that a seed does what it should).
  static const bool verbose = std::getenv("GRADTAPE_FUZZ_VERBOSE") != nullptr;
  if (verbose) {
    std::fprintf(stderr, "== batch\n%s== reply\n%s",
                 batch.DebugString().c_str(), reply.DebugString().c_str());
  }
  return 0;
}
