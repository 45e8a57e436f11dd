#!/usr/bin/env bash
# Runs ghz load scenarios (this folder's *.json, ghz's own config format)
# against a gradtape-server it starts on 127.0.0.1, and fails on any error.
#
#   tests/load/run_ghz.sh [--duration=10s] [--min-rps=N] [--unary-load]
#                         [--tls] [scenario.json ...]
#
# Defaults: every scenario here, 10 s each. Steps: installs ghz (pinned,
# `go install` through the Go module proxy, into .tools/bin) if missing;
# starts the server (free port); opens the scenario's sessions
# (gradtape-ghz-sessions: ghz cannot chain CreateSession into later calls, so
# with several sessions each call's metadata template picks session
# RequestNumber mod the count; with one, the metadata is plain values); runs
# ghz with server reflection (no .proto files); fails if any call's status
# was not OK, and afterwards if any session holds a poisoned id (a command
# that failed inside an OK reply: ghz sees statuses only) or a tape, or if
# the sessions do not hold exactly the results the calls leave (the table in
# scenario_settings below). Prints one line per scenario: requests, req/s,
# p50/p99 latency, errors. --min-rps makes low throughput fail too (not used
# by scripts/test.sh: 2-core CI machines are noisy).
# --unary-load then runs bench's unary_load (a compiled C++ load generator,
# far cheaper per call than ghz) for KeepAlive and Run against the same
# server for the same duration. The server is always stopped.
# --tls: the same over TLS. Throwaway certificates (tests/make_test_certs.sh)
# in the temp dir; the server gets --tls_cert_file/--tls_key_file, ghz a copy
# of each scenario with "insecure": false, "cacert" and "cname": "localhost",
# gradtape-ghz-sessions and unary_load --tls_ca_file. Lines read "ghz NAME
# (TLS): ...".
#
# Env: GRADTAPE_BUILD_DIR (default build), GHZ_RESULTS_DIR (keeps ghz's
# JSON reports there), GOGC (ghz's Go garbage collector; default 400 here,
# see below).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${GRADTAPE_BUILD_DIR:-$ROOT/build}"
# ghz_install, start_server, server_cpu, ghz_summary (shared with soak.sh).
# shellcheck source=ghz_lib.sh
source "$ROOT/tests/load/ghz_lib.sh"
DURATION=10s
MIN_RPS=0
UNARY_LOAD=0
TLS=0
# Per scenario: the sessions ghz's 50 workers share, and the results each
# call leaves in its session (the check afterwards expects calls x that).
# ghz executes a metadata or data template on every call, and that is most
# of its CPU per call (docs/PERFORMANCE.md: Run with templated ids 9.8k
# req/s, the same batch with fixed ids 19-21k); so the throughput scenarios
# (keepalive, run_unary_fixed) use one session and no template, and the
# templated ones use 10 sessions (one session's commands are serialized by
# its lock; 10 are ample for 2 cores, and 50 made the template longer).
# Unknown scenarios: 10 sessions, result count not checked.
scenario_settings() {
  case "$(basename "$1" .json)" in
    keepalive) echo "1 0" ;;        # the baseline: no command, no tensor
    run_unary_fixed) echo "1 0" ;;  # fixed ids: each call releases all three
    run_unary) echo "10 1" ;;       # distinct ids: each call keeps its result
    stream) echo "10 1" ;;
    *) echo "10 -1" ;;
  esac
}
# ghz keeps every call's result for its report; a less eager collector
# gave it 3-10% more calls per second in 3 of 3 alternating runs.
export GOGC="${GOGC:-400}"
SCENARIOS=()
for arg in "$@"; do
  case "$arg" in
    --duration=*) DURATION="${arg#*=}" ;;
    --min-rps=*) MIN_RPS="${arg#*=}" ;;
    --unary-load) UNARY_LOAD=1 ;;
    --tls) TLS=1 ;;
    -*) echo "run_ghz.sh: unknown flag $arg" >&2; exit 2 ;;
    *) SCENARIOS+=("$arg") ;;
  esac
done
# The baseline first, then the scenarios, so their lines read against it.
[ ${#SCENARIOS[@]} -gt 0 ] || SCENARIOS=("$ROOT"/tests/load/keepalive.json \
  "$ROOT"/tests/load/run_unary_fixed.json "$ROOT"/tests/load/run_unary.json \
  "$ROOT"/tests/load/stream.json)

# ghz, pinned. A failed install fails the run (never skipped).
ghz_install || { echo "run_ghz.sh: FAILED: no ghz" >&2; exit 1; }

SERVER_BIN="$BUILD/server/gradtape-server"
SESSIONS_BIN="$BUILD/bench/gradtape-ghz-sessions"
LOAD_BIN="$BUILD/bench/unary_load"
BINS=("$SERVER_BIN" "$SESSIONS_BIN")
[ $UNARY_LOAD = 0 ] || BINS+=("$LOAD_BIN")
for bin in "${BINS[@]}"; do
  [ -x "$bin" ] || { echo "run_ghz.sh: FAILED: $bin not built" >&2; exit 1; }
done

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# --tls: certificates, server flags and client flags (see the header).
SERVER_TLS=()
CLIENT_TLS=()
TLS_LABEL=""
if [ $TLS = 1 ]; then
  bash "$ROOT/tests/make_test_certs.sh" "$WORK/certs" \
    || { echo "run_ghz.sh: FAILED: could not make test certificates (openssl)" >&2; exit 1; }
  SERVER_TLS=(--tls_cert_file="$WORK/certs/server.pem" --tls_key_file="$WORK/certs/server.key")
  CLIENT_TLS=(--tls_ca_file="$WORK/certs/ca.pem" --tls_server_name=localhost)
  TLS_LABEL=" (TLS)"
fi
# The scenario ghz runs: as is, or with TLS settings in place of "insecure".
ghz_config() {
  if [ $TLS = 0 ]; then echo "$1"; return; fi
  local out
  out="$WORK/$(basename "$1" .json).tls.json"
  python3 - "$1" "$out" "$WORK/certs/ca.pem" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config.update(insecure=False, cacert=sys.argv[3], cname="localhost")
json.dump(config, open(sys.argv[2], "w"), indent=2)
PY
  echo "$out"
}

start_server "$WORK" --max_sessions=256 ${SERVER_TLS[@]+"${SERVER_TLS[@]}"} \
  || { echo "run_ghz.sh: FAILED: no server" >&2; exit 1; }

status=0
for scenario in "${SCENARIOS[@]}"; do
  name="$(basename "$scenario" .json)"
  read -r sessions results_per_call <<<"$(scenario_settings "$scenario")"
  "$SESSIONS_BIN" create --address="$ADDRESS" --count="$sessions" ${CLIENT_TLS[@]+"${CLIENT_TLS[@]}"} \
    --metadata_out="$WORK/$name.metadata.json" --sessions_out="$WORK/$name.sessions"
  report="$WORK/$name.report.json"
  cpu_before="$(server_cpu)"
  # ghz exits non-zero only for setup failures; call errors are read below.
  if ! timeout 300 "$GHZ" --config="$(ghz_config "$scenario")" --metadata-file="$WORK/$name.metadata.json" \
      --duration="$DURATION" --format=json --output="$report" "$ADDRESS"; then
    echo "run_ghz.sh: FAILED: ghz could not run $name" >&2
    status=1
    continue
  fi
  cpu_used="$(awk -v a="$cpu_before" -v b="$(server_cpu)" 'BEGIN { printf "%.2f", b - a }')"
  [ -z "${GHZ_RESULTS_DIR:-}" ] || { mkdir -p "$GHZ_RESULTS_DIR"; cp "$report" "$GHZ_RESULTS_DIR/$name.json"; }
  ghz_summary "$report" "$name$TLS_LABEL" "$MIN_RPS" "$cpu_used" >"$WORK/$name.summary" || status=1
  head -n -1 "$WORK/$name.summary"
  calls="$(tail -1 "$WORK/$name.summary")"
  expect_live=-1
  [ "$results_per_call" -lt 0 ] || [ -z "$calls" ] || expect_live=$((calls * results_per_call))
  "$SESSIONS_BIN" check --address="$ADDRESS" --sessions_file="$WORK/$name.sessions" ${CLIENT_TLS[@]+"${CLIENT_TLS[@]}"} \
    --expect_live="$expect_live" || status=1
done

if [ $UNARY_LOAD = 1 ]; then
  seconds="$(python3 -c "import sys; d = sys.argv[1]; print(float(d[:-1]) * {'s': 1, 'm': 60}[d[-1]])" "$DURATION")"
  for call in keepalive run; do
    cpu_before="$(server_cpu)"
    "$LOAD_BIN" --address="$ADDRESS" --call=$call --duration_s="$seconds" ${CLIENT_TLS[@]+"${CLIENT_TLS[@]}"} || status=1
    cpu_used="$(awk -v a="$cpu_before" -v b="$(server_cpu)" 'BEGIN { printf "%.2f", b - a }')"
    echo "unary_load $call: server busy $(awk -v c="$cpu_used" -v s="$seconds" 'BEGIN { printf "%.2f", c / s }') cores"
  done
fi
exit $status
