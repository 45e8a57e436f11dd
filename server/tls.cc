#include "server/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"

namespace gradtape::server {
namespace {

absl::StatusOr<std::string> ReadPemFile(const char* option,
                                        const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(
        option, " '", path, "' cannot be read: ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, " '", path, "' is empty"));
  }
  return text.str();
}

struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Deleter {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};

std::unique_ptr<BIO, BioDeleter> MemoryBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioDeleter>(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The first certificate of `pem` (a chain or a CA bundle), or null.
std::unique_ptr<X509, X509Deleter> FirstCertificate(const std::string& pem) {
  auto bio = MemoryBio(pem);
  std::unique_ptr<X509, X509Deleter> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return cert;
}

// Checks that the files parse and that the key is the certificate's, so a
// misconfiguration fails at start rather than at the first handshake.
absl::Status CheckIdentity(const ServerOptions& options) {
  absl::StatusOr<std::string> cert_pem =
      ReadPemFile("tls_cert_file", options.tls_cert_file);
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::string> key_pem =
      ReadPemFile("tls_key_file", options.tls_key_file);
  if (!key_pem.ok()) return key_pem.status();
  std::unique_ptr<X509, X509Deleter> cert = FirstCertificate(*cert_pem);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_cert_file '", options.tls_cert_file,
                     "' holds no PEM certificate"));
  }
  auto key_bio = MemoryBio(*key_pem);
  std::unique_ptr<EVP_PKEY, KeyDeleter> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_key_file '", options.tls_key_file,
                     "' holds no PEM private key (or it is encrypted)"));
  }
  const int matches = X509_check_private_key(cert.get(), key.get());
  ERR_clear_error();
  if (matches != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls_key_file '", options.tls_key_file,
        "' is not the private key of the certificate in tls_cert_file '",
        options.tls_cert_file, "'"));
  }
  if (options.tls_client_ca_file.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> ca_pem =
      ReadPemFile("tls_client_ca_file", options.tls_client_ca_file);
  if (!ca_pem.ok()) return ca_pem.status();
  if (FirstCertificate(*ca_pem) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_client_ca_file '", options.tls_client_ca_file,
                     "' holds no PEM certificate"));
  }
  return absl::OkStatus();
}

int64_t Millis(int64_t seconds) { return seconds * 1000; }

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerOptions& options) {
  const bool has_cert = !options.tls_cert_file.empty();
  const bool has_key = !options.tls_key_file.empty();
  if (has_cert != has_key) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_cert_file and tls_key_file go together: only ",
                     has_cert ? "tls_cert_file" : "tls_key_file", " is set"));
  }
  if (!has_cert) {
    if (!options.tls_client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "tls_client_ca_file (mTLS) needs tls_cert_file and tls_key_file");
    }
    return grpc::InsecureServerCredentials();
  }
  if (options.tls_reload_interval_seconds <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_reload_interval_seconds must be positive, got ",
                     options.tls_reload_interval_seconds));
  }
  if (absl::Status s = CheckIdentity(options); !s.ok()) return s;

  const bool mtls = !options.tls_client_ca_file.empty();
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          options.tls_key_file, options.tls_cert_file,
          mtls ? options.tls_client_ca_file : std::string(),
          static_cast<unsigned int>(options.tls_reload_interval_seconds));
  grpc::experimental::TlsServerCredentialsOptions tls_options(provider);
  tls_options.watch_identity_key_cert_pairs();
  if (mtls) {
    tls_options.watch_root_certs();
    tls_options.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    tls_options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::experimental::TlsServerCredentials(tls_options);
  if (credentials == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gRPC refused the TLS settings (tls_cert_file '", options.tls_cert_file,
        "', tls_client_ca_file '", options.tls_client_ca_file, "')"));
  }
  return credentials;
}

absl::Status CheckKeepaliveOptions(const ServerOptions& options) {
  const std::pair<const char*, int64_t> positive[] = {
      {"keepalive_time_seconds", options.keepalive_time_seconds},
      {"keepalive_timeout_seconds", options.keepalive_timeout_seconds},
      {"keepalive_min_ping_interval_seconds",
       options.keepalive_min_ping_interval_seconds},
  };
  for (const auto& [name, value] : positive) {
    // Milliseconds travel as int in channel arguments.
    if (value <= 0 || value > INT32_MAX / 1000) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " must be 1 to ", INT32_MAX / 1000, ", got ", value));
    }
  }
  if (options.max_ping_strikes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_ping_strikes must be >= 0 (0 = unlimited), got ",
                     options.max_ping_strikes));
  }
  return absl::OkStatus();
}

void ApplyKeepaliveOptions(const ServerOptions& options,
                           grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(
      GRPC_ARG_KEEPALIVE_TIME_MS,
      static_cast<int>(Millis(options.keepalive_time_seconds)));
  builder.AddChannelArgument(
      GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
      static_cast<int>(Millis(options.keepalive_timeout_seconds)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
                             options.keepalive_permit_without_calls ? 1 : 0);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      static_cast<int>(Millis(options.keepalive_min_ping_interval_seconds)));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES,
                             options.max_ping_strikes);
}

}  // namespace gradtape::server
