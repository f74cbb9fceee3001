#!/usr/bin/env bash
# gpt2-finetune under mpirun takes the single process's steps (losses, gradient norms, validation
# loss and perplexity) at dp=2, tp=2 and dp=2 x tp=2 (also with ZeRO-3), and generates its greedy
# --generate text. Dropout is off and every run starts from the same exported weights. dp's
# partial sums and tp's pieces add in another order than one process, so each step is compared
# from the same weights within the tolerance (tests/mpi_compare.sh says why): step 1 from the
# exported weights, each later step as one process takes it from the layout's checkpoint of the
# step before; the layout's text after its last step is that resumed one process's (both generate
# from weights one step past the same checkpoint).
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
METRICS='loss\|grad_norm\|perplexity'
. "$SRC/tests/mpi_compare.sh"
COMMON=(--block-size 32 --threads 1 --no-cache)
"$BIN" "$TMP/train.txt" --arch "$TMP/arch.json" "${COMMON[@]}" --save-interval -1 --epochs 0 --eval-interval -1 \
    --save-dir "$TMP/init" > "$TMP/init.log" 2>&1 || { echo "FAILED: export"; tail -5 "$TMP/init.log"; exit 1; }
ARGS=("$TMP/train.txt" --model "$TMP/init/hf" "${COMMON[@]}" --batch-size 4 --grad-accum 2 --max-steps 3
      --log-interval 1 --lr 1e-3 --generate "A man in" --max-new-tokens 5 "${SAVE_EVERY_STEP[@]}")

run one 1 "${ARGS[@]}" || { echo "FAILED: one process"; exit 1; }
[ "$(grep -o "\"\($METRICS\)\":" "$TMP/one/metrics.jsonl" | wc -l)" -ge 8 ] ||
    { echo "FAILED: expected 3 x 2 training and 2 eval numbers"; cat "$TMP/one/metrics.jsonl"; exit 1; }
for layout in "2 1" "2 2" "4 2" "2 1 3" "4 2 3"; do # ranks tp [ZeRO stage]
    set -- $layout
    name="np$1_tp$2${3:+_zero$3}"
    run "$name" "$1" "${ARGS[@]}" --tp "$2" --zero "${3:-0}" || { fail=$((fail + 1)); continue; }
    check "np $1 tp $2${3:+ ZeRO-$3}" one "$name"
    # the text the last step's weights generate (a log's last line): the one process resumed from
    # the step before's
    from="one@$name-$(last_step "$name")"
    if grep -q "^generated" "$TMP/$from.log" && grep -qxF "$(tail -n 1 "$TMP/$from.log")" "$TMP/$name.log"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAILED: $name's generated text differs from $from's:" >&2
        tail -n 1 "$TMP/$from.log" >&2
        grep -A1 "^generated" "$TMP/$name.log" >&2
    fi
done
echo "test_mpi_gpt2_finetune: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
