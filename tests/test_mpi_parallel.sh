#!/usr/bin/env bash
# gpt2-classify under mpirun takes the single process's steps (losses, gradient norms and dev
# metrics) at dp=2, dp=4, tp=2, tp=4, dp=2 x tp=2, and with ZeRO-1/2/3, optimizer offload,
# ZeRO-3's parameter offload and ZeRO-3 with activation checkpointing (--batch-size is the global
# batch, each dp rank takes a slice; tp ranks shard the same HF weights). Dropout is off: its masks
# are drawn per rank-local batch element, as in PyTorch DDP. dp's partial sums and tp's pieces add
# in another order than one process, so each step is compared from the same weights within the
# tolerance (tests/mpi_compare.sh says why): step 1 from the exported weights, each later step as
# one process takes it from the layout's checkpoint of the step before. Checkpoints hold full
# tensors: tp=2's checkpoint of step 3 resumes (--resume) at tp=1, tp=2 and tp=4, and dp=2 ZeRO-3's
# at pp=2 and tp=2, and each takes the saving run's step 4 from the same weights; ZeRO-3's
# --comm-stats bytes agree with their formula.
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/gpt2-classify"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
pass=0
fail=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
command -v mpirun > /dev/null || { echo "FAILED: test_mpi_parallel: no mpirun (scripts/setup.sh installs OpenMPI)" >&2; exit 1; }
ldd "$BIN" | grep -q libmpi || { echo "FAILED: test_mpi_parallel: the programs were built without MPI" >&2; exit 1; }
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cat > "$TMP/arch.json" <<JSON
{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 4,
 "embd_pdrop": 0, "resid_pdrop": 0, "attn_pdrop": 0}
JSON
mkdir -p "$TMP/data"
head -n 65 "$SRC/assets/glue-mrpc/train.tsv" > "$TMP/data/train.tsv"
head -n 33 "$SRC/assets/glue-mrpc/dev.tsv" > "$TMP/data/dev.tsv"
# random init depends on the tp layout, so every run starts from the same exported weights
"$BIN" --arch "$TMP/arch.json" --data-dir "$TMP/data" --max-len 48 --epochs 0 --save-dir "$TMP/init" \
    --save-hf "$TMP/model" > "$TMP/init.log" 2>&1 || { echo "FAILED: export"; cat "$TMP/init.log"; exit 1; }
. "$SRC/tests/mpi_compare.sh"
ARGS=(--model "$TMP/model" --data-dir "$TMP/data" --max-len 48 --batch-size 8 --grad-accum 2 --max-steps 5
      --log-interval 1 --threads 1 "${SAVE_EVERY_STEP[@]}")

run one 1 "${ARGS[@]}" || { echo "FAILED: single-process run"; cat "$TMP/one.log"; exit 1; }
# 5 steps x (loss, grad_norm) + at least one eval (loss, accuracy, f1)
[ "$(grep -o "\"\($METRICS\)\":" "$TMP/one/metrics.jsonl" | wc -l)" -ge 13 ] ||
    { echo "FAILED: expected at least 13 numbers in metrics.jsonl"; cat "$TMP/one/metrics.jsonl"; exit 1; }
# ZeRO layouts (third field: stage, fourth: optimizer offload) take one process's steps as well
for layout in "2 1" "4 1" "2 2" "4 4" "4 2" "2 1 1" "4 1 2" "4 2 1" "3 1 2 offload" "2 1 3" "4 2 3" \
    "3 1 3 offload-params" "2 1 3 checkpoint"; do # ranks tp [zero] [offload|offload-params|checkpoint]
    set -- $layout
    name="np$1_tp$2_zero${3:-0}${4:+_$4}"
    extra=(--tp "$2" --zero "${3:-0}")
    [ "${4:-}" = offload ] && extra+=(--offload-optimizer)
    [ "${4:-}" = offload-params ] && extra+=(--offload-params)
    [ "${4:-}" = checkpoint ] && extra+=(--checkpoint-activations)
    run "$name" "$1" "${ARGS[@]}" "${extra[@]}" || { fail=$((fail + 1)); continue; }
    check "$name" one "$name"
done
# without ZeRO the dp all-reduce overlaps the backward: the runs above matched one process with it
if grep -q "buckets of [0-9]* floats, each started as the backward finishes it" "$TMP/np2_tp1_zero0.log"; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAILED: np2_tp1_zero0 did not overlap its gradient all-reduce:" >&2
    grep "gradients:" "$TMP/np2_tp1_zero0.log" >&2
fi
# what, the run that saved, a name, ranks, options: the saved run's checkpoint of step 3, copied into
# the new run's folder and found by --resume, takes the saved run's step 4 (and its dev metrics, if
# it evaluated there) within the tolerance, from the same weights.
resume_at() {
    local what=$1 saved=$2 name=$3 np=$4
    shift 4
    mkdir -p "$TMP/$name" && cp "$TMP/$saved/step-000003.tzck" "$TMP/$name/"
    if run "$name" "$np" "$@" --resume --max-steps 4 --save-interval -1 &&
        grep -q "resumed from .*step-000003.tzck (step 3)" "$TMP/$name.log"; then
        numbers_at "$saved" 4 > "$TMP/cmp.ref"
        numbers_at "$name" 4 | head -n "$(wc -l < "$TMP/cmp.ref")" > "$TMP/cmp.run"
        if close "$what: step 4 differs from $saved's" "$TMP/cmp.ref" "$TMP/cmp.run"; then
            pass=$((pass + 1))
        else
            fail=$((fail + 1))
        fi
    else
        fail=$((fail + 1)); echo "FAILED: $what: $name did not resume from $saved's step 3" >&2
    fi
}
# checkpoints hold full tensors: tp=2's (step 3) resumes at tp=1, 2 and 4
resume_at "saved at tp 2, resumed at tp 1" np2_tp2_zero0 resume_tp1 1 "${ARGS[@]}"
resume_at "saved at tp 2, resumed at tp 2" np2_tp2_zero0 resume_tp2 2 "${ARGS[@]}" --tp 2
resume_at "saved at tp 2, resumed at tp 4" np2_tp2_zero0 resume_tp4 4 "${ARGS[@]}" --tp 4
# a ZeRO-3 checkpoint (dp 2, step 3) holds full tensors too: it resumes at pp 2 and at tp 2
resume_at "saved at dp 2 ZeRO-3, resumed at pp 2" np2_tp1_zero3 z3resume_pp2 2 "${ARGS[@]}" --pp 2
resume_at "saved at dp 2 ZeRO-3, resumed at tp 2" np2_tp1_zero3 z3resume_tp2 2 "${ARGS[@]}" --tp 2
# --comm-stats under ZeRO-3: the reduce-scatter's bytes are the formula's, the all-gather's within
# its bound (every block twice per micro-batch, plus the end-of-run gather), and above half of it
mpirun -np 2 "$BIN" "${ARGS[@]}" --zero 3 --comm-stats --eval-interval -1 --save-interval -1 \
    --save-dir "$TMP/z3stats" > "$TMP/z3stats.log" 2>&1
stats=$(tr '\r' '\n' < "$TMP/z3stats.log" | sed 's/\x1b\[K//g')
rs=$(grep -a "^  dp reduce_scatter" <<< "$stats" | awk '{print $(NF-1)}')
ag=$(grep -a "^  dp all_gather" <<< "$stats" | awk '{print $(NF-1)}')
rs_formula=$(grep -a "formula dp with --zero 3" <<< "$stats" | sed 's/.*micro-batches = \([0-9.]*\) MB, all_gather.*/\1/')
ag_bound=$(grep -a "formula dp with --zero 3" <<< "$stats" | sed 's/.*steps = \([0-9.]*\) MB.*/\1/')
if [ -n "$rs" ] && [ -n "$ag" ] && [ "$rs" = "$rs_formula" ] &&
    awk -v a="$ag" -v b="$ag_bound" 'BEGIN {exit !(a <= b && a > b / 2)}'; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAILED: ZeRO-3 --comm-stats: reduce_scatter '$rs' MB (formula '$rs_formula'), all_gather '$ag' MB (bound '$ag_bound')" >&2
    grep -a -A10 "^communication per" <<< "$stats" >&2
fi
# a tp that does not divide the heads fails before any work, on every rank, with exit 1
mpirun -np 3 "$BIN" "${ARGS[@]}" --tp 3 --save-dir "$TMP/bad" > "$TMP/bad.log" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -q "tp 3 does not divide the model's n_head 4" "$TMP/bad.log" && ! grep -q "^data:" "$TMP/bad.log"; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAILED: --tp 3 with 4 heads (exit $rc):" >&2; cat "$TMP/bad.log" >&2
fi
echo "test_mpi_parallel: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
