#!/usr/bin/env bash
# What metrics and the access log cost: bench/stream_bench against one
# gradtape-server binary started three ways, alternated for ROUNDS rounds:
#   off      no flags
#   metrics  --metrics_address=127.0.0.1:0
#   all      --metrics_address=127.0.0.1:0 --access_log=FILE
# then a table of medians with ratios to "off": stream_bench's rates, and the
# server's CPU time (user + system, from /proc) per op, which other load on
# the machine disturbs less than the rates. Only the ratios of one run mean
# anything (machines of this kind differ 2-3x).
#
#   bash bench/ab_metrics.sh BUILD_DIR [ROUNDS] [OPS] [BATCH_SIZES]
set -euo pipefail
BUILD="$1"; ROUNDS="${2:-5}"; OPS="${3:-200000}"; SIZES="${4:-1,16,256,4096}"
WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
start_server() {  # start_server OUT_FILE FLAGS...: sets SERVER_PID, ADDRESS
  local out="$1"; shift
  "$BUILD/server/gradtape-server" --address=127.0.0.1:0 "$@" > "$out" 2>&1 &
  SERVER_PID=$!
  ADDRESS=""
  for _ in $(seq 100); do
    ADDRESS="$(sed -n 's/^gradtape-server listening on //p' "$out")"
    [ -n "$ADDRESS" ] && return 0
    sleep 0.1
  done
  echo "gradtape-server did not start: $(cat "$out")" >&2; exit 1
}
# User + system CPU of the server so far, in clock ticks (a figure less
# disturbed by other load on the machine than wall-clock rates).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }
stop_server() {
  if ! kill "$SERVER_PID" 2>/dev/null; then
    echo "gradtape-server exited early: $(cat "$WORK/server.out")" >&2; exit 1
  fi
  wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
}

for round in $(seq "$ROUNDS"); do
  for mode in off metrics all; do
    flags=()
    [ "$mode" != off ] && flags+=(--metrics_address=127.0.0.1:0)
    [ "$mode" = all ] && flags+=("--access_log=$WORK/access.log")
    start_server "$WORK/server.out" "${flags[@]}"
    for size in ${SIZES//,/ }; do
      before="$(cpu_ticks)"
      if ! "$BUILD/bench/stream_bench" --address="$ADDRESS" --ops="$OPS" \
          --small_batch_ops=$((OPS / 5)) --batch_sizes="$size" --reps=1 \
          > "$WORK/bench.out" 2> "$WORK/bench.err"; then
        echo "stream_bench failed ($mode, batch $size): $(cat "$WORK/bench.err")" >&2
        echo "server: $(cat "$WORK/server.out")" >&2
        exit 1
      fi
      sed "s/^/$mode /" "$WORK/bench.out" >> "$WORK/results"
      echo "$mode cpu $size $(( $(cpu_ticks) - before ))" >> "$WORK/results"
    done
    stop_server
  done
done
python3 -c "$(cat <<'PY'
import collections, statistics, sys
values = collections.defaultdict(list)
ops, ticks = {}, []
TICKS_PER_S = int(sys.argv[2])
for line in sys.stdin:
    p = line.split()
    if len(p) == 5 and p[1].isdigit():
        values[(int(p[1]), "ops/s", p[0])].append(float(p[3]))
        values[(int(p[1]), "grad s/1M", p[0])].append(float(p[4]))
        ops[int(p[1])] = float(p[2])
    if len(p) == 4 and p[1] == "cpu":
        # server CPU microseconds per op (chain and gradient)
        ticks.append((p[0], int(p[2]), int(p[3])))
for mode, batch, t in ticks:
    values[(batch, "server cpu us/op", mode)].append(
        t / TICKS_PER_S * 1e6 / ops[batch])
modes = ["off", "metrics", "all"]
print("# stream_bench against gradtape-server: off / --metrics_address / "
      "--metrics_address + --access_log, medians of", sys.argv[1], "rounds")
print(f"{'batch':>6s} {'measure':16s} {'off':>12s} {'metrics':>12s} {'all':>12s} "
      f"{'metrics/off':>11s} {'all/off':>8s}")
for batch, measure in sorted({(b, m) for b, m, _ in values}):
    med = [statistics.median(values[(batch, measure, m)]) for m in modes]
    print(f"{batch:6d} {measure:16s} {med[0]:12.4g} {med[1]:12.4g} {med[2]:12.4g} "
          f"{med[1] / med[0]:11.3f} {med[2] / med[0]:8.3f}")
PY
)" "$ROUNDS" "$(getconf CLK_TCK)" < "$WORK/results"
