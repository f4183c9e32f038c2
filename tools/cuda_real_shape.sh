#!/usr/bin/env bash
# cuda_real_shape.sh: MTP against AR on the GPU for a model of a real size with a
# trained head. One GPU call:
#   1. tools/train_default.py trains a Qwen3-0.6B-shaped base model (28 layers,
#      dim 1024, 16 query / 8 KV heads of 128, FFN 3072) and its MTP head
#      together on the Gutenberg corpus, for TRAIN_BUDGET seconds; the vocabulary
#      is the corpus's own BPE of VOCAB tokens (default 32768), not Qwen3's;
#      MODEL_VOCAB=151936 gives the embedding (the tied output head) Qwen3's
#      rows all the same, so that the head costs what Qwen3's does.
#      Meanwhile tools/cuda_test.sh builds mtplx (build only).
#   2. mtplx forge convert: the HF folder to GGUF, BF16 and Q8_0 (heads kept in
#      their source precision, as the built-in model ships).
#   3. mtplx forge verify --device cuda on held-out prompts of the corpus, greedy,
#      for each GGUF and draft depth 1..3 (and DRAFT_VOCAB): acceptance per draft
#      position, tokens per forward, AR and MTP tok/s, and whether the MTP text
#      equals the AR text (it must: the run fails otherwise). Then mtplx run with
#      its defaults against --no-mtp on one held-out prompt (medians of 3).
#
#   mv models/default.gguf /tmp/   # the corpus and the tree must fit in 64 MiB
#   <device run, carry [".carry/data", ".carry/debs"]: OUT=$OUT bash tools/cuda_real_shape.sh>
#   mv /tmp/default.gguf models/
#
# The model stays in $WORK (default build-cuda-gpu/real-shape/, kept on the GPU
# machine while it is held): SKIP_TRAIN=1 runs steps 2-3 again on it. SKIP_BUILD=1
# uses BUILD's mtplx as it is.
# Writes to $OUT: train.log, train_log.json, verify.log (everything), table.txt.
# Knobs: DATA, WORK, TRAIN_BUDGET (s), VOCAB, MODEL_VOCAB, TRAIN_ARGS (more train_default.py
# flags), TYPES (default "bf16 q8_0"), DEPTHS, PROMPTS, TOKENS, DRAFT_VOCAB, DEVICE
# (default cuda; cpu for a dry run of steps 2-3).
set -uo pipefail
: "${OUT:?OUT must name the folder that comes back}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 1
DATA="${DATA:-.carry/data}"
BUILD="${BUILD:-$ROOT/build-cuda-gpu}"
W="${WORK:-$BUILD/real-shape}"
TRAIN_BUDGET="${TRAIN_BUDGET:-400}"
VOCAB="${VOCAB:-32768}"
MODEL_VOCAB="${MODEL_VOCAB:-0}"
TRAIN_ARGS="${TRAIN_ARGS:-}"
TYPES="${TYPES:-bf16 q8_0}"
DEPTHS="${DEPTHS:-1 2 3}"
PROMPTS="${PROMPTS:-8}"
TOKENS="${TOKENS:-256}"
DRAFT_VOCAB="${DRAFT_VOCAB:-4096}"
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$OUT/verify.log"; }
mkdir -p "$W" "$OUT"
: >"$OUT/verify.log"

# 1. build (background) and train
build_pid=
if [ -z "${SKIP_BUILD:-}" ]; then
    (OUT="$W/build-log" MTPLX_CUDA_TEST_BUILD_ONLY=1 BUILD="$BUILD" bash tools/cuda_test.sh >/dev/null 2>&1) &
    build_pid=$!
fi
if [ -z "${SKIP_TRAIN:-}" ]; then
    rm -rf "$W/train" && mkdir -p "$W/train"
    # shellcheck disable=SC2086  # TRAIN_ARGS is a list of flags
    PYTHONUNBUFFERED=1 python3 tools/train_default.py --data "$DATA" --out "$W/train" --no-pack \
        --time-budget "$TRAIN_BUDGET" --reserve 100 --dim 1024 --layers 28 --heads 16 --kv-heads 8 \
        --head-dim 128 --ffn 3072 --vocab "$VOCAB" --model-vocab "$MODEL_VOCAB" --ctx 2048 --micro-batch 32 --batch-tokens 65536 \
        --lr 2e-3 $TRAIN_ARGS >"$OUT/train.log" 2>&1
    say "train: rc $?"
    cp "$W/train/train_log.json" "$OUT/" 2>/dev/null
fi
if [ -n "$build_pid" ]; then
    wait "$build_pid"
    say "build: rc $? ($(grep -h 'build (MTPLX_CUDA=ON)' "$W/build-log/summary.txt" 2>/dev/null))"
fi
. tools/cuda_env.sh # the loader path to the build's C dependencies; gen_tok_s, median_of
MTPLX="$BUILD/mtplx"
HF="$W/train/default-hf"
[ -x "$MTPLX" ] || { say "no $MTPLX"; exit 1; }
[ -f "$HF/model.safetensors" ] || { say "no trained model in $HF"; exit 1; }
grep -h 'SUMMARY\|held-out\|trained [0-9]* steps\|model:\|MATCH' "$OUT/train.log" 2>/dev/null | tee -a "$OUT/verify.log"

# 2. convert
for t in $TYPES; do
    [ -f "$W/m-$t.gguf" ] && [ -n "${SKIP_TRAIN:-}" ] && continue
    "$MTPLX" forge convert "$HF" -t "$t" -o "$W/m-$t.gguf" >>"$OUT/verify.log" 2>&1
    say "convert $t: rc $? $(du -h "$W/m-$t.gguf" 2>/dev/null | cut -f1)"
done

# 3. verify: held-out prompts (the corpus's valid split is never trained on)
xz -dc "$DATA/valid.txt.xz" | tail -c 400000 >"$W/valid.txt"
fails=0
rows=()
run_verify() { # type depth draft_vocab
    local log="$W/v-$1-$2-$3.log"
    local dv=()
    [ "$3" != all ] && dv=(--draft-vocab "$3")
    timeout 150 "$MTPLX" forge verify "$W/m-$1.gguf" --device "${DEVICE:-cuda}" --data "$W/valid.txt" --depth "$2" \
        -n "$TOKENS" --prompts "$PROMPTS" "${dv[@]}" >"$log" 2>&1
    local rc=$?
    { echo "== $1 depth $2 draft vocab $3: rc $rc"; cat "$log"; } >>"$OUT/verify.log"
    [ $rc -ne 0 ] && fails=$((fails + 1))
    rows+=("$(printf '%-6s %5s %6s  ' "$1" "$2" "$3")$(grep '^acceptance:\|^tokens per forward:\|^decode:\|^greedy identity:' "$log" | sed 's/^[a-z ]*: *//' | tr '\n' '|' | tr -s ' ' | cut -c1-300)")
}
for t in $TYPES; do
    for d in $DEPTHS; do run_verify "$t" "$d" all; done
    run_verify "$t" 3 "$DRAFT_VOCAB"
done
# what a user gets: mtplx run with its defaults against --no-mtp, one held-out
# prompt, greedy, TOKENS tokens, medians of 3 runs in turn
head -c 1000 "$W/valid.txt" | tail -c "${PROMPT_CHARS:-300}" >"$W/prompt.txt"
runs=()
for t in $TYPES; do
    for c in ar default; do
        args=()
        [ $c = ar ] && args=(--no-mtp)
        for r in 1 2 3; do
            timeout 60 "$MTPLX" run -m "$W/m-$t.gguf" -f "$W/prompt.txt" -n "$TOKENS" --temp 0 --ignore-eos \
                --device "${DEVICE:-cuda}" "${args[@]}" >"$W/run-$t-$c-$r.txt" 2>"$W/run-$t-$c-$r.err"
            gen_tok_s "$W/run-$t-$c-$r.err" >"$W/run-$t-$c-$r.tps"
        done
        { echo "== mtplx run $t $c"; cat "$W/run-$t-$c-1.err"; } >>"$OUT/verify.log"
        med=$(median_of "$W"/run-"$t"-"$c"-*.tps)
        runs+=("$(printf 'mtplx run %-5s %-8s %9s tok/s  ' "$t" "$c" "$med")$(grep -o 'mode [a-z]*\|mtp depth.*' "$W/run-$t-$c-1.err" | tr '\n' ' ' | cut -c1-200)")
    done
    cmp -s "$W/run-$t-ar-1.txt" "$W/run-$t-default-1.txt" || { runs+=("  $t: MTP text != AR text"); fails=$((fails + 1)); }
done
{
    echo "==== cuda_real_shape ($(date -u +%FT%TZ)), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1) ===="
    grep -h 'SUMMARY' "$OUT/train.log" 2>/dev/null
    echo "type  depth  dvocab  forge verify"
    for r in "${rows[@]}"; do echo "$r"; done
    for r in "${runs[@]}"; do echo "$r"; done
    echo "failures: $fails   total $(($(date +%s) - t0)) s"
} | tee "$OUT/table.txt" | tee -a "$OUT/verify.log"
[ "$fails" -eq 0 ]
