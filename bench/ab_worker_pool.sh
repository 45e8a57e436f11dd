#!/usr/bin/env bash
# The worker pool's cost against inline batches (server --worker_threads=0,
# the behaviour before the pool), in one run, alternating: mlp_bench's remote
# step (in-process server) and unary_load's Run calls (two gradtape-server
# processes, one per mode, started here and stopped at the end).
#
#   bash bench/ab_worker_pool.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

start_server() {  # $1: worker_threads; prints the address
  local out
  out=$(mktemp)
  "$build/server/gradtape-server" --address=127.0.0.1:0 \
    --worker_threads="$1" >"$out" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    if grep -q "listening on" "$out"; then break; fi
    sleep 0.1
  done
  sed -n 's/.*listening on //p' "$out"
}

pool_addr=$(start_server -1)
inline_addr=$(start_server 0)
for r in $(seq "$rounds"); do
  for mode in pool inline; do
    threads=-1; addr=$pool_addr
    if [ "$mode" = inline ]; then threads=0; addr=$inline_addr; fi
    echo "round $r $mode mlp: $("$build/bench/mlp_bench" --mode=remote \
      --reps=3 --steps=200 --worker_threads=$threads | tail -1)"
    echo "round $r $mode unary: $("$build/bench/unary_load" \
      --address="$addr" --call=run --concurrency=16 --connections=4 \
      --duration_s=5 | tr '\n' ' ')"
  done
done
