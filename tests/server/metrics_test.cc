// Prometheus metrics and the access log end to end: an in-process server on
// 127.0.0.1 (free ports) with --metrics_address / --access_log set, the C++
// client running a small training loop, /metrics scraped over HTTP with
// libcurl and parsed from the text format, and the access log's JSON lines
// read back.
#include <curl/curl.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gradtape/client/client.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/access_log.h"
#include "server/server.h"
#include "tests/temp_dir.h"

namespace gradtape::server {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

// One sample of the text format: name, labels, value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

size_t AppendToString(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

// GET http://127.0.0.1:<port>/metrics (5 s timeout); empty on failure.
std::string Get(int port, long* http_code) {
  std::string body;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return body;
  const std::string url = absl::StrCat("http://127.0.0.1:", port, "/metrics");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, AppendToString);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");
  const CURLcode rc = curl_easy_perform(curl);
  *http_code = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, http_code);
  curl_easy_cleanup(curl);
  if (rc != CURLE_OK) body.clear();
  return body;
}

// Parses `name{a="x",b="y"} value` lines (label values here never hold
// quotes or commas); skips comments.
std::vector<Sample> Parse(absl::string_view text) {
  std::vector<Sample> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) continue;
    absl::string_view series = line.substr(0, space);
    if (!absl::SimpleAtod(line.substr(space + 1), &s.value)) continue;
    const size_t brace = series.find('{');
    s.name = std::string(series.substr(0, brace));
    if (brace != absl::string_view::npos) {
      absl::string_view labels =
          series.substr(brace + 1, series.size() - brace - 2);
      for (absl::string_view pair : absl::StrSplit(labels, ',')) {
        const size_t eq = pair.find('=');
        if (eq == absl::string_view::npos || pair.size() < eq + 3) continue;
        s.labels[std::string(pair.substr(0, eq))] =
            std::string(pair.substr(eq + 2, pair.size() - eq - 3));
      }
    }
    samples.push_back(std::move(s));
  }
  return samples;
}

class Scrape {
 public:
  explicit Scrape(int port) {
    long code = 0;
    text_ = Get(port, &code);
    EXPECT_EQ(code, 200) << "GET /metrics on port " << port;
    samples_ = Parse(text_);
  }
  // Sum over the series of `name` that have all of `labels`.
  double Sum(const std::string& name,
             const std::map<std::string, std::string>& labels = {}) const {
    double sum = 0;
    for (const Sample& s : samples_) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : labels) {
        auto it = s.labels.find(k);
        if (it == s.labels.end() || it->second != v) match = false;
      }
      if (match) sum += s.value;
    }
    return sum;
  }
  // Sum over the series of `name` whose `label` is not `value`.
  double SumExcept(const std::string& name, const std::string& label,
                   const std::string& value,
                   const std::map<std::string, std::string>& labels) const {
    return Sum(name, labels) - Sum(name, [&] {
             auto with = labels;
             with[label] = value;
             return with;
           }());
  }
  bool Has(const std::string& name) const {
    for (const Sample& s : samples_) {
      if (s.name == name) return true;
    }
    return false;
  }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::vector<Sample> samples_;
};

std::unique_ptr<Server> StartServer(const ServerOptions& options) {
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

ServerOptions WithMetrics() {
  ServerOptions options;
  options.address = "127.0.0.1:0";
  options.metrics_address = "127.0.0.1:0";
  return options;
}

TEST(MetricsTest, OffByDefault) {
  ServerOptions options;
  options.address = "127.0.0.1:0";
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->metrics_port(), 0);
}

TEST(MetricsTest, BadMetricsAddressFailsStart) {
  ServerOptions options = WithMetrics();
  options.metrics_address = "127.0.0.1";  // no port
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("metrics_address"));
}

TEST(MetricsTest, BusyMetricsPortFailsStart) {
  std::unique_ptr<Server> first = StartServer(WithMetrics());
  ASSERT_NE(first, nullptr);
  ServerOptions options = WithMetrics();
  options.metrics_address = absl::StrCat("127.0.0.1:", first->metrics_port());
  absl::StatusOr<std::unique_ptr<Server>> second = Server::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("cannot serve metrics on 127.0.0.1:",
                                     first->metrics_port())));
}

// A training loop through the C++ client (y = w * x, squared error, plain
// gradient steps on a server-side variable), then bad commands: every
// counter moves as it should.
TEST(MetricsTest, CountersFollowATrainingLoop) {
  std::unique_ptr<Server> server = StartServer(WithMetrics());
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->metrics_port(), 0);
  const int port = server->metrics_port();
  const Scrape before(port);
  EXPECT_EQ(before.Sum("gradtape_sessions_created_total"), 0);
  EXPECT_TRUE(before.Has("gradtape_elision_saved_bytes_total"));
  const double elision_before =
      before.Sum("gradtape_elision_saved_bytes_total");

  client::SessionOptions session_options;
  session_options.rpc_timeout = absl::Seconds(5);
  absl::StatusOr<std::unique_ptr<client::Session>> connected =
      client::Session::Connect(server->address(), session_options);
  ASSERT_TRUE(connected.ok()) << connected.status();
  client::Session& session = **connected;

  constexpr int kSteps = 5;
  client::Variable w = client::Variable::Create(
      session, "w", client::HostTensor::FromVector<double>({4}, {0, 0, 0, 0}));
  client::Tensor x =
      session.Put<double>({4}, std::vector<double>{1.0, 2.0, 3.0, 4.0});
  client::Tensor target =
      session.Put<double>({4}, std::vector<double>{2.0, 4.0, 6.0, 8.0});
  client::Tensor rate = session.Scalar(0.01, client::DType::kFloat64);
  for (int step = 0; step < kSteps; ++step) {
    client::GradientTape tape(session);
    client::Tensor error = client::Sub(client::Mul(w.Read(), x), target);
    client::Tensor loss = client::Sum(client::Square(error));
    tape.Stop();
    absl::StatusOr<std::vector<client::Tensor>> grads =
        tape.Gradient(loss, {w.handle()});
    ASSERT_TRUE(grads.ok()) << grads.status();
    w.AssignSub(client::Mul((*grads)[0], rate));
  }
  ASSERT_TRUE(session.Sync().ok());
  // Mul keeps its inputs, not its output: recording it kept bytes off.
  const Scrape trained(port);
  EXPECT_GT(trained.Sum("gradtape_elision_saved_bytes_total"), elision_before);
  EXPECT_EQ(trained.Sum("gradtape_sessions_created_total", {{"tenant", ""}}),
            1);
  EXPECT_EQ(trained.Sum("gradtape_sessions_open"), 1);
  EXPECT_GT(trained.Sum("gradtape_live_tensor_bytes"), 0);
  // 2 Muls per step in the forward pass (and more in the backward, which
  // runs server-side ops but not as commands): the commands are the client's.
  EXPECT_EQ(trained.Sum("gradtape_commands_total",
                        {{"kind", "execute"}, {"op", "Mul"}, {"code", "OK"}}),
            2 * kSteps);
  EXPECT_EQ(trained.Sum("gradtape_commands_total",
                        {{"kind", "execute"}, {"op", "Square"}}),
            kSteps);
  EXPECT_EQ(trained.Sum("gradtape_commands_total",
                        {{"kind", "gradient"}, {"code", "OK"}}),
            kSteps);
  EXPECT_GE(trained.Sum("gradtape_commands_total", {{"kind", "put"}}), 3);
  EXPECT_EQ(trained.SumExcept("gradtape_commands_total", "code", "OK", {}), 0);
  EXPECT_EQ(trained.Sum("gradtape_commands_total"),
            session.counters().commands_sent);
  // One histogram observation per batch the client sent on its stream.
  EXPECT_EQ(trained.Sum("gradtape_batch_duration_seconds_count",
                        {{"method", "Stream"}}),
            session.counters().batches_sent);
  EXPECT_GT(
      trained.Sum("gradtape_received_bytes_total", {{"method", "Stream"}}), 0);
  EXPECT_GT(trained.Sum("gradtape_sent_bytes_total", {{"method", "Stream"}}),
            0);
  EXPECT_GT(
      trained.Sum("gradtape_sent_bytes_total", {{"method", "CreateSession"}}),
      64);  // the id and the 64-digit token
  EXPECT_EQ(trained.Sum("gradtape_rpcs_total",
                        {{"method", "CreateSession"}, {"code", "OK"}}),
            1);
  EXPECT_EQ(trained.Sum("gradtape_rpc_duration_seconds_count",
                        {{"method", "CreateSession"}}),
            1);

  // An unknown op and a MatMul of mismatched shapes: counted by code, the
  // unknown name under op="unknown" (labels stay bounded).
  session.Execute("NoSuchOp", {x});
  client::MatMul(x, x);  // rank 1: INVALID_ARGUMENT
  EXPECT_FALSE(session.Sync().ok());
  const Scrape failed(port);
  EXPECT_EQ(failed.SumExcept("gradtape_commands_total", "code", "OK",
                             {{"kind", "execute"}, {"op", "unknown"}}),
            1);
  EXPECT_EQ(failed.Sum("gradtape_commands_total",
                       {{"op", "MatMul"}, {"code", "INVALID_ARGUMENT"}}),
            1);
  EXPECT_THAT(failed.text(), ::testing::Not(HasSubstr("NoSuchOp")));
  EXPECT_THAT(failed.text(), ::testing::Not(HasSubstr(session.id())));

  ASSERT_TRUE(session.Close().ok());
  const Scrape closed(port);
  EXPECT_EQ(closed.Sum("gradtape_sessions_closed_total"), 1);
  EXPECT_EQ(closed.Sum("gradtape_sessions_open"), 0);
  EXPECT_EQ(closed.Sum("gradtape_live_tensor_bytes"), 0);
}

// A persistent tape held open: its saved tensors show in the gauge.
TEST(MetricsTest, TapeSavedBytesWhileATapeHoldsTensors) {
  std::unique_ptr<Server> server = StartServer(WithMetrics());
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<client::Session>> connected =
      client::Session::Connect(server->address());
  ASSERT_TRUE(connected.ok()) << connected.status();
  client::Session& session = **connected;
  client::Tensor x = session.Put<double>({256}, std::vector<double>(256, 1.5));
  client::TapeOptions persistent;
  persistent.persistent = true;
  client::GradientTape tape(session, persistent);
  tape.Watch(x);
  client::Tensor y = client::Mul(x, x);  // saves x twice: 2 * 2048 bytes
  ASSERT_TRUE(session.Sync().ok());
  const Scrape held(server->metrics_port());
  EXPECT_GE(held.Sum("gradtape_tape_saved_bytes"), 2 * 2048);
  EXPECT_GE(held.Sum("gradtape_live_tensor_bytes"), 2 * 2048);
}

// A session whose lease expires is counted as reaped, not closed.
TEST(MetricsTest, ReapedSessionsAreCounted) {
  std::unique_ptr<Server> server = StartServer(WithMetrics());
  ASSERT_NE(server, nullptr);
  auto stub = v1::TapeService::NewStub(grpc::CreateChannel(
      server->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::CreateSessionRequest request;
  request.set_keep_alive_seconds(1);
  v1::CreateSessionResponse response;
  ASSERT_TRUE(stub->CreateSession(&context, request, &response).ok());
  double reaped = 0;
  for (int i = 0; i < 100 && reaped == 0; ++i) {  // 10 s at most
    absl::SleepFor(absl::Milliseconds(100));
    reaped =
        Scrape(server->metrics_port()).Sum("gradtape_sessions_reaped_total");
  }
  EXPECT_EQ(reaped, 1);
  const Scrape after(server->metrics_port());
  EXPECT_EQ(after.Sum("gradtape_sessions_open"), 0);
  EXPECT_EQ(after.Sum("gradtape_sessions_closed_total"), 0);
}

std::vector<nlohmann::json> ReadLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << line;
    lines.push_back(std::move(j));
  }
  return lines;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// N RPCs give N lines with the right fields; no token is ever written.
TEST(AccessLogTest, OneJsonLinePerRpc) {
  testing::TempDir dir;
  ServerOptions options;
  options.address = "127.0.0.1:0";
  options.access_log = dir.path() + "/access.log";
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto stub = v1::TapeService::NewStub(grpc::CreateChannel(
      server->address(), grpc::InsecureChannelCredentials()));
  auto call = [](grpc::ClientContext* context, const std::string& id,
                 const std::string& token) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    if (!id.empty()) context->AddMetadata("gradtape-session-id", id);
    if (!token.empty()) context->AddMetadata("gradtape-session-token", token);
  };

  v1::CreateSessionResponse created;
  {
    grpc::ClientContext context;
    call(&context, "", "");
    ASSERT_TRUE(
        stub->CreateSession(&context, v1::CreateSessionRequest(), &created)
            .ok());
  }
  const std::string& id = created.session_id();
  const std::string& token = created.token();
  constexpr int kKeepAlives = 3;
  for (int i = 0; i < kKeepAlives; ++i) {
    grpc::ClientContext context;
    call(&context, id, token);
    v1::KeepAliveResponse response;
    ASSERT_TRUE(
        stub->KeepAlive(&context, v1::KeepAliveRequest(), &response).ok());
  }
  {  // a wrong token
    grpc::ClientContext context;
    call(&context, id, std::string(64, '0'));
    v1::KeepAliveResponse response;
    EXPECT_EQ(stub->KeepAlive(&context, v1::KeepAliveRequest(), &response)
                  .error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  {  // a Run of 3 commands
    v1::CommandBatch batch;
    for (int seq = 1; seq <= 3; ++seq) {
      v1::Command* cmd = batch.add_commands();
      cmd->set_seq(seq);
      cmd->mutable_stats();
    }
    grpc::ClientContext context;
    call(&context, id, token);
    v1::BatchReply reply;
    ASSERT_TRUE(stub->Run(&context, batch, &reply).ok());
  }
  {
    grpc::ClientContext context;
    call(&context, id, token);
    v1::CloseSessionResponse response;
    ASSERT_TRUE(
        stub->CloseSession(&context, v1::CloseSessionRequest(), &response)
            .ok());
  }

  const std::vector<nlohmann::json> lines = ReadLines(options.access_log);
  ASSERT_EQ(lines.size(), 1u + kKeepAlives + 1 + 1 + 1);
  const std::vector<std::string> methods = {
      "CreateSession", "KeepAlive", "KeepAlive",   "KeepAlive",
      "KeepAlive",     "Run",       "CloseSession"};
  for (size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json& line = lines[i];
    SCOPED_TRACE(line.dump());
    for (const char* field : {"time", "peer", "tenant", "session", "method",
                              "commands", "code", "duration_seconds"}) {
      EXPECT_TRUE(line.contains(field)) << field;
    }
    EXPECT_EQ(line.value("method", ""), methods[i]);
    EXPECT_EQ(line.value("session", ""), id);
    EXPECT_THAT(line.value("time", ""),
                MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:"
                             "[0-9]{2}\\.[0-9]{3}Z"));
    EXPECT_THAT(line.value("peer", ""), HasSubstr("127.0.0.1"));
    EXPECT_GE(line.value("duration_seconds", -1.0), 0.0);
    EXPECT_EQ(line.value("code", ""),
              i == 4 ? "PERMISSION_DENIED" : std::string("OK"));
    EXPECT_EQ(line.value("commands", -1), methods[i] == "Run" ? 3 : 0);
  }
  const std::string text = ReadFile(options.access_log);
  EXPECT_THAT(text, ::testing::Not(HasSubstr(token)));
  EXPECT_THAT(text, ::testing::Not(HasSubstr(std::string(64, '0'))));
}

// Escaping is the library's: a quote, a newline and invalid UTF-8 in a
// field still give one valid JSON line.
// With API keys, the sessions' series and the access log name the tenant
// of the key (never the key).
TEST(MetricsTest, TenantLabelsAndAccessLogTenant) {
  testing::TempDir dir;
  constexpr char kKey[] = "metrics-test-key-6c1d0e9a5b";
  const std::string keys = dir.path() + "/keys";
  std::ofstream(keys) << kKey << " research\n";
  ServerOptions options = WithMetrics();
  options.api_keys_file = keys;
  options.access_log = dir.path() + "/access.log";
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  auto stub = v1::TapeService::NewStub(grpc::CreateChannel(
      server->address(), grpc::InsecureChannelCredentials()));
  v1::CreateSessionResponse created;
  {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    context.AddMetadata("authorization", absl::StrCat("Bearer ", kKey));
    ASSERT_TRUE(
        stub->CreateSession(&context, v1::CreateSessionRequest(), &created)
            .ok());
  }
  {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    context.AddMetadata("authorization", absl::StrCat("Bearer ", kKey));
    context.AddMetadata("gradtape-session-id", created.session_id());
    context.AddMetadata("gradtape-session-token", created.token());
    v1::CloseSessionResponse closed;
    ASSERT_TRUE(
        stub->CloseSession(&context, v1::CloseSessionRequest(), &closed).ok());
  }
  const Scrape scrape(server->metrics_port());
  EXPECT_EQ(
      scrape.Sum("gradtape_sessions_created_total", {{"tenant", "research"}}),
      1);
  EXPECT_EQ(
      scrape.Sum("gradtape_sessions_closed_total", {{"tenant", "research"}}),
      1);
  EXPECT_EQ(scrape.Sum("gradtape_sessions_open", {{"tenant", "research"}}), 0);
  server.reset();  // flushes the log
  const std::vector<nlohmann::json> lines =
      ReadLines(dir.path() + "/access.log");
  ASSERT_EQ(lines.size(), 2u);
  for (const nlohmann::json& line : lines) {
    EXPECT_EQ(line.value("tenant", ""), "research") << line.dump();
  }
  EXPECT_THAT(ReadFile(dir.path() + "/access.log"),
              ::testing::Not(::testing::HasSubstr(kKey)));
}

TEST(AccessLogTest, FieldsAreEscaped) {
  AccessLogEntry entry;
  entry.time = absl::FromUnixMillis(1764601445123);
  entry.peer = "ipv4:127.0.0.1:1";
  entry.session = "a\"b\nc\xff";
  entry.method = "Run";
  entry.code = "OK";
  const std::string line = AccessLog::Format(entry);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << line;
  EXPECT_EQ(j.value("time", ""), "2025-12-01T15:04:05.123Z");
  EXPECT_THAT(j.value("session", ""), HasSubstr("a\"b\nc"));
}

}  // namespace
}  // namespace gradtape::server
