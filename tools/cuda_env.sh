# cuda_env.sh: sourced by the tools/cuda_*.sh scripts that run a GPU build:
# sets ROOT (the repository) and BUILD (the build tools/cuda_test.sh makes,
# default build-cuda-gpu/), and points the loader at the C dependencies that
# cuda_test.sh unpacks into BUILD/deps when the machine lacks our -dev
# packages.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build-cuda-gpu}"
if [ -d "$BUILD/deps" ]; then
    export LD_LIBRARY_PATH="$BUILD/deps/usr/lib/x86_64-linux-gnu:$BUILD/deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# variant_args V BIN REL: for a variant V of the VARIANTS lists (environment
# settings joined by commas, "-" = none) set the array envs to its settings and
# bin to the binary to run: BIN, or DIR/REL for a setting BUILD=DIR (another
# build's binary, for before / after comparisons in one run).
variant_args() {
    envs=()
    [ "$1" != - ] && IFS=, read -r -a envs <<<"$1"
    bin="$2"
    local i
    for i in "${!envs[@]}"; do
        case "${envs[$i]}" in BUILD=*) bin="${envs[$i]#BUILD=}/$3"; unset "envs[$i]" ;; esac
    done
}

# gen_tok_s FILE: the generation speed (tok/s) that mtplx run printed last in
# FILE (its stderr); median_of FILE...: the median of the numbers in the
# files, one a line ("?" when there are none).
gen_tok_s() { grep -o 'gen [0-9]* tok [0-9.]* tok/s' "$1" | tail -1 | awk '{print $4}'; }
median_of() { cat "$@" | sort -n | awk '{a[NR]=$1} END {print (NR ? a[int((NR + 1) / 2)] : "?")}'; }
