/* GLM's config.json as FlagAI writes and reads it (see glm.h). */
#include <stddef.h>
#include <stdio.h>

#include "models/glm/glm.h"
#include "models/layers/hf_config.h"
#include "runtime/base/rt_json.h"

/* config.json's fields with FlagAI's defaults (GLM-large-chinese) and limits
 * (models/layers/hf_config.h); FlagAI always writes the sizes, so they are required */
#define F(member, kind, def, min, max, req) \
    { #member, offsetof(glm_config, member), kind, def, min, max, req }
static const mdl_field glm_fields[] = {
    F(vocab_size, MDL_FIELD_INT, 50048, 1, MDL_MAX_VOCAB, true),
    F(hidden_size, MDL_FIELD_INT, 1024, 1, MDL_MAX_WIDTH, true),
    F(num_layers, MDL_FIELD_INT, 24, 1, MDL_MAX_LAYERS, true),
    F(num_attention_heads, MDL_FIELD_INT, 16, 1, MDL_MAX_HEADS, true),
    F(max_sequence_length, MDL_FIELD_INT, 1024, 1, MDL_MAX_POSITIONS, true),
    F(embedding_dropout_prob, MDL_FIELD_FLOAT, 0.1, 0, 0, false),
    F(attention_dropout_prob, MDL_FIELD_FLOAT, 0.1, 0, 0, false),
    F(output_dropout_prob, MDL_FIELD_FLOAT, 0.1, 0, 0, false),
    F(layernorm_epsilon, MDL_FIELD_FLOAT, 1e-5, 1, 0, false),
    F(block_position_encoding, MDL_FIELD_BOOL, 1, 0, 0, false),
};
#undef F
#define GLM_N_FIELDS (sizeof glm_fields / sizeof *glm_fields)

void glm_config_default(glm_config *c) {
    *c = (glm_config){.init_std = 0.02f};
    mdl_fields_default(glm_fields, GLM_N_FIELDS, c);
}

/* Every parameter (unsharded, unpadded vocab) in saturating 64-bit arithmetic. */
static uint64_t glm_param_count(const glm_config *c) {
    const uint64_t C = (uint64_t)c->hidden_size;
    /* a block: qkv and dense 4 C^2 + 4 C, the 4 C wide MLP 8 C^2 + 5 C, two LayerNorms 4 C */
    const uint64_t block = mdl_size_add(mdl_size_mul(12 * C, C), 13 * C);
    const uint64_t positions = ((uint64_t)c->max_sequence_length + 1) * (c->block_position_encoding ? 2 : 1);
    uint64_t n = mdl_size_mul((uint64_t)c->vocab_size + positions, C);
    n = mdl_size_add(n, mdl_size_mul((uint64_t)c->num_layers, block));
    return mdl_size_add(n, 2 * C); /* the final LayerNorm */
}

rt_status glm_config_validate(const glm_config *c, int tp) {
    rt_status st = mdl_fields_check("GLM config", glm_fields, GLM_N_FIELDS, c);
    if (st != RT_OK) return st;
    st = mdl_check_params("GLM config", "vocab_size, hidden_size, num_layers and max_sequence_length",
                          glm_param_count(c));
    if (st != RT_OK) return st;
    if (c->hidden_size % c->num_attention_heads)
        return rt_errorf(RT_ERR_CONFIG, "GLM config: hidden_size %d is not divisible by num_attention_heads %d",
                         c->hidden_size, c->num_attention_heads);
    const float p[3] = {c->embedding_dropout_prob, c->attention_dropout_prob, c->output_dropout_prob};
    st = mdl_check_dropouts("GLM config", p, 3);
    if (st != RT_OK) return st;
    if (!(c->layernorm_epsilon > 0)) return rt_errorf(RT_ERR_CONFIG, "GLM config: layernorm_epsilon must be > 0");
    return mdl_check_tp(tp, "num_attention_heads", c->num_attention_heads, "MLP width (4 x hidden_size)",
                        4 * c->hidden_size);
}

rt_status glm_config_load(const char *path, glm_config *c) {
    rt_status st = RT_OK;
    cJSON *root = NULL;
    bool relative = false;
    double scale = 1.0;
    int memory = 0;
    glm_config_default(c);
    RT_TRY(rt_json_load(path, &root));
    RT_TRY(mdl_fields_read(root, path, glm_fields, GLM_N_FIELDS, c));
    /* what FlagAI's GLM can do and tunezoo's cannot yet: refused rather than ignored */
    RT_TRY(rt_json_get_bool(root, path, "relative_encoding", &relative, false, false));
    RT_TRY(rt_json_get_double(root, path, "attention_scale", &scale, false, 1.0));
    RT_TRY(rt_json_get_int(root, path, "max_memory_length", &memory, false, 0));
    if (relative)
        RT_FAIL(RT_ERR_UNSUPPORTED, "%s: relative_encoding true (Transformer-XL positions) is not supported", path);
    if (scale != 1.0) RT_FAIL(RT_ERR_UNSUPPORTED, "%s: attention_scale %g is not supported (only 1.0)", path, scale);
    if (memory != 0) RT_FAIL(RT_ERR_UNSUPPORTED, "%s: max_memory_length %d is not supported (only 0)", path, memory);
    const cJSON *spell = cJSON_GetObjectItemCaseSensitive(root, "spell_length");
    if (spell && !cJSON_IsNull(spell))
        RT_FAIL(RT_ERR_UNSUPPORTED, "%s: spell_length (P-tuning prompts) is not supported", path);
    st = mdl_hf_config_result(glm_config_validate(c, 1), path, true);
fail:
    st = mdl_hf_config_result(st, path, false);
    cJSON_Delete(root);
    return st;
}

rt_status glm_config_save(const glm_config *c, const char *path) {
    cJSON *o = cJSON_CreateObject();
    mdl_fields_write(o, glm_fields, GLM_N_FIELDS, c);
    cJSON_AddNumberToObject(o, "max_memory_length", 0);
    cJSON_AddBoolToObject(o, "checkpoint_activations", false);
    cJSON_AddNumberToObject(o, "checkpoint_num_layers", 1);
    cJSON_AddBoolToObject(o, "parallel_output", true);
    cJSON_AddBoolToObject(o, "relative_encoding", false);
    cJSON_AddBoolToObject(o, "output_predict", true);
    cJSON_AddNullToObject(o, "spell_length");
    cJSON_AddStringToObject(o, "spell_func", "lstm");
    cJSON_AddNumberToObject(o, "attention_scale", 1.0);
    return mdl_hf_write_json(o, path);
}
