#!/usr/bin/env bash
# cuda_gemm_bench.sh: build tools/cuda_gemm_bench.cu (the BF16 prefill GEMM
# alone: gemm_bf16.cu against kernels.cu's tc_mm_kernel) and run it on a GPU
# machine, from the repo root.
#   tools/cuda_gemm_bench.sh [n,n,...]     output: $OUT (or /tmp)/cuda_gemm_bench.txt
set -uo pipefail
. "$(dirname "$0")/cuda_tool_env.sh" # ROOT DEST B NVCC F
for f in kernels mmv mmv_tc mmv_i8 gemm_bf16; do "$NVCC" $F -c "$ROOT/src/cuda/$f.cu" -o "$B/$f.o" & done
# gemm_wgmma.cu for sm_90a alone, as CMake builds it
"$NVCC" ${F/-arch=sm_90/--generate-code=arch=compute_90a,code=sm_90a} -DMTPLX_SM90A -c "$ROOT/src/cuda/gemm_wgmma.cu" -o "$B/gemm_wgmma.o" &
"$NVCC" $F -c "$ROOT/tools/cuda_gemm_bench.cu" -o "$B/bench.o" &
wait
"$NVCC" -arch=sm_90 "$B"/*.o -o "$B/cuda_gemm_bench" || exit 1
"$B/cuda_gemm_bench" "$@" 2>&1 | tee "$DEST/cuda_gemm_bench.txt"
