#!/bin/sh
# fuzz/run.sh SECONDS: build the libFuzzer targets with clang into build-fuzz
# and run each for SECONDS (default 30) on a seed corpus made from small
# valid files. Exits non-zero on a build failure or a finding (crash files
# are left in build-fuzz/artifacts/).
set -eu
secs=${1:-30}
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-fuzz"
CC=${CC:-clang} cmake -S "$root" -B "$build" -DMTPLX_FUZZ=ON -DMTPLX_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$build" -j"$(nproc)" --target fuzz_gguf fuzz_safetensors >/dev/null
mkdir -p "$build/artifacts" "$build/corpus/gguf" "$build/corpus/safetensors"
python3 "$root/fuzz/make_seeds.py" "$build/corpus"
status=0
for t in gguf safetensors; do
  echo "fuzz_$t: ${secs}s"
  "$build/fuzz/fuzz_$t" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t-" "$build/corpus/$t" 2>"$build/fuzz_$t.log" || status=1
  tail -n 12 "$build/fuzz_$t.log" | grep -E "stat::number_of_executed_units|ERROR|SUMMARY|Done" || true
done
[ $status -eq 0 ] && echo "fuzz: no findings" || echo "fuzz: FINDINGS, see $build/artifacts and $build/fuzz_*.log"
exit $status
