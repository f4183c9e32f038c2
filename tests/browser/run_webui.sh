#!/usr/bin/env bash
# run_webui.sh: the web UI's browser test (webui.test.mjs) under `node --test`.
# Usage: tests/browser/run_webui.sh MTPLX_BIN [ARTIFACT_DIR]
# Exits 77 (CTest's skip) when node, Debian's chromium or playwright-core
# (tests/npm, installed by scripts/test.sh) is missing.
set -u
cd "$(dirname "$0")/../.."
bin=${1:-build/mtplx}
export MTPLX_BIN=$(realpath "$bin")
export MTPLX_ARTIFACTS=${2:-build/test-artifacts}
export MTPLX_SOURCE_DIR=$PWD
export CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
command -v node >/dev/null 2>&1 || { echo "skip: node is not installed"; exit 77; }
[ -x "$CHROMIUM" ] || { echo "skip: no chromium at $CHROMIUM (apt-get install chromium)"; exit 77; }
[ -d tests/npm/node_modules/playwright-core ] || { echo "skip: playwright-core missing (npm ci --prefix tests/npm)"; exit 77; }
exec node --test --test-concurrency=1 tests/browser/webui.test.mjs
