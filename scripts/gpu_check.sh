#!/usr/bin/env bash
# Everything that needs a GPU, for a machine with an NVIDIA GPU (issues 18 and 33):
#
#   scripts/gpu_check.sh [--part first|second|all] [--budget SECONDS] [--out DIR] [--quick]
#                        [--no-sanitizer] [--no-bench] [--no-profile] [--build-dir DIR] [--no-build]
#                        [--pack FILE]
#
# A short GPU lease (15 minutes of device time, start-up included, at most 10 minutes a command)
# takes it in two calls: `--part first` (the checks of the numbers, then the figures) and
# `--part second` (the sanitizers), each under 5 minutes. `--part all` (the default) runs both.
#
#  1. builds every program and test with the CUDA backend into build-gpu/ (-Werror, for this
#     GPU's architecture only, to build fast; --build-dir: another folder; --no-build: use what
#     is there, e.g. a CUDA build made on another machine and carried over; --pack FILE: unpack
#     the build scripts/gpu_pack.sh made on another machine into build-gpu/ and run with the
#     libraries it carries, for a GPU machine without our build dependencies);
#  first part:
#  2. every cuda-labelled test (test_cuda_ops, test_cuda_typed, test_comm_nccl; a test that
#     skips on a GPU machine counts as a failure);
#  3. 5 fp32 steps of every program (gpt2-classify, bert-classify, t5-finetune, glm-finetune,
#     gpt2-finetune; small models from scratch on the shipped data) on the CPU and on the GPU,
#     with the same seed: every step's loss within 0.1% of the CPU's;
#  4. 200 steps of each on the GPU in fp32 and in bf16: every bf16 step within 1% of fp32's and
#     the mean of the last 20 within 0.5%, the band test_precision_curves holds on the CPU
#     (--quick: 50 steps); and the same in bf16 with the fused attention (TZ_CUDA_ATTENTION=fused)
#     and with cuDNN's SDPA (TZ_CUDA_ATTENTION=cudnn);
#  4b. step graphs: gpt2-finetune without and with dropout, TZ_STEP_GRAPHS=on against off, the
#     same losses bit for bit;
#  5. where GPT-2 124M's bf16 step goes (scripts/bench/gpu_profile.sh: ms/step over sequence
#     lengths at the same tokens, without dropout, in fp32, and ncu's top kernels), about a minute
#     and a half (--no-profile: not);
#  6. the GPU benchmark (scripts/bench/gpu.sh) when python3 has torch with CUDA (--no-bench: not;
#     --quick: the two GPT-2 workloads, 30 steps, instead of all six with T5-3B's);
#  second part:
#  7. compute-sanitizer's memcheck and racecheck over test_cuda_ops and test_cuda_typed
#     (--no-sanitizer: not).
#
# Every step runs under `timeout`. --budget SECONDS bounds the whole call (default: 280 for one
# part, none for all): a step gets its own limit, cut to what the budget has left, and a step
# that cannot get its minimum is not started but recorded as SKIP, so the summary is whole when
# the call ends. Each check appends one line to the summary, "PASS|FAIL|SKIP|INFO name: detail",
# with its figures; the script prints it at the end and exits 1 if any line is FAIL. The summary
# is BUILD_DIR/gpu_check.txt and the logs are in BUILD_DIR/gpu_check/; with --out DIR, the summary
# is DIR/summary.txt and the logs DIR/logs.tar.gz (the device tool brings back what is under its
# $OUT: `--out "$OUT"`).
set -u
cd "$(dirname "$0")/.." || exit 2
SRC=$(pwd)
PART=all BUDGET='' OUTDIR='' QUICK=0 SANITIZER=1 BENCH=1 PROFILE=1 BUILD=1 B=build-gpu PACK=
usage_error() { echo "gpu_check.sh: $* (see --help)" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --no-sanitizer) SANITIZER=0 ;;
    --no-bench) BENCH=0 ;;
    --no-profile) PROFILE=0 ;;
    --no-build) BUILD=0 ;;
    --part | --budget | --out | --pack | --build-dir)
        [ $# -ge 2 ] || usage_error "$1 needs a value"
        case "$1" in
        --part) PART=$2 ;;
        --budget) BUDGET=$2 ;;
        --out) OUTDIR=$2 ;;
        --pack) PACK=$2 BUILD=0 ;;
        --build-dir) B=$2 ;;
        esac
        shift ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown option $1" ;;
    esac
    shift
done
case "$PART" in first | second | all) ;; *) usage_error "--part $PART: expected first, second or all" ;; esac
if [ -z "$BUDGET" ]; then
    BUDGET=0
    [ "$PART" = all ] || BUDGET=280
fi
[[ "$BUDGET" =~ ^[0-9]+$ ]] || usage_error "--budget $BUDGET: expected a whole number of seconds (0: none)"
[ -z "$PACK" ] || [ -f "$PACK" ] || usage_error "--pack $PACK: no such file"
[ -z "$PACK" ] || [ "$B" = build-gpu ] || usage_error "--pack unpacks into build-gpu/; leave --build-dir out"

LOGS=$B/gpu_check SUMMARY=$B/gpu_check.txt
W=$B/gpu_check-work # the runs' folders (checkpoints, metrics)
mkdir -p "$LOGS" "$W" || exit 1
if [ -n "$OUTDIR" ]; then
    # the summary is written there line by line, so a call stopped from outside still has it;
    # the logs go there as one archive when the script ends (the device tool brings back 8 files)
    mkdir -p "$OUTDIR" || exit 1
    SUMMARY=$OUTDIR/summary.txt
    trap 'tar czf "$OUTDIR/logs.tar.gz" -C "$LOGS" . 2> /dev/null' EXIT
fi
: > "$SUMMARY"
line() { echo "$*" >> "$SUMMARY"; echo "$*"; }
secs() { echo $(($(date +%s) - $1)); }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# ---- the budget: every step runs under `timeout LIMIT`, LIMIT from step_limit ----
START=$(date +%s)
RESERVE=5 # seconds kept for the last lines of the summary
# step_limit WANT MIN: WANT seconds, or what the budget has left (less RESERVE) when that is less;
# prints nothing and fails when that is under MIN, so the caller records a SKIP instead.
step_limit() {
    local limit=$1
    if [ "$BUDGET" -gt 0 ]; then
        local left=$((BUDGET - $(secs "$START") - RESERVE))
        [ "$left" -lt "$limit" ] && limit=$left
    fi
    [ "$limit" -ge "$2" ] || return 1
    echo "$limit"
}
no_time() { line "SKIP $1: not started, $((BUDGET - $(secs "$START"))) s of the --budget $BUDGET s left"; }
# timed_out RC: whether a command under `timeout` was stopped by it
timed_out() { [ "$1" = 124 ] || [ "$1" = 137 ]; }

# ---- a packed build: unpack it, find CUDA's libraries here, point its ctest files at this checkout ----
if [ -n "$PACK" ]; then
    tar xJf "$PACK" || { line "FAIL pack: cannot unpack $PACK"; exit 1; }
    cuda_dirs=$(find /usr/local /opt /usr/lib \( -name 'libcublasLt.so.13' -o -name 'libcudart.so.13' -o \
        -name 'libnccl.so.2' -o -name 'libcudnn.so.9' -o -name 'libnvrtc.so.13' \) -printf '%h\n' 2> /dev/null |
        sort -u | tr '\n' ':')
    export LD_LIBRARY_PATH="$SRC/$B/lib:$cuda_dirs${LD_LIBRARY_PATH:-}"
    packed_src=$(cat "$B/pack-source-dir")
    [ "$packed_src" = "$SRC" ] || sed -i "s#$packed_src#$SRC#g" "$B/CTestTestfile.cmake" "$B/tests/CTestTestfile.cmake"
    missing=$(ldd "$B/bin/gpt2-classify" "$B/tests/test_cuda_ops" | grep 'not found' | sort -u | tr -s ' \t\n' ' ')
    if [ -n "$missing" ]; then
        line "FAIL pack: libraries not found here: $missing"
        exit 1
    fi
    line "INFO pack: $PACK, built in $packed_src; CUDA libraries from ${cuda_dirs%:}"
fi

# ---- the machine ----
if command -v nvidia-smi > /dev/null; then
    line "INFO gpu: $(timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader | head -1)"
else
    line "FAIL gpu: nvidia-smi not found (is this a GPU machine?)"
fi
line "INFO nvcc: $(nvcc --version 2> /dev/null | tail -1 || echo 'not found')"
line "INFO part $PART, budget ${BUDGET} s (0: none)"

# ---- 1. build ----
t0=$(date +%s)
if [ "$BUILD" = 0 ]; then
    if [ -x "$B/bin/gpt2-classify" ] && [ -x "$B/tests/test_cuda_ops" ]; then
        line "INFO build: --no-build, using $B as it is"
    else
        line "FAIL build: --no-build, but $B has no built programs and tests"
        exit 1
    fi
elif ! limit=$(step_limit 1800 60); then
    no_time build
    exit 1
elif timeout "$limit" cmake -S . -B "$B" -DUSE_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DWERROR=ON \
    -DCMAKE_CUDA_ARCHITECTURES=native > "$LOGS/build.log" 2>&1 &&
    timeout "$((limit - $(secs "$t0")))" cmake --build "$B" -j "$(nproc)" >> "$LOGS/build.log" 2>&1; then
    line "PASS build: CUDA build in $(secs "$t0") s"
else
    line "FAIL build: see $LOGS/build.log: $(grep -m1 -E 'error|Error' "$LOGS/build.log")"
    cat "$SUMMARY"
    exit 1
fi
BIN=$B/bin

# ---- 2. cuda-labelled tests, each under ctest's own timeout ----
cuda_tests() {
    local limit
    limit=$(step_limit 150 20) || { no_time "ctest -L cuda"; return; }
    timeout "$limit" ctest --test-dir "$B" -L cuda --timeout "$((limit - 5))" --output-on-failure \
        > "$LOGS/ctest-cuda.log" 2>&1
    grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: ' "$LOGS/ctest-cuda.log" | while read -r rest; do
        name=$(echo "$rest" | sed -E 's/.*Test +#[0-9]+: ([^ ]+).*/\1/')
        case "$rest" in
        *Passed*) line "PASS $name: $(echo "$rest" | grep -oE '[0-9.]+ sec')" ;;
        *Skipped* | *"Not Run"*) line "FAIL $name: skipped on a GPU machine (see $LOGS/ctest-cuda.log)" ;;
        *Timeout*) line "FAIL $name: timed out (see $LOGS/ctest-cuda.log)" ;;
        *) line "FAIL $name: see $LOGS/ctest-cuda.log" ;;
        esac
    done
    grep -qE 'Test +#[0-9]+' "$LOGS/ctest-cuda.log" || line "FAIL ctest -L cuda: no test ran (see $LOGS/ctest-cuda.log)"
}

# ---- the workloads: small models from scratch on the shipped data (tests/curve_workloads.sh) ----
. "$SRC/tests/curve_workloads.sh"
curve_setup "$SRC/assets" "$W"
export CURVE_ASSETS
export -f curve_train
WORKLOADS="gpt2-classify bert-classify t5-finetune glm-finetune gpt2-finetune"

# train NAME LIMIT PROGRAM DEVICE PRECISION STEPS: one run under `timeout LIMIT`, in W/NAME, its
# log in LOGS/NAME.log; on failure, one FAIL line naming the run
train() {
    local name=$1 limit=$2 prog=$3 dev=$4 prec=$5 steps=$6 rc
    rm -rf "${W:?}/$name"
    timeout "$limit" bash -c 'curve_train "$@"' _ "$BIN" "$W" "$prog" --device "$dev" --precision "$prec" \
        --max-steps "$steps" --log-interval 1 --eval-interval -1 --save-interval -1 --threads 2 --no-cache \
        --save-dir "$W/$name" > "$LOGS/$name.log" 2>&1
    rc=$?
    [ "$rc" = 0 ] && return 0
    if timed_out "$rc"; then
        line "FAIL $name: timed out after $limit s (see $LOGS/$name.log)"
    else
        line "FAIL $name: exit $rc: $(tail -1 "$LOGS/$name.log")"
    fi
    return 1
}
losses() { grep '"type":"train"' "$1/metrics.jsonl" | sed 's/.*"loss":\([0-9.eE+-]*\).*/\1/'; }
ms_per_step() { grep '"type":"train"' "$1/metrics.jsonl" | tail -n +3 |
    sed 's/.*"ms_per_step":\([0-9.eE+-]*\).*/\1/' | awk '{ s += $1; n++ } END { if (n) printf "%.1f", s / n }'; }

# compare NAME REF CAND STEPS BAND TAIL DIFFER: one PASS or FAIL line
compare() {
    local verdict
    verdict=$(paste <(losses "$2") <(losses "$3") |
        awk -v steps="$4" -v band="$5" -v tail="$6" -v differ="$7" -f "$SRC/tests/loss_band.awk")
    case "$verdict" in
    ok*) line "PASS $1: worst step ${verdict#ok } off; ms/step $(ms_per_step "$2") vs $(ms_per_step "$3")" ;;
    *) line "FAIL $1: $verdict"; return 1 ;;
    esac
}

# ---- 3. CPU against CUDA, fp32, 5 steps ----
cpu_vs_cuda() {
    local prog dev limit ok
    for prog in $WORKLOADS; do
        ok=1
        for dev in cpu cuda; do
            limit=$(step_limit 60 15) || { no_time "$prog on $dev, fp32, 5 steps"; ok=0; break; }
            train "$prog-$dev-fp32-5" "$limit" "$prog" "$dev" fp32 5 || ok=0
        done
        [ "$ok" = 1 ] && compare "$prog cuda vs cpu, fp32, 5 steps" "$W/$prog-cpu-fp32-5" "$W/$prog-cuda-fp32-5" 5 \
            0.001 0.001 0
    done
}

# ---- 4. bf16 against fp32 on the GPU ----
# fp32_activations PROG STEPS: after a failed bf16 run, the same run with the activations kept in
# fp32 buffers (TZ_CUDA_ACTIVATIONS=fp32, the path measured before the 16-bit kernels): its
# passing puts the fault in the 16-bit activation kernels
fp32_activations() {
    local limit name="$1-cuda-bf16-act32-$2"
    limit=$(step_limit 90 20) || { no_time "$1 on cuda, bf16 with fp32 activations"; return; }
    TZ_CUDA_ACTIVATIONS=fp32 train "$name" "$limit" "$1" cuda bf16 "$2" &&
        compare "$1 cuda bf16 with TZ_CUDA_ACTIVATIONS=fp32 vs fp32, $2 steps" "$W/$1-cuda-fp32-$2" "$W/$name" "$2" \
            0.01 0.005 1
}
precisions() {
    local steps=200 prog limit
    [ "$QUICK" = 1 ] && steps=50
    for prog in $WORKLOADS; do
        limit=$(step_limit 90 20) || { no_time "$prog on cuda, fp32, $steps steps"; continue; }
        train "$prog-cuda-fp32-$steps" "$limit" "$prog" cuda fp32 "$steps" || continue
        limit=$(step_limit 90 20) || { no_time "$prog on cuda, bf16, $steps steps"; continue; }
        if ! { train "$prog-cuda-bf16-$steps" "$limit" "$prog" cuda bf16 "$steps" &&
            compare "$prog cuda bf16 vs fp32, $steps steps" "$W/$prog-cuda-fp32-$steps" \
                "$W/$prog-cuda-bf16-$steps" "$steps" 0.01 0.005 1; }; then
            fp32_activations "$prog" "$steps"
        fi
        # the other attentions, in the same band: the fused kernels, and cuDNN's SDPA (which takes
        # the calls without padding, gpt2-finetune's; the run log names what it left to the
        # materialized path)
        for attention in fused cudnn; do
            limit=$(step_limit 90 20) || { no_time "$prog on cuda, bf16 with the $attention attention"; continue; }
            TZ_CUDA_ATTENTION=$attention train "$prog-cuda-$attention-$steps" "$limit" "$prog" cuda bf16 "$steps" &&
                compare "$prog cuda bf16 $attention attention vs fp32, $steps steps" "$W/$prog-cuda-fp32-$steps" \
                    "$W/$prog-cuda-$attention-$steps" "$steps" 0.01 0.005 1
        done
    done
}

# ---- 4b. step graphs (TZ_STEP_GRAPHS=on): gpt2-finetune without dropout and with GPT-2's (whose
# masks take the step from the step's record), each on and off: the same kernels with the same
# arguments, so the same losses bit for bit ----
graphs() {
    local limit mode arch ok steps=30
    sed 's/}$/, "resid_pdrop": 0, "embd_pdrop": 0, "attn_pdrop": 0}/' "$W/gpt2.json" > "$W/gpt2-nodrop.json"
    for arch in gpt2-nodrop gpt2; do
        ok=1
        for mode in off on; do
            limit=$(step_limit 60 15) || { no_time "step graphs $arch $mode"; return; }
            rm -rf "${W:?}/graphs-$arch-$mode"
            TZ_STEP_GRAPHS=$mode timeout "$limit" "$BIN/gpt2-finetune" "$W/s.en" --arch "$W/$arch.json" \
                --block-size 64 --batch-size 8 --grad-accum 2 --device cuda --precision bf16 --max-steps "$steps" \
                --log-interval 1 --eval-interval -1 --save-interval -1 --no-cache --save-dir "$W/graphs-$arch-$mode" \
                > "$LOGS/graphs-$arch-$mode.log" 2>&1 ||
                { line "FAIL step graphs $arch $mode: $(tail -1 "$LOGS/graphs-$arch-$mode.log")"; ok=0; }
        done
        [ "$ok" = 1 ] || continue
        grep '^step graphs\|^CUDA graphs' "$LOGS/graphs-$arch-on.log" | while read -r l; do line "INFO $arch: $l"; done
        compare "step graphs ($arch): TZ_STEP_GRAPHS=on vs off, bf16, $steps steps" "$W/graphs-$arch-off" \
            "$W/graphs-$arch-on" "$steps" 0 0 0
    done
}

# ---- 5. where the step's time goes ----
profile() {
    local limit rc
    limit=$(step_limit 240 100) || { no_time profile; return; }
    timeout "$limit" scripts/bench/gpu_profile.sh "$BIN" "$W/profile" > "$LOGS/profile.log" 2>&1
    rc=$?
    grep '^INFO profile' "$LOGS/profile.log" | while read -r l; do line "$l"; done
    timed_out "$rc" && line "FAIL profile: timed out after $limit s (see $LOGS/profile.log)"
}

# ---- 6. the GPU benchmark ----
benchmark() {
    local limit rc bench bench_args=()
    if ! python3 -c 'import torch, transformers, sys; sys.exit(not torch.cuda.is_available())' 2> /dev/null; then
        line "SKIP benchmark: python3 has no torch with CUDA here"
        return
    fi
    limit=$(step_limit 1200 120) || { no_time benchmark; return; }
    t0=$(date +%s)
    # 30 steps: enough for MRPC's lengths to repeat ("ms seen" in its table)
    # shellcheck disable=SC2054 # the comma belongs to the workload list
    [ "$QUICK" = 1 ] && bench_args=(--workloads gpt2-mrpc,gpt2-lm-1024 --steps 30 --warmup 5)
    bench=(scripts/bench/gpu.sh) # it builds build-gpu/ first; a build made elsewhere is used as it is
    [ "$BUILD" = 0 ] && bench=(python3 scripts/bench/bench_gpu.py --bin-dir "$B/bin" --device cuda)
    timeout "$limit" "${bench[@]}" "${bench_args[@]}" > "$LOGS/bench.log" 2>&1
    rc=$?
    if [ "$rc" = 0 ]; then
        line "PASS benchmark: $(secs "$t0") s; its table:"
        sed 's/^/INFO   /' "$LOGS/bench.log" | tail -20 | tee -a "$SUMMARY"
    elif timed_out "$rc"; then
        line "FAIL benchmark: timed out after $limit s (see $LOGS/bench.log)"
    else
        line "FAIL benchmark: see $LOGS/bench.log: $(tail -1 "$LOGS/bench.log")"
    fi
}

# ---- 7. compute-sanitizer ----
sanitizers() {
    local tool test limit rc sanitizer
    sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null)
    if [ -z "$sanitizer" ]; then
        line "SKIP compute-sanitizer: not on PATH nor in /usr/local/cuda/bin"
        return
    fi
    for test in test_cuda_ops test_cuda_typed; do
        for tool in memcheck racecheck; do
            limit=$(step_limit 120 30) || { no_time "compute-sanitizer $tool $test"; continue; }
            t0=$(date +%s)
            timeout "$limit" "$sanitizer" --tool "$tool" --error-exitcode 3 "$B/tests/$test" \
                > "$LOGS/sanitizer-$tool-$test.log" 2>&1
            rc=$?
            if [ "$rc" = 0 ]; then
                line "PASS compute-sanitizer $tool $test: $(secs "$t0") s"
            elif timed_out "$rc"; then
                line "FAIL compute-sanitizer $tool $test: timed out after $limit s (see $LOGS/sanitizer-$tool-$test.log)"
            else
                line "FAIL compute-sanitizer $tool $test: $(grep -m1 -E '=========.*(Error|error|hazard)' \
                    "$LOGS/sanitizer-$tool-$test.log") (see $LOGS/sanitizer-$tool-$test.log)"
            fi
        done
    done
}

if [ "$PART" != second ]; then
    cuda_tests
    cpu_vs_cuda
    precisions
    graphs
    [ "$PROFILE" = 1 ] && profile
    [ "$BENCH" = 1 ] && benchmark
fi
[ "$PART" != first ] && [ "$SANITIZER" = 1 ] && sanitizers

line "INFO gpu_check: $(secs "$START") s"
echo
echo "summary ($SUMMARY):"
cat "$SUMMARY"
! grep -q '^FAIL' "$SUMMARY"
