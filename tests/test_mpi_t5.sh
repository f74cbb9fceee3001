#!/usr/bin/env bash
# t5-finetune under mpirun takes the single process's steps (losses, gradient norms and validation
# numbers: loss, and BLEU/ROUGE from generation, and the generated text itself) at dp=2, tp=2 and
# dp=2 x tp=2, and with ZeRO-3 at dp=2 and dp=2 x tp=2, also with LoRA adapters on every linear
# (ZeRO-3 sharding the frozen base too, against one process with the same adapters). Dropout is off and every run starts from
# the same exported weights. dp's partial sums and tp's pieces add in another order than one
# process, so each step is compared from the same weights within the tolerance
# (tests/mpi_compare.sh says why): step 1 from the exported weights, each later step as one process
# takes it from the layout's checkpoint of the step before; the layout's text after its last step
# is that resumed one process's (both generate from weights one step past the same checkpoint).
# --comm-stats's dp all-reduce equals its formula.
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/t5-finetune"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
pass=0
fail=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
command -v mpirun > /dev/null || { echo "FAILED: test_mpi_t5: no mpirun (scripts/setup.sh installs OpenMPI)" >&2; exit 1; }
ldd "$BIN" | grep -q libmpi || { echo "FAILED: test_mpi_t5: the programs were built without MPI" >&2; exit 1; }
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cat > "$TMP/arch.json" <<JSON
{"model_type": "t5", "vocab_size": 32128, "d_model": 16, "d_kv": 4, "d_ff": 32, "num_heads": 4, "num_layers": 1,
 "num_decoder_layers": 1, "relative_attention_num_buckets": 8, "relative_attention_max_distance": 16,
 "dropout_rate": 0.0, "feed_forward_proj": "relu", "tie_word_embeddings": true}
JSON
head -n 30 "$SRC/assets/multi30k-en-de/val.en" > "$TMP/s.en"
head -n 30 "$SRC/assets/multi30k-en-de/val.de" > "$TMP/s.de"
METRICS='loss\|grad_norm\|bleu\|rouge1\|rouge2\|rougeL'
. "$SRC/tests/mpi_compare.sh"
COMMON=(--max-source-len 24 --max-target-len 16 --max-new-tokens 5 --threads 1)
"$BIN" "$TMP/s.en" "$TMP/s.de" --arch "$TMP/arch.json" "${COMMON[@]}" --save-interval -1 --epochs 0 --eval-interval -1 \
    --save-dir "$TMP/init" > "$TMP/init.log" 2>&1 || { echo "FAILED: export"; tail -5 "$TMP/init.log"; exit 1; }
ARGS=("$TMP/s.en" "$TMP/s.de" --model "$TMP/init/hf" "${COMMON[@]}" --batch-size 8 --grad-accum 2 --max-steps 3
      --log-interval 1 --lr 1e-3 "${SAVE_EVERY_STEP[@]}")

run one 1 "${ARGS[@]}" || { echo "FAILED: one process"; exit 1; }
[ "$(grep -o "\"\($METRICS\)\":" "$TMP/one/metrics.jsonl" | wc -l)" -ge 11 ] ||
    { echo "FAILED: expected 3 x 2 training and 5 eval numbers"; cat "$TMP/one/metrics.jsonl"; exit 1; }
# the generated outputs are compared too (the same text at every layout); they must say something
[ "$(tr -d ' \n' < "$TMP/one/val_predictions.txt" | wc -c)" -gt 0 ] || { echo "FAILED: empty generations"; exit 1; }
# LoRA on every linear (the base frozen; ZeRO-3 shards it too) against one process with LoRA, from
# the adapters one process wrote after a step (B not zero; a fresh A is drawn per tp shard)
run "first-lora" 1 "${ARGS[@]}" --lora-r 4 --lora-targets q,k,v,o,wi,wo --max-steps 1 --lr 1e-2 \
    --save-lora "$TMP/adapter" || { echo "FAILED: the first adapters"; exit 1; }
LORA=(--lora-from "$TMP/adapter")
run "one-lora" 1 "${ARGS[@]}" "${LORA[@]}" || { echo "FAILED: one process with LoRA"; exit 1; }
for layout in "2 1" "2 2" "4 2" "2 1 3" "4 2 3" "4 2 3 lora"; do # ranks tp [ZeRO stage [LoRA]]
    set -- $layout
    name="np$1_tp$2${3:+_zero$3}${4:+_lora}"
    ref=one${4:+-lora}
    extra=()
    [ -n "${4:-}" ] && extra=("${LORA[@]}")
    run "$name" "$1" "${ARGS[@]}" "${extra[@]}" --tp "$2" --zero "${3:-0}" || { fail=$((fail + 1)); continue; }
    check "np $1 tp $2${3:+ ZeRO-$3}${4:+ LoRA}" "$ref" "$name"
    # the text the last step's weights generate: the one process resumed from the step before's
    from="$ref@$name-$(last_step "$name")"
    if [ -s "$TMP/$name/val_predictions.txt" ] &&
        cmp -s "$TMP/$from/val_predictions.txt" "$TMP/$name/val_predictions.txt"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAILED: $name's generated text differs from $from's:" >&2
        diff "$TMP/$from/val_predictions.txt" "$TMP/$name/val_predictions.txt" | head -10 >&2
    fi
done
# --comm-stats (a shared option): dp 2's measured all-reduce is its formula, to the byte
mpirun -np 2 "$BIN" "${ARGS[@]}" --comm-stats --eval-interval -1 --save-interval -1 --save-dir "$TMP/stats" \
    > "$TMP/stats.log" 2>&1
measured=$(sed -n 's/^ *dp all_reduce .* \([0-9.]*\) MB$/\1/p' "$TMP/stats.log")
formula=$(sed -n 's/^ *formula dp all_reduce: .* = \([0-9.]*\) MB (ring.*/\1/p' "$TMP/stats.log")
if [ -n "$measured" ] && [ "$measured" = "$formula" ]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAILED: --comm-stats at dp 2: measured '$measured' MB, formula '$formula' MB" >&2
    tail -5 "$TMP/stats.log" >&2
fi
echo "test_mpi_t5: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
