#!/usr/bin/env bash
# Generates the Go stubs for proto/gradtape/v1/tape_service.proto into
# client/go/gen/gradtapev1 (gitignored) with protoc + protoc-gen-go +
# protoc-gen-go-grpc, the standard Go gRPC tooling. The plugins are installed
# at pinned versions into client/go/.bin (gitignored) from the Go module
# proxy the first time.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PROTOC_GEN_GO_VERSION=v1.35.1
PROTOC_GEN_GO_GRPC_VERSION=v1.5.1
BIN="$HERE/.bin"
MODULE=gradtape/client/go
PROTO=gradtape/v1/tape_service.proto

command -v protoc >/dev/null || { echo "protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }
mkdir -p "$BIN"
if [ ! -x "$BIN/protoc-gen-go" ] || ! "$BIN/protoc-gen-go" --version | grep -q "${PROTOC_GEN_GO_VERSION}"; then
  GOBIN="$BIN" go install "google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOC_GEN_GO_VERSION}"
fi
if [ ! -x "$BIN/protoc-gen-go-grpc" ] || ! "$BIN/protoc-gen-go-grpc" --version | grep -q "${PROTOC_GEN_GO_GRPC_VERSION#v}"; then
  GOBIN="$BIN" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC_VERSION}"
fi

rm -rf "$HERE/gen"
mkdir -p "$HERE/gen"
# The proto's go_package ("gradtape/v1") is remapped into this module.
MAP="M${PROTO}=${MODULE}/gen/gradtapev1;gradtapev1"
PATH="$BIN:$PATH" protoc -I "$ROOT/proto" \
  --go_out="$HERE" --go_opt="module=${MODULE}" --go_opt="$MAP" \
  --go-grpc_out="$HERE" --go-grpc_opt="module=${MODULE}" --go-grpc_opt="$MAP" \
  "$ROOT/proto/$PROTO"
echo "generated: $(cd "$HERE" && ls gen/gradtapev1/*.go | tr '\n' ' ')"
