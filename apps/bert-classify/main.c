/* bert-classify: fine-tunes BERT or RoBERTa on a GLUE task, as HF's run_glue.py does with
 * BertForSequenceClassification / RobertaForSequenceClassification (regression for STS-B).
 * The shared GLUE driver (apps/common) does the work; this file says how to build the model
 * and load its HF weights. */
#include <stdio.h>

#include "apps/common/glue_app.h"
#include "checkpoints/ckpt_map.h"
#include "models/bert/bert.h"

static rt_status bert_app_create(const glue_model_args *a, glue_model *out) {
    rt_status st = RT_OK;
    bert_config cfg;
    bert_model *model = NULL;
    if (a->config_path) {
        RT_TRY(bert_config_load(a->config_path, &cfg));
    } else { /* a small BERT on the shipped bert-base-uncased vocab: MRPC in minutes on 2 cores */
        bert_config_default(&cfg);
        cfg.vocab_size = tok_vocab_size(a->tok);
        cfg.hidden_size = 128;
        cfg.num_hidden_layers = 4;
        cfg.num_attention_heads = 4;
        cfg.intermediate_size = 512;
    }
    cfg.num_labels = a->num_labels;
    cfg.checkpoint_layers = a->checkpoint_layers;
    cfg.pp_recompute = a->pp_recompute;
    cfg.lora = a->lora;
    RT_TRY(bert_config_validate(&cfg, a->tp->size));
    if (tok_vocab_size(a->tok) > cfg.vocab_size)
        RT_FAIL(RT_ERR_CONFIG, "the tokenizer has %d tokens but the model's vocab_size is %d", tok_vocab_size(a->tok),
                cfg.vocab_size);
    /* RoBERTa's positions start after padding_idx, so two fewer are usable */
    int usable = cfg.max_position_embeddings - (cfg.roberta ? cfg.pad_token_id + 1 : 0);
    if (a->max_T > usable)
        RT_FAIL(RT_ERR_USAGE, "--max-len %d is longer than the %d positions the model has", a->max_T, usable);
    int32_t pad = tok_pad_id(a->tok);
    if (pad < 0) RT_FAIL(RT_ERR_CONFIG, "the tokenizer has no pad token ([PAD] or <pad>)");
    RT_TRY(bert_model_init_stage(&cfg, a->be, a->tp, a->pp, a->max_micro, a->max_B, a->max_T, a->seed, &model));
    RT_TRY(bert_classifier(model, &out->cls));
    model = NULL; /* owned by out->cls now */
    out->pad_id = pad;
    /* Megatron: one all-reduce for the vocab-parallel embedding, four per layer */
    out->tp_floats_per_token = (double)cfg.hidden_size * (4.0 * cfg.num_hidden_layers + 1);
    out->hidden = cfg.hidden_size;
    out->map = cfg.roberta ? &ckpt_map_roberta : &ckpt_map_bert;
    snprintf(out->desc, sizeof out->desc, "%s %d layers, %d wide, %d heads, vocab %d, %s",
             cfg.roberta ? "RoBERTa" : "BERT", cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
             cfg.vocab_size, cfg.num_labels == 1 ? "regression (MSE)" : "classification");
fail:
    bert_model_free(model);
    return st;
}

static rt_status bert_app_load_hf(glue_model *m, const char *weights, char *report, size_t size) {
    return bert_load_hf(m->cls.model, weights, report, size);
}

int main(int argc, char **argv) {
    static const glue_app_model bert_family = {
        .prog = "bert-classify",
        .summary = "Fine-tunes BERT or RoBERTa (Bert/RobertaForSequenceClassification) on a GLUE task, or on your\n"
                   "own CSV, TSV or JSON Lines files (--train-file), and reports the dev metrics; STS-B, or labels\n"
                   "with fractions, train a regression head, and lists of classes a multi-label one. Checkpoints\n"
                   "and metrics.jsonl go to --save-dir; --resume continues bit-exactly.",
        .epilog =
            "examples:\n  bert-classify --model path/to/hf/bert-base-uncased --dataset sst2 --data-dir glue/SST-2\n"
            "  bert-classify --model path/to/hf/roberta-base --dataset stsb --data-dir glue/STS-B\n"
            "  bert-classify --dataset mrpc          # a small BERT from scratch on the shipped MRPC\n"
            "  bert-classify --train-file assets/examples/reviews-train.csv \\\n"
            "      --validation-file assets/examples/reviews-validation.csv \\\n"
            "      --test-file assets/examples/reviews-test.csv --label-column sentiment --epochs 3\n"
            "  bert-classify --train-file assets/examples/topics-train.jsonl --label-column topics \\\n"
            "      --validation-file assets/examples/topics-validation.jsonl   # multi-label\n"
            "  bert-classify --model path/to/hf/bert-base-uncased --lora-r 8 --lr 5e-4 --save-lora runs/lora",
        .family = "BERT/RoBERTa",
        .hf_class = "BertForSequenceClassification (RobertaForSequenceClassification for RoBERTa)",
        .hf_cache_repo = "bert-base-uncased",
        .default_tokenizer = TZ_SOURCE_DIR "/assets/bert-wordpiece/bert-base-uncased-vocab.txt",
        .scratch_desc = "a small BERT (4 layers, 128 wide)",
        .create = bert_app_create,
        .load_hf = bert_app_load_hf,
        .lora = true,
        .lora_default_targets = "query,value", /* PEFT's for bert and roberta */
        .lora_modules = "query, key, value, attention.output.dense, intermediate.dense, output.dense",
    };
    return glue_app_main(&bert_family, argc, argv);
}
