// The C++ client's SessionOptions::api_key against a server with API keys:
// sent on CreateSession, the Stream and CloseSession.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gradtape/client/client.h"
#include "gtest/gtest.h"
#include "server/server.h"

namespace gradtape::client {
namespace {

constexpr char kKey[] = "cpp-client-key-1b2c3d4e5f60";

TEST(TenantsClientTest, SessionOptionsApiKeyIsSentOnEveryCall) {
  const std::string path = absl::StrCat(
      ::testing::TempDir(), "tenants_client_test_", ::getpid(), ".keys");
  std::ofstream(path, std::ios::trunc) << kKey << " cpp max_sessions=1\n";
  server::ServerOptions server_options;
  server_options.address = "127.0.0.1:0";
  server_options.api_keys_file = path;
  auto server = server::Server::Start(server_options);
  ASSERT_TRUE(server.ok()) << server.status();

  SessionOptions options;
  options.rpc_timeout = absl::Seconds(10);
  auto refused = Session::Connect((*server)->address(), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated)
      << refused.status();

  options.api_key = kKey;
  auto session = Session::Connect((*server)->address(), options);
  ASSERT_TRUE(session.ok()) << session.status();
  Tensor x = (*session)->Put<double>({2}, {1.5, 2.5});
  absl::StatusOr<HostTensor> value = (*session)->Fetch(x);  // over the Stream
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->ToDoubles(), (std::vector<double>{1.5, 2.5}));
  EXPECT_TRUE((*session)->KeepAlive().ok());
  EXPECT_TRUE((*session)->Close().ok());
  // Closed with the key: the tenant's one slot is free again.
  auto again = Session::Connect((*server)->address(), options);
  EXPECT_TRUE(again.ok()) << again.status();
  again->reset();
  (*server)->Shutdown();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gradtape::client
