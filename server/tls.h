// Transport settings of gradtape-server: TLS / mTLS credentials and HTTP/2
// keepalive, from ServerOptions.
//
// TLS. With neither tls_cert_file nor tls_key_file the server listens in
// plaintext. With both it serves TLS; with tls_client_ca_file as well it
// requires a client certificate signed by that CA bundle (mTLS:
// GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY). The files are
// read by gRPC's FileWatcherCertificateProvider, which re-reads them every
// tls_reload_interval_seconds: a renewed certificate (or CA bundle) is served
// to new connections without a restart, and connections already open keep
// the certificate they were made with. Replace key and certificate together
// (e.g. by renaming a directory or switching a symlink, as Kubernetes does
// for a mounted Secret); gRPC keeps the old pair while the two disagree.
//
// Keepalive. The server pings a connection idle for keepalive_time_seconds
// and closes it when the ping is not answered within
// keepalive_timeout_seconds. Clients may ping no more often than every
// keepalive_min_ping_interval_seconds (a client pinging faster gets
// max_ping_strikes strikes, then GOAWAY "too_many_pings"), also with no call
// open when keepalive_permit_without_calls. See gRPC's keepalive guide
// (doc/keepalive.md).
#ifndef GRADTAPE_SERVER_TLS_H_
#define GRADTAPE_SERVER_TLS_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/options.h"

namespace grpc {
class ServerBuilder;
class ServerCredentials;
}  // namespace grpc

namespace gradtape::server {

// The credentials for options' listening port: insecure, TLS or mTLS.
// INVALID_ARGUMENT, naming the option and the file, when only one of
// tls_cert_file / tls_key_file is set, tls_client_ca_file is set without
// them, a file cannot be read or holds no PEM certificate / key, the key is
// not the certificate's, or tls_reload_interval_seconds is not positive.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerOptions& options);

// INVALID_ARGUMENT naming the option when a keepalive setting is out of
// range (times must be positive, max_ping_strikes >= 0).
absl::Status CheckKeepaliveOptions(const ServerOptions& options);

// Sets the HTTP/2 keepalive channel arguments on `builder`.
void ApplyKeepaliveOptions(const ServerOptions& options,
                           grpc::ServerBuilder& builder);

}  // namespace gradtape::server

#endif  // GRADTAPE_SERVER_TLS_H_
