#!/usr/bin/env bash
# The main job: install, build, start gradtape-server on 127.0.0.1:50051,
# train the demo MLP through it, stop the server.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"

ADDRESS="${GRADTAPE_ADDRESS:-127.0.0.1:50051}"
LOG="$(mktemp)"
build/server/gradtape-server --address="$ADDRESS" >"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 100); do
  grep -q "listening" "$LOG" && break
  kill -0 $SERVER 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.1
done
grep -q "listening" "$LOG" || { echo "server did not start"; cat "$LOG"; exit 1; }
cat "$LOG"
build/client/examples/gradtape-mlp-demo --address="$ADDRESS" "$@"
