/* T5 (Raffel et al., 2020) as Hugging Face's T5ForConditionalGeneration defines it, for
 * seq2seq fine-tuning (t5-finetune): build a model from a config or an HF folder, run a
 * padded (source, labels) batch forward to the loss and the logits, and backward into the
 * parameter slab's gradients; export back to HF. Generation and the trainer hookup live
 * elsewhere.
 *
 * The architecture: an encoder and a decoder stack of pre-norm blocks (T5LayerNorm = RMSNorm
 * with a weight, no bias, no mean subtraction); attention without the 1/sqrt(d) scaling and
 * with a bucketed relative position bias that only block 0 of each stack owns (bidirectional
 * in the encoder, causal in the decoder) and every block of the stack adds; cross-attention
 * without a position bias; the encoder's padding mask on encoder self-attention and on
 * cross-attention, the decoder causal. The FFN is v1.0's DenseReluDense (wi, relu, wo) or
 * v1.1/flan-t5's gated one (wi_0, wi_1, gelu_new(wi_0 x) * wi_1 x, wo). v1.0 ties the LM head
 * to `shared` and scales the decoder output by d_model^-0.5 first; v1.1 has its own lm_head
 * and no rescale. Dropout is HF's (embeddings, attention probabilities, each sublayer's
 * output, inside the FFN, after each final norm) from the counter RNG, and tp = 2 draws the
 * masks tp = 1 draws.
 *
 * Parameters carry HF's names exactly ("encoder.block.0.layer.0.SelfAttention.q.weight", ...;
 * the T5 table in checkpoints/ckpt_map_tables.c), linears are [out, in] and have no biases. Tensor parallelism
 * uses the Megatron layers of models/layers/parallel.h: q, k, v, wi* column-parallel (heads and FFN
 * columns split), o and wo row-parallel, `shared` and lm_head vocab-parallel (padded to
 * ckpt_tp_padded_vocab rows), the relative bias tables split by heads (rule ROW on
 * [num_buckets, heads]). */
#ifndef T5_H
#define T5_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoints/ckpt_peft.h"
#include "models/layers/pass.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_params.h"

typedef struct {
    int vocab_size, d_model, d_kv, d_ff, num_heads;
    int num_layers, num_decoder_layers; /* encoder and decoder blocks */
    int relative_attention_num_buckets, relative_attention_max_distance;
    float dropout_rate, layer_norm_epsilon, initializer_factor;
    bool gated;                 /* feed_forward_proj "gated-*" (wi_0, wi_1) */
    rt_act_kind act;            /* relu, gelu_new (tanh) or gelu (erf) */
    bool tie_word_embeddings;   /* the LM head is `shared` (no lm_head.weight) */
    bool scale_decoder_outputs; /* decoder output * d_model^-0.5 before the head */
    int pad_token_id, eos_token_id, decoder_start_token_id;
    int checkpoint_layers;        /* activation checkpointing: 0 keeps every block's activations;
                                             * K keeps each block's input and recomputes K blocks at a time
                                             * in backward. A run option, not in config.json */
    bool pp_recompute;            /* a pipeline stage keeps each in-flight micro-batch's input only and
                                             * recomputes its forward in the backward; a run option */
    const ckpt_peft_config *lora; /* LoRA (models/layers/lora.h): adapters on its target_modules (q, k, v, o,
                                             * wi, wi_0, wi_1, wo; the cross-attention's too), every other weight
                                             * frozen; NULL: none. The model keeps its own copy */
} t5_config;

/* HF's defaults (t5-small): relu FFN, tied head, scaled decoder output. */
void t5_config_default(t5_config *c);
/* Reads an HF config.json (model_type "t5"); missing fields take HF's defaults. The head
 * follows the file: tie_word_embeddings (default true), and scale_decoder_outputs when
 * present (transformers 5 writes it), else equal to tie_word_embeddings. Errors name the file
 * and the field. */
rt_status t5_config_load(const char *config_json, t5_config *c);
/* Writes an HF config.json for T5ForConditionalGeneration (atomically). */
rt_status t5_config_save(const t5_config *c, const char *path);
/* Checks sizes (each within its limit in models/layers/hf_config.h, num_heads x d_kv, and the parameter
 * count), and that tp divides num_heads and d_ff, naming what does not. */
rt_status t5_config_validate(const t5_config *c, int tp);

typedef struct t5_model t5_model;

/* Builds the model and its activation memory for batches of up to max_B rows, max_src source
 * and max_tgt target tokens. Weights are initialised as HF's _init_weights does (shared
 * N(0, factor), q N(0, factor (d_model d_kv)^-1/2), ..., norms 1) from the counter RNG. */
rt_status t5_model_init(const t5_config *c, rt_backend *be, rt_comm *tp, int max_B, int max_src, int max_tgt,
                        uint64_t seed, t5_model **out);
/* One pipeline stage, stage pp->rank of pp->size, for steps of up to max_micro micro-batches
 * (pp = rt_comm_self() is t5_model_init). The encoder's blocks fill the first
 * pp x num_layers / (num_layers + num_decoder_layers) stages in equal shares and the decoder's
 * the rest; RT_ERR_CONFIG says why when they cannot. A stack's first stage holds its embedding
 * (`shared`: the encoder's is the whole model's, the decoder's a copy) and block 0's relative
 * bias table; its last the final norm; the last stage the head (a tied one reads another copy
 * of `shared`). Between stages go the hidden states, the bias every block of the stack adds,
 * and on the decoder's side the encoder's output; back come their gradients. Its parameters
 * draw the whole model's init streams. */
rt_status t5_model_init_stage(const t5_config *c, rt_backend *be, rt_comm *tp, rt_comm *pp, int max_micro, int max_B,
                              int max_src, int max_tgt, uint64_t seed, t5_model **out);
void t5_model_free(t5_model *m);
/* The whole model's parameters on tp rank tp->rank, declared and laid out as t5_model_init lays
 * them out (rt_params_layout) but never allocated: names, shapes, offsets and the slab's size, to
 * size a model too big to build here (tests/test_big_layouts.c). Validates c first. Free with
 * rt_params_free. */
rt_status t5_params_layout(const t5_config *c, rt_backend *be, rt_comm *tp, rt_params *out);
rt_params *t5_model_params(t5_model *m);
rt_comm *t5_model_tp(t5_model *m);
const t5_config *t5_model_config(const t5_model *m);
/* Rows of the whole (all ranks) padded `shared` (and lm_head) table. */
int t5_model_padded_vocab(const t5_model *m);

/* The dropout rate of every site (HF's dropout_rate, e.g. 0.1 to fine-tune a checkpoint whose
 * config says 0); in [0, 1). */
rt_status t5_set_dropout(t5_model *m, float p);

/* An HF folder's config as the model it holds: config.json, with the head decided from the
 * weights too (see t5_model_from_hf); weights gets the weights file's path. */
rt_status t5_config_from_hf(const char *dir, t5_config *c, char *weights, size_t weights_size);
/* An HF folder (config.json + model.safetensors) as a model: reads the config, decides the
 * head from the weights too (an lm_head.weight that differs from shared.weight is an untied
 * head, as transformers 5 loads it, whatever the config says), builds the model and loads
 * this tp rank's shards. report (may be NULL) gets one line on what was loaded. */
rt_status t5_model_from_hf(const char *dir, rt_backend *be, rt_comm *tp, int max_B, int max_src, int max_tgt,
                           t5_model **out, char *report, size_t report_size);
/* Loads HF weights (a .safetensors file) into the model's shards. Every parameter must be in
 * the file (a T5 checkpoint without one is not this architecture). */
rt_status t5_load_hf(t5_model *m, const char *weights, char *report, size_t report_size);
/* config.json and model.safetensors into dir (which must exist); collective over tp. */
rt_status t5_save_hf(t5_model *m, const char *dir);

/* One padded seq2seq batch on the host. */
typedef struct {
    int B, S, T;                      /* rows, source tokens, target tokens */
    const int32_t *src_ids;           /* (B, S), padded with any id (pad_token_id by convention) */
    const int32_t *src_mask;          /* (B, S) 1 real, 0 padding (either side); NULL = all real */
    const int32_t *labels;            /* (B, T) targets; -100 and pad_token_id are ignored */
    const int32_t *decoder_input_ids; /* (B, T), or NULL for labels shifted right (HF) */
} t5_batch;

/* Forward, and backward when grad_scale > 0: the cross-entropy of every target token that
 * is not ignored; gradients of grad_scale * (sum of those losses) accumulate into the slab
 * (grad_scale = 1 / n_targets gives HF's mean loss). Writes the summed loss and the number of
 * targets counted; host_logits (B, T, vocab_size), when non-NULL, gets the logits (with
 * tp > 1 a gather every rank joins). */
rt_status t5_step(t5_model *m, const t5_batch *b, const mdl_pass *pass, float grad_scale, double *loss_sum,
                  int *n_targets, float *host_logits);
/* A pipeline stage's training step over the micro-batches b[0..M) in 1F1B order (runtime/train/rt_pipe.h),
 * pass {seed, step, micro k, training} for micro-batch k: the stage's gradients of
 * grad_scale * loss (`shared` and its copies are marked tied: the caller sums their gradients,
 * rt_pipe_sum_tied), the summed
 * loss on the last stage (0 on the others) and, on every stage, the targets counted. The
 * batches are checked on every stage alike before any work. A stage evaluates through t5_step
 * (grad_scale 0, no logits). */
rt_status t5_pipe_step(t5_model *m, const t5_batch *b, int M, uint64_t seed, int64_t step, float grad_scale,
                       double *loss_sum);
/* Model FLOPs of training on B pairs of S source and T target tokens (models/layers/flops.h). */
double t5_train_flops(const t5_model *m, int B, int S, int T);
/* The encoder's output (B, S, d_model) after its final norm, without dropout; for checks. */
rt_status t5_encode(t5_model *m, const int32_t *src_ids, const int32_t *src_mask, int B, int S, float *host_hidden);

/* HF's relative_position_bucket: the bucket of relative position (key - query). */
int t5_relative_bucket(int relative_position, bool bidirectional, int num_buckets, int max_distance);

#endif
