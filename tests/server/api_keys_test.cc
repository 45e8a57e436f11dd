// The API keys file parser and key lookup (server/api_keys.h): accepted
// lines, every refusal with its file:line, and that no error quotes a key.
#include "server/api_keys.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace gradtape::server {
namespace {

constexpr char kKeyA[] = "alpha-key-0123456789abcdef";
constexpr char kKeyB[] = "bravo-key-0123456789abcdef";

std::string Sha256Hex(absl::string_view key) {
  KeyDigest d = DigestKey(key);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(d.data()), d.size()));
}

TEST(ApiKeysParseTest, AcceptsKeysHashesCommentsAndLimits) {
  const std::string text = absl::StrCat(
      "# tenants of the test\n\n", kKeyA,
      "  acme max_sessions=3 memory_mib=64 max_put_mib=2  \n",
      "sha256:", Sha256Hex(kKeyB),
      "\tacme\tmax_sessions=3 memory_mib=64 "
      "max_put_mib=2\n",
      "   # indented comment\n", "charlie-key-0123456789 other.team_1\n");
  absl::StatusOr<std::vector<ApiKeyLine>> lines =
      ParseApiKeys(text, "keys.txt");
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 3u);
  EXPECT_EQ((*lines)[0].tenant, "acme");
  EXPECT_EQ((*lines)[0].line, 3);
  EXPECT_EQ((*lines)[0].limits.max_sessions, 3);
  EXPECT_EQ((*lines)[0].limits.memory_bytes, int64_t{64} << 20);
  EXPECT_EQ((*lines)[0].limits.max_put_bytes, int64_t{2} << 20);
  EXPECT_EQ((*lines)[0].digest, DigestKey(kKeyA));
  // The hashed line holds the same digest as the key it hashes.
  EXPECT_EQ((*lines)[1].digest, DigestKey(kKeyB));
  EXPECT_EQ((*lines)[2].tenant, "other.team_1");
  EXPECT_EQ((*lines)[2].limits, TenantLimits());
}

struct BadLine {
  std::string text;
  int line;
  std::string says;
};

TEST(ApiKeysParseTest, RefusesMalformedLinesNamingFileAndLineNeverTheKey) {
  const std::string a = kKeyA;
  const std::vector<BadLine> cases = {
      {a + "\n", 1, "expected '<key"},
      {"# c\nshort-key acme\n", 2, "a key must be 16 to 512"},
      {"sha256:abcd acme\n", 1, "64 hex digits"},
      {a + " acme colour=blue\n", 1, "unknown field 'colour'"},
      {a + " acme max_sessions=2 max_sessions=3\n", 1, "repeats"},
      {a + " acme max_sessions=0\n", 1, "must be an integer from 1"},
      {a + " acme memory_mib=lots\n", 1, "must be an integer from 1"},
      {a + " acme memory_mib=99999999999999\n", 1, "must be an integer"},
      {a + " ac/me\n", 1, "the tenant (field 2)"},
      {"acme " + a + "\n", 1, "a key must be"},  // columns swapped
      {a + " acme " + a + "\n", 1, "field 3 is not name=value"},
      {a + " acme\n\n" + a + " other\n", 3, "the same key as line 1"},
      {a + " acme max_sessions=1\nbravo-key-0123456789abcdef acme\n", 2,
       "other limits on line 1"},
  };
  for (const BadLine& c : cases) {
    absl::StatusOr<std::vector<ApiKeyLine>> lines =
        ParseApiKeys(c.text, "/etc/keys");
    ASSERT_FALSE(lines.ok()) << c.text;
    const std::string message(lines.status().message());
    EXPECT_EQ(lines.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(
        absl::StartsWith(message, absl::StrCat("/etc/keys:", c.line, ": ")))
        << message;
    EXPECT_TRUE(absl::StrContains(message, c.says)) << message;
    // No key, nor a recognisable part of one, is quoted.
    EXPECT_FALSE(absl::StrContains(message, "0123456789")) << message;
  }
  absl::StatusOr<std::vector<ApiKeyLine>> empty =
      ParseApiKeys("# nothing\n\n", "/etc/keys");
  EXPECT_FALSE(empty.ok());
  EXPECT_TRUE(absl::StrContains(empty.status().message(), "no keys"));
}

class ApiKeysFileTest : public ::testing::Test {
 protected:
  void Write(const std::string& text) {
    std::ofstream(path_, std::ios::trunc) << text;
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_ =
      absl::StrCat(::testing::TempDir(), "api_keys_test_", ::getpid(), ".txt");
};

TEST_F(ApiKeysFileTest, AuthenticateNeedsBearerAndAKnownKey) {
  Write(absl::StrCat(kKeyA, " acme max_sessions=2\nsha256:", Sha256Hex(kKeyB),
                     " other\n"));
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys = ApiKeys::Load(path_);
  ASSERT_TRUE(keys.ok()) << keys.status();
  absl::StatusOr<std::shared_ptr<Tenant>> a =
      (*keys)->Authenticate(absl::StrCat("Bearer ", kKeyA));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->name(), "acme");
  EXPECT_EQ((*a)->max_sessions(), 2);
  absl::StatusOr<std::shared_ptr<Tenant>> b =
      (*keys)->Authenticate(absl::StrCat("Bearer ", kKeyB));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->name(), "other");
  // The digest itself is not a key.
  std::string refused_message;
  for (const std::string& bad :
       {std::string(""), std::string(kKeyA), absl::StrCat("Basic ", kKeyA),
        absl::StrCat("Bearer ", kKeyA, "x"),
        absl::StrCat("Bearer sha256:", Sha256Hex(kKeyB))}) {
    absl::StatusOr<std::shared_ptr<Tenant>> t = (*keys)->Authenticate(bad);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kUnauthenticated);
    // One message for every refusal: no hint of what was wrong.
    if (refused_message.empty())
      refused_message = std::string(t.status().message());
    EXPECT_EQ(t.status().message(), refused_message);
    EXPECT_FALSE(absl::StrContains(t.status().message(), "0123456789"));
  }
}

TEST_F(ApiKeysFileTest, ReloadSwapsTheTableAndKeepsItOnError) {
  Write(absl::StrCat(kKeyA, " acme max_sessions=2\n"));
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys = ApiKeys::Load(path_);
  ASSERT_TRUE(keys.ok()) << keys.status();
  std::shared_ptr<Tenant> acme =
      *(*keys)->Authenticate(absl::StrCat("Bearer ", kKeyA));
  const uint64_t generation = (*keys)->generation();

  Write(absl::StrCat(kKeyB, " acme max_sessions=5\n"));
  ASSERT_TRUE((*keys)->Reload().ok());
  EXPECT_GT((*keys)->generation(), generation);
  EXPECT_FALSE((*keys)->Authenticate(absl::StrCat("Bearer ", kKeyA)).ok());
  absl::StatusOr<std::shared_ptr<Tenant>> again =
      (*keys)->Authenticate(absl::StrCat("Bearer ", kKeyB));
  ASSERT_TRUE(again.ok());
  // The same tenant object, its limit updated in place.
  EXPECT_EQ(again->get(), acme.get());
  EXPECT_EQ(acme->max_sessions(), 5);

  Write(absl::StrCat(kKeyA, " acme max_sessions=5\n", kKeyA, " acme oops\n"));
  absl::Status bad = (*keys)->Reload();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.message(), absl::StrCat(path_, ":2:")))
      << bad;
  EXPECT_FALSE(absl::StrContains(bad.message(), "0123456789")) << bad;
  EXPECT_TRUE((*keys)->Authenticate(absl::StrCat("Bearer ", kKeyB)).ok());
  EXPECT_FALSE((*keys)->Authenticate(absl::StrCat("Bearer ", kKeyA)).ok());

  std::remove(path_.c_str());
  EXPECT_EQ((*keys)->Reload().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE((*keys)->Authenticate(absl::StrCat("Bearer ", kKeyB)).ok());
}

TEST(TenantTest, AcquireSessionCountsAndReleases) {
  auto tenant = std::make_shared<Tenant>("acme");
  TenantLimits limits;
  limits.max_sessions = 2;
  tenant->SetLimits(limits);
  auto first = Tenant::AcquireSession(tenant);
  auto second = Tenant::AcquireSession(tenant);
  ASSERT_TRUE(first.ok() && second.ok());
  auto third = Tenant::AcquireSession(tenant);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(third.status().message(),
                                "tenant 'acme' holds its maximum of 2"))
      << third.status();
  EXPECT_EQ(tenant->open_sessions(), 2);
  first->reset();
  EXPECT_EQ(tenant->open_sessions(), 1);
  EXPECT_TRUE(Tenant::AcquireSession(tenant).ok());
}

}  // namespace
}  // namespace gradtape::server
