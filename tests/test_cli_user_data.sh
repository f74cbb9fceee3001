#!/usr/bin/env bash
# Every program on a user's own files (issue 35), with tiny models. gpt2-classify and
# bert-classify: the shipped CSV example (string labels, quoted fields) trained, evaluated (accuracy, macro-F1, the positive
# class's F1, each class's precision and recall) and predicted into predictions.csv; the same
# validation rows as JSON Lines score the same; --label-names reorders the classes; a JSONL of
# fractional scores is regression (Pearson, Spearman, MSE) with predictions.jsonl; JSON lists of
# classes are multi-label (micro-F1, macro-F1, exact match; the predicted classes and each one's
# probability; problem_type multi_label_classification), and the same labels as CSV text with
# --label-separator train to the same numbers; --save-hf names the classes; the cache keys on the files; and every bad input or option gets its one-line error
# naming the file, the line and the column (exit 1), or a usage error (exit 2). t5-finetune's
# pairs from two JSONL columns, and gpt2-finetune's texts from JSONL records, score exactly as the
# same data in the programs' plain files. glm-finetune puts the classes through --cloze and
# --verbalizer, with its option errors.
set -u
BIN_DIR="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for p in gpt2-classify bert-classify t5-finetune gpt2-finetune glm-finetune; do [ -x "$BIN_DIR/$p" ] || { echo "test_cli_user_data: $p not built"; exit 1; }; done

. "$SRC/tests/cli_lib.sh" # pass and fail, ok, bad, expect_fail NAME RC PATTERN PROGRAM ARGS...

cat > "$TMP/gpt2.json" <<JSON
{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 16, "n_layer": 1, "n_head": 2}
JSON
cat > "$TMP/bert.json" <<JSON
{"model_type": "bert", "vocab_size": 30522, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
 "intermediate_size": 32, "max_position_embeddings": 64, "type_vocab_size": 2}
JSON
EX="$SRC/assets/examples"
COMMON=(--max-len 48 --batch-size 8 --threads 2 --epochs 2 --no-cache)
GPT2=(--arch "$TMP/gpt2.json" "${COMMON[@]}" --train-file "$EX/reviews-train.csv" --label-column sentiment)

# the shipped example: train, evaluate, predict, export
"$BIN_DIR/gpt2-classify" "${GPT2[@]}" --validation-file "$EX/reviews-validation.csv" --test-file "$EX/reviews-test.csv" \
    --save-dir "$TMP/run" --save-hf "$TMP/run/hf" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && ok || bad "the CSV example run failed"
grep -q "^task: classes 'negative', 'positive'; text review; from " "$TMP/out" && ok || bad "no task line"
grep -q "dev results (.*reviews-validation.csv, 12 examples, step 12): loss .* accuracy .* f1_macro .* f1 " "$TMP/out" &&
    ok || bad "no dev results line with accuracy, f1_macro and f1"
grep -q "^  class 'negative': precision [0-9.]* recall [0-9.]* f1 [0-9.]* (6 rows)$" "$TMP/out" &&
    grep -q "^  class 'positive': " "$TMP/out" && ok || bad "no per-class lines"
P="$TMP/run/predictions.csv"
[ "$(head -n 1 "$P")" = "id,review,prediction,prob_negative,prob_positive" ] && ok || bad "predictions.csv header: $(head -n 1 "$P")"
[ "$(wc -l < "$P")" -eq 9 ] && ok || bad "predictions.csv has $(wc -l < "$P") lines, want 9"
# the input's fields come back as RFC 4180 writes them: commas and doubled quotes inside quotes
grep -q '^207,"Easy to set up, and the picture is sharp, with ""true"" colours.",\(negative\|positive\),0\.[0-9]*,0\.[0-9]*$' "$P" &&
    ok || bad "predictions.csv does not repeat a quoted field as it was"
[ "$(tail -n +2 "$P" | grep -c ',\(negative\|positive\),[01]\.[0-9]\{6\},[01]\.[0-9]\{6\}$')" -eq 8 ] && ok ||
    bad "a prediction row lacks the class name and two probabilities"
grep -q '"0":[[:space:]]*"negative"' "$TMP/run/hf/config.json" && grep -q '"positive":[[:space:]]*1' "$TMP/run/hf/config.json" &&
    grep -q '"problem_type":[[:space:]]*"single_label_classification"' "$TMP/run/hf/config.json" && ok ||
    bad "--save-hf config.json does not name the classes"
grep -q '"type":"eval".*"f1_macro"' "$TMP/run/metrics.jsonl" && ok || bad "metrics.jsonl lacks f1_macro"
dev_csv=$(grep "dev results" "$TMP/out" | sed 's/.*step 12)://')

# the same validation rows as JSON Lines score the same
"$BIN_DIR/gpt2-classify" "${GPT2[@]}" --validation-file "$EX/reviews-validation.jsonl" --save-dir "$TMP/jsonl" \
    > "$TMP/out" 2> "$TMP/err" && ok || bad "the JSONL validation run failed"
dev_jsonl=$(grep "dev results" "$TMP/out" | sed 's/.*step 12)://')
[ -n "$dev_csv" ] && [ "$dev_csv" = "$dev_jsonl" ] && ok || bad "JSONL validation scores '$dev_jsonl', CSV '$dev_csv'"

# --label-names fixes the order; --positive-label picks the F1's class; a .txt file with --data-format
cp "$EX/reviews-test.csv" "$TMP/test.txt"
"$BIN_DIR/gpt2-classify" "${GPT2[@]}" --validation-file "$EX/reviews-validation.csv" --label-names positive,negative \
    --positive-label positive --test-file "$TMP/test.txt" --data-format csv --predict-out "$TMP/named.csv" \
    --save-dir "$TMP/named" > "$TMP/out" 2> "$TMP/err" && ok || bad "the --label-names run failed"
grep -q "^task: classes 'positive', 'negative'" "$TMP/out" && ok || bad "--label-names did not set the order"
[ "$(head -n 1 "$TMP/named.csv")" = "id,review,prediction,prob_positive,prob_negative" ] && ok || bad "--predict-out header"

# a model that names its classes keeps them: the file's classes take its id2label order, and a
# GLUE task's export keeps the names
"$BIN_DIR/gpt2-classify" "${GPT2[@]}" --label-names positive,negative --epochs 0 --save-dir "$TMP/m1" \
    --save-hf "$TMP/m1/hf" > "$TMP/out" 2> "$TMP/err" && ok || bad "the --label-names export failed"
"$BIN_DIR/gpt2-classify" --model "$TMP/m1/hf" "${COMMON[@]}" --epochs 0 --train-file "$EX/reviews-train.csv" \
    --label-column sentiment --save-dir "$TMP/m2" > "$TMP/out" 2> "$TMP/err" &&
    grep -q "^classes in the model's id2label order: positive,negative" "$TMP/out" &&
    grep -q "^task: classes 'positive', 'negative'" "$TMP/out" && ok || bad "the model's class order was not kept"
mkdir -p "$TMP/mrpc"
head -n 17 "$SRC/assets/glue-mrpc/train.tsv" > "$TMP/mrpc/train.tsv"
head -n 9 "$SRC/assets/glue-mrpc/dev.tsv" > "$TMP/mrpc/dev.tsv"
"$BIN_DIR/gpt2-classify" --model "$TMP/m1/hf" "${COMMON[@]}" --epochs 0 --dataset mrpc --data-dir "$TMP/mrpc" \
    --save-dir "$TMP/m3" --save-hf "$TMP/m3/hf" > "$TMP/out" 2> "$TMP/err" &&
    grep -q '"0":[[:space:]]*"positive"' "$TMP/m3/hf/config.json" && ok || bad "a GLUE export dropped the model's names"
printf 'review,sentiment\ngreat,good\nawful,bad\n' > "$TMP/other.csv"
"$BIN_DIR/gpt2-classify" --model "$TMP/m1/hf" "${COMMON[@]}" --epochs 0 --train-file "$TMP/other.csv" \
    --label-column sentiment --save-dir "$TMP/m4" > "$TMP/out" 2> "$TMP/err" &&
    grep -q "the model's classes (id2label: 2, the first 'positive') are not the train file's" "$TMP/err" && ok ||
    bad "no warning for a model with other classes"

# the token cache: a second run reads it; another label order is another entry
CACHED=(--arch "$TMP/gpt2.json" --max-len 48 --batch-size 8 --threads 2 --epochs 0 --cache-dir "$TMP/cache"
        --train-file "$EX/reviews-train.csv" --validation-file "$EX/reviews-validation.csv" --label-column sentiment)
"$BIN_DIR/gpt2-classify" "${CACHED[@]}" --save-dir "$TMP/c1" > "$TMP/out" 2> "$TMP/err" &&
    grep -q "tokenized 56 rows" "$TMP/out" && ok || bad "the first cached run did not tokenize"
"$BIN_DIR/gpt2-classify" "${CACHED[@]}" --save-dir "$TMP/c2" > "$TMP/out" 2> "$TMP/err" &&
    grep -q "cache hit" "$TMP/out" && ok || bad "the second run did not read the cache"
"$BIN_DIR/gpt2-classify" "${CACHED[@]}" --label-names positive,negative --save-dir "$TMP/c3" > "$TMP/out" 2> "$TMP/err" &&
    grep -q "tokenized 56 rows" "$TMP/out" && ok || bad "another label order reused the cache entry"

# regression from JSON Lines: fractional scores; predictions.jsonl keeps the input's keys and kinds
{
    for i in 1 2 3 4 5 6 7 8; do
        echo "{\"text\": \"it was fine $i\", \"score\": $i.5, \"meta\": {\"n\": $i}}"
        echo "{\"text\": \"it was bad $i\", \"score\": 0.25}"
    done
} > "$TMP/scores.jsonl"
"$BIN_DIR/bert-classify" --arch "$TMP/bert.json" "${COMMON[@]}" --train-file "$TMP/scores.jsonl" --label-column score \
    --validation-file "$TMP/scores.jsonl" --test-file "$TMP/scores.jsonl" --save-dir "$TMP/reg" --save-hf "$TMP/reg/hf" \
    > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && ok || bad "the regression run failed"
grep -q "^task: regression on 'score'" "$TMP/out" && ok || bad "fractions did not mean regression"
# the default tokenizer is one vocab file: the export carries it as vocab.txt, which HF reads
cmp -s "$TMP/reg/hf/vocab.txt" "$SRC/assets/bert-wordpiece/bert-base-uncased-vocab.txt" && ok ||
    bad "the BERT export lacks the tokenizer's vocab.txt"
grep -q "dev results (.*): loss .* pearson .* spearman .* mse " "$TMP/out" && ok || bad "no regression metrics"
R="$TMP/reg/predictions.jsonl"
[ "$(wc -l < "$R")" -eq 16 ] && ok || bad "predictions.jsonl has $(wc -l < "$R") lines"
head -n 1 "$R" | grep -q '^{"text": "it was fine 1", "score": 1.5, "meta": {"n":1}, "prediction": -\?[0-9.e+-]*}$' && ok ||
    bad "predictions.jsonl row: $(head -n 1 "$R")"

# multi-label from the shipped topics example: JSON lists of classes, the test file a CSV
ML=(--arch "$TMP/bert.json" "${COMMON[@]}" --label-column topics)
"$BIN_DIR/bert-classify" "${ML[@]}" --train-file "$EX/topics-train.jsonl" --validation-file "$EX/topics-validation.jsonl" \
    --test-file "$EX/topics-test.csv" --save-dir "$TMP/ml" --save-hf "$TMP/ml/hf" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && ok || bad "the multi-label run failed"
grep -q "^task: multi-label classes 'business', 'health', 'politics', 'science', 'sports'; text headline; from " "$TMP/out" &&
    ok || bad "lists did not mean multi-label"
grep -q "dev results (.*topics-validation.jsonl, 12 examples, step 10): loss [0-9.]* f1_micro [0-9.]* f1_macro [0-9.]* exact_match [0-9.]*$" \
    "$TMP/out" && ok || bad "no multi-label metrics"
grep -q "^  class 'sports': precision [0-9.]* recall [0-9.]* f1 [0-9.]* (3 rows)$" "$TMP/out" && ok || bad "no per-class line"
M="$TMP/ml/predictions.csv"
[ "$(head -n 1 "$M")" = "id,headline,prediction,prob_business,prob_health,prob_politics,prob_science,prob_sports" ] && ok ||
    bad "multi-label predictions header: $(head -n 1 "$M")"
# the prediction is the classes whose probability is above 0.5, joined by ',' (so quoted), before the
# five probabilities
awk -F, 'NR > 1 { n = split("business health politics science sports", c, " "); want = ""; tail = ""
                  for (k = 1; k <= n; k++) {
                      p = $(NF - n + k); tail = tail "," p
                      if (p > 0.5) want = want (want == "" ? "" : ",") c[k]
                  }
                  if (index(want, ",")) want = "\"" want "\""
                  end = "," want tail
                  if (substr($0, length($0) - length(end) + 1) != end) bad++
                  rows++ }
     END { exit !(rows == 8 && bad == 0) }' "$M" && ok || bad "a multi-label prediction is not the classes above 0.5"
grep -q '"problem_type":[[:space:]]*"multi_label_classification"' "$TMP/ml/hf/config.json" &&
    grep -q '"4":[[:space:]]*"sports"' "$TMP/ml/hf/config.json" && ok || bad "--save-hf is not multi-label"
ml_jsonl=$(grep -E "^step|dev results" "$TMP/out" | sed 's/.*step 10)://; s/ | [0-9.]* ms\/step.*//')
# the same rows as CSV with '|'-joined labels and --label-separator: the same task and numbers
to_csv() {
    awk 'BEGIN { print "id,headline,topics" }
         { match($0, /"id": [0-9]+/); id = substr($0, RSTART + 6, RLENGTH - 6)
           match($0, /"headline": "[^"]*"/); h = substr($0, RSTART + 12, RLENGTH - 12)
           match($0, /\[.*\]/); t = substr($0, RSTART + 1, RLENGTH - 2); gsub(/"/, "", t); gsub(/, /, " | ", t)
           print id "," h "," t }' "$1"
}
to_csv "$EX/topics-train.jsonl" > "$TMP/topics-train.csv"
to_csv "$EX/topics-validation.jsonl" > "$TMP/topics-validation.csv"
"$BIN_DIR/bert-classify" "${ML[@]}" --train-file "$TMP/topics-train.csv" --validation-file "$TMP/topics-validation.csv" \
    --label-separator '|' --save-dir "$TMP/ml-csv" > "$TMP/out" 2> "$TMP/err" && ok || bad "the --label-separator run failed"
ml_csv=$(grep -E "^step|dev results" "$TMP/out" | sed 's/.*step 10)://; s/ | [0-9.]* ms\/step.*//')
[ -n "$ml_csv" ] && [ "$ml_csv" = "$ml_jsonl" ] && ok || bad "CSV with --label-separator: '$ml_csv', JSONL: '$ml_jsonl'"
# gpt2-classify: the same task through its own head
"$BIN_DIR/gpt2-classify" --arch "$TMP/gpt2.json" "${COMMON[@]}" --label-column topics --epochs 1 \
    --train-file "$EX/topics-train.jsonl" --validation-file "$EX/topics-validation.jsonl" --save-dir "$TMP/ml-gpt2" \
    > "$TMP/out" 2> "$TMP/err" &&
    grep -q "dev results (.*topics-validation.jsonl, 12 examples, step 5): loss [0-9.]* f1_micro [0-9.]* f1_macro " "$TMP/out" &&
    ok || bad "gpt2-classify multi-label"
expect_fail "--positive-label on multi-label" 2 "\-\-positive-label is for two classes; 'topics' in .*topics-train.jsonl is multi-label" \
    bert-classify "${ML[@]}" --train-file "$EX/topics-train.jsonl" --positive-label sports --save-dir "$TMP/e14"
expect_fail "multi-label in glm-finetune" 2 "labels in 'topics' are lists of classes (multi-label)" \
    glm-finetune --train-file "$EX/topics-train.jsonl" --label-column topics --cloze "{headline} Topic: [MASK]" \
    --verbalizer business=money --save-dir "$TMP/e15"

# a data file that is not there, or a folder, is one line before anything loads (nothing on stdout)
for p in gpt2-classify bert-classify t5-finetune gpt2-finetune glm-finetune; do
    extra=()
    [ "$p" = glm-finetune ] && extra=(--cloze "{review} It was [MASK]." --label-column sentiment)
    expect_fail "$p: missing --train-file" 1 "^$p: error: --train-file $TMP/nope.csv: cannot open: No such file" \
        "$p" --train-file "$TMP/nope.csv" "${extra[@]}" --save-dir "$TMP/e0"
    [ -s "$TMP/out" ] && bad "$p: missing --train-file: reported after the model loaded"
    expect_fail "$p: --validation-file a folder" 1 "^$p: error: --validation-file $TMP: a folder, not a file to read" \
        "$p" --train-file "$EX/reviews-train.csv" --validation-file "$TMP" "${extra[@]}" --save-dir "$TMP/e0"
    # an output written after training that could not be made there: refused before it
    expect_fail "$p: --save-hf under a file" 1 "^$p: error: --save-hf $TMP/gpt2.json/hf: $TMP/gpt2.json is a file, not a folder" \
        "$p" --train-file "$EX/reviews-train.csv" --save-hf "$TMP/gpt2.json/hf" "${extra[@]}" --save-dir "$TMP/e0"
done

# options that do not go together, and names that are not there (usage: exit 2)
expect_fail "--dataset with --train-file" 2 "\-\-dataset is for GLUE tasks; with --train-file leave it out" \
    gpt2-classify "${GPT2[@]}" --dataset sst2 --save-dir "$TMP/e1"
expect_fail "--predict with --train-file" 2 "with --train-file use --test-file" \
    gpt2-classify "${GPT2[@]}" --predict "$EX/reviews-test.csv" --save-dir "$TMP/e2"
expect_fail "--validation-file alone" 2 "\-\-validation-file goes with --train-file" \
    gpt2-classify --arch "$TMP/gpt2.json" --validation-file "$EX/reviews-validation.csv" --save-dir "$TMP/e3"
expect_fail "no label column" 2 "reviews-train.csv: no column 'label' (its columns: id, review, sentiment); name the column with --label-column" \
    gpt2-classify --arch "$TMP/gpt2.json" "${COMMON[@]}" --train-file "$EX/reviews-train.csv" --save-dir "$TMP/e4"
expect_fail "unknown text column" 2 "no column 'body' (its columns: id, review, sentiment)" \
    gpt2-classify "${GPT2[@]}" --text-columns body --save-dir "$TMP/e5"
expect_fail "positive label not a class" 2 "\-\-positive-label 'great' is not a class" \
    gpt2-classify "${GPT2[@]}" --positive-label great --save-dir "$TMP/e6"
cp "$EX/reviews-train.csv" "$TMP/train.data"
expect_fail "unknown extension" 2 "train.data: cannot tell the format from the name .*--data-format" \
    gpt2-classify --arch "$TMP/gpt2.json" "${COMMON[@]}" --train-file "$TMP/train.data" --label-column sentiment \
    --save-dir "$TMP/e7"

# bad rows (exit 1, FILE:LINE and the column)
{ head -n 5 "$EX/reviews-validation.csv"; echo '999,"A fine, sturdy lamp.",mixed'; } > "$TMP/dev-outside.csv"
expect_fail "validation label outside the classes" 1 \
    "dev-outside.csv:6: column 'sentiment': the label 'mixed' is not one of the train file's classes 'negative', 'positive'" \
    gpt2-classify "${GPT2[@]}" --validation-file "$TMP/dev-outside.csv" --save-dir "$TMP/e8"
{ head -n 3 "$EX/reviews-train.csv"; echo '999,,positive'; } > "$TMP/empty-text.csv"
expect_fail "empty text" 1 "empty-text.csv:4: column 'review': the text is empty" \
    gpt2-classify --arch "$TMP/gpt2.json" "${COMMON[@]}" --train-file "$TMP/empty-text.csv" --label-column sentiment \
    --save-dir "$TMP/e9"
{ head -n 3 "$EX/reviews-train.csv"; echo '999,"never closed,positive'; } > "$TMP/open-quote.csv"
expect_fail "a quote never closed" 1 "open-quote.csv:4: column 2: a quoted field opened here is never closed" \
    gpt2-classify --arch "$TMP/gpt2.json" "${COMMON[@]}" --train-file "$TMP/open-quote.csv" --label-column sentiment \
    --save-dir "$TMP/e10"
printf '{"text": "a", "label": "x"}\n{"text": "b", "label": }\n' > "$TMP/bad.jsonl"
expect_fail "bad JSON line" 1 "bad.jsonl:2:24: invalid JSON near" \
    gpt2-classify --arch "$TMP/gpt2.json" "${COMMON[@]}" --train-file "$TMP/bad.jsonl" --save-dir "$TMP/e11"
printf '{"text": "a", "label": ["x", "y"]}\n{"text": "b", "label": "y"}\n' > "$TMP/multi.jsonl"
expect_fail "a multi-label column with a plain label" 1 "multi.jsonl:2: column 'label': the label is text, but the task is multi-label" \
    gpt2-classify --arch "$TMP/gpt2.json" "${COMMON[@]}" --train-file "$TMP/multi.jsonl" --save-dir "$TMP/e12"
printf '{"text": "a", "label": "x"}\n{"text": "b"}\n' > "$TMP/nolabel.jsonl"
expect_fail "a record without the label" 1 "nolabel.jsonl:2: column 'label': the label is missing" \
    gpt2-classify --arch "$TMP/gpt2.json" "${COMMON[@]}" --train-file "$TMP/nolabel.jsonl" --save-dir "$TMP/e13"

# t5-finetune: the pairs from two columns of a JSON Lines file train and score as the same pairs
# from SRC TGT files (the last 20% held out either way); --test-file writes the generations
D="$SRC/assets/multi30k-en-de"
head -n 20 "$D/val.en" > "$TMP/s.en"
head -n 20 "$D/val.de" > "$TMP/s.de"
json_escape() { sed 's/\\/\\\\/g; s/"/\\"/g'; }
paste -d '\t' <(json_escape < "$TMP/s.en") <(json_escape < "$TMP/s.de") |
    awk -F '\t' '{ printf "{\"en\": \"%s\", \"de\": \"%s\"}\n", $1, $2 }' > "$TMP/pairs.jsonl"
cat > "$TMP/t5.json" <<JSON
{"model_type": "t5", "vocab_size": 32128, "d_model": 16, "d_kv": 4, "d_ff": 32, "num_heads": 2, "num_layers": 1,
 "num_decoder_layers": 1, "relative_attention_num_buckets": 8, "relative_attention_max_distance": 16,
 "dropout_rate": 0.1, "feed_forward_proj": "relu", "tie_word_embeddings": true}
JSON
T5=(--arch "$TMP/t5.json" --max-source-len 24 --max-target-len 16 --max-new-tokens 4 --batch-size 8 --threads 2
    --max-steps 2 --no-cache)
"$BIN_DIR/t5-finetune" "$TMP/s.en" "$TMP/s.de" "${T5[@]}" --save-dir "$TMP/t5a" > "$TMP/out" 2> "$TMP/err" &&
    ok || bad "t5-finetune on SRC TGT failed"
t5_lines=$(grep "validation results" "$TMP/out")
"$BIN_DIR/t5-finetune" --train-file "$TMP/pairs.jsonl" --source-column en --target-column de "${T5[@]}" \
    --test-file "$TMP/pairs.jsonl" --save-dir "$TMP/t5b" > "$TMP/out" 2> "$TMP/err" && ok || bad "t5-finetune --train-file failed"
t5_table=$(grep "validation results" "$TMP/out")
[ -n "$t5_lines" ] && [ "$t5_lines" = "$t5_table" ] && ok || bad "t5 --train-file scores '$t5_table', SRC TGT '$t5_lines'"
[ "$(wc -l < "$TMP/t5b/predictions.jsonl")" -eq 20 ] &&
    head -n 1 "$TMP/t5b/predictions.jsonl" | grep -q '^{"en": ".*", "de": ".*", "prediction": ".*"}$' &&
    ok || bad "t5 predictions.jsonl: $(head -n 1 "$TMP/t5b/predictions.jsonl")"
# the columns come from the train file: a test file with only the source column, in another place
awk '{ sub(/^\{"en": /, "{\"id\": " NR ", \"en\": "); sub(/, "de": ".*"\}$/, "}"); print }' "$TMP/pairs.jsonl" > "$TMP/test-en.jsonl"
"$BIN_DIR/t5-finetune" --train-file "$TMP/pairs.jsonl" "${T5[@]}" --test-file "$TMP/test-en.jsonl" --save-dir "$TMP/t5c" \
    > "$TMP/out" 2> "$TMP/err" && head -n 1 "$TMP/t5c/predictions.jsonl" | grep -q '^{"id": 1, "en": ".*", "prediction": ".*"}$' &&
    ok || bad "t5 --test-file with the source column only: $(head -n 1 "$TMP/t5c/predictions.jsonl" 2>&1)"
expect_fail "t5 SRC TGT and --train-file" 2 "give SRC TGT or --train-file, not both" \
    t5-finetune "$TMP/s.en" "$TMP/s.de" --train-file "$TMP/pairs.jsonl" "${T5[@]}" --save-dir "$TMP/e14"
expect_fail "t5 unknown source column" 2 "pairs.jsonl: no column 'english' (its columns: en, de); name the column with --source-column" \
    t5-finetune --train-file "$TMP/pairs.jsonl" --source-column english "${T5[@]}" --save-dir "$TMP/e15"
expect_fail "t5 --test-file with SRC TGT" 2 "\-\-test-file goes with --train-file" \
    t5-finetune "$TMP/s.en" "$TMP/s.de" --test-file "$TMP/pairs.jsonl" "${T5[@]}" --save-dir "$TMP/e16"

# gpt2-finetune: records whose text holds a line with its newline make the same token stream as
# the plain text file (run_clm adds nothing between records; the text loader keeps newlines)
head -n 120 "$D/val.en" > "$TMP/lm.txt"
sed -n 121,160p "$D/val.en" > "$TMP/lmval.txt"
for f in lm lmval; do
    json_escape < "$TMP/$f.txt" | awk '{ printf "{\"id\": %d, \"text\": \"%s\\n\"}\n", NR, $0 }' > "$TMP/$f.jsonl"
done
echo '{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 16, "n_layer": 1, "n_head": 2}' > "$TMP/lm.json"
LM=(--arch "$TMP/lm.json" --block-size 32 --batch-size 4 --threads 2 --max-steps 3 --no-cache)
"$BIN_DIR/gpt2-finetune" "$TMP/lm.txt" --val "$TMP/lmval.txt" "${LM[@]}" --save-dir "$TMP/lma" > "$TMP/out" 2> "$TMP/err" &&
    ok || bad "gpt2-finetune on a text file failed"
lm_text=$(grep "validation results" "$TMP/out")
"$BIN_DIR/gpt2-finetune" --train-file "$TMP/lm.jsonl" --validation-file "$TMP/lmval.jsonl" "${LM[@]}" --save-dir "$TMP/lmb" \
    > "$TMP/out" 2> "$TMP/err" && ok || bad "gpt2-finetune --train-file failed"
lm_table=$(grep "validation results" "$TMP/out")
[ -n "$lm_text" ] && [ "$lm_text" = "$lm_table" ] && ok || bad "gpt2-finetune --train-file scores '$lm_table', text '$lm_text'"
grep -q "lm.jsonl: 120 records, the texts in column 'text'" "$TMP/out" && ok || bad "no records line"
expect_fail "gpt2-finetune --val with --train-file" 2 "with --train-file use --validation-file" \
    gpt2-finetune --train-file "$TMP/lm.jsonl" --val "$TMP/lmval.txt" "${LM[@]}" --save-dir "$TMP/e17"
expect_fail "gpt2-finetune no input" 2 "expected TEXT files or --train-file FILE" \
    gpt2-finetune "${LM[@]}" --save-dir "$TMP/e18"
expect_fail "gpt2-finetune unknown text column" 2 "no column 'body' (its columns: id, text)" \
    gpt2-finetune --train-file "$TMP/lm.jsonl" --text-column body "${LM[@]}" --save-dir "$TMP/e19"

# glm-finetune: the classes through a cloze pattern and a verbalizer (FlagAI's custom task)
GLM=(--threads 2 --batch-size 8 --max-steps 3 --no-cache --train-file "$EX/reviews-train.csv" --label-column sentiment)
"$BIN_DIR/glm-finetune" "${GLM[@]}" --validation-file "$EX/reviews-validation.csv" --cloze "{review} It was [MASK]." \
    --verbalizer negative=bad,positive=good --save-dir "$TMP/glm" > "$TMP/out" 2> "$TMP/err" && ok || bad "glm --train-file failed"
grep -q "^data: classes 'negative', 'positive'; train 44, validation 12 examples through \"{review} It was \[MASK\].\"" "$TMP/out" &&
    ok || bad "glm: no data line"
grep -q "validation results (.*reviews-validation.csv, 12 examples, step 3): loss .* accuracy .* f1_macro .* f1 " "$TMP/out" &&
    ok || bad "glm: no validation results with accuracy and F1"
"$BIN_DIR/glm-finetune" "${GLM[@]}" --cloze "{review} [MASK]" --save-dir "$TMP/glm2" > "$TMP/out" 2> "$TMP/err" &&
    grep -q "train 35, validation 9 examples (held out from the end)" "$TMP/out" && ok ||
    bad "glm: the default verbalizer (the class names) and the held-out validation"
# the predictions of the validation rows (as a --test-file) agree with the evaluation's accuracy
agree() { # NAME LOG PREDICTIONS.jsonl: the share of rows whose prediction is their sentiment, as the log says
    local acc right
    acc=$(grep -o "results (.*): loss [0-9.]* accuracy [0-9.]*" "$2" | grep -o "[0-9.]*$")
    right=$(grep -c '"sentiment": "\([a-z]*\)", "prediction": "\1"' "$3")
    [ -n "$acc" ] && [ "$(awk -v r="$right" 'BEGIN { printf "%.4f", r / 12 }')" = "$acc" ] && ok ||
        bad "$1: $right of 12 predictions right, the evaluation's accuracy is '$acc'"
}
"$BIN_DIR/glm-finetune" "${GLM[@]}" --validation-file "$EX/reviews-validation.jsonl" --test-file "$EX/reviews-validation.jsonl" \
    --cloze "{review} It was [MASK]." --verbalizer negative=bad,positive=good --save-dir "$TMP/glm3" > "$TMP/out" 2> "$TMP/err" &&
    ok || bad "glm --test-file failed"
agree "glm" "$TMP/out" "$TMP/glm3/predictions.jsonl"
head -n 1 "$TMP/glm3/predictions.jsonl" | grep -q '^{"id": 101, "review": ".*", "sentiment": "positive", "prediction": "\(negative\|positive\)", "prob_negative": 0\.[0-9]*, "prob_positive": 0\.[0-9]*}$' &&
    ok || bad "glm predictions.jsonl: $(head -n 1 "$TMP/glm3/predictions.jsonl")"
"$BIN_DIR/gpt2-classify" "${GPT2[@]}" --validation-file "$EX/reviews-validation.jsonl" --test-file "$EX/reviews-validation.jsonl" \
    --save-dir "$TMP/agree" > "$TMP/out" 2> "$TMP/err" && ok || bad "gpt2-classify --test-file on the validation rows failed"
agree "gpt2-classify" "$TMP/out" "$TMP/agree/predictions.jsonl"
expect_fail "glm without --cloze" 2 "\-\-train-file needs --cloze PATTERN" glm-finetune "${GLM[@]}" --save-dir "$TMP/e20"
expect_fail "glm --task with --train-file" 2 "\-\-task is for the SuperGLUE and seq2seq tasks" \
    glm-finetune "${GLM[@]}" --task rte --cloze "{review} [MASK]" --save-dir "$TMP/e21"
expect_fail "glm verbalizer of no class" 2 "\-\-verbalizer: 'neutral' is not a class" \
    glm-finetune "${GLM[@]}" --cloze "{review} [MASK]" --verbalizer neutral=meh --save-dir "$TMP/e22"
expect_fail "glm verbalizer of two tokens" 1 "verbalizer \"wonderfully awful\" is" \
    glm-finetune "${GLM[@]}" --cloze "{review} [MASK]" --verbalizer "positive=wonderfully awful" --save-dir "$TMP/e23"
expect_fail "glm unknown column in the pattern" 2 "no column 'text' (its columns: id, review, sentiment)" \
    glm-finetune "${GLM[@]}" --cloze "{text} [MASK]" --save-dir "$TMP/e24"
expect_fail "glm regression labels" 2 "numbers with fractions (regression); glm-finetune scores classes" \
    glm-finetune --threads 2 --no-cache --train-file "$TMP/scores.jsonl" --label-column score --cloze "{text} [MASK]" \
    --save-dir "$TMP/e25"

# --help tells about the files
"$BIN_DIR/gpt2-classify" --help > "$TMP/out" 2>&1
grep -q -- "--train-file FILE" "$TMP/out" && grep -q -- "--label-names" "$TMP/out" && grep -q "reviews-train.csv" "$TMP/out" &&
    ok || bad "--help does not show the files' options and example"

echo "test_cli_user_data: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
