# Sourced by the scripts that need Go (>= 1.22: the Go client test, ghz).
# Puts a suitable `go` first on PATH: the one already there, /usr/local/go,
# or, on a bare Debian 12 (whose golang is 1.19), a toolchain fetched through
# the Go module proxy (module golang.org/toolchain) with Debian's Go 1.19 as
# the bootstrap. Returns non-zero, with a message, if none can be had.
_gradtape_go_ok() {
  local v
  v=$("$1" env GOVERSION 2>/dev/null) || return 1
  v=${v#go}
  local major=${v%%.*} rest=${v#*.}
  local minor=${rest%%.*}
  [ "$major" -gt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -ge 22 ]; }
}
_gradtape_go_env() {
  local root tool
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  tool="$root/.tools/go1.22.12"
  for go in "$(command -v go 2>/dev/null)" /usr/local/go/bin/go "$tool/bin/go"; do
    if [ -n "$go" ] && [ -x "$go" ] && _gradtape_go_ok "$go"; then
      PATH="$(dirname "$go"):$PATH"
      export PATH
      return 0
    fi
  done
  echo "== Go >= 1.22 not found: fetching go1.22.12 through the Go module proxy"
  if [ ! -x /usr/lib/go-1.19/bin/go ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      $SUDO apt-get install -y -qq --no-install-recommends golang-1.19-go >/dev/null
  fi
  local gopath dir
  gopath="$(mktemp -d)"
  dir=$(cd "$gopath" && GOPATH="$gopath" GOFLAGS=-modcacherw GO111MODULE=on \
    /usr/lib/go-1.19/bin/go mod download -json \
    golang.org/toolchain@v0.0.1-go1.22.12.linux-amd64 |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  if [ -z "$dir" ] || [ ! -f "$dir/bin/go" ]; then
    echo "could not fetch a Go toolchain; install Go >= 1.22" >&2
    rm -rf "$gopath"
    return 1
  fi
  mkdir -p "$root/.tools"
  rm -rf "$tool"
  cp -r "$dir" "$tool"
  chmod -R u+w "$tool"
  chmod +x "$tool"/bin/* "$tool"/pkg/tool/*/*
  rm -rf "$gopath"
  PATH="$tool/bin:$PATH"
  export PATH
  _gradtape_go_ok "$tool/bin/go"
}
_gradtape_go_env
