/* GLM (Du et al., 2022) as FlagAI's GLMModel and THUDM/GLM define it: word embeddings plus
 * two learned position tables (positions and block positions, GLM's 2D positions), the
 * pre-LayerNorm blocks GPT-2 uses (models/layers/stack.h, GELU tanh), a final LayerNorm, and
 * the output through the tied word embeddings. Attention is bidirectional over each row's
 * context (keys before its separator `sep`) and causal after it, as GLMStack's mask.
 *
 * Parameter names are FlagAI's GLMModel keys ("word_embeddings.weight",
 * "transformer.layers.0.attention.query_key_value.weight", ...; the GLM table in
 * checkpoints/ckpt_map_tables.c), weights [out, in], query_key_value as [Q; K; V] blocks.
 * Tensor parallelism splits the vocab, the heads (each of Q, K, V by heads) and the MLP. */
#ifndef GLM_H
#define GLM_H

#include <stdbool.h>
#include <stdint.h>

#include "checkpoints/ckpt_peft.h"
#include "models/layers/pass.h"
#include "models/layers/gen_search.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_params.h"

typedef struct {
    int vocab_size, hidden_size, num_layers, num_attention_heads, max_sequence_length;
    float embedding_dropout_prob, attention_dropout_prob, output_dropout_prob;
    float layernorm_epsilon, init_std;
    bool block_position_encoding; /* two position tables of max_sequence_length + 1 rows */
    int checkpoint_layers;        /* activation checkpointing (models/layers/stack.h); a run option, not saved */
    bool pp_recompute;            /* a pipeline stage recomputes its forward instead of keeping every in-flight
                            * micro-batch's activations (models/layers/stage_pipe.h); a run option, not saved */
    const ckpt_peft_config *lora; /* LoRA (models/layers/lora.h): adapters on its target_modules (query_key_value,
                                   * dense, dense_h_to_4h, dense_4h_to_h), every other weight frozen; NULL:
                                   * none. The model keeps its own copy; a run option, not saved */
} glm_config;

/* GLM-large-chinese's sizes (FlagAI's defaults) with dropout 0.1. */
void glm_config_default(glm_config *c);
/* Reads a FlagAI GLM config.json (vocab_size, hidden_size, num_layers, num_attention_heads,
 * max_sequence_length, the three dropouts, block_position_encoding, ...). Options tunezoo
 * does not implement (relative_encoding, attention_scale != 1, max_memory_length > 0,
 * spell_length) are refused by name. */
rt_status glm_config_load(const char *path, glm_config *c);
/* Writes it back in FlagAI's field names (atomically). */
rt_status glm_config_save(const glm_config *c, const char *path);
/* Sizes are within their limits (models/layers/hf_config.h, and the parameter count), heads divide the
 * width, tp divides the heads and the MLP width. */
rt_status glm_config_validate(const glm_config *c, int tp);

typedef struct glm_model glm_model;

/* A batch as GLM takes it: token ids, positions and block positions (each B x T), and each
 * row's separator: keys before sep[b] are seen by every query of row b, later keys only
 * causally (FlagAI's attention_mask of one number per row). Host arrays. */
typedef struct {
    int B, T;
    const int32_t *ids, *pos, *block_pos, *sep;
} glm_inputs;

rt_status glm_model_init(const glm_config *c, rt_backend *be, rt_comm *tp, int max_B, int max_T, uint64_t seed,
                         glm_model **out);
/* One pipeline stage, stage pp->rank of pp->size (models/layers/stage.h), for steps of up to max_micro
 * micro-batches: its share of the layers; the embeddings on the first stage; the final LayerNorm
 * and a copy of word_embeddings (rt_param_spec.copy) for the tied output on the last; both are
 * marked tied, for the caller to sum their gradients after each step (rt_pipe_sum_tied). Its
 * parameters draw the init
 * streams of the whole model's same-named ones. pp = rt_comm_self() is glm_model_init. */
rt_status glm_model_init_stage(const glm_config *c, rt_backend *be, rt_comm *tp, rt_comm *pp, int max_micro, int max_B,
                               int max_T, uint64_t seed, glm_model **out);
void glm_model_free(glm_model *m);
/* The whole model's parameters on tp rank tp->rank, declared and laid out as glm_model_init lays
 * them out (rt_params_layout) but never allocated: names, shapes, offsets and the slab's size, to
 * size a model too big to build here (tests/test_big_layouts.c). Validates c first. Free with
 * rt_params_free. */
rt_status glm_params_layout(const glm_config *c, rt_backend *be, rt_comm *tp, rt_params *out);
rt_params *glm_model_params(glm_model *m);
rt_comm *glm_model_tp(glm_model *m);
const glm_config *glm_model_config(const glm_model *m);

/* What a batch is scored by, at the output of the final LayerNorm:
 * - GLM_HEAD_LM: the language-model loss of the labelled tokens (labels, B x T, -100 = none);
 * - GLM_HEAD_CLOZE: single-token cloze: row b's logits at position at[b] of its K candidate
 *   tokens cand[b*K + k], against label[b] (in [0, K), -100 = skip); scores (B, K);
 * - GLM_HEAD_CHOICE: multi-token cloze: rows in groups of K choices, each choice's score the
 *   summed log-probability of its labelled tokens, against label[g] per group; scores (B);
 * - GLM_HEAD_SPAN_MATCH (evaluation only): whether every labelled token of a row is the argmax;
 *   scores (B) of 1 or 0.
 * The functions below describe each in full. */
typedef enum { GLM_HEAD_LM, GLM_HEAD_CLOZE, GLM_HEAD_CHOICE, GLM_HEAD_SPAN_MATCH } glm_head_kind;
typedef struct {
    glm_inputs in;
    glm_head_kind kind;
    const int32_t *labels;    /* LM, CHOICE, SPAN_MATCH: (B, T) */
    const int32_t *at, *cand; /* CLOZE */
    int K;                    /* CLOZE: candidates per row; CHOICE: rows per group */
    const int32_t *label;     /* CLOZE: per row; CHOICE: per group */
} glm_task;

/* One batch of a task: its summed loss (*loss_sum) and, with grad_scale > 0, the gradients of
 * grad_scale * loss; scores as the kind says (may be NULL). A pipeline stage evaluates only
 * (grad_scale 0): the batch goes through every stage, and every stage gets the loss and scores. */
rt_status glm_task_step(glm_model *m, const glm_task *t, const mdl_pass *pass, float grad_scale, double *loss_sum,
                        float *scores);
/* A pipeline stage's training step over the micro-batches t[0..M) in 1F1B order (models/layers/stage_pipe.h),
 * pass {seed, step, micro k, training} for micro-batch k: the stage's gradients of
 * grad_scale * loss, and the summed loss on the last stage (0 on the others). The tasks are
 * checked on every stage alike before any work. */
rt_status glm_pipe_step(glm_model *m, const glm_task *t, int M, uint64_t seed, int64_t step, float grad_scale,
                        double *loss_sum);
/* The first-stage tp rank 0's copy of the weights as FlagAI writes them (ckpt_save_hf at path):
 * collective over tp and, with pipeline stages, over pp (every stage's tensors to the first). */
rt_status glm_save_weights(glm_model *m, const char *path);

/* Language-model loss over the positions whose label is not -100 (labels B x T, host):
 * *loss_sum is the summed cross-entropy over the full vocab and *n_targets their count;
 * gradients of grad_scale * loss_sum accumulate when grad_scale > 0. Only the labelled rows
 * go through the output layer. */
rt_status glm_lm_step(glm_model *m, const glm_inputs *in, const int32_t *labels, const mdl_pass *pass, float grad_scale,
                      double *loss_sum, int *n_targets);

/* GLM's WSC check without candidate lists (THUDM/GLM tasks/language_model/finetune.py,
 * lm_forward_step with eval_metric 'classify'): match[b] is 1 when every labelled token of row b
 * is the argmax of the full-vocab logits at its position under teacher forcing, else 0 (also
 * for a row without labels). Forward only, no dropout; *loss_sum as glm_lm_step's. A target
 * tied with another token for the maximum counts as a match (torch's argmax takes the lower
 * id). Collective over tp: each rank's vocab shard gives its maximum, never the logits. */
rt_status glm_span_match(glm_model *m, const glm_inputs *in, const int32_t *labels, double *loss_sum, int32_t *match);

/* Single-token cloze (GLM's classification): the logits at row b's position at[b] of its K
 * candidate tokens cand[b*K + k] (the verbalizers), scored against label[b] (in [0, K), or -100
 * to skip) with cross-entropy over the K. GLM reads them at the [sop] that opens the blank
 * (FlagAI's GLMForSingleTokenCloze: outputs[b, attention_mask[b]]). The same numbers as slicing
 * the full-vocab logits, without computing them. scores (B x K, host) may be NULL. */
rt_status glm_cloze_step(glm_model *m, const glm_inputs *in, const int32_t *at, const int32_t *cand, int K,
                         const int32_t *label, const mdl_pass *pass, float grad_scale, double *loss_sum, float *scores);

/* Multi-token cloze (GLM's COPA): rows come in groups of n_choices, one row per candidate
 * answer put in the blank (its tokens labelled in labels, B x T, host); a candidate's score is
 * the summed log-probability of its answer tokens, and the loss is cross-entropy over each
 * group's scores against label[g] (in [0, n_choices), or -100 to skip), as FlagAI's
 * GLMForMultiTokenCloze trains. scores (B, host) may be NULL. */
rt_status glm_choice_step(glm_model *m, const glm_inputs *in, const int32_t *labels, int n_choices,
                          const int32_t *label, const mdl_pass *pass, float grad_scale, double *loss_sum,
                          float *scores);

/* Model FLOPs of training on B rows of T tokens, n_targets of them through the output layer
 * (models/layers/flops.h). */
double glm_train_flops(const glm_model *m, int B, int T, int n_targets);

/* Full-vocab logits (B, T, vocab) and the final hidden states (B, T, hidden) to the host, for
 * checking; either may be NULL. Collective over tp (the vocab shards are gathered). */
rt_status glm_logits(glm_model *m, const glm_inputs *in, float *host_logits, float *host_hidden);

/* Full-vocab logits at one position per row (at[b] in [0, T)), (B, vocab) to the host: the
 * next-token distribution for generation. Collective over tp. */
rt_status glm_logits_at(glm_model *m, const glm_inputs *in, const int32_t *at, float *host_logits);

/* Generation in the blank with a key/value cache, greedy or beam search as HF's generate
 * (models/layers/gen_search.h, the search T5 uses): the contexts (B x S rows, sep[b] the real tokens
 * of row b, its blank at mask_pos[b]) run once; then [sop] and each chosen token go through the
 * model one per row, at the blank's position with block positions 1, 2, ..., until a row's
 * search ends at o->eos_token_id (GLM's <|endofpiece|>) or o->max_new_tokens. out_ids
 * (B x max_new_tokens, then eos as padding), out_len and out_scores as gen_search_run writes them;
 * observer (may be NULL) sees every step's logits. Collective over tp. */
typedef struct glm_decoder glm_decoder;
rt_status glm_decoder_init(glm_model *m, int max_B, int max_beams, int max_S, int max_new, glm_decoder **out);
void glm_decoder_free(glm_decoder *d);
rt_status glm_generate(glm_decoder *d, const glm_inputs *ctx, const int32_t *mask_pos, int32_t sop,
                       const gen_options *o, gen_observer obs, void *user, int32_t *out_ids, int *out_len,
                       float *out_scores);

/* A FlagAI folder (config.json + pytorch_model.bin holding {'module': ...}, FlagAI's
 * model-parallel pytorch_model_NN.bin files, model.safetensors, or a tz-convert folder at any
 * tp): the config, then the weights, every one required, split for this tp. */
rt_status glm_model_from_dir(const char *dir, rt_backend *be, rt_comm *tp, int max_B, int max_T, glm_model **out,
                             char *report, size_t report_size);
/* The weights of such a folder into a model built from its config (e.g. with run options such
 * as checkpoint_layers set); report as glm_model_from_dir's. */
rt_status glm_model_load_dir(glm_model *m, const char *dir, char *report, size_t report_size);

#endif
