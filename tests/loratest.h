/* Helpers the LoRA golden tests share (tests/test_golden_lora*.c): the fp32 tolerances
 * (docs/architecture.md) and the comparison of every trainable tensor with PEFT's, by the names PEFT gives them. */
#ifndef TZ_LORATEST_H
#define TZ_LORATEST_H

#include <stdbool.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_peft.h"
#include "checkpoints/ckpt_safetensors.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_params.h"

#define TZL_FWD_ATOL 1e-5f
#define TZL_FWD_RTOL 1e-4f
#define TZL_GRAD_ATOL 1e-4f
#define TZL_GRAD_RTOL 1e-3f

/* Every trainable parameter of p against golden file g's `prefix`.NAME, NAME its PEFT name (the
 * adapter file's): gradients (grads) or values after one AdamW step, checked with that step's
 * gradient grad.NAME (tz_check_after_adamw); `expected` tensors must have been compared. */
void tzl_compare_trainable(const ckpt_st_file *g, const char *prefix, rt_params *p, bool grads, const ckpt_map *map,
                           int expected);

/* The merged model (mdl_lora_merge, then the HF export, ckpt_save_hf) against PEFT's
 * merge_and_unload (lora_dir/merged.safetensors): each of its `expected` tensors by HF name, within
 * the fp32 forward tolerance; the export holds no adapter, and mdl_lora_unmerge restores the
 * weights bit for bit. p: one rank's whole model (CPU) with the adapters of lora_dir/adapter. */
void tzl_check_merged(const char *lora_dir, rt_params *p, const ckpt_peft_config *cfg, const ckpt_map *map,
                      int vocab_size, int n_head, int expected);

/* bf16 against PEFT under torch's CPU bf16 autocast (lora_dir/bf16_autocast.safetensors, by
 * gen_lora_golden.py --bf16-autocast) in testutil.h's band (tz_check_bf16_golden, PEFT's fp32
 * golden.safetensors the reference): the logits (n), the loss and every trainable gradient of
 * p (grads: copies of p->grad), ours at bf16 (16) and at fp32 (32); `expected` gradients. */
void tzl_check_bf16(const char *lora_dir, const char *fam, const rt_params *p, const ckpt_map *map,
                    const float *logits16, const float *logits32, size_t n, float loss16, float loss32,
                    const float *grads16, const float *grads32, int expected);

/* The trainable gradients of a tp run, gathered into full tensors on rank 0. */
enum { TZL_MAX_TRAINABLE = 96 };
typedef struct {
    int n;
    char names[TZL_MAX_TRAINABLE][RT_PARAM_NAME_MAX];
    float *grads[TZL_MAX_TRAINABLE]; /* rank 0's; NULL on the others */
    size_t numel[TZL_MAX_TRAINABLE];
} tzl_grads;

/* Gathers each trainable gradient of p (this rank's shards) into out; every rank calls it. */
rt_status tzl_gather_trainable(rt_backend *be, rt_comm *tp, const rt_params *p, tzl_grads *out);
void tzl_grads_free(tzl_grads *g);
/* Gathered gradients against g's grad.NAME (NAME their PEFT names), `expected` of them; label
 * starts each check's name ("tp 2"). */
void tzl_check_gathered(const ckpt_st_file *g, const ckpt_map *map, const tzl_grads *got, int expected,
                        const char *label);

#endif
