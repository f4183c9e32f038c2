#!/bin/bash
# mkprof.sh DIR [COMMIT]: a profiling build of mtplx in DIR (made or
# overwritten): the working tree (or COMMIT, through git archive) copied
# there, instrument.py's timers added, built without CUDA. Then
#   MTPLX_PROF=1 DIR/build/mtplx forge verify ... 2> prof.txt
#   bench/prof/profsum.py prof.txt [prof2.txt ...]
# The timers cost ~1 us per op (clock_gettime): compare profiled builds with
# each other, and speed with plain builds (forge_ab.py). Not a test.
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
d=$1
[ -n "$d" ] || { echo "usage: $0 DIR [COMMIT]" >&2; exit 2; }
mkdir -p "$d"
if [ -n "$2" ]; then
    git -C "$root" archive "$2" | tar -x -C "$d"
else
    (cd "$root" && tar --exclude=./build --exclude=./.git -cf - .) | tar -x -C "$d"
fi
cp "$here/prof.c" "$here/prof.h" "$d/src/core/"
python3 "$here/instrument.py" "$d"
cmake -S "$d" -B "$d/build" -DCMAKE_BUILD_TYPE=Release -DMTPLX_CUDA=OFF -DMTPLX_TESTS=OFF -DMTPLX_BENCH=OFF >/dev/null
cmake --build "$d/build" -j2 --target mtplx_cli >/dev/null
echo "$d/build/mtplx"
