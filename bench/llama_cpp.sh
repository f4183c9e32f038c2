#!/usr/bin/env bash
# bench/llama_cpp.sh: fetch and build llama.cpp's llama-bench for side-by-side
# numbers on the very same GGUF files (bench/run.sh). Not part of CI.
#
# The source comes from the npm package node-llama-cpp, which ships llama.cpp
# as a git bundle (llama/gitRelease.bundle). Everything lives in the
# gitignored .cache/llama.cpp/; the build (CPU only, native ISA, no curl) is
# done once and reused. Nothing from llama.cpp is committed to this repo.
#
# Usage: bench/llama_cpp.sh        prints the path of llama-bench on success
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="$ROOT/.cache/llama.cpp"
VERSION="3.22.1"
BIN="$CACHE/build/bin/llama-bench"
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$CACHE"
cd "$CACHE"
if [ ! -d src/.git ] && [ ! -f src/CMakeLists.txt ]; then
    if [ ! -f "node-llama-cpp-$VERSION.tgz" ]; then
        npm pack "node-llama-cpp@$VERSION" >&2
    fi
    rm -rf pkg && mkdir pkg
    tar -xzf "node-llama-cpp-$VERSION.tgz" -C pkg
    bundle="$(find pkg -name gitRelease.bundle | head -1)"
    [ -n "$bundle" ] || { echo "llama_cpp.sh: no gitRelease.bundle in the package" >&2; exit 1; }
    rm -rf src
    git clone -q "$bundle" src >&2
fi
cmake -S src -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENMP=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_TOOLS=ON >&2
cmake --build build --target llama-bench -j"$(nproc)" >&2
echo "$BIN"
