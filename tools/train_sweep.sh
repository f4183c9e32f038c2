#!/usr/bin/env bash
# Compare training recipes for the built-in model side by side on one GPU: every config runs
# tools/train_default.py at the same time (same data, seed and evaluation), so they share the
# card equally; their absolute speed is a fraction of a lone run's, their ranking is the point.
# usage: OUT=dir DATA=dir tools/train_sweep.sh 'name:--flag v ...' 'name2:...'
# Writes OUT/NAME.log (the run's console) and OUT/NAME.json (its train_log.json) per config.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
: "${OUT:?OUT=dir for the results}"
DATA="${DATA:-$ROOT/.carry/data}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
pids=()
for spec in "$@"; do
    name="${spec%%:*}"
    args="${spec#*:}"
    work="$(mktemp -d "/tmp/sweep-$name.XXXXXX")"
    # shellcheck disable=SC2086  # args is a flag list
    ( "$PY" "$ROOT/tools/train_default.py" --data "$DATA" --out "$work" $args > "$OUT/$name.log" 2>&1
      cp "$work/train_log.json" "$OUT/$name.json" 2>/dev/null ) &
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
for spec in "$@"; do
    name="${spec%%:*}"
    printf '%-10s %s\n' "$name" "$(grep -h SUMMARY "$OUT/$name.log" | sed 's/.*SUMMARY //')"
done
exit $rc
