#!/usr/bin/env bash
# LoRA in gpt2-classify, bert-classify and gpt2-finetune (issue 36), on a tiny GPT-2 and the shipped examples: --lora-r trains
# only the adapters and the head (the log says how many parameters), --save-lora writes a PEFT
# folder (adapter_config.json with the run's settings, adapter_model.safetensors), --lora-from
# that folder evaluates to the same dev numbers as the run that wrote it, a LoRA run resumes to
# the same last step as one that ran through (its checkpoints without the frozen base, which a
# fingerprint names: another base is refused), activation checkpointing gives the same numbers,
# --save-hf writes the merged model (a plain HF folder that scores as base + adapters did), and
# every option that cannot work gets its error.
# gpt2-finetune writes its adapters to SAVE_DIR/lora, which score and generate as the run did;
# t5-finetune too, over an HF T5 folder, and --predict through them gives the run's predictions;
# glm-finetune on COPA (PEFT's default query_key_value, no task type).
set -u
BIN_DIR="${TZ_BIN_DIR:-$(dirname "$0")/../build/bin}"
SRC="${TZ_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
. "$SRC/tests/cli_lib.sh"
for p in gpt2-classify gpt2-finetune bert-classify t5-finetune glm-finetune tz-convert; do [ -x "$BIN_DIR/$p" ] || { echo "test_cli_lora: $p not built"; exit 1; }; done

cat > "$TMP/gpt2.json" <<JSON
{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 16, "n_layer": 2, "n_head": 2}
JSON
EX="$SRC/assets/examples"
DATA=(--max-len 48 --batch-size 8 --threads 2 --no-cache --lr 5e-3
    --train-file "$EX/reviews-train.csv" --validation-file "$EX/reviews-validation.csv" --label-column sentiment)
RUN=(--arch "$TMP/gpt2.json" "${DATA[@]}")
LORA=(--lora-r 4 --lora-alpha 16 --lora-targets c_attn,c_fc --lora-dropout 0.1)

"$BIN_DIR/gpt2-classify" "${RUN[@]}" "${LORA[@]}" --epochs 2 --save-dir "$TMP/run" --save-lora "$TMP/adapter" \
    --save-hf "$TMP/merged" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && ok || bad "the LoRA run failed"
grep -q "^LoRA: r 4, alpha 16 (scale 4), dropout 0.1, on c_attn,c_fc$" "$TMP/out" && ok || bad "no LoRA settings line"
# per block: c_attn A 4x16 + B 48x4, c_fc A 4x16 + B 64x4 = 576, two blocks, and score 2x16
grep -q "^LoRA: 1184 of [0-9]* parameters train (0\.[0-9]*%); the rest are frozen$" "$TMP/out" && ok ||
    bad "no trainable-count line (want 1184)"
grep -q "^wrote PEFT adapter folder $TMP/adapter$" "$TMP/out" && ok || bad "no adapter folder line"
grep -q "^LoRA: $TMP/merged holds the merged model" "$TMP/out" && ok || bad "no merged-model line"
[ -s "$TMP/adapter/adapter_config.json" ] && [ -s "$TMP/adapter/adapter_model.safetensors" ] && ok ||
    bad "the adapter folder lacks its two files"
cfg=$(tr -d ' \t\n' < "$TMP/adapter/adapter_config.json")
for kv in '"peft_type":"LORA"' '"r":4' '"lora_alpha":16' '"lora_dropout":0.1' '"target_modules":["c_attn","c_fc"]' \
    '"task_type":"SEQ_CLS"' '"modules_to_save":["classifier","score"]' '"fan_in_fan_out":true'; do
    case "$cfg" in *"$kv"*) ok ;; *) bad "adapter_config.json lacks $kv" ;; esac
done
dev=$(grep "^dev results" "$TMP/out" | sed 's/.*step [0-9]*)://')
[ -n "$dev" ] && ok || bad "no dev results"

# the folder over the same base (the same --arch and seed) scores the same
"$BIN_DIR/gpt2-classify" "${RUN[@]}" --lora-from "$TMP/adapter" --epochs 0 --save-dir "$TMP/eval" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && ok || bad "--lora-from --epochs 0 failed"
[ "$(grep "^dev results" "$TMP/out" | sed 's/.*step [0-9]*)://')" = "$dev" ] && ok ||
    bad "--lora-from scores $(grep "^dev results" "$TMP/out") vs '$dev'"

# --save-hf: the merged model, a plain HF folder without adapters, classifies as the run did
cls() { grep "^dev results" "$1" | grep -o "accuracy.*"; }
"$BIN_DIR/gpt2-classify" --model "$TMP/merged" "${DATA[@]}" --epochs 0 --save-dir "$TMP/merged-eval" > "$TMP/out2" \
    2> "$TMP/err"
grep -q "^LoRA" "$TMP/out2" && bad "the merged model ran LoRA" || ok
[ -n "$dev" ] && [ "$(cls "$TMP/out2")" = "$(echo "$dev" | grep -o "accuracy.*")" ] && ok ||
    bad "the merged model: $(cls "$TMP/out2") vs '$dev'"

# resume: the step-3 checkpoint of a 6-step run continues to the same last step
STEPS=(--max-steps 6 --save-interval 3 --keep 5 --eval-interval -1 --log-interval 1)
"$BIN_DIR/gpt2-classify" "${RUN[@]}" "${LORA[@]}" "${STEPS[@]}" --save-dir "$TMP/whole" > "$TMP/out" 2> "$TMP/err" ||
    bad "the 6-step LoRA run"
mkdir -p "$TMP/resumed" && cp "$TMP/whole"/step-*3.tzck "$TMP/resumed/"
"$BIN_DIR/gpt2-classify" "${RUN[@]}" "${LORA[@]}" "${STEPS[@]}" --save-dir "$TMP/resumed" --resume > "$TMP/out" \
    2> "$TMP/err" || bad "the resumed LoRA run"
grep -q "resumed from .*step.*3" "$TMP/out" && ok || bad "the LoRA run did not resume from step 3"
last() { grep '"train"' "$1/metrics.jsonl" | tail -1 | grep -o '"\(step\|loss\|grad_norm\)":[^,}]*'; }
[ -n "$(last "$TMP/whole")" ] && [ "$(last "$TMP/whole")" = "$(last "$TMP/resumed")" ] && ok ||
    bad "resumed: $(last "$TMP/resumed" | tr '\n' ' ') vs $(last "$TMP/whole" | tr '\n' ' ')"

# the checkpoints hold the adapters and their AdamW state, not the frozen base (the tiny GPT-2's
# 50257 x 16 embedding alone is 3 MiB), and name the base by a fingerprint: resuming over another
# base (another --seed draws other random weights) is refused, naming both
size=$(stat -c %s "$(ls "$TMP/whole"/step-*3.tzck)")
[ "$size" -lt 100000 ] && ok || bad "a LoRA checkpoint of $size bytes (the base in it?)"
mkdir -p "$TMP/otherbase" && cp "$TMP/whole"/step-*3.tzck "$TMP/otherbase/"
expect_fail "resume over another base" 1 "the checkpoint trained its adapters on another base model" gpt2-classify "${RUN[@]}" \
    "${LORA[@]}" "${STEPS[@]}" --seed 7 --save-dir "$TMP/otherbase" --resume

# activation checkpointing recomputes the adapters with the same dropout bits: the same numbers
CK=(--max-steps 4 --eval-interval -1 --save-interval -1 --log-interval 1)
"$BIN_DIR/gpt2-classify" "${RUN[@]}" "${LORA[@]}" "${CK[@]}" --save-dir "$TMP/ck0" > "$TMP/out" 2> "$TMP/err" &&
    "$BIN_DIR/gpt2-classify" "${RUN[@]}" "${LORA[@]}" "${CK[@]}" --checkpoint-activations --save-dir "$TMP/ck1" \
        > "$TMP/out" 2> "$TMP/err" || bad "the checkpointing runs"
[ -n "$(last "$TMP/ck0")" ] && [ "$(last "$TMP/ck0")" = "$(last "$TMP/ck1")" ] && ok ||
    bad "--checkpoint-activations: $(last "$TMP/ck1" | tr '\n' ' ') vs $(last "$TMP/ck0" | tr '\n' ' ')"

# options that cannot work
G=gpt2-classify
expect_fail "--lora-alpha alone" 2 "--lora-alpha needs --lora-r" $G "${RUN[@]}" --lora-alpha 16 --save-dir "$TMP/e1"
expect_fail "--save-lora alone" 2 "--save-lora needs --lora-r" $G "${RUN[@]}" --save-lora "$TMP/x" --save-dir "$TMP/e2"
expect_fail "unknown target" 2 "LoRA target 'q_proj' matches no linear of this GPT-2" $G "${RUN[@]}" --lora-r 4 \
    --lora-targets c_attn,q_proj --save-dir "$TMP/e3"
expect_fail "empty target" 2 "--lora-targets 'c_attn,,c_fc': an empty module name" $G "${RUN[@]}" --lora-r 4 \
    --lora-targets c_attn,,c_fc --save-dir "$TMP/e4"
expect_fail "--lora-from with --lora-r" 2 "--lora-r and --lora-from" $G "${RUN[@]}" --lora-r 4 --lora-from "$TMP/adapter" \
    --save-dir "$TMP/e7"
expect_fail "--lora-from missing" 1 "$TMP/none: cannot open" $G "${RUN[@]}" --lora-from "$TMP/none" \
    --save-dir "$TMP/e8"
# an adapter of another rank: its config says r 4, the tensors are r 2
mkdir -p "$TMP/other" && cp "$TMP/adapter/adapter_model.safetensors" "$TMP/other/" &&
    sed 's/"r":[[:space:]]*4/"r": 2/' "$TMP/adapter/adapter_config.json" > "$TMP/other/adapter_config.json"
expect_fail "--lora-from of another rank" 1 "lora_A.weight' has shape \[4, 16\], expected \[2, 16\]" $G "${RUN[@]}" \
    --lora-from "$TMP/other" --save-dir "$TMP/e9"
# bert-classify: PEFT's default targets (query, value: two adapters over the fused projection),
# the head saved whole, and the folder scoring as the run did
cat > "$TMP/bert.json" <<JSON
{"model_type": "bert", "vocab_size": 30522, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
 "intermediate_size": 32, "max_position_embeddings": 64, "type_vocab_size": 2}
JSON
BERT=(--arch "$TMP/bert.json" --max-len 48 --batch-size 8 --threads 2 --no-cache --lr 5e-3 --train-file "$EX/reviews-train.csv"
    --validation-file "$EX/reviews-validation.csv" --label-column sentiment)
"$BIN_DIR/bert-classify" "${BERT[@]}" --lora-r 4 --epochs 2 --save-dir "$TMP/bert" --save-lora "$TMP/bert-adapter" \
    > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && ok || bad "the bert-classify LoRA run failed"
grep -q "^LoRA: r 4, alpha 8 (scale 2), dropout 0, on query,value (PEFT's default for the family)$" "$TMP/out" && ok ||
    bad "bert-classify: no LoRA settings line"
# per block query and value: A 4x16 + B 16x4 each = 256; two blocks; the classifier 2x16 + 2
grep -q "^LoRA: 546 of [0-9]* parameters train" "$TMP/out" && ok || bad "bert-classify: want 546 trainable"
bdev=$(grep "^dev results" "$TMP/out" | sed 's/.*step [0-9]*)://')
"$BIN_DIR/bert-classify" "${BERT[@]}" --lora-from "$TMP/bert-adapter" --epochs 0 --save-dir "$TMP/bert-eval" > "$TMP/out" \
    2> "$TMP/err"
[ -n "$bdev" ] && [ "$(grep "^dev results" "$TMP/out" | sed 's/.*step [0-9]*)://')" = "$bdev" ] && ok ||
    bad "bert-classify --lora-from: $(grep "^dev results" "$TMP/out") vs '$bdev'"

# gpt2-finetune: the adapters go to SAVE_DIR/lora (no HF export), and the folder over the same
# base gives the same validation loss and the same greedy text (decoding runs the adapters too)
LM_DATA=(--train-file "$EX/summaries-train.jsonl" --text-column document --block-size 32 --threads 2 --no-cache
    --lr 1e-2 --generate "The" --max-new-tokens 8)
LM=(--arch "$TMP/gpt2.json" "${LM_DATA[@]}")
"$BIN_DIR/gpt2-finetune" "${LM[@]}" --lora-r 4 --lora-targets c_attn,c_proj,c_fc --epochs 2 --save-dir "$TMP/lm" \
    --save-hf "$TMP/lm-merged" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && ok || bad "the gpt2-finetune LoRA run failed"
[ -s "$TMP/lm/lora/adapter_model.safetensors" ] && [ ! -e "$TMP/lm/hf" ] && ok || bad "SAVE_DIR/lora, and no hf/"
grep -q '"task_type":[[:space:]]*"CAUSAL_LM"' "$TMP/lm/lora/adapter_config.json" && ok || bad "task_type not CAUSAL_LM"
val=$(grep "^validation results" "$TMP/out" | sed 's/.*step [0-9]*)://')
text=$(grep -A1 "^generated 8 tokens" "$TMP/out" | tail -1)
[ -n "$val" ] && [ -n "$text" ] && ok || bad "no validation results or generated text"
"$BIN_DIR/gpt2-finetune" "${LM[@]}" --lora-from "$TMP/lm/lora" --epochs 0 --save-dir "$TMP/lm-eval" > "$TMP/out" 2> "$TMP/err"
[ "$(grep "^validation results" "$TMP/out" | sed 's/.*step [0-9]*)://')" = "$val" ] && ok ||
    bad "gpt2-finetune --lora-from: $(grep "^validation results" "$TMP/out") vs '$val'"
[ "$(grep -A1 "^generated 8 tokens" "$TMP/out" | tail -1)" = "$text" ] && ok || bad "--lora-from generates other text"
"$BIN_DIR/gpt2-finetune" --model "$TMP/lm-merged" "${LM_DATA[@]}" --epochs 0 --save-dir "$TMP/lm-merged-eval" \
    > "$TMP/out" 2> "$TMP/err"
[ -n "$text" ] && [ "$(grep -A1 "^generated 8 tokens" "$TMP/out" | tail -1)" = "$text" ] && ok ||
    bad "the merged model (--save-hf) generates other text"

# t5-finetune: a tiny T5 v1.1 exported as an HF folder is the base; LoRA on every linear writes
# SAVE_DIR/lora (SEQ_2_SEQ_LM), which evaluates to the same numbers and predicts the same text
cat > "$TMP/t5.json" <<JSON
{"model_type": "t5", "vocab_size": 32128, "d_model": 16, "d_kv": 4, "d_ff": 32, "num_heads": 4, "num_layers": 2,
 "num_decoder_layers": 2, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": false, "dropout_rate": 0.0}
JSON
MT="$SRC/assets/multi30k-en-de"
head -120 "$MT/val.en" > "$TMP/s.txt" && head -120 "$MT/val.de" > "$TMP/t.txt" && tail -24 "$TMP/s.txt" > "$TMP/v.txt"
T5=(--batch-size 8 --threads 2 --no-cache --max-new-tokens 6 --max-source-len 24 --max-target-len 24)
"$BIN_DIR/t5-finetune" "$TMP/s.txt" "$TMP/t.txt" --arch "$TMP/t5.json" --epochs 0 "${T5[@]}" --save-dir "$TMP/t5base" \
    > "$TMP/out" 2> "$TMP/err" && [ -s "$TMP/t5base/hf/model.safetensors" ] && ok || bad "the T5 base export"
"$BIN_DIR/t5-finetune" "$TMP/s.txt" "$TMP/t.txt" --model "$TMP/t5base/hf" "${T5[@]}" --lora-r 4 \
    --lora-targets q,k,v,o,wi_0,wi_1,wo --max-steps 12 --lr 1e-2 --save-dir "$TMP/t5lora" --save-hf "$TMP/t5merged" \
    > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && ok || bad "the t5-finetune LoRA run failed"
# per block of the encoder: q, k, v, o (A 4x16 + B 16x4 each), wi_0, wi_1 (A 4x16 + B 32x4), wo (A 4x32 + B 16x4)
# = 4x128 + 2x192 + 192 = 1088; the decoder's adds its cross-attention's four (512): 2x1088 + 2x1600 = 5376
grep -q "^LoRA: 5376 of [0-9]* parameters train" "$TMP/out" && ok || bad "t5-finetune: want 5376 trainable"
[ -s "$TMP/t5lora/lora/adapter_model.safetensors" ] && [ ! -e "$TMP/t5lora/hf" ] && ok || bad "T5: SAVE_DIR/lora, and no hf/"
grep -q '"task_type":[[:space:]]*"SEQ_2_SEQ_LM"' "$TMP/t5lora/lora/adapter_config.json" && ok ||
    bad "T5: task_type not SEQ_2_SEQ_LM"
tval=$(grep "^validation results" "$TMP/out" | sed 's/.*step [0-9]*)://')
"$BIN_DIR/t5-finetune" "$TMP/s.txt" "$TMP/t.txt" --model "$TMP/t5base/hf" "${T5[@]}" --lora-from "$TMP/t5lora/lora" \
    --epochs 0 --save-dir "$TMP/t5eval" > "$TMP/out" 2> "$TMP/err"
[ -n "$tval" ] && [ "$(grep "^validation results" "$TMP/out" | sed 's/.*step [0-9]*)://')" = "$tval" ] && ok ||
    bad "t5-finetune --lora-from: $(grep "^validation results" "$TMP/out") vs '$tval'"
"$BIN_DIR/t5-finetune" --predict "$TMP/v.txt" --model "$TMP/t5base/hf" --lora-from "$TMP/t5lora/lora" "${T5[@]}" \
    --predict-out "$TMP/pred.txt" > "$TMP/out" 2> "$TMP/err"
[ -s "$TMP/pred.txt" ] && cmp -s "$TMP/pred.txt" "$TMP/t5lora/val_predictions.txt" && ok ||
    bad "--predict --lora-from does not give the run's validation predictions"
"$BIN_DIR/t5-finetune" --predict "$TMP/v.txt" --model "$TMP/t5merged" "${T5[@]}" --predict-out "$TMP/pred2.txt" \
    > "$TMP/out" 2> "$TMP/err"
[ -s "$TMP/pred2.txt" ] && cmp -s "$TMP/pred2.txt" "$TMP/t5lora/val_predictions.txt" && ok ||
    bad "the merged T5 (--save-hf) does not give the run's validation predictions"
# tz-convert merge: the base's HF folder and the PEFT folder make the same merged model
"$BIN_DIR/tz-convert" merge "$TMP/t5base/hf" "$TMP/t5lora/lora" "$TMP/t5merged-convert" > "$TMP/out" 2> "$TMP/err" &&
    "$BIN_DIR/t5-finetune" --predict "$TMP/v.txt" --model "$TMP/t5merged-convert" "${T5[@]}" \
        --predict-out "$TMP/pred3.txt" > "$TMP/out" 2> "$TMP/err"
[ -s "$TMP/pred3.txt" ] && cmp -s "$TMP/pred3.txt" "$TMP/t5lora/val_predictions.txt" && ok ||
    bad "tz-convert merge: the merged T5 does not give the run's validation predictions"
expect_fail "tz-convert merge with two paths" 2 "merge needs three paths" tz-convert merge "$TMP/t5base/hf" \
    "$TMP/t5lora/lora"
expect_fail "t5-finetune unknown target" 2 "LoRA target 'c_attn' matches no linear of this T5" t5-finetune \
    "$TMP/s.txt" "$TMP/t.txt" --arch "$TMP/t5.json" "${T5[@]}" --lora-r 4 --lora-targets c_attn --save-dir "$TMP/e12"

# glm-finetune: the small GLM from scratch on the shipped COPA; the folder over the same base
# (the same seed) scores the same
GLM=(--task copa --threads 2 --batch-size 8 --no-cache --lr 1e-3)
"$BIN_DIR/glm-finetune" "${GLM[@]}" --lora-r 4 --max-steps 6 --save-dir "$TMP/glm" > "$TMP/out" 2> "$TMP/err"
[ $? -eq 0 ] && ok || bad "the glm-finetune LoRA run failed"
# the small GLM: 2 layers of query_key_value (A 4x128 + B 384x4) = 2 x 2048
grep -q "^LoRA: r 4, alpha 8 (scale 2), dropout 0, on query_key_value (PEFT's default for the family)$" "$TMP/out" &&
    grep -q "^LoRA: 4096 of [0-9]* parameters train" "$TMP/out" && ok || bad "glm-finetune: settings or 4096 trainable"
[ -s "$TMP/glm/lora/adapter_model.safetensors" ] && [ ! -e "$TMP/glm/hf" ] && ok || bad "GLM: SAVE_DIR/lora, and no hf/"
grep -q '"task_type":[[:space:]]*null' "$TMP/glm/lora/adapter_config.json" && ok || bad "GLM: task_type not null"
gval=$(grep "^validation results" "$TMP/out" | sed 's/.*step [0-9]*)://')
"$BIN_DIR/glm-finetune" "${GLM[@]}" --lora-from "$TMP/glm/lora" --epochs 0 --save-dir "$TMP/glm-eval" > "$TMP/out" \
    2> "$TMP/err"
[ -n "$gval" ] && [ "$(grep "^validation results" "$TMP/out" | sed 's/.*step [0-9]*)://')" = "$gval" ] && ok ||
    bad "glm-finetune --lora-from: $(grep "^validation results" "$TMP/out") vs '$gval'"
finish test_cli_lora
