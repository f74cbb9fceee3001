#!/usr/bin/env bash
# t5-finetune end to end on a tiny T5 and real Multi30k lines: training with the 80/20 split,
# evaluation with generation (loss, BLEU, ROUGE in metrics.jsonl, val_predictions.txt), the
# HF export, --predict from it (greedy and beam), resume, and the bad inputs issue 5 names
# (line counts that differ, an empty file, invalid UTF-8), each a one-line error and exit 1.
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/t5-finetune"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
[ -x "$BIN" ] || { echo "test_cli_t5: $BIN not built"; exit 1; }
BIN_DIR=$(dirname "$BIN")
. "$SRC/tests/cli_lib.sh" # pass and fail, ok, bad, expect_fail NAME RC PATTERN PROGRAM ARGS...

D="$SRC/assets/multi30k-en-de"
head -n 40 "$D/val.en" > "$TMP/s.en"
head -n 40 "$D/val.de" > "$TMP/s.de"
cat > "$TMP/tiny.json" <<JSON
{"model_type": "t5", "vocab_size": 32128, "d_model": 16, "d_kv": 4, "d_ff": 32, "num_heads": 2, "num_layers": 1,
 "num_decoder_layers": 1, "relative_attention_num_buckets": 8, "relative_attention_max_distance": 16,
 "dropout_rate": 0.1, "feed_forward_proj": "relu", "tie_word_embeddings": true}
JSON
COMMON=(--arch "$TMP/tiny.json" --max-source-len 24 --max-target-len 16 --max-new-tokens 6 --batch-size 8
        --threads 2 --lr 1e-3 --log-interval 1)

# train 4 steps; 40 lines -> 32 train, 8 held out; evaluation generates
"$BIN" "$TMP/s.en" "$TMP/s.de" "${COMMON[@]}" --max-steps 4 --save-interval 2 --save-dir "$TMP/run" \
    --source-prefix "translate English to German: " > "$TMP/out" 2> "$TMP/err"
rc=$?
[ $rc -eq 0 ] && ok || bad "train: exit $rc"
grep -q "train 32 pairs .* validation 8 pairs held out" "$TMP/out" && ok || bad "80/20 split"
grep -q "memory on cpu: [0-9.]* MiB (weights [0-9.]*, gradients [0-9.]*, AdamW state [0-9.]*, activations and buffers [0-9.]*); [0-9.]* GiB free" \
    "$TMP/out" && ok || bad "memory line"
grep -q "validation results (8 pairs, step 4): loss [0-9.]* bleu [0-9.]* rouge1 [0-9.]* rouge2 [0-9.]* rougeL [0-9.]*" \
    "$TMP/out" && ok || bad "validation line"
[ "$(wc -l < "$TMP/run/val_predictions.txt")" -eq 8 ] && ok || bad "val_predictions.txt has 8 lines"
grep -q '"bleu"' "$TMP/run/metrics.jsonl" && grep -q '"rougeL"' "$TMP/run/metrics.jsonl" && ok || bad "metrics.jsonl"
[ -f "$TMP/run/hf/config.json" ] && [ -f "$TMP/run/hf/model.safetensors" ] && [ -f "$TMP/run/hf/spiece.model" ] \
    && ok || bad "HF export"
first=$(grep -m1 '"train"' "$TMP/run/metrics.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/')
last=$(grep '"train"' "$TMP/run/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.]*\).*/\1/')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' && ok || bad "loss falls ($first -> $last)"

# --predict from the export: one line per input, greedy and beam
"$BIN" --predict "$TMP/s.en" --model "$TMP/run/hf" --max-new-tokens 6 --threads 2 --save-dir "$TMP/p" \
    --source-prefix "translate English to German: " > "$TMP/pred" 2> "$TMP/err"
[ $? -eq 0 ] && [ "$(wc -l < "$TMP/pred")" -eq 40 ] && ok || bad "--predict greedy"
"$BIN" --predict "$TMP/s.en" --model "$TMP/run/hf" --max-new-tokens 6 --num-beams 3 --threads 2 --save-dir "$TMP/p" \
    --predict-out "$TMP/pred3" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && [ "$(wc -l < "$TMP/pred3")" -eq 40 ] && ok || bad "--predict beam 3"

# resume: a copy of the 4-step run without its step-4 checkpoint, resumed from step 2, ends
# with the same step-4 loss to the last digit (the schedule, data order and dropout continue)
"$BIN" "$TMP/s.en" "$TMP/s.de" "${COMMON[@]}" --max-steps 4 --save-interval 2 --keep 5 --save-dir "$TMP/r1" \
    --eval-interval -1 > /dev/null 2> "$TMP/err"
mkdir -p "$TMP/r2" && cp "$TMP/r1/step-000002.tzck" "$TMP/r2/"
"$BIN" "$TMP/s.en" "$TMP/s.de" "${COMMON[@]}" --max-steps 4 --save-interval 2 --keep 5 --save-dir "$TMP/r2" \
    --eval-interval -1 --resume > "$TMP/out" 2> "$TMP/err"
grep -q "resumed from .*step.*2" "$TMP/out" && ok || bad "resume did not start from step 2"
l1=$(grep '"train"' "$TMP/r1/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e-]*\).*/\1/')
l2=$(grep '"train"' "$TMP/r2/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e-]*\).*/\1/')
[ -n "$l1" ] && [ "$l1" = "$l2" ] && ok || bad "resume: step-4 loss $l1 vs $l2"

# bad input
head -n 39 "$TMP/s.de" > "$TMP/short.de"
expect_fail "line counts differ" 1 "s.en has 40 lines but .*short.de has 39" t5-finetune "$TMP/s.en" "$TMP/short.de" "${COMMON[@]}" \
    --save-dir "$TMP/x"
: > "$TMP/empty.en"
expect_fail "empty file" 1 "empty.en: the file is empty" t5-finetune "$TMP/empty.en" "$TMP/s.de" "${COMMON[@]}" --save-dir "$TMP/x"
{ head -n 2 "$TMP/s.en"; printf 'bad \xff byte\n'; } > "$TMP/bad.en"
head -n 3 "$TMP/s.de" > "$TMP/three.de"
expect_fail "invalid UTF-8" 1 "bad.en:3: invalid UTF-8 at byte 5" t5-finetune "$TMP/bad.en" "$TMP/three.de" "${COMMON[@]}" \
    --save-dir "$TMP/x"
expect_fail "one positional" 2 "expected SRC TGT" t5-finetune "$TMP/s.en" "${COMMON[@]}" --save-dir "$TMP/x"
expect_fail "predict without model" 2 "--predict needs --model" t5-finetune --predict "$TMP/s.en" --save-dir "$TMP/x"
expect_fail "missing file" 1 "SRC $TMP/nope.en: cannot open" t5-finetune "$TMP/nope.en" "$TMP/s.de" "${COMMON[@]}" --save-dir "$TMP/x"
[ -s "$TMP/out" ] && bad "missing file: reported after the model was built" || ok
expect_fail "a folder" 1 "TGT $TMP: a folder, not a file to read" t5-finetune "$TMP/s.en" "$TMP" "${COMMON[@]}" --save-dir "$TMP/x"
# activation checkpointing (3+2 blocks, 2 at a time): the same losses and validation numbers,
# less activation memory
sed 's/"num_layers": 1/"num_layers": 3/; s/"num_decoder_layers": 1/"num_decoder_layers": 2/' "$TMP/tiny.json" \
    > "$TMP/deep.json"
for mode in plain ckpt; do
    flags=()
    [ "$mode" = ckpt ] && flags=(--checkpoint-activations --checkpoint-num-layers 2)
    "$BIN" "$TMP/s.en" "$TMP/s.de" "${COMMON[@]}" --arch "$TMP/deep.json" --max-steps 3 --save-dir "$TMP/$mode" \
        "${flags[@]}" > "$TMP/$mode.out" 2> "$TMP/err" && ok || bad "run ($mode)"
    grep -o "^step [0-9/]* | epoch [0-9.]* | loss [0-9.]*\|^validation results.*" "$TMP/$mode.out" > "$TMP/$mode.nums"
    grep -o "activations and buffers [0-9.]*" "$TMP/$mode.out" | grep -o "[0-9.]*$" > "$TMP/$mode.act"
done
[ -s "$TMP/plain.nums" ] && cmp -s "$TMP/plain.nums" "$TMP/ckpt.nums" && ok ||
    bad "--checkpoint-activations changed the numbers: $(diff "$TMP/plain.nums" "$TMP/ckpt.nums" | head -3)"
awk -v a="$(cat "$TMP/ckpt.act")" -v b="$(cat "$TMP/plain.act")" 'BEGIN { exit !(a + 0 < b + 0) }' && ok ||
    bad "--checkpoint-activations: $(cat "$TMP/ckpt.act") MiB of activations, $(cat "$TMP/plain.act") MiB without"

"$BIN" --help > "$TMP/out" 2>&1 && grep -q -- "--source-prefix" "$TMP/out" && grep -q -- "--num-beams" "$TMP/out" \
    && grep -q -- "--lr" "$TMP/out" && ok || bad "--help"

finish test_cli_t5
