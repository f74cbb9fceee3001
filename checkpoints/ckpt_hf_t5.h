/* The Hugging Face T5 name map: loads T5ForConditionalGeneration / T5Model safetensors (v1.0
 * with a tied head, v1.1 and flan-t5 with their own lm_head) into the slab of models/t5.h,
 * and writes it back.
 *
 * The slab's names are HF's own ("shared.weight", "encoder.block.N.layer.0.SelfAttention.q.weight",
 * ..., "lm_head.weight" when untied) and HF's Linear weights are already [out, in], so the
 * map is the identity except for aliases: `shared` may be stored only as
 * encoder.embed_tokens.weight or decoder.embed_tokens.weight (older checkpoints; the copies
 * are skipped when shared.weight is there), a tied checkpoint may carry an lm_head.weight equal
 * to shared.weight (skipped), and decoder.block.0.layer.1.EncDecAttention
 * .relative_attention_bias.weight (which HF itself ignores) is skipped.
 *
 * Tensor parallelism goes through checkpoints/ckpt_tp.h: load keeps this rank's shard of each
 * full tensor, save all-gathers and tp rank 0 writes. */
#ifndef CKPT_HF_T5_H
#define CKPT_HF_T5_H

#include <stdbool.h>

#include "checkpoints/ckpt_hf_gpt2.h" /* ckpt_hf_load_report */
#include "runtime/rt_comm.h"
#include "runtime/rt_params.h"

/* path: a .safetensors file, loaded into this rank's shards (tp_rank of tp_size). Shapes must
 * match the config (errors name file, tensor and both shapes); `shared` (and lm_head) must
 * have exactly vocab_size rows. Parameters the file lacks are counted in the report (the
 * caller decides whether that is an error). A file whose lm_head differs from its shared
 * table loaded into a slab without lm_head.weight (a tied model) is an error that says so. */
rt_status ckpt_hf_t5_load_tp(const char *path, rt_params *p, int vocab_size, int tp_rank, int tp_size,
                             ckpt_hf_load_report *report);

/* Whether the file holds its own LM head: an lm_head.weight that is not a byte-for-byte copy
 * of the shared embedding (as transformers 5 decides whether to tie). */
rt_status ckpt_hf_t5_has_own_head(const char *path, bool *own_head);

/* Writes the slab as an HF T5ForConditionalGeneration safetensors file (HF names, `shared`
 * and lm_head cut to vocab_size rows). Collective over tp (rt_comm_self() for one process):
 * rank 0 writes, and every rank returns rank 0's status. */
rt_status ckpt_hf_t5_save(const char *path, const rt_params *p, int vocab_size, rt_comm *tp);

#endif
