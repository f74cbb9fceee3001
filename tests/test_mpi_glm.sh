#!/usr/bin/env bash
# glm-finetune under mpirun gives the single-process losses, gradient norms and validation
# numbers at dp=2, tp=2 and dp=2 x tp=2, also with ZeRO-3: COPA (answers scored by log-probability: vocab-parallel
# cross-entropy and the weighted backward) and seq2seq (with beam-search text, compared too).
# Dropout is off and every run starts from the same exported weights.
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
head -n 20 "$SRC/assets/multi30k-en-de/val.en" > "$TMP/s.en"
head -n 20 "$SRC/assets/multi30k-en-de/val.de" > "$TMP/s.de"
COMMON=(--threads 1 --save-interval -1 --max-len 64 --max-target-len 12)
numbers() { grep -o '"\(loss\|grad_norm\|accuracy\|rouge1\|rouge2\|rougeL\)":[-0-9.e]*' "$TMP/$1/metrics.jsonl" | cut -d: -f2; }

for task in copa seq2seq; do
    DATA=(--task seq2seq "$TMP/s.en" "$TMP/s.de" --num-beams 2)
    [ "$task" = copa ] && DATA=(--task copa --data-dir "$TMP/copa")
    "$BIN" "${DATA[@]}" --arch "$TMP/arch.json" "${COMMON[@]}" --epochs 0 --eval-interval -1 --save-dir "$TMP/$task-init" \
        > "$TMP/$task-init.log" 2>&1 || { echo "FAILED: $task export"; tail -5 "$TMP/$task-init.log"; exit 1; }
    ARGS=("${DATA[@]}" --model "$TMP/$task-init/hf" "${COMMON[@]}" --batch-size 8 --grad-accum 2 --max-steps 3
          --log-interval 1 --lr 1e-3)
    "$BIN" "${ARGS[@]}" --save-dir "$TMP/$task-one" > "$TMP/$task-one.log" 2>&1 ||
        { echo "FAILED: $task one process"; tail -5 "$TMP/$task-one.log"; exit 1; }
    [ "$(numbers "$task-one" | wc -l)" -ge 8 ] || { echo "FAILED: $task: expected 3 x 2 training and eval numbers"; exit 1; }
    for layout in "2 1" "2 2" "4 2" "2 1 3" "4 2 3"; do # ranks tp [ZeRO stage]
        set -- $layout
        name="$task-np$1_tp$2${3:+_zero$3}"
        if ! mpirun -np "$1" "$BIN" "${ARGS[@]}" --tp "$2" --zero "${3:-0}" --save-dir "$TMP/$name" > "$TMP/$name.log" 2>&1; then
            fail=$((fail + 1)); echo "FAILED: $name run" >&2; tail -5 "$TMP/$name.log" >&2; continue
        fi
        if paste <(numbers "$task-one") <(numbers "$name") |
                awk '{d=$1-$2; if (d<0) d=-d; if (d > 1e-5 + 1e-4*($1<0?-$1:$1)) bad=1} END {exit bad}' &&
            [ "$(numbers "$task-one" | wc -l)" -eq "$(numbers "$name" | wc -l)" ] &&
            { [ "$task" = copa ] || cmp -s "$TMP/$task-one/val_predictions.txt" "$TMP/$name/val_predictions.txt"; }; then
            pass=$((pass + 1))
        else
            fail=$((fail + 1)); echo "FAILED: $name differs from one process:" >&2
            paste <(numbers "$task-one") <(numbers "$name") >&2
        fi
    done
done
echo "test_mpi_glm: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
