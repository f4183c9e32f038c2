#!/usr/bin/env bash
# cuda_llama_cpp.sh: llama.cpp's CUDA build as the peer of tools/cuda_bench.sh
# (issue 10), on the very same random-weight GGUFs. Not CI; nothing from
# llama.cpp is committed. Two steps:
#
#   tools/cuda_llama_cpp.sh prep    here (npm's registry reachable): llama.cpp's
#       source from the npm package node-llama-cpp (its git bundle, as
#       bench/llama_cpp.sh fetches it), trimmed to what a build of
#       llama-bench needs, into .carry/llama_src.tgz (~10 MB; name .carry in
#       the device call's carry)
#   tools/cuda_llama_cpp.sh build   on the GPU machine: unpacks it and builds
#       llama-bench with CUDA for sm_90 alone (in build-llama-cuda/, or
#       LLAMA_CUDA_DIR); prints the binary's path. Then
#       LLAMA_BENCH=<that path> tools/cuda_bench.sh ... adds a llama.cpp row
#       (prefill and decode tokens/s) under each model's mtplx rows.
#
# Ran on an H200 (bench/RESULTS.md section 38: the build takes about 310 s there).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VERSION="3.22.1" # bench/llama_cpp.sh's
TGZ="$ROOT/.carry/llama_src.tgz"
case "${1:-}" in
prep)
    W="$(mktemp -d)"
    (cd "$W" && npm pack "node-llama-cpp@$VERSION" >&2 && mkdir pkg && tar -xzf "node-llama-cpp-$VERSION.tgz" -C pkg)
    bundle="$(find "$W/pkg" -name gitRelease.bundle | head -1)"
    [ -n "$bundle" ] || { echo "cuda_llama_cpp.sh: no gitRelease.bundle in the package" >&2; exit 1; }
    git clone -q "$bundle" "$W/src" >&2
    mkdir -p "$ROOT/.carry"
    (cd "$W/src" && tar -czf "$TGZ" CMakeLists.txt LICENSE licenses cmake ggml src include common tools vendor app)
    rm -rf "$W"
    ls -la "$TGZ" >&2
    ;;
build)
    [ -f "$TGZ" ] || { echo "cuda_llama_cpp.sh: $TGZ missing (run prep here, carry .carry)" >&2; exit 1; }
    S="${LLAMA_CUDA_DIR:-$ROOT/build-llama-cuda}" # ignored by git: a warm machine keeps it between calls
    BIN="$S/build/bin/llama-bench"
    if [ ! -x "$BIN" ]; then
        rm -rf "$S" && mkdir -p "$S" && tar -xzf "$TGZ" -C "$S"
        cmake -S "$S" -B "$S/build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
            -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
            -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON >&2
        cmake --build "$S/build" --target llama-bench -j"$(nproc)" >&2
    fi
    echo "$BIN"
    ;;
*)
    echo "usage: tools/cuda_llama_cpp.sh prep|build" >&2
    exit 2
    ;;
esac
