#!/usr/bin/env bash
# glm-finetune with pipeline stages (--pp) under mpirun, dropout on, from the same random init:
# for each head GLM trains (COPA: answers scored by log-probability; CB: verbalizer tokens at
# [MASK]; WSC: the language-model loss on the span, evaluated by the argmax check; seq2seq: the
# language-model loss on the target), pp 2 takes the single process's steps (losses, gradient
# norms, validation numbers), and COPA also pp 4; COPA at dp 2 x pp 2 (also with ZeRO-1 and
# ZeRO-3, where the tied copies sum their gradient pieces) takes dp 2's and at tp 2 x pp 2 tp 2's
# (dp draws other dropout masks than one process, tp another init). word_embeddings and the output
# layer's copy of it on the last stage add their gradients in another order than one process, so
# each step is compared from the same weights within the tolerance (tests/mpi_compare.sh says
# why), the reference resuming from the stages' checkpoint of the step before. pp 2's export
# holds every stage's tensors: one process evaluating it gets pp 2's last validation numbers;
# pp 2's checkpoint resumes at tp 2 and takes pp 2's next step.
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/glm-finetune"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
pass=0
fail=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
command -v mpirun > /dev/null || { echo "FAILED: test_mpi_glm_pipeline: no mpirun (scripts/setup.sh installs OpenMPI)" >&2; exit 1; }
ldd "$BIN" | grep -q libmpi || { echo "FAILED: test_mpi_glm_pipeline: the programs were built without MPI" >&2; exit 1; }
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cat > "$TMP/arch.json" <<JSON
{"vocab_size": 30526, "hidden_size": 32, "num_layers": 4, "num_attention_heads": 4, "max_sequence_length": 128,
 "embedding_dropout_prob": 0.1, "attention_dropout_prob": 0.1, "output_dropout_prob": 0.1}
JSON
for task in copa cb wsc; do
    mkdir -p "$TMP/$task"
    from="$SRC/tests/data/superglue-$task"
    [ "$task" = copa ] && from="$SRC/assets/superglue-copa"
    head -n 48 "$from/train.jsonl" > "$TMP/$task/train.jsonl"
    head -n 12 "$from/val.jsonl" > "$TMP/$task/val.jsonl"
done
head -n 40 "$SRC/assets/multi30k-en-de/val.en" > "$TMP/s.en"
head -n 40 "$SRC/assets/multi30k-en-de/val.de" > "$TMP/s.de"
. "$SRC/tests/mpi_compare.sh"
COMMON=(--threads 1 --max-len 64 --max-target-len 12 --batch-size 8 --micro-batches 4
        --max-steps 5 --log-interval 1 --lr 1e-3 --no-cache "${SAVE_EVERY_STEP[@]}")

for task in copa cb wsc seq2seq; do
    DATA=(--task "$task" --data-dir "$TMP/$task")
    [ "$task" = seq2seq ] && DATA=(--task seq2seq "$TMP/s.en" "$TMP/s.de" --eval-generate=false)
    DATA+=("${COMMON[@]}")
    run "$task-one" 1 "${DATA[@]}" --arch "$TMP/arch.json" || { fail=$((fail + 1)); continue; }
    layouts=("pp2 2 --pp 2")
    [ "$task" = copa ] && layouts+=("pp4 4 --pp 4" "dp2 2" "dp2pp2 4 --pp 2" "dp2pp2z1 4 --pp 2 --zero 1"
                                    "dp2pp2z3 4 --pp 2 --zero 3" "tp2 2 --tp 2" "tp2pp2 4 --tp 2 --pp 2")
    for layout in "${layouts[@]}"; do
        set -- $layout
        name="$task-$1" np=$2
        shift 2
        run "$name" "$np" "${DATA[@]}" --arch "$TMP/arch.json" "$@" || { fail=$((fail + 1)); continue; }
        ref=$(reference_of "$task" "${name#"$task"-}")
        [ -n "$ref" ] && check "$task at $name" "$ref" "$name"
    done
    check_export "$task" "${DATA[@]}"
done

check_resume_tp2 copa --task copa --data-dir "$TMP/copa" "${COMMON[@]}" --arch "$TMP/arch.json"

echo "test_mpi_glm_pipeline: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
