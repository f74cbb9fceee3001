# shellcheck shell=bash
# The small training workloads that loss-curve checks compare (sourced, not run): GPT-2, BERT,
# T5 (gated, dropout on) and GLM COPA classification-size models from scratch on the shipped
# data, and gpt2-finetune on text. Used by tests/test_precision_curves.sh (precisions on the CPU)
# and scripts/gpu_check.sh (CPU against CUDA, and precisions on the GPU).
#
#   curve_setup ASSETS DIR             writes the configs and the text slices into DIR
#   curve_train BIN DIR PROGRAM ARGS   one run of PROGRAM's workload with ARGS appended

curve_setup() {
    local assets=$1 dir=$2
    CURVE_ASSETS=$assets
    head -n 200 "$assets/multi30k-en-de/val.en" > "$dir/s.en"
    head -n 200 "$assets/multi30k-en-de/val.de" > "$dir/s.de"
    echo '{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 2}' \
        > "$dir/gpt2.json"
    echo '{"model_type": "bert", "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64, "type_vocab_size": 2}' \
        > "$dir/bert.json"
    echo '{"model_type": "t5", "vocab_size": 32128, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_heads": 4, "num_layers": 2,
 "num_decoder_layers": 2, "relative_attention_num_buckets": 8, "relative_attention_max_distance": 16,
 "dropout_rate": 0.1, "feed_forward_proj": "gated-gelu"}' > "$dir/t5.json"
}

curve_train() {
    local bin=$1 dir=$2 prog=$3
    shift 3
    case "$prog" in
    gpt2-classify)
        "$bin/$prog" --arch "$dir/gpt2.json" --data-dir "$CURVE_ASSETS/glue-mrpc" --max-len 48 --batch-size 8 "$@" ;;
    bert-classify)
        "$bin/$prog" --arch "$dir/bert.json" --tokenizer "$CURVE_ASSETS/bert-wordpiece/bert-base-uncased-vocab.txt" \
            --data-dir "$CURVE_ASSETS/glue-mrpc" --max-len 48 --batch-size 8 "$@" ;;
    t5-finetune)
        "$bin/$prog" "$dir/s.en" "$dir/s.de" --arch "$dir/t5.json" --max-source-len 24 --max-target-len 16 \
            --batch-size 8 --lr 1e-3 "$@" ;;
    glm-finetune) "$bin/$prog" --task copa --batch-size 8 "$@" ;;
    gpt2-finetune) "$bin/$prog" "$dir/s.en" --arch "$dir/gpt2.json" --block-size 64 --batch-size 8 "$@" ;;
    *) echo "curve_train: no workload for $prog" >&2; return 2 ;;
    esac
}
