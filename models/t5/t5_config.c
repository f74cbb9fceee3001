/* T5's config.json: HF's T5Config fields and defaults (transformers 5), read and written so
 * that a folder Transformers saved loads here and a folder exported from here loads there.
 * The head's two switches follow the file (see t5.h); feed_forward_proj is "ACT" or
 * "gated-ACT", with HF's rule that "gated-gelu" means gelu_new. */
#include "models/t5/t5.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "models/layers/hf_config.h"
#include "runtime/base/rt_json.h"

/* config.json's plain fields with HF's defaults (t5-small) and limits (models/layers/hf_config.h);
 * the ids are checked against the vocab by validation */
#define F(member, kind, def, min, max) \
    { #member, offsetof(t5_config, member), kind, def, min, max, false }
static const mdl_field t5_fields[] = {
    F(vocab_size, MDL_FIELD_INT, 32128, 1, MDL_MAX_VOCAB),
    F(d_model, MDL_FIELD_INT, 512, 1, MDL_MAX_WIDTH),
    F(d_kv, MDL_FIELD_INT, 64, 1, MDL_MAX_WIDTH),
    F(d_ff, MDL_FIELD_INT, 2048, 1, MDL_MAX_FFN),
    F(num_heads, MDL_FIELD_INT, 8, 1, MDL_MAX_HEADS),
    F(num_layers, MDL_FIELD_INT, 6, 1, MDL_MAX_LAYERS),
    F(num_decoder_layers, MDL_FIELD_INT, 6, 1, MDL_MAX_LAYERS),
    F(relative_attention_num_buckets, MDL_FIELD_INT, 32, 1, MDL_MAX_POSITIONS),
    F(relative_attention_max_distance, MDL_FIELD_INT, 128, 1, MDL_MAX_POSITIONS),
    F(dropout_rate, MDL_FIELD_FLOAT, 0.1, 0, 0),
    F(layer_norm_epsilon, MDL_FIELD_FLOAT, 1e-6, 1, 0),
    F(initializer_factor, MDL_FIELD_FLOAT, 1.0, 0, 0),
    F(tie_word_embeddings, MDL_FIELD_BOOL, 1, 0, 0),
    F(pad_token_id, MDL_FIELD_INT, 0, INT_MIN, INT_MAX),
};
#undef F
#define T5_N_FIELDS (sizeof t5_fields / sizeof *t5_fields)

void t5_config_default(t5_config *c) {
    memset(c, 0, sizeof *c);
    mdl_fields_default(t5_fields, T5_N_FIELDS, c);
    c->act = RT_ACT_RELU;
    c->scale_decoder_outputs = true;
    c->eos_token_id = 1;
}

/* The activation named by feed_forward_proj's last part; false when unknown. HF: "gated-gelu"
 * means gelu_new, a plain "gelu" the erf one. */
static bool t5_act_from_name(const char *name, bool gated, rt_act_kind *act) {
    if (!mdl_hf_act_from_name(name, act)) return false;
    if (gated && strcmp(name, "gelu") == 0) *act = RT_ACT_GELU_TANH;
    return true;
}

rt_status t5_config_load(const char *config_json, t5_config *c) {
    rt_status st = RT_OK;
    cJSON *root = NULL;
    const char *path = config_json, *model_type = NULL, *ffp = NULL;
    t5_config_default(c);
    RT_TRY(rt_json_load(path, &root));
    RT_TRY(rt_json_get_string(root, path, "model_type", &model_type, true, NULL));
    if (strcmp(model_type, "t5") != 0)
        RT_FAIL(RT_ERR_CONFIG, "%s: field 'model_type' is '%s', expected 't5'", path, model_type);
    RT_TRY(mdl_fields_read(root, path, t5_fields, T5_N_FIELDS, c));
    /* num_decoder_layers absent or null (HF's default) means as many as the encoder */
    const cJSON *dec_layers = cJSON_GetObjectItemCaseSensitive(root, "num_decoder_layers");
    if (!dec_layers || cJSON_IsNull(dec_layers)) c->num_decoder_layers = c->num_layers;
    RT_TRY(rt_json_get_string(root, path, "feed_forward_proj", &ffp, false, "relu"));
    {
        const char *dash = strchr(ffp, '-');
        c->gated = dash != NULL;
        if ((dash && (strncmp(ffp, "gated-", 6) != 0 || strchr(dash + 1, '-'))) ||
            !t5_act_from_name(dash ? dash + 1 : ffp, c->gated, &c->act))
            RT_FAIL(RT_ERR_CONFIG,
                    "%s: field 'feed_forward_proj' is '%s', expected relu, gelu, gelu_new, or one of "
                    "them after 'gated-' (e.g. gated-gelu)",
                    path, ffp);
    }
    RT_TRY(rt_json_get_bool(root, path, "scale_decoder_outputs", &c->scale_decoder_outputs, false,
                            c->tie_word_embeddings));
    /* eos may be a list in some configs; only generation uses it */
    if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(root, "eos_token_id")))
        RT_TRY(rt_json_get_int(root, path, "eos_token_id", &c->eos_token_id, false, c->eos_token_id));
    RT_TRY(rt_json_get_int(root, path, "decoder_start_token_id", &c->decoder_start_token_id, false, c->pad_token_id));
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
    mdl_fields_write(o, t5_fields, T5_N_FIELDS, c);
    cJSON_AddStringToObject(o, "feed_forward_proj", ffp);
    cJSON_AddBoolToObject(o, "scale_decoder_outputs", c->scale_decoder_outputs);
    cJSON_AddBoolToObject(o, "is_encoder_decoder", 1);
    cJSON_AddNumberToObject(o, "eos_token_id", c->eos_token_id);
    cJSON_AddNumberToObject(o, "decoder_start_token_id", c->decoder_start_token_id);
    return o;
}

rt_status t5_config_save(const t5_config *c, const char *path) { return mdl_hf_write_json(t5_config_json(c), path); }

/* Every parameter (unsharded, unpadded vocab) in saturating 64-bit arithmetic. */
static uint64_t t5_param_count(const t5_config *c) {
    const uint64_t C = (uint64_t)c->d_model, F = (uint64_t)c->d_ff;
    const uint64_t I = (uint64_t)c->num_heads * (uint64_t)c->d_kv; /* attention's inner width */
    const uint64_t attn = mdl_size_add(mdl_size_mul(4 * I, C), C); /* q, k, v, o and the LayerNorm */
    const uint64_t ff = mdl_size_add(mdl_size_mul((c->gated ? 3 : 2) * F, C), C);
    const uint64_t enc = mdl_size_add(attn, ff), dec = mdl_size_add(enc, attn); /* + cross-attention */
    uint64_t n = mdl_size_mul((uint64_t)c->vocab_size * (c->tie_word_embeddings ? 1 : 2), C);
    n = mdl_size_add(n, mdl_size_mul((uint64_t)c->num_layers, enc));
    n = mdl_size_add(n, mdl_size_mul((uint64_t)c->num_decoder_layers, dec));
    /* each stack's relative bias (block 0) and final LayerNorm */
    return mdl_size_add(n, 2 * ((uint64_t)c->relative_attention_num_buckets * (uint64_t)c->num_heads + C));
}

rt_status t5_config_validate(const t5_config *c, int tp) {
    rt_status st = mdl_fields_check("T5 config", t5_fields, T5_N_FIELDS, c);
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
    if (c->relative_attention_num_buckets < 4 ||
        c->relative_attention_max_distance <= c->relative_attention_num_buckets / 2)
        return rt_errorf(RT_ERR_CONFIG,
                         "T5 config: relative_attention_num_buckets %d must be >= 4 and "
                         "relative_attention_max_distance %d > num_buckets / 2",
                         c->relative_attention_num_buckets, c->relative_attention_max_distance);
    /* dropout streams number the sites of every block in 12 bits */
    if (c->num_layers + c->num_decoder_layers > 500)
        return rt_errorf(RT_ERR_CONFIG, "T5 config: %d + %d blocks is more than the 500 supported", c->num_layers,
                         c->num_decoder_layers);
    if (c->gated && c->act == RT_ACT_GELU_ERF)
        return rt_errorf(RT_ERR_CONFIG, "T5 config: a gated erf GELU has no feed_forward_proj name in HF "
                                        "('gated-gelu' means gelu_new)");
    if (c->pad_token_id < 0 || c->pad_token_id >= c->vocab_size || c->decoder_start_token_id < 0 ||
        c->decoder_start_token_id >= c->vocab_size)
        return rt_errorf(RT_ERR_CONFIG,
                         "T5 config: pad_token_id %d and decoder_start_token_id %d must be in "
                         "[0, vocab_size %d)",
                         c->pad_token_id, c->decoder_start_token_id, c->vocab_size);
    if (!(c->layer_norm_epsilon > 0)) return rt_errorf(RT_ERR_CONFIG, "T5 config: layer_norm_epsilon must be > 0");
    st = mdl_check_dropouts("T5 config", &c->dropout_rate, 1);
    return st != RT_OK ? st : mdl_check_tp(tp, "num_heads", c->num_heads, "d_ff", c->d_ff);
}
