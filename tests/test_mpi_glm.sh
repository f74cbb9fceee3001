#!/usr/bin/env bash
# glm-finetune under mpirun takes the single process's steps (losses, gradient norms and
# validation numbers) at dp=2, tp=2 and dp=2 x tp=2, also with ZeRO-3, and with ZeRO-3 at dp=2 x
# tp=2 with LoRA on every linear (against one process with the same adapters): COPA (answers scored by
# log-probability: vocab-parallel cross-entropy and the weighted backward) and seq2seq (with
# beam-search text, compared too). Dropout is off and every run starts from the same exported
# weights. dp's partial sums and tp's pieces add in another order than one process, so each step
# is compared from the same weights within the tolerance (tests/mpi_compare.sh says why): step 1
# from the exported weights, each later step as one process takes it from the layout's checkpoint
# of the step before; the layout's beam-search text after its last step is that resumed one
# process's (both generate from weights one step past the same checkpoint).
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/glm-finetune"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
pass=0
fail=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
command -v mpirun > /dev/null || { echo "FAILED: test_mpi_glm: no mpirun (scripts/setup.sh installs OpenMPI)" >&2; exit 1; }
ldd "$BIN" | grep -q libmpi || { echo "FAILED: test_mpi_glm: the programs were built without MPI" >&2; exit 1; }
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cat > "$TMP/arch.json" <<JSON
{"vocab_size": 30526, "hidden_size": 32, "num_layers": 1, "num_attention_heads": 4, "max_sequence_length": 128,
 "embedding_dropout_prob": 0.0, "attention_dropout_prob": 0.0, "output_dropout_prob": 0.0}
JSON
mkdir -p "$TMP/copa"
head -n 24 "$SRC/assets/superglue-copa/train.jsonl" > "$TMP/copa/train.jsonl"
head -n 10 "$SRC/assets/superglue-copa/val.jsonl" > "$TMP/copa/val.jsonl"
# seq2seq trains on 48 pairs (an epoch is the 3 steps) and validates on 4, so every run, and every
# run `check` resumes, evaluates and generates once, at its last step: a process's beam-search text
# has been seen to depend on how many evaluations it ran before (same weights, same loss).
for l in en de; do
    head -n 52 "$SRC/assets/multi30k-en-de/val.$l" | sed 17,20d > "$TMP/s.$l"
    sed -n 17,20p "$SRC/assets/multi30k-en-de/val.$l" > "$TMP/v.$l"
done
METRICS='loss\|grad_norm\|accuracy\|rouge1\|rouge2\|rougeL'
. "$SRC/tests/mpi_compare.sh"
COMMON=(--threads 1 --max-len 64 --max-target-len 12)

for task in copa seq2seq; do
    DATA=(--task seq2seq "$TMP/s.en" "$TMP/s.de" --val-src "$TMP/v.en" --val-tgt "$TMP/v.de" --num-beams 2)
    [ "$task" = copa ] && DATA=(--task copa --data-dir "$TMP/copa")
    "$BIN" "${DATA[@]}" --arch "$TMP/arch.json" "${COMMON[@]}" --save-interval -1 --epochs 0 --eval-interval -1 \
        --save-dir "$TMP/$task-init" > "$TMP/$task-init.log" 2>&1 ||
        { echo "FAILED: $task export"; tail -5 "$TMP/$task-init.log"; exit 1; }
    ARGS=("${DATA[@]}" --model "$TMP/$task-init/hf" "${COMMON[@]}" --batch-size 8 --grad-accum 2 --max-steps 3
          --log-interval 1 --lr 1e-3 "${SAVE_EVERY_STEP[@]}")
    run "$task-one" 1 "${ARGS[@]}" || { echo "FAILED: $task one process"; exit 1; }
    [ "$(grep -o "\"\($METRICS\)\":" "$TMP/$task-one/metrics.jsonl" | wc -l)" -ge 8 ] ||
        { echo "FAILED: $task: expected 3 x 2 training and eval numbers"; exit 1; }
    # LoRA on every linear (the base frozen; ZeRO-3 shards it too) against one process with LoRA, from
    # the adapters one process wrote after a step (B not zero; a fresh A is drawn per tp shard)
    run "$task-first-lora" 1 "${ARGS[@]}" --lora-r 4 --lora-targets query_key_value,dense,dense_h_to_4h,dense_4h_to_h --max-steps 1 --lr 1e-2 \
        --save-lora "$TMP/$task-adapter" || { echo "FAILED: the first adapters"; exit 1; }
    LORA=(--lora-from "$TMP/$task-adapter")
    run "$task-one-lora" 1 "${ARGS[@]}" "${LORA[@]}" || { echo "FAILED: one process with LoRA"; exit 1; }
    for layout in "2 1" "2 2" "4 2" "2 1 3" "4 2 3" "4 2 3 lora"; do # ranks tp [ZeRO stage [LoRA]]
        set -- $layout
        name="$task-np$1_tp$2${3:+_zero$3}${4:+_lora}"
        ref=$task-one${4:+-lora}
        extra=()
        [ -n "${4:-}" ] && extra=("${LORA[@]}")
        run "$name" "$1" "${ARGS[@]}" "${extra[@]}" --tp "$2" --zero "${3:-0}" || { fail=$((fail + 1)); continue; }
        check "$task at np $1 tp $2${3:+ ZeRO-$3}${4:+ LoRA}" "$ref" "$name"
        [ "$task" = copa ] && continue
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
done
echo "test_mpi_glm: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
