/* The name and layout tables, one per architecture (see ckpt_map.h for the row format).
 * Our names are the parameter names the models declare; theirs are the names in the
 * framework's own checkpoints, after the map's prefix. */
#include "checkpoints/ckpt_map.h"

#define ROWS(r) (r), (sizeof(r) / sizeof *(r))

static const char *const qkv_words[3] = {"query", "key", "value"};

/* ---- GPT-2: HF GPT2Model / GPT2LMHeadModel / GPT2ForSequenceClassification ---- */
static const ckpt_map_row gpt2_rows[] = {
    {"wte.weight", "wte.weight", CKPT_LAYOUT_SAME, RT_TP_VOCAB, 0},
    {"wpe.weight", "wpe.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"h.{n}.ln_1.weight", "h.{n}.ln_1.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"h.{n}.ln_1.bias", "h.{n}.ln_1.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    /* Conv1D weights are [in, out] in HF */
    {"h.{n}.attn.c_attn.weight", "h.{n}.attn.c_attn.weight", CKPT_LAYOUT_TRANSPOSE, RT_TP_QKV, 0},
    {"h.{n}.attn.c_attn.bias", "h.{n}.attn.c_attn.bias", CKPT_LAYOUT_SAME, RT_TP_QKV, 0},
    {"h.{n}.attn.c_proj.weight", "h.{n}.attn.c_proj.weight", CKPT_LAYOUT_TRANSPOSE, RT_TP_ROW, 0},
    {"h.{n}.attn.c_proj.bias", "h.{n}.attn.c_proj.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"h.{n}.ln_2.weight", "h.{n}.ln_2.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"h.{n}.ln_2.bias", "h.{n}.ln_2.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"h.{n}.mlp.c_fc.weight", "h.{n}.mlp.c_fc.weight", CKPT_LAYOUT_TRANSPOSE, RT_TP_COL, 0},
    {"h.{n}.mlp.c_fc.bias", "h.{n}.mlp.c_fc.bias", CKPT_LAYOUT_SAME, RT_TP_COL, 0},
    {"h.{n}.mlp.c_proj.weight", "h.{n}.mlp.c_proj.weight", CKPT_LAYOUT_TRANSPOSE, RT_TP_ROW, 0},
    {"h.{n}.mlp.c_proj.bias", "h.{n}.mlp.c_proj.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"ln_f.weight", "ln_f.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"ln_f.bias", "ln_f.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"score.weight", "score.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, CKPT_ROW_NO_PREFIX},
};
/* the tied LM head, and the causal-mask buffers (".attn.bias" is a buffer, "c_attn.bias" a
 * parameter) */
static const char *const gpt2_ignored[] = {"lm_head.weight", "h.{n}.attn.bias", "h.{n}.attn.masked_bias", NULL};
const ckpt_map ckpt_map_gpt2 = {.arch = "gpt2",
                                .prefix = "transformer.",
                                .rows = ROWS(gpt2_rows),
                                .ignored = gpt2_ignored,
                                .heads_key = "n_head",
                                .vocab_key = "vocab_size"};

/* ---- BERT and RoBERTa: HF BertModel / RobertaModel and their classifiers ---- */
#define BERT_LAYER "encoder.layer.{n}."
/* clang-format off */
static const ckpt_map_row bert_rows[] = {
    {"embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight", CKPT_LAYOUT_SAME, RT_TP_VOCAB, 0},
    {"embeddings.position_embeddings.weight", "embeddings.position_embeddings.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"embeddings.token_type_embeddings.weight", "embeddings.token_type_embeddings.weight", CKPT_LAYOUT_SAME,
     RT_TP_NONE, 0},
    {"embeddings.LayerNorm.weight", "embeddings.LayerNorm.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"embeddings.LayerNorm.bias", "embeddings.LayerNorm.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    /* one fused [q; k; v] parameter from HF's three Linear layers */
    {BERT_LAYER "attention.self.qkv.weight", BERT_LAYER "attention.self.{p}.weight", CKPT_LAYOUT_QKV_PARTS, RT_TP_QKV, 0},
    {BERT_LAYER "attention.self.qkv.bias", BERT_LAYER "attention.self.{p}.bias", CKPT_LAYOUT_QKV_PARTS, RT_TP_QKV, 0},
    {BERT_LAYER "attention.output.dense.weight", BERT_LAYER "attention.output.dense.weight", CKPT_LAYOUT_SAME, RT_TP_ROW, 0},
    {BERT_LAYER "attention.output.dense.bias", BERT_LAYER "attention.output.dense.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {BERT_LAYER "attention.output.LayerNorm.weight", BERT_LAYER "attention.output.LayerNorm.weight", CKPT_LAYOUT_SAME,
     RT_TP_NONE, 0},
    {BERT_LAYER "attention.output.LayerNorm.bias", BERT_LAYER "attention.output.LayerNorm.bias", CKPT_LAYOUT_SAME,
     RT_TP_NONE, 0},
    {BERT_LAYER "intermediate.dense.weight", BERT_LAYER "intermediate.dense.weight", CKPT_LAYOUT_SAME, RT_TP_COL, 0},
    {BERT_LAYER "intermediate.dense.bias", BERT_LAYER "intermediate.dense.bias", CKPT_LAYOUT_SAME, RT_TP_COL, 0},
    {BERT_LAYER "output.dense.weight", BERT_LAYER "output.dense.weight", CKPT_LAYOUT_SAME, RT_TP_ROW, 0},
    {BERT_LAYER "output.dense.bias", BERT_LAYER "output.dense.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {BERT_LAYER "output.LayerNorm.weight", BERT_LAYER "output.LayerNorm.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {BERT_LAYER "output.LayerNorm.bias", BERT_LAYER "output.LayerNorm.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    /* BERT's pooler + classifier, RoBERTa's classification head (outside the encoder prefix) */
    {"pooler.dense.weight", "pooler.dense.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"pooler.dense.bias", "pooler.dense.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"classifier.weight", "classifier.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, CKPT_ROW_NO_PREFIX},
    {"classifier.bias", "classifier.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, CKPT_ROW_NO_PREFIX},
    {"classifier.dense.weight", "classifier.dense.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, CKPT_ROW_NO_PREFIX},
    {"classifier.dense.bias", "classifier.dense.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, CKPT_ROW_NO_PREFIX},
    {"classifier.out_proj.weight", "classifier.out_proj.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, CKPT_ROW_NO_PREFIX},
    {"classifier.out_proj.bias", "classifier.out_proj.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, CKPT_ROW_NO_PREFIX},
};
/* clang-format on */
/* TF-era checkpoints name LayerNorm's parameters gamma and beta */
static const ckpt_map_rename bert_renames[] = {
    {"LayerNorm.gamma", "LayerNorm.weight"}, {"LayerNorm.beta", "LayerNorm.bias"}, {0}};
/* pre-training heads and the position-ids buffer */
static const char *const bert_ignored[] = {"cls.predictions.bias",
                                           "cls.predictions.decoder.weight",
                                           "cls.predictions.decoder.bias",
                                           "cls.predictions.transform.dense.weight",
                                           "cls.predictions.transform.dense.bias",
                                           "cls.predictions.transform.LayerNorm.weight",
                                           "cls.predictions.transform.LayerNorm.bias",
                                           "cls.seq_relationship.weight",
                                           "cls.seq_relationship.bias",
                                           "lm_head.bias",
                                           "lm_head.dense.weight",
                                           "lm_head.dense.bias",
                                           "lm_head.layer_norm.weight",
                                           "lm_head.layer_norm.bias",
                                           "lm_head.decoder.weight",
                                           "lm_head.decoder.bias",
                                           "embeddings.position_ids",
                                           NULL};
static const char *const bert_also[] = {"roberta.", NULL}, *const roberta_also[] = {"bert.", NULL};
const ckpt_map ckpt_map_bert = {.arch = "bert",
                                .prefix = "bert.",
                                .also_prefixes = bert_also,
                                .renames = bert_renames,
                                .rows = ROWS(bert_rows),
                                .ignored = bert_ignored,
                                .qkv_parts = qkv_words,
                                .heads_key = "num_attention_heads",
                                .vocab_key = "vocab_size"};
const ckpt_map ckpt_map_roberta = {.arch = "roberta",
                                   .prefix = "roberta.",
                                   .also_prefixes = roberta_also,
                                   .renames = bert_renames,
                                   .rows = ROWS(bert_rows),
                                   .ignored = bert_ignored,
                                   .qkv_parts = qkv_words,
                                   .heads_key = "num_attention_heads",
                                   .vocab_key = "vocab_size"};

/* ---- T5 (v1.0, v1.1, flan): HF T5ForConditionalGeneration; our names are HF's ---- */
#define T5_ROW(stack, what, tp) \
    { stack ".block.{n}.layer.{n}." what, stack ".block.{n}.layer.{n}." what, CKPT_LAYOUT_SAME, tp, 0 }
static const ckpt_map_row t5_rows[] = {
    {"shared.weight", "shared.weight", CKPT_LAYOUT_SAME, RT_TP_VOCAB, 0},
    /* older checkpoints keep the shared table only under the stacks' names */
    {"shared.weight", "encoder.embed_tokens.weight", CKPT_LAYOUT_SAME, RT_TP_VOCAB, CKPT_ROW_ALIAS},
    {"shared.weight", "decoder.embed_tokens.weight", CKPT_LAYOUT_SAME, RT_TP_VOCAB, CKPT_ROW_ALIAS},
    {"lm_head.weight", "lm_head.weight", CKPT_LAYOUT_SAME, RT_TP_VOCAB, 0},
    T5_ROW("encoder", "SelfAttention.q.weight", RT_TP_COL),
    T5_ROW("encoder", "SelfAttention.k.weight", RT_TP_COL),
    T5_ROW("encoder", "SelfAttention.v.weight", RT_TP_COL),
    T5_ROW("encoder", "SelfAttention.o.weight", RT_TP_ROW),
    /* [buckets, heads]: split by heads, as the heads are */
    T5_ROW("encoder", "SelfAttention.relative_attention_bias.weight", RT_TP_ROW),
    T5_ROW("encoder", "layer_norm.weight", RT_TP_NONE),
    T5_ROW("encoder", "DenseReluDense.wi.weight", RT_TP_COL),
    T5_ROW("encoder", "DenseReluDense.wi_0.weight", RT_TP_COL),
    T5_ROW("encoder", "DenseReluDense.wi_1.weight", RT_TP_COL),
    T5_ROW("encoder", "DenseReluDense.wo.weight", RT_TP_ROW),
    {"encoder.final_layer_norm.weight", "encoder.final_layer_norm.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    T5_ROW("decoder", "SelfAttention.q.weight", RT_TP_COL),
    T5_ROW("decoder", "SelfAttention.k.weight", RT_TP_COL),
    T5_ROW("decoder", "SelfAttention.v.weight", RT_TP_COL),
    T5_ROW("decoder", "SelfAttention.o.weight", RT_TP_ROW),
    T5_ROW("decoder", "SelfAttention.relative_attention_bias.weight", RT_TP_ROW),
    T5_ROW("decoder", "layer_norm.weight", RT_TP_NONE),
    T5_ROW("decoder", "EncDecAttention.q.weight", RT_TP_COL),
    T5_ROW("decoder", "EncDecAttention.k.weight", RT_TP_COL),
    T5_ROW("decoder", "EncDecAttention.v.weight", RT_TP_COL),
    T5_ROW("decoder", "EncDecAttention.o.weight", RT_TP_ROW),
    T5_ROW("decoder", "DenseReluDense.wi.weight", RT_TP_COL),
    T5_ROW("decoder", "DenseReluDense.wi_0.weight", RT_TP_COL),
    T5_ROW("decoder", "DenseReluDense.wi_1.weight", RT_TP_COL),
    T5_ROW("decoder", "DenseReluDense.wo.weight", RT_TP_ROW),
    {"decoder.final_layer_norm.weight", "decoder.final_layer_norm.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
};
/* a cross-attention position bias some exporters write and HF itself ignores */
static const char *const t5_ignored[] = {"decoder.block.{n}.layer.{n}.EncDecAttention.relative_attention_bias.weight",
                                         NULL};
const ckpt_map ckpt_map_t5 = {.arch = "t5",
                              .prefix = "",
                              .rows = ROWS(t5_rows),
                              .ignored = t5_ignored,
                              .heads_key = "num_heads",
                              .vocab_key = "vocab_size"};

/* ---- GLM: FlagAI's GLMModel keys (THUDM/GLM's are the same); our names are theirs ---- */
#define GLM_LAYER "transformer.layers.{n}."
#define GLM_SAME(name, tp) \
    { name, name, CKPT_LAYOUT_SAME, tp, 0 }
static const ckpt_map_row glm_rows[] = {
    GLM_SAME("word_embeddings.weight", RT_TP_VOCAB),
    GLM_SAME("transformer.position_embeddings.weight", RT_TP_NONE),
    GLM_SAME("transformer.block_position_embeddings.weight", RT_TP_NONE),
    GLM_SAME(GLM_LAYER "input_layernorm.weight", RT_TP_NONE),
    GLM_SAME(GLM_LAYER "input_layernorm.bias", RT_TP_NONE),
    /* [Q; K; V] blocks (Megatron's checkpoint_version 0 layout), split per block by heads */
    GLM_SAME(GLM_LAYER "attention.query_key_value.weight", RT_TP_QKV),
    GLM_SAME(GLM_LAYER "attention.query_key_value.bias", RT_TP_QKV),
    GLM_SAME(GLM_LAYER "attention.dense.weight", RT_TP_ROW),
    GLM_SAME(GLM_LAYER "attention.dense.bias", RT_TP_NONE),
    GLM_SAME(GLM_LAYER "post_attention_layernorm.weight", RT_TP_NONE),
    GLM_SAME(GLM_LAYER "post_attention_layernorm.bias", RT_TP_NONE),
    GLM_SAME(GLM_LAYER "mlp.dense_h_to_4h.weight", RT_TP_COL),
    GLM_SAME(GLM_LAYER "mlp.dense_h_to_4h.bias", RT_TP_COL),
    GLM_SAME(GLM_LAYER "mlp.dense_4h_to_h.weight", RT_TP_ROW),
    GLM_SAME(GLM_LAYER "mlp.dense_4h_to_h.bias", RT_TP_NONE),
    GLM_SAME("transformer.final_layernorm.weight", RT_TP_NONE),
    GLM_SAME("transformer.final_layernorm.bias", RT_TP_NONE),
};
/* FlagAI saves {'module': state_dict}; its task models wrap GLMModel as `model` */
static const char *const glm_also[] = {"module.", "model.", NULL};
const ckpt_map ckpt_map_glm = {.arch = "glm",
                               .prefix = "",
                               .also_prefixes = glm_also,
                               .rows = ROWS(glm_rows),
                               .torch_wrap = "module",
                               .heads_key = "num_attention_heads",
                               .vocab_key = "vocab_size"};

/* ---- Megatron-LM legacy GPT (checkpoint_version 3) into our GPT-2 parameters ---- */
#define MEG_LAYER "encoder.layers.{n}."
/* clang-format off */
static const ckpt_map_row megatron_gpt2_rows[] = {
    {"wte.weight", "embedding.word_embeddings.weight", CKPT_LAYOUT_SAME, RT_TP_VOCAB, 0},
    {"wpe.weight", "embedding.position_embeddings.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"h.{n}.ln_1.weight", MEG_LAYER "input_layernorm.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"h.{n}.ln_1.bias", MEG_LAYER "input_layernorm.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"h.{n}.attn.c_attn.weight", MEG_LAYER "self_attention.query_key_value.weight", CKPT_LAYOUT_QKV_PER_HEAD,
     RT_TP_QKV, 0},
    {"h.{n}.attn.c_attn.bias", MEG_LAYER "self_attention.query_key_value.bias", CKPT_LAYOUT_QKV_PER_HEAD, RT_TP_QKV, 0},
    {"h.{n}.attn.c_proj.weight", MEG_LAYER "self_attention.dense.weight", CKPT_LAYOUT_SAME, RT_TP_ROW, 0},
    {"h.{n}.attn.c_proj.bias", MEG_LAYER "self_attention.dense.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"h.{n}.ln_2.weight", MEG_LAYER "post_attention_layernorm.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"h.{n}.ln_2.bias", MEG_LAYER "post_attention_layernorm.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"h.{n}.mlp.c_fc.weight", MEG_LAYER "mlp.dense_h_to_4h.weight", CKPT_LAYOUT_SAME, RT_TP_COL, 0},
    {"h.{n}.mlp.c_fc.bias", MEG_LAYER "mlp.dense_h_to_4h.bias", CKPT_LAYOUT_SAME, RT_TP_COL, 0},
    {"h.{n}.mlp.c_proj.weight", MEG_LAYER "mlp.dense_4h_to_h.weight", CKPT_LAYOUT_SAME, RT_TP_ROW, 0},
    {"h.{n}.mlp.c_proj.bias", MEG_LAYER "mlp.dense_4h_to_h.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"ln_f.weight", "encoder.final_layernorm.weight", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
    {"ln_f.bias", "encoder.final_layernorm.bias", CKPT_LAYOUT_SAME, RT_TP_NONE, 0},
};
/* clang-format on */
/* checkpoints before version 3 said "transformer" for the encoder and "attention" for
 * self_attention */
static const ckpt_map_rename megatron_renames[] = {
    {"transformer.", "encoder."}, {".attention.", ".self_attention."}, {0}};
static const char *const megatron_also[] = {"model.", NULL};
const ckpt_map ckpt_map_megatron_gpt2 = {.arch = "megatron-gpt2",
                                         .ours_arch = "gpt2",
                                         .prefix = "language_model.",
                                         .also_prefixes = megatron_also,
                                         .renames = megatron_renames,
                                         .rows = ROWS(megatron_gpt2_rows),
                                         .heads_key = "num_attention_heads",
                                         .vocab_key = "padded_vocab_size"};
