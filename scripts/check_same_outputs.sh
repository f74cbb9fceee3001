#!/usr/bin/env bash
# Do two builds compute the same thing? Runs one set of short trainings with each build's
# programs and compares what they wrote byte for byte: exported weights (md5), every logged
# loss, gradient norm and metric, and generated predictions. For a refactor that must not change
# a bit (issue 15's block layer was checked this way), and to see what a numeric change moves.
#
#   bash scripts/check_same_outputs.sh BEFORE_BIN_DIR AFTER_BIN_DIR [OPTION...]
#
# OPTIONs go to every program (--precision bf16 compares the bf16 paths).
#
# The set: T5 (relu with dropout; gated with activation checkpointing, 1 and 2 blocks at a time;
# tp 2 and pp 2 under mpirun when it is there; beam-3 predictions), BERT (with checkpointing),
# RoBERTa (also at pp 2 with --pp-recompute under mpirun), GPT-2 (with checkpointing; gpt2-finetune's
# language-model head too), GLM (COPA with checkpointing, seq2seq generation). Data comes from assets/; a few minutes on 2 cores.
# Exit 0 when every output matches, 1 otherwise.
set -u
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_BIN_DIR AFTER_BIN_DIR [OPTION...]" >&2; exit 2; }
SRC=$(cd "$(dirname "$0")/.." && pwd)
BEFORE=$(cd "$1" 2> /dev/null && pwd) || { echo "$0: no folder $1" >&2; exit 2; }
AFTER=$(cd "$2" 2> /dev/null && pwd) || { echo "$0: no folder $2" >&2; exit 2; }
shift 2
EXTRA=("$@")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

run_set() { # BIN OUT: the trainings, then their outputs summarized into OUT.txt
    local BIN=$1 OUT=$2
    mkdir -p "$OUT" && cd "$OUT" || exit 1
    head -n 40 "$SRC/assets/multi30k-en-de/val.en" > s.en
    head -n 40 "$SRC/assets/multi30k-en-de/val.de" > s.de
    for kind in relu gated-gelu; do
        printf '{"model_type": "t5", "vocab_size": 32128, "d_model": 16, "d_kv": 4, "d_ff": 32, "num_heads": 2, %s\n' \
            '"num_layers": 2, "num_decoder_layers": 3, "relative_attention_num_buckets": 8,' > "t5-$kind.json"
        printf ' "relative_attention_max_distance": 16, "dropout_rate": 0.1, "feed_forward_proj": "%s"}\n' "$kind" \
            >> "t5-$kind.json"
    done
    local T5=(--max-source-len 24 --max-target-len 16 --max-new-tokens 6 --batch-size 8 --threads 2 --lr 1e-3
              --log-interval 1 --max-steps 4 --eval-interval 2)
    "$BIN/t5-finetune" "${EXTRA[@]}" s.en s.de --arch t5-relu.json "${T5[@]}" --save-dir t5a > /dev/null 2>&1 || echo "t5a failed"
    "$BIN/t5-finetune" "${EXTRA[@]}" s.en s.de --arch t5-gated-gelu.json "${T5[@]}" --save-dir t5b --checkpoint-activations \
        > /dev/null 2>&1 || echo "t5b failed"
    "$BIN/t5-finetune" "${EXTRA[@]}" s.en s.de --arch t5-gated-gelu.json "${T5[@]}" --save-dir t5c --checkpoint-activations \
        --checkpoint-num-layers 2 > /dev/null 2>&1 || echo "t5c failed"
    if command -v mpirun > /dev/null; then
        mpirun --oversubscribe -np 2 "$BIN/t5-finetune" "${EXTRA[@]}" s.en s.de --arch t5-gated-gelu.json "${T5[@]}" --threads 1 \
            --tp 2 --save-dir t5d > /dev/null 2>&1 || echo "t5d failed"
        # two pipeline stages (an encoder stage and a decoder stage need as many blocks each)
        sed 's/"num_decoder_layers": 3/"num_decoder_layers": 2/' t5-gated-gelu.json > t5-pp.json
        mpirun --oversubscribe -np 2 "$BIN/t5-finetune" "${EXTRA[@]}" s.en s.de --arch t5-pp.json "${T5[@]}" --threads 1 \
            --pp 2 --micro-batches 2 --save-dir t5e > /dev/null 2>&1 || echo "t5e failed"
    fi
    "$BIN/t5-finetune" "${EXTRA[@]}" --predict s.en --model t5a/hf --max-new-tokens 6 --num-beams 3 --threads 2 --save-dir t5p \
        --predict-out t5a.pred > /dev/null 2>&1 || echo "t5 predict failed"
    printf '{"model_type": "bert", "vocab_size": 30522, "hidden_size": 16, "num_hidden_layers": 3, %s\n' \
        '"num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 64, "type_vocab_size": 2}' \
        > bert.json
    printf '{"model_type": "roberta", "vocab_size": 50265, "hidden_size": 16, "num_hidden_layers": 2, %s\n' \
        '"num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 66, "type_vocab_size": 2, "pad_token_id": 1}' \
        > roberta.json
    mkdir -p mrpc
    head -n 65 "$SRC/assets/glue-mrpc/train.tsv" > mrpc/train.tsv
    head -n 33 "$SRC/assets/glue-mrpc/dev.tsv" > mrpc/dev.tsv
    local VOCAB="$SRC/assets/bert-wordpiece/bert-base-uncased-vocab.txt"
    local BC=(--tokenizer "$VOCAB" --data-dir mrpc --max-len 48 --batch-size 8 --max-steps 5 --threads 2
              --save-interval -1 --log-interval 1)
    "$BIN/bert-classify" "${EXTRA[@]}" --arch bert.json "${BC[@]}" --save-dir ba --save-hf ba/hf > /dev/null 2>&1 || echo "ba failed"
    "$BIN/bert-classify" "${EXTRA[@]}" --arch bert.json "${BC[@]}" --save-dir bb --save-hf bb/hf --checkpoint-activations \
        --checkpoint-num-layers 2 > /dev/null 2>&1 || echo "bb failed"
    "$BIN/bert-classify" "${EXTRA[@]}" --arch roberta.json "${BC[@]}" --save-dir bc --save-hf bc/hf > /dev/null 2>&1 || echo "bc failed"
    if command -v mpirun > /dev/null; then
        mpirun --oversubscribe -np 2 "$BIN/bert-classify" "${EXTRA[@]}" --arch roberta.json "${BC[@]}" --threads 1 \
            --pp 2 --micro-batches 2 --pp-recompute --save-dir bd --save-hf bd/hf > /dev/null 2>&1 || echo "bd failed"
    fi
    echo '{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 16, "n_layer": 3, "n_head": 2}' \
        > gpt2.json
    local GC=(--arch gpt2.json --data-dir mrpc --max-len 48 --batch-size 8 --threads 2 --max-steps 5 --log-interval 1)
    "$BIN/gpt2-classify" "${EXTRA[@]}" "${GC[@]}" --save-dir ga --save-hf ga/hf > /dev/null 2>&1 || echo "ga failed"
    "$BIN/gpt2-classify" "${EXTRA[@]}" "${GC[@]}" --save-dir gb --save-hf gb/hf --checkpoint-activations > /dev/null 2>&1 ||
        echo "gb failed"
    # the language-model head (GPT-2's vocab, padded: its mask) with and without checkpointing
    local GF=(s.en --arch gpt2.json --block-size 48 --batch-size 4 --threads 2 --max-steps 4 --log-interval 1)
    "$BIN/gpt2-finetune" "${EXTRA[@]}" "${GF[@]}" --save-dir gf --save-hf gf/hf > /dev/null 2>&1 || echo "gf failed"
    "$BIN/gpt2-finetune" "${EXTRA[@]}" "${GF[@]}" --save-dir gg --checkpoint-activations > /dev/null 2>&1 ||
        echo "gg failed"
    local LC=(--threads 2 --batch-size 8 --log-interval 1 --max-steps 4)
    "$BIN/glm-finetune" "${EXTRA[@]}" --task copa "${LC[@]}" --save-dir la > /dev/null 2>&1 || echo "la failed"
    "$BIN/glm-finetune" "${EXTRA[@]}" --task copa "${LC[@]}" --checkpoint-activations --save-dir lb > /dev/null 2>&1 || echo "lb failed"
    head -n 24 s.en > g.src
    head -n 24 s.de > g.tgt
    "$BIN/glm-finetune" "${EXTRA[@]}" --task seq2seq g.src g.tgt "${LC[@]}" --max-target-len 16 --save-dir lc > /dev/null 2>&1 ||
        echo "lc failed"
    {
        find . \( -name "*.safetensors" -o -name "*.bin" -o -name "*.pred" -o -name "val_predictions.txt" \) | sort |
            xargs md5sum
        for f in $(find . -name metrics.jsonl | sort); do
            # the numbers a run computes; its times are not compared
            sed -E 's/"(ms_per_step|tokens_per_s|tflops|mfu|seconds|wall_s|time)":[^,}]*,?//g' "$f" | sed "s|^|$f |"
        done
    } > summary.txt
}

echo "running with $BEFORE ..."
(run_set "$BEFORE" "$TMP/before")
echo "running with $AFTER ..."
(run_set "$AFTER" "$TMP/after")
if diff "$TMP/before/summary.txt" "$TMP/after/summary.txt" > "$TMP/diff"; then
    echo "same: $(wc -l < "$TMP/after/summary.txt") outputs match byte for byte"
    exit 0
fi
echo "different:"
head -n 40 "$TMP/diff"
exit 1
