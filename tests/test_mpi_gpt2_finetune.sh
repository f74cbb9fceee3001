#!/usr/bin/env bash
# gpt2-finetune under mpirun gives the single-process losses, gradient norms and validation loss
# and perplexity at dp=2, tp=2 and dp=2 x tp=2 (also with ZeRO-3), and the same greedy --generate text. Dropout is
# off and every run starts from the same exported weights.
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/gpt2-finetune"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
pass=0
fail=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
command -v mpirun > /dev/null || { echo "FAILED: test_mpi_gpt2_finetune: no mpirun (scripts/setup.sh installs OpenMPI)" >&2; exit 1; }
ldd "$BIN" | grep -q libmpi || { echo "FAILED: test_mpi_gpt2_finetune: the programs were built without MPI" >&2; exit 1; }
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo '{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 2,
 "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}' > "$TMP/arch.json"
head -n 120 "$SRC/assets/multi30k-en-de/val.en" > "$TMP/train.txt"
COMMON=(--block-size 32 --threads 1 --save-interval -1 --no-cache)
"$BIN" "$TMP/train.txt" --arch "$TMP/arch.json" "${COMMON[@]}" --epochs 0 --eval-interval -1 --save-dir "$TMP/init" \
    > "$TMP/init.log" 2>&1 || { echo "FAILED: export"; tail -5 "$TMP/init.log"; exit 1; }
ARGS=("$TMP/train.txt" --model "$TMP/init/hf" "${COMMON[@]}" --batch-size 4 --grad-accum 2 --max-steps 3
      --log-interval 1 --lr 1e-3 --generate "A man in" --max-new-tokens 5)

numbers() { grep -o '"\(loss\|grad_norm\|perplexity\)":[-0-9.e]*' "$TMP/$1/metrics.jsonl" | cut -d: -f2; }
"$BIN" "${ARGS[@]}" --save-dir "$TMP/one" > "$TMP/one.log" 2>&1 || { echo "FAILED: one process"; tail -5 "$TMP/one.log"; exit 1; }
[ "$(numbers one | wc -l)" -ge 8 ] || { echo "FAILED: expected 3 x 2 training and 2 eval numbers"; numbers one; exit 1; }
tail -1 "$TMP/one.log" > "$TMP/one.txt"
for layout in "2 1" "2 2" "4 2" "2 1 3" "4 2 3"; do # ranks tp [ZeRO stage]
    set -- $layout
    name="np$1_tp$2${3:+_zero$3}"
    if ! mpirun -np "$1" "$BIN" "${ARGS[@]}" --tp "$2" --zero "${3:-0}" --save-dir "$TMP/$name" > "$TMP/$name.log" 2>&1; then
        fail=$((fail + 1)); echo "FAILED: $name run" >&2; tail -5 "$TMP/$name.log" >&2; continue
    fi
    if paste <(numbers one) <(numbers "$name") | awk '{d=$1-$2; if (d<0) d=-d; if (d > 1e-5 + 1e-4*($1<0?-$1:$1)) bad=1} END {exit bad}' \
        && [ "$(numbers one | wc -l)" -eq "$(numbers "$name" | wc -l)" ] \
        && grep -qxF "$(cat "$TMP/one.txt")" "$TMP/$name.log"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAILED: $name differs from one process:" >&2
        paste <(numbers one) <(numbers "$name") >&2
        echo "one: $(cat "$TMP/one.txt")" >&2
        grep -A1 "^generated" "$TMP/$name.log" >&2
    fi
done
echo "test_mpi_gpt2_finetune: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
