/* GLM's config.json as FlagAI writes and reads it (see glm.h). */
#include <stddef.h>
#include <stdio.h>

#include "checkpoints/ckpt_json.h"
#include "models/glm.h"
#include "models/hf_config.h"

void glm_config_default(glm_config *c) {
    *c = (glm_config){.vocab_size = 50048, .hidden_size = 1024, .num_layers = 24, .num_attention_heads = 16,
                      .max_sequence_length = 1024, .embedding_dropout_prob = 0.1f, .attention_dropout_prob = 0.1f,
                      .output_dropout_prob = 0.1f, .layernorm_epsilon = 1e-5f, .init_std = 0.02f,
                      .block_position_encoding = true};
}

/* config.json's size fields, all required, read and validated with one table (limits:
 * models/hf_config.h) */
static const mdl_size_field glm_sizes[] = {
    {"vocab_size", offsetof(glm_config, vocab_size), 1, MDL_MAX_VOCAB},
    {"hidden_size", offsetof(glm_config, hidden_size), 1, MDL_MAX_WIDTH},
    {"num_layers", offsetof(glm_config, num_layers), 1, MDL_MAX_LAYERS},
    {"num_attention_heads", offsetof(glm_config, num_attention_heads), 1, MDL_MAX_HEADS},
    {"max_sequence_length", offsetof(glm_config, max_sequence_length), 1, MDL_MAX_POSITIONS},
};
#define GLM_N_SIZES (sizeof glm_sizes / sizeof *glm_sizes)

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
    rt_status st = mdl_sizes_check("GLM config", glm_sizes, GLM_N_SIZES, c);
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
    RT_TRY(ckpt_json_load(path, &root));
    RT_TRY(mdl_sizes_read(root, path, glm_sizes, GLM_N_SIZES, true, c));
    RT_TRY(ckpt_json_get_float(root, path, "embedding_dropout_prob", &c->embedding_dropout_prob, false, 0.1));
    RT_TRY(ckpt_json_get_float(root, path, "attention_dropout_prob", &c->attention_dropout_prob, false, 0.1));
    RT_TRY(ckpt_json_get_float(root, path, "output_dropout_prob", &c->output_dropout_prob, false, 0.1));
    RT_TRY(ckpt_json_get_float(root, path, "layernorm_epsilon", &c->layernorm_epsilon, false, 1e-5));
    RT_TRY(ckpt_json_get_bool(root, path, "block_position_encoding", &c->block_position_encoding, false, true));
    /* what FlagAI's GLM can do and tunezoo's cannot yet: refused rather than ignored */
    RT_TRY(ckpt_json_get_bool(root, path, "relative_encoding", &relative, false, false));
    RT_TRY(ckpt_json_get_double(root, path, "attention_scale", &scale, false, 1.0));
    RT_TRY(ckpt_json_get_int(root, path, "max_memory_length", &memory, false, 0));
    if (relative) RT_FAIL(RT_ERR_UNSUPPORTED, "%s: relative_encoding true (Transformer-XL positions) is not supported", path);
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
    cJSON_AddNumberToObject(o, "num_layers", c->num_layers);
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(o, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(o, "num_attention_heads", c->num_attention_heads);
    cJSON_AddNumberToObject(o, "embedding_dropout_prob", c->embedding_dropout_prob);
    cJSON_AddNumberToObject(o, "attention_dropout_prob", c->attention_dropout_prob);
    cJSON_AddNumberToObject(o, "output_dropout_prob", c->output_dropout_prob);
    cJSON_AddNumberToObject(o, "max_sequence_length", c->max_sequence_length);
    cJSON_AddNumberToObject(o, "max_memory_length", 0);
    cJSON_AddBoolToObject(o, "checkpoint_activations", false);
    cJSON_AddNumberToObject(o, "checkpoint_num_layers", 1);
    cJSON_AddBoolToObject(o, "parallel_output", true);
    cJSON_AddBoolToObject(o, "relative_encoding", false);
    cJSON_AddBoolToObject(o, "block_position_encoding", c->block_position_encoding);
    cJSON_AddBoolToObject(o, "output_predict", true);
    cJSON_AddNullToObject(o, "spell_length");
    cJSON_AddStringToObject(o, "spell_func", "lstm");
    cJSON_AddNumberToObject(o, "attention_scale", 1.0);
    cJSON_AddNumberToObject(o, "layernorm_epsilon", c->layernorm_epsilon);
    return mdl_hf_write_json(o, path);
}
