#!/usr/bin/env bash
# glm-finetune end to end: COPA (answers scored by log-probability) from scratch with evaluation,
# checkpoint, resume and the export, which loads back as --model with the same validation
# numbers; RTE (single-token cloze with the English GLM tokenizer) on a slice; seq2seq with
# generation and ROUGE; and the bad inputs docs/glm-finetune.md promises one-line errors for.
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/glm-finetune"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
. "$SRC/tests/fixtures.sh"
need_fixture "$ASSETS/glm-en-wordpiece/vocab.txt" "$FIXTURES/superglue-rte/train.jsonl" \
    "$FIXTURES/superglue-rte/val.jsonl" "$FIXTURES/superglue-wsc/train.jsonl" "$FIXTURES/superglue-wsc/val.jsonl"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
[ -x "$BIN" ] || { echo "test_cli_glm: $BIN not built"; exit 1; }
BIN_DIR=$(dirname "$BIN")
. "$SRC/tests/cli_lib.sh" # pass and fail, ok, bad, expect_fail NAME RC PATTERN PROGRAM ARGS...
# glm_fail NAME RC PATTERN ARGS...: cli_lib's expect_fail for glm-finetune (one stderr line, exit RC)
glm_fail() {
    local name=$1 rc=$2 pattern=$3
    shift 3
    expect_fail "$name" "$rc" "$pattern" glm-finetune "$@"
}
COMMON=(--threads 2 --batch-size 8 --log-interval 2)

# COPA from scratch on the shipped copy: train, evaluate, checkpoint, export
"$BIN" --task copa "${COMMON[@]}" --max-steps 4 --save-dir "$TMP/copa" > "$TMP/out" 2> "$TMP/err" && ok || bad "copa run"
grep -q "validation results (copa, 100 examples, step 4): loss [0-9.]* accuracy [0-9.]*" "$TMP/out" && ok ||
    bad "copa: no validation line"
grep -q '"type":"eval".*"accuracy"' "$TMP/copa/metrics.jsonl" && ok || bad "copa: metrics.jsonl lacks the eval line"
copa_result=$(grep "validation results" "$TMP/out")
copa_losses=$(grep -o "^step [0-9/]* | epoch [0-9.]* | loss [0-9.]*" "$TMP/out")
copa_act=$(grep -o "activations and buffers [0-9.]*" "$TMP/out" | grep -o "[0-9.]*$")
# activation checkpointing: the same losses and validation numbers, less activation memory
"$BIN" --task copa "${COMMON[@]}" --max-steps 4 --checkpoint-activations --save-dir "$TMP/copa-ckpt" > "$TMP/out" \
    2> "$TMP/err" && ok || bad "copa run with --checkpoint-activations"
[ -n "$copa_result" ] && [ "$(grep "validation results" "$TMP/out")" = "$copa_result" ] &&
    [ "$(grep -o "^step [0-9/]* | epoch [0-9.]* | loss [0-9.]*" "$TMP/out")" = "$copa_losses" ] && ok ||
    bad "copa: --checkpoint-activations changed the numbers"
ckpt_act=$(grep -o "activations and buffers [0-9.]*" "$TMP/out" | grep -o "[0-9.]*$")
awk -v a="$ckpt_act" -v b="$copa_act" 'BEGIN { exit !(a + 0 < b + 0) }' && ok ||
    bad "copa: --checkpoint-activations uses $ckpt_act MiB of activations, $copa_act MiB without"
for f in config.json pytorch_model.bin vocab.txt tokenizer_config.json; do
    [ -f "$TMP/copa/hf/$f" ] && ok || bad "copa: the export lacks $f"
done
# resume continues from step 4
"$BIN" --task copa "${COMMON[@]}" --max-steps 6 --save-dir "$TMP/copa" --resume > "$TMP/out" 2> "$TMP/err" && ok ||
    bad "copa resume"
grep -q "resumed from .*step.*4" "$TMP/out" && grep -q "step 6)" "$TMP/out" && ok || bad "copa: resume did not go 4 -> 6"
# the export is a --model: evaluating it gives the numbers the run ended with
want=$(grep -o "accuracy [0-9.]*" "$TMP/out" | tail -1)
"$BIN" --task copa "${COMMON[@]}" --model "$TMP/copa/hf" --epochs 0 --save-dir "$TMP/copa-eval" > "$TMP/out" 2> "$TMP/err" &&
    ok || bad "copa: evaluating the export"
got=$(grep -o "accuracy [0-9.]*" "$TMP/out" | tail -1)
[ -n "$want" ] && [ "$got" = "$want" ] && ok || bad "copa: the export evaluates to '$got', the run ended at '$want'"

# RTE: single-token cloze needs one-token verbalizers, which the English GLM tokenizer has
mkdir -p "$TMP/rte"
head -n 48 "$FIXTURES/superglue-rte/train.jsonl" > "$TMP/rte/train.jsonl"
head -n 24 "$FIXTURES/superglue-rte/val.jsonl" > "$TMP/rte/val.jsonl"
"$BIN" --task rte --data-dir "$TMP/rte" "${COMMON[@]}" --max-steps 2 \
    --max-len 128 --save-dir "$TMP/rte-run" > "$TMP/out" 2> "$TMP/err" && ok || bad "rte run"
grep -q "validation results (rte, 24 examples, step 2): loss [0-9.]* accuracy" "$TMP/out" && ok || bad "rte: no validation line"

# WSC: span1 in the blank, trained on the true examples only, judged by argmax match
mkdir -p "$TMP/wsc"
head -n 48 "$FIXTURES/superglue-wsc/train.jsonl" > "$TMP/wsc/train.jsonl"
head -n 24 "$FIXTURES/superglue-wsc/val.jsonl" > "$TMP/wsc/val.jsonl"
n_true=$(grep -c '"label": true' "$TMP/wsc/train.jsonl")
"$BIN" --task wsc --data-dir "$TMP/wsc" "${COMMON[@]}" --max-steps 2 \
    --max-len 128 --save-dir "$TMP/wsc-run" > "$TMP/out" 2> "$TMP/err" && ok || bad "wsc run"
grep -q "data: wsc train $n_true, val 24 examples" "$TMP/out" && ok || bad "wsc: training is not the $n_true true examples"
grep -q "validation results (wsc, 24 examples, step 2): loss [0-9.]* accuracy" "$TMP/out" && ok || bad "wsc: no validation line"

# seq2seq: [CLS] source [gMASK], the target generated in the blank
head -n 40 "$SRC/assets/multi30k-en-de/val.en" > "$TMP/s.txt"
head -n 40 "$SRC/assets/multi30k-en-de/val.de" > "$TMP/t.txt"
"$BIN" --task seq2seq "$TMP/s.txt" "$TMP/t.txt" "${COMMON[@]}" --max-steps 2 --max-target-len 16 \
    --save-dir "$TMP/s2s" > "$TMP/out" 2> "$TMP/err" && ok || bad "seq2seq run"
grep -q "validation results (seq2seq, 8 examples, step 2): loss [0-9.]* rouge1 [0-9.]* rouge2 [0-9.]* rougeL" "$TMP/out" &&
    ok || bad "seq2seq: no validation line with ROUGE"
[ "$(wc -l < "$TMP/s2s/val_predictions.txt" 2> /dev/null)" = "8" ] && ok || bad "seq2seq: val_predictions.txt should have 8 lines"
# beam search with 2 beams over a batch of 8 rows decodes 16 rows, more than the batch the model
# was laid out for (it once stopped on the stack's row check): the text a batch of 16 gives
for b in 8 16; do
    "$BIN" --task seq2seq "$TMP/s.txt" "$TMP/t.txt" "${COMMON[@]}" --model "$TMP/s2s/hf" --epochs 0 --max-steps 0 \
        --max-target-len 16 --num-beams 2 --batch-size $b --save-dir "$TMP/beam$b" > "$TMP/out" 2> "$TMP/err" ||
        bad "seq2seq beams 2, batch $b"
done
[ -s "$TMP/beam8/val_predictions.txt" ] && cmp -s "$TMP/beam8/val_predictions.txt" "$TMP/beam16/val_predictions.txt" &&
    ok || bad "seq2seq beams 2: batch 8's text differs from batch 16's"

# bad inputs
mkdir -p "$TMP/badjson"
head -n 8 "$SRC/assets/superglue-copa/train.jsonl" > "$TMP/badjson/train.jsonl"
echo '[1, 2, 3]' >> "$TMP/badjson/train.jsonl"
cp "$SRC/assets/superglue-copa/val.jsonl" "$TMP/badjson/"
glm_fail "a JSONL line that is not an object" 1 "train.jsonl:9" --task copa --data-dir "$TMP/badjson" --save-dir "$TMP/x1"
mkdir -p "$TMP/badlabel"
sed '3s/"label": [01]/"label": 7/' "$SRC/assets/superglue-copa/train.jsonl" > "$TMP/badlabel/train.jsonl"
cp "$SRC/assets/superglue-copa/val.jsonl" "$TMP/badlabel/"
glm_fail "a label not in the task's set" 1 "train.jsonl:3" --task copa --data-dir "$TMP/badlabel" --save-dir "$TMP/x2"
glm_fail "a GLM smaller than the tokenizer" 1 "vocab_size 128 is smaller" --task copa \
    --model "$SRC/tests/golden/glm-tiny" --save-dir "$TMP/x4"
glm_fail "an unknown task" 2 "task" --task mnli
glm_fail "a checkpoint group without checkpointing" 2 "needs --checkpoint-activations" --task copa \
    --checkpoint-num-layers 2
glm_fail "rte without --data-dir" 2 "needs --data-dir" --task rte
glm_fail "seq2seq without files" 2 "SRC TGT" --task seq2seq
"$BIN" --help | grep -q "blank infilling" && ok || bad "--help describes the program"

echo "test_cli_glm: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
