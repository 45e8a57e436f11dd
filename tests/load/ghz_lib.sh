# Shared pieces of the load scripts (run_ghz.sh, soak.sh). Source it; it
# defines functions and two variables and runs nothing:
#
#   GHZ_VERSION, GHZ           the pinned ghz and where it is installed
#   ghz_install                installs ghz (go install through the Go module
#                              proxy, into .tools/bin) unless the pinned one
#                              is there; returns 1 with a message if it cannot
#   start_server OUT_DIR ARGS  starts BUILD's gradtape-server on a free
#                              loopback port with ARGS; sets SERVER_PID,
#                              ADDRESS and METRICS_PORT (empty without
#                              --metrics_address); stdout/stderr go to
#                              OUT_DIR/server.{out,err}; returns 1 if it did
#                              not start on 127.0.0.1
#   server_cpu                 CPU seconds SERVER_PID has used (utime + stime)
#   ghz_summary REPORT NAME MIN_RPS CPU_SECONDS
#                              prints "ghz NAME: N requests in ..." (with the
#                              server's cores busy unless CPU_SECONDS is
#                              empty) and then,
#                              on a last line of its own, the call count;
#                              returns 1 on any non-OK call, any ghz error,
#                              zero calls, or fewer than MIN_RPS (0: no floor)
#
# Callers set ROOT (the repository) and BUILD (the build folder) first.
GHZ_VERSION=v0.120.0
GHZ="$ROOT/.tools/bin/ghz"

ghz_install() {
  # (`go install` builds report version "dev": a stamp file records the pin.)
  if [ -x "$GHZ" ] && [ "$(cat "$GHZ.version" 2>/dev/null)" = "$GHZ_VERSION" ]; then
    return 0
  fi
  # shellcheck source=../../scripts/go_env.sh
  source "$ROOT/scripts/go_env.sh" \
    || { echo "FAILED: Go is needed to install ghz (go install)" >&2; return 1; }
  local go
  go="$(command -v go)"
  echo "== installing ghz $GHZ_VERSION (go install, Go module proxy) into .tools/bin"
  mkdir -p "$(dirname "$GHZ")"
  GOBIN="$(dirname "$GHZ")" GOFLAGS=-mod=mod "$go" install \
    "github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION" \
    || { echo "FAILED: go install ghz@$GHZ_VERSION" >&2; return 1; }
  echo "$GHZ_VERSION" >"$GHZ.version"
}

start_server() {
  local out="$1"
  shift
  "$BUILD/server/gradtape-server" --address=127.0.0.1:0 "$@" \
    >"$out/server.out" 2>"$out/server.err" &
  SERVER_PID=$!
  ADDRESS=""
  local _
  for _ in $(seq 100); do
    ADDRESS="$(sed -n 's/^gradtape-server listening on //p' "$out/server.out")"
    [ -n "$ADDRESS" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  METRICS_PORT="$(sed -n 's/^gradtape-server metrics on port //p' "$out/server.out")"
  [ -n "$ADDRESS" ] || { echo "FAILED: server did not start" >&2; cat "$out/server.err" >&2; return 1; }
  case "$ADDRESS" in 127.0.0.1:*) ;; *) echo "FAILED: not loopback: $ADDRESS" >&2; return 1 ;; esac
}

server_cpu() {
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$SERVER_PID/stat"
}

ghz_summary() {
  python3 - "$@" <<'PY'
import json, sys
report, name, min_rps = json.load(open(sys.argv[1])), sys.argv[2], float(sys.argv[3])
busy = ""
if sys.argv[4]:  # the server's CPU seconds during this run
    busy = (f" (server busy {float(sys.argv[4]) / (report['total'] / 1e9):.2f} cores;"
            " ghz had the rest)")
codes = report.get("statusCodeDistribution") or {}
errors = report.get("errorDistribution") or {}
not_ok = sum(n for code, n in codes.items() if code != "OK")
lat = {int(p["percentage"]): p["latency"] / 1e6 for p in report.get("latencyDistribution") or []}
print(f"ghz {name}: {report['count']} requests in {report['total'] / 1e9:.1f} s, "
      f"{report['rps']:.0f} req/s, p50 {lat.get(50, float('nan')):.2f} ms, "
      f"p99 {lat.get(99, float('nan')):.2f} ms, errors {not_ok + sum(errors.values())}{busy}")
failed = False
if not_ok or errors or report["count"] == 0:
    print(f"ghz {name}: FAILED: status codes {codes}, errors {errors}", file=sys.stderr)
    failed = True
if min_rps and report["rps"] < min_rps:
    print(f"ghz {name}: FAILED: {report['rps']:.0f} req/s < --min-rps={min_rps:.0f}", file=sys.stderr)
    failed = True
print(report["count"])
sys.exit(1 if failed else 0)
PY
}
