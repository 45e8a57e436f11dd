#include "client/src/channel.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace gradtape::client::internal {
namespace {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(
    const SessionOptions& options) {
  if (!options.tls.has_value()) {
    return options.credentials ? options.credentials
                               : grpc::InsecureChannelCredentials();
  }
  if (options.credentials) {
    return absl::InvalidArgumentError(
        "SessionOptions::credentials and SessionOptions::tls are exclusive: "
        "set one");
  }
  const TlsOptions& tls = *options.tls;
  if (tls.private_key.empty() != tls.certificate_chain.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TlsOptions::private_key and certificate_chain go together (mTLS): "
        "only ",
        tls.private_key.empty() ? "certificate_chain" : "private_key",
        " is set"));
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls.root_certificates;
  ssl.pem_private_key = tls.private_key;
  ssl.pem_cert_chain = tls.certificate_chain;
  return grpc::SslCredentials(ssl);
}

int Millis(absl::Duration d) {
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(d), INT32_MAX));
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    absl::string_view address, const SessionOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      Credentials(options);
  if (!credentials.ok()) return credentials.status();
  const KeepaliveOptions& keepalive = options.keepalive;
  if (keepalive.time < absl::ZeroDuration() ||
      keepalive.timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("KeepaliveOptions::time and timeout must be >= 0, got ",
                     absl::FormatDuration(keepalive.time), " and ",
                     absl::FormatDuration(keepalive.timeout)));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  if (options.tls.has_value() && !options.tls->server_name_override.empty()) {
    args.SetSslTargetNameOverride(options.tls->server_name_override);
  }
  if (options.reconnect_timeout > absl::ZeroDuration()) {
    // The channel's own reconnect backoff (by default 1 s growing to 120 s)
    // must not outlast the session's resume (SessionOptions).
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
                std::max(1, Millis(options.initial_backoff)));
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
                std::max(1, Millis(options.max_backoff)));
  }
  if (keepalive.time > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, Millis(keepalive.time));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Millis(keepalive.timeout));
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
                keepalive.permit_without_calls ? 1 : 0);
    // Keep pinging a stream that is open but quiet (the point of keepalive
    // for a long-lived session stream).
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  return grpc::CreateCustomChannel(std::string(address), *credentials, args);
}

}  // namespace gradtape::client::internal
