#!/usr/bin/env bash
# Pipeline stages against one process: gpt2-classify's ms/step at pp 1 (one rank) and pp 2 and
# 4 (one rank per stage), one thread per rank, for several micro-batch counts M, next to what
# the 1F1B bubble allows. Efficiency = T(pp 1) / (P x T(pp P)); the bubble bound is
# M / (M + P - 1). With --pp-recompute (pass it through --extra) the stages that are not last
# also recompute their forward in the backward, about a third more work on those ranks. CPU,
# under mpirun; the ranks need a core each to mean anything (P = 4 on a 2-core machine
# measures oversubscription).
#
#   scripts/bench/bench_pipeline.sh [--bin build/bin/gpt2-classify] [--stages "2 4"] [--micro "2 4 8"] [--steps N]
#                                   [--extra "--pp-recompute"]
set -euo pipefail
BIN=build/bin/gpt2-classify
STAGES="2"
MICRO="2 4 8"
STEPS=6
EXTRA=""
while [ $# -gt 0 ]; do
    case "$1" in
        --extra) EXTRA=$2; shift 2 ;;
        --bin) BIN=$2; shift 2 ;;
        --stages) STAGES=$2; shift 2 ;;
        --micro) MICRO=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        *) echo "usage: $0 [--bin PATH] [--stages \"2 4\"] [--micro \"2 4 8\"] [--steps N] [--extra OPTIONS]" >&2; exit 2 ;;
    esac
done
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# 8 layers of 256: the blocks dominate the step, as in the models pipelines are for
echo '{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 128, "n_embd": 256, "n_layer": 8, "n_head": 4}' \
    > "$TMP/arch.json"
mkdir -p "$TMP/data"
head -n 1025 assets/glue-mrpc/train.tsv > "$TMP/data/train.tsv"
head -n 33 assets/glue-mrpc/dev.tsv > "$TMP/data/dev.tsv"
ms_per_step() { # mean ms/step of the steps after the first two, from metrics.jsonl
    grep '"type":"train"' "$1/metrics.jsonl" | tail -n +3 | grep -o '"ms_per_step":[0-9.e+-]*' | cut -d: -f2 |
        awk '{s += $1; n++} END {printf "%.1f", s / n}'
}
run() { # P M: prints ms/step
    local P=$1 M=$2 dir="$TMP/p$1_m$2"
    local args=(--arch "$TMP/arch.json" --data-dir "$TMP/data" --max-len 64 --batch-size 4 --micro-batches "$M"
                --max-steps "$STEPS" --log-interval 1 --eval-interval -1 --save-interval -1 --threads 1 --no-cache
                --save-dir "$dir")
    if [ "$P" -eq 1 ]; then
        "$BIN" "${args[@]}" > "$dir.log" 2>&1
    else
        mpirun -np "$P" "$BIN" "${args[@]}" --pp "$P" $EXTRA > "$dir.log" 2>&1
    fi || { echo "run P=$P M=$M failed:" >&2; tail -5 "$dir.log" >&2; exit 1; }
    ms_per_step "$dir"
}
printf '%-4s %-4s %12s %12s %12s %14s\n' P M "pp 1 ms" "pp P ms" efficiency "bubble bound"
for M in $MICRO; do
    one=$(run 1 "$M")
    for P in $STAGES; do
        [ "$M" -ge "$P" ] || continue
        pp=$(run "$P" "$M")
        awk -v P="$P" -v M="$M" -v one="$one" -v pp="$pp" \
            'BEGIN {printf "%-4d %-4d %12.1f %12.1f %11.1f%% %13.1f%%\n", P, M, one, pp, 100 * one / (P * pp), 100 * M / (M + P - 1)}'
    done
done
