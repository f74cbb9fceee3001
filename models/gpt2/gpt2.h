/* GPT-2 (Radford et al., 2019) as Hugging Face's GPT2Model defines it: learned positions,
 * pre-LayerNorm blocks, GELU (tanh), dropout, and the GPT2ForSequenceClassification head
 * (`score`, no bias, pooled at the last non-pad token). Linears are Megatron column/row-
 * parallel layers over a tp communicator, so tensor parallelism needs no model changes.
 *
 * Parameter names are HF's without the "transformer." prefix ("h.0.attn.c_attn.weight"),
 * and weights are stored [out, in] (HF's Conv1D is [in, out]: converters transpose). */
#ifndef GPT2_H
#define GPT2_H

#include <stdbool.h>
#include <stdint.h>

#include "checkpoints/ckpt_peft.h"
#include "models/layers/classifier.h"
#include "models/layers/pass.h"
#include "models/layers/stage.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/train/rt_batch.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_params.h"

typedef struct {
    int vocab_size, n_positions, n_embd, n_layer, n_head, n_inner;
    float layer_norm_eps, initializer_range;
    float embd_pdrop, resid_pdrop, attn_pdrop;
    rt_act_kind act;
    int num_labels;   /* the classifier's classes; 0: a language model (GPT2LMHeadModel, no score head) */
    int pad_token_id; /* -1 when the config has none */
    int eos_token_id;
    int checkpoint_layers; /* activation checkpointing (models/layers/stack.h); a run option, not in config.json */
    bool pp_recompute;     /* a pipeline stage keeps only each micro-batch's input and recomputes its forward
                            * (models/layers/stage_pipe.h); else it keeps every in-flight micro-batch's activations.
                            * A run option */
    const ckpt_peft_config *lora; /* LoRA (models/layers/lora.h): adapters on its target_modules, every other weight
                                   * frozen but its modules_to_save; NULL: full fine-tuning. A run option, which
                                   * the model copies */
} gpt2_config;

/* HF defaults (gpt2 124M) with num_labels 2. */
void gpt2_config_default(gpt2_config *c);
/* Reads an HF config.json; model_type must be "gpt2". Missing fields take HF's defaults. */
rt_status gpt2_config_load(const char *path, gpt2_config *c);
/* The whole model's parameters on tp rank tp->rank, declared and laid out as gpt2_model_init lays
 * them out but never allocated (names, shapes, offsets), e.g. to check a checkpoint against the
 * model a config describes. Validates c first. Free with rt_params_free. */
rt_status gpt2_params_layout(const gpt2_config *c, rt_backend *be, rt_comm *tp, rt_params *out);
/* Writes an HF config.json for GPT2ForSequenceClassification, or GPT2LMHeadModel when num_labels
 * is 0 (atomically), so that Transformers loads an exported model with from_pretrained. */
rt_status gpt2_config_save(const gpt2_config *c, const char *path);
/* Checks sizes (each within its limit in models/layers/hf_config.h, the parameter count, heads divide
 * width, ...) and that tp divides n_head and the FFN width, with a message naming the one that
 * does not. The vocab need not divide: the model pads its embedding to
 * ckpt_tp_padded_vocab(vocab_size, tp) rows (Megatron's make-vocab-size-divisible-by 128, times
 * tp), zero rows never indexed by a real id. */
rt_status gpt2_config_validate(const gpt2_config *c, int tp);

typedef struct gpt2_model gpt2_model;

/* Builds the model and its activation memory for batches up to max_B x max_T. Weights are
 * initialised as HF initialises them (normal(0, initializer_range), c_proj scaled by
 * 1/sqrt(2 n_layer), LayerNorm 1/0, biases 0) from the counter RNG with `seed`. */
rt_status gpt2_model_init(const gpt2_config *c, rt_backend *be, rt_comm *tp, int max_B, int max_T, uint64_t seed,
                          gpt2_model **out);
/* One pipeline stage of the classifier, stage pp->rank of pp->size (models/layers/stage.h): its
 * blocks, and wte and wpe on the first stage, ln_f and score on the last, for steps of up to
 * max_micro micro-batches (the classifier vtable's pipeline_step, models/layers/stage_pipe.h). The
 * parameters draw the whole model's init. The language model (num_labels 0) keeps a copy of
 * wte on its last stage for the tied head (gpt2_lm_pipe_step). */
rt_status gpt2_model_init_stage(const gpt2_config *c, rt_backend *be, rt_comm *tp, rt_comm *pp, int max_micro,
                                int max_B, int max_T, uint64_t seed, gpt2_model **out);
void gpt2_model_free(gpt2_model *m);
/* The slab holds this rank's shards (shapes and tp rules in its specs); wte.weight has
 * gpt2_model_padded_vocab()/tp rows. */
rt_params *gpt2_model_params(gpt2_model *m);
rt_comm *gpt2_model_tp(gpt2_model *m);
/* Rows of the whole (all ranks) padded embedding table; config's vocab_size stays the real one. */
int gpt2_model_padded_vocab(const gpt2_model *m);
const gpt2_config *gpt2_model_config(const gpt2_model *m);

/* Sequence classification: forward (and backward when grad_scale > 0, accumulating
 * parameter gradients with dL/dlogits scaled by grad_scale). Writes the summed loss over
 * labelled rows to *loss_sum, and the logits (B, num_labels) to host_logits when non-NULL.
 * A pipeline stage runs the forward only (grad_scale 0): the batch goes through every stage
 * and each stage gets the last stage's loss and logits; training steps through the classifier
 * vtable's pipeline_step. */
rt_status gpt2_cls_step(gpt2_model *m, const rt_batch *b, const mdl_pass *pass, float grad_scale, double *loss_sum,
                        float *host_logits);

/* config.json and model.safetensors of an HF GPT2ForSequenceClassification or GPT2LMHeadModel
 * folder into dir (made if missing); every tp rank calls it, one writes. */
rt_status gpt2_save_hf(gpt2_model *m, const char *dir);

/* The model as a sequence classifier for the shared GLUE driver (models/layers/classifier.h). */
void gpt2_classifier(gpt2_model *m, mdl_classifier *out);

/* Causal language modelling with the tied head (GPT2LMHeadModel): host_labels (B, T) are HF's
 * labels, the input ids with -100 where nothing is predicted (padding); position t predicts
 * label t+1, as HF shifts them. Forward, and backward when grad_scale > 0 (dL/dlogits scaled by
 * grad_scale: 1 / n_targets gives HF's mean). The logits stay vocab-parallel (never gathered).
 * Writes the summed loss and the number of predicted tokens. host_mask may be NULL (no padding).
 * A pipeline stage evaluates only (grad_scale 0), through every stage, with the labels
 * gpt2-finetune gives: the ids where the mask is set. */
rt_status gpt2_lm_step(gpt2_model *m, const int32_t *host_ids, const int32_t *host_mask, const int32_t *host_labels,
                       int B, int T, const mdl_pass *pass, float grad_scale, double *loss_sum, int *n_targets);
/* A language model's pipelined step (models/layers/stage_pipe.h) over the micro-batches b[0..n), their
 * labels the ids where the mask is set: the last stage holds a copy of wte for the tied head
 * (rt_param_spec.copy); both are marked tied, and the caller sums their gradients after the
 * step (rt_pipe_sum_tied), so both copies take the same update. The summed loss on the last
 * stage. */
rt_status gpt2_lm_pipe_step(gpt2_model *m, const rt_batch *b, int n, uint64_t seed, int64_t step, float grad_scale,
                            double *loss_sum);
/* Model FLOPs of one language-model training step on B rows of T tokens (models/layers/flops.h). */
double gpt2_lm_train_flops(gpt2_model *m, int B, int T);
/* targets[b, t] = labels[b, t + 1], and -100 at the last position: HF's shift. */
void gpt2_lm_shift_labels(const int32_t *labels, int B, int T, int32_t *targets);

/* Text generation from one prompt with a key/value cache, choosing each token as HF's generate
 * does: temperature 0 is greedy (the first argmax); otherwise the logits are divided by the
 * temperature, cut to the top_k (0: all) and to the top_p mass (1: all), and a token is drawn from
 * their softmax with the counter RNG (the same seed, the same tokens). Stops after eos_token_id
 * or max_new_tokens. The prompt and the new tokens must fit the model's max_T. out gets the new
 * tokens (room for max_new_tokens), *n_out their count; step_logits, when not NULL, each step's
 * logits before the choice (room for max_new_tokens x vocab_size). Every tp rank calls it. */
typedef struct {
    int max_new_tokens;
    float temperature, top_p;
    int top_k;
    uint64_t seed;
    int eos_token_id;
} gpt2_sample_opts;
rt_status gpt2_generate(gpt2_model *m, const int32_t *prompt, int n, const gpt2_sample_opts *o, int32_t *out,
                        int *n_out, float *step_logits);

/* Language-model logits (B, T, vocab) through the tied head, and the final hidden states
 * (B, T, n_embd); for checking a GPT2LMHeadModel checkpoint. Either output may be NULL. The
 * padding columns are dropped; with tp > 1 the vocab shards are all-gathered (a collective:
 * every rank calls it, and every rank gets the full logits). */
rt_status gpt2_lm_logits(gpt2_model *m, const int32_t *host_ids, int B, int T, float *host_logits, float *host_hidden);

#endif
