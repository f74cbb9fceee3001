#!/usr/bin/env bash
# gpt2-classify under mpirun must give the single-process losses, gradient norms and dev
# metrics at dp=2, dp=4, tp=2, tp=4, dp=2 x tp=2, and with ZeRO-1/2/3, optimizer offload,
# ZeRO-3's parameter offload and ZeRO-3 with activation checkpointing (--batch-size is the global batch, each dp
# rank takes a slice; tp ranks shard the same HF weights). Dropout is off: its masks are drawn
# per rank-local batch element, as in PyTorch DDP. A checkpoint saved at tp=2 resumes at tp=1,
# tp=2 and tp=4, and one saved at dp=2 under ZeRO-3 at pp=2 and tp=2, and they continue as the
# single process does; ZeRO-3's --comm-stats bytes agree with their formula.
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
ARGS=(--model "$TMP/model" --data-dir "$TMP/data" --max-len 48 --batch-size 8 --grad-accum 2 --max-steps 5
      --log-interval 1 --threads 1 --save-interval -1)

run() { # name, ranks, tp, [zero stage], [offload|offload-params|checkpoint]
    local extra=(--zero "${4:-0}")
    [ "${5:-}" = offload ] && extra+=(--offload-optimizer)
    [ "${5:-}" = offload-params ] && extra+=(--offload-params)
    [ "${5:-}" = checkpoint ] && extra+=(--checkpoint-activations)
    if [ "$2" -eq 1 ]; then
        "$BIN" "${ARGS[@]}" --save-dir "$TMP/$1" > "$TMP/$1.log" 2>&1
    else
        mpirun -np "$2" "$BIN" "${ARGS[@]}" --tp "$3" "${extra[@]}" --save-dir "$TMP/$1" > "$TMP/$1.log" 2>&1
    fi
}
# loss and grad_norm of each step, and the dev metrics, from metrics.jsonl
numbers() { grep -o '"\(loss\|grad_norm\|accuracy\|f1\)":[-0-9.e]*' "$TMP/$1/metrics.jsonl" | cut -d: -f2; }

run one 1 || { echo "FAILED: single-process run"; cat "$TMP/one.log"; exit 1; }
# 5 steps x (loss, grad_norm) + at least one eval (loss, accuracy, f1)
[ "$(numbers one | wc -l)" -ge 13 ] || { echo "FAILED: expected at least 13 numbers in metrics.jsonl"; numbers one; exit 1; }
# ZeRO layouts (third field: stage, fourth: optimizer offload) must match one process as well
for layout in "2 1" "4 1" "2 2" "4 4" "4 2" "2 1 1" "4 1 2" "4 2 1" "3 1 2 offload" "2 1 3" "4 2 3" \
    "3 1 3 offload-params" "2 1 3 checkpoint"; do # ranks tp [zero] [offload|checkpoint]
    set -- $layout
    name="np$1_tp$2_zero${3:-0}${4:+_$4}"
    if ! run "$name" "$1" "$2" "${3:-0}" "${4:-}"; then
        fail=$((fail + 1)); echo "FAILED: $name run" >&2; tail -5 "$TMP/$name.log" >&2; continue
    fi
    if paste <(numbers one) <(numbers "$name") | awk '{d=$1-$2; if (d<0) d=-d; if (d > 1e-5 + 1e-4*($1<0?-$1:$1)) bad=1} END {exit bad}' \
        && [ "$(numbers one | wc -l)" -eq "$(numbers "$name" | wc -l)" ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAILED: $name differs from one process:" >&2
        paste <(numbers one) <(numbers "$name") >&2
    fi
done
# without ZeRO the dp all-reduce overlaps the backward: the runs above matched one process with it
if grep -q "buckets of [0-9]* floats, each started as the backward finishes it" "$TMP/np2_tp1_zero0.log"; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAILED: np2_tp1_zero0 did not overlap its gradient all-reduce:" >&2
    grep "gradients:" "$TMP/np2_tp1_zero0.log" >&2
fi
# checkpoints hold full tensors: save at tp=2 (step 3), resume at tp=1, 2 and 4; steps 4-5 and the
# dev metrics must be the single process's (its numbers after step 3's loss and grad_norm)
if mpirun -np 2 "$BIN" "${ARGS[@]}" --save-interval 3 --tp 2 --save-dir "$TMP/ck" \
    > "$TMP/ck.log" 2>&1 && [ -f "$TMP/ck/step-000003.tzck" ]; then
    for tp in 1 2 4; do
        name="resume_tp$tp"
        mkdir -p "$TMP/$name" && cp "$TMP/ck/step-000003.tzck" "$TMP/$name/"
        if [ "$tp" -eq 1 ]; then
            "$BIN" "${ARGS[@]}" --resume --save-dir "$TMP/$name" > "$TMP/$name.log" 2>&1
        else
            mpirun -np "$tp" "$BIN" "${ARGS[@]}" --tp "$tp" --resume --save-dir "$TMP/$name" > "$TMP/$name.log" 2>&1
        fi || { fail=$((fail + 1)); echo "FAILED: $name run" >&2; tail -5 "$TMP/$name.log" >&2; continue; }
        if paste <(numbers one | tail -n +7) <(numbers "$name") | awk '{d=$1-$2; if (d<0) d=-d; if (d > 1e-5 + 1e-4*($1<0?-$1:$1)) bad=1} END {exit bad}' \
            && [ "$(numbers one | tail -n +7 | wc -l)" -eq "$(numbers "$name" | wc -l)" ] \
            && grep -q "resumed from .*step-000003.tzck (step 3)" "$TMP/$name.log"; then
            pass=$((pass + 1))
        else
            fail=$((fail + 1)); echo "FAILED: $name differs from one process:" >&2
            paste <(numbers one | tail -n +7) <(numbers "$name") >&2
        fi
    done
else
    fail=$((fail + 1)); echo "FAILED: save at tp=2" >&2; tail -5 "$TMP/ck.log" >&2
fi
# a ZeRO-3 checkpoint (dp 2, step 3) holds full tensors too: it resumes at pp 2 and at tp 2 and
# continues as one process does
if mpirun -np 2 "$BIN" "${ARGS[@]}" --save-interval 3 --zero 3 --save-dir "$TMP/z3ck" > "$TMP/z3ck.log" 2>&1 &&
    [ -f "$TMP/z3ck/step-000003.tzck" ]; then
    for layout in "--pp 2" "--tp 2"; do
        name="z3resume_${layout// /}"
        mkdir -p "$TMP/$name" && cp "$TMP/z3ck/step-000003.tzck" "$TMP/$name/"
        if mpirun -np 2 "$BIN" "${ARGS[@]}" $layout --resume --save-dir "$TMP/$name" > "$TMP/$name.log" 2>&1 &&
            paste <(numbers one | tail -n +7) <(numbers "$name") |
                awk '{d=$1-$2; if (d<0) d=-d; if (d > 1e-5 + 1e-4*($1<0?-$1:$1)) bad=1} END {exit bad}' &&
            [ "$(numbers one | tail -n +7 | wc -l)" -eq "$(numbers "$name" | wc -l)" ]; then
            pass=$((pass + 1))
        else
            fail=$((fail + 1)); echo "FAILED: $name differs from one process:" >&2; tail -3 "$TMP/$name.log" >&2
            paste <(numbers one | tail -n +7) <(numbers "$name") >&2
        fi
    done
else
    fail=$((fail + 1)); echo "FAILED: save at ZeRO-3" >&2; tail -5 "$TMP/z3ck.log" >&2
fi
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
