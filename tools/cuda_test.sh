#!/usr/bin/env bash
# cuda_test.sh: build the CUDA backend and run every CUDA check on a GPU
# machine; print a summary; exit non-zero on any failure.
#
#   tools/cuda_test.sh            (from anywhere; the log goes to $OUT or build-cuda-gpu/)
#
# 1. C dependencies: when pkg-config cannot find them (the GPU image has nvcc,
#    cmake and python but not our -dev packages), the .deb files in
#    .carry/debs/ (made here with `apt-get download`, see below) are unpacked
#    into a private prefix with dpkg -x and pkg-config / the linker / the
#    loader are pointed there. Nothing is installed into /.
# 2. cmake with -DMTPLX_CUDA=ON (sm_90 + compute_90 PTX), build test_cuda and mtplx.
# 3. test_cuda: every CUDA op vs the CPU, whole-model logits vs the CPU,
#    greedy MTP == AR on the GPU. Then the op checks under compute-sanitizer
#    (memcheck), when it is there (MTPLX_CUDA_TEST_NO_MEMCHECK=1 skips it).
# 4. mtplx run --device cuda on models/default.gguf, greedy: AR vs MTP tok/s
#    (reported), MTP text == AR text (checked), and the CPU for reference.
#
# Making .carry/debs (on a Debian/Ubuntu machine with network, in the repo root):
#   mkdir -p .carry/debs && cd .carry/debs && apt-get download pkgconf pkgconf-bin \
#     libpkgconf3 libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2 libcjson-dev \
#     libcjson1 libmicrohttpd-dev libmicrohttpd12 libgnutls30 libnettle8 libhogweed6 \
#     libgmp10 libp11-kit0 libffi8 libtasn1-6 libidn2-0 libunistring2 libedit-dev \
#     libedit2 libbsd0 libmd0 libtinfo6 libcmocka-dev libcmocka0
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build-cuda-gpu}"
LOGDIR="${OUT:-$BUILD}"
mkdir -p "$BUILD" "$LOGDIR"
LOG="$LOGDIR/cuda_test.log"
: >"$LOG"
JOBS="$(nproc 2>/dev/null || echo 4)"
FAILS=0
SUMMARY=()
say() { echo "$*" | tee -a "$LOG"; }
result() { # name ok|FAIL|skip detail
    SUMMARY+=("$(printf '%-34s %-5s %s' "$1" "$2" "$3")")
    [ "$2" = FAIL ] && FAILS=$((FAILS + 1))
    say "== $1: $2 $3"
}
finish() {
    say ""
    say "==== cuda_test summary ($(date -u +%FT%TZ)) ===="
    for l in "${SUMMARY[@]}"; do say "$l"; done
    say "failures: $FAILS   (log: $LOG)"
    [ "$FAILS" -eq 0 ] && exit 0 || exit 1
}

say "cuda_test.sh in $ROOT, build $BUILD"
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2; cmake --version | head -1; } >>"$LOG" 2>&1
HAVE_GPU=0
nvidia-smi -L >/dev/null 2>&1 && HAVE_GPU=1

# ---- 1. dependencies ----
DEPS="libpcre2-8 libutf8proc libcjson libmicrohttpd libedit cmocka"
if command -v pkg-config >/dev/null 2>&1 && pkg-config --exists $DEPS 2>/dev/null; then
    result "deps" ok "system pkg-config finds $DEPS"
elif ls "$ROOT"/.carry/debs/*.deb >/dev/null 2>&1; then
    P="$BUILD/deps"
    rm -rf "$P" && mkdir -p "$P"
    for f in "$ROOT"/.carry/debs/*.deb; do
        if command -v dpkg >/dev/null 2>&1; then dpkg -x "$f" "$P"
        else (cd "$P" && ar p "$f" "$(ar t "$f" | grep '^data.tar')" | tar -x -J 2>/dev/null || ar p "$f" "$(ar t "$f" | grep '^data.tar')" | tar -x); fi
    done
    # .pc files say /usr: point them into the prefix; drop Requires.private (gnutls .pc is not carried)
    for pc in "$P"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$P"/usr/share/pkgconfig/*.pc; do
        [ -f "$pc" ] || continue
        sed -i -e "s|/usr|$P/usr|g" -e '/^Requires.private:/d' "$pc"
    done
    LIBS="$P/usr/lib/x86_64-linux-gnu:$P/lib/x86_64-linux-gnu"
    export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LIBRARY_PATH="$LIBS${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export PKG_CONFIG_PATH="$P/usr/lib/x86_64-linux-gnu/pkgconfig:$P/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    if ! command -v pkg-config >/dev/null 2>&1; then
        export PKG_CONFIG="$P/usr/bin/pkgconf"
        mkdir -p "$P/bin" && ln -sf "$P/usr/bin/pkgconf" "$P/bin/pkg-config"
        export PATH="$P/bin:$PATH"
    fi
    if pkg-config --exists $DEPS >>"$LOG" 2>&1; then
        result "deps" ok "unpacked $(ls "$ROOT"/.carry/debs/*.deb | wc -l) .debs into $P"
    else
        pkg-config --print-errors --exists $DEPS >>"$LOG" 2>&1
        result "deps" FAIL "pkg-config still misses some of: $DEPS"
        finish
    fi
else
    result "deps" FAIL "no $DEPS and no .carry/debs/ (see the header of this script)"
    finish
fi

# ---- 2. build ----
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
[ -f "$BUILD/CMakeCache.txt" ] && GEN=()
if cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DMTPLX_CUDA=ON -DMTPLX_BENCH=OFF >>"$LOG" 2>&1 &&
    cmake --build "$BUILD" -j"$JOBS" --target test_cuda mtplx_cli >>"$LOG" 2>&1; then
    result "build (MTPLX_CUDA=ON)" ok "$(grep -c 'warning' "$LOG") warning lines in the log"
else
    tail -40 "$LOG"
    result "build (MTPLX_CUDA=ON)" FAIL "see $LOG"
    finish
fi
TEST="$BUILD/tests/test_cuda"
MTPLX="$BUILD/mtplx"

# ---- 3. test_cuda ----
T0=$(date +%s)
(cd "$ROOT" && timeout 200 "$TEST") >"$LOGDIR/test_cuda.out" 2>&1
rc=$?
cat "$LOGDIR/test_cuda.out" >>"$LOG"
line="$(grep 'test_cuda:' "$LOGDIR/test_cuda.out" | tail -1)"
if grep -q '^SKIP' "$LOGDIR/test_cuda.out"; then
    if [ $HAVE_GPU = 1 ]; then result "test_cuda" FAIL "skipped although nvidia-smi sees a GPU: $line"
    else result "test_cuda" skip "no GPU: $line"; fi
elif [ $rc -eq 0 ]; then result "test_cuda" ok "$line ($(($(date +%s) - T0)) s)"
else
    grep 'FAIL' "$LOGDIR/test_cuda.out" | head -20
    result "test_cuda" FAIL "rc=$rc $line"
fi

SAN="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
if [ -n "$SAN" ] && [ $HAVE_GPU = 1 ] && [ -z "${MTPLX_CUDA_TEST_NO_MEMCHECK:-}" ]; then
    (cd "$ROOT" && MTPLX_CUDA_TEST_OPS_ONLY=1 timeout 150 "$SAN" --tool memcheck --error-exitcode 3 "$TEST") \
        >"$LOGDIR/test_cuda.memcheck.out" 2>&1
    rc=$?
    tail -5 "$LOGDIR/test_cuda.memcheck.out" >>"$LOG"
    case $rc in
    0) result "test_cuda ops under memcheck" ok "$(grep 'ERROR SUMMARY' "$LOGDIR/test_cuda.memcheck.out" | tail -1)" ;;
    124) result "test_cuda ops under memcheck" skip "timed out after 150 s (not counted)" ;;
    *) result "test_cuda ops under memcheck" FAIL "rc=$rc $(grep 'ERROR SUMMARY' "$LOGDIR/test_cuda.memcheck.out" | tail -1)" ;;
    esac
else
    result "test_cuda ops under memcheck" skip "no compute-sanitizer, no GPU, or MTPLX_CUDA_TEST_NO_MEMCHECK set"
fi

# ---- 4. mtplx run: AR vs MTP on the GPU ----
MODEL="$ROOT/models/default.gguf"
PROMPT="It was a dark and stormy night; the rain fell in torrents, except at occasional intervals, when it was checked by"
run_one() { # name device extra-args...
    local name=$1 dev=$2
    shift 2
    (cd "$ROOT" && timeout 60 "$MTPLX" run -m "$MODEL" -p "$PROMPT" -n 256 --temp 0 --ignore-eos \
        --device "$dev" -c 1024 "$@") >"$LOGDIR/run_$name.txt" 2>"$LOGDIR/run_$name.err"
    local rc=$?
    { echo "-- mtplx run ($name): rc=$rc"; cat "$LOGDIR/run_$name.err"; } >>"$LOG"
    return $rc
}
tps() { grep -o 'gen [0-9]* tok [0-9.]* tok/s' "$LOGDIR/run_$1.err" | tail -1 | awk '{print $4}'; }
if [ $HAVE_GPU = 1 ]; then
    ok=1
    run_one cuda_ar cuda --no-mtp || ok=0
    run_one cuda_mtp cuda --draft-depth 3 --no-adaptive || ok=0
    run_one cpu_ar cpu --no-mtp || ok=0
    run_one cpu_mtp cpu --draft-depth 3 --no-adaptive || ok=0
    if [ $ok = 1 ]; then
        result "mtplx run --device cuda" ok "AR $(tps cuda_ar) tok/s, MTP(3) $(tps cuda_mtp) tok/s; CPU AR $(tps cpu_ar), MTP $(tps cpu_mtp)"
        grep -o 'mtp depth.*' "$LOGDIR/run_cuda_mtp.err" | tail -1 | tee -a "$LOG"
        if cmp -s "$LOGDIR/run_cuda_ar.txt" "$LOGDIR/run_cuda_mtp.txt"; then
            result "run: GPU greedy MTP text == AR" ok "$(wc -c <"$LOGDIR/run_cuda_ar.txt") bytes"
        else
            result "run: GPU greedy MTP text == AR" FAIL "texts differ (run_cuda_ar.txt vs run_cuda_mtp.txt)"
        fi
        if cmp -s "$LOGDIR/run_cuda_ar.txt" "$LOGDIR/run_cpu_ar.txt"; then
            result "run: GPU greedy text == CPU" ok "identical"
        else
            result "run: GPU greedy text == CPU" skip "differs (reported, not a failure: near-ties in logits may flip)"
        fi
    else
        result "mtplx run --device cuda" FAIL "a run failed (see run_*.err)"
    fi
else
    result "mtplx run --device cuda" skip "no GPU"
fi
finish
