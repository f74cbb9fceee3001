#!/usr/bin/env bash
# Everything that needs a GPU, in one command, for a machine with an NVIDIA GPU (issue 18):
#
#   scripts/gpu_check.sh [--quick] [--no-sanitizer] [--no-bench] [--build-dir DIR] [--no-build]
#                        [--pack FILE] [--no-profile]
#
#  1. builds every program and test with the CUDA backend into build-gpu/ (-Werror, for this
#     GPU's architecture only, to build fast; --build-dir: another folder; --no-build: use what
#     is there, e.g. a CUDA build made on another machine and carried over; --pack FILE: unpack
#     the build scripts/gpu_pack.sh made on another machine into build-gpu/ and run with the
#     libraries it carries, for a GPU machine without our build dependencies);
#  2. runs every cuda-labelled test (test_cuda_ops, test_cuda_typed, test_comm_nccl; a test that skips on a GPU
#     machine counts as a failure);
#  3. runs compute-sanitizer's memcheck and racecheck over test_cuda_ops, 5 minutes at most each
#     (--no-sanitizer: not);
#  4. trains 5 steps of every program (gpt2-classify, bert-classify, t5-finetune, glm-finetune,
#     gpt2-finetune; small models from scratch on the shipped data) in fp32 on the CPU and on the
#     GPU, with the same seed: every step's loss within 0.1% of the CPU's;
#  5. trains 200 steps of each on the GPU in fp32 and in bf16: every bf16 step within 1% of fp32's
#     and the mean of the last 20 within 0.5%, the band test_precision_curves holds on the CPU
#     (--quick: 50 steps); and the same in bf16 with the fused attention (TZ_CUDA_ATTENTION=fused);
#  6. runs the GPU benchmark (scripts/bench/gpu.sh) when python3 has torch with CUDA (--no-bench:
#     not; --quick: the two GPT-2 workloads, 30 steps, instead of all six with T5-3B's);
#  7. profiles GPT-2 124M's bf16 step (scripts/bench/gpu_profile.sh: ms/step over sequence
#     lengths at the same tokens, without dropout, in fp32, and ncu's top kernels), about a
#     minute and a half (--no-profile: not).
#
# Each check appends one line to BUILD_DIR/gpu_check.txt, "PASS|FAIL|SKIP name: detail", with
# its figures; the script prints the file at the end and exits 1 if any line is FAIL. Logs are
# in BUILD_DIR/gpu_check/. With --quick --no-bench it is meant to fit a 15-minute GPU lease.
set -u
cd "$(dirname "$0")/.." || exit 2
SRC=$(pwd)
QUICK=0 SANITIZER=1 BENCH=1 PROFILE=1 BUILD=1 B=build-gpu PACK=
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --no-sanitizer) SANITIZER=0 ;;
    --no-bench) BENCH=0 ;;
    --no-profile) PROFILE=0 ;;
    --no-build) BUILD=0 ;;
    --pack)
        [ $# -ge 2 ] || { echo "gpu_check.sh: --pack needs a file (from scripts/gpu_pack.sh)" >&2; exit 2; }
        [ -f "$2" ] || { echo "gpu_check.sh: --pack $2: no such file" >&2; exit 2; }
        PACK=$2 BUILD=0 B=build-gpu
        shift ;;
    --build-dir)
        [ $# -ge 2 ] || { echo "gpu_check.sh: --build-dir needs a folder" >&2; exit 2; }
        B=$2
        shift ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
LOGS=$B/gpu_check
SUMMARY=$B/gpu_check.txt
mkdir -p "$LOGS" || exit 1
: > "$SUMMARY"
line() { echo "$*" >> "$SUMMARY"; echo "$*"; }
secs() { echo $(($(date +%s) - $1)); }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# ---- a packed build: unpack it, find CUDA's libraries here, point its ctest files at this checkout ----
if [ -n "$PACK" ]; then
    [ "$B" = build-gpu ] || { echo "gpu_check.sh: --pack unpacks into build-gpu/; leave --build-dir out" >&2; exit 2; }
    tar xJf "$PACK" || { line "FAIL pack: cannot unpack $PACK"; exit 1; }
    cuda_dirs=$(find /usr/local /opt /usr/lib \( -name 'libcublasLt.so.13' -o -name 'libcudart.so.13' -o \
        -name 'libnccl.so.2' \) -printf '%h\n' 2> /dev/null | sort -u | tr '\n' ':')
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
    line "INFO gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader | head -1)"
else
    line "FAIL gpu: nvidia-smi not found (is this a GPU machine?)"
fi
line "INFO nvcc: $(nvcc --version 2> /dev/null | tail -1 || echo 'not found')"

# ---- 1. build ----
t0=$(date +%s)
if [ "$BUILD" = 0 ]; then
    if [ -x "$B/bin/gpt2-classify" ] && [ -x "$B/tests/test_cuda_ops" ]; then
        line "INFO build: --no-build, using $B as it is"
    else
        line "FAIL build: --no-build, but $B has no built programs and tests"
        exit 1
    fi
elif cmake -S . -B "$B" -DUSE_CUDA=ON -DCMAKE_BUILD_TYPE=Release -DWERROR=ON -DCMAKE_CUDA_ARCHITECTURES=native \
    > "$LOGS/build.log" 2>&1 && cmake --build "$B" -j "$(nproc)" >> "$LOGS/build.log" 2>&1; then
    line "PASS build: CUDA build in $(secs "$t0") s"
else
    line "FAIL build: see $LOGS/build.log: $(grep -m1 -E 'error|Error' "$LOGS/build.log")"
    cat "$SUMMARY"
    exit 1
fi
BIN=$B/bin

# ---- 2. cuda-labelled tests ----
t0=$(date +%s)
ctest --test-dir "$B" -L cuda --output-on-failure > "$LOGS/ctest-cuda.log" 2>&1
grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: ' "$LOGS/ctest-cuda.log" | while read -r rest; do
    name=$(echo "$rest" | sed -E 's/.*Test +#[0-9]+: ([^ ]+).*/\1/')
    case "$rest" in
    *Passed*) line "PASS $name: $(echo "$rest" | grep -oE '[0-9.]+ sec')" ;;
    *Skipped* | *"Not Run"*) line "FAIL $name: skipped on a GPU machine (see $LOGS/ctest-cuda.log)" ;;
    *) line "FAIL $name: see $LOGS/ctest-cuda.log" ;;
    esac
done
grep -qE 'Test +#[0-9]+' "$LOGS/ctest-cuda.log" || line "FAIL ctest -L cuda: no test ran (see $LOGS/ctest-cuda.log)"

# ---- 3. compute-sanitizer ----
if [ "$SANITIZER" = 1 ]; then
    if command -v compute-sanitizer > /dev/null; then
        for tool in memcheck racecheck; do
            t0=$(date +%s)
            if timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 3 "$B/tests/test_cuda_ops" \
                > "$LOGS/sanitizer-$tool.log" 2>&1; then
                line "PASS compute-sanitizer $tool test_cuda_ops: $(secs "$t0") s"
            else
                line "FAIL compute-sanitizer $tool test_cuda_ops: $(grep -m1 -E '=========.*(Error|error|hazard)' \
                    "$LOGS/sanitizer-$tool.log") (see $LOGS/sanitizer-$tool.log)"
            fi
        done
    else
        line "SKIP compute-sanitizer: not on PATH"
    fi
fi

# ---- the workloads: small models from scratch on the shipped data (tests/curve_workloads.sh) ----
W=$LOGS/work
mkdir -p "$W"
. "$SRC/tests/curve_workloads.sh"
curve_setup "$SRC/assets" "$W"
WORKLOADS="gpt2-classify bert-classify t5-finetune glm-finetune gpt2-finetune"

# train PROGRAM DEVICE PRECISION STEPS DIR: one run, its log in DIR.log
train() {
    curve_train "$BIN" "$W" "$1" --device "$2" --precision "$3" --max-steps "$4" --log-interval 1 --eval-interval -1 \
        --save-interval -1 --threads 2 --no-cache --save-dir "$5" > "$5.log" 2>&1
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
    *) line "FAIL $1: $verdict" ;;
    esac
}

# ---- 4. CPU against CUDA, fp32, 5 steps ----
for prog in $WORKLOADS; do
    ok=1
    for dev in cpu cuda; do
        train "$prog" "$dev" fp32 5 "$W/$prog-$dev-fp32-5" || { ok=0; line "FAIL $prog on $dev (fp32): $(tail -1 "$W/$prog-$dev-fp32-5.log")"; }
    done
    [ "$ok" = 1 ] && compare "$prog cuda vs cpu, fp32, 5 steps" "$W/$prog-cpu-fp32-5" "$W/$prog-cuda-fp32-5" 5 0.001 0.001 0
done

# ---- 5. bf16 against fp32 on the GPU ----
STEPS=200
[ "$QUICK" = 1 ] && STEPS=50
for prog in $WORKLOADS; do
    ok=1
    for prec in fp32 bf16; do
        train "$prog" cuda "$prec" "$STEPS" "$W/$prog-cuda-$prec-$STEPS" ||
            { ok=0; line "FAIL $prog on cuda ($prec): $(tail -1 "$W/$prog-cuda-$prec-$STEPS.log")"; }
    done
    [ "$ok" = 1 ] && compare "$prog cuda bf16 vs fp32, $STEPS steps" "$W/$prog-cuda-fp32-$STEPS" \
        "$W/$prog-cuda-bf16-$STEPS" "$STEPS" 0.01 0.005 1
    [ "$ok" = 1 ] || continue
    if TZ_CUDA_ATTENTION=fused train "$prog" cuda bf16 "$STEPS" "$W/$prog-cuda-fused-$STEPS"; then
        compare "$prog cuda bf16 fused attention vs fp32, $STEPS steps" "$W/$prog-cuda-fp32-$STEPS" \
            "$W/$prog-cuda-fused-$STEPS" "$STEPS" 0.01 0.005 1
    else
        line "FAIL $prog on cuda (bf16, fused attention): $(tail -1 "$W/$prog-cuda-fused-$STEPS.log")"
    fi
done

# ---- 6. the GPU benchmark ----
if [ "$BENCH" = 1 ]; then
    if python3 -c 'import torch, transformers, sys; sys.exit(not torch.cuda.is_available())' 2> /dev/null; then
        t0=$(date +%s)
        bench_args=()
        # 30 steps: enough for MRPC's lengths to repeat ("ms seen" in its table)
        [ "$QUICK" = 1 ] && bench_args=(--workloads gpt2-mrpc,gpt2-lm-1024 --steps 30 --warmup 5)
        bench=(scripts/bench/gpu.sh) # it builds build-gpu/ first; a build made elsewhere is used as it is
        [ "$BUILD" = 0 ] && bench=(python3 scripts/bench/bench_gpu.py --bin-dir "$B/bin" --device cuda)
        if "${bench[@]}" "${bench_args[@]}" > "$LOGS/bench.log" 2>&1; then
            line "PASS benchmark: $(secs "$t0") s; its table:"
            sed 's/^/INFO   /' "$LOGS/bench.log" | tail -20 | tee -a "$SUMMARY"
        else
            line "FAIL benchmark: see $LOGS/bench.log: $(tail -1 "$LOGS/bench.log")"
        fi
    else
        line "SKIP benchmark: python3 has no torch with CUDA here"
    fi
fi

# ---- 7. where the step's time goes ----
if [ "$PROFILE" = 1 ]; then
    scripts/bench/gpu_profile.sh "$BIN" "$LOGS/profile" | tee -a "$SUMMARY"
fi

echo
echo "summary ($SUMMARY):"
cat "$SUMMARY"
! grep -q '^FAIL' "$SUMMARY"
