#!/usr/bin/env bash
# cuda_attn_bench.sh: build tools/cuda_attn_bench.cu (the step attention
# alone) once per variant of attention.cu and run each on a GPU machine,
# from the repo root; optionally profile one configuration with ncu.
#
#   tools/cuda_attn_bench.sh ["NAME:-DFLAG=V" | "NAME@FILE:" ...]   (default: one build, no flags)
#
# NAME@FILE builds FILE (another version of attention.cu) in its place, so
# an old kernel and a new one run side by side. Environment: SHAPES ("0.6b
# 8b"), POSITIONS (1024,4096,16384), ROWS (1,4,8), and the bench's own
# (LAYERS, PER_SM, KERNEL). NCU="P,N,K ..." (e.g. "4096,1,group"): after
# the tables, ncu's full set on the third launch of each such configuration
# of the first variant; its details page and its SASS source page (stall
# reasons a line) go to $OUT. TRACE="P,N ...": attn_mma_kernel's per-block
# phase times at position P, N rows (the first variant must be built with
# -DMTPLX_ATTN_TRACE); READ_POS="P,...": the bench's READ probe (the cache's
# reads alone, several ways). Output to $OUT (or /tmp): cuda_attn_bench.txt.
set -uo pipefail
TOOL_NVCC_EXTRA=-lineinfo . "$(dirname "$0")/cuda_tool_env.sh" # ROOT DEST B NVCC F build_variants
[ $# -eq 0 ] && set -- "default:"
"$NVCC" $F -c "$ROOT/tools/cuda_attn_bench.cu" -o "$B/bench.o" &
build_variants src/cuda/attention.cu att "$@"
wait
: >"$DEST/cuda_attn_bench.txt"
i=0
for v in "$@"; do
    "$NVCC" -arch=sm_90 "$B/bench.o" "$B/att_$i.o" -o "$B/bench_$i" || { i=$((i + 1)); continue; }
    for s in ${SHAPES:-0.6b 8b}; do
        { echo "=== variant ${v%%:*}: ${v#*:}"; "$B/bench_$i" "$s" "${POSITIONS:-1024,4096,16384}" "${ROWS:-1,4,8}"; } 2>&1 |
            tee -a "$DEST/cuda_attn_bench.txt"
    done
    i=$((i + 1))
done
if [ -n "${READ_POS:-}" ]; then # the cache's reads alone (the bench's READ)
    READ="$READ_POS" "$B/bench_0" "${NCU_SHAPE:-0.6b}" 2>&1 | tee -a "$DEST/cuda_attn_bench.txt"
fi
for c in ${TRACE:-}; do # (the first variant built with -DMTPLX_ATTN_TRACE)
    TRACE="$c" "$B/bench_0" "${NCU_SHAPE:-0.6b}" 2>&1 | tee -a "$DEST/cuda_attn_bench.txt"
done
NC=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
j=0
for c in ${NCU:-}; do
    [ -n "$NC" ] && [ -x "$B/bench_0" ] || break
    k=${c##*,}
    ONE="$c" timeout 200 "$NC" --kernel-name "regex:attn_${k/head/kernel}" --launch-skip 2 --launch-count 1 \
        --set full --import-source yes --clock-control none -f -o "$B/rep$j" "$B/bench_0" "${NCU_SHAPE:-0.6b}" \
        >"$DEST/ncu$j.log" 2>&1
    "$NC" -i "$B/rep$j.ncu-rep" --page details --print-details all >"$DEST/ncu${j}_details.txt" 2>&1
    "$NC" -i "$B/rep$j.ncu-rep" --page source --print-source sass --csv >"$DEST/ncu${j}_sass.csv" 2>&1
    "$NC" -i "$B/rep$j.ncu-rep" --page source --print-source cuda --csv >"$DEST/ncu${j}_cuda.csv" 2>&1
    j=$((j + 1))
done
