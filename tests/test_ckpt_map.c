/* The name and layout tables (checkpoints/ckpt_map*.c) and loading through them:
 *   - every row of every table maps our name to theirs and back, with prefixes, QKV parts and
 *     layer numbers; old spellings (gamma/beta, Megatron's "transformer"/"attention") and the
 *     known-and-skipped names classify as they should;
 *   - the layout conversions invert each other, and Megatron's per-head QKV order lands each
 *     head's q, k and v rows where [q; k; v] wants them;
 *   - a model loaded from a tz-convert folder at tp 2 holds exactly the floats it holds when
 *     loaded from the HF folder (GPT-2, BERT, RoBERTa, T5 v1.0 and v1.1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_convert.h"
#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_source.h"
#include "checkpoints/ckpt_weights.h"
#include "models/bert/bert.h"
#include "models/gpt2/gpt2.h"
#include "models/t5/t5.h"
#include "runtime/backend/rt_backend.h"
#include "tests/testutil.h"

static const ckpt_map *const all_maps[] = {&ckpt_map_gpt2, &ckpt_map_bert, &ckpt_map_roberta,
                                           &ckpt_map_t5,   &ckpt_map_glm,  &ckpt_map_megatron_gpt2};

/* "{n}" of a pattern filled with 3, 1, ... (distinct numbers per slot). */
static void fill(const char *pat, char *out, size_t size) {
    size_t o = 0;
    int k = 0;
    while (*pat && o + 4 < size) {
        if (strncmp(pat, "{n}", 3) == 0) {
            o += (size_t)snprintf(out + o, size - o, "%d", k++ == 0 ? 3 : 1);
            pat += 3;
        } else {
            out[o++] = *pat++;
        }
    }
    out[o] = '\0';
}

static void test_rows_round_trip(void) {
    for (size_t m = 0; m < sizeof all_maps / sizeof *all_maps; m++) {
        const ckpt_map *map = all_maps[m];
        for (size_t r = 0; r < map->n_rows; r++) {
            const ckpt_map_row *row = &map->rows[r];
            if (row->flags & CKPT_ROW_ALIAS) continue;
            char ours[CKPT_MAP_NAME_MAX], theirs[CKPT_MAP_NAME_MAX];
            fill(row->ours, ours, sizeof ours);
            for (int part = 0; part < ckpt_map_parts(row); part++) {
                TZ_EXPECT(ckpt_map_export_name(map, ours, part, theirs, sizeof theirs), "%s: export %s", map->arch,
                          ours);
                ckpt_map_match mt;
                TZ_EXPECT(ckpt_map_import_name(map, theirs, &mt) == CKPT_MAP_MATCHED && mt.row == row &&
                              mt.part == part && strcmp(mt.ours, ours) == 0,
                          "%s: %s -> %s does not come back", map->arch, ours, theirs);
            }
            TZ_EXPECT(ckpt_map_tp_rule(map, ours) == row->tp, "%s: tp rule of %s", map->arch, ours);
        }
    }
}

static void expect_kind(const ckpt_map *map, const char *theirs, ckpt_map_kind kind, const char *ours) {
    ckpt_map_match mt;
    ckpt_map_kind got = ckpt_map_import_name(map, theirs, &mt);
    TZ_EXPECT(got == kind && (kind != CKPT_MAP_MATCHED || strcmp(mt.ours, ours) == 0), "%s: '%s' -> kind %d '%s'",
              map->arch, theirs, (int)got, got == CKPT_MAP_MATCHED ? mt.ours : "");
}

static void test_names(void) {
    char out[CKPT_MAP_NAME_MAX];
    /* prefixes: optional on import, written on export except for the heads */
    expect_kind(&ckpt_map_gpt2, "transformer.h.11.mlp.c_fc.weight", CKPT_MAP_MATCHED, "h.11.mlp.c_fc.weight");
    expect_kind(&ckpt_map_gpt2, "h.0.ln_1.bias", CKPT_MAP_MATCHED, "h.0.ln_1.bias");
    expect_kind(&ckpt_map_gpt2, "transformer.h.0.attn.bias", CKPT_MAP_IGNORED, NULL);
    expect_kind(&ckpt_map_gpt2, "lm_head.weight", CKPT_MAP_IGNORED, NULL);
    expect_kind(&ckpt_map_gpt2, "transformer.h.x.ln_1.bias", CKPT_MAP_UNKNOWN, NULL);
    expect_kind(&ckpt_map_gpt2, "transformer.h.0.ln_1.bias.extra", CKPT_MAP_UNKNOWN, NULL);
    TZ_EXPECT(ckpt_map_export_name(&ckpt_map_gpt2, "score.weight", 0, out, sizeof out) && !strcmp(out, "score.weight"),
              "score.weight exports as %s", out);
    TZ_EXPECT(ckpt_map_export_name(&ckpt_map_gpt2, "wte.weight", 0, out, sizeof out) &&
                  !strcmp(out, "transformer.wte.weight"),
              "wte exports as %s", out);
    /* BERT: fused QKV from three tensors; TF-era gamma/beta; RoBERTa prefix */
    expect_kind(&ckpt_map_bert, "bert.encoder.layer.2.attention.self.value.bias", CKPT_MAP_MATCHED,
                "encoder.layer.2.attention.self.qkv.bias");
    expect_kind(&ckpt_map_bert, "bert.embeddings.LayerNorm.gamma", CKPT_MAP_MATCHED, "embeddings.LayerNorm.weight");
    expect_kind(&ckpt_map_roberta, "roberta.encoder.layer.0.output.LayerNorm.beta", CKPT_MAP_MATCHED,
                "encoder.layer.0.output.LayerNorm.bias");
    expect_kind(&ckpt_map_bert, "cls.predictions.decoder.weight", CKPT_MAP_IGNORED, NULL);
    expect_kind(&ckpt_map_bert, "bert.embeddings.position_ids", CKPT_MAP_IGNORED, NULL);
    TZ_EXPECT(
        ckpt_map_export_name(&ckpt_map_roberta, "encoder.layer.1.attention.self.qkv.weight", 1, out, sizeof out) &&
            !strcmp(out, "roberta.encoder.layer.1.attention.self.key.weight"),
        "roberta k exports as %s", out);
    TZ_EXPECT(!ckpt_map_export_name(&ckpt_map_bert, "encoder.layer.1.attention.self.qkv.weight", 3, out, sizeof out),
              "a fourth QKV part");
    /* T5: the shared table's aliases; a cross-attention bias HF ignores */
    ckpt_map_match mt;
    TZ_EXPECT(ckpt_map_import_name(&ckpt_map_t5, "encoder.embed_tokens.weight", &mt) == CKPT_MAP_MATCHED &&
                  (mt.row->flags & CKPT_ROW_ALIAS) && !strcmp(mt.ours, "shared.weight"),
              "T5 embed_tokens alias");
    expect_kind(&ckpt_map_t5, "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",
                CKPT_MAP_IGNORED, NULL);
    /* Megatron: nested prefix and pre-v3 spellings; GLM: FlagAI's wrappers */
    expect_kind(&ckpt_map_megatron_gpt2, "model.language_model.encoder.layers.5.self_attention.query_key_value.weight",
                CKPT_MAP_MATCHED, "h.5.attn.c_attn.weight");
    expect_kind(&ckpt_map_megatron_gpt2, "model.language_model.transformer.layers.5.attention.dense.bias",
                CKPT_MAP_MATCHED, "h.5.attn.c_proj.bias");
    expect_kind(&ckpt_map_glm, "module.model.transformer.layers.0.mlp.dense_4h_to_h.weight", CKPT_MAP_MATCHED,
                "transformer.layers.0.mlp.dense_4h_to_h.weight");
    TZ_EXPECT(ckpt_map_for_arch("t5") == &ckpt_map_t5 && ckpt_map_for_arch("llama") == NULL, "maps by arch");
}

static void test_layouts(void) {
    /* Megatron's [head][q, k, v][head_dim] rows against ours [q; k; v] */
    const int nh = 3, hs = 2, cols = 5;
    const size_t shape[2] = {(size_t)(3 * nh * hs), (size_t)cols}, n = shape[0] * shape[1];
    const ckpt_map_row *row = NULL;
    for (size_t r = 0; r < ckpt_map_megatron_gpt2.n_rows; r++)
        if (ckpt_map_megatron_gpt2.rows[r].layout == CKPT_LAYOUT_QKV_PER_HEAD) row = &ckpt_map_megatron_gpt2.rows[r];
    float *theirs = malloc(n * sizeof(float)), *ours = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) theirs[i] = (float)i;
    ckpt_map_to_ours(row, 2, shape, nh, theirs, ours);
    int ok = 1;
    for (int h = 0; h < nh; h++)
        for (int part = 0; part < 3; part++)
            for (int d = 0; d < hs; d++)
                for (int c = 0; c < cols; c++) {
                    size_t t = (size_t)(((h * 3 + part) * hs + d) * cols + c),
                           o = (size_t)(((part * nh + h) * hs + d) * cols + c);
                    ok &= ours[o] == theirs[t];
                }
    TZ_EXPECT(ok, "per-head QKV rows land in [q; k; v]");
    ckpt_map_to_theirs(row, 2, shape, nh, ours, back);
    TZ_EXPECT(memcmp(back, theirs, n * sizeof(float)) == 0, "per-head QKV round trip");
    /* GPT-2's Conv1D transpose */
    const ckpt_map_row *conv = ckpt_map_find_ours(&ckpt_map_gpt2, "h.0.mlp.c_fc.weight", (long[4]){0}, (int[1]){0});
    const size_t ts[2] = {3, 4}; /* ours [out 3, in 4]; theirs [4, 3] */
    float t12[12], o12[12], b12[12];
    for (int i = 0; i < 12; i++) t12[i] = (float)i;
    ckpt_map_to_ours(conv, 2, ts, 0, t12, o12);
    TZ_EXPECT(o12[1] == t12[3] && o12[4] == t12[1], "transpose");
    ckpt_map_to_theirs(conv, 2, ts, 0, o12, b12);
    TZ_EXPECT(memcmp(b12, t12, sizeof t12) == 0, "transpose round trip");
    free(theirs);
    free(ours);
    free(back);
}

/* The parameter slab (host copy) of `arch` loaded from an HF folder or a sharded folder. */
static float *load_params(rt_backend *be, const char *arch, const char *dir, size_t *numel) {
    char path[4096], weights[4096];
    rt_params *p = NULL;
    float *out = NULL;
    gpt2_model *g = NULL;
    bert_model *b = NULL;
    t5_model *t = NULL;
    ckpt_load_report rep;
    snprintf(path, sizeof path, "%s/config.json", dir);
    TZ_EXPECT_OK(ckpt_source_find_weights(dir, weights, sizeof weights));
    if (!strcmp(arch, "gpt2")) {
        gpt2_config c;
        TZ_EXPECT_OK(gpt2_config_load(path, &c));
        TZ_EXPECT_OK(gpt2_model_init(&c, be, rt_comm_self(), 1, 8, 7, &g));
        if (!g) return NULL;
        p = gpt2_model_params(g);
        TZ_EXPECT_OK(ckpt_load_hf(weights, &ckpt_map_gpt2, p, c.vocab_size, c.n_head, 0, 1, NULL, &rep));
    } else if (!strcmp(arch, "bert")) {
        bert_config c;
        TZ_EXPECT_OK(bert_config_load(path, &c));
        TZ_EXPECT_OK(bert_model_init(&c, be, rt_comm_self(), 1, 8, 7, &b));
        if (!b) return NULL;
        p = bert_model_params(b);
        TZ_EXPECT_OK(ckpt_load_hf(weights, c.roberta ? &ckpt_map_roberta : &ckpt_map_bert, p, c.vocab_size,
                                  c.num_attention_heads, 0, 1, NULL, &rep));
    } else {
        TZ_EXPECT_OK(t5_model_from_hf(dir, be, rt_comm_self(), 1, 8, 8, &t, NULL, 0));
        if (!t) return NULL;
        p = t5_model_params(t);
        rep = (ckpt_load_report){.loaded = p->n};
    }
    TZ_EXPECT(rep.missing == 0 && rep.unused == 0 && rep.loaded == p->n,
              "%s: loaded %d of %d, missing %d (%s), unused %d", dir, rep.loaded, p->n, rep.missing, rep.first_missing,
              rep.unused);
    *numel = p->numel;
    out = malloc(p->numel * sizeof(float));
    rt_to_host(be, out, p->param, p->numel * sizeof(float));
    gpt2_model_free(g);
    bert_model_free(b);
    t5_model_free(t);
    return out;
}

static void test_sharded_loads_like_hf(rt_backend *be) {
    const char *tmp = tz_tmpdir();
    static const char *const cases[][2] = {{"gpt2", "gpt2-tiny-cls"},
                                           {"bert", "bert-tiny-cls"},
                                           {"bert", "roberta-tiny-cls"},
                                           {"t5", "t5-tiny-v1_0"},
                                           {"t5", "t5-tiny-v1_1"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char src[4096], out[4096];
        snprintf(src, sizeof src, "%s", tz_source_path("tests/golden"));
        snprintf(src + strlen(src), sizeof src - strlen(src), "/%s", cases[i][1]);
        snprintf(out, sizeof out, "%s/%s-tp2", tmp, cases[i][1]);
        ckpt_import_opts o = {.src = src, .out = out, .tp = 2, .keep_dtype = true};
        ckpt_convert_stats stats;
        TZ_EXPECT_OK(ckpt_convert_import(&o, &stats));
        size_t na = 0, nb = 0;
        float *a = load_params(be, cases[i][0], src, &na), *b = load_params(be, cases[i][0], out, &nb);
        TZ_EXPECT(a && b && na == nb && memcmp(a, b, na * sizeof(float)) == 0,
                  "%s: the sharded folder loads other floats than the HF folder", cases[i][1]);
        free(a);
        free(b);
    }
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    TZ_EXPECT(system(cmd) == 0, "removing %s", tmp);
}

int main(void) {
    rt_backend *be = NULL;
    test_rows_round_trip();
    test_names();
    test_layouts();
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &be));
    if (be) test_sharded_loads_like_hf(be);
    rt_backend_free(be);
    return tz_test_result("test_ckpt_map");
}
