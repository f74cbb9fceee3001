/* The tensors of a PEFT LoRA folder (adapter_model.safetensors) read into a model's slab and
 * written from it (issue 36); adapter_config.json is checkpoints/ckpt_peft.h's.
 *
 * The trainable parameters of a LoRA model (models/layers/lora.h: the adapters and the modules_to_save)
 * are the file's tensors, under PEFT's names: our "h.0.attn.c_attn.lora_A.weight" is
 * "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight" (the base weight's HF module from
 * the map), our "score.weight" "base_model.model.score.weight". Full tensors: each tp rank reads
 * its shard, and writing gathers them. */
#ifndef CKPT_PEFT_WEIGHTS_H
#define CKPT_PEFT_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoints/ckpt_map.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_params.h"

#define CKPT_PEFT_WEIGHTS_FILE "adapter_model.safetensors"

/* PEFT's tensor name of our trainable parameter `ours` (an adapter, or a module saved whole);
 * false, with an error set, when the map gives it no single HF tensor in our layout. */
bool ckpt_peft_param_name(const ckpt_map *map, const char *ours, char *out, size_t size);

/* Fills this tp rank's shard of every trainable parameter of p from DIR/adapter_model.safetensors
 * (or the file itself when path names one). The file must hold each of them with its full shape,
 * and nothing else: a tensor of another target module or rank is refused, naming the file and
 * the tensor, since it would be dropped silently. stages (a host comm; NULL or size 1: p is the
 * whole model) are pipeline stages, p one of them: a tensor another stage uses is not refused,
 * and one stage's failure fails every stage (collective over stages). */
rt_status ckpt_peft_load_weights(const char *path, const ckpt_map *map, rt_params *p, int tp_rank, int tp_size,
                                 rt_comm *stages);

/* Writes every trainable parameter of p, full, to DIR/adapter_model.safetensors (atomically).
 * Collective over tp: tp rank 0 writes, and every rank returns its status. */
rt_status ckpt_peft_save_weights(const char *dir, const ckpt_map *map, const rt_params *p, rt_comm *tp);

/* W += scale (B A), as PEFT's merge computes a LoRA delta (float sums of r products, then scaled):
 * B (out, r), A (r, in); W (out, in), or (in, out) when transposed (fan_in_fan_out: GPT-2's Conv1D
 * in HF's layout). */
void ckpt_peft_fold(float *W, const float *B, const float *A, int64_t out, int64_t in, int64_t r, float scale,
                    bool transposed);

#endif
