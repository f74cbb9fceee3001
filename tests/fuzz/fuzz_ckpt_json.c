/* libFuzzer target for the JSON config path: ckpt_json_parse and its typed getters on every
 * key of the input, then the input as a config.json through the GPT-2, BERT/RoBERTa and T5
 * config loaders. Any byte string must give an error or a config that validates, never a
 * crash, a sanitizer report or a leak; a config that loads must also save and load again.
 * Not built by ctest. Build and run from the repository root:
 *
 *   clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -D_POSIX_C_SOURCE=200809L \
 *     -D_DEFAULT_SOURCE -I. -ffunction-sections -fdata-sections -Wl,--gc-sections -Wl,-z,start-stop-gc \
 *     tests/fuzz/fuzz_ckpt_json.c checkpoints/ckpt_json.c checkpoints/ckpt_atomic.c \
 *     models/hf_config.c models/gpt2.c models/bert.c models/t5_config.c runtime/rt_status.c \
 *     -lcjson -lm -o /tmp/fuzz_json
 *   /tmp/fuzz_json -max_total_time=60 -max_len=4096 tests/fuzz/corpus/fuzz_ckpt_json
 *
 * gpt2.c and bert.c also hold the models; --gc-sections drops those functions (nothing here
 * calls them), so their backend and parameter code need not be linked; -z start-stop-gc lets it,
 * since the sanitizers' per-function metadata sections would otherwise keep them all. The loaders take a
 * path, so each input goes through a per-process temp file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/ckpt_json.h"
#include "models/bert.h"
#include "models/gpt2.h"
#include "models/t5.h"

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
            (void)ckpt_json_get_int(obj, "fuzz.json", key, &i, req, 7);
            (void)ckpt_json_get_double(obj, "fuzz.json", key, &d, req, 0.5);
            (void)ckpt_json_get_float(obj, "fuzz.json", key, &f, req, 0.25);
            if (ckpt_json_get_string(obj, "fuzz.json", key, &s, req, "def") == RT_OK && !s) abort();
            (void)ckpt_json_get_bool(obj, "fuzz.json", key, &b, req, true);
        }
        (void)ckpt_json_type_name(it);
    }
    /* a key that is absent: the default when optional, an error when required (the fuzzer
     * learns the probe's name from the comparisons and puts it in the input) */
    if (cJSON_GetObjectItemCaseSensitive(obj, "\x01missing")) return;
    int i = 0;
    if (ckpt_json_get_int(obj, "fuzz.json", "\x01missing", &i, false, 42) != RT_OK || i != 42) abort();
    if (ckpt_json_get_int(obj, "fuzz.json", "\x01missing", &i, true, 42) == RT_OK) abort();
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
    if (ckpt_json_parse((const char *)data, size, "fuzz.json", &root) == RT_OK) {
        if (!root) abort();
        if (cJSON_IsObject(root)) try_getters(root);
        (void)ckpt_json_type_name(root);
        cJSON_Delete(root);
    } else if (root) {
        abort(); /* a failed parse leaves nothing to free */
    }

    write_input(data, size);
    gpt2_config g, g2;
    if (gpt2_config_load(in_path, &g) == RT_OK) {
        if (gpt2_config_validate(&g, 1) != RT_OK) abort();
        if (gpt2_config_save(&g, out_path) != RT_OK || gpt2_config_load(out_path, &g2) != RT_OK) abort();
    }
    bert_config b, b2;
    if (bert_config_load(in_path, &b) == RT_OK) {
        if (bert_config_validate(&b, 1) != RT_OK) abort();
        if (bert_config_save(&b, out_path) != RT_OK || bert_config_load(out_path, &b2) != RT_OK) abort();
    }
    t5_config t, t2;
    if (t5_config_load(in_path, &t) == RT_OK) {
        if (t5_config_validate(&t, 1) != RT_OK) abort();
        if (t5_config_save(&t, out_path) != RT_OK || t5_config_load(out_path, &t2) != RT_OK) abort();
    }
    return 0;
}
