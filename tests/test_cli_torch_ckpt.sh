#!/usr/bin/env bash
# gpt2-classify --model on PyTorch and sharded HF folders: tiny-gpt2 as pytorch_model.bin, as
# two .bin shards + index and as sharded safetensors (tests/golden/torch-ckpt, written by
# scripts/golden/gen_torch_ckpt_golden.py) must train and evaluate exactly like the single
# model.safetensors; a folder whose pytorch_model.bin REDUCEs posix.system is refused by name.
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/gpt2-classify"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
. "$SRC/tests/fixtures.sh"
TINY="$FIXTURES/tiny-gpt2"
G="$SRC/tests/golden/torch-ckpt"
pass=0
fail=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
[ -x "$BIN" ] || { echo "test_cli_torch_ckpt: $BIN not built"; exit 1; }
need_fixture "$TINY/model.safetensors" "$TINY/config.json" "$TINY/vocab.json" "$TINY/merges.txt"
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); printf 'FAILED: %s\n' "$1" >&2; }

mkdir -p "$TMP/data"
head -n 33 "$ASSETS/glue-mrpc/train.tsv" > "$TMP/data/train.tsv"
head -n 17 "$ASSETS/glue-mrpc/dev.tsv" > "$TMP/data/dev.tsv"
run() { # run NAME MODEL_DIR: prints the dev results line
    "$BIN" --model "$2" --tokenizer "$TINY" --data-dir "$TMP/data" --max-len 32 --batch-size 8 \
        --threads 2 --max-steps 2 --save-dir "$TMP/run-$1" > "$TMP/out-$1" 2> "$TMP/err-$1" || return 1
    grep -q "28 tensors loaded" "$TMP/out-$1" "$TMP/err-$1" || return 1
    grep "dev results" "$TMP/out-$1"
}
ref=$(run ref "$TINY") && [ -n "$ref" ] && ok || bad "reference run on model.safetensors failed"
for d in gpt2-bin gpt2-bin-sharded gpt2-st-sharded; do
    got=$(run "$d" "$G/$d")
    if [ $? -eq 0 ] && [ "$got" = "$ref" ]; then ok; else bad "$d: '$got' differs from '$ref'"; sed 's/^/    /' "$TMP/err-$d" >&2; fi
done

mkdir -p "$TMP/hostile"
cp "$G/gpt2-bin/config.json" "$TMP/hostile/"
cp "$G/hostile_posix_system.pt" "$TMP/hostile/pytorch_model.bin"
"$BIN" --model "$TMP/hostile" --tokenizer "$TINY" --data-dir "$TMP/data" --max-steps 1 \
    --save-dir "$TMP/run-hostile" > "$TMP/out" 2> "$TMP/err"
rc=$?
[ $rc -eq 1 ] && grep -q "refusing pickle GLOBAL 'posix.system'" "$TMP/err" && ok ||
    { bad "hostile file: exit $rc"; sed 's/^/    /' "$TMP/err" >&2; }
[ ! -e "$TMP/run-hostile/predictions.tsv" ] && ok || bad "hostile run produced output"

echo "test_cli_torch_ckpt: $pass passed, $fail failed"
[ $fail -eq 0 ]
