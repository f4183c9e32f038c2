#!/usr/bin/env bash
# deps.sh: install the Debian packages mtplx needs to build and test, when
# missing. Usage: scripts/deps.sh [--test]   (--test adds test-only packages)
set -euo pipefail
pkgs=(build-essential cmake pkg-config libpcre2-dev libutf8proc-dev libcjson-dev
      libmicrohttpd-dev libedit-dev xz-utils)
if [ "${1:-}" = "--test" ]; then
  pkgs+=(libcmocka-dev python3 python3-jinja2 clang libclang-rt-14-dev git cppcheck prometheus)
  # node and npm often come from elsewhere than Debian (the machine image):
  # ask apt for them only when the commands are missing
  command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
  command -v npm >/dev/null 2>&1 || pkgs+=(npm)
  pkgs+=(chromium) # the web UI's browser test (tests/browser), headless
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
