/* The checks every family's LoRA golden test makes (tests/test_golden_lora*.c), over
 * what a family gives: its model loaded with PEFT's adapters and one step on its golden batch.
 * GPT-2's classifier (tests/test_golden_lora.c) uses them too, with its score head saved.
 * The golden folder is tests/golden/FAMILY-tiny-lora (scripts/golden/gen_lora_golden.py):
 *   tzlf_against_peft  only the adapters train; the merged model is PEFT's merge_and_unload;
 *                      logits, loss, every adapter gradient and one AdamW step are PEFT's (the
 *                      frozen base unmoved); five clipped steps' losses and gradient norms too;
 *   tzlf_bf16          bf16 in the band of PEFT under torch's CPU bf16 autocast;
 *   tzlf_tp            at tp 2 and 4 (rank threads), logits, loss and every gathered gradient;
 *   tzlf_round_trip    the folder --save-lora writes loads back to the same logits, bit for bit
 *                      (TZ_LORA_EXPORT=DIR keeps it: how FAMILY-tiny-lora/from-tunezoo was made);
 *   tzlf_loads_in_peft that folder, in PEFT (from_tunezoo.safetensors), gives our logits. */
#ifndef TZ_LORA_FAMILY_H
#define TZ_LORA_FAMILY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_peft.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_params.h"

typedef struct {
    const char *name; /* "t5" */
    const ckpt_map *map;
    char dir[4096];     /* the golden folder; its adapter/ is PEFT's initial adapters */
    size_t n_logits;    /* the golden batch's logits */
    int n_adapters;     /* adapter tensors (lora_A and lora_B) */
    int n_saved;        /* tensors trained whole beside them (PEFT's modules_to_save: a classifier head) */
    int n_heads, vocab; /* for the HF export of the merged model */
    /* The model with peft's adapters from folder adapter (NULL: its own init), this tp rank's
     * shards; a status and no checks, so rank threads can call it. */
    rt_status (*load)(rt_backend *be, rt_comm *tp, const ckpt_peft_config *peft, const char *adapter, void **model);
    void (*free)(void *model);
    rt_params *(*params)(void *model);
    /* The golden batch: the logits (may be NULL) and the mean loss; with train, the gradients of
     * that loss (zeroed first), with dropout's step `step`. */
    rt_status (*step)(void *model, bool train, int64_t step, float *logits, float *loss);
} tzlf_family;

void tzlf_against_peft(const tzlf_family *f, rt_backend *be, const ckpt_peft_config *peft);
void tzlf_bf16(const tzlf_family *f, rt_backend *be, const ckpt_peft_config *peft);
void tzlf_tp(const tzlf_family *f, const ckpt_peft_config *peft);
void tzlf_round_trip(const tzlf_family *f, rt_backend *be, const ckpt_peft_config *peft);
void tzlf_loads_in_peft(const tzlf_family *f, rt_backend *be);

#endif
