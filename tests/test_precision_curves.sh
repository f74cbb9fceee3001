#!/usr/bin/env bash
# --precision bf16 and fp16 against fp32 over 200 training steps of every family (GPT-2, BERT, T5
# gated, GLM COPA; small models, dropout on, the same seed and data): every step's loss stays
# within 1% of fp32's and the mean of the last 20 within 0.5%, and the curves are not identical
# (the matmul inputs and stored activations really were rounded; fp16 runs with loss scaling).
# Measured on the development machine (VERBOSE=1 prints it), the worst step: bf16 0.54% (GLM),
# 0.07% (GPT-2), 0.03% (BERT), 0.02% (T5); fp16 0.08% (GLM), 0.01% (GPT-2), 0.006% (BERT),
# 0.002% (T5).
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
. "$SRC/tests/fixtures.sh"
need_fixture "$ASSETS/glue-mrpc/train.tsv" "$ASSETS/multi30k-en-de/val.en" "$ASSETS/multi30k-en-de/val.de" \
    "$ASSETS/bert-wordpiece/bert-base-uncased-vocab.txt"
pass=0
fail=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); printf 'FAILED: %s\n' "$1" >&2; }

. "$SRC/tests/curve_workloads.sh"
curve_setup "$ASSETS" "$TMP"
RUN=(--max-steps 200 --log-interval 1 --eval-interval -1 --save-interval -1 --threads 2)

for p in fp32 bf16 fp16; do
    for prog in gpt2-classify bert-classify t5-finetune glm-finetune; do
        curve_train "$BIN" "$TMP" $prog "${RUN[@]}" --precision $p --save-dir "$TMP/${prog%%-*}-$p" > /dev/null \
            2> "$TMP/err" || bad "$prog --precision $p: $(tail -1 "$TMP/err")"
    done
done

# losses FILE: one train loss per line, in step order
losses() { grep '"type":"train"' "$1" | sed 's/.*"loss":\([0-9.eE+-]*\).*/\1/'; }
for run in gpt2-bf16 bert-bf16 t5-bf16 glm-bf16 gpt2-fp16 bert-fp16 t5-fp16 glm-fp16; do
    fam=${run%-*}
    losses "$TMP/$fam-fp32/metrics.jsonl" > "$TMP/a"
    losses "$TMP/$run/metrics.jsonl" > "$TMP/b"
    verdict=$(paste "$TMP/a" "$TMP/b" | awk -v steps=200 -v band=0.01 -v tail=0.005 -v differ=1 -f "$SRC/tests/loss_band.awk")
    case "$verdict" in
    ok*) ok; [ -n "${VERBOSE:-}" ] && echo "$run: worst step $verdict" ;;
    *) bad "$run vs fp32 over 200 steps: $verdict" ;;
    esac
done

echo "test_precision_curves: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
