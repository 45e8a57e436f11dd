// Transport security of the server (server/tls.h): TLS, mTLS, certificate
// reload and the refused option combinations, with certificates made at test
// time (tests/cert_util.h) and raw gRPC clients on 127.0.0.1.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gradtape/v1/tape_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/cert_util.h"

namespace gradtape::server {
namespace {

using ::gradtape::testing::TestCerts;

struct ClientCreds {
  std::string roots;  // PEM; empty: plaintext
  std::string key;
  std::string chain;
};

// One CreateSession over a fresh channel; `peer_cn`, if given, receives the
// common name of the certificate the server presented.
grpc::Status CreateSession(const std::string& address, const ClientCreds& creds,
                           std::string* peer_cn = nullptr) {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (creds.roots.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = creds.roots;
    ssl.pem_private_key = creds.key;
    ssl.pem_cert_chain = creds.chain;
    credentials = grpc::SslCredentials(ssl);
  }
  auto stub =
      v1::TapeService::NewStub(grpc::CreateChannel(address, credentials));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::CreateSessionRequest request;
  v1::CreateSessionResponse response;
  grpc::Status status = stub->CreateSession(&context, request, &response);
  if (status.ok() && peer_cn != nullptr) {
    std::vector<grpc::string_ref> cn =
        context.auth_context()->FindPropertyValues("x509_common_name");
    *peer_cn = cn.empty() ? "" : std::string(cn[0].data(), cn[0].size());
  }
  return status;
}

// Each refusal test first connects a correct client to the same server, so
// it also fails against a server that does not check (or speak) TLS.
class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(certs_.ok()) << "openssl failed"; }

  ServerOptions TlsOptions() const {
    ServerOptions options;
    options.address = "127.0.0.1:0";
    options.tls_cert_file = certs_.Path("server.pem");
    options.tls_key_file = certs_.Path("server.key");
    return options;
  }
  ServerOptions MtlsOptions() const {
    ServerOptions options = TlsOptions();
    options.tls_client_ca_file = certs_.Path("ca.pem");
    return options;
  }
  std::unique_ptr<Server> Start(const ServerOptions& options) const {
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  }
  ClientCreds TrustCa1() const { return {certs_.Read("ca.pem"), "", ""}; }
  ClientCreds WithClient(const std::string& name) const {
    return {certs_.Read("ca.pem"), certs_.Read(name + ".key"),
            certs_.Read(name + ".pem")};
  }

  TestCerts certs_;
};

TEST_F(TlsTest, TlsClientTrustingTheCaConnects) {
  std::unique_ptr<Server> server = Start(TlsOptions());
  ASSERT_NE(server, nullptr);
  std::string cn;
  grpc::Status status = CreateSession(server->address(), TrustCa1(), &cn);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(cn, "localhost");
  EXPECT_EQ(server->num_sessions(), 1);
}

TEST_F(TlsTest, PlaintextClientAgainstTlsPortFails) {
  std::unique_ptr<Server> server = Start(TlsOptions());
  ASSERT_NE(server, nullptr);
  grpc::Status status = CreateSession(server->address(), ClientCreds{});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
  EXPECT_EQ(server->num_sessions(), 0);
}

TEST_F(TlsTest, ClientTrustingAnotherCaFails) {
  std::unique_ptr<Server> server = Start(TlsOptions());
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(CreateSession(server->address(), TrustCa1()).ok());
  grpc::Status status =
      CreateSession(server->address(), {certs_.Read("ca2.pem"), "", ""});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
  EXPECT_EQ(server->num_sessions(), 1);  // the control's only
}

TEST_F(TlsTest, MtlsWithoutClientCertificateFails) {
  std::unique_ptr<Server> server = Start(MtlsOptions());
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(CreateSession(server->address(), WithClient("client")).ok());
  grpc::Status status = CreateSession(server->address(), TrustCa1());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
  EXPECT_EQ(server->num_sessions(), 1);  // the control's only
}

TEST_F(TlsTest, MtlsWithCertificateFromAnotherCaFails) {
  std::unique_ptr<Server> server = Start(MtlsOptions());
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(CreateSession(server->address(), WithClient("client")).ok());
  grpc::Status status = CreateSession(server->address(), WithClient("client2"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
  EXPECT_EQ(server->num_sessions(), 1);  // the control's only
}

TEST_F(TlsTest, MtlsWithTheRightCertificateConnects) {
  std::unique_ptr<Server> server = Start(MtlsOptions());
  ASSERT_NE(server, nullptr);
  grpc::Status status = CreateSession(server->address(), WithClient("client"));
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(server->num_sessions(), 1);
}

// The certificate files are replaced by one from CA 2 while the server runs:
// a client trusting only CA 2 fails before and connects after, within a
// bounded wait (the reload interval is 1 s), and sees the new subject.
TEST_F(TlsTest, RenewedCertificateIsServedWithoutRestart) {
  ServerOptions options = TlsOptions();
  options.tls_reload_interval_seconds = 1;
  std::unique_ptr<Server> server = Start(options);
  ASSERT_NE(server, nullptr);
  const ClientCreds trust_ca2{certs_.Read("ca2.pem"), "", ""};
  ASSERT_FALSE(CreateSession(server->address(), trust_ca2).ok());

  ASSERT_TRUE(certs_.IssueServerCert("ca2", "renewed", "renewed-localhost"));
  ASSERT_TRUE(certs_.Replace("renewed.key", "server.key"));
  ASSERT_TRUE(certs_.Replace("renewed.pem", "server.pem"));
  std::string cn;
  grpc::Status status;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  do {
    absl::SleepFor(absl::Milliseconds(250));
    status = CreateSession(server->address(), trust_ca2, &cn);
  } while (!status.ok() && absl::Now() < give_up);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(cn, "renewed-localhost");
  // The old CA's clients no longer connect.
  EXPECT_FALSE(CreateSession(server->address(), TrustCa1()).ok());
}

// A client that pings every 2 s with no call open: the server's keepalive
// flags decide whether it tolerates that. Allowed (ping interval 1 s): the
// connection stays READY. Refused (interval 60 s, one strike): the server
// sends GOAWAY too_many_pings and the channel drops to IDLE.
TEST(KeepaliveTest, PingPolicyFlagsReachTheTransport) {
  ServerOptions allowing;
  allowing.address = "127.0.0.1:0";
  allowing.keepalive_min_ping_interval_seconds = 1;
  allowing.keepalive_permit_without_calls = true;
  ServerOptions refusing = allowing;
  refusing.keepalive_min_ping_interval_seconds = 60;
  refusing.max_ping_strikes = 1;
  absl::StatusOr<std::unique_ptr<Server>> allowing_server =
      Server::Start(allowing);
  absl::StatusOr<std::unique_ptr<Server>> refusing_server =
      Server::Start(refusing);
  ASSERT_TRUE(allowing_server.ok()) << allowing_server.status();
  ASSERT_TRUE(refusing_server.ok()) << refusing_server.status();

  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  auto connect = [&](const Server& server) {
    auto channel = grpc::CreateCustomChannel(
        server.address(), grpc::InsecureChannelCredentials(), args);
    EXPECT_TRUE(channel->WaitForConnected(
        absl::ToChronoTime(absl::Now() + absl::Seconds(5))));
    return channel;
  };
  auto allowed = connect(**allowing_server);
  auto refused = connect(**refusing_server);
  // The refusing server needs three pings (~6 s); by then the allowing one
  // has had as many. Bounded wait: 15 s.
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(15) &&
         (refused->GetState(false) == GRPC_CHANNEL_READY ||
          absl::Now() - start < absl::Seconds(7))) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_NE(refused->GetState(false), GRPC_CHANNEL_READY);
  EXPECT_EQ(allowed->GetState(false), GRPC_CHANNEL_READY);
}

void ExpectRefused(const ServerOptions& options, const std::string& words) {
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(server.status().message().find(words), std::string::npos)
      << server.status();
}

TEST_F(TlsTest, BadOptionCombinationsAreRefused) {
  ServerOptions cert_only = TlsOptions();
  cert_only.tls_key_file.clear();
  ExpectRefused(cert_only, "only tls_cert_file is set");
  ServerOptions key_only = TlsOptions();
  key_only.tls_cert_file.clear();
  ExpectRefused(key_only, "only tls_key_file is set");
  ServerOptions ca_only;
  ca_only.address = "127.0.0.1:0";
  ca_only.tls_client_ca_file = certs_.Path("ca.pem");
  ExpectRefused(ca_only, "tls_client_ca_file (mTLS) needs tls_cert_file");
  ServerOptions missing = TlsOptions();
  missing.tls_cert_file = certs_.Path("absent.pem");
  ExpectRefused(missing,
                absl::StrCat("tls_cert_file '", certs_.Path("absent.pem"),
                             "' cannot be read"));
  ServerOptions mismatched = TlsOptions();
  mismatched.tls_key_file = certs_.Path("client.key");
  ExpectRefused(mismatched, "is not the private key of the certificate");
  ServerOptions not_pem = TlsOptions();
  not_pem.tls_cert_file = certs_.Path("server.key");
  ExpectRefused(not_pem, "holds no PEM certificate");
  ServerOptions bad_ca = MtlsOptions();
  bad_ca.tls_client_ca_file = certs_.Path("absent-ca.pem");
  ExpectRefused(bad_ca, "tls_client_ca_file '");
  ServerOptions no_reload = TlsOptions();
  no_reload.tls_reload_interval_seconds = 0;
  ExpectRefused(no_reload, "tls_reload_interval_seconds must be positive");
  ServerOptions bad_keepalive;
  bad_keepalive.address = "127.0.0.1:0";
  bad_keepalive.keepalive_time_seconds = 0;
  ExpectRefused(bad_keepalive, "keepalive_time_seconds must be 1 to");
  ServerOptions bad_strikes;
  bad_strikes.address = "127.0.0.1:0";
  bad_strikes.max_ping_strikes = -1;
  ExpectRefused(bad_strikes, "max_ping_strikes must be >= 0");
}

}  // namespace
}  // namespace gradtape::server
