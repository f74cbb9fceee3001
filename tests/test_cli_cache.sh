#!/usr/bin/env bash
# The tokenized cache end to end (bert-classify on a tiny BERT and an MRPC slice, t5-finetune on
# Multi30k lines, glm-finetune on COPA): the first run tokenizes and saves, the second loads ("cache hit") and trains
# to the same numbers; --max-len, a changed data file and a changed tokenizer file each make a new
# entry; a truncated or
# bit-flipped entry is reported in one warning, rebuilt and a hit again afterwards; --no-cache
# writes nothing; two runs started at once build one entry; an unusable --cache-dir is a warning,
# not an error. Also --group-by-length: the run trains, and resumed at step 4 ends as the whole
# run does.
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
. "$SRC/tests/fixtures.sh"
need_fixture "$ASSETS/glue-mrpc/train.tsv" "$ASSETS/glue-mrpc/dev.tsv" "$ASSETS/bert-wordpiece/bert-base-uncased-vocab.txt" \
    "$ASSETS/multi30k-en-de/val.en" "$ASSETS/multi30k-en-de/val.de"
pass=0
fail=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); printf 'FAILED: %s\n' "$1" >&2; [ -f "$TMP/out" ] && tail -5 "$TMP/out" | sed 's/^/    /' >&2; }

mkdir -p "$TMP/data"
head -n 65 "$ASSETS/glue-mrpc/train.tsv" > "$TMP/data/train.tsv"
head -n 33 "$ASSETS/glue-mrpc/dev.tsv" > "$TMP/data/dev.tsv"
echo '{"model_type": "bert", "vocab_size": 30522, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
 "intermediate_size": 32, "max_position_embeddings": 64, "type_vocab_size": 2}' > "$TMP/bert.json"
C="$TMP/cache"
BERT=(--arch "$TMP/bert.json" --tokenizer "$ASSETS/bert-wordpiece/bert-base-uncased-vocab.txt" --max-steps 3
    --batch-size 8 --threads 2 --log-interval 1 --eval-interval -1 --save-interval -1)
# bert RUN_NAME ARGS...: one run, its output (stdout and stderr) in $TMP/out
bert() {
    local name=$1
    shift
    rm -rf "$TMP/run-$name"
    "$BIN/bert-classify" "${BERT[@]}" --save-dir "$TMP/run-$name" "$@" > "$TMP/out" 2>&1
}
entries() { ls "$1"/*.tzds 2> /dev/null | wc -l; }
last_loss() { grep '"train"' "$1/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/'; }

bert first --data-dir "$TMP/data" --max-len 32 --cache-dir "$C" &&
    grep -q "^mrpc: tokenized 96 rows in [0-9.]* s (cached as $C/[0-9a-f]*\.tzds)" "$TMP/out" && [ "$(entries "$C")" = 1 ] &&
    ok || bad "the first run did not tokenize and save one entry"
entry=$(grep -o "$C/[0-9a-f]*\.tzds" "$TMP/out" | head -1)
bert second --data-dir "$TMP/data" --max-len 32 --cache-dir "$C" &&
    grep -q "^mrpc: cache hit: $C/[0-9a-f]*\.tzds (96 rows)" "$TMP/out" && ok || bad "the second run was not a cache hit"
[ -n "$(last_loss "$TMP/run-first")" ] && [ "$(last_loss "$TMP/run-first")" = "$(last_loss "$TMP/run-second")" ] &&
    ok || bad "the cached run trained differently: $(last_loss "$TMP/run-first") vs $(last_loss "$TMP/run-second")"
bert maxlen --data-dir "$TMP/data" --max-len 24 --cache-dir "$C" && grep -q "^mrpc: tokenized 96 rows" "$TMP/out" &&
    [ "$(entries "$C")" = 2 ] && ok || bad "--max-len 24 did not make a second entry"
# a build killed mid-write left its temporary file: the next build of that entry removes it (its
# writer's pid is gone) and keeps one whose writer still runs (issue 34)
sleep 0 & dead=$!
wait $dead
rm -f "$entry"
touch "$entry.tmp.$dead.0" "$entry.tmp.$$.0"
bert rebuilt --data-dir "$TMP/data" --max-len 32 --cache-dir "$C" && grep -q "^mrpc: tokenized 96 rows" "$TMP/out" &&
    grep -q "removed $entry.tmp.$dead.0, a temporary file left by a run that was killed" "$TMP/out" &&
    [ ! -e "$entry.tmp.$dead.0" ] && [ -e "$entry.tmp.$$.0" ] && ok || bad "a killed build's temporary file"
rm -f "$entry.tmp.$$.0"
cp -r "$TMP/data" "$TMP/data2"
sed -i '2s/the/a/' "$TMP/data2/train.tsv"
bert edited --data-dir "$TMP/data2" --max-len 32 --cache-dir "$C" && grep -q "^mrpc: tokenized 96 rows" "$TMP/out" &&
    [ "$(entries "$C")" = 3 ] && ok || bad "an edited train.tsv did not make a new entry"

cp "$ASSETS/bert-wordpiece/bert-base-uncased-vocab.txt" "$TMP/vocab.txt"
bert tok1 --data-dir "$TMP/data" --max-len 32 --cache-dir "$C" --tokenizer "$TMP/vocab.txt" &&
    bert tok2 --data-dir "$TMP/data" --max-len 32 --cache-dir "$C" --tokenizer "$TMP/vocab.txt" &&
    grep -q "^mrpc: cache hit" "$TMP/out" && ok || bad "a tokenizer copy is not a hit on its second run"
sed -i 's/^\[unused0\]$/[unusedA]/' "$TMP/vocab.txt" # same count, other content
bert tok3 --data-dir "$TMP/data" --max-len 32 --cache-dir "$C" --tokenizer "$TMP/vocab.txt" &&
    grep -q "^mrpc: tokenized 96 rows" "$TMP/out" && ok || bad "a changed tokenizer file did not make a new entry"

# damage: the entry of the first run, truncated, then with one byte changed
size=$(stat -c %s "$entry")
truncate -s $((size / 2)) "$entry"
bert truncated --data-dir "$TMP/data" --max-len 32 --cache-dir "$C" &&
    grep -q "^warning: cache: $entry: truncated .*; rebuilding it" "$TMP/out" && grep -q "^mrpc: tokenized 96 rows" "$TMP/out" &&
    ok || bad "a truncated entry was not reported and rebuilt"
printf '\x55' | dd of="$entry" bs=1 seek=$((size / 2)) conv=notrunc status=none
bert flipped --data-dir "$TMP/data" --max-len 32 --cache-dir "$C" &&
    grep -q "^warning: cache: $entry: checksum mismatch (damaged); rebuilding it" "$TMP/out" && ok ||
    bad "a changed byte was not caught by the checksum"
bert healed --data-dir "$TMP/data" --max-len 32 --cache-dir "$C" && grep -q "^mrpc: cache hit" "$TMP/out" &&
    [ "$(last_loss "$TMP/run-first")" = "$(last_loss "$TMP/run-healed")" ] && ok || bad "the rebuilt entry is not a hit"

bert nocache --data-dir "$TMP/data" --max-len 20 --cache-dir "$C" --no-cache &&
    grep -q "^mrpc: tokenized 96 rows in [0-9.]* s (no cache)" "$TMP/out" && [ "$(entries "$C")" = 5 ] &&
    ok || bad "--no-cache read or wrote the cache"
touch "$TMP/afile"
bert unusable --data-dir "$TMP/data" --max-len 32 --cache-dir "$TMP/afile/sub" &&
    grep -q "^warning: cache: .*afile.*; tokenizing without it" "$TMP/out" && ok ||
    bad "an unusable --cache-dir was not a warning"

# two runs at once on an empty cache: one builds, the other waits and loads
"$BIN/bert-classify" "${BERT[@]}" --data-dir "$TMP/data" --max-len 32 --cache-dir "$TMP/c2" --save-dir "$TMP/p1" \
    > "$TMP/p1.out" 2>&1 &
"$BIN/bert-classify" "${BERT[@]}" --data-dir "$TMP/data" --max-len 32 --cache-dir "$TMP/c2" --save-dir "$TMP/p2" \
    > "$TMP/p2.out" 2>&1 &
wait %1 && wait %2 && [ "$(cat "$TMP/p1.out" "$TMP/p2.out" | grep -c "^mrpc: tokenized")" = 1 ] &&
    [ "$(cat "$TMP/p1.out" "$TMP/p2.out" | grep -c "^mrpc: cache hit")" = 1 ] && [ "$(entries "$TMP/c2")" = 1 ] &&
    [ "$(last_loss "$TMP/p1")" = "$(last_loss "$TMP/p2")" ] && ok || bad "two runs at once did not build one entry"

# t5-finetune: a miss, then a hit with the same training
head -n 40 "$ASSETS/multi30k-en-de/val.en" > "$TMP/s.en"
head -n 40 "$ASSETS/multi30k-en-de/val.de" > "$TMP/s.de"
echo '{"model_type": "t5", "vocab_size": 32128, "d_model": 16, "d_kv": 4, "d_ff": 32, "num_heads": 4, "num_layers": 1,
 "num_decoder_layers": 1, "relative_attention_num_buckets": 8, "relative_attention_max_distance": 16}' > "$TMP/t5.json"
for run in t5a t5b; do
    "$BIN/t5-finetune" "$TMP/s.en" "$TMP/s.de" --arch "$TMP/t5.json" --max-steps 2 --batch-size 4 --threads 2 \
        --eval-interval -1 --save-interval -1 --cache-dir "$C" --save-dir "$TMP/$run" > "$TMP/out-$run" 2>&1 ||
        bad "t5-finetune $run failed"
done
grep -q "^seq2seq data: tokenized 40 rows" "$TMP/out-t5a" && grep -q "^seq2seq data: cache hit" "$TMP/out-t5b" &&
    [ "$(last_loss "$TMP/t5a")" = "$(last_loss "$TMP/t5b")" ] && ok || bad "t5-finetune: no miss then hit"

# glm-finetune (COPA from assets/): a miss, then a hit with the same training
for run in glma glmb; do
    "$BIN/glm-finetune" --task copa --batch-size 8 --max-steps 2 --threads 2 --eval-interval -1 --save-interval -1 \
        --cache-dir "$C" --save-dir "$TMP/$run" > "$TMP/out-$run" 2>&1 || bad "glm-finetune $run failed"
done
grep -q "^copa: tokenized 1000 rows" "$TMP/out-glma" && grep -q "^copa: cache hit: .* (1000 rows)" "$TMP/out-glmb" &&
    [ "$(last_loss "$TMP/glma")" = "$(last_loss "$TMP/glmb")" ] && ok || bad "glm-finetune: no miss then hit"

# --group-by-length: trains, and a resume at step 4 ends as the whole run
GROUP=(--data-dir "$TMP/data" --max-len 32 --cache-dir "$C" --group-by-length --max-steps 8 --save-interval 4 --keep 5)
"$BIN/bert-classify" "${BERT[@]}" "${GROUP[@]}" --save-dir "$TMP/g-whole" > "$TMP/out" 2>&1 || bad "--group-by-length run"
mkdir -p "$TMP/g-resume" && cp "$TMP/g-whole"/step-*4.tzck "$TMP/g-resume/"
"$BIN/bert-classify" "${BERT[@]}" "${GROUP[@]}" --save-dir "$TMP/g-resume" --resume > "$TMP/out" 2>&1 &&
    grep -q "resumed from .*step.*4" "$TMP/out" && [ -n "$(last_loss "$TMP/g-whole")" ] &&
    [ "$(last_loss "$TMP/g-whole")" = "$(last_loss "$TMP/g-resume")" ] && ok ||
    bad "--group-by-length resumed at step 4 does not end as the whole run"
bert plain --data-dir "$TMP/data" --max-len 32 --cache-dir "$C" --max-steps 8
[ "$(last_loss "$TMP/run-plain")" != "$(last_loss "$TMP/g-whole")" ] && ok ||
    bad "--group-by-length trained on the same batches as plain shuffling"

echo "test_cli_cache: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
