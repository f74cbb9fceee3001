#!/usr/bin/env bash
# bert-classify end to end on tiny BERT and RoBERTa configs: classification on a slice of real
# MRPC, regression on real STS-B, both MNLI dev sets on synthetic MNLI-layout files, the HF
# export reloading, and the bad inputs issue 4 names (a vocab without [CLS], a wrong column
# count, a label outside num_labels), each a one-line error and exit 1.
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/bert-classify"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
. "$SRC/tests/fixtures.sh"
need_fixture "$FIXTURES/glue-stsb/train.tsv" "$FIXTURES/glue-stsb/dev.tsv" "$FIXTURES/roberta-bpe/roberta-vocab.json"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
[ -x "$BIN" ] || { echo "test_cli_bert: $BIN not built"; exit 1; }
BIN_DIR=$(dirname "$BIN")
. "$SRC/tests/cli_lib.sh" # pass and fail, ok, bad, expect_fail NAME RC PATTERN PROGRAM ARGS...

cat > "$TMP/bert.json" <<JSON
{"model_type": "bert", "vocab_size": 30522, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
 "intermediate_size": 32, "max_position_embeddings": 64, "type_vocab_size": 2}
JSON
cat > "$TMP/roberta.json" <<JSON
{"model_type": "roberta", "vocab_size": 50265, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
 "intermediate_size": 32, "max_position_embeddings": 66, "type_vocab_size": 1, "pad_token_id": 1}
JSON
VOCAB="$SRC/assets/bert-wordpiece/bert-base-uncased-vocab.txt"
mkdir -p "$TMP/mrpc" "$TMP/stsb"
head -n 65 "$SRC/assets/glue-mrpc/train.tsv" > "$TMP/mrpc/train.tsv"
head -n 33 "$SRC/assets/glue-mrpc/dev.tsv" > "$TMP/mrpc/dev.tsv"
head -n 65 "$FIXTURES/glue-stsb/train.tsv" > "$TMP/stsb/train.tsv"
head -n 33 "$FIXTURES/glue-stsb/dev.tsv" > "$TMP/stsb/dev.tsv"
COMMON=(--max-len 48 --batch-size 8 --max-steps 3 --threads 2 --save-interval -1)

# BERT classification, then export and reload
"$BIN" --arch "$TMP/bert.json" --tokenizer "$VOCAB" --data-dir "$TMP/mrpc" "${COMMON[@]}" --save-dir "$TMP/b" \
    --save-hf "$TMP/hf" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && grep -q "dev results (mrpc, 32 examples, step 3): loss .* accuracy .* f1 " "$TMP/out" && ok || bad "BERT mrpc"
"$BIN" --model "$TMP/hf" --data-dir "$TMP/mrpc" --max-len 48 --epochs 0 --save-dir "$TMP/b2" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && grep -q "weights: pretrained weights from --model .*: [0-9]* tensors loaded$" "$TMP/out" && ok || bad "reload --save-hf"

# regression on STS-B
"$BIN" --arch "$TMP/bert.json" --tokenizer "$VOCAB" --dataset stsb --data-dir "$TMP/stsb" "${COMMON[@]}" \
    --save-dir "$TMP/s" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && grep -q "regression (MSE)" "$TMP/out" && grep -q "dev results (stsb, 32 examples, step 3): loss .* pearson .* spearman " "$TMP/out" \
    && ok || bad "BERT stsb regression"

# RoBERTa with its BPE
"$BIN" --arch "$TMP/roberta.json" --tokenizer "$FIXTURES/roberta-bpe/roberta-vocab.json" --data-dir "$TMP/mrpc" \
    "${COMMON[@]}" --save-dir "$TMP/r" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && grep -q "RoBERTa 1 layers" "$TMP/out" && grep -q "dev results (mrpc" "$TMP/out" && ok || bad "RoBERTa mrpc"

# MNLI: both dev sets are scored (synthetic rows in GLUE's MNLI layout: 12 columns in train,
# 16 in dev with the gold label last)
mkdir -p "$TMP/mnli"
labels=(entailment neutral contradiction)
header12="index	promptID	pairID	genre	sentence1_binary_parse	sentence2_binary_parse	sentence1_parse	sentence2_parse	sentence1	sentence2	label1	gold_label"
header16="index	promptID	pairID	genre	sentence1_binary_parse	sentence2_binary_parse	sentence1_parse	sentence2_parse	sentence1	sentence2	label1	label2	label3	label4	label5	gold_label"
{ echo "$header12"; for i in $(seq 0 31); do l=${labels[$((i % 3))]}; echo "$i	p	q	g	x	x	x	x	the cat sat number $i	a cat is here $i	$l	$l"; done; } > "$TMP/mnli/train.tsv"
for d in dev_matched dev_mismatched; do
    { echo "$header16"; for i in $(seq 0 11); do l=${labels[$((i % 3))]}; echo "$i	p	q	g	x	x	x	x	a dog ran $i	the dog moved $i	$l	$l	$l	$l	$l	$l"; done; } > "$TMP/mnli/$d.tsv"
done
"$BIN" --arch "$TMP/bert.json" --tokenizer "$VOCAB" --dataset mnli --data-dir "$TMP/mnli" "${COMMON[@]}" \
    --save-dir "$TMP/m" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && grep -q "dev_matched_accuracy .* dev_mismatched_accuracy" "$TMP/out" && ok || bad "MNLI two dev sets"

# bad inputs
grep -v '^\[CLS\]$' "$VOCAB" > "$TMP/nocls-vocab.txt"
expect_fail "vocab without [CLS]" 1 "[CLS]" bert-classify --arch "$TMP/bert.json" --tokenizer "$TMP/nocls-vocab.txt" \
    --data-dir "$TMP/mrpc" "${COMMON[@]}" --save-dir "$TMP/x"
mkdir -p "$TMP/cols" && cp "$TMP/mrpc/dev.tsv" "$TMP/cols/" && head -n 5 "$TMP/mrpc/train.tsv" > "$TMP/cols/train.tsv"
printf '1\t2\tonly three\n' >> "$TMP/cols/train.tsv"
expect_fail "wrong column count" 1 "train.tsv:6" bert-classify --arch "$TMP/bert.json" --tokenizer "$VOCAB" --data-dir "$TMP/cols" \
    "${COMMON[@]}" --save-dir "$TMP/x"
mkdir -p "$TMP/lab" && cp "$TMP/mrpc/dev.tsv" "$TMP/lab/" && head -n 5 "$TMP/mrpc/train.tsv" > "$TMP/lab/train.tsv"
printf '2\t1\t2\tsome text\tmore text\n' >> "$TMP/lab/train.tsv"
expect_fail "label outside num_labels" 1 "train.tsv:6" bert-classify --arch "$TMP/bert.json" --tokenizer "$VOCAB" --data-dir "$TMP/lab" \
    "${COMMON[@]}" --save-dir "$TMP/x"
expect_fail "missing task files" 1 "dev_matched.tsv" bert-classify --arch "$TMP/bert.json" --tokenizer "$VOCAB" --dataset mnli \
    --data-dir "$TMP/mrpc" "${COMMON[@]}" --save-dir "$TMP/x"
# a size past its limit in --arch (issue 14): one line naming the file, the field and the limit
sed 's/"hidden_size": 16/"hidden_size": 1000000000/' "$TMP/bert.json" > "$TMP/huge.json"
expect_fail "hidden_size 1e9" 1 "huge.json: field 'hidden_size' is 1000000000, more than the limit 65536" bert-classify \
    --arch "$TMP/huge.json" --tokenizer "$VOCAB" --data-dir "$TMP/mrpc" "${COMMON[@]}" --save-dir "$TMP/huge"

finish test_cli_bert
