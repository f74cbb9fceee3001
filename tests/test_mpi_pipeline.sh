#!/usr/bin/env bash
# gpt2-classify, bert-classify and gpt2-finetune with pipeline stages (--pp) under mpirun,
# dropout on: pp=2 and pp=4 train the single process's tensors, bit for bit (names, shapes and
# CRC-32 as tz-convert inspect lists them; also in bf16 and with activation checkpointing), with
# its losses, gradient norms and dev metrics at every step, and the HF export is the single
# process's folder. dp=2 x pp=2 (also with ZeRO-1, ZeRO-2, offload and ZeRO-3, whose stand-in for
# an empty slice is checked too; gpt2-finetune's tied copy with ZeRO-1, 2 and 3) and tp=2 x pp=2
# take the steps of dp=2 and tp=2 without stages (a layout's dropout masks and tp's random init
# are its own), and gpt2-finetune's pp 2 the single process's: these add in another order, so
# each step is compared from the same weights (tests/mpi_compare.sh says why). A checkpoint saved
# at pp=2 resumes at pp=1, pp=4 and tp=2 and takes pp=2's next step; --comm-stats counts the
# transfers as its formula says; gpt2-finetune --generate at pp 2 prints the single process's
# greedy text. A rank killed mid-pipeline ends the job; bad layouts get one line each before any
# work. (BERT's stages follow the same layouts' references at pp 2 and 4, dp 2 x pp 2 and tp 2 x
# pp 2; BERT at dp=2 with ZeRO-3, and at dp=2 x pp=2 with ZeRO-3, takes dp=2's steps, dropout on;
# and a tp 2 folder from tz-convert trains at pp 2 as its HF source does.)
set -u
BINDIR="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
pass=0
fail=0
TMP=$(mktemp -d)
trap 'pkill -9 -f "$TMP" 2>/dev/null; rm -rf "$TMP"' EXIT
command -v mpirun > /dev/null || { echo "FAILED: test_mpi_pipeline: no mpirun (scripts/setup.sh installs OpenMPI)" >&2; exit 1; }
ldd "$BINDIR/gpt2-classify" | grep -q libmpi || { echo "FAILED: test_mpi_pipeline: built without MPI" >&2; exit 1; }
. "$SRC/tests/mpi_kill_rank.sh"
. "$SRC/tests/mpi_compare.sh"
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cat > "$TMP/arch.json" <<JSON
{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 16, "n_layer": 4, "n_head": 2}
JSON
mkdir -p "$TMP/data"
head -n 65 "$SRC/assets/glue-mrpc/train.tsv" > "$TMP/data/train.tsv"
head -n 33 "$SRC/assets/glue-mrpc/dev.tsv" > "$TMP/data/dev.tsv"
COMMON=(--data-dir "$TMP/data" --max-len 48 --batch-size 8 --micro-batches 4 --max-steps 5 --log-interval 1 --threads 1
        --no-cache "${SAVE_EVERY_STEP[@]}")
ARGS=(--arch "$TMP/arch.json" "${COMMON[@]}") # gpt2-classify's

BIN="$BINDIR/gpt2-classify"

run one 1 "${ARGS[@]}" --save-hf "$TMP/one_hf" || { echo "FAILED: single-process run"; exit 1; }
[ "$(last_step one)" = 5 ] && [ "$(grep -c '"type":"eval"' "$TMP/one/metrics.jsonl")" -ge 2 ] ||
    { echo "FAILED: expected 5 steps and 2 evaluations"; cat "$TMP/one/metrics.jsonl"; exit 1; }
for layout in "pp2 2 --pp 2 --save-hf $TMP/pp2_hf" "pp4 4 --pp 4" "dp2 2" "dp2pp2 4 --pp 2" "tp2 2 --tp 2" \
    "tp2pp2 4 --tp 2 --pp 2" "dp2pp2z1 4 --pp 2 --zero 1" "dp2pp2z2 4 --pp 2 --zero 2" \
    "dp2pp2off 4 --pp 2 --zero 1 --offload-optimizer" "dp2pp2z3 4 --pp 2 --zero 3"; do
    set -- $layout
    name=$1 np=$2
    shift 2
    run "$name" "$np" "${ARGS[@]}" "$@" || fail=$((fail + 1))
done
check_bits "pp 2" one pp2
check_bits "pp 4" one pp4
check "dp 2 x pp 2" dp2 dp2pp2
check "tp 2 x pp 2" tp2 tp2pp2
check "dp 2 x pp 2, ZeRO-1" dp2 dp2pp2z1
check "dp 2 x pp 2, ZeRO-2" dp2 dp2pp2z2
check "dp 2 x pp 2, ZeRO-1 with offload" dp2 dp2pp2off
check "dp 2 x pp 2, ZeRO-3" dp2 dp2pp2z3
# ZeRO-3 with stages when a rank's slice is empty: 65 rows leave a last global batch of 1, so dp
# rank 1 runs a stand-in micro-batch whose labels are ignored (its gathers stay in step)
mkdir -p "$TMP/data65"
head -n 66 "$SRC/assets/glue-mrpc/train.tsv" > "$TMP/data65/train.tsv"
cp "$TMP/data/dev.tsv" "$TMP/data65/"
for layout in "odd_dp2 2" "odd_dp2pp2z3 4 --pp 2 --zero 3"; do
    set -- $layout
    name=$1 np=$2
    shift 2
    run "$name" "$np" "${ARGS[@]}" "$@" --data-dir "$TMP/data65" --max-steps 9 --eval-interval -1 || fail=$((fail + 1))
done
check "dp 2 x pp 2, ZeRO-3, an empty slice" odd_dp2 odd_dp2pp2z3
if grep -q "pipeline: stage 1 of 2, 1F1B over 4 micro-batches per step" "$TMP/pp2.log" &&
    grep -q "memory per pipeline stage: 1: .* MiB (weights .*), 2: .* MiB (weights .*)" "$TMP/pp2.log"; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAILED: pp2 did not log its pipeline" >&2
fi

# the HF export gathers the stages: the folder one process writes, byte for byte
if cmp -s "$TMP/one_hf/model.safetensors" "$TMP/pp2_hf/model.safetensors" &&
    cmp -s "$TMP/one_hf/config.json" "$TMP/pp2_hf/config.json"; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAILED: the pp 2 HF export differs from one process's" >&2; ls -l "$TMP"/*_hf >&2
fi

# bf16, activation checkpointing and the stages' recompute keep pp 2's final tensors one
# process's, bit for bit
for extra in "--precision bf16" "--checkpoint-activations" "--pp-recompute"; do
    tag=$(echo "$extra" | tr -dc 'a-z0-9')
    run "one_$tag" 1 "${ARGS[@]}" $extra && run "pp2_$tag" 2 "${ARGS[@]}" --pp 2 $extra ||
        { fail=$((fail + 1)); continue; }
    check_bits "pp 2 with $extra" "one_$tag" "pp2_$tag"
done

# pp=2's checkpoint of step 3 resumes at pp=1, pp=4 and tp=2, and each takes pp=2's step 4
for resume in "r_pp1 1" "r_pp4 4 --pp 4" "r_tp2 2 --tp 2"; do
    set -- $resume
    check_resume "saved at pp 2, resumed as $1" pp2 3 "$@" "${ARGS[@]}"
done

# BERT's stages: pp 2 and pp 4 train one process's tensors, bit for bit; dp 2 x pp 2 takes dp 2's steps
# and tp 2 x pp 2 tp 2's; and BERT under ZeRO-3 dp 2's
cat > "$TMP/bert.json" <<JSON
{"model_type": "bert", "vocab_size": 30522, "hidden_size": 16, "num_hidden_layers": 4, "num_attention_heads": 2,
 "intermediate_size": 32, "max_position_embeddings": 64, "type_vocab_size": 2}
JSON
BERT=(--arch "$TMP/bert.json" --tokenizer "$SRC/assets/bert-wordpiece/bert-base-uncased-vocab.txt")
BIN="$BINDIR/bert-classify"
for layout in "bert_one 1" "bert_pp2 2 --pp 2" "bert_pp4 4 --pp 4" "bert_dp2 2" "bert_dp2pp2 4 --pp 2" \
    "bert_tp2 2 --tp 2" "bert_tp2pp2 4 --tp 2 --pp 2" "bert_dp2_zero3 2 --zero 3" "bert_dp2pp2_zero3 4 --pp 2 --zero 3"; do
    set -- $layout
    name=$1 np=$2
    shift 2
    run "$name" "$np" "${COMMON[@]}" "${BERT[@]}" "$@" || fail=$((fail + 1))
done
check_bits "BERT pp 2" bert_one bert_pp2
check_bits "BERT pp 4" bert_one bert_pp4
check "BERT dp 2 x pp 2" bert_dp2 bert_dp2pp2
check "BERT tp 2 x pp 2" bert_tp2 bert_tp2pp2
check "BERT ZeRO-3" bert_dp2 bert_dp2_zero3
check "BERT dp 2 x pp 2, ZeRO-3" bert_dp2 bert_dp2pp2_zero3

# --comm-stats under pp: the first stage's p2p bytes per step are the formula's, to the byte
mpirun -np 2 "$BINDIR/gpt2-classify" "${ARGS[@]}" --pp 2 --comm-stats --eval-interval -1 --save-interval -1 \
    --save-dir "$TMP/stats" > "$TMP/stats.log" 2>&1
measured=$(tr '\r' '\n' < "$TMP/stats.log" | grep -a "^  pp p2p " | awk '{print $(NF-1)}')
formula=$(tr '\r' '\n' < "$TMP/stats.log" | grep -a "formula pp p2p" | sed 's/.*= \([0-9.]*\) MB.*/\1/')
if [ -n "$measured" ] && [ "$measured" = "$formula" ]; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAILED: --comm-stats pp p2p measured '$measured' MB, formula '$formula' MB" >&2
    grep -a -A8 "communication per" "$TMP/stats.log" >&2
fi

# GPT-2's language model (gpt2-finetune): the last stage keeps a copy of wte for the tied head,
# and the two ends add each other's gradient, so pp 2 takes one process's steps (the tied
# gradient's two halves add in another order: from the same weights, within the tolerance)
head -n 200 "$SRC/assets/multi30k-en-de/val.en" > "$TMP/lm.txt"
LM=("$TMP/lm.txt" --arch "$TMP/arch.json" --block-size 32 --batch-size 4 --micro-batches 2 --max-steps 5
    --log-interval 1 --threads 1 --no-cache --val-split 0.2 --eval-interval 5 "${SAVE_EVERY_STEP[@]}")
GEN=(--generate "A man" --max-new-tokens 8)
BIN="$BINDIR/gpt2-finetune"
METRICS='loss\|grad_norm\|perplexity'
run lm_one 1 "${LM[@]}" "${GEN[@]}" && run lm_pp2 2 "${LM[@]}" "${GEN[@]}" --pp 2 &&
    check "gpt2-finetune pp 2" lm_one lm_pp2 || fail=$((fail + 1))
# --generate under pp: the first rank decodes with the whole exported model, as one process does
# with the weights it took from pp 2's step 4 (the same greedy text)
text_one=$(grep -a "^A man" "$TMP/lm_one@lm_pp2-5.log")
if [ -n "$text_one" ] && [ "$(grep -a "^A man" "$TMP/lm_pp2.log")" = "$text_one" ] &&
    grep -q "the whole model from .*/hf, on this rank" "$TMP/lm_pp2.log"; then
    pass=$((pass + 1))
else
    fail=$((fail + 1)); echo "FAILED: --generate at pp 2 differs from one process's ('$text_one'):" >&2
    grep -a "^A man\|generate" "$TMP/lm_pp2.log" >&2
fi
# ZeRO shards each stage's state, the tied copy's too (ZeRO-3: a block of its own, whose pieces the two
# stages sum), and counts the copy once in the norm
for layout in "lm_dp2 2" "lm_dp2pp2z1 4 --pp 2 --zero 1" "lm_dp2pp2z2 4 --pp 2 --zero 2" "lm_dp2pp2z3 4 --pp 2 --zero 3"; do
    set -- $layout
    name=$1 np=$2
    shift 2
    run "$name" "$np" "${LM[@]}" "$@" || fail=$((fail + 1))
done
check "gpt2-finetune dp2 x pp2, ZeRO-1" lm_dp2 lm_dp2pp2z1
check "gpt2-finetune dp2 x pp2, ZeRO-2" lm_dp2 lm_dp2pp2z2
check "gpt2-finetune dp2 x pp2, ZeRO-3" lm_dp2 lm_dp2pp2z3
METRICS='loss\|grad_norm\|accuracy\|f1'

# tz-convert's sharded folders need no resharding for stages: a tp 2 folder trains at pp 2 as the
# HF folder it came from does
"$BINDIR/tz-convert" import "$SRC/tests/data/tiny-gpt2" "$TMP/tiny_tp2" --tp 2 > "$TMP/import.log" 2>&1 ||
    { fail=$((fail + 1)); echo "FAILED: import at tp 2" >&2; cat "$TMP/import.log" >&2; }
TINY=(--tokenizer "$SRC/tests/data/tiny-gpt2" "${COMMON[@]}" --pp 2 --max-steps 2)
BIN="$BINDIR/gpt2-classify"
for src in hf sharded; do
    model="$SRC/tests/data/tiny-gpt2"
    [ "$src" = sharded ] && model="$TMP/tiny_tp2"
    run "tiny_$src" 2 --model "$model" "${TINY[@]}" || fail=$((fail + 1))
done
check_bits "pp 2 from a tp 2 sharded folder" tiny_hf tiny_sharded

# bad layouts: one line, before the data is read
expect_error() { # what, message, ranks, program, options
    local what=$1 msg=$2 np=$3 prog=$4
    shift 4
    mpirun -np "$np" "$BINDIR/$prog" "$@" --save-dir "$TMP/bad" > "$TMP/bad.log" 2>&1
    local rc=$?
    if [ "$rc" -ne 0 ] && grep -q -- "$msg" "$TMP/bad.log" && ! grep -q "^data:" "$TMP/bad.log"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "FAILED: $what (exit $rc):" >&2; cat "$TMP/bad.log" >&2
    fi
}
expect_error "3 stages of 4 layers" "--pp 3 does not divide its 4 layers" 3 gpt2-classify "${ARGS[@]}" --pp 3 \
    --micro-batches 3
expect_error "fewer micro-batches than stages" "--pp 2 needs at least as many micro-batches" 2 gpt2-classify \
    "${ARGS[@]}" --pp 2 --micro-batches 1

# a rank killed mid-pipeline: the job ends within 60 s
mpirun -np 2 "$BINDIR/gpt2-classify" "${ARGS[@]}" --pp 2 --max-steps 100000 --eval-interval -1 --save-interval -1 \
    --comm-timeout 20 --save-dir "$TMP/kill" > "$TMP/kill.log" 2>&1 &
if kill_one_rank $! "$TMP/kill.log" "$TMP/kill" >&2; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
echo "test_mpi_pipeline: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
