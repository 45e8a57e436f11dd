// A test fixture for the C++ client against a real server: one gradtape
// server on 127.0.0.1 (a free port) for the whole suite, stopped after it,
// and a fresh client Session per test.
#ifndef GRADTAPE_TESTS_CLIENT_LOOPBACK_SESSION_TEST_H_
#define GRADTAPE_TESTS_CLIENT_LOOPBACK_SESSION_TEST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gradtape/client/client.h"
#include "gtest/gtest.h"
#include "server/server.h"

namespace gradtape::client {

class LoopbackSessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server::ServerOptions options;
    options.address = "127.0.0.1:0";
    absl::StatusOr<std::unique_ptr<server::Server>> s =
        server::Server::Start(options);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = s->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    session_ = Connect();
    ASSERT_NE(session_, nullptr);
  }

  static std::string Address() {
    return absl::StrCat("127.0.0.1:", server_->port());
  }

  // A new session (rpc_timeout 5 s); null, with a test failure, if the
  // connection fails.
  static std::unique_ptr<Session> Connect(SessionOptions options = {}) {
    options.rpc_timeout = absl::Seconds(5);
    absl::StatusOr<std::unique_ptr<Session>> s =
        Session::Connect(Address(), options);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  // t's values (waits); empty, with a test failure, on an error.
  std::vector<double> FetchValues(const Tensor& t) {
    absl::StatusOr<HostTensor> v = session_->Fetch(t);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? v->ToDoubles() : std::vector<double>{};
  }

  static inline server::Server* server_ = nullptr;
  std::unique_ptr<Session> session_;
};

}  // namespace gradtape::client

#endif  // GRADTAPE_TESTS_CLIENT_LOOPBACK_SESSION_TEST_H_
