#!/usr/bin/env bash
# tz-bench-attention (bench_attention.c) under each instruction set and OpenBLAS core type this
# machine can play: oneDNN at its default ISA, capped at AVX2 and at AVX512_CORE
# (ONEDNN_MAX_CPU_ISA), and OpenBLAS at its detected core type, as Haswell (AVX2 EPYC) and as
# SkylakeX (AVX-512 EPYC) (OPENBLAS_CORETYPE, which Debian's DYNAMIC_ARCH OpenBLAS honours). A
# cap only lowers what a CPU has: on an AVX2-only machine the AVX-512 rows repeat the AVX2 ones.
#
#   scripts/bench/bench_cpu_attention.sh [--bin build/bin/tz-bench-attention] [--threads N] [--reps R] [SHAPE ...]
set -euo pipefail
BIN=build/bin/tz-bench-attention
ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) BIN=$2; shift 2 ;;
        --threads|--reps) ARGS+=("$1" "$2"); shift 2 ;;
        -h|--help) echo "usage: $0 [--bin PATH] [--threads N] [--reps R] [BxNHxTxHS[:c|:m] ...]" >&2; exit 2 ;;
        *) ARGS+=("$1"); shift ;;
    esac
done
[ -x "$BIN" ] || { echo "$0: no $BIN (cmake --build build --target tz-bench-attention)" >&2; exit 1; }
for setting in "" ONEDNN_MAX_CPU_ISA=AVX2 ONEDNN_MAX_CPU_ISA=AVX512_CORE OPENBLAS_CORETYPE=Haswell \
    OPENBLAS_CORETYPE=SkylakeX; do
    echo "## ${setting:-default ISA and core type}"
    env $setting "$BIN" "${ARGS[@]}"
    echo
done
