#!/usr/bin/env bash
# start.sh: the main job on a fresh machine: install what is missing, build,
# and start mtplx on the built-in default model (or, when the default model
# is not in this checkout, the stories260K model from ../shared).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
if [ -f models/default.gguf ]; then
  exec build/mtplx start "$@"
fi
echo "start.sh: models/default.gguf is not here; running stories260K instead" >&2
exec build/mtplx run -m ../shared/models/stories260K/stories260K.bin --temp 0 -n 256 "$@"
