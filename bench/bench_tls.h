// TLS for the load drivers (gradtape-ghz-sessions, unary_load): the flags
//   --tls_ca_file=PEM             roots that sign the server's certificate;
//                                 set: TLS, empty: plaintext (the default)
//   --tls_server_name=NAME        name the certificate must hold instead of
//                                 the address's host (e.g. localhost)
//   --tls_client_cert_file=PEM,   client certificate for an mTLS server
//   --tls_client_key_file=PEM
// and channels made from them. Exits with a message on an unreadable file.
#ifndef GRADTAPE_BENCH_BENCH_TLS_H_
#define GRADTAPE_BENCH_BENCH_TLS_H_

#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"

namespace gradtape::bench {

// True when --tls_ca_file is set.
bool TlsEnabled();

// A channel to `address` with `args` plus the TLS settings of the flags.
std::shared_ptr<grpc::Channel> MakeBenchChannel(const std::string& address,
                                                grpc::ChannelArguments args);

}  // namespace gradtape::bench

#endif  // GRADTAPE_BENCH_BENCH_TLS_H_
