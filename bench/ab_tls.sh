#!/usr/bin/env bash
# The cost of TLS against plaintext, side by side in one run:
#   bench/ab_tls.sh [BUILD_DIR] [ROUNDS] [SECONDS]
# (defaults build, 3 rounds, 5 s). Makes throwaway certificates
# (tests/make_test_certs.sh), starts two gradtape-servers on 127.0.0.1 (one
# plaintext, one TLS), then per round runs unary_load (--call=run and
# --call=keepalive) against each, alternating which goes first, and prints
# every line, the medians and tls/plaintext ratios; finally mlp_bench
# --tls_certs_dir (its own in-process servers, alternated inside). Servers are
# always stopped.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
ROUNDS="${2:-3}"
SECONDS_PER_RUN="${3:-5}"
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
bash "$ROOT/tests/make_test_certs.sh" "$WORK/certs"

start() {  # NAME FLAGS... ; prints the address
  local name=$1; shift
  "$BUILD/server/gradtape-server" --address=127.0.0.1:0 --max_sessions=256 "$@" \
    >"$WORK/$name.out" 2>"$WORK/$name.err" &
  PIDS+=($!)
  for _ in $(seq 100); do
    local a
    a="$(sed -n 's/^gradtape-server listening on //p' "$WORK/$name.out")"
    [ -n "$a" ] && { echo "$a"; return; }
    sleep 0.1
  done
  echo "ab_tls.sh: $name server did not start" >&2; cat "$WORK/$name.err" >&2; exit 1
}
PLAIN="$(start plain)"
TLS="$(start tls --tls_cert_file="$WORK/certs/server.pem" --tls_key_file="$WORK/certs/server.key")"
TLS_FLAGS=(--tls_ca_file="$WORK/certs/ca.pem" --tls_server_name=localhost)

load() {  # transport call
  if [ "$1" = plain ]; then
    "$BUILD/bench/unary_load" --address="$PLAIN" --call="$2" --duration_s="$SECONDS_PER_RUN"
  else
    "$BUILD/bench/unary_load" --address="$TLS" --call="$2" --duration_s="$SECONDS_PER_RUN" "${TLS_FLAGS[@]}"
  fi | tee -a "$WORK/$1.$2.lines"
}
for r in $(seq "$ROUNDS"); do
  for call in run keepalive; do
    if [ $((r % 2)) = 1 ]; then load plain $call; load tls $call; else load tls $call; load plain $call; fi
  done
done
python3 - "$WORK" <<'PY'
import re, statistics, sys
work = sys.argv[1]
def rates(name):
    text = open(f"{work}/{name}.lines").read()
    return [float(x) for x in re.findall(r"([0-9.]+) req/s", text)], \
           [float(x) for x in re.findall(r"p50 ([0-9.]+) ms", text)]
for call in ("run", "keepalive"):
    (pr, pl), (tr, tl) = rates(f"plain.{call}"), rates(f"tls.{call}")
    mp, mt = statistics.median(pr), statistics.median(tr)
    print(f"ab_tls unary_load {call}: plaintext median {mp:.0f} req/s (p50 {statistics.median(pl):.2f} ms), "
          f"TLS median {mt:.0f} req/s (p50 {statistics.median(tl):.2f} ms), tls/plaintext {mt / mp:.3f} "
          f"({len(pr)} + {len(tr)} runs)")
PY
"$BUILD/bench/mlp_bench" --reps=$((2 * ROUNDS + 1)) --tls_certs_dir="$WORK/certs"
