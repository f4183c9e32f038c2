#!/usr/bin/env bash
# The steps around tools/finetune_head.py's GPU run, on this machine.
#
#   tools/finetune_head.sh pack [HF_DIR]        # .carry/ft: the folder (model xz-compressed) + text
#   tools/finetune_head.sh compare RESULT_DIR   # each head-*.safetensors: merge, convert, forge verify
#
# pack: the device takes the working tree and the carried paths, 64 MiB in all, and the bf16
# folder alone is 63 MB, so model.safetensors travels xz-compressed (44 MB) and the training text is
# cut to what is left. models/default.gguf (37 MB) must be out of the tree during the run:
#
#   mv models/default.gguf /tmp/default.gguf.away; <run, carry [".carry/ft"]:
#     PYTHONUNBUFFERED=1 python3 tools/finetune_head.py --init .carry/ft/hf --data .carry/ft/data --out $OUT>
#   mv /tmp/default.gguf.away models/default.gguf
#
# compare: every head is merged into a copy of HF_DIR (tools/mtp_head_io.py merge), converted
# exactly as models/default.gguf was (forge convert --quantize q8_0) and run through
#   forge verify --depth 3 -n 128 --prompts 128 on held-out bytes 200k-1.2M of valid.txt, and
#   forge verify --depth 3 -n 128 --prompts 32 on bytes 0-200k,
# beside the shipped model, one at a time, same thread count (tokens per forward decide).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DATA="${DATA:-$ROOT/../shared/data/gutenberg}"
HF="${HF:-/tmp/newmodel/default-hf}"
WORK="${WORK:-/tmp/ft}"
THREADS="${THREADS:-1}"
LIMIT=$((64 * 1024 * 1024))

travel_bytes() {  # what a device call would send, models/default.gguf left out
    (cd "$ROOT" && { git ls-files -z; git ls-files -z --others --exclude-standard; } |
        grep -zv '^models/default.gguf$' | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
}

pack() {
    local hf="${1:-$HF}" c="$ROOT/.carry/ft"
    rm -rf "$c"
    mkdir -p "$c/hf" "$c/data"
    cp "$hf"/config.json "$hf"/generation_config.json "$hf"/tokenizer.json "$hf"/tokenizer_config.json "$c/hf/"
    xz -T2 -6 -c "$hf/model.safetensors" > "$c/hf/model.safetensors.xz"
    cp "$DATA/valid.txt.xz" "$c/data/"
    local used left
    used=$(( $(travel_bytes) + $(du -sb "$c" | cut -f1) ))
    left=$(( LIMIT - used - 512 * 1024 ))  # a margin for files written meanwhile
    if [ "$left" -le 0 ]; then echo "no room for training text ($used bytes already)" >&2; exit 1; fi
    if [ "$(stat -c %s "$DATA/train-0.txt.xz")" -le "$left" ]; then
        cp "$DATA/train-0.txt.xz" "$c/data/"
    else  # text compresses about 3.6x; cut, recompress, and cut again until it fits
        # (xz -dc is cut off by head: SIGPIPE, not an error)
        local chars=$(( left * 7 / 2 ))
        while :; do
            { xz -dc "$DATA/train-0.txt.xz" || true; } | head -c "$chars" | LC_ALL=C sed '$d' |
                xz -T2 -6 > "$c/data/train-0.txt.xz"  # sed: no half line, no half character
            [ "$(stat -c %s "$c/data/train-0.txt.xz")" -le "$left" ] && break
            chars=$(( chars * 9 / 10 ))
        done
        echo "training text cut to the first $chars characters of train-0"
    fi
    echo "travel: $(( $(travel_bytes) + $(du -sb "$c" | cut -f1) )) of $LIMIT bytes (tree + .carry/ft)"
}

verify() {  # MODEL LABEL
    "$ROOT/build/mtplx" forge verify "$1" --depth 3 -n 128 --prompts 128 --data "$WORK/ho1.txt" -j "$THREADS" \
        > "$WORK/verify-$2-ho1.txt" 2>&1
    "$ROOT/build/mtplx" forge verify "$1" --depth 3 -n 128 --prompts 32 --data "$WORK/ho0.txt" -j "$THREADS" \
        > "$WORK/verify-$2-ho0.txt" 2>&1
    local f
    for f in ho1 ho0; do
        printf "%-22s %s: %s\n" "$2" "$([ $f = ho1 ] && echo "128 prompts, bytes 200k-1.2M" || echo "32 prompts, bytes 0-200k")" \
            "$(grep -E '^(tokens per forward|acceptance|greedy identity):' "$WORK/verify-$2-$f.txt" |
               sed 's/^[a-z ]*: *//' | tr -s ' ' | paste -sd '|')"
    done
}

compare() {
    local res="$1"
    mkdir -p "$WORK"
    { xz -dc "$DATA/valid.txt.xz" || true; } | head -c 1200000 | tail -c 1000000 > "$WORK/ho1.txt"
    { xz -dc "$DATA/valid.txt.xz" || true; } | head -c 200000 > "$WORK/ho0.txt"
    verify "$ROOT/models/default.gguf" shipped
    for h in "$res"/head-*.safetensors; do
        local name
        name="$(basename "$h" .safetensors)"
        name="${name#head-}"
        # the folder keeps its name: convert writes it as general.name (then the GGUF of an
        # unchanged head is byte-identical to models/default.gguf)
        rm -rf "$WORK/$name"
        python3 "$ROOT/tools/mtp_head_io.py" merge "$HF" "$h" -o "$WORK/$name/$(basename "$HF")" > /dev/null
        "$ROOT/build/mtplx" forge convert "$WORK/$name/$(basename "$HF")" -o "$WORK/$name.gguf" --quantize q8_0 \
            > "$WORK/convert-$name.log" 2>&1 || { cat "$WORK/convert-$name.log"; exit 1; }
        verify "$WORK/$name.gguf" "$name"
    done
}

case "${1:-}" in
pack) shift; pack "$@" ;;
compare) shift; compare "$@" ;;
*) sed -n '2,21p' "$0"; exit 2 ;;
esac
