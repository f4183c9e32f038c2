#!/usr/bin/env bash
# cuda_test.sh: build the CUDA backend and run every CUDA check on a GPU
# machine; print a summary; exit non-zero on any failure.
#
#   tools/cuda_test.sh            (from anywhere; the log goes to $OUT or build-cuda-gpu/)
#
# Files written to $OUT (or the build dir): cuda_test.log (everything, the
# summary last), summary.txt (the summary and the speed tables alone),
# test_cuda.out, test_cuda.memcheck.out, test_cuda.racecheck.out. Scratch
# (run outputs, the random 0.6B model) stays in the build dir. Aimed at
# < 150 s on an H200.
#
# 1. C dependencies: when pkg-config cannot find them (the GPU image has nvcc,
#    cmake and python but not our -dev packages), the .deb files in
#    .carry/debs/ (made here with `apt-get download`, see below) are unpacked
#    into a private prefix with dpkg -x and pkg-config / the linker / the
#    loader are pointed there. Nothing is installed into /.
# 2. cmake with -DMTPLX_CUDA=ON (sm_90 + compute_90 PTX), build test_cuda and mtplx.
# 3. test_cuda: every CUDA op vs the CPU, whole-model logits vs the CPU,
#    greedy MTP == AR on the GPU (the built-in model, and a BF16 copy of it
#    made with forge convert). Then the op checks under compute-sanitizer
#    (memcheck), when it is there (MTPLX_CUDA_TEST_NO_MEMCHECK=1 skips it), and
#    all of test_cuda again with every GEMV letting the next kernel launch as
#    it starts (MTPLX_CUDA_TRIG_MB=0; by default only GEMVs of 32 MiB or more
#    do, and the built-in model has none), and with the step attention's
#    stages loaded by TMA (MTPLX_CUDA_ATTN_TMA=1), and with every rmsnorm
#    fused into its GEMV (MTPLX_CUDA_FUSE_NORM=1), with attn_kernel's
#    early cache loads in every step (MTPLX_CUDA_ATTN_HEAD_EARLY=1) and
#    without a prefill's fused GEMM groups (MTPLX_CUDA_GEMM_FUSE=0).
#    MTPLX_CUDA_TEST_BUILD_ONLY=1 stops after step 2 (a build for a profiler run).
# 4. mtplx run --device cuda on models/default.gguf, greedy, 256 tokens: AR and
#    MTP depth 1..3 with CUDA graphs on and off (MTPLX_CUDA_GRAPHS=0), and MTP
#    with the greedy picks on the host (MTPLX_CUDA_ARGMAX=0) or every GEMV's
#    early trigger (MTPLX_CUDA_TRIG_MB=0): every text must
#    equal GPU AR's (checked); tok/s as a table (reported); the CPU for
#    reference. Then 900 tokens AR and MTP 3 (equal, checked), the same with
#    the step attention a block per KV head from 400 positions on
#    (MTPLX_CUDA_ATTN_GROUP=400, so that the steps cross it: equal, checked),
#    and AR with the attention's split over positions off
#    (MTPLX_CUDA_ATTN_SPLIT=0).
# 5. --device cuda on bench, tune, forge verify (exit 0 checked), and a model
#    that does not fit (MTPLX_CUDA_MEM_LIMIT) refused by run (exit 1 checked).
# 6. bench_models: a random-weight Qwen3-0.6B-shape BF16 model, decode (n=1)
#    and verify (n=2,4,8) times on the GPU, graphs on and off (reported); and
#    prefill tok/s (512 tokens) with the prefill kernels (tensor-core GEMM,
#    flash attention) on and off (MTPLX_CUDA_TC=0 MTPLX_CUDA_FLASH=0).
#
# The prefill kernels are on by default; test_cuda checks them beside the
# step kernels and names the path in each line. If they fail here, the
# summary says which switch turns them off (MTPLX_CUDA_TC=0, MTPLX_CUDA_FLASH=0).
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
SUMFILE="$LOGDIR/summary.txt"
SCRATCH="$BUILD/scratch"
mkdir -p "$SCRATCH"
: >"$LOG"
T_START=$(date +%s)
TABLES=()
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
    for l in "${TABLES[@]}"; do say "$l"; done
    say "failures: $FAILS   total $(($(date +%s) - T_START)) s   (log: $LOG)"
    { echo "==== cuda_test summary ($(date -u +%FT%TZ)) ===="
      for l in "${SUMMARY[@]}"; do echo "$l"; done
      for l in "${TABLES[@]}"; do echo "$l"; done
      echo "failures: $FAILS   total $(($(date +%s) - T_START)) s"; } >"$SUMFILE"
    [ "$FAILS" -eq 0 ] && exit 0 || exit 1
}

# the graphs and GPU greedy picks are on by default; each run below still
# sets its own values
export MTPLX_CUDA_GRAPHS="${MTPLX_CUDA_GRAPHS:-1}" MTPLX_CUDA_ARGMAX="${MTPLX_CUDA_ARGMAX:-1}"
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
T0=$(date +%s)
if cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DMTPLX_CUDA=ON -DMTPLX_BENCH=ON >>"$LOG" 2>&1 &&
    cmake --build "$BUILD" -j"$JOBS" --target test_cuda mtplx_cli bench_models >>"$LOG" 2>&1; then
    result "build (MTPLX_CUDA=ON)" ok "$(grep -c 'warning' "$LOG") warning lines in the log ($(($(date +%s) - T0)) s)"
else
    tail -40 "$LOG"
    result "build (MTPLX_CUDA=ON)" FAIL "see $LOG"
    finish
fi
[ -n "${MTPLX_CUDA_TEST_BUILD_ONLY:-}" ] && finish
TEST="$BUILD/tests/test_cuda"
MTPLX="$BUILD/mtplx"

# ---- 3. test_cuda ----
T0=$(date +%s)
# a BF16 copy of the built-in model, for test_cuda's whole-model checks of the
# tiled BF16 GEMV (MTPLX_CUDA_TEST_BF16_MODEL)
BF16_MODEL="$SCRATCH/default-bf16.gguf"
"$MTPLX" forge convert "$ROOT/models/default.gguf" -t bf16 --quantize-mtp -o "$BF16_MODEL" >>"$LOG" 2>&1 ||
    BF16_MODEL=""
(cd "$ROOT" && MTPLX_CUDA_TEST_BF16_MODEL="$BF16_MODEL" timeout 120 "$TEST") >"$LOGDIR/test_cuda.out" 2>&1
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
# the prefill kernels: a count per path, and which switch turns a failing one off
for pat in 'tensor cores (MTPLX_CUDA_TC):MTPLX_CUDA_TC=0' 'split-k:MTPLX_CUDA_TC_SPLIT=0' 'flash:MTPLX_CUDA_FLASH=0'; do
    what=${pat%%:*} off=${pat#*:}
    nok=$(grep -c "^  ok .*$what" "$LOGDIR/test_cuda.out")
    nf=$(grep -c "^  FAIL.*$what" "$LOGDIR/test_cuda.out")
    if [ "$nf" -gt 0 ]; then SUMMARY+=("  test_cuda: '$what' checks: $nok ok, $nf FAIL (to run without that path: $off)")
    elif [ "$nok" -gt 0 ]; then SUMMARY+=("  test_cuda: '$what' checks: $nok ok"); fi
done
# the new checks, one summary line each (they are in test_cuda.out too)
NEW_CHECKS='graphs on vs off\|greedy picks on the GPU\|argmax_rows\|does not fit\|with PDL (MTPLX_CUDA_PDL) == without, graphs on\|prefill GEMM from the GEMV\|QKV of 4624 rows\|read back by the prefill GEMM'
while IFS= read -r l; do
    SUMMARY+=("  test_cuda:${l}")
done < <(grep "$NEW_CHECKS" "$LOGDIR/test_cuda.out" | cut -c1-200)

SAN="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
# sanitized LABEL TOOL OPS OK_RE FAIL_RE: test_cuda's op checks (MTPLX_CUDA_TEST_OPS_ONLY=OPS)
# under compute-sanitizer TOOL, 40 s at most; the summary line matching OK_RE (FAIL_RE on failure)
sanitized() {
    local label=$1 tool=$2 ops=$3 ok_re=$4 fail_re=$5 out="$LOGDIR/test_cuda.$2.out"
    (cd "$ROOT" && MTPLX_CUDA_TEST_OPS_ONLY=$ops timeout 40 "$SAN" --tool "$tool" --error-exitcode 3 "$TEST") \
        >"$out" 2>&1
    local rc=$?
    tail -5 "$out" >>"$LOG"
    case $rc in
    0) result "$label" ok "$(grep "$ok_re" "$out" | tail -1)" ;;
    124) result "$label" skip "timed out after 40 s (not counted)" ;;
    *) result "$label" FAIL "rc=$rc $(grep "$fail_re" "$out" | tail -1)" ;;
    esac
}
if [ -n "$SAN" ] && [ $HAVE_GPU = 1 ] && [ -z "${MTPLX_CUDA_TEST_NO_MEMCHECK:-}" ]; then
    sanitized "test_cuda ops under memcheck" memcheck 1 'ERROR SUMMARY' 'ERROR SUMMARY'
    # shared-memory races in the prefill kernels (tensor-core GEMM, flash attention),
    # the step attention's tiles (attn_group_kernel) and the sampler (sample.cu)
    sanitized "shared-memory kernels under racecheck" racecheck prefill 'RACECHECK SUMMARY\|ERROR SUMMARY' \
        'RACECHECK SUMMARY\|ERROR SUMMARY\|FAIL'
else
    result "test_cuda ops under memcheck" skip "no compute-sanitizer, no GPU, or MTPLX_CUDA_TEST_NO_MEMCHECK set"
fi
# all of test_cuda (whole-model checks included) again under switches that
# change when kernels start or how they load, never a result: every GEMV
# triggering its dependents as it starts (by default only large ones); the
# step attention's stages filled by bulk copies (TMA) instead of cp.async;
# and with the rmsnorms fused into every GEMV (MTPLX_CUDA_FUSE_NORM=1: the
# tensor-core BF16 GEMV's norm_x, off by default), whose results differ by
# f32 rounding but whose checks (graphs / PDL on == off, MTP == AR) hold;
# and attn_kernel loading a captured step's cache rows before its PDL wait
# in every step (MTPLX_CUDA_ATTN_HEAD_EARLY=1; by default in decode steps,
# and in verify steps after a large Q/K/V GEMV: graphs on, where it loads early,
# against graphs off, where it cannot, bit for bit); and a prefill without
# its fused GEMM groups (MTPLX_CUDA_GEMM_FUSE=0: on by default, QKV sharing
# x in bf16, SwiGLU in the up GEMM)
if [ $HAVE_GPU = 1 ]; then
    for sw in MTPLX_CUDA_TRIG_MB=0 MTPLX_CUDA_ATTN_TMA=1 MTPLX_CUDA_FUSE_NORM=1 MTPLX_CUDA_ATTN_HEAD_EARLY=1 \
        MTPLX_CUDA_GEMM_FUSE=0; do
        out="$LOGDIR/test_cuda.${sw#MTPLX_CUDA_}.out"
        (cd "$ROOT" && env "$sw" MTPLX_CUDA_TEST_BF16_MODEL="$BF16_MODEL" timeout 120 "$TEST") >"$out" 2>&1
        rc=$?
        line="$(grep 'test_cuda:' "$out" | tail -1)"
        if [ $rc -eq 0 ]; then result "test_cuda, $sw" ok "$line"
        else
            grep 'FAIL' "$out" | head -10 >>"$LOG"
            result "test_cuda, $sw" FAIL "rc=$rc $line"
        fi
    done
fi

# ---- 4. mtplx run on the GPU: graphs on / off, AR and MTP depth 1..3 ----
MODEL="$ROOT/models/default.gguf"
PROMPT="It was a dark and stormy night; the rain fell in torrents, except at occasional intervals, when it was checked by"
run_one() { # name device env... -- extra-args...
    local name=$1 dev=$2
    shift 2
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    (cd "$ROOT" && env MTPLX_LOG=info "${envs[@]}" timeout 90 "$MTPLX" run -m "$MODEL" -p "$PROMPT" -n 256 --temp 0 --ignore-eos \
        --device "$dev" -c 1024 "$@") >"$SCRATCH/run_$name.txt" 2>"$SCRATCH/run_$name.err"
    local rc=$?
    { echo "-- mtplx run ($name: ${envs[*]} $*): rc=$rc"; cat "$SCRATCH/run_$name.err"; echo; } >>"$LOG"
    return $rc
}
tps() { grep -o 'gen [0-9]* tok [0-9.]* tok/s' "$SCRATCH/run_$1.err" | tail -1 | awk '{print $4}'; }
tpf() { local v; v=$(grep -o "[0-9.]* tok/forward" "$SCRATCH/run_$1.err" | tail -1 | awk "{print \$1}"); echo "${v:-1.00}"; }
if [ $HAVE_GPU = 1 ]; then
    T0=$(date +%s)
    ok=1
    bad=""
    for g in 1 0; do
        run_one "ar_g$g" cuda MTPLX_CUDA_GRAPHS=$g -- --no-mtp || { ok=0; bad="$bad ar_g$g"; }
        for d in 1 2 3; do
            run_one "mtp${d}_g$g" cuda MTPLX_CUDA_GRAPHS=$g -- --draft-depth $d --no-adaptive || { ok=0; bad="$bad mtp${d}_g$g"; }
        done
    done
    run_one mtp3_hostpick cuda MTPLX_CUDA_ARGMAX=0 -- --draft-depth 3 --no-adaptive || { ok=0; bad="$bad mtp3_hostpick"; }
    run_one mtp3_trig0 cuda MTPLX_CUDA_TRIG_MB=0 -- --draft-depth 3 --no-adaptive || { ok=0; bad="$bad mtp3_trig0"; }
    # sampled (temperature 0.8, top-k 40, seed 7): draws and the acceptance
    # test on the GPU (default) against on the host (MTPLX_CUDA_SAMPLE=0)
    for sv in 1 0; do
        run_one "s_ar_d$sv" cuda MTPLX_CUDA_SAMPLE=$sv -- --temp 0.8 -s 7 --no-mtp || { ok=0; bad="$bad s_ar_d$sv"; }
        run_one "s_mtp3_d$sv" cuda MTPLX_CUDA_SAMPLE=$sv -- --temp 0.8 -s 7 --draft-depth 3 --no-adaptive ||
            { ok=0; bad="$bad s_mtp3_d$sv"; }
    done
    run_one ar_plainprefill cuda MTPLX_CUDA_TC=0 MTPLX_CUDA_FLASH=0 -- --no-mtp || { ok=0; bad="$bad ar_plainprefill"; }
    # a long generation (900 tokens): the step's attention splits each
    # token's positions over up to 16 blocks from position 65 on; and it
    # unsplit, and with a block per KV head (attn_group_kernel) for the rows
    # of 400 positions or more, which the generation crosses
    run_one long_ar cuda -- --no-mtp -n 900 || { ok=0; bad="$bad long_ar"; }
    run_one long_mtp3 cuda -- --draft-depth 3 --no-adaptive -n 900 || { ok=0; bad="$bad long_mtp3"; }
    run_one long_ar_unsplit cuda MTPLX_CUDA_ATTN_SPLIT=0 -- --no-mtp -n 900 || { ok=0; bad="$bad long_ar_unsplit"; }
    run_one long_ar_group cuda MTPLX_CUDA_ATTN_GROUP=400 -- --no-mtp -n 900 || { ok=0; bad="$bad long_ar_group"; }
    run_one long_mtp3_group cuda MTPLX_CUDA_ATTN_GROUP=400 -- --draft-depth 3 --no-adaptive -n 900 ||
        { ok=0; bad="$bad long_mtp3_group"; }
    run_one cpu_ar cpu -- --no-mtp || { ok=0; bad="$bad cpu_ar"; }
    run_one cpu_mtp3 cpu -- --draft-depth 3 --no-adaptive || { ok=0; bad="$bad cpu_mtp3"; }
    if [ $ok = 1 ]; then
        result "mtplx run --device cuda (22 runs)" ok "$(($(date +%s) - T0)) s"
        diff_list=""
        for n in ar_g0 mtp1_g1 mtp2_g1 mtp3_g1 mtp1_g0 mtp2_g0 mtp3_g0 mtp3_hostpick mtp3_trig0; do
            cmp -s "$SCRATCH/run_ar_g1.txt" "$SCRATCH/run_$n.txt" || diff_list="$diff_list $n"
        done
        if [ -z "$diff_list" ]; then
            result "run: GPU greedy texts identical" ok "AR/MTP 1..3 x graphs on/off + host picks + early GEMV triggers: $(wc -c <"$SCRATCH/run_ar_g1.txt") bytes each"
        else
            result "run: GPU greedy texts identical" FAIL "differ from AR (graphs on):$diff_list"
            for n in $diff_list; do { echo "--- $n vs ar_g1:"; diff "$SCRATCH/run_ar_g1.txt" "$SCRATCH/run_$n.txt" | head -5; } >>"$LOG"; done
        fi
        if cmp -s "$SCRATCH/run_long_ar.txt" "$SCRATCH/run_long_mtp3.txt"; then
            result "run: 900 tokens, GPU MTP 3 == AR" ok "$(wc -c <"$SCRATCH/run_long_ar.txt") bytes; AR $(tps long_ar) tok/s (attention unsplit: $(tps long_ar_unsplit)), MTP 3 $(tps long_mtp3) tok/s"
        else
            result "run: 900 tokens, GPU MTP 3 == AR" FAIL "the texts differ"
        fi
        if cmp -s "$SCRATCH/run_long_ar_group.txt" "$SCRATCH/run_long_mtp3_group.txt"; then
            result "run: 900 tokens, MTP 3 == AR, MTPLX_CUDA_ATTN_GROUP=400" ok "AR $(tps long_ar_group) tok/s, MTP 3 $(tps long_mtp3_group) tok/s (a block per KV head from 400 positions)"
        else
            result "run: 900 tokens, MTP 3 == AR, MTPLX_CUDA_ATTN_GROUP=400" FAIL "the texts differ"
        fi
        if cmp -s "$SCRATCH/run_long_ar.txt" "$SCRATCH/run_long_ar_unsplit.txt"; then
            result "run: 900 tokens, attention split == unsplit" ok "greedy AR text identical with MTPLX_CUDA_ATTN_SPLIT=0"
        else
            result "run: 900 tokens, attention split == unsplit" skip "differs (reported, not a failure: another summation order may flip near-ties)"
        fi
        if cmp -s "$SCRATCH/run_ar_g1.txt" "$SCRATCH/run_ar_plainprefill.txt"; then
            result "run: prefill kernels on == off" ok "greedy AR text identical with MTPLX_CUDA_TC=0 MTPLX_CUDA_FLASH=0"
        else
            result "run: prefill kernels on == off" skip "differs (reported, not a failure: another summation order may flip near-ties)"
        fi
        if cmp -s "$SCRATCH/run_ar_g1.txt" "$SCRATCH/run_cpu_ar.txt"; then
            result "run: GPU greedy text == CPU" ok "identical"
        else
            result "run: GPU greedy text == CPU" skip "differs (reported, not a failure: near-ties in logits may flip)"
        fi
        TABLES+=("" "speed, models/default.gguf, 256 tokens greedy, tok/s (tokens/forward):")
        TABLES+=("$(printf '  %-16s %14s %14s %8s' config 'graphs on' 'graphs off' 'on/off')")
        for c in ar mtp1 mtp2 mtp3; do
            a=$(tps ${c}_g1); b=$(tps ${c}_g0)
            r=$(awk -v a="$a" -v b="$b" 'BEGIN{ if (b > 0) printf "%.2fx", a / b; else print "?" }')
            TABLES+=("$(printf '  %-16s %14s %14s %8s' "$c" "$a ($(tpf ${c}_g1))" "$b ($(tpf ${c}_g0))" "$r")")
        done
        TABLES+=("$(printf '  %-16s %14s' 'mtp3 host picks' "$(tps mtp3_hostpick)")")
        same_s=""
        for c in ar mtp3; do
            cmp -s "$SCRATCH/run_s_${c}_d1.txt" "$SCRATCH/run_s_${c}_d0.txt" || same_s="$same_s $c"
        done
        if [ -z "$same_s" ]; then
            result "run: sampled texts, GPU draws == host draws" ok "T 0.8 seed 7, AR and MTP depth 3"
        else
            result "run: sampled texts, GPU draws == host draws" FAIL "differ:$same_s"
        fi
        TABLES+=("" "sampled (T 0.8, top-k 40, seed 7), tok/s (tokens/forward): draws on the GPU | on the host")
        for c in ar mtp3; do
            TABLES+=("$(printf '  %-16s %14s %14s' "$c" "$(tps s_${c}_d1) ($(tpf s_${c}_d1))" "$(tps s_${c}_d0) ($(tpf s_${c}_d0))")")
        done
        for n in ar_g1 mtp3_g1 mtp3_g0; do
            TABLES+=("  $n: $(grep -o 'CUDA graphs.*' "$SCRATCH/run_$n.err" | tail -1)")
        done
        TABLES+=("$(printf '  %-16s %14s %14s' 'CPU (all cores)' "ar $(tps cpu_ar)" "mtp3 $(tps cpu_mtp3)")")
    else
        result "mtplx run --device cuda" FAIL "failed:$bad (see the log)"
    fi

    # ---- 5. --device cuda on the other commands; a model that does not fit ----
    T0=$(date +%s)
    dev_cmd() { # name args...
        local name=$1
        shift
        (cd "$ROOT" && timeout 40 "$MTPLX" "$@") >"$SCRATCH/cmd_$name.out" 2>&1
        local rc=$?
        { echo "-- mtplx $* : rc=$rc"; tail -25 "$SCRATCH/cmd_$name.out"; echo; } >>"$LOG"
        return $rc
    }
    bad=""
    dev_cmd bench bench -m "$MODEL" --device cuda --quick -n 64 --reps 1 --max-depth 2 || bad="$bad bench"
    dev_cmd tune tune -m "$MODEL" --device cuda --quick --max-depth 2 --retune || bad="$bad tune"
    dev_cmd verify forge verify "$MODEL" --device cuda -n 64 --prompts 2 --depth 3 || bad="$bad forge-verify"
    if [ -z "$bad" ]; then result "--device cuda: bench, tune, forge verify" ok "exit 0 ($(($(date +%s) - T0)) s)"
    else result "--device cuda: bench, tune, forge verify" FAIL "non-zero exit:$bad"; fi
    grep -i 'greedy.*\(==\|equal\|identical\)' "$SCRATCH/cmd_verify.out" | head -2 | while IFS= read -r l; do say "   forge verify: $l"; done
    (cd "$ROOT" && MTPLX_CUDA_MEM_LIMIT=1000000 timeout 30 "$MTPLX" run -m "$MODEL" -p hi -n 4 --device cuda) \
        >"$SCRATCH/fit.out" 2>"$SCRATCH/fit.err"
    rc=$?
    cat "$SCRATCH/fit.err" >>"$LOG"
    if [ $rc = 1 ] && grep -q 'does not fit' "$SCRATCH/fit.err"; then
        result "too big for the GPU: refused" ok "exit 1: $(grep -o 'does not fit.*' "$SCRATCH/fit.err" | cut -c1-90)..."
    else
        result "too big for the GPU: refused" FAIL "exit $rc, message: $(tail -1 "$SCRATCH/fit.err" | cut -c1-120)"
    fi
    # --device auto (the default of start and serve) picks the GPU here
    (cd "$ROOT" && MTPLX_LOG=info timeout 30 "$MTPLX" run -m "$MODEL" -p hi -n 8 --device auto) \
        >"$SCRATCH/auto.out" 2>"$SCRATCH/auto.err"
    rc=$?
    cat "$SCRATCH/auto.err" >>"$LOG"
    if [ $rc = 0 ] && grep -q '| device cuda' "$SCRATCH/auto.err"; then
        result "--device auto picks the GPU" ok "exit 0, mode line says device cuda"
    else
        result "--device auto picks the GPU" FAIL "exit $rc: $(grep -o 'device [a-z]*' "$SCRATCH/auto.err" | head -1)"
    fi

    # ---- 6. a real shape: random-weight Qwen3-0.6B BF16, verify / decode on the GPU ----
    T0=$(date +%s)
    BM="$BUILD/bench/bench_models"
    if [ -x "$BM" ] && "$BM" gen --vocab "$MODEL" --out "$SCRATCH" --size 0.6b --types bf16 >>"$LOG" 2>&1; then
        M06="$SCRATCH/qwen3-0.6b-bf16.gguf"
        TABLES+=("" "random-weight Qwen3-0.6B shape, BF16, bench_models on the GPU (medians of 15):")
        TABLES+=("$(printf '  %-10s %10s %9s %8s %8s %8s %8s' graphs 'decode ms' 'GB/s' 'n=2' 'n=4' 'n=8' 'tok/s')")
        okb=1
        for g in 1 0; do
            j=$(cd "$ROOT" && timeout 60 "$BM" run "$M06" --device cuda --graphs $g --reps 15 --prefill 64 --prefill-reps 1 2>>"$LOG")
            echo "$j" >>"$LOG"
            [ -n "$j" ] || { okb=0; continue; }
            row=$(python3 - "$j" <<'PY' 2>/dev/null
import json, sys
j = json.loads(sys.argv[1])
r = j["verify_ratio"]
print("%10.3f %9.0f %7.2fx %7.2fx %7.2fx %8.1f" % (j["decode_ms"], j["decode_gbps"], r["2"], r["4"], r["8"], j["decode_tok_s"]))
PY
)
            [ -n "$row" ] || row=$(echo "$j" | grep -o '"decode_ms": [0-9.]*\|"verify_ratio": {[^}]*}' | tr '\n' ' ')
            TABLES+=("$(printf '  %-10s %s' "$([ $g = 1 ] && echo on || echo off)" "$row")")
        done
        TABLES+=("  (n=K columns: verify time of K rows / decode time of 1 row; the goal is n=4 <= 1.1x)")
        # prefill, 512 tokens: the prefill kernels on (default) and off
        pf_line=""
        # "on" keeps the environment's switches (a path turned off stays off)
        for pk in 1 0; do
            pe=()
            [ $pk = 0 ] && pe=(MTPLX_CUDA_TC=0 MTPLX_CUDA_FLASH=0)
            j=$(cd "$ROOT" && env "${pe[@]}" timeout 60 "$BM" run "$M06" --device cuda \
                --reps 3 --prefill 512 --prefill-reps 3 2>>"$LOG")
            echo "$j" >>"$LOG"
            v=$(echo "$j" | grep -o '"prefill_tok_s": [0-9.]*' | awk '{print $2}')
            [ -n "$v" ] || okb=0
            pf_line="$pf_line $([ $pk = 1 ] && echo "on (tensor cores + flash)" || echo "off (GEMV + per-token attention)") ${v:-?} tok/s;"
        done
        TABLES+=("  prefill 512 tokens, prefill kernels:$pf_line")
        # sampled AR on its 151936-entry vocabulary: draws on the GPU or the host
        s_line=""
        for sv in 1 0; do
            (cd "$ROOT" && MTPLX_CUDA_SAMPLE=$sv timeout 60 "$MTPLX" run -m "$M06" -p "$PROMPT" -n 128 --temp 0.8 -s 7 \
                --ignore-eos --device cuda -c 512) >"$SCRATCH/run_s06_$sv.txt" 2>"$SCRATCH/run_s06_$sv.err" || okb=0
            cat "$SCRATCH/run_s06_$sv.err" >>"$LOG"
            s_line="$s_line $([ $sv = 1 ] && echo GPU || echo host) $(tps s06_$sv) tok/s;"
        done
        cmp -s "$SCRATCH/run_s06_1.txt" "$SCRATCH/run_s06_0.txt" && s_same="same text" || s_same="TEXTS DIFFER"
        (cd "$ROOT" && timeout 60 "$MTPLX" run -m "$M06" -p "$PROMPT" -n 128 --temp 0 --ignore-eos --device cuda -c 512) \
            >"$SCRATCH/run_s06_g.txt" 2>"$SCRATCH/run_s06_g.err" || okb=0
        s_line="$s_line greedy (argmax on the GPU) $(tps s06_g) tok/s;"
        TABLES+=("  mtplx run, AR, 128 tokens; sampled (T 0.8) with draws on the:$s_line $s_same")
        if [ $okb = 1 ]; then result "bench_models 0.6B bf16 on the GPU" ok "$(($(date +%s) - T0)) s (table below)"
        else result "bench_models 0.6B bf16 on the GPU" FAIL "a run failed (see the log)"; fi
        rm -f "$M06"
    else
        result "bench_models 0.6B bf16 on the GPU" skip "bench_models missing or gen failed"
    fi
else
    result "mtplx run --device cuda" skip "no GPU"
fi
finish
