#!/usr/bin/env bash
# End-to-end checks of tz-tokenize: ids, --pieces, --decode, --pair, --help and the exit codes
# for usage (2), load and input (1) errors, invalid UTF-8 among the latter. Expected ids are HF's
# (GPT2Tokenizer / RobertaTokenizer / BertTokenizer).
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/tz-tokenize"
. "$(dirname "$0")/fixtures.sh"
GPT2="$ASSETS/gpt2-bpe"
ROB="$FIXTURES/roberta-bpe/roberta-vocab.json"
BERT_UNCASED="$ASSETS/bert-wordpiece/bert-base-uncased-vocab.txt"
BERT_CASED="$FIXTURES/bert-wordpiece/bert_base_cased_vocab.txt"
T5="$ASSETS/t5-spiece/spiece.model"
GLM="$ASSETS/glm-chinese-spm/cog-pretrain.model"
need_fixture "$GPT2/encoder.json" "$GPT2/vocab.bpe" "$ROB" "$FIXTURES/tiny-gpt2/vocab.json" "$BERT_UNCASED" \
    "$BERT_CASED" "$T5" "$GLM" "$ASSETS/glue-mrpc/dev.tsv"
pass=0
fail=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ ! -x "$BIN" ]; then
    echo "test_cli_tokenize: $BIN not built"
    exit 1
fi

check() { # name, expected, actual
    if [ "$2" == "$3" ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        printf 'FAILED: %s\n  want: %q\n  got:  %q\n' "$1" "$2" "$3" >&2
    fi
}

printf 'Hello world\n a <|endoftext|> b\n\n' | "$BIN" --tokenizer "$GPT2" > "$TMP/out.txt"
check "ids rc" 0 $?
check "ids" $'15496 995\n257 220 50256 275\n\nx' "$(cat "$TMP/out.txt"; echo x)"
check "empty line gives an empty line" 3 "$(wc -l < "$TMP/out.txt")"
got=$(printf "don't stop\n" | "$BIN" --tokenizer "$GPT2/encoder.json" --pieces)
check "pieces" "don 't Ġstop" "$got"
got=$(printf '15496 995\n31373\n\n447\n' | "$BIN" --tokenizer "$GPT2" --decode)
check "decode" $'Hello world\nhello\n\n\xef\xbf\xbd' "$got"
got=$(printf 'hello\tworld\nhello\n' | "$BIN" --tokenizer "$ROB" --pair)
check "roberta pair" $'0 42891 2 2 8331 2\n0 42891 2' "$got"
got=$(printf 'hello\tworld\n' | "$BIN" --tokenizer "$GPT2" --pair)
check "gpt2 pair" "31373 6894" "$got"
got=$(printf 'Hello world\n' | "$BIN" --tokenizer "$FIXTURES/tiny-gpt2")
check "tiny-gpt2 dir" "15496 995" "$got"

# BERT WordPiece: a vocab.txt, a folder holding one (--pair adds [CLS] a [SEP] b [SEP]), the cased
# vocab (its name says cased), decode
got=$(printf 'Hello, world!\n' | "$BIN" --tokenizer "$BERT_UNCASED")
check "bert vocab.txt" "7592 1010 2088 999" "$got"
mkdir "$TMP/bert" && cp "$BERT_UNCASED" "$TMP/bert/vocab.txt"
got=$(printf 'hello\tworld\nhello\n' | "$BIN" --tokenizer "$TMP/bert" --pair)
check "bert dir pair" $'101 7592 102 2088 102\n101 7592 102' "$got"
got=$(printf 'Hello, Führer!\n' | "$BIN" --tokenizer "$BERT_CASED" --pieces)
check "bert cased pieces" "Hello , F ##ührer !" "$got"
got=$(printf '101 7592 1010 2088 999 102\n' | "$BIN" --tokenizer "$TMP/bert" --decode)
check "bert decode" "[CLS] hello, world! [SEP]" "$got"
printf '[PAD]\n[UNK]\n[SEP]\nx\n' > "$TMP/bad-vocab.txt"
"$BIN" --tokenizer "$TMP/bad-vocab.txt" < /dev/null 2> "$TMP/err.txt"
check "bert vocab without [CLS] rc" 1 $?
check "bert vocab without [CLS] message" 1 "$(grep -c "bad-vocab.txt: .*\[CLS\]" "$TMP/err.txt")"

# T5 SentencePiece through the same tok_load: the .model file or a folder holding spiece.model;
# sentinels in the text, --pair appends </s> to each side, decode is the slow T5Tokenizer's
got=$(printf 'Hello world\nHello <extra_id_0>.\n' | "$BIN" --tokenizer "$T5")
check "t5 ids" $'8774 296\n8774 32099 3 5' "$got"
mkdir "$TMP/t5" && cp "$T5" "$TMP/t5/spiece.model"
got=$(printf 'Hello world\tHallo Welt\n' | "$BIN" --tokenizer "$TMP/t5" --pair)
check "t5 dir pair" "8774 296 1 2501 32 3779 1" "$got"
got=$(printf 'Hello <extra_id_0>.\n' | "$BIN" --tokenizer "$T5" --pieces)
check "t5 pieces" $'\xe2\x96\x81Hello <extra_id_0> \xe2\x96\x81 .' "$got"
got=$(printf '8774 32099 3 5 1\n' | "$BIN" --tokenizer "$T5" --decode)
check "t5 decode" "Hello <extra_id_0> .</s>" "$got"

# GLM's Chinese SentencePiece: cog-pretrain.model loads as GLM's tokenizer, [MASK] in the text is
# one command token (FlagAI GLMLargeChTokenizer's ids), decode glues command tokens to the text
got=$(printf '今天吃饭吃了肯德基\n北京故宫是中国 [MASK]非物质文化遗产。\n' | "$BIN" --tokenizer "$GLM")
check "glm ids" $'3378 1567 2613 20282\n2531 17450 3005 50003 4918 1098 10511 43361' "$got"
got=$(printf '50002 3378 50003 50009\n' | "$BIN" --tokenizer "$GLM" --decode)
check "glm decode" "[CLS]今天[MASK][gMASK]" "$got"

# round trip over MRPC sentences through ids and back
cut -f4 "$ASSETS/glue-mrpc/dev.tsv" | tail -n +2 > "$TMP/in.txt"
"$BIN" --tokenizer "$GPT2" < "$TMP/in.txt" > "$TMP/ids.txt"
"$BIN" --tokenizer "$GPT2" --decode < "$TMP/ids.txt" > "$TMP/back.txt"
check "mrpc round trip" "" "$(cmp "$TMP/in.txt" "$TMP/back.txt" 2>&1)"
check "mrpc line count" "$(wc -l < "$TMP/in.txt")" "$(wc -l < "$TMP/ids.txt")"

"$BIN" --help > "$TMP/help.txt"
check "help rc" 0 $?
for opt in tokenizer decode pieces pair; do
    check "help mentions --$opt" 1 "$(grep -c -- "^  --$opt" "$TMP/help.txt")"
done

"$BIN" --tokenizer "$GPT2" --bogus < /dev/null 2> "$TMP/err.txt"
check "unknown option rc" 2 $?
check "unknown option message" 1 "$(grep -c "unknown option '--bogus'" "$TMP/err.txt")"
"$BIN" < /dev/null 2> "$TMP/err.txt"
check "missing --tokenizer rc" 2 $?
check "missing --tokenizer message" 1 "$(wc -l < "$TMP/err.txt")"
"$BIN" --tokenizer "$TMP/nope" < /dev/null 2> "$TMP/err.txt"
check "missing file rc" 1 $?
check "missing file message" 1 "$(grep -c "$TMP/nope" "$TMP/err.txt")"
printf 'a b\nx\n' > "$TMP/merges.txt"
printf '{"a":0,"b":1,"ab":2}' > "$TMP/vocab.json"
"$BIN" --tokenizer "$TMP" < /dev/null 2> "$TMP/err.txt"
check "broken merges rc" 1 $?
check "broken merges names file:line" 1 "$(grep -c "merges.txt:2:" "$TMP/err.txt")"
printf '1 2\n3 x\n' | "$BIN" --tokenizer "$GPT2" --decode > /dev/null 2> "$TMP/err.txt"
check "bad id line rc" 1 $?
check "bad id line names stdin:2" 1 "$(grep -c "stdin:2:" "$TMP/err.txt")"
"$BIN" --tokenizer "$GPT2" --decode --pair < /dev/null 2> /dev/null
check "--decode --pair rc" 2 $?
# invalid UTF-8 in text: one message naming stdin:LINE and the byte (t5-finetune's wording), in
# every text mode and for every tokenizer kind, after the good lines before it were written
printf 'ok\n\xff bad\n' | "$BIN" --tokenizer "$GPT2" > "$TMP/out.txt" 2> "$TMP/err.txt"
check "invalid utf-8 rc" 1 $?
check "invalid utf-8 message" "tz-tokenize: error: stdin:2: invalid UTF-8 at byte 1 of the line" "$(cat "$TMP/err.txt")"
check "invalid utf-8: earlier lines written" "482" "$(cat "$TMP/out.txt")"
printf 'a\tcaf\xc3\n' | "$BIN" --tokenizer "$ROB" --pair > /dev/null 2> "$TMP/err.txt"
check "invalid utf-8 --pair rc" 1 $?
check "invalid utf-8 --pair message" 1 "$(grep -c "stdin:1: invalid UTF-8 at byte 6 of the line" "$TMP/err.txt")"
for tok in "$BERT_UNCASED" "$T5"; do
    printf 'x \xed\xa0\x80\n' | "$BIN" --tokenizer "$tok" --pieces > /dev/null 2> "$TMP/err.txt"
    check "invalid utf-8 --pieces rc ($tok)" 1 $?
    check "invalid utf-8 --pieces message ($tok)" 1 \
        "$(grep -c "stdin:1: invalid UTF-8 at byte 3 of the line" "$TMP/err.txt")"
done
# an id outside the vocabulary: the whole message, once, after its line
printf '5 6\n7 -1\n' | "$BIN" --tokenizer "$GPT2" --decode > /dev/null 2> "$TMP/err.txt"
check "id out of range rc" 1 $?
check "id out of range message" "tz-tokenize: error: stdin:2: id -1 (position 1) is not in the vocabulary of 50257 ids" \
    "$(cat "$TMP/err.txt")"

echo "test_cli_tokenize: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
