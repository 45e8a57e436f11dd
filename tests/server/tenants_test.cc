// API keys and tenants end to end: an in-process server on 127.0.0.1 with a
// temporary keys file. Admission (UNAUTHENTICATED), tenant isolation,
// per-tenant quotas (sessions under concurrency, memory across sessions, put
// size) and reloads (removed keys stop working for open sessions and
// streams, a malformed file keeps the old table).
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "google/protobuf/text_format.h"
#include "server/api_keys.h"
#include "tests/server/server_test_util.h"
#include "tests/temp_dir.h"

namespace gradtape::server {
namespace {

constexpr char kKeyA[] = "tenant-a-key-5f1c9e0b7d2a4c68";
constexpr char kKeyA2[] = "tenant-a-second-key-93be0c1d";
constexpr char kKeyB[] = "tenant-b-key-0e7a6b5c4d3f2a19";
constexpr char kWrongKey[] = "tenant-a-key-5f1c9e0b7d2a4c69";

// Every key the tests use: no status message may contain any of them.
const char* const kAllKeys[] = {kKeyA, kKeyA2, kKeyB, kWrongKey};

class TenantsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    server_.reset();
    std::remove(path_.c_str());
  }

  void WriteKeys(const std::string& text) {
    std::ofstream(path_, std::ios::trunc) << text;
  }

  void Start(const std::string& keys, ServerOptions options = {}) {
    WriteKeys(keys);
    options.address = "127.0.0.1:0";
    options.api_keys_file = path_;
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(server_->address(),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::TapeService::NewStub(channel_);
  }

  // A context with a deadline, the key (if any) and the session (if any).
  static void Prepare(grpc::ClientContext* context, const char* key,
                      const SessionCreds* creds) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    if (key != nullptr) {
      context->AddMetadata("authorization", absl::StrCat("Bearer ", key));
    }
    if (creds != nullptr) Authorize(*creds, context);
  }

  // Records the status's message for NoKeyInMessages.
  grpc::Status Seen(grpc::Status status) {
    messages_.push_back(status.error_message());
    return status;
  }

  grpc::Status Create(const char* key, SessionCreds* creds,
                      const std::string& id = "") {
    grpc::ClientContext context;
    Prepare(&context, key, nullptr);
    v1::CreateSessionRequest request;
    request.set_session_id(id);
    v1::CreateSessionResponse response;
    grpc::Status status = stub_->CreateSession(&context, request, &response);
    if (creds != nullptr) *creds = {response.session_id(), response.token()};
    return Seen(status);
  }

  SessionCreds MustCreate(const char* key) {
    SessionCreds creds;
    grpc::Status status = Create(key, &creds);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return creds;
  }

  grpc::Status RunBatch(const char* key, const SessionCreds& creds,
                        const Batch& batch, v1::BatchReply* reply = nullptr) {
    grpc::ClientContext context;
    Prepare(&context, key, &creds);
    v1::BatchReply ignored;
    return Seen(stub_->Run(&context, batch.proto(),
                           reply != nullptr ? reply : &ignored));
  }

  grpc::Status KeepAlive(const char* key, const SessionCreds& creds) {
    grpc::ClientContext context;
    Prepare(&context, key, &creds);
    v1::KeepAliveResponse response;
    return Seen(stub_->KeepAlive(&context, v1::KeepAliveRequest(), &response));
  }

  grpc::Status Close(const char* key, const SessionCreds& creds) {
    grpc::ClientContext context;
    Prepare(&context, key, &creds);
    v1::CloseSessionResponse response;
    return Seen(
        stub_->CloseSession(&context, v1::CloseSessionRequest(), &response));
  }

  // One batch over a Stream (then half-close): the stream's final status.
  grpc::Status StreamOne(const char* key, const SessionCreds& creds,
                         const Batch& batch) {
    grpc::ClientContext context;
    Prepare(&context, key, &creds);
    auto stream = stub_->Stream(&context);
    stream->Write(batch.proto());
    stream->WritesDone();
    v1::BatchReply reply;
    while (stream->Read(&reply)) {
    }
    return Seen(stream->Finish());
  }

  // The first error of a Run reply, or OK.
  static v1::Error FirstError(const v1::BatchReply& reply) {
    for (const v1::CommandResult& r : reply.results()) {
      if (r.has_error()) return r.error();
    }
    return v1::Error();
  }

  std::string path_ = absl::StrCat(::testing::TempDir(), "tenants_test_",
                                   ::getpid(), "_", std::rand(), ".keys");
  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TapeService::Stub> stub_;
  std::vector<std::string> messages_;
};

std::string TwoTenants(absl::string_view a_limits = "",
                       absl::string_view b_limits = "") {
  return absl::StrCat("# test tenants\n", kKeyA, " a ", a_limits, "\n", kKeyB,
                      " b ", b_limits, "\n");
}

Batch PutDoubles(int64_t seq, int64_t id, int64_t count) {
  return std::move(
      Batch().Put(seq, id, Doubles({count}, std::vector<double>(count, 1.0))));
}

TEST_F(TenantsTest, MissingOrWrongKeyIsUnauthenticated) {
  Start(TwoTenants());
  SessionCreds creds;
  const grpc::Status missing = Create(nullptr, &creds);
  const grpc::Status wrong = Create(kWrongKey, &creds);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // No hint of which.
  EXPECT_EQ(missing.error_message(), wrong.error_message());
  {
    grpc::ClientContext context;
    Prepare(&context, nullptr, nullptr);
    context.AddMetadata("authorization", absl::StrCat("Basic ", kKeyA));
    v1::CreateSessionResponse response;
    EXPECT_EQ(Seen(stub_->CreateSession(&context, v1::CreateSessionRequest(),
                                        &response))
                  .error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(server_->num_sessions(), 0);

  // A session's calls need a key too, even with the right id and token.
  SessionCreds a = MustCreate(kKeyA);
  Batch put = PutDoubles(1, 1, 2);
  EXPECT_EQ(RunBatch(nullptr, a, put).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(RunBatch(kWrongKey, a, put).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(KeepAlive(nullptr, a).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(StreamOne(kWrongKey, a, put).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Close(nullptr, a).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // With the key all of them work.
  EXPECT_TRUE(RunBatch(kKeyA, a, put).ok());
  EXPECT_TRUE(StreamOne(kKeyA, a, PutDoubles(2, 2, 2)).ok());
  EXPECT_TRUE(KeepAlive(kKeyA, a).ok());
  EXPECT_TRUE(Close(kKeyA, a).ok());
  // ListOps stays open (the registry is public).
  grpc::ClientContext context;
  Prepare(&context, nullptr, nullptr);
  v1::ListOpsResponse ops;
  EXPECT_TRUE(stub_->ListOps(&context, v1::ListOpsRequest(), &ops).ok());
}

TEST_F(TenantsTest, TenantCannotSeeUseOrCloseAnotherTenantsSession) {
  Start(TwoTenants());
  SessionCreds b = MustCreate(kKeyB);
  ASSERT_TRUE(RunBatch(kKeyB, b, PutDoubles(1, 1, 3)).ok());
  // What an id that never existed gets, for comparison.
  SessionCreds never = {std::string(32, 'e'), b.token};
  const grpc::Status unknown = KeepAlive(kKeyA, never);
  ASSERT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  const std::string unknown_message =
      absl::StrReplaceAll(unknown.error_message(), {{never.id, "<id>"}});

  Batch fetch = std::move(Batch().Fetch(2, 1));
  for (const grpc::Status& status :
       {RunBatch(kKeyA, b, fetch), KeepAlive(kKeyA, b),
        StreamOne(kKeyA, b, fetch), Close(kKeyA, b)}) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND)
        << status.error_message();
    EXPECT_EQ(absl::StrReplaceAll(status.error_message(), {{b.id, "<id>"}}),
              unknown_message);
  }
  // A's CreateSession with B's id is not told that it exists elsewhere: ids
  // are per tenant.
  SessionCreds a_same_id;
  EXPECT_TRUE(Create(kKeyA, &a_same_id, b.id).ok());
  EXPECT_EQ(a_same_id.id, b.id);
  EXPECT_TRUE(Close(kKeyA, a_same_id).ok());
  // B's session is untouched: its tensor is still there.
  v1::BatchReply reply;
  ASSERT_TRUE(RunBatch(kKeyB, b, std::move(Batch().Fetch(3, 1)), &reply).ok());
  ASSERT_EQ(reply.results_size(), 1);
  EXPECT_EQ(AsDoubles(reply.results(0).tensor()),
            std::vector<double>({1, 1, 1}));
  EXPECT_TRUE(Close(kKeyB, b).ok());
}

// Checkpoint names belong to their tenant: B cannot restore (read) or
// overwrite A's checkpoint by naming it; each tenant's files live in its own
// folder under --checkpoint_dir.
TEST_F(TenantsTest, CheckpointsAreTheTenantsOwn) {
  gradtape::testing::TempDir dir;
  ServerOptions options;
  options.checkpoint_dir = dir.path();
  Start(TwoTenants(), options);
  auto run = [&](const char* key, const SessionCreds& creds,
                 const std::string& text) {
    v1::CommandBatch batch;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &batch));
    grpc::ClientContext context;
    Prepare(&context, key, &creds);
    v1::BatchReply reply;
    EXPECT_TRUE(Seen(stub_->Run(&context, batch, &reply)).ok());
    return reply;
  };
  // A variable "w" = [7] in each session, saved as "shared" by A only.
  const std::string declare = R"pb(
    commands {
      seq: 1
      execute {
        op: "VarHandleOp"
        output_ids: 1
        attrs {
          key: "dtype"
          value { type: DTYPE_FLOAT64 }
        }
        attrs {
          key: "shape"
          value { ints { values: 1 } }
        }
        attrs {
          key: "shared_name"
          value { s: "w" }
        }
      }
    }
    commands {
      seq: 2
      put {
        id: 2
        value {
          dtype: DTYPE_FLOAT64
          shape: 1
          data: "\000\000\000\000\000\000\034@"
        }
      }
    }
    commands {
      seq: 3
      execute { op: "AssignVariableOp" input_ids: 1 input_ids: 2 }
    })pb";
  SessionCreds a = MustCreate(kKeyA);
  SessionCreds b = MustCreate(kKeyB);
  EXPECT_EQ(FirstError(run(kKeyA, a, declare)).code(), 0);
  EXPECT_EQ(FirstError(run(kKeyB, b, declare)).code(), 0);
  EXPECT_EQ(FirstError(run(kKeyA, a,
                           R"pb(commands {
                                  seq: 4
                                  save_checkpoint { name: "shared" }
                                })pb"))
                .code(),
            0);
  const v1::Error restore =
      FirstError(run(kKeyB, b,
                     R"pb(commands {
                            seq: 4
                            restore_checkpoint { name: "shared" }
                          })pb"));
  EXPECT_EQ(restore.code(), grpc::StatusCode::NOT_FOUND) << restore.message();
  std::ifstream a_file(dir.path() + "/tenant-a/shared");
  EXPECT_TRUE(a_file.good()) << "A's checkpoint is not in tenant-a/";
  std::ifstream shared_file(dir.path() + "/shared");
  EXPECT_FALSE(shared_file.good()) << "A's checkpoint is outside its folder";
}

TEST_F(TenantsTest, MaxSessionsHoldsUnderConcurrentCreateSession) {
  constexpr int kLimit = 5;
  constexpr int kThreads = 16;
  Start(TwoTenants(absl::StrCat("max_sessions=", kLimit)));
  std::atomic<int> created{0}, exhausted{0}, other{0};
  std::vector<std::string> refusals(kThreads);
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      grpc::ClientContext context;
      Prepare(&context, kKeyA, nullptr);
      v1::CreateSessionResponse response;
      grpc::Status s =
          stub_->CreateSession(&context, v1::CreateSessionRequest(), &response);
      if (s.ok()) {
        created.fetch_add(1);
      } else if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        exhausted.fetch_add(1);
        refusals[i] = s.error_message();
      } else {
        other.fetch_add(1);
      }
    });
  }
  go.store(true);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(created.load(), kLimit);
  EXPECT_EQ(exhausted.load(), kThreads - kLimit);
  EXPECT_EQ(other.load(), 0);
  for (const std::string& m : refusals) {
    if (m.empty()) continue;
    EXPECT_TRUE(absl::StrContains(m, "tenant 'a'")) << m;
    EXPECT_TRUE(absl::StrContains(m, "maximum of 5 sessions")) << m;
  }
  // Tenant b is not limited by a's quota.
  EXPECT_TRUE(Create(kKeyB, nullptr).ok());
  EXPECT_EQ(server_->num_sessions(), kLimit + 1);
}

TEST_F(TenantsTest, ClosingASessionFreesTheTenantsSlot) {
  Start(TwoTenants("max_sessions=1"));
  SessionCreds first = MustCreate(kKeyA);
  EXPECT_EQ(Create(kKeyA, nullptr).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_TRUE(Close(kKeyA, first).ok());
  EXPECT_TRUE(Create(kKeyA, nullptr).ok());
}

TEST_F(TenantsTest, TenantMemoryCoversAllItsSessions) {
  // 1 MiB for tenant a; each session alone is unlimited.
  Start(TwoTenants("memory_mib=1"));
  SessionCreds first = MustCreate(kKeyA);
  SessionCreds second = MustCreate(kKeyA);
  constexpr int64_t kDoubles = 80 << 10;  // 640 KiB
  v1::BatchReply reply;
  ASSERT_TRUE(RunBatch(kKeyA, first, PutDoubles(1, 1, kDoubles), &reply).ok());
  EXPECT_EQ(reply.results_size(), 0) << reply.ShortDebugString();
  ASSERT_TRUE(RunBatch(kKeyA, second, PutDoubles(1, 1, kDoubles), &reply).ok());
  const v1::Error refused = FirstError(reply);
  EXPECT_EQ(refused.code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(
      absl::StrContains(refused.message(), "tenant 'a' memory limit exceeded"))
      << refused.message();
  EXPECT_TRUE(absl::StrContains(refused.message(), "limit 1048576"))
      << refused.message();
  // Tenant b has its own budget.
  SessionCreds b = MustCreate(kKeyB);
  ASSERT_TRUE(RunBatch(kKeyB, b, PutDoubles(1, 1, kDoubles), &reply).ok());
  EXPECT_EQ(reply.results_size(), 0);
  // Released in the first session, the bytes serve the second.
  ASSERT_TRUE(
      RunBatch(kKeyA, first, std::move(Batch().Release(2, {1})), &reply).ok());
  ASSERT_TRUE(RunBatch(kKeyA, second, PutDoubles(2, 2, kDoubles), &reply).ok());
  EXPECT_EQ(reply.results_size(), 0) << reply.ShortDebugString();
}

TEST_F(TenantsTest, PutLargerThanTheTenantsLimitFailsAlone) {
  Start(TwoTenants("max_put_mib=1"));
  SessionCreds a = MustCreate(kKeyA);
  constexpr int64_t kMiBDoubles = 1 << 17;  // 1 MiB of doubles
  v1::BatchReply reply;
  Batch batch;
  batch.Put(
      1, 7,
      Doubles({kMiBDoubles + 1}, std::vector<double>(kMiBDoubles + 1, 0.5)));
  batch.Put(2, 8, Doubles({kMiBDoubles}, std::vector<double>(kMiBDoubles)));
  ASSERT_TRUE(RunBatch(kKeyA, a, batch, &reply).ok());
  ASSERT_EQ(reply.results_size(), 1) << reply.ShortDebugString();
  EXPECT_EQ(reply.results(0).seq(), 1);
  const std::string& message = reply.results(0).error().message();
  EXPECT_EQ(reply.results(0).error().code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (const char* part : {"PutTensor", "command 1", "id 7", "1048584 bytes",
                           "tenant 'a'", "max_put_mib", "1048576"}) {
    EXPECT_TRUE(absl::StrContains(message, part)) << part << ": " << message;
  }
  EXPECT_EQ(reply.last_seq(), 2);
  // The refused id is poisoned, the 1 MiB put landed, the session works.
  ASSERT_TRUE(RunBatch(kKeyA, a, std::move(Batch().Fetch(3, 7)), &reply).ok());
  EXPECT_EQ(FirstError(reply).code(), grpc::StatusCode::FAILED_PRECONDITION);
  // Tenant b has no put limit.
  SessionCreds b = MustCreate(kKeyB);
  Batch big;
  big.Put(1, 1,
          Doubles({kMiBDoubles + 1}, std::vector<double>(kMiBDoubles + 1)));
  ASSERT_TRUE(RunBatch(kKeyB, b, big, &reply).ok());
  EXPECT_EQ(reply.results_size(), 0);
}

// Chunked puts: the tenant's put limit and memory apply to the whole
// tensor at PutTensorBegin, before any chunk.
TEST_F(TenantsTest, ChunkedPutBeginMeetsTheTenantsLimits) {
  Start(TwoTenants("max_put_mib=1", "memory_mib=1"));
  SessionCreds a = MustCreate(kKeyA);
  v1::BatchReply reply;
  ASSERT_TRUE(
      RunBatch(kKeyA, a,
               std::move(Batch()
                             .PutBegin(1, 7, v1::DTYPE_FLOAT64, {(1 << 17) + 1})
                             .PutBegin(2, 8, v1::DTYPE_FLOAT64, {1 << 17})),
               &reply)
          .ok());
  ASSERT_EQ(reply.results_size(), 1) << reply.ShortDebugString();
  EXPECT_EQ(reply.results(0).seq(), 1);
  EXPECT_EQ(reply.results(0).error().code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (const char* part : {"PutTensorBegin (command 1)", "id 7",
                           "1048584 bytes", "tenant 'a'", "max_put_mib"}) {
    EXPECT_TRUE(absl::StrContains(reply.results(0).error().message(), part))
        << part << ": " << reply.results(0).error().message();
  }
  // Tenant b: 2 MiB over its 1 MiB of memory, refused at Begin.
  SessionCreds b = MustCreate(kKeyB);
  ASSERT_TRUE(
      RunBatch(kKeyB, b,
               std::move(Batch().PutBegin(1, 1, v1::DTYPE_FLOAT64, {1 << 18})),
               &reply)
          .ok());
  ASSERT_EQ(reply.results_size(), 1) << reply.ShortDebugString();
  EXPECT_TRUE(absl::StrContains(reply.results(0).error().message(),
                                "tenant 'b' memory limit exceeded"))
      << reply.results(0).error().message();
}

TEST_F(TenantsTest, ReloadRemovesKeysForOpenSessionsAndStreams) {
  Start(TwoTenants("max_sessions=1"));
  SessionCreds a = MustCreate(kKeyA);
  // A Stream opened with the old key, one batch applied before the reload.
  grpc::ClientContext stream_context;
  Prepare(&stream_context, kKeyA, &a);
  auto stream = stub_->Stream(&stream_context);
  ASSERT_TRUE(stream->Write(PutDoubles(1, 1, 2).proto()));
  v1::BatchReply reply;
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_EQ(reply.last_seq(), 1);

  // kKeyA removed; tenant a now has kKeyA2 and a larger session quota.
  WriteKeys(absl::StrCat(kKeyA2, " a max_sessions=2\n", kKeyB, " b\n"));
  ASSERT_TRUE(server_->ReloadApiKeys().ok());

  stream->Write(PutDoubles(2, 2, 2).proto());  // may fail: the call ends
  while (stream->Read(&reply)) {
  }
  const grpc::Status stream_status = Seen(stream->Finish());
  EXPECT_EQ(stream_status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << stream_status.error_message();
  EXPECT_EQ(RunBatch(kKeyA, a, PutDoubles(3, 3, 2)).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(KeepAlive(kKeyA, a).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Create(kKeyA, nullptr).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // The new key of the same tenant reaches the existing session (seq 2 was
  // not applied), and the raised quota admits a second session.
  ASSERT_TRUE(RunBatch(kKeyA2, a, PutDoubles(3, 3, 2), &reply).ok());
  EXPECT_EQ(reply.last_seq(), 3);
  EXPECT_TRUE(Create(kKeyA2, nullptr).ok());
  EXPECT_EQ(Create(kKeyA2, nullptr).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);

  // A malformed file is refused whole; the table in force stays.
  WriteKeys(absl::StrCat(kKeyA, " a\n", kKeyB, " b max_sessions=two\n"));
  const absl::Status bad = server_->ReloadApiKeys();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.message(), absl::StrCat(path_, ":2:")))
      << bad;
  messages_.emplace_back(bad.message());
  EXPECT_TRUE(KeepAlive(kKeyA2, a).ok());
  EXPECT_EQ(KeepAlive(kKeyA, a).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(TenantsTest, HashedKeyLinesWork) {
  KeyDigest digest = DigestKey(kKeyA);
  const std::string hex = absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(digest.data()), digest.size()));
  Start(absl::StrCat("sha256:", hex, " a\n"));
  SessionCreds a = MustCreate(kKeyA);
  EXPECT_TRUE(RunBatch(kKeyA, a, PutDoubles(1, 1, 2)).ok());
  // The digest is not itself a key.
  EXPECT_EQ(Create(absl::StrCat("sha256:", hex).c_str(), nullptr).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(TenantsTest, StartRefusesAMalformedKeysFile) {
  WriteKeys(absl::StrCat(kKeyA, " a\n", kKeyB, " b colour=red\n"));
  ServerOptions options;
  options.address = "127.0.0.1:0";
  options.api_keys_file = path_;
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(server.status().message(),
                                absl::StrCat(path_, ":2: unknown field")))
      << server.status();
  for (const char* key : kAllKeys) {
    EXPECT_FALSE(absl::StrContains(server.status().message(), key));
  }
}

TEST_F(TenantsTest, NoKeyInAnyErrorMessage) {
  // Every refusal the other tests see, in one run: wrong keys, wrong tenant,
  // quotas, a refused reload.
  Start(TwoTenants("max_sessions=1 max_put_mib=1"));
  SessionCreds a = MustCreate(kKeyA);
  SessionCreds b = MustCreate(kKeyB);
  Create(kKeyA, nullptr);                   // over max_sessions
  Create(kWrongKey, nullptr);               // wrong key
  RunBatch(kKeyB, a, PutDoubles(1, 1, 1));  // other tenant
  StreamOne(kKeyB, a, PutDoubles(1, 1, 1));
  v1::BatchReply reply;
  RunBatch(kKeyA, a, PutDoubles(1, 1, (1 << 17) + 1), &reply);  // put limit
  messages_.push_back(FirstError(reply).message());
  WriteKeys(absl::StrCat(kKeyA, " a ", kKeyB, "\n"));
  messages_.emplace_back(server_->ReloadApiKeys().message());
  ASSERT_GE(messages_.size(), 8u);
  for (const std::string& message : messages_) {
    for (const char* key : kAllKeys) {
      EXPECT_FALSE(absl::StrContains(message, key)) << message;
      // Nor a recognisable part of one.
      EXPECT_FALSE(absl::StrContains(message, absl::string_view(key + 9, 12)))
          << message;
    }
  }
}

}  // namespace
}  // namespace gradtape::server
