#!/usr/bin/env bash
# cuda_bench.sh: the H200 benchmark table of the CUDA backend (issue 10).
#
#   tools/cuda_bench.sh [SIZES] [TYPES]     e.g. tools/cuda_bench.sh "0.6b 1.7b 8b" "bf16 q8_0 q4_k"
#
# Needs a build made by tools/cuda_test.sh (BUILD, default build-cuda-gpu/,
# with bench_models) and a GPU. For each Qwen3 shape and weight type it
# writes a random-weight GGUF with `bench_models gen` (values do not matter
# for speed), runs `bench_models run --device cuda` (decode = 1 token,
# verify = 2 / 4 / 8 tokens at position 16 (POSITIONS), medians of 15, CUDA graphs on,
# then prefill of 512 tokens), deletes the file, and prints one table row.
# The ceiling is the card's own bandwidth, measured here with a device-to-
# device copy of 4 GiB (torch, when it is installed; 2 x bytes / time).
# Output: $OUT/cuda_bench.jsonl (one JSON object per run) and
# $OUT/cuda_bench.txt (the table); without OUT both go to the build dir.
# VARIANTS="A B ...": run each model once per variant, a variant being
# environment settings joined by commas ("-" = none), e.g.
# VARIANTS="- MTPLX_CUDA_MMA=0" for the tensor-core GEMV against the f32 one
# on the same file; each row names its variant. BUILD=DIR in a variant runs
# DIR/bench/bench_models instead (another build, e.g. of the sources before a change). PREFILL / PREFILL_REPS
# (default 512 / 3): the prefill measured after the steps (its column).
# POSITIONS="16 1024 ..." (default 16): the decode and verify steps after a
# context of that many tokens, each position a row (named "@P" after the
# variant when it is not 16). LLAMA_BENCH=PATH (llama.cpp's llama-bench built
# with CUDA: tools/cuda_llama_cpp.sh): after each model's rows, one row of
# llama.cpp on the same file (all layers on the GPU, flash attention on):
# its decode (tg 128) as ms a token and its prefill (pp PREFILL) tokens/s.
set -uo pipefail
. "$(dirname "$0")/cuda_env.sh" # ROOT, BUILD, the loader path to BUILD/deps
DEST="${OUT:-$BUILD}"
SIZES="${1:-0.6b 1.7b 8b}"
TYPES="${2:-bf16 q8_0 q4_k}"
VARIANTS="${VARIANTS:--}"
PREFILL="${PREFILL:-512}" PREFILL_REPS="${PREFILL_REPS:-3}"
POSITIONS="${POSITIONS:-16}"
BM="$BUILD/bench/bench_models"
SCRATCH="$BUILD/scratch-bench"
[ -x "$BM" ] || { echo "cuda_bench: $BM missing (run tools/cuda_test.sh first)" >&2; exit 1; }
# the build's private dependency prefix (cuda_test.sh unpacks .debs there)
mkdir -p "$SCRATCH" "$DEST"
JSONL="$DEST/cuda_bench.jsonl"
TXT="$DEST/cuda_bench.txt"
: >"$JSONL"

BW=$(python3 - 2>/dev/null <<'PY'
import torch
n = 4 << 30
x = torch.empty(n, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
torch.cuda.synchronize()
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
ts = []
for _ in range(10):
    e0.record(); y.copy_(x); e1.record(); torch.cuda.synchronize()
    ts.append(e0.elapsed_time(e1) / 1e3)
ts.sort()
print("%.0f" % (2 * n / ts[len(ts) // 2] / 1e9))
PY
)
BW="${BW:-4300}"
{
    echo "GPU: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null)"
    echo "copy bandwidth (device-to-device, 4 GiB, median of 10): $BW GB/s"
    echo "random-weight Qwen3 shapes, bench_models run --device cuda --graphs 1, medians of 15"
    printf '%-5s %-5s %9s %9s %8s %6s %6s %6s %6s %11s  %s\n' size type 'weights' 'decode ms' 'GB/s' '%bw' n=2 n=4 n=8 'prefill t/s' variant
} | tee "$TXT"
for s in $SIZES; do
    for t in $TYPES; do
        if ! "$BM" gen --vocab "$ROOT/models/default.gguf" --out "$SCRATCH" --size "$s" --types "$t" >/dev/null 2>"$SCRATCH/gen.err"; then
            echo "$s $t: gen failed: $(tail -1 "$SCRATCH/gen.err")" | tee -a "$TXT"
            continue
        fi
        M="$SCRATCH/qwen3-$s-$t.gguf"
        for pos in $POSITIONS; do
            for v in $VARIANTS; do
                variant_args "$v" "$BM" bench/bench_models # envs, bin (cuda_env.sh)
                label="$v"
                [ "$pos" != 16 ] && label="$v @$pos"
                j=$(env "${envs[@]}" timeout 240 "$bin" run "$M" --device cuda --graphs 1 --reps 15 --prefill "$PREFILL" --prefill-reps "$PREFILL_REPS" --pos "$pos" 2>"$SCRATCH/run.err")
                if [ -z "$j" ]; then
                    echo "$s $t $label: run failed: $(tail -2 "$SCRATCH/run.err" | tr '\n' ' ')" | tee -a "$TXT"
                    continue
                fi
                echo "$j" >>"$JSONL"
                python3 - "$j" "$s" "$t" "$BW" "$label" <<'PY' | tee -a "$TXT"
import json, sys
j = json.loads(sys.argv[1]); bw = float(sys.argv[4]); r = j["verify_ratio"]
print("%-5s %-5s %7.2f GB %9.3f %8.0f %5.0f%% %5.2fx %5.2fx %5.2fx %11.0f  %s" % (
    sys.argv[2], sys.argv[3], j["weight_bytes"] / 1e9, j["decode_ms"], j["decode_gbps"],
    100 * j["decode_gbps"] / bw, r["2"], r["4"], r["8"], j["prefill_tok_s"], sys.argv[5]))
PY
            done
        done
        if [ -n "${LLAMA_BENCH:-}" ]; then
            lj=$(timeout 300 "$LLAMA_BENCH" -m "$M" -ngl 99 -fa 1 -p "$PREFILL" -n 128 -r 3 -o jsonl 2>"$SCRATCH/llama.err")
            [ -n "$lj" ] && echo "$lj" | grep '^{' | sed 's/^/{"llama_cpp": 1, "row": /; s/$/}/' >>"$JSONL"
            python3 - "$lj" "$s" "$t" "$BW" <<'PY' | tee -a "$TXT"
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip().startswith("{")]
pp = [r["avg_ts"] for r in rows if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0]
tg = [r["avg_ts"] for r in rows if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0]
if not tg:
    print("%-5s %-5s llama.cpp: no result (see llama.err)" % (sys.argv[2], sys.argv[3]))
else:
    size = rows[0].get("model_size", 0)
    ms = 1e3 / tg[0]
    gbps = size / (ms / 1e3) / 1e9 if size else 0
    print("%-5s %-5s %7.2f GB %9.3f %8.0f %5.0f%% %6s %6s %6s %11.0f  llama.cpp (tg 128, pp)" % (
        sys.argv[2], sys.argv[3], size / 1e9, ms, gbps, 100 * gbps / float(sys.argv[4]), "", "", "",
        pp[0] if pp else 0))
PY
        fi
        rm -f "$M"
    done
done
echo "(n=K: time of a K-token verify step / a 1-token decode step; weights: bytes one decode step reads)" | tee -a "$TXT"
