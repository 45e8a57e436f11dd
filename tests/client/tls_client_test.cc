// The C++ client's TLS options (SessionOptions::tls, client/src/channel.cc)
// against an in-process TLS / mTLS server on 127.0.0.1, with certificates
// made at test time (tests/cert_util.h).
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gradtape/client/client.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/cert_util.h"

namespace gradtape::client {
namespace {

using ::gradtape::testing::TestCerts;

class TlsClientTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(certs_.ok()) << "openssl failed"; }

  // A TLS server (mTLS when `mtls`); null, with a failure, if it fails.
  std::unique_ptr<server::Server> StartServer(bool mtls) {
    server::ServerOptions options;
    options.address = "127.0.0.1:0";
    options.tls_cert_file = certs_.Path("server.pem");
    options.tls_key_file = certs_.Path("server.key");
    if (mtls) options.tls_client_ca_file = certs_.Path("ca.pem");
    absl::StatusOr<std::unique_ptr<server::Server>> s =
        server::Server::Start(options);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  // Options trusting `ca` ("ca" or "ca2"), with client certificate `client`
  // ("client", "client2"; empty: none).
  SessionOptions Options(const std::string& ca, const std::string& client) {
    SessionOptions options;
    options.rpc_timeout = absl::Seconds(3);
    TlsOptions tls;
    tls.root_certificates = certs_.Read(ca + ".pem");
    if (!client.empty()) {
      tls.private_key = certs_.Read(client + ".key");
      tls.certificate_chain = certs_.Read(client + ".pem");
    }
    options.tls = tls;
    return options;
  }
  // Connects and computes 1 + 2 over the session.
  absl::Status AddOverSession(const server::Server& server,
                              const SessionOptions& options) {
    absl::StatusOr<std::unique_ptr<Session>> session =
        Session::Connect(server.address(), options);
    if (!session.ok()) return session.status();
    const Tensor a = (*session)->Put<double>({1}, {1});
    const Tensor b = (*session)->Put<double>({1}, {2});
    absl::StatusOr<HostTensor> sum = (*session)->Fetch(a + b);
    if (!sum.ok()) return sum.status();
    EXPECT_EQ(sum->ToDoubles(), (std::vector<double>{3}));
    return (*session)->Close();
  }

  TestCerts certs_;
};

TEST_F(TlsClientTest, TlsSessionComputes) {
  std::unique_ptr<server::Server> server = StartServer(/*mtls=*/false);
  ASSERT_NE(server, nullptr);
  SessionOptions options = Options("ca", "");
  options.keepalive.time = absl::Seconds(30);  // accepted by the server
  EXPECT_TRUE(AddOverSession(*server, options).ok());
}

TEST_F(TlsClientTest, ServerNameOverrideChecksThatName) {
  std::unique_ptr<server::Server> server = StartServer(/*mtls=*/false);
  ASSERT_NE(server, nullptr);
  SessionOptions right = Options("ca", "");
  right.tls->server_name_override = "localhost";
  EXPECT_TRUE(AddOverSession(*server, right).ok());
  SessionOptions wrong = Options("ca", "");
  wrong.tls->server_name_override = "elsewhere.example";
  EXPECT_FALSE(AddOverSession(*server, wrong).ok());
}

TEST_F(TlsClientTest, ClientTrustingAnotherCaFails) {
  std::unique_ptr<server::Server> server = StartServer(/*mtls=*/false);
  ASSERT_NE(server, nullptr);
  // The control: the right CA works (so the test fails without TLS).
  ASSERT_TRUE(AddOverSession(*server, Options("ca", "")).ok());
  absl::Status status = AddOverSession(*server, Options("ca2", ""));
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(server->num_sessions(), 0);  // the control closed its session
}

TEST_F(TlsClientTest, MtlsNeedsTheRightClientCertificate) {
  std::unique_ptr<server::Server> server = StartServer(/*mtls=*/true);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(AddOverSession(*server, Options("ca", "client")).ok());
  EXPECT_FALSE(AddOverSession(*server, Options("ca", "")).ok());
  EXPECT_FALSE(AddOverSession(*server, Options("ca", "client2")).ok());
}

TEST_F(TlsClientTest, ConflictingOptionsAreRefused) {
  std::unique_ptr<server::Server> server = StartServer(/*mtls=*/false);
  ASSERT_NE(server, nullptr);
  SessionOptions both = Options("ca", "");
  both.credentials = grpc::InsecureChannelCredentials();
  absl::Status status = AddOverSession(*server, both);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("exclusive"), std::string::npos) << status;
  SessionOptions key_only = Options("ca", "");
  key_only.tls->private_key = certs_.Read("client.key");
  status = AddOverSession(*server, key_only);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("only private_key is set"), std::string::npos)
      << status;
}

}  // namespace
}  // namespace gradtape::client
