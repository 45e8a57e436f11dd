#!/usr/bin/env bash
# Builds the benchmarks (Release, build-perf/), runs every one and writes the
# results section of docs/PERFORMANCE.md (between the results markers; the
# hand-written sections around it are kept): the machine, the date, each
# figure with the command that reproduces it, medians, ratios against the
# baselines measured in the same run, and each target met or NOT met.
#
#   bash bench/run_all.sh [--quick]     # --quick: fewer reps (a smoke run)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
BUILD=build-perf
REPS=5; OPS=200000; SMALL_OPS=40000; STEPS=300; LONG_STEPS=2000; GHZ_DURATION=30s
if [ $QUICK = 1 ]; then REPS=3; OPS=50000; SMALL_OPS=10000; STEPS=100; LONG_STEPS=500; GHZ_DURATION=5s; fi

echo "== building $BUILD (Release)"
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRADTAPE_BUILD_TESTS=OFF >/dev/null
ninja -C $BUILD recording_bench stream_bench kernel_bench memory_bench mlp_bench \
  gradtape-server gradtape-ghz-sessions unary_load large_tensor_bench >/dev/null
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import numpy" 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r tests/python/requirements.txt
fi
# The Python client's comparison (bench/python_bench.py) needs torch and
# tensorflow-cpu: benchmark-only dependencies, in a venv of their own
# (.venv-bench, or $GRADTAPE_BENCH_VENV), never in the tests' .venv or CI's
# path. PyPI's torch for Linux pulls the CUDA wheels: several GB. With
# GRADTAPE_BENCH_BASELINES=0 they are not installed (the bench then prints
# "not installed" for them). The client is reinstalled into it on every run,
# so that the bench measures this checkout (and its extension, when built).
BENCH_VENV="${GRADTAPE_BENCH_VENV:-.venv-bench}"
[ -x "$BENCH_VENV/bin/python" ] || python3 -m venv "$BENCH_VENV"
"$BENCH_VENV/bin/pip" install -q --disable-pip-version-check -r tests/python/requirements.txt
if [ "${GRADTAPE_BENCH_BASELINES:-1}" = 1 ] && \
    ! "$BENCH_VENV/bin/python" -c "import torch, tensorflow, jax, optax" 2>/dev/null; then
  echo "== installing bench/requirements.txt (torch, tensorflow-cpu, jax, optax) into $BENCH_VENV: several GB"
  "$BENCH_VENV/bin/pip" install -q --disable-pip-version-check -r bench/requirements.txt
fi
"$BENCH_VENV/bin/pip" install -q --disable-pip-version-check --no-build-isolation ./client/python
echo "== $BENCH_VENV: $(du -sh "$BENCH_VENV" 2>/dev/null | cut -f1)"

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
run() {  # run NAME COMMAND...: prints and records the command and its output
  local name="$1"; shift
  echo "== $name: $*"
  printf '%s\n' "$*" >"$OUT/$name.cmd"
  "$@" 2>&1 | tee "$OUT/$name.out"
}
run recording $BUILD/bench/recording_bench --benchmark_repetitions=$REPS \
  --benchmark_report_aggregates_only=true
run stream $BUILD/bench/stream_bench --ops=$OPS --small_batch_ops=$SMALL_OPS --reps=3
run stream_unwatched $BUILD/bench/stream_bench --ops=$OPS --reps=3 --batch_sizes=1024 --watch=false
run stream_every_reply $BUILD/bench/stream_bench --ops=$OPS --small_batch_ops=$SMALL_OPS --reps=3 \
  --reply_optional=false --gradient=false
# Each side by side with numpy in the same environment: as the machine is
# set up, and with its OpenBLAS settings unset (see docs/PERFORMANCE.md).
# Five alternating rounds: on this VM a process's MatMul speed varies from
# one process to the next (at 256^3, 130-410 GFLOP/s over 16 processes of
# the same build), so the report takes the median over the rounds.
UNSET=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
for round in 1 2 3 4 5; do
  run kernels.$round $BUILD/bench/kernel_bench --reps=$REPS
  run numpy.$round .venv/bin/python bench/numpy_bench.py --reps $REPS
  run kernels_unset.$round "${UNSET[@]}" $BUILD/bench/kernel_bench --reps=$REPS
  run numpy_unset.$round "${UNSET[@]}" .venv/bin/python bench/numpy_bench.py --reps $REPS
done
# numpy on one thread, for reference.
run numpy_1thread env OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/numpy_bench.py --reps $REPS
run memory $BUILD/bench/memory_bench --sessions=1000
run mlp $BUILD/bench/mlp_bench --steps=$STEPS --reps=$((2 * REPS + 1))
run mlp_long $BUILD/bench/mlp_bench --steps=$LONG_STEPS --reps=$REPS
# ghz: the baseline and the target scenario three times each, alternating
# with the templated ones (ghz's rate varies by 10-20% from run to run).
L=tests/load
GRADTAPE_BUILD_DIR=$ROOT/$BUILD run ghz bash $L/run_ghz.sh --duration=$GHZ_DURATION --unary-load \
  $L/keepalive.json $L/run_unary_fixed.json $L/run_unary.json \
  $L/keepalive.json $L/run_unary_fixed.json $L/stream.json \
  $L/keepalive.json $L/run_unary_fixed.json || true
# The Python client (native and pure backends) beside local PyTorch and TF
# eager: per op, the digits MLP, 64 MiB puts and fetches.
PYQUICK=(); [ $QUICK = 1 ] && PYQUICK=(--quick)
run python "$BENCH_VENV/bin/python" bench/python_bench.py --server-bin $BUILD/server/gradtape-server \
  --large-bin $BUILD/bench/large_tensor_bench ${PYQUICK[@]+"${PYQUICK[@]}"} || true
# The character transformer of client/python/examples/train_transformer.py
# and the small residual CNN of issue 26 (raw ops, Adam) through the server
# beside the same models in local PyTorch, 1 thread and default threads; the
# transformer also with the server on one intra-op thread (the scaling).
run transformer "$BENCH_VENV/bin/python" bench/transformer_bench.py \
  --server-bin $BUILD/server/gradtape-server --reps $REPS --scaling || true
run cnn "$BENCH_VENV/bin/python" bench/cnn_bench.py --server-bin $BUILD/server/gradtape-server \
  --reps $REPS || true

python3 bench/write_performance.py "$OUT" docs/PERFORMANCE.md
echo "== wrote docs/PERFORMANCE.md"
