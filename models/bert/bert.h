/* BERT (Devlin et al., 2019) and RoBERTa (Liu et al., 2019) as Hugging Face's BertModel and
 * RobertaModel define them: post-LayerNorm blocks, GELU (erf), learned absolute positions,
 * token type embeddings and an embedding LayerNorm, with dropout where HF has it. RoBERTa is
 * BERT with flags: positions are computed from the non-pad tokens and start at
 * pad_token_id + 1 (HF's create_position_ids_from_input_ids), and there is one token type.
 *
 * Heads: BertForSequenceClassification (pooler dense + tanh on [CLS], dropout, classifier)
 * and RobertaForSequenceClassification (dropout, dense, tanh, dropout, out_proj on <s>).
 * num_labels == 1 is regression with HF's MSE loss on rt_batch.targets (STS-B).
 *
 * The linears are Megatron column/row-parallel layers (models/layers/parallel.h): fused QKV (rule
 * QKV, per head) and the intermediate dense are column-parallel, the attention output and
 * FFN output denses row-parallel, and the word embedding vocab-parallel (padded to
 * ckpt_tp_padded_vocab rows). Parameter names are HF's without the "bert."/"roberta."
 * prefix, except that q, k and v are one parameter "encoder.layer.N.attention.self.qkv.*"
 * ([q; k; v] rows); the BERT table in checkpoints/ckpt_map_tables.c maps them to and from HF files. */
#ifndef BERT_H
#define BERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoints/ckpt_peft.h"
#include "models/layers/classifier.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/train/rt_batch.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_params.h"

typedef struct {
    bool roberta; /* model_type "roberta": position ids from non-pad tokens, RoBERTa head */
    int vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size;
    int max_position_embeddings, type_vocab_size;
    int pad_token_id;
    float layer_norm_eps, initializer_range;
    float hidden_dropout_prob, attention_probs_dropout_prob;
    float classifier_dropout; /* HF's classifier_dropout, or hidden_dropout_prob when null */
    rt_act_kind act;
    int num_labels;        /* 1 = regression (MSE) */
    bool pp_recompute;     /* a pipeline stage recomputes instead of keeping activations (models/layers/stage_pipe.h);
                            * a run option */
    int checkpoint_layers; /* activation checkpointing: 0 keeps every layer's activations; K keeps
                            * each layer's input and recomputes K layers at a time in backward.
                            * A run option, not in config.json */
    const ckpt_peft_config *lora; /* LoRA (models/layers/lora.h): adapters on its target_modules, every other weight
                                   * frozen but its modules_to_save; NULL: full fine-tuning. A run option, which
                                   * the model copies */
} bert_config;

/* HF defaults (bert-base-uncased) with num_labels 2. */
void bert_config_default(bert_config *c);
/* Reads an HF config.json; model_type must be "bert" or "roberta" (errors name the field).
 * Missing fields take HF's defaults; num_labels comes from id2label (or "num_labels"). */
rt_status bert_config_load(const char *config_json, bert_config *c);
/* The whole model's parameters on tp rank tp->rank, declared and laid out as bert_model_init lays
 * them out but never allocated (names, shapes, offsets), e.g. to check a checkpoint against the
 * model a config describes. Validates c first. Free with rt_params_free. */
rt_status bert_params_layout(const bert_config *c, rt_backend *be, rt_comm *tp, rt_params *out);
/* Writes an HF config.json for Bert/RobertaForSequenceClassification (atomically). */
rt_status bert_config_save(const bert_config *c, const char *path);
/* Checks sizes (each within its limit in models/layers/hf_config.h, and the parameter count), and that
 * tp divides the heads and the intermediate size. */
rt_status bert_config_validate(const bert_config *c, int tp);

typedef struct bert_model bert_model;

/* Builds the model and its activation memory for batches up to max_B x max_T, weights
 * initialised as HF does (normal(0, initializer_range), LayerNorm 1/0, biases 0, the padding
 * rows of the word (and RoBERTa position) embeddings 0) from the counter RNG with `seed`. */
rt_status bert_model_init(const bert_config *c, rt_backend *be, rt_comm *tp, int max_B, int max_T, uint64_t seed,
                          bert_model **out);
/* One pipeline stage, stage pp->rank of pp->size (models/layers/stage.h): its layers, and the
 * embeddings on the first stage, the pooler (RoBERTa: the classifier's dense) and the
 * classifier on the last, for steps of up to max_micro micro-batches through the classifier
 * vtable's pipeline_step (models/layers/stage_pipe.h). The parameters draw the whole model's init. */
rt_status bert_model_init_stage(const bert_config *c, rt_backend *be, rt_comm *tp, rt_comm *pp, int max_micro,
                                int max_B, int max_T, uint64_t seed, bert_model **out);
void bert_model_free(bert_model *m);
rt_params *bert_model_params(bert_model *m);
rt_comm *bert_model_tp(bert_model *m);
const bert_config *bert_model_config(const bert_model *m);
/* Rows of the whole (all ranks) padded word embedding table. */
int bert_model_padded_vocab(const bert_model *m);

/* Sequence classification or regression: forward, and backward when grad_scale > 0
 * (gradients of grad_scale * loss accumulate). Writes the summed loss over labelled rows
 * (labels != -100, or targets not NaN for regression) and, when host_logits is non-NULL, the
 * logits (B, num_labels). Uses b->token_type_ids when non-NULL (else type 0 everywhere). A
 * pipeline stage only evaluates here (grad_scale 0): the batch goes through every stage and
 * each gets the last stage's loss and logits. */
rt_status bert_cls_step(bert_model *m, const rt_batch *b, const mdl_pass *pass, float grad_scale, double *loss_sum,
                        float *host_logits);
/* The last encoder hidden states (B, T, hidden) for ids (and optional mask and token types),
 * without dropout; for checking against HF. */
rt_status bert_hidden(bert_model *m, const int32_t *host_ids, const int32_t *host_mask, const int32_t *host_types,
                      int B, int T, float *host_hidden);
/* Loads HF weights (a .safetensors or .bin file, or a sharded index: ckpt_source.h) into this
 * tp rank's shards (ckpt_load_hf);
 * report (may be NULL) gets one line: tensors loaded, and which parameters kept their init
 * (e.g. the head of a pre-trained checkpoint). */
rt_status bert_load_hf(bert_model *m, const char *weights, char *report, size_t size);
/* config.json and model.safetensors in HF's names into dir (which must exist); collective
 * over tp, tp rank 0 writes. */
rt_status bert_save_hf(bert_model *m, const char *dir);

/* Fills the classifier vtable (step, params, save_hf, free); free releases the model. */
rt_status bert_classifier(bert_model *m, mdl_classifier *out);

#endif
