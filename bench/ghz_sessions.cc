// gradtape-ghz-sessions: session plumbing for ghz load tests
// (tests/load/run_ghz.sh), which cannot chain CreateSession into later calls.
//
//   create: opens --count sessions on --address and writes
//     --metadata_out: ghz metadata (a JSON object) whose templates pick
//       session (RequestNumber mod count) for each call, id and token alike
//       (Go raw strings in backquotes, so the file is JSON after templating);
//     --sessions_out: "id token" lines, for `check`.
//   check: runs a Stats command on every session of --sessions_file and
//     fails (exit 1) unless the load left them as expected: no poisoned id
//     (a command failed inside an OK reply: ghz sees only call statuses), no
//     tape left, and --expect_live live tensors over all sessions (each
//     scenario call releases everything but its one result, so this is the
//     number of calls whose commands all succeeded).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, address, "127.0.0.1:50051", "server");
ABSL_FLAG(int, count, 50, "create: sessions to open");
ABSL_FLAG(std::string, metadata_out, "", "create: ghz metadata file");
ABSL_FLAG(std::string, sessions_out, "", "create: session list file");
ABSL_FLAG(std::string, sessions_file, "", "check: session list file");
ABSL_FLAG(int64_t, expect_live, -1,
          "check: live tensors expected over all sessions (-1: any)");

namespace v1 = gradtape::v1;

namespace {

int Create(v1::TapeService::Stub& stub) {
  std::vector<std::string> ids, tokens;
  std::ofstream sessions(absl::GetFlag(FLAGS_sessions_out));
  for (int i = 0; i < absl::GetFlag(FLAGS_count); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    v1::CreateSessionRequest req;
    req.set_keep_alive_seconds(3600);
    v1::CreateSessionResponse resp;
    grpc::Status s = stub.CreateSession(&ctx, req, &resp);
    if (!s.ok()) {
      std::fprintf(stderr, "CreateSession: %s\n", s.error_message().c_str());
      return 1;
    }
    ids.push_back(absl::StrCat("`", resp.session_id(), "`"));
    tokens.push_back(absl::StrCat("`", resp.token(), "`"));
    sessions << resp.session_id() << " " << resp.token() << "\n";
  }
  const int n = static_cast<int>(ids.size());
  auto pick = [n](const std::vector<std::string>& values) {
    return absl::StrCat("{{index (list ", absl::StrJoin(values, " "),
                        ") (mod .RequestNumber ", n, ")}}");
  };
  std::ofstream md(absl::GetFlag(FLAGS_metadata_out));
  md << "{\"gradtape-session-id\": \"" << pick(ids)
     << "\", \"gradtape-session-token\": \"" << pick(tokens) << "\"}\n";
  return sessions && md ? 0 : 1;
}

int Check(v1::TapeService::Stub& stub) {
  std::ifstream in(absl::GetFlag(FLAGS_sessions_file));
  std::string id, token;
  int sessions = 0, bad = 0;
  int64_t live = 0;
  while (in >> id >> token) {
    ++sessions;
    grpc::ClientContext ctx;
    ctx.AddMetadata("gradtape-session-id", id);
    ctx.AddMetadata("gradtape-session-token", token);
    v1::CommandBatch batch;
    v1::Command* cmd = batch.add_commands();
    cmd->set_seq(1 << 30);
    cmd->mutable_stats();
    v1::BatchReply reply;
    grpc::Status s = stub.Run(&ctx, batch, &reply);
    if (!s.ok() || reply.results_size() != 1 || !reply.results(0).has_stats()) {
      std::fprintf(stderr, "session %s: Stats failed: %s\n", id.c_str(),
                   s.error_message().c_str());
      ++bad;
      continue;
    }
    const v1::SessionStats& stats = reply.results(0).stats();
    live += stats.live_tensors();
    if (stats.poisoned_ids() != 0 || stats.tapes() != 0) {
      std::fprintf(stderr,
                   "session %s: %lld poisoned ids, %lld tapes after the load "
                   "(expected none)\n",
                   id.c_str(), static_cast<long long>(stats.poisoned_ids()),
                   static_cast<long long>(stats.tapes()));
      ++bad;
    }
  }
  const int64_t expected = absl::GetFlag(FLAGS_expect_live);
  const bool live_ok = expected < 0 || live == expected;
  std::printf(
      "ghz_sessions check: %d sessions, %d with failed commands or tapes "
      "left, %lld results held (expected %lld)\n",
      sessions, bad, static_cast<long long>(live),
      static_cast<long long>(expected));
  return sessions > 0 && bad == 0 && live_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  auto stub = v1::TapeService::NewStub(grpc::CreateChannel(
      absl::GetFlag(FLAGS_address), grpc::InsecureChannelCredentials()));
  const std::string mode = args.size() > 1 ? args[1] : "";
  if (mode == "create") return Create(*stub);
  if (mode == "check") return Check(*stub);
  std::fprintf(stderr, "usage: gradtape-ghz-sessions create|check [flags]\n");
  return 2;
}
