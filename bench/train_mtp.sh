#!/usr/bin/env bash
# bench/train_mtp.sh: training speed of `mtplx forge train-mtp` (tokens/s).
# For each binary (BINS: name=path pairs, default this build) and lm_head mode
# (MODES: "default", or "f32" = --f32-lm-head, which a build from before
# that option lacks) runs STEPS optimizer steps
# ROUNDS times and reports the median wall tokens/s (what the progress bar
# says) and tokens per CPU-second (user+sys of a STEPS run minus a 0-step run
# of the same setup, so loading, eval and the closing verify cancel out; the
# steadier number on a shared machine). Prints a table and writes JSON to
# bench/out/train_mtp-DATE.json. A benchmark, not a test.
#   MODEL=/tmp/stripped.gguf DATA=/tmp/train.txt bench/train_mtp.sh
# Env: DEPTH=3 SEQ=128 STEPS=30 THREADS=2 ROUNDS=3 MODES="default f32"
#      BINS="new=build/mtplx old=/tmp/old/mtplx"
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
: "${MODEL:?MODEL=a GGUF (e.g. mtplx forge convert models/default.gguf --strip-mtp -o X)}"
: "${DATA:?DATA=a UTF-8 text of at least a few hundred kB}"
DEPTH="${DEPTH:-3}" SEQ="${SEQ:-128}" STEPS="${STEPS:-30}" THREADS="${THREADS:-2}"
ROUNDS="${ROUNDS:-3}" MODES="${MODES:-default f32}" BINS="${BINS:-this=build/mtplx}"
OUT="bench/out"
mkdir -p "$OUT"
JSON="$OUT/train_mtp-$(date +%Y%m%d-%H%M%S).json"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# run BIN MODE STEPS -> "wall_tok_s cpu_s"
run() {
    local flag=""
    [ "$2" = f32 ] && flag="--f32-lm-head"
    /usr/bin/time -f "%U %S" -o "$TMP/time" "$1" forge train-mtp "$MODEL" --data "$DATA" \
        -o "$TMP/out.gguf" --depth "$DEPTH" --seq "$SEQ" --steps "$3" -j "$THREADS" $flag \
        >/dev/null 2>"$TMP/err" || { cat "$TMP/err" >&2; exit 1; }
    local tok_s
    tok_s="$(tr '\r' '\n' <"$TMP/err" | sed -n 's/^trained .*tokens, \([0-9.]*\) tok\/s.*/\1/p')"
    echo "${tok_s:-0} $(awk '{print $1 + $2}' "$TMP/time")"
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

printf '%-8s %-5s %12s %16s\n' binary mode "tok/s wall" "tok/CPU-s" >&2
echo "{\"model\": \"$MODEL\", \"depth\": $DEPTH, \"seq\": $SEQ, \"steps\": $STEPS, \"threads\": $THREADS, \"rounds\": $ROUNDS, \"results\": [" >"$JSON"
first=1
for pair in $BINS; do
    name="${pair%%=*}" bin="${pair#*=}"
    for mode in $MODES; do
        : >"$TMP/wall"
        : >"$TMP/cpu"
        for _ in $(seq 1 "$ROUNDS"); do
            read -r _ c0 <<<"$(run "$bin" "$mode" 0)"
            read -r w c1 <<<"$(run "$bin" "$mode" "$STEPS")"
            echo "$w" >>"$TMP/wall"
            awk -v c0="$c0" -v c1="$c1" -v n="$((STEPS * SEQ))" 'BEGIN {print (c1 > c0) ? n / (c1 - c0) : 0}' >>"$TMP/cpu"
        done
        wall="$(median <"$TMP/wall")" cpu="$(median <"$TMP/cpu")"
        printf '%-8s %-5s %12.0f %16.0f\n' "$name" "$mode" "$wall" "$cpu" >&2
        [ $first = 1 ] || echo "," >>"$JSON"
        first=0
        printf '{"binary": "%s", "mode": "%s", "tok_s_wall": %s, "tok_per_cpu_s": %s}' "$name" "$mode" "$wall" "$cpu" >>"$JSON"
    done
done
echo "]}" >>"$JSON"
cat "$JSON"
