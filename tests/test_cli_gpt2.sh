#!/usr/bin/env bash
# gpt2-classify end to end on a tiny GPT-2 (1 layer, 16 wide) and a 64-row slice of MRPC:
# train + eval + checkpoint, --resume, the run folder's lock, --predict, --help, and every bad
# input docs/checkpoints.md promises a one-line error for (exit 1, or 2 for usage), with the last good
# checkpoint left byte-identical.
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/gpt2-classify"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
[ -x "$BIN" ] || { echo "test_cli_gpt2: $BIN not built"; exit 1; }
BIN_DIR=$(dirname "$BIN")
. "$SRC/tests/cli_lib.sh" # pass and fail, ok, bad, expect_fail NAME RC PATTERN PROGRAM ARGS...
# gpt2_fail NAME RC PATTERN ARGS...: cli_lib's expect_fail for gpt2-classify (one stderr line, exit RC)
gpt2_fail() {
    local name=$1 rc=$2 pattern=$3
    shift 3
    expect_fail "$name" "$rc" "$pattern" gpt2-classify "$@"
}

# a tiny model and a small data slice
cat > "$TMP/arch.json" <<JSON
{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 16, "n_layer": 1, "n_head": 2}
JSON
mkdir -p "$TMP/data"
head -n 65 "$SRC/assets/glue-mrpc/train.tsv" > "$TMP/data/train.tsv"
head -n 33 "$SRC/assets/glue-mrpc/dev.tsv" > "$TMP/data/dev.tsv"
COMMON=(--arch "$TMP/arch.json" --data-dir "$TMP/data" --max-len 48 --batch-size 8 --threads 2)

# train, evaluate, checkpoint
"$BIN" "${COMMON[@]}" --max-steps 4 --log-interval 2 --save-dir "$TMP/run" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && ok || bad "training run failed"
grep -q "dev results (mrpc, 32 examples, step 4): loss .* accuracy .* f1 " "$TMP/out" && ok || bad "no dev results line"
# the start-up log names the processor and the GEMM engine that runs (oneDNN's kernel, or OpenBLAS)
grep -q "^device cpu: .*; GEMM \(oneDNN .*, bf16 \(native\|emulated\)\|OpenBLAS\)" "$TMP/out" && ok ||
    bad "no device line naming the GEMM engine"
# ... and on a CPU with native bf16 matmuls, an fp32 run suggests --precision bf16
if grep -q "bf16 native" "$TMP/out"; then
    grep -q "^hint: this CPU has native bf16 matmuls; --precision bf16" "$TMP/out" && ok || bad "no --precision bf16 hint"
fi
grep -q '"type":"train","step":2' "$TMP/run/metrics.jsonl" && ok || bad "metrics.jsonl lacks the step-2 line"
grep -q '"type":"eval"' "$TMP/run/metrics.jsonl" && ok || bad "metrics.jsonl lacks an eval line"
[ -f "$TMP/run/step-00000004.tzck" ] || [ -n "$(ls "$TMP/run"/step-*4.tzck 2>/dev/null)" ] && ok || bad "no step-4 checkpoint"
# the step line's model TFLOP/s, and MFU against a given peak
grep -q "tokens/s | [0-9.e+-]* TFLOP/s$" "$TMP/out" && ok || bad "the step line lacks TFLOP/s"
"$BIN" "${COMMON[@]}" --max-steps 2 --log-interval 1 --eval-interval -1 --peak-tflops 0.5 --save-dir "$TMP/mfu" \
    > "$TMP/out" 2> "$TMP/err" && grep -q "TFLOP/s | MFU [0-9.]*%" "$TMP/out" &&
    grep -q '"mfu":' "$TMP/mfu/metrics.jsonl" && ok || bad "--peak-tflops gives no MFU"

# the last step's checkpoint is written once, also where --save-interval lands on it
"$BIN" "${COMMON[@]}" --max-steps 4 --save-interval 2 --eval-interval -1 --save-dir "$TMP/once" > "$TMP/out" 2> "$TMP/err" &&
    [ "$(grep -c "saved checkpoint $TMP/once/step-000004.tzck" "$TMP/out")" -eq 1 ] && ok || bad "the last checkpoint saved twice"
# resume continues from step 4
"$BIN" "${COMMON[@]}" --max-steps 6 --save-dir "$TMP/run" --resume > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && ok || bad "resume run failed"
grep -q "resumed from .*step.*4" "$TMP/out" && ok || bad "resume did not start from step 4"
grep -q "step 6)" "$TMP/out" && ok || bad "resumed run did not reach step 6"

# --precision bf16: bf16 matmul inputs and stored activations, fp32 weights and statistics. It resumes a fp32 checkpoint (the
# masters are fp32), its own resume continues to the same last digit, and its losses stay
# within 1e-2 of fp32's on this run
"$BIN" "${COMMON[@]}" --save-dir "$TMP/run" --resume --precision bf16 --max-steps 8 \
    --save-interval 2 --keep 5 --eval-interval -1 > "$TMP/out" 2> "$TMP/err" &&
    grep -q "^precision: bf16 matmul inputs" "$TMP/out" && grep -q "resumed from .*step.*6" "$TMP/out" && ok ||
    bad "--precision bf16 resuming a fp32 checkpoint"
for p in fp32 bf16; do
    "$BIN" "${COMMON[@]}" --max-steps 4 --log-interval 1 --eval-interval -1 --save-interval 2 --keep 5 --precision $p \
        --save-dir "$TMP/prec-$p" > /dev/null 2> "$TMP/err" || bad "--precision $p run"
done
l32=$(grep '"train"' "$TMP/prec-fp32/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e-]*\).*/\1/')
l16=$(grep '"train"' "$TMP/prec-bf16/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e-]*\).*/\1/')
awk -v a="$l32" -v b="$l16" 'BEGIN { d = a - b; exit !(a != "" && b != "" && d < 1e-2 && d > -1e-2 && a != b) }' &&
    ok || bad "bf16's step-4 loss $l16 is not within 1e-2 of fp32's $l32 (or equals it: no rounding)"
mkdir -p "$TMP/prec-resume" && cp "$TMP/prec-bf16"/step-*2.tzck "$TMP/prec-resume/"
"$BIN" "${COMMON[@]}" --max-steps 4 --log-interval 1 --eval-interval -1 --save-interval 2 --keep 5 --precision bf16 \
    --save-dir "$TMP/prec-resume" --resume > "$TMP/out" 2> "$TMP/err"
grep -q "resumed from .*step.*2" "$TMP/out" && ok || bad "bf16 resume did not start from step 2"
lr=$(grep '"train"' "$TMP/prec-resume/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e-]*\).*/\1/')
[ -n "$lr" ] && [ "$lr" = "$l16" ] && ok || bad "bf16 resume: step-4 loss $lr vs $l16"
# --precision fp16: fp16 matmul inputs and stored activations, with dynamic loss scaling. A
# first scale of 2^24 overflows fp16 in the backward (a real overflow, not an injected flag):
# those steps are skipped and halve the scale (hysteresis 1), the step line says so, and a run
# resumed from the step-3 checkpoint (the scaler's state inside) ends as the whole run does.
FP16=(--max-steps 8 --log-interval 1 --eval-interval -1 --save-interval 3 --keep 5 --precision fp16
    --loss-scale-power 24 --loss-scale-hysteresis 1)
"$BIN" "${COMMON[@]}" "${FP16[@]}" --save-dir "$TMP/fp16" > "$TMP/out" 2> "$TMP/err" || bad "--precision fp16 run"
grep -q "^precision: fp16 matmul inputs .*dynamic loss scaling" "$TMP/out" && ok || bad "no fp16 precision line"
grep -q "^step 1/8 .*| grad_norm overflow | .*| loss scale 8.38861e+06 | skipped 1" "$TMP/out" && ok ||
    bad "a 2^24 loss scale did not overflow and halve at step 1"
skipped=$(grep '^step 8/8' "$TMP/out" | sed 's/.*skipped \([0-9]*\).*/\1/')
[ -n "$skipped" ] && [ "$skipped" -ge 1 ] && [ "$skipped" -lt 8 ] && ok ||
    bad "fp16: $skipped skipped steps of 8 (want some, not all)"
mkdir -p "$TMP/fp16-resume" && cp "$TMP/fp16"/step-*3.tzck "$TMP/fp16-resume/"
"$BIN" "${COMMON[@]}" "${FP16[@]}" --save-dir "$TMP/fp16-resume" --resume > "$TMP/out2" 2> "$TMP/err" ||
    bad "fp16 resume run"
# final FOLDER: the last train line's loss, grad norm, loss scale and skipped steps
final() { grep '"train"' "$1/metrics.jsonl" | tail -1 | grep -o '"\(loss\|grad_norm\|loss_scale\|skipped_steps\)":[^,}]*'; }
[ -n "$(final "$TMP/fp16")" ] && [ "$(final "$TMP/fp16")" = "$(final "$TMP/fp16-resume")" ] &&
    ok || bad "fp16 resumed at step 3 does not end as the whole run (loss, scale, skipped)"
# resume across precisions: the fp16 run's step-3 checkpoint continues in fp32
mkdir -p "$TMP/fp16-to-32" && cp "$TMP/fp16"/step-*3.tzck "$TMP/fp16-to-32/"
"$BIN" "${COMMON[@]}" --max-steps 5 --eval-interval -1 --save-dir "$TMP/fp16-to-32" --resume > "$TMP/out" 2> "$TMP/err" &&
    grep -q "resumed from .*step.*3" "$TMP/out" && ok || bad "an fp16 checkpoint does not resume in fp32"

# one run per --save-dir: a second run on a folder in use is refused with one line naming the
# holder, and the folder is free again once the holder is killed (SIGKILL leaves no stale lock)
"$BIN" "${COMMON[@]}" --max-steps 100000 --save-interval 0 --save-dir "$TMP/busy" > /dev/null 2>&1 &
holder=$!
for _ in $(seq 100); do grep -q "^pid $holder " "$TMP/busy/.lock" 2> /dev/null && break; sleep 0.1; done
gpt2_fail "a second run on a locked --save-dir" 1 "run folder $TMP/busy is in use by another run (pid $holder host " \
    "${COMMON[@]}" --max-steps 1 --save-dir "$TMP/busy"
kill -9 "$holder" 2> /dev/null
wait "$holder" 2> /dev/null
# ... and the next run there removes what a writer killed mid-checkpoint left, naming it. It
# passes --overwrite: on a loaded machine the holder may have logged a step (metrics.jsonl) before
# the kill, which makes the folder an earlier run's
touch "$TMP/busy/step-00000003.tzck.tmp.$holder.0"
mkdir -p "$TMP/busy/hf" && touch "$TMP/busy/hf/model.safetensors.tmp.$holder.1"
"$BIN" "${COMMON[@]}" --max-steps 1 --eval-interval -1 --save-dir "$TMP/busy" --overwrite > "$TMP/out" 2> "$TMP/err" && ok ||
    bad "the folder of a killed run stays locked"
[ ! -e "$TMP/busy/step-00000003.tzck.tmp.$holder.0" ] && grep -q "removed .*step-00000003.tzck.tmp.$holder.0" "$TMP/err" &&
    [ ! -e "$TMP/busy/hf/model.safetensors.tmp.$holder.1" ] &&
    ok || bad "a killed writer's temp file is left behind"

# a kill between a step's metrics record and its checkpoint: the resumed run replays those steps,
# and metrics.jsonl still holds each step once
"$BIN" "${COMMON[@]}" --max-steps 6 --save-interval 4 --log-interval 1 --eval-interval -1 --save-dir "$TMP/replay" \
    > /dev/null 2>&1 && ok || bad "replay: first run"
rm -f "$TMP/replay"/step-*6.tzck
printf '{"type":"train","step":7,"lo' >> "$TMP/replay/metrics.jsonl" # and a record cut short by the kill
"$BIN" "${COMMON[@]}" --max-steps 6 --save-interval 4 --log-interval 1 --eval-interval -1 --save-dir "$TMP/replay" \
    --resume > "$TMP/out" 2> "$TMP/err" && grep -q "resumed from .*step-0*4.tzck" "$TMP/out" && ok || bad "replay: resume"
steps=$(grep -o '"type":"train","step":[0-9]*' "$TMP/replay/metrics.jsonl" | grep -o '[0-9]*$' | tr '\n' ' ')
[ "$steps" = "1 2 3 4 5 6 " ] && [ "$(tail -c 1 "$TMP/replay/metrics.jsonl" | od -An -c | tr -d ' ')" = '\n' ] && ok ||
    bad "metrics.jsonl after a replay holds train steps '$steps'"

# a metrics record that cannot be written (a file-size limit stands in for a full disk) stops the
# run with one line naming the file
(ulimit -f 1 && exec "$BIN" "${COMMON[@]}" --max-steps 40 --log-interval 1 --eval-interval -1 --save-interval 0 \
    --save-dir "$TMP/full" > /dev/null 2> "$TMP/err")
rc=$?
[ $rc -eq 1 ] && [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "$TMP/full/metrics.jsonl: cannot write a record: File too large" \
    "$TMP/err" && ok || bad "a refused metrics write: exit $rc, '$(cat "$TMP/err")'"

# a damaged newest checkpoint: --resume falls back to the newest intact one, keeps the damaged
# file as NAME.corrupt, and ends where an undisturbed run ends (resume is bit-exact; a constant
# learning rate, so that a 4-step run's first steps are a 6-step run's)
R=(--max-steps 6 --save-interval 2 --keep 5 --log-interval 1 --schedule constant --warmup 0)
"$BIN" "${COMMON[@]}" "${R[@]}" --save-dir "$TMP/straight" > "$TMP/out" 2> "$TMP/err" && ok || bad "fallback: straight run"
want=$(grep "dev results" "$TMP/out")
"$BIN" "${COMMON[@]}" "${R[@]}" --max-steps 4 --save-dir "$TMP/fall" > /dev/null 2>&1 && ok || bad "fallback: first run"
newest=$(ls "$TMP/fall"/step-*4.tzck)
size=$(stat -c %s "$newest")
printf 'XXXX' | dd of="$newest" bs=1 seek=$((size / 2)) conv=notrunc status=none # damage its middle
"$BIN" "${COMMON[@]}" "${R[@]}" --save-dir "$TMP/fall" --resume > "$TMP/out" 2> "$TMP/err"
rc=$?
[ $rc -eq 0 ] && grep -q "resumed from .*step-0*2.tzck" "$TMP/out" && [ -f "$newest.corrupt" ] &&
    grep -q "$newest is damaged: kept as $newest.corrupt; resumed from .*step-0*2.tzck" "$TMP/err" && ok ||
    bad "fallback: exit $rc, '$(cat "$TMP/err")'"
[ -n "$want" ] && [ "$(grep "dev results" "$TMP/out")" = "$want" ] && ok || bad "fallback: the resumed run ends elsewhere"
# --resume-from names one file exactly: an intact one resumes, the damaged one is an error (no fallback)
"$BIN" "${COMMON[@]}" "${R[@]}" --save-dir "$TMP/fall2" --resume-from "$(ls "$TMP/fall"/step-*2.tzck)" > "$TMP/out" 2> "$TMP/err" &&
    grep -q "resumed from .*step-0*2.tzck" "$TMP/out" && [ "$(grep "dev results" "$TMP/out")" = "$want" ] && ok ||
    bad "--resume-from an intact file"
gpt2_fail "--resume-from a damaged file" 1 "$newest.corrupt" "${COMMON[@]}" "${R[@]}" --save-dir "$TMP/fall3" \
    --resume-from "$newest.corrupt"

# a checkpoint that cannot be written in full: one line naming it, the previous checkpoint
# byte-identical, no temp file left (a 16 KiB file-size limit: metrics fit, the model does not)
"$BIN" "${COMMON[@]}" --max-steps 2 --log-interval 100 --eval-interval -1 --save-dir "$TMP/ckfull" > /dev/null 2>&1
cp "$TMP/ckfull"/step-*2.tzck "$TMP/ck-before.tzck"
(ulimit -f 16 && exec "$BIN" "${COMMON[@]}" --max-steps 3 --log-interval 100 --eval-interval -1 --save-dir "$TMP/ckfull" \
    --resume > /dev/null 2> "$TMP/err")
rc=$?
[ $rc -eq 1 ] && [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "$TMP/ckfull/step-0*3.tzck: .*File too large" "$TMP/err" &&
    cmp -s "$TMP/ck-before.tzck" "$TMP/ckfull"/step-*2.tzck && [ -z "$(ls "$TMP/ckfull" | grep '\.tmp\.')" ] &&
    [ ! -e "$(ls "$TMP/ckfull"/step-*2.tzck | sed 's/2.tzck$/3.tzck/')" ] && ok ||
    bad "a refused checkpoint write: exit $rc, '$(cat "$TMP/err")'"

# --predict on the unlabelled test layout
head -n 11 "$SRC/assets/glue-mrpc/test.tsv" > "$TMP/test.tsv"
"$BIN" "${COMMON[@]}" --max-steps 1 --save-dir "$TMP/pred" --predict "$TMP/test.tsv" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && ok || bad "predict run failed"
[ "$(wc -l < "$TMP/pred/predictions.tsv" 2>/dev/null)" = "11" ] && ok || bad "predictions.tsv should have a header and 10 rows"
head -n 1 "$TMP/pred/predictions.tsv" | grep -q $'^index\tprediction\tprob_0\tprob_1$' && ok || bad "predictions header"
# --predict-out that cannot be written in full (a file-size limit stands in for a full disk): one
# line naming the file, the previous file byte-identical, no temp file left
head -n 101 "$SRC/assets/glue-mrpc/test.tsv" > "$TMP/test100.tsv"
cp "$TMP/pred/predictions.tsv" "$TMP/pred/keep.tsv"
(ulimit -f 1 && exec "$BIN" "${COMMON[@]}" --epochs 0 --save-dir "$TMP/pred" --predict "$TMP/test100.tsv" \
    --predict-out "$TMP/pred/keep.tsv" > /dev/null 2> "$TMP/err")
rc=$?
[ $rc -eq 1 ] && [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "$TMP/pred/keep.tsv: .*File too large" "$TMP/err" &&
    cmp -s "$TMP/pred/predictions.tsv" "$TMP/pred/keep.tsv" && [ -z "$(ls "$TMP/pred" | grep '\.tmp\.')" ] && ok ||
    bad "a refused --predict-out write: exit $rc, '$(cat "$TMP/err")'"

# --save-hf writes a folder that loads back as --model with every tensor (that Transformers
# loads it with the same outputs is checked by scripts/golden/check_hf_export.py)
"$BIN" "${COMMON[@]}" --max-steps 2 --save-dir "$TMP/hfrun" --save-hf "$TMP/hf" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && [ -f "$TMP/hf/config.json" ] && [ -f "$TMP/hf/model.safetensors" ] && [ -f "$TMP/hf/vocab.json" ] && ok || bad "--save-hf"
# an export over an earlier one that cannot be written in full (a file-size limit stands in for a
# full disk): one line, the earlier export whole and byte-identical, no partial folder left; one
# that succeeds replaces the export's files and keeps a user's own file beside them
echo "my notes" > "$TMP/hf/README.md"
hf_sums=$(cd "$TMP/hf" && sha256sum config.json model.safetensors vocab.json merges.txt README.md)
(ulimit -f 200 && exec "$BIN" "${COMMON[@]}" --max-steps 1 --eval-interval -1 --save-interval -1 --save-dir "$TMP/hfrun2" \
    --save-hf "$TMP/hf" > /dev/null 2> "$TMP/err")
rc=$?
[ $rc -eq 1 ] && [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -q "hf\.partial-.*/model.safetensors.*File too large" "$TMP/err" &&
    [ "$(cd "$TMP/hf" && sha256sum config.json model.safetensors vocab.json merges.txt README.md)" = "$hf_sums" ] &&
    [ -z "$(ls "$TMP" | grep 'hf\.partial-')" ] && ok || bad "a failed --save-hf over an export: exit $rc, $(ls "$TMP")"
# an export killed mid-write left its partial folder (its pid gone): the next export removes it
sleep 0 & deadpid=$!
wait $deadpid
mkdir -p "$TMP/hf.partial-$deadpid-0" && echo half > "$TMP/hf.partial-$deadpid-0/model.safetensors"
"$BIN" "${COMMON[@]}" --max-steps 1 --eval-interval -1 --save-dir "$TMP/hfrun3" --save-hf "$TMP/hf/" > /dev/null 2> "$TMP/err" &&
    ! cmp -s <(cd "$TMP/hf" && sha256sum model.safetensors) <(echo "$hf_sums" | grep model.safetensors) &&
    [ "$(cat "$TMP/hf/README.md")" = "my notes" ] && [ -f "$TMP/hf/vocab.json" ] &&
    [ -z "$(ls "$TMP" | grep 'hf\.partial-')" ] && ok || bad "--save-hf over an export: $(ls "$TMP/hf")"
rm "$TMP/hf/README.md"
"$BIN" --model "$TMP/hf" --data-dir "$TMP/data" --max-len 48 --epochs 0 --save-dir "$TMP/hfeval" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && grep -q "weights: pretrained weights from --model .*: [0-9]* tensors loaded$" "$TMP/out" && ok || bad "reload of --save-hf output"
grep -q "dev results (mrpc, 32 examples, step 0)" "$TMP/out" && ok || bad "--epochs 0 evaluates only"
[ -z "$(ls "$TMP/hfeval"/*.tzck 2>/dev/null)" ] && ok || bad "--epochs 0 should write no checkpoint"

# without --model, an HF 'gpt2' in the local HF cache is used (tiny-gpt2 stands in for it)
. "$SRC/tests/fixtures.sh"
need_fixture "$FIXTURES/tiny-gpt2/model.safetensors"
snap="$TMP/hfhome/hub/models--gpt2/snapshots/0123abc"
mkdir -p "$snap" && cp "$FIXTURES/tiny-gpt2/"{config.json,model.safetensors,vocab.json,merges.txt} "$snap/"
HF_HOME="$TMP/hfhome" "$BIN" --data-dir "$TMP/data" --max-len 48 --max-steps 1 --save-dir "$TMP/cache" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && grep -q "pretrained gpt2 from the local HF cache" "$TMP/out" && grep -q "newly initialized: score.weight" "$TMP/out" && ok || bad "HF cache gpt2"

# --help tells the options
"$BIN" --help > "$TMP/out" 2>&1 && grep -q -- "--batch-size" "$TMP/out" && grep -q -- "--resume" "$TMP/out" && ok || bad "--help"

# bad inputs; the last good checkpoint must survive each of them untouched
ckpt=$(ls "$TMP/run"/step-*.tzck | tail -n 1)
sum_before=$(sha256sum "$ckpt" | cut -d' ' -f1)
gpt2_fail "unknown option" 2 "did you mean --batch-size" --batch-sise 4
gpt2_fail "batch size 0" 2 "batch-size" --batch-size 0
gpt2_fail "bad number" 2 "expected a number" --lr fast
# a usage error and its hint are one line, not a newline printed escaped (\x0a)
if [ "$(cat "$TMP/err")" = "gpt2-classify: error: --lr: expected a number, got 'fast'; usage: gpt2-classify [options] (see --help)" ]; then
    ok
else
    bad "usage error: one line with its hint"
fi
gpt2_fail "unknown dataset" 2 "not one of" --dataset squad
gpt2_fail "ZeRO stage 4" 2 "zero" --zero 4
gpt2_fail "length buckets out of order" 2 "--length-buckets 32,16: lengths must ascend" "${COMMON[@]}" \
    --length-buckets 32,16
gpt2_fail "length buckets short of --max-len" 2 "the largest bucket, 32, is shorter than --max-len (48 tokens)" \
    "${COMMON[@]}" --length-buckets 16,32
# --length-buckets: every training batch's length is one of the buckets (without them one batch is
# 63 long), and with dropout off the numbers are the run's without buckets (the padding is masked),
# within rounding
cat > "$TMP/arch0.json" <<JSON
{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 16, "n_layer": 1, "n_head": 2,
 "resid_pdrop": 0, "embd_pdrop": 0, "attn_pdrop": 0}
JSON
B0=(--arch "$TMP/arch0.json" --data-dir "$TMP/data" --max-len 64 --batch-size 8 --threads 2 --max-steps 4
    --log-interval 1 --eval-interval -1 --save-interval -1)
lengths() { grep -o '"batch_shape":\[[0-9]*,[0-9]*' "$1/metrics.jsonl" | cut -d, -f2 | sort -u | tr '\n' ' '; }
"$BIN" "${B0[@]}" --length-buckets 40,64 --save-dir "$TMP/buckets" > "$TMP/out" 2> "$TMP/err" &&
    "$BIN" "${B0[@]}" --save-dir "$TMP/nobuckets" > "$TMP/out" 2> "$TMP/err" || bad "--length-buckets runs"
if [ "$(lengths "$TMP/buckets")" = "64 " ] && [ "$(lengths "$TMP/nobuckets")" = "63 64 " ] &&
    paste <(final "$TMP/buckets" | cut -d: -f2) <(final "$TMP/nobuckets" | cut -d: -f2) |
        awk '{d=$1-$2; if (d<0) d=-d; if (d > 1e-5 + 1e-4*($1<0?-$1:$1)) bad=1} END {exit bad}'; then
    ok
else
    bad "--length-buckets 40,64: batch lengths '$(lengths "$TMP/buckets")' (without: '$(lengths "$TMP/nobuckets")'), or the numbers differ"
fi
gpt2_fail "--offload-params without ZeRO-3" 2 "--offload-params needs --zero 3" --zero 2 --offload-params
gpt2_fail "task without data" 2 "needs --data-dir" --dataset mnli
mkdir -p "$TMP/m_missing" && cp "$SRC/tests/golden/gpt2-tiny-cls/config.json" "$TMP/m_missing/"
gpt2_fail "missing safetensors" 1 "model.safetensors" --model "$TMP/m_missing" --save-dir "$TMP/run" --overwrite
mkdir -p "$TMP/m_trunc" && cp "$TMP/arch.json" "$TMP/m_trunc/config.json"
head -c 5000 "$SRC/tests/golden/gpt2-tiny-cls/model.safetensors" > "$TMP/m_trunc/model.safetensors"
gpt2_fail "truncated safetensors" 1 "model.safetensors" --model "$TMP/m_trunc" --max-len 48 --save-dir "$TMP/run" --overwrite
mkdir -p "$TMP/m_corrupt" && cp "$TMP/arch.json" "$TMP/m_corrupt/config.json"
{ printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a": nonsense!}'; head -c 100 /dev/zero; } > "$TMP/m_corrupt/model.safetensors"
gpt2_fail "corrupt safetensors" 1 "model.safetensors" --model "$TMP/m_corrupt" --max-len 48 --save-dir "$TMP/run" --overwrite
mkdir -p "$TMP/m_bert" && sed 's/"gpt2"/"bert"/' "$SRC/tests/golden/gpt2-tiny-cls/config.json" > "$TMP/m_bert/config.json"
cp "$SRC/tests/golden/gpt2-tiny-cls/model.safetensors" "$TMP/m_bert/"
gpt2_fail "wrong model_type" 1 "model_type" --model "$TMP/m_bert" --save-dir "$TMP/run" --overwrite
# weights of which no tensor is the model's (an empty state dict, another model's names): an
# error, not a random model trained under the name of a pretrained one
mkdir -p "$TMP/m_empty" "$TMP/m_other" && cp "$TMP/arch.json" "$TMP/m_empty/config.json" &&
    cp "$TMP/arch.json" "$TMP/m_other/config.json"
{ printf '\x02\x00\x00\x00\x00\x00\x00\x00{}'; } > "$TMP/m_empty/model.safetensors"
hdr='{"foo":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
{ printf "$(printf '\\x%02x' ${#hdr})"'\x00\x00\x00\x00\x00\x00\x00'; printf '%s' "$hdr"; head -c 8 /dev/zero; } \
    > "$TMP/m_other/model.safetensors"
gpt2_fail "weights with no tensor" 1 "m_empty/model.safetensors: no tensor in it is a parameter of this model (it holds 0" \
    --model "$TMP/m_empty" --data-dir "$TMP/data" --max-len 48 --save-dir "$TMP/run" --overwrite
gpt2_fail "another model's weights" 1 "it holds 1 tensor, the first 'foo'; the model's first is 'wte.weight'" \
    --model "$TMP/m_other" --data-dir "$TMP/data" --max-len 48 --save-dir "$TMP/run" --overwrite
mkdir -p "$TMP/d_col" && cp "$TMP/data/dev.tsv" "$TMP/d_col/" && head -n 5 "$TMP/data/train.tsv" > "$TMP/d_col/train.tsv"
printf '1\t2\t3\tonly four columns\n' >> "$TMP/d_col/train.tsv"
gpt2_fail "TSV missing column" 1 "train.tsv:6" "${COMMON[@]}" --data-dir "$TMP/d_col" --save-dir "$TMP/run" --overwrite
mkdir -p "$TMP/d_lab" && cp "$TMP/data/dev.tsv" "$TMP/d_lab/" && head -n 5 "$TMP/data/train.tsv" > "$TMP/d_lab/train.tsv"
printf 'yes\t1\t2\ta\tb\n' >> "$TMP/d_lab/train.tsv"
gpt2_fail "non-numeric label" 1 "train.tsv:6" "${COMMON[@]}" --data-dir "$TMP/d_lab" --save-dir "$TMP/run" --overwrite
# a control byte in the input is quoted escaped, never sent to the terminal as it is
mkdir -p "$TMP/d_esc" && cp "$TMP/data/dev.tsv" "$TMP/d_esc/" && head -n 5 "$TMP/data/train.tsv" > "$TMP/d_esc/train.tsv"
printf 'x\x1b[31mRED\t1\t2\ta\tb\n' >> "$TMP/d_esc/train.tsv"
gpt2_fail "an ESC in a label" 1 "found 'x\\\\x1b\\[31mRED'" "${COMMON[@]}" --data-dir "$TMP/d_esc" --save-dir "$TMP/run" \
    --overwrite
! grep -q $'\x1b' "$TMP/err" && ok || bad "an ESC reached stderr as it is"
mkdir -p "$TMP/tok" && cp "$SRC/assets/gpt2-bpe/encoder.json" "$TMP/tok/vocab.json"
{ head -n 3 "$SRC/assets/gpt2-bpe/vocab.bpe"; echo "onlyonetoken"; } > "$TMP/tok/merges.txt"
gpt2_fail "broken merges line" 1 "merges.txt:4" "${COMMON[@]}" --tokenizer "$TMP/tok" --save-dir "$TMP/run" --overwrite
# a config that is no file (issue 34): /dev/zero and /dev/urandom never end, a FIFO waits for a
# writer; each is one line naming the option and what the path is
mkfifo "$TMP/fifo"
gpt2_fail "--config /dev/zero" 1 "--config: /dev/zero: a character device, not a file to read" \
    --config /dev/zero "${COMMON[@]}"
gpt2_fail "--deepspeed-config /dev/urandom" 1 "--deepspeed-config: /dev/urandom: a character device" \
    --deepspeed-config /dev/urandom "${COMMON[@]}"
gpt2_fail "--config FIFO" 1 "--config: $TMP/fifo: a FIFO, not a file to read" --config "$TMP/fifo" "${COMMON[@]}"
# configs that say two things, or something no run can use (issue 34's minor items)
printf '{"lr": 0.1} trailing' > "$TMP/c_trail.json"
gpt2_fail "--config with text after the object" 1 "c_trail.json:1: not a valid JSON object, or text follows it" \
    --config "$TMP/c_trail.json" "${COMMON[@]}"
printf '{"lr": 0.1, "lr": 0.2}' > "$TMP/c_dup.json"
gpt2_fail "--config with a key twice" 1 'c_dup.json: "lr" is given twice' --config "$TMP/c_dup.json" "${COMMON[@]}"
echo '{"fp16": {"enabled": true}, "bf16": {"enabled": true}}' > "$TMP/ds_both.json"
gpt2_fail "DeepSpeed fp16 and bf16 both on" 1 "ds_both.json: fp16.enabled and bf16.enabled are both true" \
    --deepspeed-config "$TMP/ds_both.json" "${COMMON[@]}"
echo '{"zero_optimization": 3}' > "$TMP/ds_zero.json"
gpt2_fail "DeepSpeed zero_optimization as a number" 1 "field 'zero_optimization' must be an object" \
    --deepspeed-config "$TMP/ds_zero.json" "${COMMON[@]}"
sed 's/}$/, "layer_norm_epsilon": -1}/' "$TMP/arch.json" > "$TMP/eps.json"
gpt2_fail "layer_norm_epsilon -1" 1 "field 'layer_norm_epsilon' is -1, expected a positive number" \
    --arch "$TMP/eps.json" --data-dir "$TMP/data" --max-len 48 --max-steps 1 --save-dir "$TMP/eps"
touch "$TMP/a_file"
gpt2_fail "unwritable save dir" 1 "save-dir" "${COMMON[@]}" --save-dir "$TMP/a_file/sub"
[ "$(sha256sum "$ckpt" | cut -d' ' -f1)" = "$sum_before" ] && ok || bad "the last good checkpoint changed"
# one run a folder (issue 34): a new run where another left checkpoints is refused with the ways
# out, its checkpoints and metrics untouched; --overwrite replaces that run, once training starts
mkdir -p "$TMP/used" && "$BIN" "${COMMON[@]}" --max-steps 3 --save-interval 1 --keep 5 --eval-interval -1 \
    --save-dir "$TMP/used" > /dev/null 2>&1 || bad "the earlier run in used/"
sums=$(cd "$TMP/used" && sha256sum step-*.tzck metrics.jsonl)
gpt2_fail "a new run in a used --save-dir" 2 \
    "save-dir $TMP/used holds an earlier run (step-000003.tzck and older checkpoints, metrics.jsonl): pass --resume" \
    "${COMMON[@]}" --max-steps 2 --save-dir "$TMP/used"
[ "$(cd "$TMP/used" && sha256sum step-*.tzck metrics.jsonl)" = "$sums" ] && ok || bad "a refused run changed used/"
gpt2_fail "--overwrite with --resume" 2 "--overwrite starts a new run in --save-dir, --resume continues one" \
    "${COMMON[@]}" --max-steps 2 --save-dir "$TMP/used" --resume --overwrite
# --resume-from an older checkpoint of the folder: its newer ones are another timeline's
gpt2_fail "--resume-from under newer checkpoints" 2 \
    "--save-dir $TMP/used holds 1 newer checkpoint (the newest: $TMP/used/step-000003.tzck)" \
    "${COMMON[@]}" --max-steps 4 --save-dir "$TMP/used" --resume-from "$TMP/used/step-000002.tzck"
mkdir -p "$TMP/nockpt"
gpt2_fail "--resume-from a folder without checkpoints" 1 "--resume-from $TMP/nockpt: no checkpoint there" \
    "${COMMON[@]}" --max-steps 2 --save-dir "$TMP/fresh" --resume-from "$TMP/nockpt"
"$BIN" "${COMMON[@]}" --max-steps 2 --eval-interval -1 --save-dir "$TMP/used" --overwrite > "$TMP/out" 2> "$TMP/err" &&
    grep -q "removed the earlier run's 3 checkpoints from $TMP/used" "$TMP/out" &&
    [ "$(cd "$TMP/used" && ls step-*.tzck)" = "step-000002.tzck" ] &&
    grep -q '"step":2' "$TMP/used/metrics.jsonl" && ! grep -q '"step":3' "$TMP/used/metrics.jsonl" && ok ||
    bad "--overwrite: $(ls "$TMP/used")"

# --resume over another model's checkpoints: they are whole, so they are named as another
# model's and left as they are, not called damaged and set aside
sed 's/"n_embd": 16/"n_embd": 32/' "$TMP/arch.json" > "$TMP/arch32.json"
gpt2_fail "--resume over another model's checkpoints" 1 "this model needs" --arch "$TMP/arch32.json" \
    --data-dir "$TMP/data" --max-len 48 --batch-size 8 --max-steps 5 --save-dir "$TMP/used" --resume
[ -z "$(ls "$TMP/used" | grep corrupt)" ] && ok || bad "another model's checkpoint was set aside as damaged"

# metrics.jsonl that is a FIFO would swallow the records: refused
mkdir -p "$TMP/fifo-run" && mkfifo "$TMP/fifo-run/metrics.jsonl"
gpt2_fail "metrics.jsonl as a FIFO" 1 "fifo-run/metrics.jsonl: not a regular file" "${COMMON[@]}" --max-steps 1 \
    --save-dir "$TMP/fifo-run" --resume

# a size past its limit in --arch (issue 14): one line naming the file, the field and the limit
printf '{"model_type": "gpt2", "n_embd": 1000000000}\n' > "$TMP/huge.json"
gpt2_fail "n_embd 1e9" 1 "huge.json: field 'n_embd' is 1000000000, more than the limit 65536" \
    --arch "$TMP/huge.json" --data-dir "$TMP/data" --max-steps 1 --save-dir "$TMP/huge"

echo "test_cli_gpt2: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
