#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages, a Python venv for the
# Python tests) and builds everything into build/. Sourced by demo.sh and
# test.sh; safe to run again (only missing packages are installed).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PACKAGES=(g++ cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libeigen3-dev libopenblas-dev libdnnl-dev libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev libssl-dev  # checkpoint CRC-32 (core), token comparison (server)
  openssl  # the CLI: throwaway test certificates (tests/make_test_certs.sh)
  prometheus-cpp-dev nlohmann-json3-dev libcurl4-openssl-dev  # metrics, access log, metrics_test
  python3 python3-venv python3-pip nginx-light
  python3-dev  # the Python client's extension (client/python/native)
  clang-14 libfuzzer-14-dev libclang-rt-14-dev)  # scripts/fuzz.sh
source "$ROOT/scripts/install_packages.sh"
install_packages "${PACKAGES[@]}"
# nginx is only a program for tests/python/test_deploy_proxy.py (which runs
# its own on loopback); on a machine with systemd, the package starts a
# system nginx on port 80: stop and disable that one.
if [[ " ${INSTALLED[*]} " == *" nginx-light "* ]] && [ -d /run/systemd/system ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO systemctl disable --now nginx >/dev/null 2>&1 || true
fi

echo "== building (build/)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
