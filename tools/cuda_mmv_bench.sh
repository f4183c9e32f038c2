#!/usr/bin/env bash
# cuda_mmv_bench.sh: build tools/cuda_mmv_bench.cu (the decode / verify
# GEMVs alone on Qwen3-8B shapes) once per variant of mmv_i8.cu's (or
# VARIANTS_OF's) compile-time knobs and run each; on a GPU machine, from the
# repo root.
#
#   tools/cuda_mmv_bench.sh ["NAME:-DFLAG=V -DFLAG2=V" ...]   (default: one build, no flags)
#
# A variant named NAME@FILE builds FILE (another version of the varied file,
# from the repo root) in place of it: an old kernel beside the new one in
# the same run (it must export what cuda_mmv_bench.cu calls).
# VARIANTS_OF=mmv_tc.cu (or mmv.cu) varies that file of src/cuda instead of
# mmv_i8.cu, which then gets one plain build.
#
# LAYERS (default 36, 8B's) and MMV_TYPES (e.g. "Q8_0,Q4_K"; default all)
# go to the program. Output to $OUT (or /tmp): cuda_mmv_bench.txt. WAIT_FOR=FILE: build, then
# wait for FILE to exist before running (so that the GPU is otherwise idle
# while a build elsewhere is done first).
set -uo pipefail
. "$(dirname "$0")/cuda_tool_env.sh" # ROOT DEST B NVCC F build_variants
[ $# -eq 0 ] && set -- "default:"
VOF="${VARIANTS_OF:-mmv_i8.cu}"
FILES="mmv.cu mmv_tc.cu mmv_i8.cu"
for f in $FILES; do
    [ "$f" = "$VOF" ] || "$NVCC" $F -c "$ROOT/src/cuda/$f" -o "$B/${f%.cu}.o" &
done
"$NVCC" $F -c "$ROOT/tools/cuda_mmv_bench.cu" -o "$B/bench.o" &
build_variants "src/cuda/$VOF" var "$@"
wait
if [ -n "${WAIT_FOR:-}" ]; then while [ ! -e "$WAIT_FOR" ]; do sleep 1; done; fi
: >"$DEST/cuda_mmv_bench.txt"
i=0
for v in "$@"; do
    objs=""
    for f in $FILES; do
        if [ "$f" = "$VOF" ]; then objs="$objs $B/var_$i.o"; else objs="$objs $B/${f%.cu}.o"; fi
    done
    "$NVCC" -arch=sm_90 "$B/bench.o" $objs -o "$B/bench_$i" &&
        { echo "=== variant ${v%%:*}: ${v#*:}"; "$B/bench_$i" ${LAYERS:-36} ${MMV_TYPES:-}; } 2>&1 | tee -a "$DEST/cuda_mmv_bench.txt"
    i=$((i + 1))
done
