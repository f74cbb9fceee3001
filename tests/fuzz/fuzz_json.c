/* libFuzzer target for the JSON config path: rt_json_parse and its typed getters on every
 * key of the input (the ranged size getter too), then the input as a config.json through the
 * GPT-2, BERT/RoBERTa, T5 and GLM config loaders. Any byte string must give an error or a
 * config that validates, never a crash, a sanitizer report or a leak; an error is one line; a
 * config that loads must hold every size within its limit (models/layers/hf_config.h), with the
 * products a model forms from them far from 64-bit overflow, and must also save and load again.
 * Not built by ctest. Build and run from the repository root:
 *
 *   clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -D_POSIX_C_SOURCE=200809L \
 *     -D_DEFAULT_SOURCE -I. -ffunction-sections -fdata-sections -Wl,--gc-sections -Wl,-z,start-stop-gc \
 *     tests/fuzz/fuzz_json.c runtime/base/rt_json.c runtime/base/rt_atomic.c \
 *     models/layers/hf_config.c models/gpt2/gpt2.c models/bert/bert.c models/t5/t5_config.c models/glm/glm_config.c \
 *     runtime/base/rt_status.c runtime/base/rt_fs.c -lcjson -lm -o /tmp/fuzz_json
 *   /tmp/fuzz_json -max_total_time=60 -max_len=4096 tests/fuzz/corpus/fuzz_json
 *
 * gpt2.c and bert.c also hold the models; --gc-sections drops those functions (nothing here
 * calls them), so their backend and parameter code need not be linked; -z start-stop-gc lets it,
 * since the sanitizers' per-function metadata sections would otherwise keep them all. The loaders take a
 * path, so each input goes through a per-process temp file. */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/bert/bert.h"
#include "models/glm/glm.h"
#include "models/gpt2/gpt2.h"
#include "models/layers/hf_config.h"
#include "models/t5/t5.h"
#include "runtime/base/rt_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char in_path[96], out_path[96];

static void make_paths(void) {
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"; /* tmpfs: the round trip dominates */
    snprintf(in_path, sizeof in_path, "%s/fuzz_json_%ld.json", dir, (long)getpid());
    snprintf(out_path, sizeof out_path, "%s/fuzz_json_%ld.out.json", dir, (long)getpid());
}

/* Every getter on every key of an object, required and not: each gives a value or a status. */
static void try_getters(const cJSON *obj) {
    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        const char *key = it->string;
        if (!key) abort(); /* an object's members always have names */
        for (int req = 0; req < 2; req++) {
            int i;
            double d;
            float f;
            const char *s;
            bool b;
            (void)rt_json_get_int(obj, "fuzz.json", key, &i, req, 7);
            (void)rt_json_get_double(obj, "fuzz.json", key, &d, req, 0.5);
            (void)rt_json_get_float(obj, "fuzz.json", key, &f, req, 0.25);
            if (rt_json_get_string(obj, "fuzz.json", key, &s, req, "def") == RT_OK && !s) abort();
            (void)rt_json_get_bool(obj, "fuzz.json", key, &b, req, true);
            /* a size: its default or within its range */
            i = -7;
            if (rt_json_get_int_range(obj, "fuzz.json", key, &i, req, 7, 1, MDL_MAX_WIDTH) == RT_OK &&
                !(i == 7 || (i >= 1 && i <= MDL_MAX_WIDTH)))
                abort();
        }
        (void)rt_json_type_name(it);
    }
    /* a key that is absent: the default when optional, an error when required (the fuzzer
     * learns the probe's name from the comparisons and puts it in the input) */
    if (cJSON_GetObjectItemCaseSensitive(obj, "\x01missing")) return;
    int i = 0;
    if (rt_json_get_int(obj, "fuzz.json", "\x01missing", &i, false, 42) != RT_OK || i != 42) abort();
    if (rt_json_get_int(obj, "fuzz.json", "\x01missing", &i, true, 42) == RT_OK) abort();
}

/* The size checks' promise: every size of a loaded config is within its limit, so the largest
 * products a model forms (parameter counts, 3 C, num_heads x d_kv) fit with room to spare. */
static void in_range(int v, int lo, int hi) {
    if (v < lo || v > hi) abort();
}

static void check_gpt2(const gpt2_config *c) {
    in_range(c->vocab_size, 1, MDL_MAX_VOCAB);
    in_range(c->n_positions, 1, MDL_MAX_POSITIONS);
    in_range(c->n_embd, 1, MDL_MAX_WIDTH);
    in_range(c->n_layer, 1, MDL_MAX_LAYERS);
    in_range(c->n_head, 1, MDL_MAX_HEADS);
    in_range(c->n_inner, 0, MDL_MAX_FFN);
    in_range(c->num_labels, 1, MDL_MAX_LABELS);
    const uint64_t C = (uint64_t)c->n_embd, F = c->n_inner ? (uint64_t)c->n_inner : 4 * C;
    if ((uint64_t)c->vocab_size * C + (uint64_t)c->n_layer * (4 * C + 2 * F) * C > ((uint64_t)1 << 41)) abort();
}

static void check_bert(const bert_config *c) {
    in_range(c->vocab_size, 1, MDL_MAX_VOCAB);
    in_range(c->hidden_size, 1, MDL_MAX_WIDTH);
    in_range(c->num_hidden_layers, 1, MDL_MAX_LAYERS);
    in_range(c->num_attention_heads, 1, MDL_MAX_HEADS);
    in_range(c->intermediate_size, 1, MDL_MAX_FFN);
    in_range(c->max_position_embeddings, 1, MDL_MAX_POSITIONS);
    in_range(c->type_vocab_size, 1, MDL_MAX_VOCAB);
    in_range(c->num_labels, 1, MDL_MAX_LABELS);
    const uint64_t C = (uint64_t)c->hidden_size, F = (uint64_t)c->intermediate_size;
    if ((uint64_t)c->vocab_size * C + (uint64_t)c->num_hidden_layers * (4 * C + 2 * F) * C > ((uint64_t)1 << 41))
        abort();
}

static void check_t5(const t5_config *c) {
    in_range(c->vocab_size, 1, MDL_MAX_VOCAB);
    in_range(c->d_model, 1, MDL_MAX_WIDTH);
    in_range(c->d_kv, 1, MDL_MAX_WIDTH);
    in_range(c->d_ff, 1, MDL_MAX_FFN);
    in_range(c->num_heads, 1, MDL_MAX_HEADS);
    in_range(c->num_layers, 1, MDL_MAX_LAYERS);
    in_range(c->num_decoder_layers, 1, MDL_MAX_LAYERS);
    in_range(c->relative_attention_num_buckets, 1, MDL_MAX_POSITIONS);
    in_range(c->relative_attention_max_distance, 1, MDL_MAX_POSITIONS);
    if ((int64_t)c->num_heads * c->d_kv > MDL_MAX_FFN) abort();
    const uint64_t C = (uint64_t)c->d_model, I = (uint64_t)c->num_heads * (uint64_t)c->d_kv, F = (uint64_t)c->d_ff;
    const uint64_t L = (uint64_t)c->num_layers + (uint64_t)c->num_decoder_layers;
    if ((uint64_t)c->vocab_size * C + L * (4 * I + 3 * F) * C > ((uint64_t)1 << 41)) abort();
}

static void check_glm(const glm_config *c) {
    in_range(c->vocab_size, 1, MDL_MAX_VOCAB);
    in_range(c->hidden_size, 1, MDL_MAX_WIDTH);
    in_range(c->num_layers, 1, MDL_MAX_LAYERS);
    in_range(c->num_attention_heads, 1, MDL_MAX_HEADS);
    in_range(c->max_sequence_length, 1, MDL_MAX_POSITIONS);
    const uint64_t C = (uint64_t)c->hidden_size;
    if ((uint64_t)c->vocab_size * C + (uint64_t)c->num_layers * 12 * C * C > ((uint64_t)1 << 41)) abort();
}

/* A size refused says so in one line (the loaders' field names and numbers; other refusals may
 * quote the input's own strings). An input that holds the probe's own words is not probed:
 * libFuzzer learns them from the comparison, and a quoted string carrying them and a newline
 * would look like a size error split over lines. */
static void check_refusal(rt_status st, const uint8_t *data, size_t size) {
    if (memmem(data, size, "more than the limit", 19) || memmem(data, size, "less than the minimum", 21)) return;
    const char *msg = rt_error_message();
    if (st != RT_OK && (strstr(msg, "more than the limit") || strstr(msg, "less than the minimum")) &&
        strchr(msg, '\n'))
        abort();
}

static void write_input(const uint8_t *data, size_t size) {
    FILE *fp = fopen(in_path, "wb");
    if (!fp) abort();
    if (size && fwrite(data, 1, size, fp) != size) abort();
    fclose(fp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!in_path[0]) make_paths();
    cJSON *root = NULL;
    if (rt_json_parse((const char *)data, size, "fuzz.json", &root) == RT_OK) {
        if (!root) abort();
        if (cJSON_IsObject(root)) try_getters(root);
        (void)rt_json_type_name(root);
        cJSON_Delete(root);
    } else if (root) {
        abort(); /* a failed parse leaves nothing to free */
    }

    write_input(data, size);
    gpt2_config g, g2;
    rt_status st = gpt2_config_load(in_path, &g);
    check_refusal(st, data, size);
    if (st == RT_OK) {
        if (gpt2_config_validate(&g, 1) != RT_OK) abort();
        check_gpt2(&g);
        if (gpt2_config_save(&g, out_path) != RT_OK || gpt2_config_load(out_path, &g2) != RT_OK) abort();
    }
    bert_config b, b2;
    st = bert_config_load(in_path, &b);
    check_refusal(st, data, size);
    if (st == RT_OK) {
        if (bert_config_validate(&b, 1) != RT_OK) abort();
        check_bert(&b);
        if (bert_config_save(&b, out_path) != RT_OK || bert_config_load(out_path, &b2) != RT_OK) abort();
    }
    t5_config t, t2;
    st = t5_config_load(in_path, &t);
    check_refusal(st, data, size);
    if (st == RT_OK) {
        if (t5_config_validate(&t, 1) != RT_OK) abort();
        check_t5(&t);
        if (t5_config_save(&t, out_path) != RT_OK || t5_config_load(out_path, &t2) != RT_OK) abort();
    }
    glm_config l, l2;
    st = glm_config_load(in_path, &l);
    check_refusal(st, data, size);
    if (st == RT_OK) {
        if (glm_config_validate(&l, 1) != RT_OK) abort();
        check_glm(&l);
        if (glm_config_save(&l, out_path) != RT_OK || glm_config_load(out_path, &l2) != RT_OK) abort();
    }
    return 0;
}
