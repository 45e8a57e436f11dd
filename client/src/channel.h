// The gRPC channel of a client Session: credentials (plaintext, the
// caller's, or TLS / mTLS from SessionOptions::tls), keepalive and no
// client-side message size limit.
#ifndef GRADTAPE_CLIENT_SRC_CHANNEL_H_
#define GRADTAPE_CLIENT_SRC_CHANNEL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gradtape/client/session.h"
#include "grpcpp/channel.h"

namespace gradtape::client::internal {

// INVALID_ARGUMENT when both options.credentials and options.tls are set,
// when only one of tls->private_key / tls->certificate_chain is, or when a
// keepalive duration is negative.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    absl::string_view address, const SessionOptions& options);

}  // namespace gradtape::client::internal

#endif  // GRADTAPE_CLIENT_SRC_CHANNEL_H_
