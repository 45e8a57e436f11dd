// TestCerts: throwaway certificates for TLS tests, made at test time by
// tests/make_test_certs.sh (the openssl CLI) in a fresh TempDir: CA 1 with a
// server certificate for 127.0.0.1/localhost and a client certificate, and
// an unrelated CA 2 with its own client certificate. Needs the compile
// definition GRADTAPE_SOURCE_DIR (the repository root).
#ifndef GRADTAPE_TESTS_CERT_UTIL_H_
#define GRADTAPE_TESTS_CERT_UTIL_H_

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/temp_dir.h"

namespace gradtape::testing {

class TestCerts {
 public:
  // Makes the certificates; ok() says whether that worked.
  TestCerts() { ok_ = !dir_.path().empty() && Run(""); }

  bool ok() const { return ok_; }
  const std::string& dir() const { return dir_.path(); }
  // The path of DIR/NAME, e.g. Path("server.pem").
  std::string Path(const std::string& name) const {
    return dir_.path() + "/" + name;
  }
  // The contents of DIR/NAME (PEM text); empty if unreadable.
  std::string Read(const std::string& name) const {
    std::ifstream in(Path(name), std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // Issues DIR/OUT.{pem,key}: a server certificate for 127.0.0.1/localhost
  // with subject CN, signed by DIR/CA.{pem,key} ("ca" or "ca2").
  bool IssueServerCert(const std::string& ca, const std::string& out,
                       const std::string& cn) const {
    return Run(" server " + ca + " " + out + " " + cn);
  }
  // Replaces DIR/TO with DIR/FROM atomically (rename).
  bool Replace(const std::string& from, const std::string& to) const {
    return std::rename(Path(from).c_str(), Path(to).c_str()) == 0;
  }

 private:
  bool Run(const std::string& args) const {
    const std::string command = std::string("bash '") + GRADTAPE_SOURCE_DIR +
                                "/tests/make_test_certs.sh' '" + dir_.path() +
                                "'" + args;
    return std::system(command.c_str()) == 0;
  }

  TempDir dir_;
  bool ok_ = false;
};

}  // namespace gradtape::testing

#endif  // GRADTAPE_TESTS_CERT_UTIL_H_
