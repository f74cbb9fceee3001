/* The Hugging Face GPT-2 name map: loads HF weights (GPT2Model, GPT2LMHeadModel or
 * GPT2ForSequenceClassification safetensors) into a tunezoo parameter slab whose names are
 * HF's without "transformer.". Keys may carry the "transformer." prefix or not; Conv1D
 * weights (c_attn, c_proj, c_fc) are stored [in, out] by HF and transposed to [out, in];
 * the tied lm_head and the attn.bias / attn.masked_bias buffers are skipped. */
#ifndef CKPT_HF_GPT2_H
#define CKPT_HF_GPT2_H

#include "runtime/rt_params.h"

typedef struct {
    int loaded;          /* parameters filled from the file */
    int missing;         /* parameters not in the file (they keep their init), e.g. score.weight */
    char first_missing[RT_PARAM_NAME_MAX];
    int unused;          /* tensors in the file that map to no parameter */
} ckpt_hf_load_report;

/* path: a .safetensors file. Shapes must match exactly (errors name file, tensor, shapes). */
rt_status ckpt_hf_gpt2_load(const char *path, rt_params *p, ckpt_hf_load_report *report);

/* Writes the slab back as an HF GPT2ForSequenceClassification safetensors file (keys with
 * "transformer.", Conv1D transposed back), so fine-tuned weights load in Transformers. */
rt_status ckpt_hf_gpt2_save(const char *path, const rt_params *p);

/* 1 for the Conv1D weights HF stores [in, out] (c_attn, c_proj, c_fc). */
int ckpt_hf_gpt2_is_conv1d(const char *name);

#endif
