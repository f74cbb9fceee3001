/* T5's config.json: HF's T5Config fields and defaults (transformers 5), read and written so
 * that a folder Transformers saved loads here and a folder exported from here loads there.
 * The head's two switches follow the file (see t5.h); feed_forward_proj is "ACT" or
 * "gated-ACT", with HF's rule that "gated-gelu" means gelu_new. */
#include "models/t5.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_json.h"
#include "models/hf_config.h"

void t5_config_default(t5_config *c) {
    memset(c, 0, sizeof *c);
    c->vocab_size = 32128;
    c->d_model = 512;
    c->d_kv = 64;
    c->d_ff = 2048;
    c->num_heads = 8;
    c->num_layers = 6;
    c->num_decoder_layers = 6;
    c->relative_attention_num_buckets = 32;
    c->relative_attention_max_distance = 128;
    c->dropout_rate = 0.1f;
    c->layer_norm_epsilon = 1e-6f;
    c->initializer_factor = 1.0f;
    c->gated = false;
    c->act = RT_ACT_RELU;
    c->tie_word_embeddings = true;
    c->scale_decoder_outputs = true;
    c->pad_token_id = 0;
    c->eos_token_id = 1;
    c->decoder_start_token_id = 0;
}

/* The activation named by feed_forward_proj's last part; false when unknown. HF: "gated-gelu"
 * means gelu_new, a plain "gelu" the erf one. */
static bool t5_act_from_name(const char *name, bool gated, rt_act_kind *act) {
    if (!mdl_hf_act_from_name(name, act)) return false;
    if (gated && strcmp(name, "gelu") == 0) *act = RT_ACT_GELU_TANH;
    return true;
}

/* config.json's size fields, read and validated with one table (limits: models/hf_config.h) */
static const mdl_size_field t5_sizes[] = {
    {"vocab_size", offsetof(t5_config, vocab_size), 1, MDL_MAX_VOCAB},
    {"d_model", offsetof(t5_config, d_model), 1, MDL_MAX_WIDTH},
    {"d_kv", offsetof(t5_config, d_kv), 1, MDL_MAX_WIDTH},
    {"d_ff", offsetof(t5_config, d_ff), 1, MDL_MAX_FFN},
    {"num_heads", offsetof(t5_config, num_heads), 1, MDL_MAX_HEADS},
    {"num_layers", offsetof(t5_config, num_layers), 1, MDL_MAX_LAYERS},
    {"num_decoder_layers", offsetof(t5_config, num_decoder_layers), 1, MDL_MAX_LAYERS},
    {"relative_attention_num_buckets", offsetof(t5_config, relative_attention_num_buckets), 1, MDL_MAX_POSITIONS},
    {"relative_attention_max_distance", offsetof(t5_config, relative_attention_max_distance), 1, MDL_MAX_POSITIONS},
};
#define T5_N_SIZES (sizeof t5_sizes / sizeof *t5_sizes)

rt_status t5_config_load(const char *config_json, t5_config *c) {
    rt_status st = RT_OK;
    cJSON *root = NULL;
    const char *path = config_json, *model_type = NULL, *ffp = NULL;
    t5_config_default(c);
    RT_TRY(ckpt_json_load(path, &root));
    RT_TRY(ckpt_json_get_string(root, path, "model_type", &model_type, true, NULL));
    if (strcmp(model_type, "t5") != 0)
        RT_FAIL(RT_ERR_CONFIG, "%s: field 'model_type' is '%s', expected 't5'", path, model_type);
    RT_TRY(mdl_sizes_read(root, path, t5_sizes, T5_N_SIZES, false, c));
    /* num_decoder_layers absent or null (HF's default) means as many as the encoder */
    const cJSON *dec_layers = cJSON_GetObjectItemCaseSensitive(root, "num_decoder_layers");
    if (!dec_layers || cJSON_IsNull(dec_layers)) c->num_decoder_layers = c->num_layers;
    RT_TRY(ckpt_json_get_float(root, path, "dropout_rate", &c->dropout_rate, false, 0.1));
    RT_TRY(ckpt_json_get_float(root, path, "layer_norm_epsilon", &c->layer_norm_epsilon, false, 1e-6));
    RT_TRY(ckpt_json_get_float(root, path, "initializer_factor", &c->initializer_factor, false, 1.0));
    RT_TRY(ckpt_json_get_string(root, path, "feed_forward_proj", &ffp, false, "relu"));
    {
        const char *dash = strchr(ffp, '-');
        c->gated = dash != NULL;
        if ((dash && (strncmp(ffp, "gated-", 6) != 0 || strchr(dash + 1, '-'))) ||
            !t5_act_from_name(dash ? dash + 1 : ffp, c->gated, &c->act))
            RT_FAIL(RT_ERR_CONFIG, "%s: field 'feed_forward_proj' is '%s', expected relu, gelu, gelu_new, or one of "
                    "them after 'gated-' (e.g. gated-gelu)", path, ffp);
    }
    RT_TRY(ckpt_json_get_bool(root, path, "tie_word_embeddings", &c->tie_word_embeddings, false, true));
    RT_TRY(ckpt_json_get_bool(root, path, "scale_decoder_outputs", &c->scale_decoder_outputs, false,
                              c->tie_word_embeddings));
    RT_TRY(ckpt_json_get_int(root, path, "pad_token_id", &c->pad_token_id, false, c->pad_token_id));
    /* eos may be a list in some configs; only generation uses it */
    if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(root, "eos_token_id")))
        RT_TRY(ckpt_json_get_int(root, path, "eos_token_id", &c->eos_token_id, false, c->eos_token_id));
    RT_TRY(ckpt_json_get_int(root, path, "decoder_start_token_id", &c->decoder_start_token_id, false,
                             c->pad_token_id));
    st = mdl_hf_config_result(t5_config_validate(c, 1), path, true);
fail:
    st = mdl_hf_config_result(st, path, false);
    cJSON_Delete(root);
    return st;
}

cJSON *t5_config_json(const t5_config *c) {
    char ffp[64];
    if (c->gated && c->act == RT_ACT_GELU_TANH)
        snprintf(ffp, sizeof ffp, "gated-gelu");
    else
        snprintf(ffp, sizeof ffp, "%s%s", c->gated ? "gated-" : "", mdl_hf_act_name(c->act));
    cJSON *o = mdl_hf_config_new("t5", "T5ForConditionalGeneration");
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(o, "d_model", c->d_model);
    cJSON_AddNumberToObject(o, "d_kv", c->d_kv);
    cJSON_AddNumberToObject(o, "d_ff", c->d_ff);
    cJSON_AddNumberToObject(o, "num_heads", c->num_heads);
    cJSON_AddNumberToObject(o, "num_layers", c->num_layers);
    cJSON_AddNumberToObject(o, "num_decoder_layers", c->num_decoder_layers);
    cJSON_AddNumberToObject(o, "relative_attention_num_buckets", c->relative_attention_num_buckets);
    cJSON_AddNumberToObject(o, "relative_attention_max_distance", c->relative_attention_max_distance);
    cJSON_AddNumberToObject(o, "dropout_rate", c->dropout_rate);
    cJSON_AddNumberToObject(o, "layer_norm_epsilon", c->layer_norm_epsilon);
    cJSON_AddNumberToObject(o, "initializer_factor", c->initializer_factor);
    cJSON_AddStringToObject(o, "feed_forward_proj", ffp);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddBoolToObject(o, "scale_decoder_outputs", c->scale_decoder_outputs);
    cJSON_AddBoolToObject(o, "is_encoder_decoder", 1);
    cJSON_AddNumberToObject(o, "pad_token_id", c->pad_token_id);
    cJSON_AddNumberToObject(o, "eos_token_id", c->eos_token_id);
    cJSON_AddNumberToObject(o, "decoder_start_token_id", c->decoder_start_token_id);
    return o;
}

rt_status t5_config_save(const t5_config *c, const char *path) { return mdl_hf_write_json(t5_config_json(c), path); }

/* Every parameter (unsharded, unpadded vocab) in saturating 64-bit arithmetic. */
static uint64_t t5_param_count(const t5_config *c) {
    const uint64_t C = (uint64_t)c->d_model, F = (uint64_t)c->d_ff;
    const uint64_t I = (uint64_t)c->num_heads * (uint64_t)c->d_kv; /* attention's inner width */
    const uint64_t attn = mdl_size_add(mdl_size_mul(4 * I, C), C);   /* q, k, v, o and the LayerNorm */
    const uint64_t ff = mdl_size_add(mdl_size_mul((c->gated ? 3 : 2) * F, C), C);
    const uint64_t enc = mdl_size_add(attn, ff), dec = mdl_size_add(enc, attn); /* + cross-attention */
    uint64_t n = mdl_size_mul((uint64_t)c->vocab_size * (c->tie_word_embeddings ? 1 : 2), C);
    n = mdl_size_add(n, mdl_size_mul((uint64_t)c->num_layers, enc));
    n = mdl_size_add(n, mdl_size_mul((uint64_t)c->num_decoder_layers, dec));
    /* each stack's relative bias (block 0) and final LayerNorm */
    return mdl_size_add(n, 2 * ((uint64_t)c->relative_attention_num_buckets * (uint64_t)c->num_heads + C));
}

rt_status t5_config_validate(const t5_config *c, int tp) {
    rt_status st = mdl_sizes_check("T5 config", t5_sizes, T5_N_SIZES, c);
    if (st != RT_OK) return st;
    /* the attention's inner width: an int in every kernel */
    if ((int64_t)c->num_heads * c->d_kv > MDL_MAX_FFN)
        return rt_errorf(RT_ERR_CONFIG, "T5 config: num_heads %d x d_kv %d is %lld, more than the limit %d",
                         c->num_heads, c->d_kv, (long long)c->num_heads * c->d_kv, MDL_MAX_FFN);
    st = mdl_check_params("T5 config", "vocab_size, d_model, d_kv, d_ff, num_heads, num_layers and num_decoder_layers",
                          t5_param_count(c));
    if (st != RT_OK) return st;
    /* the log-spaced buckets need max_exact >= 1 and max_distance beyond it (bidirectional and
     * causal alike), else HF's formula divides by log(1) = 0 */
    if (c->relative_attention_num_buckets < 4 || c->relative_attention_max_distance <= c->relative_attention_num_buckets / 2)
        return rt_errorf(RT_ERR_CONFIG, "T5 config: relative_attention_num_buckets %d must be >= 4 and "
                         "relative_attention_max_distance %d > num_buckets / 2", c->relative_attention_num_buckets,
                         c->relative_attention_max_distance);
    /* dropout streams number the sites of every block in 12 bits */
    if (c->num_layers + c->num_decoder_layers > 500)
        return rt_errorf(RT_ERR_CONFIG, "T5 config: %d + %d blocks is more than the 500 supported",
                         c->num_layers, c->num_decoder_layers);
    if (c->gated && c->act == RT_ACT_GELU_ERF)
        return rt_errorf(RT_ERR_CONFIG, "T5 config: a gated erf GELU has no feed_forward_proj name in HF "
                         "('gated-gelu' means gelu_new)");
    if (c->pad_token_id < 0 || c->pad_token_id >= c->vocab_size || c->decoder_start_token_id < 0 ||
        c->decoder_start_token_id >= c->vocab_size)
        return rt_errorf(RT_ERR_CONFIG, "T5 config: pad_token_id %d and decoder_start_token_id %d must be in "
                         "[0, vocab_size %d)", c->pad_token_id, c->decoder_start_token_id, c->vocab_size);
    if (!(c->layer_norm_epsilon > 0)) return rt_errorf(RT_ERR_CONFIG, "T5 config: layer_norm_epsilon must be > 0");
    st = mdl_check_dropouts("T5 config", &c->dropout_rate, 1);
    return st != RT_OK ? st : mdl_check_tp(tp, "num_heads", c->num_heads, "d_ff", c->d_ff);
}
