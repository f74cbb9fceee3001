/* Config sizes are checked before anything is allocated (issue 14): for GPT-2, BERT, RoBERTa,
 * T5 and GLM, a size field of 1e9 or 2^31 in config.json, and fields each within their limit
 * whose products are not, get RT_ERR_CONFIG and one line naming the file, the field and the
 * limit, never an abort. Batch and length products that no machine could hold get RT_ERR_NOMEM
 * at model init, before the slabs are sized, and rt_params refuses a slab whose size wraps.
 * A tiny config of each family still loads and builds. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/bert/bert.h"
#include "models/glm/glm.h"
#include "models/gpt2/gpt2.h"
#include "models/layers/hf_config.h"
#include "models/t5/t5.h"
#include "models/t5/t5_generate.h"
#include "runtime/base/rt_json.h"
#include "tests/testutil.h"

static char dir[64];

static const char *write_config(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tz_write_text(path, text);
    return path;
}

typedef rt_status (*load_fn)(const char *path);

static rt_status load_gpt2(const char *path) {
    gpt2_config c;
    return gpt2_config_load(path, &c);
}
static rt_status load_bert(const char *path) {
    bert_config c;
    return bert_config_load(path, &c);
}
static rt_status load_t5(const char *path) {
    t5_config c;
    return t5_config_load(path, &c);
}
static rt_status load_glm(const char *path) {
    glm_config c;
    return glm_config_load(path, &c);
}

/* st is RT_ERR_CONFIG, and the message is one line holding the path and every one of words. */
static void expect_refused(const char *what, rt_status st, const char *path, const char *const *words) {
    const char *msg = rt_error_message();
    TZ_EXPECT(st == RT_ERR_CONFIG, "%s: status %s (%s)", what, rt_status_name(st), msg);
    TZ_EXPECT(strchr(msg, '\n') == NULL, "%s: more than one line: %s", what, msg);
    TZ_EXPECT(strstr(msg, path) != NULL, "%s: '%s' does not name %s", what, msg, path);
    for (; *words; words++) TZ_EXPECT(strstr(msg, *words) != NULL, "%s: '%s' lacks '%s'", what, msg, *words);
}

typedef struct {
    const char *family, *prefix; /* the config's other fields, ending with ", "; NULL: GLM's */
    load_fn load;
    const char *field;
    int limit;
} field_case;

#define GPT2 "{\"model_type\": \"gpt2\", "
#define BERT "{\"model_type\": \"bert\", "
#define ROBERTA "{\"model_type\": \"roberta\", "
#define T5 "{\"model_type\": \"t5\", "
#define GLM NULL

/* GLM's sizes are all required: a small value for each but `field`, which the caller adds. */
static const char *glm_prefix(const char *field) {
    static const char *const keys[] = {"vocab_size", "hidden_size", "num_layers", "num_attention_heads",
                                       "max_sequence_length"};
    static const int values[] = {100, 32, 1, 4, 64};
    static char buf[256];
    size_t n = (size_t)snprintf(buf, sizeof buf, "{");
    for (int i = 0; i < 5; i++)
        if (strcmp(keys[i], field) != 0)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "\"%s\": %d, ", keys[i], values[i]);
    return buf;
}

static const field_case field_cases[] = {
    {"gpt2", GPT2, load_gpt2, "n_embd", MDL_MAX_WIDTH},
    {"gpt2", GPT2, load_gpt2, "vocab_size", MDL_MAX_VOCAB},
    {"gpt2", GPT2, load_gpt2, "n_positions", MDL_MAX_POSITIONS},
    {"gpt2", GPT2, load_gpt2, "n_layer", MDL_MAX_LAYERS},
    {"gpt2", GPT2, load_gpt2, "n_head", MDL_MAX_HEADS},
    {"gpt2", GPT2, load_gpt2, "n_inner", MDL_MAX_FFN},
    {"bert", BERT, load_bert, "hidden_size", MDL_MAX_WIDTH},
    {"bert", BERT, load_bert, "vocab_size", MDL_MAX_VOCAB},
    {"bert", BERT, load_bert, "num_hidden_layers", MDL_MAX_LAYERS},
    {"bert", BERT, load_bert, "num_attention_heads", MDL_MAX_HEADS},
    {"bert", BERT, load_bert, "intermediate_size", MDL_MAX_FFN},
    {"bert", BERT, load_bert, "max_position_embeddings", MDL_MAX_POSITIONS},
    {"bert", BERT, load_bert, "type_vocab_size", MDL_MAX_VOCAB},
    {"bert", BERT, load_bert, "num_labels", MDL_MAX_LABELS},
    {"roberta", ROBERTA, load_bert, "hidden_size", MDL_MAX_WIDTH},
    {"roberta", ROBERTA, load_bert, "max_position_embeddings", MDL_MAX_POSITIONS},
    {"t5", T5, load_t5, "d_model", MDL_MAX_WIDTH},
    {"t5", T5, load_t5, "vocab_size", MDL_MAX_VOCAB},
    {"t5", T5, load_t5, "d_kv", MDL_MAX_WIDTH},
    {"t5", T5, load_t5, "d_ff", MDL_MAX_FFN},
    {"t5", T5, load_t5, "num_heads", MDL_MAX_HEADS},
    {"t5", T5, load_t5, "num_layers", MDL_MAX_LAYERS},
    {"t5", T5, load_t5, "num_decoder_layers", MDL_MAX_LAYERS},
    {"t5", T5, load_t5, "relative_attention_num_buckets", MDL_MAX_POSITIONS},
    {"t5", T5, load_t5, "relative_attention_max_distance", MDL_MAX_POSITIONS},
    {"glm", GLM, load_glm, "hidden_size", MDL_MAX_WIDTH},
    {"glm", GLM, load_glm, "vocab_size", MDL_MAX_VOCAB},
    {"glm", GLM, load_glm, "num_layers", MDL_MAX_LAYERS},
    {"glm", GLM, load_glm, "num_attention_heads", MDL_MAX_HEADS},
    {"glm", GLM, load_glm, "max_sequence_length", MDL_MAX_POSITIONS},
};

/* Each size field at 1e9, 2^31 (past int) and 1e300: "field 'F' is V, more than the limit L". */
static void test_fields(void) {
    static const char *const values[] = {"1000000000", "2147483648", "1e300"};
    static const char *const shown[] = {"1000000000", "2147483648", "1e+300"};
    for (size_t i = 0; i < sizeof field_cases / sizeof *field_cases; i++) {
        const field_case *fc = &field_cases[i];
        for (int v = 0; v < 3; v++) {
            char text[512], name[128], limit[32], field[96], what[160];
            snprintf(text, sizeof text, "%s\"%s\": %s}", fc->prefix ? fc->prefix : glm_prefix(fc->field), fc->field,
                     values[v]);
            snprintf(name, sizeof name, "%s-%s-%d.json", fc->family, fc->field, v);
            snprintf(limit, sizeof limit, "limit %d", fc->limit);
            snprintf(field, sizeof field, "'%s' is %s", fc->field, shown[v]);
            snprintf(what, sizeof what, "%s %s = %s", fc->family, fc->field, values[v]);
            const char *path = write_config(name, text);
            const char *words[] = {field, limit, NULL};
            expect_refused(what, fc->load(path), path, words);
        }
    }
    /* and below the minimum: one line naming it */
    const char *path = write_config("gpt2-neg.json", GPT2 "\"n_embd\": -2147483649}");
    const char *words[] = {"'n_embd' is -2147483649", "minimum 1", NULL};
    expect_refused("gpt2 n_embd = -2^31 - 1", load_gpt2(path), path, words);
}

/* Fields each within its limit whose products are not: the parameter count (or T5's
 * num_heads x d_kv) over its limit, in a message naming the file and the fields. */
static void test_products(void) {
    const char *params[] = {"parameters", "limit 1099511627776", NULL};
    const char *path = write_config("gpt2-big.json", GPT2 "\"n_embd\": 65536, \"n_layer\": 1024, \"n_head\": 1024, "
                                                          "\"vocab_size\": 16777216}");
    const char *gpt2_words[] = {"n_embd", "n_layer", params[0], params[1], NULL};
    expect_refused("gpt2 product", load_gpt2(path), path, gpt2_words);

    path = write_config("bert-big.json", BERT "\"hidden_size\": 65536, \"num_hidden_layers\": 1024, "
                                              "\"num_attention_heads\": 1024, \"intermediate_size\": 1048576}");
    const char *bert_words[] = {"hidden_size", "intermediate_size", params[0], params[1], NULL};
    expect_refused("bert product", load_bert(path), path, bert_words);

    path = write_config("roberta-big.json", ROBERTA "\"hidden_size\": 65536, \"vocab_size\": 16777216, "
                                                    "\"num_attention_heads\": 1024}");
    expect_refused("roberta product", load_bert(path), path, bert_words);

    path = write_config("t5-inner.json", T5 "\"num_heads\": 1024, \"d_kv\": 65536}");
    const char *inner_words[] = {"num_heads", "d_kv", "limit 1048576", NULL};
    expect_refused("t5 num_heads x d_kv", load_t5(path), path, inner_words);

    path = write_config("t5-big.json", T5 "\"d_model\": 65536, \"d_ff\": 1048576, \"num_layers\": 256}");
    const char *t5_words[] = {"d_model", "d_ff", params[0], params[1], NULL};
    expect_refused("t5 product", load_t5(path), path, t5_words);

    path = write_config("glm-big.json", "{\"vocab_size\": 100, \"hidden_size\": 65536, \"num_layers\": 1024, "
                                        "\"num_attention_heads\": 4, \"max_sequence_length\": 64}");
    const char *glm_words[] = {"hidden_size", "num_layers", params[0], params[1], NULL};
    expect_refused("glm product", load_glm(path), path, glm_words);
}

/* The getter itself: in range, at the bounds, a default, and outside (also past int). */
static void test_getter(void) {
    cJSON *o = NULL;
    const char *text = "{\"a\": 64, \"b\": 4294967296, \"c\": 2.5, \"d\": -5, \"e\": 65536}";
    TZ_EXPECT_OK(rt_json_parse(text, strlen(text), "t.json", &o));
    int v = 0;
    TZ_EXPECT_OK(rt_json_get_int_range(o, "t.json", "a", &v, true, 0, 1, 64));
    TZ_EXPECT(v == 64, "a = %d", v);
    TZ_EXPECT_OK(rt_json_get_int_range(o, "t.json", "e", &v, true, 0, 1, MDL_MAX_WIDTH));
    TZ_EXPECT(v == MDL_MAX_WIDTH, "e = %d", v);
    TZ_EXPECT_OK(rt_json_get_int_range(o, "t.json", "absent", &v, false, 7, 1, 64));
    TZ_EXPECT(v == 7, "default %d", v);
    TZ_EXPECT(rt_json_get_int_range(o, "t.json", "a", &v, true, 0, 1, 63) == RT_ERR_CONFIG &&
                  strstr(rt_error_message(), "t.json: field 'a' is 64, more than the limit 63"),
              "a over: %s", rt_error_message());
    TZ_EXPECT(rt_json_get_int_range(o, "t.json", "b", &v, true, 0, 1, INT_MAX) == RT_ERR_CONFIG &&
                  strstr(rt_error_message(), "'b' is 4294967296, more than the limit 2147483647"),
              "b over: %s", rt_error_message());
    TZ_EXPECT(rt_json_get_int_range(o, "t.json", "c", &v, true, 0, 1, 64) == RT_ERR_CONFIG &&
                  strstr(rt_error_message(), "integer"),
              "c: %s", rt_error_message());
    TZ_EXPECT(rt_json_get_int_range(o, "t.json", "d", &v, true, 0, 0, 64) == RT_ERR_CONFIG &&
                  strstr(rt_error_message(), "'d' is -5, less than the minimum 0"),
              "d: %s", rt_error_message());
    cJSON_Delete(o);
}

/* A config set in code is checked as a file's is, without the file's name. */
static void test_validate(void) {
    gpt2_config g;
    gpt2_config_default(&g);
    g.n_embd = 1000000000;
    TZ_EXPECT(gpt2_config_validate(&g, 1) == RT_ERR_CONFIG &&
                  strstr(rt_error_message(), "'n_embd' is 1000000000, more than the limit 65536"),
              "gpt2 validate: %s", rt_error_message());
    bert_config b;
    bert_config_default(&b);
    b.hidden_size = INT_MAX;
    TZ_EXPECT(bert_config_validate(&b, 1) == RT_ERR_CONFIG && strstr(rt_error_message(), "'hidden_size' is 2147483647"),
              "bert validate: %s", rt_error_message());
    t5_config t;
    t5_config_default(&t);
    t.d_ff = 1000000000;
    TZ_EXPECT(t5_config_validate(&t, 1) == RT_ERR_CONFIG && strstr(rt_error_message(), "'d_ff' is 1000000000"),
              "t5 validate: %s", rt_error_message());
    glm_config m;
    glm_config_default(&m);
    m.num_layers = 1000000000;
    TZ_EXPECT(glm_config_validate(&m, 1) == RT_ERR_CONFIG && strstr(rt_error_message(), "'num_layers' is 1000000000"),
              "glm validate: %s", rt_error_message());
}

/* st is RT_ERR_NOMEM with one line naming the limit (the slab was never sized). */
static void expect_no_room(const char *what, rt_status st) {
    const char *msg = rt_error_message();
    TZ_EXPECT(st == RT_ERR_NOMEM && strstr(msg, "2^56 bytes") && !strchr(msg, '\n'), "%s: %s: %s", what,
              rt_status_name(st), msg);
}

/* Tiny configs build; the same models asked for batches whose activation products wrap 64 bits
 * are refused before any allocation. */
static void test_models(rt_backend *be) {
    rt_comm *tp = rt_comm_self();
    const char *path = write_config("gpt2-tiny.json", GPT2 "\"vocab_size\": 100, \"n_positions\": 1048576, "
                                                           "\"n_embd\": 1024, \"n_layer\": 1, \"n_head\": 1024}");
    gpt2_config gc;
    TZ_EXPECT_OK(gpt2_config_load(path, &gc));
    gpt2_model *gm = NULL;
    /* 65536 x 2^20 tokens x 1024 heads x 2^20 keys: the probabilities alone wrap size_t */
    expect_no_room("gpt2 activations", gpt2_model_init(&gc, be, tp, 65536, 1 << 20, 1, &gm));
    TZ_EXPECT(gm == NULL, "gpt2: a model came back");
    /* small enough in bytes, but 2^32 token rows do not fit the kernels' int32 row indices */
    gc.n_positions = 2, gc.n_embd = 1, gc.n_head = 1;
    rt_status st = gpt2_model_init(&gc, be, tp, INT_MAX, 2, 1, &gm);
    TZ_EXPECT(st == RT_ERR_CONFIG && strstr(rt_error_message(), "limit of 2147483647 token rows") &&
                  !strchr(rt_error_message(), '\n'),
              "gpt2 token rows: %s: %s", rt_status_name(st), rt_error_message());
    TZ_EXPECT(gm == NULL, "gpt2: a model came back");
    gc.n_positions = 16, gc.n_embd = 32, gc.n_head = 4;
    TZ_EXPECT_OK(gpt2_model_init(&gc, be, tp, 2, 16, 1, &gm));
    gpt2_model_free(gm);

    path = write_config("bert-tiny.json", BERT "\"vocab_size\": 100, \"hidden_size\": 32, \"num_hidden_layers\": 1, "
                                               "\"num_attention_heads\": 4, \"intermediate_size\": 64, "
                                               "\"max_position_embeddings\": 1048576}");
    bert_config bc;
    TZ_EXPECT_OK(bert_config_load(path, &bc));
    bert_model *bm = NULL;
    expect_no_room("bert activations", bert_model_init(&bc, be, tp, INT_MAX, 1 << 20, 1, &bm));
    TZ_EXPECT(bm == NULL, "bert: a model came back");
    bc.max_position_embeddings = 64;
    TZ_EXPECT_OK(bert_model_init(&bc, be, tp, 2, 16, 1, &bm));
    bert_model_free(bm);

    path = write_config("t5-tiny.json", T5 "\"vocab_size\": 100, \"d_model\": 32, \"d_kv\": 8, \"d_ff\": 64, "
                                           "\"num_heads\": 4, \"num_layers\": 1, \"num_decoder_layers\": 1}");
    t5_config tc;
    TZ_EXPECT_OK(t5_config_load(path, &tc));
    t5_model *tm = NULL;
    expect_no_room("t5 activations", t5_model_init(&tc, be, tp, INT_MAX, INT_MAX, INT_MAX, 1, &tm));
    TZ_EXPECT(tm == NULL, "t5: a model came back");
    TZ_EXPECT_OK(t5_model_init(&tc, be, tp, 2, 16, 16, 1, &tm));
    if (tm) {
        t5_generator *g = NULL;
        TZ_EXPECT(t5_generator_init(tm, 2, 16, INT_MAX, 16, &g) == RT_ERR_CONFIG && strstr(rt_error_message(), "beams"),
                  "t5 generator rows: %s", rt_error_message());
        expect_no_room("t5 generator", t5_generator_init(tm, 2, 16, 1 << 20, INT_MAX, &g));
        TZ_EXPECT(g == NULL, "t5 generator came back");
        TZ_EXPECT_OK(t5_generator_init(tm, 2, 16, 2, 4, &g));
        t5_generator_free(g);
    }
    t5_model_free(tm);

    path = write_config("glm-tiny.json", "{\"vocab_size\": 100, \"hidden_size\": 32, \"num_layers\": 1, "
                                         "\"num_attention_heads\": 4, \"max_sequence_length\": 1048576}");
    glm_config lc;
    TZ_EXPECT_OK(glm_config_load(path, &lc));
    glm_model *lm = NULL;
    expect_no_room("glm activations", glm_model_init(&lc, be, tp, INT_MAX, 1 << 20, 1, &lm));
    TZ_EXPECT(lm == NULL, "glm: a model came back");
    lc.max_sequence_length = 64;
    TZ_EXPECT_OK(glm_model_init(&lc, be, tp, 2, 16, 1, &lm));
    glm_model_free(lm);
}

/* A caller that declares a slab past size_t gets RT_ERR_NOMEM from rt_params_alloc, not a wrap. */
static void test_params(rt_backend *be) {
    rt_params p;
    rt_params_init(&p, be);
    const int64_t shape[2] = {(int64_t)1 << 31, (int64_t)1 << 31}; /* 2^62 floats: 2^64 bytes */
    rt_params_add(&p, "huge", 2, shape, RT_TP_NONE, false, RT_INIT_ZEROS, 0);
    rt_status st = rt_params_alloc(&p);
    TZ_EXPECT(st == RT_ERR_NOMEM && strstr(rt_error_message(), "overflow"), "one 2^62 param: %s: %s",
              rt_status_name(st), rt_error_message());
    for (int i = 0; i < 4; i++) rt_params_add(&p, "more", 2, shape, RT_TP_NONE, false, RT_INIT_ZEROS, 0);
    st = rt_params_alloc(&p);
    TZ_EXPECT(st == RT_ERR_NOMEM && strstr(rt_error_message(), "overflow"), "five 2^62 params: %s: %s",
              rt_status_name(st), rt_error_message());
    TZ_EXPECT(p.param == NULL && p.grad == NULL, "nothing allocated");
    rt_params_free(&p);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s", tz_tmpdir());
    test_getter();
    test_fields();
    test_products();
    test_validate();
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 2, &be));
    if (be) {
        test_models(be);
        test_params(be);
        rt_backend_free(be);
    }
    return tz_test_result("test_config_limits");
}
