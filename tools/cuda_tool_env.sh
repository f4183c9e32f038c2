# cuda_tool_env.sh: sourced by the scripts that build a standalone CUDA
# tool of tools/ (cuda_mmv_bench.sh, cuda_attn_bench.sh, cuda_gemm_bench.sh):
# ROOT (the repository), DEST (where output goes: $OUT, else /tmp), B (a
# fresh build folder), NVCC and F (the flags every object is built with;
# TOOL_NVCC_EXTRA adds some); build_variants.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${OUT:-/tmp}"
B="$(mktemp -d)"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
F="-O3 -std=c++17 -arch=sm_90 ${TOOL_NVCC_EXTRA:-} -I$ROOT/include -I$ROOT/src -DMTPLX_HAVE_CUDA -D_GNU_SOURCE"

# build_variants SRC TAG VARIANT...: variant i, "NAME:FLAGS", builds SRC
# (from the repo root) with FLAGS into $B/TAG_i.o; "NAME@FILE:FLAGS" builds
# FILE in its place (an old version beside the new one). In the background:
# the caller waits.
build_variants() {
    local src=$1 tag=$2 i=0 v name f
    shift 2
    for v in "$@"; do
        name=${v%%:*} f="$ROOT/$src"
        [ "$name" != "${name#*@}" ] && f="$ROOT/${name#*@}"
        "$NVCC" $F ${v#*:} -c "$f" -o "$B/${tag}_$i.o" &
        i=$((i + 1))
    done
}
