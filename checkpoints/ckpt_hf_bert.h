/* The Hugging Face BERT / RoBERTa name map: loads HF weights (BertModel, BertForPreTraining,
 * BertForSequenceClassification, RobertaModel, RobertaForMaskedLM,
 * RobertaForSequenceClassification safetensors) into the slab of models/bert.h, and writes
 * it back in HF's names and layout.
 *
 * Names: ours are HF's without the "bert."/"roberta." prefix (files may have either prefix or
 * none); the old TF-converted "LayerNorm.gamma"/"LayerNorm.beta" are read as weight/bias. HF
 * keeps q, k and v as three linears; the model has one QKV parameter
 * "encoder.layer.N.attention.self.qkv.{weight,bias}" with rows [q; k; v], which the loader
 * builds from the three and the saver splits again. The pre-training heads (cls.*, lm_head.*)
 * are skipped with one log line that counts them; position_ids buffers are ignored.
 *
 * Tensor parallelism goes through checkpoints/ckpt_tp.h (the one place that knows the rules):
 * load keeps this rank's shard of each full tensor, save all-gathers and tp rank 0 writes. */
#ifndef CKPT_HF_BERT_H
#define CKPT_HF_BERT_H

#include <stdbool.h>

#include "checkpoints/ckpt_hf_gpt2.h" /* ckpt_hf_load_report */
#include "runtime/rt_comm.h"
#include "runtime/rt_params.h"

/* path: a .safetensors file, loaded into this rank's shards (tp_rank of tp_size). Shapes must
 * match the config (errors name file, tensor and both shapes); the word embedding must have
 * exactly vocab_size rows; n_head splits the QKV rows by heads. Parameters the file lacks
 * (e.g. the head of a pre-trained checkpoint) keep their init and are counted in the report. */
rt_status ckpt_hf_bert_load_tp(const char *path, rt_params *p, int vocab_size, int n_head, int tp_rank, int tp_size,
                               ckpt_hf_load_report *report);

/* Writes the slab as an HF Bert/RobertaForSequenceClassification safetensors file ("bert." or
 * "roberta." prefix except on classifier.*, q/k/v split, the embedding cut to vocab_size
 * rows). Collective over tp (rt_comm_self() for one process): rank 0 writes, and every rank
 * returns rank 0's status. */
rt_status ckpt_hf_bert_save(const char *path, const rt_params *p, bool roberta, int vocab_size, rt_comm *tp);

#endif
