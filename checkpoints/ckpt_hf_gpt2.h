/* The Hugging Face GPT-2 name map: loads HF weights (GPT2Model, GPT2LMHeadModel or
 * GPT2ForSequenceClassification safetensors) into a tunezoo parameter slab whose names are
 * HF's without "transformer.". Keys may carry the "transformer." prefix or not; Conv1D
 * weights (c_attn, c_proj, c_fc) are stored [in, out] by HF and transposed to [out, in];
 * the tied lm_head and the attn.bias / attn.masked_bias buffers are skipped.
 *
 * Tensor parallelism: the slab holds this rank's shards (each spec's tp rule says how, see
 * checkpoints/ckpt_tp.h). Load reads each full HF tensor and keeps this rank's shard; save
 * all-gathers the shards over the tp communicator and rank 0 writes the full tensors. The
 * embedding (rule VOCAB) is padded to ckpt_tp_padded_vocab() rows on load, and the padding is
 * dropped on save. */
#ifndef CKPT_HF_GPT2_H
#define CKPT_HF_GPT2_H

#include "runtime/rt_comm.h"
#include "runtime/rt_params.h"

typedef struct {
    int loaded;          /* parameters filled from the file */
    int missing;         /* parameters not in the file (they keep their init), e.g. score.weight */
    char first_missing[RT_PARAM_NAME_MAX];
    int unused;          /* tensors in the file that map to no parameter */
} ckpt_hf_load_report;

/* path: a .safetensors file, loaded into this rank's shards (tp_rank of tp_size; 0 of 1 for
 * one process). Shapes must match the config exactly (errors name file, tensor, shapes);
 * the embedding must have exactly vocab_size rows. */
rt_status ckpt_hf_gpt2_load_tp(const char *path, rt_params *p, int vocab_size, int tp_rank, int tp_size,
                               ckpt_hf_load_report *report);
/* One process (tp = 1), the vocab taken from the file's wte (it must pad to the model's rows). */
rt_status ckpt_hf_gpt2_load(const char *path, rt_params *p, ckpt_hf_load_report *report);

/* Writes the slab back as an HF GPT2ForSequenceClassification safetensors file (keys with
 * "transformer.", Conv1D transposed back, the embedding cut to vocab_size rows), so
 * fine-tuned weights load in Transformers. Collective over tp (rt_comm_self() for one
 * process): every rank calls it, rank 0 writes, and every rank returns rank 0's status. */
rt_status ckpt_hf_gpt2_save(const char *path, const rt_params *p, int vocab_size, rt_comm *tp);

/* 1 for the Conv1D weights HF stores [in, out] (c_attn, c_proj, c_fc). */
int ckpt_hf_gpt2_is_conv1d(const char *name);

#endif
