/* LoRA in the training programs (issue 36): the options every program whose model takes
 * adapters shares, the run's adapter settings from them or from a PEFT folder, and the folder
 * --save-lora writes. */
#ifndef TRAIN_LORA_H
#define TRAIN_LORA_H

#include <stdbool.h>

#include "apps/common/train_app.h"
#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_peft.h"

/* LoRA's options (issue 36: --lora-r, --lora-alpha, --lora-dropout, --lora-targets, --lora-from,
 * --save-lora), for the programs whose models take adapters; TRAIN_APP_N_LORA_OPTS more entries. */
#define TRAIN_APP_N_LORA_OPTS 6
void train_app_add_lora_options(train_app_opts *o, rt_opt *opts, int *n);
/* What a family's LoRA is, for train_app_lora_config. */
typedef struct {
    const char *default_targets; /* PEFT's for the family, comma-separated ("c_attn") */
    const char *task_type;       /* "SEQ_CLS", "CAUSAL_LM", "SEQ_2_SEQ_LM"; NULL for a plain module (GLM) */
    const char *modules_to_save; /* comma-separated (SEQ_CLS: "classifier,score", as PEFT adds), or NULL */
    const char *base_model;      /* base_model_name_or_path (the --model folder), or NULL */
    bool fan_in_fan_out;         /* the HF base weights are [in, out] (GPT-2's Conv1D), as PEFT records it */
} train_app_lora_family;
/* The run's LoRA settings into out: *on false without --lora-r or --lora-from. With --lora-from,
 * the folder's adapter_config.json (and then --lora-r and the rest may not be given: the
 * adapter's own settings hold); else the options, with the family's default targets. Usage
 * errors for what cannot go with them: --save-lora without LoRA, --zero 3, --pp. */
rt_status train_app_lora_config(const train_app_opts *o, const rt_args_spec *spec, const train_app_lora_family *fam,
                                ckpt_peft_config *out, bool *on);
/* After the model is built and its base weights loaded: every target matched an adapter
 * (family and modules name the model and its adaptable modules in the error), --lora-from's
 * tensors loaded, and the log line with how many parameters train. */
rt_status train_app_lora_ready(const train_app_opts *o, const ckpt_peft_config *cfg, const ckpt_map *map,
                               const char *family, const char *modules, rt_params *p, const rt_grid *grid);
/* --save-lora DIR: a PEFT folder (adapter_config.json, adapter_model.safetensors) written whole,
 * as train_app_export_dir writes; collective over the world. Without the option, to default_dir
 * (a program that writes its adapters anyway: SAVE_DIR/lora), or nothing when that is NULL. */
rt_status train_app_save_lora(const train_app_opts *o, const rt_grid *grid, const ckpt_peft_config *cfg,
                              const ckpt_map *map, const rt_params *p, const char *default_dir);
/* The program's HF export (train_app_export_hf with its writer) of the model; with LoRA (lora not
 * NULL) the merged model, as PEFT's merge_and_unload gives it: every adapter folded into its base
 * weight (mdl_lora_merge), a plain HF folder without adapters, and the weights restored after. */
rt_status train_app_export_model(const char *dir, const rt_grid *grid, const ckpt_peft_config *lora,
                                 const ckpt_map *map, rt_params *p, train_app_hf_write write, void *ctx);
#endif
