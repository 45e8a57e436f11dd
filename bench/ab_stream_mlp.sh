#!/usr/bin/env bash
# Side-by-side end-to-end timings of two builds (e.g. main and the commit
# before a change): bench/stream_bench (recorded ops/s and gradient time per
# batch size) and bench/mlp_bench (remote and in-process us/step),
# alternating A and B for ROUNDS rounds, then a table of medians with B/A
# ratios. Machines of this kind differ 2-3x from one to the next: only the
# ratios of one run mean anything.
#
#   bash bench/ab_stream_mlp.sh A_BUILD_DIR B_BUILD_DIR [ROUNDS] [OPS] [STEPS]
#
# Each build dir needs bench/stream_bench and bench/mlp_bench
# (cmake --build DIR --target stream_bench mlp_bench).
set -euo pipefail
A="$1"; B="$2"; ROUNDS="${3:-5}"; OPS="${4:-200000}"; STEPS="${5:-300}"
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT
for round in $(seq "$ROUNDS"); do
  for side in A B; do
    dir="$A"; [ "$side" = B ] && dir="$B"
    "$dir/bench/stream_bench" --ops="$OPS" --small_batch_ops=$((OPS / 5)) \
        --reps=1 2>/dev/null | sed "s/^/$side stream /" >> "$OUT"
    "$dir/bench/mlp_bench" --steps="$STEPS" --reps=3 2>/dev/null \
        | sed "s/^/$side mlp /" >> "$OUT"
  done
done
python3 -c "$(cat <<'PY'
import collections, re, statistics, sys
values = collections.defaultdict(list)
for line in sys.stdin:
    p = line.split()
    side, bench = p[0], p[1]
    if bench == "stream" and len(p) == 6 and p[2].isdigit():
        values[(f"stream batch {p[2]:>4s} recorded ops/s", side)].append(float(p[4]))
        values[(f"stream batch {p[2]:>4s} gradient s/1M ops", side)].append(float(p[5]))
    m = re.search(r"remote ([\d.]+) us/step, in-process ([\d.]+) us/step", line)
    if bench == "mlp" and m:
        values[("mlp remote us/step", side)].append(float(m.group(1)))
        values[("mlp in-process us/step", side)].append(float(m.group(2)))
print(f"{'case':38s} {'A':>11s} {'B':>11s}  B/A   (runs)")
for key in sorted({k for k, _ in values}):
    a, b = values[(key, "A")], values[(key, "B")]
    if a and b:
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{key:38s} {ma:11.3f} {mb:11.3f}  {mb / ma:4.2f}  ({len(a)}/{len(b)})")
PY
)" < "$OUT"
