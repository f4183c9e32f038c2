# cuda_tool_env.sh: sourced by the scripts that build a standalone CUDA
# tool of tools/ (cuda_mmv_bench.sh, cuda_attn_bench.sh, cuda_gemm_bench.sh):
# ROOT (the repository), DEST (where output goes: $OUT, else /tmp), B (a
# fresh build folder), NVCC and F (the flags every object is built with;
# TOOL_NVCC_EXTRA adds some).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${OUT:-/tmp}"
B="$(mktemp -d)"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
F="-O3 -std=c++17 -arch=sm_90 ${TOOL_NVCC_EXTRA:-} -I$ROOT/include -I$ROOT/src -DMTPLX_HAVE_CUDA -D_GNU_SOURCE"
