/* gpt2-classify: fine-tunes GPT-2 for GLUE classification, as HF's run_glue.py does with
 * GPT2ForSequenceClassification. The shared GLUE driver (apps/common) does the work; this
 * file says how to build a GPT-2 and load its HF weights. */
#include <stdio.h>

#include "apps/common/glue_app.h"
#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_weights.h"
#include "models/gpt2/gpt2.h"

static rt_status gpt2_app_create(const glue_model_args *a, glue_model *out) {
    rt_status st = RT_OK;
    gpt2_config cfg;
    gpt2_model *model = NULL;
    if (a->config_path) {
        RT_TRY(gpt2_config_load(a->config_path, &cfg));
    } else { /* small enough to fine-tune MRPC in about a minute on 2 cores */
        gpt2_config_default(&cfg);
        cfg.n_layer = 4;
        cfg.n_embd = 128;
        cfg.n_head = 4;
        cfg.n_positions = 512;
    }
    cfg.num_labels = a->num_labels;
    cfg.checkpoint_layers = a->checkpoint_layers;
    cfg.pp_recompute = a->pp_recompute;
    cfg.lora = a->lora;
    RT_TRY(gpt2_config_validate(&cfg, a->tp->size));
    if (tok_vocab_size(a->tok) > cfg.vocab_size)
        RT_FAIL(RT_ERR_CONFIG, "the tokenizer has %d tokens but the model's vocab_size is %d", tok_vocab_size(a->tok),
                cfg.vocab_size);
    if (a->max_T > cfg.n_positions)
        RT_FAIL(RT_ERR_USAGE, "--max-len %d is longer than the model's n_positions %d", a->max_T, cfg.n_positions);
    /* GPT-2 has no pad token: pad with eos, as HF's examples do; the mask hides it */
    int32_t pad = cfg.pad_token_id >= 0     ? cfg.pad_token_id
                  : tok_pad_id(a->tok) >= 0 ? tok_pad_id(a->tok)
                                            : tok_eos_id(a->tok);
    if (pad < 0) pad = cfg.eos_token_id;
    cfg.pad_token_id = pad;
    RT_TRY(gpt2_model_init_stage(&cfg, a->be, a->tp, a->pp, a->max_micro, a->max_B, a->max_T, a->seed, &model));
    gpt2_classifier(model, &out->cls);
    out->pad_id = pad;
    /* Megatron: one all-reduce for the vocab-parallel embedding, four per layer */
    out->tp_floats_per_token = (double)cfg.n_embd * (4.0 * cfg.n_layer + 1);
    out->hidden = cfg.n_embd;
    out->map = &ckpt_map_gpt2;
    snprintf(out->desc, sizeof out->desc, "GPT-2 %d layers, %d wide, %d heads, vocab %d", cfg.n_layer, cfg.n_embd,
             cfg.n_head, cfg.vocab_size);
fail:
    return st;
}

static rt_status gpt2_app_load_hf(glue_model *m, const char *weights, char *report, size_t size) {
    gpt2_model *model = m->cls.model;
    rt_comm *tp = gpt2_model_tp(model);
    ckpt_load_report rep;
    rt_status st = ckpt_load_hf(weights, &ckpt_map_gpt2, gpt2_model_params(model), gpt2_model_config(model)->vocab_size,
                                gpt2_model_config(model)->n_head, tp->rank, tp->size, NULL, &rep);
    if (st == RT_OK) ckpt_load_report_describe(&rep, report, size);
    return st;
}

int main(int argc, char **argv) {
    static const glue_app_model gpt2_family = {
        .prog = "gpt2-classify",
        .summary = "Fine-tunes GPT-2 (GPT2ForSequenceClassification) on a GLUE task, or on your own CSV, TSV or JSON\n"
                   "Lines files (--train-file), and reports the dev metrics. Checkpoints and metrics.jsonl go to\n"
                   "--save-dir; --resume continues bit-exactly.",
        .epilog =
            "examples:\n  gpt2-classify --dataset mrpc\n  gpt2-classify --model ~/models/gpt2 --epochs 3 --lr 2e-5\n"
            "  gpt2-classify --train-file assets/examples/reviews-train.csv \\\n"
            "      --validation-file assets/examples/reviews-validation.csv \\\n"
            "      --test-file assets/examples/reviews-test.csv --label-column sentiment --epochs 3\n"
            "  gpt2-classify --resume --save-dir runs/gpt2-classify\n"
            "  gpt2-classify --model ~/models/gpt2 --lora-r 8 --lora-alpha 16 --lr 2e-4 --save-lora runs/lora\n"
            "  mpirun -np 4 gpt2-classify --dataset mrpc --tp 2\n"
            "  mpirun -np 2 gpt2-classify --dataset mrpc --pp 2 --micro-batches 4",
        .family = "GPT-2",
        .hf_class = "GPT2ForSequenceClassification",
        .hf_cache_repo = "gpt2",
        .default_tokenizer = TZ_SOURCE_DIR "/assets/gpt2-bpe",
        .scratch_desc = "a small GPT-2 (4 layers, 128 wide)",
        .create = gpt2_app_create,
        .load_hf = gpt2_app_load_hf,
        .lora = true,
        .lora_default_targets = "c_attn", /* PEFT's for gpt2 */
        .lora_modules = "c_attn, c_proj (attention's and the MLP's), c_fc",
        .lora_fan_in_fan_out = true, /* HF's Conv1D */
    };
    return glue_app_main(&gpt2_family, argc, argv);
}
