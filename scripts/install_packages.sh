#!/usr/bin/env bash
# Sourced by setup.sh and fuzz.sh: install_packages PKG... installs the Debian
# packages among PKG that are missing (apt-get update first) and sets
# INSTALLED to the ones it installed. Returns non-zero if apt-get failed.
install_packages() {
  local missing=() p sudo=""
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$p")
  done
  INSTALLED=("${missing[@]}")
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing: ${missing[*]}"
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq || return 1
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}
