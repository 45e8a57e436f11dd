#include "bench/bench_tls.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM roots of the server's certificate; set: TLS, empty: plaintext");
ABSL_FLAG(std::string, tls_server_name, "",
          "name the server's certificate must hold instead of the address's "
          "host");
ABSL_FLAG(std::string, tls_client_cert_file, "",
          "PEM client certificate chain (mTLS), with --tls_client_key_file");
ABSL_FLAG(std::string, tls_client_key_file, "", "PEM client private key");

namespace gradtape::bench {
namespace {

std::string ReadOrDie(const char* flag, const std::string& path) {
  if (path.empty()) return "";
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in || text.str().empty()) {
    std::fprintf(stderr, "--%s: cannot read '%s'\n", flag, path.c_str());
    std::exit(2);
  }
  return text.str();
}

}  // namespace

bool TlsEnabled() { return !absl::GetFlag(FLAGS_tls_ca_file).empty(); }

std::shared_ptr<grpc::Channel> MakeBenchChannel(const std::string& address,
                                                grpc::ChannelArguments args) {
  if (!TlsEnabled()) {
    return grpc::CreateCustomChannel(address,
                                     grpc::InsecureChannelCredentials(), args);
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs =
      ReadOrDie("tls_ca_file", absl::GetFlag(FLAGS_tls_ca_file));
  ssl.pem_cert_chain = ReadOrDie("tls_client_cert_file",
                                 absl::GetFlag(FLAGS_tls_client_cert_file));
  ssl.pem_private_key = ReadOrDie("tls_client_key_file",
                                  absl::GetFlag(FLAGS_tls_client_key_file));
  const std::string name = absl::GetFlag(FLAGS_tls_server_name);
  if (!name.empty()) args.SetSslTargetNameOverride(name);
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(ssl), args);
}

}  // namespace gradtape::bench
