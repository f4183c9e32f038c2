#!/usr/bin/env bash
# One GPU call that remakes the built-in model: the joint run (tools/train_default.py: tokenizer,
# trunk and MTP head trained together), then the head alone on the trunk's own greedy text
# (tools/finetune_head.py), everything packed into $OUT in at most 8 files.
#
#   mv models/default.gguf /tmp/default.gguf.away   # the corpus and the tree must fit in 64 MiB
#   <device run, carry [".carry/data"], timeout 600: OUT=$OUT bash tools/retrain_default.sh>
#   mv /tmp/default.gguf.away models/default.gguf
#
# Back here: cat pack.tar.xz.part-* | xz -dc | tar x   gives j/default-hf (the joint folder),
# j/golden.json and f/ (head-*.safetensors, golden-*.json); then tools/finetune_head.sh compare.
#
# Knobs (environment): DATA, WORK, JOINT_BUDGET / FT_BUDGET / FT_TRAIN (seconds), JOINT_ARGS
# (extra train_default.py flags; its defaults are the shipped recipe), FT_CONFIGS (finetune_head.py --configs).
set -uo pipefail
: "${OUT:?OUT must name the folder that comes back}"
DATA="${DATA:-.carry/data}"
W="${WORK:-/tmp/retrain}"
JOINT_BUDGET="${JOINT_BUDGET:-360}"
FT_BUDGET="${FT_BUDGET:-200}"
FT_TRAIN="${FT_TRAIN:-110}"
JOINT_ARGS="${JOINT_ARGS:-}"
FT_CONFIGS="${FT_CONFIGS:-kl=1,gen=0.8}"

rm -rf "$W" && mkdir -p "$W/j" "$W/f"
t0=$(date +%s)
# shellcheck disable=SC2086  # JOINT_ARGS is a list of flags
PYTHONUNBUFFERED=1 python3 tools/train_default.py --data "$DATA" --out "$W/j" \
    --time-budget "$JOINT_BUDGET" --keep-unpacked $JOINT_ARGS > "$OUT/joint.log" 2>&1
echo "joint: rc $? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/joint.log"
rm -f "$W"/j/default-hf.tar.part-*  # the folder itself is packed below, with the head
[ -f "$W/j/default-hf/model.safetensors" ] || { echo "no joint model" >&2; exit 1; }

# --golden-check '': the committed golden.json belongs to the shipped trunk, not this one
PYTHONUNBUFFERED=1 python3 tools/finetune_head.py --init "$W/j/default-hf" --data "$DATA" \
    --out "$W/f" --configs "$FT_CONFIGS" --gen-seqs 32768 --gen-batch 8192 --gen-dtype bf16 \
    --train-seconds "$FT_TRAIN" --time-budget "$FT_BUDGET" --golden-check '' \
    --max-train-chars 50000000 > "$OUT/ft.log" 2>&1
echo "finetune: rc $? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/ft.log"

cp "$W/j/train_log.json" "$OUT/" 2>/dev/null
cp "$W/f/finetune_log.json" "$OUT/" 2>/dev/null
tar cf - -C "$W" j/default-hf j/golden.json f | xz -T0 -3 | split -b 15M - "$OUT/pack.tar.xz.part-"
echo "packed after $(( $(date +%s) - t0 )) s: $(ls "$OUT")"
