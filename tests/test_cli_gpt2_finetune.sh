#!/usr/bin/env bash
# gpt2-finetune end to end on a tiny GPT-2 and real Multi30k lines: training on blocks with the
# held-out split and with --val, evaluation (loss and perplexity = exp(loss) in the log and
# metrics.jsonl), the HF GPT2LMHeadModel export (config, weights, tokenizer under HF's names),
# --model from that export evaluating to the same loss, resume equal to an uninterrupted run,
# --generate (greedy; sampling repeatable under a seed; too long for the block is an error),
# --help, and bad inputs (a missing or empty file, too little text for one block, a block longer
# than n_positions, --model with --arch), each a one-line error.
set -u
BIN="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}/gpt2-finetune"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
. "$SRC/tests/fixtures.sh"
need_fixture "$ASSETS/multi30k-en-de/val.en" "$ASSETS/multi30k-en-de/val.de"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
[ -x "$BIN" ] || { echo "test_cli_gpt2_finetune: $BIN not built"; exit 1; }
BIN_DIR=$(dirname "$BIN")
. "$SRC/tests/cli_lib.sh" # pass and fail, ok, bad, expect_fail NAME RC PATTERN PROGRAM ARGS...

head -n 300 "$ASSETS/multi30k-en-de/val.en" > "$TMP/train.txt"
sed -n 301,360p "$ASSETS/multi30k-en-de/val.en" > "$TMP/val.txt"
echo '{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 2}' \
    > "$TMP/arch.json"
COMMON=(--arch "$TMP/arch.json" --block-size 32 --batch-size 4 --threads 2 --log-interval 2 --cache-dir "$TMP/cache")
# val_loss FILE: the "validation results" line's loss and perplexity
results() { grep "^validation results" "$1" | sed 's/.*: loss \([0-9.]*\) perplexity \([0-9.]*\)/\1 \2/'; }

"$BIN" "$TMP/train.txt" "${COMMON[@]}" --max-steps 6 --eval-interval 3 --save-interval 3 --keep 5 \
    --save-dir "$TMP/run" > "$TMP/out" 2> "$TMP/err" && ok || bad "training run"
grep -q "^data: [0-9]* training blocks, [0-9]* validation blocks of 32 tokens (held out from the end)" "$TMP/out" &&
    ok || bad "no data line with the held-out split"
read -r loss ppl <<< "$(results "$TMP/out")"
awk -v l="$loss" -v p="$ppl" 'BEGIN { e = exp(l); exit !(l > 0 && (p - e) / e < 1e-3 && (e - p) / e < 1e-3) }' &&
    ok || bad "perplexity $ppl is not exp(loss $loss)"
[ "$(grep -c '"type":"eval".*"perplexity"' "$TMP/run/metrics.jsonl")" -ge 2 ] && ok || bad "metrics.jsonl lacks eval lines"
grep -q '"architectures":.*"GPT2LMHeadModel"' "$TMP/run/hf/config.json" && [ -s "$TMP/run/hf/model.safetensors" ] &&
    [ -s "$TMP/run/hf/vocab.json" ] && [ -s "$TMP/run/hf/merges.txt" ] && ok || bad "the HF export is incomplete"

# the export loads back and evaluates to the same loss (--epochs 0: evaluate only)
"$BIN" "$TMP/train.txt" --model "$TMP/run/hf" --block-size 32 --batch-size 4 --threads 2 --epochs 0 \
    --cache-dir "$TMP/cache" --save-dir "$TMP/reload" > "$TMP/out2" 2> "$TMP/err" &&
    grep -q "^weights: .*model.safetensors: [0-9]* tensors loaded$" "$TMP/out2" && ok || bad "--model from the export"
[ -n "$loss" ] && [ "$(results "$TMP/out2" | cut -d' ' -f1)" = "$loss" ] && ok ||
    bad "the reloaded export evaluates to $(results "$TMP/out2"), the run ended at $loss"

# resume from step 3 ends as the whole run
mkdir -p "$TMP/resume" && cp "$TMP/run"/step-*3.tzck "$TMP/resume/"
"$BIN" "$TMP/train.txt" "${COMMON[@]}" --max-steps 6 --eval-interval 3 --save-interval 3 --keep 5 --resume \
    --save-dir "$TMP/resume" > "$TMP/out3" 2> "$TMP/err" && grep -q "resumed from .*step.*3" "$TMP/out3" &&
    [ "$(results "$TMP/out3")" = "$loss $ppl" ] && ok || bad "resume at step 3: $(results "$TMP/out3") vs $loss $ppl"

# --val: its own blocks
"$BIN" "$TMP/train.txt" "${COMMON[@]}" --val "$TMP/val.txt" --max-steps 2 --save-dir "$TMP/val" > "$TMP/out" \
    2> "$TMP/err" && grep -q "^data: [0-9]* training blocks, [0-9]* validation blocks of 32 tokens$" "$TMP/out" &&
    ok || bad "--val"

# --generate from the export: the prompt, then the continuation; sampling repeats under its seed
GEN=("$TMP/train.txt" --model "$TMP/run/hf" --block-size 32 --threads 2 --epochs 0 --cache-dir "$TMP/cache")
"$BIN" "${GEN[@]}" --save-dir "$TMP/g1" --generate "A man in" --max-new-tokens 6 > "$TMP/out" 2> "$TMP/err" &&
    grep -q "^generated [1-6] tokens (greedy)" "$TMP/out" && [ "$(tail -1 "$TMP/out" | cut -c1-8)" = "A man in" ] &&
    ok || bad "--generate greedy"
# generated text that cannot reach stdout (a full device) is an error, not a silent exit 0 (issue 34)
"$BIN" "${GEN[@]}" --save-dir "$TMP/g-full" --generate "A man in" --max-new-tokens 6 > /dev/full 2> "$TMP/err"
rc=$?
[ $rc -eq 1 ] && grep -q "error: standard output: some of the output was not written" "$TMP/err" && ok ||
    bad "--generate into /dev/full: exit $rc"
for k in 1 2; do
    "$BIN" "${GEN[@]}" --save-dir "$TMP/s$k" --generate "A man in" --max-new-tokens 6 --temperature 1.2 --seed 5 \
        > "$TMP/sample$k" 2> "$TMP/err" || bad "--generate sampled, run $k"
done
[ "$(tail -1 "$TMP/sample1")" = "$(tail -1 "$TMP/sample2")" ] && ok || bad "sampling with one seed differs between runs"
expect_fail "generation past the block" 2 "exceed the 32 positions" gpt2-finetune "${GEN[@]}" --save-dir "$TMP/g3" --generate "A man" \
    --max-new-tokens 40

"$BIN" --help > "$TMP/out" 2>&1 && grep -q "TEXT" "$TMP/out" && grep -q -- "--block-size" "$TMP/out" && ok || bad "--help"
expect_fail "missing file" 1 "nope.txt" gpt2-finetune "$TMP/nope.txt" "${COMMON[@]}" --save-dir "$TMP/e1"
: > "$TMP/empty.txt"
expect_fail "empty file" 1 "empty.txt" gpt2-finetune "$TMP/empty.txt" "${COMMON[@]}" --save-dir "$TMP/e2"
echo "A man." > "$TMP/short.txt"
expect_fail "too little text" 1 "fewer than one block of 32" gpt2-finetune "$TMP/short.txt" "${COMMON[@]}" --save-dir "$TMP/e3"
expect_fail "block past n_positions" 2 "block-size 128 is longer than the model's n_positions 64" gpt2-finetune "$TMP/train.txt" \
    --arch "$TMP/arch.json" --block-size 128 --save-dir "$TMP/e4"
expect_fail "--model and --arch" 2 "give --model or --arch, not both" gpt2-finetune "$TMP/train.txt" --model "$TMP/run/hf" \
    --arch "$TMP/arch.json" --save-dir "$TMP/e5"

# TZ_STEP_GRAPHS=plan: the step-graph policy beside real training (runtime/train/rt_step_graphs.h).
# Without dropout a fixed-shape run's micro-batch steps read nothing back mid-step (the loss goes
# to the device's step record): all but the warm-up and the capture would replay. The plan changes
# no number: the run ends at the loss of the same run without it.
sed 's/}$/, "resid_pdrop": 0, "embd_pdrop": 0, "attn_pdrop": 0}/' "$TMP/arch.json" > "$TMP/arch0.json"
PLAN=("$TMP/train.txt" --arch "$TMP/arch0.json" --block-size 32 --batch-size 2 --grad-accum 2 --threads 2
      --max-steps 4 --log-interval 4 --save-interval -1 --eval-interval -1 --cache-dir "$TMP/cache")
TZ_STEP_GRAPHS=plan "$BIN" "${PLAN[@]}" --save-dir "$TMP/p1" > "$TMP/out" 2> "$TMP/err" && ok || bad "a planned run"
TZ_STEP_GRAPHS=off "$BIN" "${PLAN[@]}" --save-dir "$TMP/p2" > "$TMP/out2" 2> "$TMP/err" && ok || bad "the run unplanned"
replays=$(sed -n 's/^step graphs (a plan.*of 8 micro-batch steps, \([0-9]*\) would replay.*/\1/p' "$TMP/out")
[ -n "$replays" ] && [ "$replays" -ge 5 ] && ! grep -q "steps eager because\|mismatches" "$TMP/out" && ok ||
    bad "without dropout, $replays of 8 steps would replay (want at least 5, nothing refused): $(grep 'step graphs' "$TMP/out")"
! grep -q "^step graphs" "$TMP/out2" && ok || bad "TZ_STEP_GRAPHS=off still plans"
[ "$(results "$TMP/out")" = "$(results "$TMP/out2")" ] && ok ||
    bad "the plan changed the run: $(results "$TMP/out") against $(results "$TMP/out2")"
# with GPT-2's dropout too: the masks' step comes from the step's record on the device
PLAN[2]="$TMP/arch.json"
TZ_STEP_GRAPHS=plan "$BIN" "${PLAN[@]}" --save-dir "$TMP/p3" > "$TMP/out" 2> "$TMP/err" && ok || bad "planned, dropout"
replays=$(sed -n 's/^step graphs (a plan.*of 8 micro-batch steps, \([0-9]*\) would replay.*/\1/p' "$TMP/out")
[ -n "$replays" ] && [ "$replays" -ge 5 ] && ! grep -q "steps eager because" "$TMP/out" && ok ||
    bad "with dropout, $replays of 8 steps would replay: $(grep 'step graphs' "$TMP/out")"
TZ_STEP_GRAPHS=capture expect_fail "a bad TZ_STEP_GRAPHS" 1 "TZ_STEP_GRAPHS=capture: expected on, plan or off" gpt2-finetune \
    "${PLAN[@]}" --save-dir "$TMP/p4"
TZ_STEP_GRAPHS=on expect_fail "graphs on the CPU" 1 "TZ_STEP_GRAPHS=on: the cpu backend has no graphs" gpt2-finetune \
    "${PLAN[@]}" --save-dir "$TMP/p5"

finish test_cli_gpt2_finetune
