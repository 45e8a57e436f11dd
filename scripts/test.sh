#!/usr/bin/env bash
# The whole test suite: install, build, run ctest (C++: core, server,
# client) and pytest (the protocol from Python). Ends with both runners'
# own summary lines; exits non-zero if either failed.
set -uo pipefail
set -e
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"

if [ ! -x .venv/bin/pytest ] || ! cmp -s tests/python/requirements.txt .venv/requirements.txt; then
  echo "== python venv (.venv)"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r tests/python/requirements.txt
  cp tests/python/requirements.txt .venv/requirements.txt
fi
echo "== python client (pip install ./client/python: stubs generated from proto/)"
.venv/bin/pip install -q --disable-pip-version-check --no-build-isolation ./client/python

status=0
LOGS="$(mktemp -d)"
trap 'rm -rf "$LOGS"' EXIT
echo "== ctest"
ctest --test-dir build --output-on-failure -j2 --timeout 600 2>&1 \
  | tee "$LOGS/ctest" || status=1
echo "== go client (client/go: stubs generated from proto/; golden values written by ctest)"
[ -x /usr/local/go/bin/go ] && PATH="$PATH:/usr/local/go/bin"
if command -v go >/dev/null; then
  (cd client/go && bash generate.sh \
    && GRADTAPE_SERVER_BIN="$ROOT/build/server/gradtape-server" \
       GRADTAPE_GOLDEN_JSON="$ROOT/build/golden/mlp_golden.json" \
       timeout 600 go test -count=1 ./...) 2>&1 | tee "$LOGS/go" || status=1
else
  echo "go: not found (Go >= 1.22 is needed for client/go)" | tee "$LOGS/go"; status=1
fi
echo "== pytest"
GRADTAPE_SERVER_BIN="$ROOT/build/server/gradtape-server" \
  timeout 900 .venv/bin/pytest -q tests/python 2>&1 | tee "$LOGS/pytest" || status=1
echo "== ghz load test (tests/load, 5 s per scenario; fails on errors only)"
bash tests/load/run_ghz.sh --duration=5s 2>&1 | tee "$LOGS/ghz" || status=1
echo "== summary"
grep -E "tests passed|tests failed" "$LOGS/ctest" | tail -1 || echo "ctest: no summary"
tail -1 "$LOGS/pytest"
grep -E "^(ok|FAIL|go:)" "$LOGS/go" | tail -2 || echo "go: no summary"
exit $status
