#!/usr/bin/env bash
# Throwaway certificates for tests, made with the openssl CLI (never
# committed). Used by tests/cert_util.h (C++), tests/python/tls_util.py and
# tests/load/run_ghz.sh --tls.
#
#   make_test_certs.sh DIR
#       DIR/ca.{pem,key}            CA 1
#       DIR/server.{pem,key}        server cert from CA 1, CN=localhost,
#                                   subjectAltName IP:127.0.0.1, DNS:localhost
#       DIR/client.{pem,key}        client cert from CA 1
#       DIR/ca2.{pem,key}           CA 2, unrelated to CA 1
#       DIR/client2.{pem,key}       client cert from CA 2
#   make_test_certs.sh DIR server CA OUT CN
#       DIR/OUT.{pem,key}: a new server cert (fresh key, random serial) for
#       127.0.0.1/localhost signed by DIR/CA.{pem,key}, with subject CN.
# Keys are P-256 (fast to make); certificates are valid for 2 days.
set -euo pipefail
dir=$1
mode=${2:-all}
mkdir -p "$dir"
cd "$dir"
umask 077

make_ca() {  # NAME CN
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$1.key" -out "$1.pem" -days 2 -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

issue() {  # CA OUT CN EXTENSIONS
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$2.key" -out "$2.csr" -subj "/CN=$3" 2>/dev/null
  printf '%s\n' "$4" > "$2.ext"
  openssl x509 -req -in "$2.csr" -CA "$1.pem" -CAkey "$1.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 2 -extfile "$2.ext" \
    -out "$2.pem" 2>/dev/null
  rm -f "$2.csr" "$2.ext"
}

server_ext='subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth'
client_ext='extendedKeyUsage=clientAuth'

if [[ $mode == server ]]; then
  issue "$3" "$4" "$5" "$server_ext"
  exit 0
fi
make_ca ca gradtape-test-ca
make_ca ca2 gradtape-test-ca2
issue ca server localhost "$server_ext"
issue ca client gradtape-test-client "$client_ext"
issue ca2 client2 gradtape-test-client2 "$client_ext"
