/* HF PEFT's LoRA adapter folders (issue 36): adapter_config.json, read and written, and the
 * names of adapter_model.safetensors. A folder PEFT wrote loads here, and one written here loads
 * in PeftModel.from_pretrained, so adapters travel both ways.
 *
 * What is taken: peft_type LORA with r, lora_alpha, lora_dropout, target_modules (a list of
 * module names, matched as PEFT matches them: a module's whole name or its last dotted parts),
 * fan_in_fan_out, use_rslora (scale alpha / sqrt(r) instead of alpha / r), modules_to_save,
 * task_type and base_model_name_or_path. What tunezoo does not train is refused with a line that
 * names the file and the field: DoRA, LoRA biases (bias other than "none", lora_bias), per-module
 * rank_pattern or alpha_pattern, layers_to_transform, target_modules as a regular expression,
 * exclude_modules and target_parameters. Keys PEFT adds that change nothing here are ignored.
 *
 * Tensor names in adapter_model.safetensors (PEFT's, the adapter's own name dropped):
 *   base_model.model.MODULE.lora_A.weight   (r, in)
 *   base_model.model.MODULE.lora_B.weight   (out, r)
 *   base_model.model.MODULE.WEIGHT          a modules_to_save copy (e.g. score.weight) */
#ifndef CKPT_PEFT_H
#define CKPT_PEFT_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/base/rt_status.h"

#define CKPT_PEFT_MAX_R 4096
/* What PEFT writes before a module's name in adapter_model.safetensors. */
#define CKPT_PEFT_PREFIX "base_model.model."

typedef struct {
    int r;
    double alpha;
    double dropout;
    bool fan_in_fan_out; /* the base weights are [in, out] (GPT-2's Conv1D) */
    bool use_rslora;
    int n_targets;
    char **targets; /* (n_targets) module names */
    int n_save;
    char **modules_to_save; /* (n_save) trained whole beside the adapters (the classification head) */
    char *task_type;        /* "SEQ_CLS", "CAUSAL_LM", "SEQ_2_SEQ_LM", ...; NULL when none */
    char *base_model;       /* base_model_name_or_path; NULL when none */
} ckpt_peft_config;

/* The scale of B A x: alpha / r, or alpha / sqrt(r) with use_rslora, as PEFT computes it. */
double ckpt_peft_scale(const ckpt_peft_config *c);

/* Reads DIR/adapter_config.json (or the file itself when path names a file). RT_ERR_IO for a
 * file that cannot be read, RT_ERR_FORMAT for JSON that does not parse, RT_ERR_CONFIG for a
 * field of the wrong kind, out of range, or of a feature refused above. */
rt_status ckpt_peft_config_read(const char *path, ckpt_peft_config *out);
/* The same over text in memory; name labels the messages. */
rt_status ckpt_peft_config_parse(const char *text, size_t len, const char *name, ckpt_peft_config *out);
/* The JSON text of c as PEFT writes it (every key PEFT 0.21 reads, sorted); the caller frees it. */
char *ckpt_peft_config_json(const ckpt_peft_config *c);
/* Writes DIR/adapter_config.json atomically. */
rt_status ckpt_peft_config_write(const char *dir, const ckpt_peft_config *c);
void ckpt_peft_config_free(ckpt_peft_config *c);
/* A deep copy of src into dst (free with ckpt_peft_config_free). */
void ckpt_peft_config_copy(ckpt_peft_config *dst, const ckpt_peft_config *src);

/* Whether a module named `module` (dotted, e.g. "transformer.h.0.attn.c_attn") is a target:
 * PEFT's rule for a list, the name equal to a target or ending in "." target. */
bool ckpt_peft_is_target(const ckpt_peft_config *c, const char *module);
/* Whether it is one of modules_to_save, by the same rule. */
bool ckpt_peft_is_saved(const ckpt_peft_config *c, const char *module);

typedef enum { CKPT_PEFT_LORA_A, CKPT_PEFT_LORA_B, CKPT_PEFT_SAVED } ckpt_peft_kind;

/* ".lora_A.weight" and ".lora_B.weight", by ckpt_peft_kind: what follows a module's name. */
extern const char *const ckpt_peft_lora_suffix[2];
/* The length of name's module part when it ends in one of those suffixes (*kind says which,
 * when not NULL), else 0. */
size_t ckpt_peft_adapter_stem(const char *name, ckpt_peft_kind *kind);

/* Splits a tensor name of adapter_model.safetensors into its module (the part after
 * "base_model.model.", before ".lora_A.weight" / ".lora_B.weight") and kind; a name without
 * lora_A or lora_B is a modules_to_save tensor, whose module is the whole name after the prefix
 * ("score.weight"). RT_ERR_FORMAT for a name without the prefix or too long for cap. */
rt_status ckpt_peft_tensor_name(const char *name, char *module, size_t cap, ckpt_peft_kind *kind);

#endif
