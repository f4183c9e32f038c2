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
