#!/usr/bin/env bash
# cuda_prof.sh: a per-kernel time breakdown of a random-weight Qwen3-shape
# decode step (issue 10), with nsys when the GPU machine has it (ncu if not).
#
#   [SIZE=0.6b|1.7b|8b] [TYPE=bf16|q8_0|q4_k] [CLOCK=base|none] [PREFILL=N] [POS=P]
#   [NCU_KERNEL=REGEX NCU_SECTIONS="WarpStateStats ..."] tools/cuda_prof.sh
#   (after tools/cuda_test.sh built build-cuda-gpu/; default 0.6b bf16 base)
#
# POS=P profiles the steps after a context of P tokens (bench_models --pos).
# NCU_KERNEL with NCU_SECTIONS (ncu only) adds ncu_sections.txt: those
# sections of ncu for the first 20 launches of the kernels whose names
# match REGEX (e.g. NCU_KERNEL=attn_kernel NCU_SECTIONS="WarpStateStats
# SourceCounters": where a kernel's warps stall). NCU_SKIP=N skips the
# first N matching launches: with POS, bench_models builds the context in
# chunks of 24 rows and the last chunk's rows (at most 16) take the step
# kernels, so an 8B step attention's decode launches start at NCU_SKIP=36
# (one a layer) when POS mod 24 is 1 to 16 (512: yes).
#
# PREFILL=N profiles a prefill of N tokens instead (one forward of N rows
# after a 1-token context and the warm step: the summary's last forward),
# ncu only.
#
# CLOCK=none lets ncu run the kernels at the clocks the card picks (what the
# graph sees) instead of base clocks. ncu also records each kernel's DRAM
# bytes read, registers a thread and active warps, and the summary gives
# each kernel kind's GB/s (DRAM bytes / time).
#
# Writes to $OUT (or the build dir): base.json (bench_models, medians of 15,
# no profiler), and per PDL setting (MTPLX_CUDA_PDL=1 / 0) k$p_*.csv: nsys's
# kernel summary and its GPU trace (every kernel: start, duration, grid), from
# `bench_models run --reps 3` (each rep: 1, 2, 4, 8-token steps, graphs on,
# traced node by node). With PDL a kernel's duration includes the time it
# waits in griddepcontrol.wait for its predecessor, so the PDL=0 trace is the
# one that gives each kernel's own time.
#   The H200 image has no nsys, only ncu (2026-12-02): then ncu0.csv is
# gpu__time_duration of the first 1200 kernels, PDL off (the 16-token
# prefill, the warm decode step, then one rep of 1, 2, 4, 8 rows), and
# ncu0_summary.txt that per forward and kernel. ncu runs each kernel alone
# with L2 flushed and clocks at base, so its sum (1.79 ms a decode step) is
# not the graph's time (0.99 ms), and kernels that overlap in the graph
# (PDL) are counted whole: a guide to where time goes, not a budget
# (bench/RESULTS.md section 21a).
set -uo pipefail
. "$(dirname "$0")/cuda_env.sh" # ROOT, BUILD, the loader path to BUILD/deps
O="${OUT:-$BUILD}"
BM="$BUILD/bench/bench_models"
S="$BUILD/scratch-prof"
mkdir -p "$O" "$S"
{ command -v nsys ncu; ls /usr/local/cuda/bin; ls -d /opt/nvidia/* /usr/local/cuda/nsight* 2>&1; } >"$O/which.txt" 2>&1
SIZE="${SIZE:-0.6b}" TYPE="${TYPE:-bf16}" CLOCK="${CLOCK:-base}"
RUN_ARGS="--reps 1 --prefill 0 --prefill-reps 0"
[ -n "${POS:-}" ] && RUN_ARGS="$RUN_ARGS --pos $POS"
[ -n "${PREFILL:-}" ] && RUN_ARGS="--reps 0 --pos 1 --prefill $PREFILL --prefill-reps 1" NS=""
"$BM" gen --vocab "$ROOT/models/default.gguf" --out "$S" --size "$SIZE" --types "$TYPE" >/dev/null || exit 1
M="$S/qwen3-$SIZE-$TYPE.gguf"
[ -n "${PREFILL:-}" ] || timeout 240 "$BM" run "$M" --device cuda --reps 15 --prefill 0 --prefill-reps 0 >"$O/base.json"
[ -n "${PREFILL:-}" ] || NS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
NC=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NS" ]; then
    for p in 0 1; do
        MTPLX_CUDA_PDL=$p timeout 90 "$NS" profile --cuda-graph-trace=node -t cuda -f true -o "$S/p$p" \
            "$BM" run "$M" --device cuda --reps 3 --prefill 0 --prefill-reps 0 >"$O/nsys$p.log" 2>&1
        timeout 60 "$NS" stats -r cuda_gpu_kern_sum,cuda_gpu_trace -f csv -o "$O/k$p" "$S/p$p.nsys-rep" >>"$O/nsys$p.log" 2>&1
    done
elif [ -n "$NC" ]; then
    MTPLX_CUDA_PDL=0 timeout 240 "$NC" --graph-profiling node -c "${NCU_COUNT:-1200}" --clock-control "$CLOCK" \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active --csv \
        "$BM" run "$M" --device cuda $RUN_ARGS >"$O/ncu0.csv" 2>"$O/ncu0.err"
    python3 - "$O/ncu0.csv" >"$O/ncu0_summary.txt" <<'PY'
import csv, re, sys
rows = list(csv.reader(l for l in open(sys.argv[1]) if l.startswith('"')))
ix = {k: i for i, k in enumerate(rows[0])}
num = lambda v: float(v.replace(",", "")) if v.replace(",", "").replace(".", "").isdigit() else 0.0
kern = {}  # ID -> [name, block, grid, {metric: value}]
for r in rows[1:]:
    k = kern.setdefault(r[ix["ID"]], [re.sub(r"\(.*|void |<unnamed>::", "", r[ix["Kernel Name"]]),
                                      r[ix["Block Size"]], r[ix["Grid Size"]], {}])
    v = num(r[ix["Metric Value"]])
    unit = r[ix["Metric Unit"]] if "Metric Unit" in ix else ""
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1, "usecond": 1, "ms": 1e3, "msecond": 1e3, "byte": 1,
             "Kbyte": 1e3, "KB": 1e3, "Mbyte": 1e6, "MB": 1e6, "Gbyte": 1e9, "GB": 1e9}.get(unit, 1)
    k[3][r[ix["Metric Name"]]] = v * scale
ks = [(k[0], k[1], k[2], k[3].get("gpu__time_duration.sum", 0), k[3].get("dram__bytes_read.sum", 0),
       k[3].get("launch__registers_per_thread", 0), k[3].get("sm__warps_active.avg.pct_of_peak_sustained_active", 0))
      for _, k in sorted(kern.items(), key=lambda kv: int(kv[0]))]
cut = [i for i, k in enumerate(ks) if k[0].startswith("get_row")] + [len(ks)]  # a forward starts with get_rows
for f in range(len(cut) - 1):
    seg = ks[cut[f]:cut[f + 1]]
    tot = sum(k[3] for k in seg)
    print("forward %d (get_rows grid %s): %d kernels, %.1f us" % (f, seg[0][2], len(seg), tot))
    by = {}
    for k in seg:
        by.setdefault(k[:3], []).append(k[3:])
    for key, v in sorted(by.items(), key=lambda kv: -sum(x[0] for x in kv[1])):
        t = sum(x[0] for x in v)
        gbs = sum(x[1] for x in v) / (t * 1e3) if t else 0
        print("  %-32s block %-12s grid %-13s x%-3d mean %7.2f us  sum %7.1f us  %5.1f%%  %6.0f GB/s  %3d regs  %4.1f%% warps" % (
            key[0], key[1], key[2], len(v), t / len(v), t, 100 * t / tot, gbs, v[0][2], v[0][3]))
PY
else
    echo "no nsys, no ncu" >>"$O/which.txt"
fi
if [ -n "$NC" ] && [ -n "${NCU_KERNEL:-}" ] && [ -n "${NCU_SECTIONS:-}" ]; then
    SEC=()
    for x in $NCU_SECTIONS; do SEC+=(--section "$x"); done
    MTPLX_CUDA_PDL=0 timeout 240 "$NC" --graph-profiling node -k "regex:$NCU_KERNEL" --launch-skip "${NCU_SKIP:-0}" -c 20 --clock-control "$CLOCK" \
        "${SEC[@]}" "$BM" run "$M" --device cuda $RUN_ARGS >"$O/ncu_sections.txt" 2>&1
fi
rm -f "$M"
