// gradtape-ghz-sessions: session plumbing for ghz load tests
// (tests/load/run_ghz.sh), which cannot chain CreateSession into later calls.
//
//   create: opens --count unsequenced sessions (CreateSessionRequest.
//     unsequenced: the scenarios replay fixed seqs) on --address and writes
//     --metadata_out: ghz metadata (a JSON object) whose templates pick
//       session (RequestNumber mod count) for each call, id and token alike
//       (Go raw strings in backquotes, so the file is JSON after templating);
//       with --count=1, plain values and no template, which ghz reads once
//       instead of executing a template on every call;
//     --sessions_out: "id token" lines, for `check`.
//   check: runs a Stats command on every session of --sessions_file and
//     fails (exit 1) unless the load left them as expected: no poisoned id
//     (a command failed inside an OK reply: ghz sees only call statuses), no
//     tape left, and --expect_live live tensors over all sessions (each
//     scenario call releases everything but its one result, so this is the
//     number of calls whose commands all succeeded).
// --tls_ca_file (and --tls_server_name, --tls_client_*: bench/bench_tls.h)
// connect over TLS.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/bench_tls.h"
#include "bench/load_sessions.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, address, "127.0.0.1:50051", "server");
ABSL_FLAG(int, count, 50, "create: sessions to open");
ABSL_FLAG(std::string, metadata_out, "", "create: ghz metadata file");
ABSL_FLAG(std::string, sessions_out, "", "create: session list file");
ABSL_FLAG(std::string, sessions_file, "", "check: session list file");
ABSL_FLAG(std::string, api_key, "",
          "API key of a server with --api_keys_file: sent by create and "
          "check, and written to the ghz metadata as 'authorization'");
ABSL_FLAG(int64_t, expect_live, -1,
          "check: live tensors expected over all sessions (-1: any)");

namespace v1 = gradtape::v1;
namespace bench = gradtape::bench;

namespace {

int Create(v1::TapeService::Stub& stub) {
  std::vector<bench::SessionCredentials> created;
  std::string error;
  const std::string api_key = absl::GetFlag(FLAGS_api_key);
  // The scenarios replay fixed seqs: unsequenced sessions apply them all.
  if (!bench::CreateSessions(stub, absl::GetFlag(FLAGS_count), 3600, &created,
                             &error, api_key, /*unsequenced=*/true)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  std::vector<std::string> ids, tokens;
  std::ofstream sessions(absl::GetFlag(FLAGS_sessions_out));
  for (const bench::SessionCredentials& c : created) {
    ids.push_back(c.id);
    tokens.push_back(c.token);
    sessions << c.id << " " << c.token << "\n";
  }
  auto pick = [](const std::vector<std::string>& values) {
    if (values.size() == 1) return values[0];
    return absl::StrCat("{{index (list `", absl::StrJoin(values, "` `"),
                        "`) (mod .RequestNumber ", values.size(), ")}}");
  };
  google::protobuf::Struct metadata;
  auto& fields = *metadata.mutable_fields();
  fields["gradtape-session-id"].set_string_value(pick(ids));
  fields["gradtape-session-token"].set_string_value(pick(tokens));
  if (!api_key.empty()) {
    fields["authorization"].set_string_value(absl::StrCat("Bearer ", api_key));
  }
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(metadata, &json).ok()) {
    std::fprintf(stderr, "cannot write the metadata as JSON\n");
    return 1;
  }
  std::ofstream md(absl::GetFlag(FLAGS_metadata_out));
  md << json << "\n";
  return sessions && md ? 0 : 1;
}

int Check(v1::TapeService::Stub& stub) {
  std::ifstream in(absl::GetFlag(FLAGS_sessions_file));
  std::vector<bench::SessionCredentials> sessions;
  std::string id, token;
  while (in >> id >> token) sessions.push_back({id, token});
  const bench::SessionsCheck check =
      bench::CheckSessions(stub, sessions, absl::GetFlag(FLAGS_api_key));
  const int64_t expected = absl::GetFlag(FLAGS_expect_live);
  const bool live_ok = expected < 0 || check.live_tensors == expected;
  std::printf(
      "ghz_sessions check: %d sessions, %d with failed commands or tapes "
      "left, %lld results held (expected %lld)\n",
      check.sessions, check.unclean, static_cast<long long>(check.live_tensors),
      static_cast<long long>(expected));
  return check.sessions > 0 && check.unclean == 0 && live_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  auto stub = v1::TapeService::NewStub(bench::MakeBenchChannel(
      absl::GetFlag(FLAGS_address), grpc::ChannelArguments()));
  const std::string mode = args.size() > 1 ? args[1] : "";
  if (mode == "create") return Create(*stub);
  if (mode == "check") return Check(*stub);
  std::fprintf(stderr, "usage: gradtape-ghz-sessions create|check [flags]\n");
  return 2;
}
