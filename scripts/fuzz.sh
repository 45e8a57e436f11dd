#!/usr/bin/env bash
# libFuzzer targets (tests/fuzz): builds them in build-fuzz/ with clang-14
# (ASan + UBSan + libFuzzer), replays every committed regression input
# (tests/fuzz/regressions/<fuzzer>/*) once, then fuzzes each target for
# SECONDS on a copy of its seed corpus (tests/fuzz/corpus/<fuzzer>; the
# committed corpus is never written). Crash, leak, timeout and OOM inputs go
# to build-fuzz/artifacts/<fuzzer>/. Prints the executions per fuzzer and
# exits non-zero if any replay or fuzz run found something.
#
#   bash scripts/fuzz.sh [SECONDS] [FUZZER...]   (default: 60, all three)
#   bash scripts/fuzz.sh --corpus                (regenerate the seed corpus)
#   bash scripts/fuzz.sh --configure DIR         (only configure DIR with
#       these flags and the tests on: scripts/test.sh builds the ASan ctest
#       suite there, then fuzzes in it with FUZZ_BUILD_DIR=DIR)
#
# Environment: FUZZ_NICE=N runs the fuzzers under nice -n N; FUZZ_WORK_DIR=D
# keeps the working corpus in D/<fuzzer> (default: a temporary copy that is
# deleted at the end); FUZZ_KEEP_GOING=1 restarts a target after a finding
# until its time is up (for long campaigns that collect every distinct
# finding; each finding's report stays in the log); FUZZ_TAG=T names the
# log build-fuzz/artifacts/<fuzzer>.T.log (for parallel campaigns);
# FUZZ_BUILD_DIR=D builds and writes artifacts in D instead of build-fuzz.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
ALL_FUZZERS=(batch_fuzzer checkpoint_fuzzer convert_fuzzer)

case "${1:-60}" in
  --corpus) ;;
  --configure) BUILD="${2:?usage: bash scripts/fuzz.sh --configure DIR}" ;;
  ''|*[!0-9]*)
    echo "usage: bash scripts/fuzz.sh [SECONDS] [FUZZER...] | --corpus | --configure DIR" >&2
    exit 2 ;;
esac

source "$ROOT/scripts/install_packages.sh"
install_packages clang-14 libfuzzer-14-dev libclang-rt-14-dev || exit 1

# The tests: on with --configure; otherwise off in a new folder and as they
# were in an existing one (so fuzzing in test.sh's build-asan keeps them).
TESTS=()
if [ "${1:-}" = "--configure" ]; then
  TESTS=(-DGRADTAPE_BUILD_TESTS=ON)
elif [ ! -f "$BUILD/CMakeCache.txt" ]; then
  TESTS=(-DGRADTAPE_BUILD_TESTS=OFF)
fi
mkdir -p "$BUILD"
echo "== configuring $BUILD (clang++-14, -fsanitize=fuzzer-no-link,address,undefined)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DGRADTAPE_FUZZ=ON "${TESTS[@]}" -DGRADTAPE_BUILD_BENCH=OFF \
  >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; exit 1; }
[ "${1:-}" = "--configure" ] && exit 0

if [ "${1:-}" = "--corpus" ]; then
  cmake --build "$BUILD" --target make_corpus || exit 1
  rm -rf tests/fuzz/corpus
  "$BUILD/tests/fuzz/make_corpus" tests/fuzz/corpus || exit 1
  for f in "${ALL_FUZZERS[@]}"; do
    echo "$f: $(ls tests/fuzz/corpus/$f | wc -l) seeds, $(du -sk tests/fuzz/corpus/$f | cut -f1) KiB"
  done
  exit 0
fi

SECONDS_EACH="${1:-60}"
shift || true
FUZZERS=("$@")
[ ${#FUZZERS[@]} -eq 0 ] && FUZZERS=("${ALL_FUZZERS[@]}")
cmake --build "$BUILD" --target "${FUZZERS[@]}" || exit 1

# batch_fuzzer's session has a 64 MiB limit: a single allocation of more
# than 256 MiB means memory was spent before the budget was checked (issue
# 11, class 3), so it is a finding (libFuzzer reports it as an OOM).
malloc_limit() {
  case "$1" in
    batch_fuzzer) echo 256 ;;
    *) echo 2048 ;;
  esac
}

max_len() {
  case "$1" in
    batch_fuzzer) echo 65536 ;;       # seeds are up to a few KiB
    checkpoint_fuzzer) echo 16384 ;;
    *) echo 4096 ;;
  esac
}

# Leaks are findings too; libFuzzer reports them itself.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
NICE=(nice -n "${FUZZ_NICE:-0}")
status=0
SUMMARY=()
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
touch "$TMP/start"
for f in "${FUZZERS[@]}"; do
  bin="$BUILD/tests/fuzz/$f"
  art="$BUILD/artifacts/$f"
  mkdir -p "$art"
  # 1. Every committed finding, once (libFuzzer runs files given as
  # arguments and exits non-zero if one crashes).
  regressions=0; regressions_failed=0
  if [ -d "tests/fuzz/regressions/$f" ]; then
    for input in tests/fuzz/regressions/"$f"/*; do
      [ -f "$input" ] || continue
      regressions=$((regressions + 1))
      if ! "$bin" -rss_limit_mb=2048 -malloc_limit_mb="$(malloc_limit "$f")" -timeout=10 "$input" >"$TMP/replay.log" 2>&1; then
        regressions_failed=$((regressions_failed + 1))
        echo "== $f: regression $input FAILS:"
        grep -E "ERROR: |runtime error|SUMMARY: |fuzz property|^    #[0-5] " "$TMP/replay.log" | head -12
        status=1
      fi
    done
  fi
  # 2. Fuzz a copy of the seed corpus.
  work="${FUZZ_WORK_DIR:-$TMP}/$f"
  mkdir -p "$work"
  cp -rn "tests/fuzz/corpus/$f/." "$work/" 2>/dev/null || true
  log="$BUILD/artifacts/$f${FUZZ_TAG:+.$FUZZ_TAG}.log"
  extra=()
  [ -f "tests/fuzz/$f.dict" ] && extra+=(-dict="tests/fuzz/$f.dict")
  echo "== fuzzing $f for ${SECONDS_EACH}s (log: $log)"
  : >"$log"
  rc=0; runs=0; execs=0; deadline=$((SECONDS + SECONDS_EACH))
  while :; do
    left=$((deadline - SECONDS))
    [ "$left" -gt 0 ] || break
    runs=$((runs + 1))
    "${NICE[@]}" "$bin" "$work" -max_total_time="$left" -max_len="$(max_len "$f")" \
      -rss_limit_mb=2048 -malloc_limit_mb="$(malloc_limit "$f")" -timeout=10 \
      -print_final_stats=1 -artifact_prefix="$art/" "${extra[@]}" >>"$log" 2>&1
    run_rc=$?
    [ "$run_rc" -ne 0 ] && rc=$run_rc
    # Without FUZZ_KEEP_GOING, the first finding ends the run; with it, a
    # new run starts on the (grown) working corpus until the time is up.
    [ "$run_rc" -ne 0 ] && [ "${FUZZ_KEEP_GOING:-0}" = 1 ] || break
  done
  # Executions: the sum of each run's final stats (libFuzzer prints them
  # on a crash, timeout or OOM too).
  execs="$(awk '/stat::number_of_executed_units/ {s += $2} END {print s + 0}' "$log")"
  findings="$(find "$art" -type f -newer "$TMP/start" | grep -cE '/(crash|leak|timeout|oom|slow-unit)-')"
  line="$f: ${execs:-?} executions in ${SECONDS_EACH}s ($runs run(s)), exit $rc, $findings finding(s) in ${art#"$ROOT"/}, regressions $regressions (failing $regressions_failed)"
  echo "$line"
  SUMMARY+=("$line")
  if [ "$rc" -ne 0 ] || grep -qE '^==[0-9]+==ERROR|^SUMMARY: |runtime error:' "$log"; then
    status=1
    grep -E "ERROR: |runtime error|SUMMARY: |fuzz property|Test unit written" "$log" | head -12
  fi
done
echo "== fuzz summary"
printf '%s\n' "${SUMMARY[@]}"
exit $status
