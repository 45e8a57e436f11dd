#!/usr/bin/env bash
# Side-by-side kernel and recording timings of two builds (e.g. main and a
# commit before a change), alternating A and B for ROUNDS rounds, and a table
# of medians with B/A ratios. Machines of this kind differ 2-3x from one to
# the next: only the ratios of one run mean anything.
#
#   bash bench/ab_kernels.sh A_BUILD_DIR B_BUILD_DIR [ROUNDS]
#
# Each build dir needs bench/kernel_bench and bench/recording_bench
# (cmake --build DIR --target kernel_bench recording_bench).
set -euo pipefail
A="$1"; B="$2"; ROUNDS="${3:-3}"
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT
for round in $(seq "$ROUNDS"); do
  for side in A B; do
    dir="$A"; [ "$side" = B ] && dir="$B"
    for elems in 262144 1048576 16777216; do
      "$dir/bench/kernel_bench" --reps=7 --elems="$elems" 2>/dev/null \
        | grep elementwise | sed "s/^/$side /" >> "$OUT"
    done
    "$dir/bench/recording_bench" --benchmark_min_time=0.2 2>/dev/null \
      | grep '^BM_' | sed "s/^/$side /" >> "$OUT"
  done
done
python3 -c "$(cat <<'PY'
import collections, statistics, sys
values = collections.defaultdict(list)
for line in sys.stdin:
    p = line.split()
    if "elementwise" in line:
        key, value, unit = " ".join(p[2:4]), float(p[4]), "GB/s"
    elif len(p) > 2 and p[1].startswith("BM_"):
        key, value, unit = p[1], float(p[2]), "ns"
    else:
        continue
    values[(key, unit, p[0])].append(value)
print(f"{'case':34s} {'A':>9s} {'B':>9s}  B/A")
for key, unit in sorted({(k, u) for k, u, _ in values}):
    a, b = values[(key, unit, "A")], values[(key, unit, "B")]
    if a and b:
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{key:34s} {ma:9.2f} {mb:9.2f}  {mb / ma:4.2f} ({unit})")
PY
)" < "$OUT"
