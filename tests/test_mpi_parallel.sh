#!/usr/bin/env bash
# Data parallelism under mpirun: gpt2-classify at dp=2 and dp=4 (--batch-size is the global
# batch, each rank takes a slice) must give the single-process losses, gradient norms and dev
# metrics. Dropout is off: its masks are drawn per rank-local element, as in PyTorch DDP.
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/gpt2-classify"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
pass=0
fail=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
command -v mpirun > /dev/null || { echo "test_mpi_dp: skipped: no mpirun"; exit 77; }
ldd "$BIN" | grep -q libmpi || { echo "test_mpi_dp: skipped: built without MPI"; exit 77; }
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cat > "$TMP/arch.json" <<JSON
{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 16, "n_layer": 1, "n_head": 2,
 "embd_pdrop": 0, "resid_pdrop": 0, "attn_pdrop": 0}
JSON
mkdir -p "$TMP/data"
head -n 65 "$SRC/assets/glue-mrpc/train.tsv" > "$TMP/data/train.tsv"
head -n 33 "$SRC/assets/glue-mrpc/dev.tsv" > "$TMP/data/dev.tsv"
ARGS=(--arch "$TMP/arch.json" --data-dir "$TMP/data" --max-len 48 --batch-size 8 --grad-accum 2 --max-steps 5
      --log-interval 1 --threads 1 --save-interval -1)

run() { # name, ranks
    if [ "$2" -eq 1 ]; then
        "$BIN" "${ARGS[@]}" --save-dir "$TMP/$1" > "$TMP/$1.log" 2>&1
    else
        mpirun -np "$2" "$BIN" "${ARGS[@]}" --save-dir "$TMP/$1" > "$TMP/$1.log" 2>&1
    fi
}
# loss and grad_norm of each step, and the dev metrics, from metrics.jsonl
numbers() { grep -o '"\(loss\|grad_norm\|accuracy\|f1\)":[-0-9.e]*' "$TMP/$1/metrics.jsonl" | cut -d: -f2; }

run one 1 || { echo "FAILED: single-process run"; cat "$TMP/one.log"; exit 1; }
# 5 steps x (loss, grad_norm) + at least one eval (loss, accuracy, f1)
[ "$(numbers one | wc -l)" -ge 13 ] || { echo "FAILED: expected at least 13 numbers in metrics.jsonl"; numbers one; exit 1; }
for n in 2 4; do
    if ! run "dp$n" "$n"; then
        fail=$((fail + 1)); echo "FAILED: dp=$n run" >&2; tail -5 "$TMP/dp$n.log" >&2; continue
    fi
    if paste <(numbers one) <(numbers "dp$n") | awk '{d=$1-$2; if (d<0) d=-d; if (d > 1e-5 + 1e-4*($1<0?-$1:$1)) bad=1} END {exit bad}' \
        && [ "$(numbers one | wc -l)" -eq "$(numbers "dp$n" | wc -l)" ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAILED: dp=$n differs from one process:" >&2
        paste <(numbers one) <(numbers "dp$n") >&2
    fi
done
echo "test_mpi_dp: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
