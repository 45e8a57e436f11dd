#include "server/api_keys.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gradtape/v1/metadata.h"
#include "openssl/crypto.h"
#include "openssl/sha.h"

namespace gradtape::server {
namespace {

constexpr absl::string_view kHashPrefix = "sha256:";
constexpr absl::string_view kBearer = "Bearer ";
constexpr size_t kMinKeyChars = 16;
constexpr size_t kMaxKeyChars = 512;
constexpr size_t kMaxTenantChars = 64;
constexpr int64_t kMaxSessionsLimit = int64_t{1} << 30;
constexpr int64_t kMaxMib = int64_t{1} << 30;  // 1 PiB: bytes fit int64
// Refused keys files bigger than this (a key file is lines of ~100 bytes).
constexpr int64_t kMaxFileBytes = 16 << 20;

// The one error for every refused key: it says neither whether a key was
// sent nor how it was wrong.
absl::Status Unauthenticated() {
  return absl::UnauthenticatedError(absl::StrCat(
      "missing or invalid API key: send metadata '", v1::kAuthorizationHeader,
      ": ", kBearer, "<key>' with a key of the server's --api_keys_file"));
}

bool IsKeyChar(char c) { return c > ' ' && c < 0x7f; }

bool IsTenantChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
         c == '_' || c == '-';
}

bool IsFieldName(absl::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  for (char c : name) {
    if (!(absl::ascii_islower(static_cast<unsigned char>(c)) || c == '_')) {
      return false;
    }
  }
  return true;
}

// Errors name the file and line only, and never quote the key column.
absl::Status LineError(absl::string_view path, int line,
                       absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", what));
}

absl::StatusOr<KeyDigest> ParseKeyColumn(absl::string_view key,
                                         absl::string_view path, int line) {
  KeyDigest digest;
  if (absl::StartsWith(key, kHashPrefix)) {
    absl::string_view hex = key.substr(kHashPrefix.size());
    bool valid = hex.size() == 2 * digest.size();
    for (char c : hex) valid = valid && absl::ascii_isxdigit(c);
    if (!valid) {
      return LineError(path, line,
                       "the key column starts with 'sha256:' but is not "
                       "followed by 64 hex digits");
    }
    const std::string bytes = absl::HexStringToBytes(hex);
    std::copy(bytes.begin(), bytes.end(), digest.begin());
    return digest;
  }
  bool printable = true;
  for (char c : key) printable = printable && IsKeyChar(c);
  if (!printable || key.size() < kMinKeyChars || key.size() > kMaxKeyChars) {
    return LineError(
        path, line,
        absl::StrCat("a key must be ", kMinKeyChars, " to ", kMaxKeyChars,
                     " printable ASCII characters, or sha256:<64 hex digits>"));
  }
  return DigestKey(key);
}

// Applies one "name=value" field to `limits`; `seen` catches repeats.
absl::Status ParseLimit(absl::string_view field, int index,
                        absl::string_view path, int line, TenantLimits* limits,
                        std::vector<std::string>* seen) {
  const size_t eq = field.find('=');
  const absl::string_view name =
      eq == absl::string_view::npos ? absl::string_view() : field.substr(0, eq);
  if (!IsFieldName(name)) {
    return LineError(path, line,
                     absl::StrCat("field ", index,
                                  " is not name=value (expected max_sessions, "
                                  "memory_mib or max_put_mib)"));
  }
  int64_t* target = nullptr;
  int64_t max = kMaxMib;
  int64_t scale = int64_t{1} << 20;
  if (name == "max_sessions") {
    target = &limits->max_sessions;
    max = kMaxSessionsLimit;
    scale = 1;
  } else if (name == "memory_mib") {
    target = &limits->memory_bytes;
  } else if (name == "max_put_mib") {
    target = &limits->max_put_bytes;
  } else {
    return LineError(path, line,
                     absl::StrCat("unknown field '", name,
                                  "' (known: max_sessions, memory_mib, "
                                  "max_put_mib)"));
  }
  for (const std::string& s : *seen) {
    if (s == name) {
      return LineError(path, line, absl::StrCat("field '", name, "' repeats"));
    }
  }
  seen->emplace_back(name);
  int64_t value = 0;
  if (!absl::SimpleAtoi(field.substr(eq + 1), &value) || value <= 0 ||
      value > max) {
    return LineError(path, line,
                     absl::StrCat("'", name, "' must be an integer from 1 to ",
                                  max, " (leave it out for no limit)"));
  }
  *target = value * scale;
  return absl::OkStatus();
}

// One non-blank, non-comment line: "<key> <tenant> [name=value...]".
absl::StatusOr<ApiKeyLine> ParseLine(absl::string_view text,
                                     absl::string_view path, int line) {
  std::vector<absl::string_view> fields =
      absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (fields.size() < 2) {
    return LineError(path, line,
                     "expected '<key or sha256:HEX> <tenant> [max_sessions=N] "
                     "[memory_mib=M] [max_put_mib=P]'");
  }
  ApiKeyLine parsed;
  parsed.line = line;
  auto digest = ParseKeyColumn(fields[0], path, line);
  if (!digest.ok()) return digest.status();
  parsed.digest = *digest;
  const absl::string_view tenant = fields[1];
  // The first character is a letter or digit: the name is also a directory
  // name under --checkpoint_dir (never "." or "..").
  bool valid = !tenant.empty() && tenant.size() <= kMaxTenantChars &&
               absl::ascii_isalnum(static_cast<unsigned char>(tenant[0]));
  for (char c : tenant) valid = valid && IsTenantChar(c);
  if (!valid) {
    return LineError(
        path, line,
        absl::StrCat("the tenant (field 2) must be 1 to ", kMaxTenantChars,
                     " of [A-Za-z0-9._-], starting with a letter or digit"));
  }
  parsed.tenant = std::string(tenant);
  std::vector<std::string> seen;
  for (size_t i = 2; i < fields.size(); ++i) {
    absl::Status s = ParseLimit(fields[i], static_cast<int>(i + 1), path, line,
                                &parsed.limits, &seen);
    if (!s.ok()) return s;
  }
  return parsed;
}

// Duplicate keys, and tenants whose lines disagree on limits.
absl::Status CheckConsistent(const std::vector<ApiKeyLine>& lines,
                             absl::string_view path) {
  absl::flat_hash_map<std::string, int> digests;
  absl::flat_hash_map<std::string, const ApiKeyLine*> tenants;
  for (const ApiKeyLine& l : lines) {
    std::string digest(l.digest.begin(), l.digest.end());
    auto [it, inserted] = digests.emplace(std::move(digest), l.line);
    if (!inserted) {
      return LineError(path, l.line,
                       absl::StrCat("the same key as line ", it->second));
    }
    auto [t, first] = tenants.emplace(l.tenant, &l);
    if (!first && !(t->second->limits == l.limits)) {
      return LineError(
          path, l.line,
          absl::StrCat("tenant '", l.tenant, "' has other limits on line ",
                       t->second->line,
                       "; give every key of a tenant the same limits"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

KeyDigest DigestKey(absl::string_view key) {
  KeyDigest digest;
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(),
         digest.data());
  return digest;
}

absl::StatusOr<std::vector<ApiKeyLine>> ParseApiKeys(absl::string_view text,
                                                     absl::string_view path) {
  std::vector<ApiKeyLine> lines;
  int number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++number;
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#') continue;
    absl::StatusOr<ApiKeyLine> parsed = ParseLine(line, path, number);
    if (!parsed.ok()) return parsed.status();
    lines.push_back(*std::move(parsed));
  }
  if (lines.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": no keys (every client would be refused); add a line "
                     "'<key> <tenant>'"));
  }
  if (absl::Status s = CheckConsistent(lines, path); !s.ok()) return s;
  return lines;
}

Tenant::Tenant(std::string name)
    : name_(std::move(name)),
      account_(std::make_shared<MemoryAccount>(
          ProcessMemoryAccount(), absl::StrCat("tenant '", name_, "'"))) {}

void Tenant::SetLimits(const TenantLimits& limits) {
  max_sessions_.store(limits.max_sessions);
  max_put_bytes_.store(limits.max_put_bytes);
  account_->set_limit(limits.memory_bytes);
}

absl::StatusOr<std::unique_ptr<Tenant::SessionSlot>> Tenant::AcquireSession(
    const std::shared_ptr<Tenant>& tenant) {
  // Take a slot first, then check: concurrent callers each see their own
  // count, so at most max_sessions of them keep theirs.
  const int64_t max = tenant->max_sessions();
  const int before = tenant->open_sessions_.fetch_add(1);
  auto slot = std::make_unique<SessionSlot>(tenant);
  if (max > 0 && before >= max) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "tenant '", tenant->name(), "' holds its maximum of ", max,
        " sessions (max_sessions in the API keys file); close unused sessions "
        "or retry later"));
  }
  return slot;
}

absl::StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Load(std::string path) {
  std::unique_ptr<ApiKeys> keys(new ApiKeys(std::move(path)));
  if (absl::Status s = keys->Reload(); !s.ok()) return s;
  return keys;
}

absl::Status ApiKeys::ReadTable() {
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open the API keys file ", path_));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad() || static_cast<int64_t>(text.tellp()) > kMaxFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the API keys file ", path_, " (at most ",
                     kMaxFileBytes, " bytes)"));
  }
  absl::StatusOr<std::vector<ApiKeyLine>> lines =
      ParseApiKeys(text.str(), path_);
  if (!lines.ok()) return lines.status();
  auto table = std::make_shared<Table>();
  absl::MutexLock lock(&mu_);
  for (const ApiKeyLine& line : *lines) {
    std::shared_ptr<Tenant>& tenant = tenants_[line.tenant];
    if (tenant == nullptr) tenant = std::make_shared<Tenant>(line.tenant);
    tenant->SetLimits(line.limits);
    table->by_digest.emplace(
        std::string(line.digest.begin(), line.digest.end()), tenant);
  }
  table_ = table;
  return absl::OkStatus();
}

absl::Status ApiKeys::Reload() {
  if (absl::Status s = ReadTable(); !s.ok()) return s;
  generation_.fetch_add(1);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Tenant>> ApiKeys::Authenticate(
    absl::string_view authorization) const {
  if (!absl::StartsWith(authorization, kBearer)) {
    return Unauthenticated();
  }
  const KeyDigest digest = DigestKey(authorization.substr(kBearer.size()));
  std::shared_ptr<const Table> table;
  {
    absl::ReaderMutexLock lock(&mu_);  // calls only read; Reload writes
    table = table_;
  }
  // Looked up by digest, not by key. The hash map's timing depends on the
  // SHA-256 of what the caller sent, and learning how a digest of a guess
  // relates to stored digests does not help find a key (that would take a
  // SHA-256 preimage), so no comparison against every entry is needed and
  // lookup stays O(1) however many keys the file has. The entry found is
  // still confirmed with CRYPTO_memcmp over the whole digest.
  const std::string key(digest.begin(), digest.end());
  auto it = table->by_digest.find(key);
  if (it == table->by_digest.end() ||
      CRYPTO_memcmp(it->first.data(), key.data(), key.size()) != 0) {
    return Unauthenticated();
  }
  return it->second;
}

}  // namespace gradtape::server
