#!/usr/bin/env bash
# bench/run.sh: mtplx vs llama.cpp on the very same random-weight GGUF files.
# Writes bench/models/*.gguf (once), measures memory bandwidth, then for
# ROUNDS rounds runs bench_models and llama-bench per type and thread count,
# and prints a table of medians over rounds (bench/out/, gitignored).
# Not part of CI.  Env: SIZES="0.6b 1.7b" TYPES="f32 bf16 q8_0 q4_0 q4_k"
# THREADS="1 2" ROUNDS=3 PREFILL=512 BUILD=build-perf LLAMA=0 (skip llama.cpp)
# MODELS=bench/models (where the GGUFs are written; big: /tmp is a good place)
# LLAMA_BENCH=PATH (an existing llama-bench, instead of bench/llama_cpp.sh's)
# VOCAB=PATH (a vocab-only qwen2 GGUF, default llama.cpp's models/ggml-vocab-qwen2.gguf)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
SIZES="${SIZES:-0.6b}"
TYPES="${TYPES:-f32 bf16 q8_0 q4_0 q4_k}"
THREADS="${THREADS:-1 2}"
ROUNDS="${ROUNDS:-3}"
PREFILL="${PREFILL:-512}"
BUILD="${BUILD:-build-perf}"
MODELS="${MODELS:-bench/models}"
OUT="bench/out/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$MODELS" "$OUT"
if [ ! -x "$BUILD/bench/bench_models" ]; then
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$BUILD" -j"$(nproc)" --target bench_models >/dev/null
fi
BM="$BUILD/bench/bench_models"
LB=""
if [ "${LLAMA:-1}" != 0 ]; then LB="${LLAMA_BENCH:-$(bench/llama_cpp.sh)}"; fi
VOCAB="${VOCAB:-.cache/llama.cpp/src/models/ggml-vocab-qwen2.gguf}"
[ -f "$VOCAB" ] || bench/llama_cpp.sh >/dev/null
for s in $SIZES; do
    "$BM" gen --vocab "$VOCAB" --out "$MODELS" --size "$s" --types "$(echo $TYPES | tr ' ' ,)"
done
echo "== memory bandwidth" >&2
"$BM" bw --gib 2 | tee "$OUT/bw.json"
for r in $(seq 1 "$ROUNDS"); do
    for s in $SIZES; do for ty in $TYPES; do for t in $THREADS; do
        f="$MODELS/qwen3-$s-$ty.gguf"
        echo "== round $r $s $ty t=$t" >&2
        "$BM" run "$f" --threads "$t" --reps 7 --prefill "$PREFILL" --prefill-reps 1 \
            | sed "s/^{/{\"round\": $r, \"size\": \"$s\", /" >> "$OUT/mtplx.jsonl"
        if [ -n "$LB" ]; then
            "$LB" -m "$f" -t "$t" -p "1,2,4,8,$PREFILL" -n 32 -r 3 -o jsonl 2>/dev/null \
                | sed "s/^{/{\"round\": $r, \"size\": \"$s\", \"qtype\": \"$ty\", /" >> "$OUT/llama.jsonl" || true
        fi
    done; done; done
done
{ echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cpus, $(date -u +%Y-%m-%dT%H:%MZ)," \
       "mtplx $(git rev-parse --short HEAD 2>/dev/null), ${ROUNDS} rounds"; echo; } > "$OUT/table.md"
python3 bench/summary.py "$OUT" | tee -a "$OUT/table.md"
