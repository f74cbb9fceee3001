/* The GLUE fine-tuning driver every classification program shares (gpt2-classify,
 * bert-classify): the options, where the weights and the tokenizer come from, the data, the
 * parallel grid, evaluation and metrics, --predict, --save-hf and --comm-stats, around the
 * one training loop in runtime/. A program supplies only its model family (glue_app_model)
 * and calls glue_app_main. */
#ifndef GLUE_APP_H
#define GLUE_APP_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_peft.h"
#include "models/layers/classifier.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"
#include "tokenizers/tok.h"

typedef struct {
    const char *config_path; /* an HF config.json, or NULL for the family's small default */
    int num_labels;          /* 1 = regression */
    const tok_tokenizer *tok;
    rt_backend *be;
    rt_comm *tp;
    rt_comm *pp;      /* the pipeline stages: this model is stage pp->rank of pp->size */
    int max_micro;    /* micro-batches per step (a pipeline stage's schedule) */
    int max_B, max_T; /* the largest batch the model must hold */
    uint64_t seed;
    int checkpoint_layers;        /* activation checkpointing: 0 off, else blocks recomputed together */
    bool pp_recompute;            /* a pipeline stage recomputes instead of keeping activations */
    const ckpt_peft_config *lora; /* LoRA adapters (models/layers/lora.h), or NULL: full fine-tuning */
} glue_model_args;

typedef struct {
    mdl_classifier cls;
    int32_t pad_id;             /* the id batches are padded with (the model pools against it) */
    double tp_floats_per_token; /* activation all-reduce floats per token per step at tp > 1 */
    int hidden;                 /* the width of the activations between pipeline stages */
    char desc[256];             /* one line for the log: "GPT-2 4 layers, 128 wide, ..." */
    const ckpt_map *map;        /* the model's HF names (LoRA's adapter files take them) */
} glue_model;

typedef struct {
    const char *prog, *summary, *epilog;
    const char *family;            /* "GPT-2", for messages */
    const char *hf_class;          /* what --save-hf writes, for --help: "GPT2ForSequenceClassification" */
    const char *hf_cache_repo;     /* used without --model when in the HF cache ("gpt2"); NULL = none */
    const char *default_tokenizer; /* relative to the source tree, for --arch and the small default */
    const char *scratch_desc;      /* what the small default is, for the log */
    /* Validates the config against the tokenizer and the tp size, then builds the model. */
    rt_status (*create)(const glue_model_args *a, glue_model *out);
    /* Loads HF weights, keeping this tp rank's shard; writes a one-line report. */
    rt_status (*load_hf)(glue_model *m, const char *weights_path, char *report, size_t size);
    /* LoRA (apps/common/train_lora.h): whether the family takes adapters (false: no --lora
     * options), PEFT's default targets, the modules that take adapters (for messages), and
     * whether HF's weights are [in, out]. */
    bool lora;
    const char *lora_default_targets, *lora_modules;
    bool lora_fan_in_fan_out;
} glue_app_model;

/* Runs the program: returns the process exit status. */
int glue_app_main(const glue_app_model *family, int argc, char **argv);

#endif
