#!/usr/bin/env bash
# cuda_ab_default.sh: the built-in model's decode speed on the GPU under
# several environments, interleaved, for before / after comparisons.
#
#   VARIANTS="- MTPLX_CUDA_PDL=0" tools/cuda_ab_default.sh [REPS]
#
# Needs a build made by tools/cuda_test.sh (BUILD, default build-cuda-gpu/).
# For each rep, each variant (environment settings joined by commas, "-" =
# none; BUILD=DIR: that build's mtplx) runs `mtplx run` on models/default.gguf, greedy, 256 tokens, AR and
# MTP depth 1..3 (--no-adaptive); the table gives each cell's median tok/s
# over the reps, and whether every variant's text equals the first's.
set -uo pipefail
. "$(dirname "$0")/cuda_env.sh" # ROOT, BUILD, the loader path to BUILD/deps
REPS="${1:-3}"
VARIANTS="${VARIANTS:--}"
MTPLX="$BUILD/mtplx"
SCRATCH="$BUILD/scratch-ab"
[ -x "$MTPLX" ] || { echo "cuda_ab_default: $MTPLX missing (run tools/cuda_test.sh first)" >&2; exit 1; }
mkdir -p "$SCRATCH"
PROMPT="It was a dark and stormy night; the rain fell in torrents, except at occasional intervals, when it was checked by"
CONFIGS="ar mtp1 mtp2 mtp3"
for r in $(seq 1 "$REPS"); do
    vi=0
    for v in $VARIANTS; do
        variant_args "$v" "$MTPLX" mtplx # envs, bin (cuda_env.sh)
        for c in $CONFIGS; do
            args=(--no-mtp)
            [ "$c" != ar ] && args=(--draft-depth "${c#mtp}" --no-adaptive)
            (cd "$ROOT" && env "${envs[@]}" timeout 30 "$bin" run -m "$ROOT/models/default.gguf" -p "$PROMPT" -n 256 --temp 0 \
                --ignore-eos --device cuda -c 1024 "${args[@]}") >"$SCRATCH/$vi.$c.$r.txt" 2>"$SCRATCH/$vi.$c.$r.err"
            gen_tok_s "$SCRATCH/$vi.$c.$r.err" >"$SCRATCH/$vi.$c.$r.tps"
        done
        vi=$((vi + 1))
    done
done
printf '%-40s' "tok/s, median of $REPS (default.gguf, 256 tok)"
for c in $CONFIGS; do printf ' %9s' "$c"; done
echo "  text == first variant's"
vi=0
for v in $VARIANTS; do
    printf '%-40s' "$v"
    same=yes
    for c in $CONFIGS; do
        m=$(median_of "$SCRATCH/$vi".$c.*.tps)
        printf ' %9s' "$m"
        for r in $(seq 1 "$REPS"); do cmp -s "$SCRATCH/0.ar.1.txt" "$SCRATCH/$vi.$c.$r.txt" || same=no; done
    done
    echo "  $same"
    vi=$((vi + 1))
done
