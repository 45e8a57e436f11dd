#!/usr/bin/env bash
# Soak: every kind of load at once against ONE gradtape-server for N
# minutes, watching its memory; fails on any error or on RSS drift.
#
#   tests/load/soak.sh [--minutes=1] [--out=DIR] [--max-drift=5]
#                      [--trainers=2] [--churn-rate=4] [--rps=100]
#
# (0 turns a load off: --trainers=0, --churn-rate=0, --rps=0 for no ghz; to
# tell which load a drift comes from.)
#
# The server runs on 127.0.0.1 with metrics on (--metrics_address on a free
# port). Together, for the whole run:
#   - ghz (pinned, installed as run_ghz.sh does: tests/load/ghz_lib.sh) runs
#     four scenarios side by side in rounds of up to 60 s: keepalive,
#     run_unary_fixed, and run_unary and stream changed to also release the
#     result each call of the CI scenario keeps (so a flat line is the
#     expectation), each at --rps calls/s (stream: half), 4 workers on 2
#     connections, on sessions from gradtape-ghz-sessions; after each round,
#     every call must have been OK and `gradtape-ghz-sessions check` must
#     find no poisoned id, no tape and no live tensor;
#   - --trainers Python training processes (soak_clients.py train: the
#     Python client, an Adam MLP, one session per 500 steps, closed; the
#     odd-numbered trainers capture the step, which must be planned);
#   - session churn (soak_clients.py churn): --churn-rate sessions a second
#     created with a 2 s lease, used (Run; every third also a Stream left
#     open with a tape) and abandoned without CloseSession; every tenth is
#     checked to be reaped (KeepAlive NOT_FOUND) 5 s later.
# soak_monitor.py samples the server every second from before the load until
# after it: VmRSS (/proc/PID/status), live tensor bytes, open sessions and
# the counters of RPCs and commands (the request rate is their difference).
#
# Drift. T is the load's length (from the start of the load until every
# load process has finished). Warm-up W = T/6, at least 15 s and at most
# 5 min (the server's allocator arenas, gRPC's thread pools and every
# workload's first cycles settle in it; 15 s is more than 5 training
# sessions' lifetimes, 7 leases and 60 churned sessions). Window
# L = min(60 s, (T - W)/3). Baseline = the median RSS of [W, W + L); end =
# the median RSS of [T - L, T]. Drift = (end - baseline) / baseline; the run
# fails if it is above --max-drift percent (5). A 1-minute run: W = 15 s,
# L = 15 s; 30 minutes: W = 5 min, L = 1 min. Medians, not means, so one
# second's burst does not move them.
#
# It also fails if any ghz call was not OK, a Python process raised, a churned
# session was not reaped, the server died or its metrics stopped answering,
# or the live tensor bytes did not come back to 0 within 30 s after the
# load (every soak session is then closed, reaped or empty).
#
# Output: DIR (default build/soak) gets soak.csv (one row a second) and
# soak.png (RSS, live bytes, request rate over time); the last line printed
# is the summary "soak: N min, R requests, ..., drift X%, ...: OK|FAILED".
# Everything started here is stopped on exit (trap).
#
# Env: GRADTAPE_BUILD_DIR (default build), GRADTAPE_PYTHON (default
# .venv/bin/python: needs the gradtape client, matplotlib, prometheus-client
# from tests/python/requirements.txt), GOGC (ghz; 400 as in run_ghz.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${GRADTAPE_BUILD_DIR:-$ROOT/build}"
# shellcheck source=ghz_lib.sh
source "$ROOT/tests/load/ghz_lib.sh"
PYTHON="${GRADTAPE_PYTHON:-$ROOT/.venv/bin/python}"
export GOGC="${GOGC:-400}"
MINUTES=1
OUT="$BUILD/soak"
MAX_DRIFT=5
TRAINERS=2
CHURN_RATE=4
RPS=100
for arg in "$@"; do
  case "$arg" in
    --minutes=*) MINUTES="${arg#*=}" ;;
    --out=*) OUT="${arg#*=}" ;;
    --max-drift=*) MAX_DRIFT="${arg#*=}" ;;
    --trainers=*) TRAINERS="${arg#*=}" ;;
    --churn-rate=*) CHURN_RATE="${arg#*=}" ;;
    --rps=*) RPS="${arg#*=}" ;;
    *) echo "soak.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
SECONDS_TOTAL="$(awk -v m="$MINUTES" 'BEGIN { printf "%d", m * 60 }')"
[ "$SECONDS_TOTAL" -ge 30 ] || { echo "soak.sh: --minutes=$MINUTES: at least 0.5" >&2; exit 2; }
LEASE=2

fail() { echo "soak.sh: FAILED: $*" >&2; exit 1; }
"$PYTHON" -c "import gradtape, matplotlib, prometheus_client" 2>/dev/null \
  || fail "$PYTHON lacks gradtape, matplotlib or prometheus_client (tests/python/requirements.txt, pip install ./client/python)"
ghz_install || fail "no ghz"
SESSIONS_BIN="$BUILD/bench/gradtape-ghz-sessions"
for bin in "$BUILD/server/gradtape-server" "$SESSIONS_BIN"; do
  [ -x "$bin" ] || fail "$bin not built"
done
mkdir -p "$OUT"

WORK="$(mktemp -d)"
SERVER_PID=""
# Stops what is still running of what this script started (`jobs -p`: its
# own running background jobs only, so no pid another process reuses), the
# server last.
cleanup() {
  local pid pids
  pids="$(jobs -p)"
  for pid in $pids; do [ "$pid" = "$SERVER_PID" ] || kill "$pid" 2>/dev/null || true; done
  for pid in $pids; do [ "$pid" = "$SERVER_PID" ] || wait "$pid" 2>/dev/null || true; done
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

start_server "$WORK" --metrics_address=127.0.0.1:0 --max_sessions=256 || fail "no server"
[ -n "$METRICS_PORT" ] || fail "the server printed no metrics port"

# The ghz scenarios, each with its sessions; run_unary's and stream's calls
# also release the result they keep in CI (the call's last release).
SCENARIOS=(keepalive run_unary_fixed run_unary stream)
"$PYTHON" - "$ROOT/tests/load" "$WORK" <<'PY'
import json, sys
src, work = sys.argv[1:]
keeps = {"run_unary": 3, "stream": 15}  # the result id offset each call keeps
for name in ["keepalive", "run_unary_fixed", "run_unary", "stream"]:
    config = json.load(open(f"{src}/{name}.json"))
    if name in keeps:
        batches = config["data"] if isinstance(config["data"], list) else [config["data"]]
        release = [c for b in batches for c in b["commands"] if "release" in c][-1]["release"]
        release["ids"].append(f"{{{{add (mul .RequestNumber 16) {keeps[name]}}}}}")
    json.dump(config, open(f"{work}/{name}.json", "w"), indent=1)
PY
for name in "${SCENARIOS[@]}"; do
  count=10
  case "$name" in keepalive | run_unary_fixed) count=1 ;; esac
  "$SESSIONS_BIN" create --address="$ADDRESS" --count=$count \
    --metadata_out="$WORK/$name.metadata.json" --sessions_out="$WORK/$name.sessions" \
    || fail "gradtape-ghz-sessions create ($name)"
done

# Samples from before the load (the idle server) until after it.
"$PYTHON" "$ROOT/tests/load/soak_monitor.py" sample --pid="$SERVER_PID" \
  --metrics="127.0.0.1:$METRICS_PORT" --csv="$OUT/soak.csv" --stop-file="$WORK/stop" &
SAMPLER_PID=$!
csv_rows() { [ -f "$OUT/soak.csv" ] && echo $(($(wc -l <"$OUT/soak.csv") - 1)) || echo 0; }
for _ in $(seq 100); do
  [ "$(csv_rows)" -ge 3 ] && break
  kill -0 "$SAMPLER_PID" 2>/dev/null || fail "the sampler stopped"
  sleep 0.1
done
[ "$(csv_rows)" -ge 3 ] || fail "no samples after 10 s"

echo "== soak: ${MINUTES} min against $ADDRESS (metrics 127.0.0.1:$METRICS_PORT): ghz ${SCENARIOS[*]} at $RPS calls/s each, $TRAINERS trainers, churn $CHURN_RATE sessions/s"
LOAD_START="$(date +%s.%N)"
DEADLINE=$((SECONDS + SECONDS_TOTAL))
CLIENT_PIDS=()
CLIENT_OUTS=()
for i in $(seq 0 $((TRAINERS - 1))); do
  "$PYTHON" "$ROOT/tests/load/soak_clients.py" train --address="$ADDRESS" \
    --seconds="$SECONDS_TOTAL" --worker="$i" >"$WORK/train$i.out" 2>&1 &
  CLIENT_PIDS+=($!)
  CLIENT_OUTS+=("$WORK/train$i.out")
done
if [ "$CHURN_RATE" != 0 ]; then
  "$PYTHON" "$ROOT/tests/load/soak_clients.py" churn --address="$ADDRESS" \
    --seconds="$SECONDS_TOTAL" --lease=$LEASE --rate="$CHURN_RATE" >"$WORK/churn.out" 2>&1 &
  CLIENT_PIDS+=($!)
  CLIENT_OUTS+=("$WORK/churn.out")
fi

status=0
# A client that ended before the load did must have ended well (its last
# line printed); its status is read at the end.
clients_alive() {
  local i
  for i in ${CLIENT_PIDS[@]+"${!CLIENT_PIDS[@]}"}; do
    kill -0 "${CLIENT_PIDS[$i]}" 2>/dev/null || grep -qE "^(train|churn)" "${CLIENT_OUTS[$i]}" || return 1
  done
}
: >"$WORK/ghz_calls"
round=0
while [ $((DEADLINE - SECONDS)) -ge 5 ] && [ $status = 0 ]; do
  round=$((round + 1))
  left=$((DEADLINE - SECONDS))
  duration=$((left < 60 ? left : 60))
  GHZ_PIDS=()
  if [ "$RPS" = 0 ]; then  # no ghz: the round is the Python load alone
    sleep "$duration"
    clients_alive || { echo "soak.sh: FAILED: a Python load process failed" >&2; status=1; }
    continue
  fi
  for name in "${SCENARIOS[@]}"; do
    rps=$RPS
    [ "$name" != stream ] || rps=$(((RPS + 1) / 2))  # (ghz: --rps=0 is no limit)
    timeout $((duration + 120)) "$GHZ" --config="$WORK/$name.json" \
      --metadata-file="$WORK/$name.metadata.json" --duration="${duration}s" \
      --concurrency=4 --connections=2 --rps="$rps" --format=json \
      --output="$WORK/$name.report.json" "$ADDRESS" >"$WORK/$name.ghz.out" 2>&1 &
    GHZ_PIDS+=($!)
  done
  # Until the round's ghz processes end; a dead server ends it at once.
  while :; do
    running=0
    for pid in "${GHZ_PIDS[@]}"; do ! kill -0 "$pid" 2>/dev/null || running=1; done
    [ $running = 1 ] || break
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "soak.sh: FAILED: the server died (round $round)" >&2
      for pid in "${GHZ_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
      status=1
      break
    fi
    sleep 0.5
  done
  for i in "${!SCENARIOS[@]}"; do
    name="${SCENARIOS[$i]}"
    if ! wait "${GHZ_PIDS[$i]}"; then
      echo "soak.sh: FAILED: ghz could not run $name (round $round)" >&2
      cat "$WORK/$name.ghz.out" >&2
      status=1
      continue
    fi
    ghz_summary "$WORK/$name.report.json" "$name (soak round $round)" 0 "" \
      >"$WORK/$name.summary" || status=1
    head -n -1 "$WORK/$name.summary"
    calls="$(tail -1 "$WORK/$name.summary")"
    echo "$calls" >>"$WORK/ghz_calls"
    expect_live=0
    "$SESSIONS_BIN" check --address="$ADDRESS" --sessions_file="$WORK/$name.sessions" \
      --expect_live=$expect_live || status=1
  done
  clients_alive || { echo "soak.sh: FAILED: a Python load process failed" >&2; status=1; }
  kill -0 "$SERVER_PID" 2>/dev/null || { echo "soak.sh: FAILED: the server died" >&2; status=1; }
done

# The Python processes end on their own at the deadline (a training session
# or a reap probe may take a few seconds more; bounded by their own waits).
for pid in ${CLIENT_PIDS[@]+"${CLIENT_PIDS[@]}"}; do
  [ $status = 0 ] || kill "$pid" 2>/dev/null || true
  wait "$pid" || status=1
done
LOAD_END="$(date +%s.%N)"
for f in ${CLIENT_OUTS[@]+"${CLIENT_OUTS[@]}"}; do
  grep -E "^(train|churn)" "$f" || { echo "soak.sh: FAILED: $(basename "$f" .out):" >&2; cat "$f" >&2; status=1; }
done
kill -0 "$SERVER_PID" 2>/dev/null || { echo "soak.sh: FAILED: the server died" >&2; status=1; }

# After the load: the sampler goes on until the live bytes are back to 0
# (reaping takes the lease plus the reaper's second), at most 30 s.
# (A sample taken after the load's end with 0 live bytes.)
drained() { tail -1 "$OUT/soak.csv" | awk -F, -v end="$LOAD_END" '$1 > end && $3 == 0 { ok = 1 } END { exit !ok }'; }
for _ in $(seq 300); do
  drained && break
  kill -0 "$SAMPLER_PID" 2>/dev/null || break
  sleep 0.1
done
touch "$WORK/stop"
wait "$SAMPLER_PID" || { echo "soak.sh: FAILED: the sampler failed" >&2; status=1; }

churned="$(sed -n 's/^churn: \([0-9]*\) sessions.*/\1/p' "$WORK/churn.out" 2>/dev/null || true)"
trained="$(cat "$WORK"/train*.out 2>/dev/null | awk '/^train [0-9]+: [0-9]+ sessions/ { n += $3 } END { print n + 0 }')"
echo "ghz: $(awk '{ n += $1 } END { print n + 0 }' "$WORK/ghz_calls" 2>/dev/null) calls in $round rounds"
"$PYTHON" "$ROOT/tests/load/soak_monitor.py" report --csv="$OUT/soak.csv" \
  --load-start="$LOAD_START" --load-end="$LOAD_END" --png="$OUT/soak.png" \
  --max-drift="$MAX_DRIFT" --churned="${churned:-0}" --trained="${trained:-0}" || status=1
[ $status = 0 ] || echo "soak: FAILED (see the messages above)"
exit $status
