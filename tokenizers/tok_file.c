/* The file helpers every tokenizer kind uses (tok_base.h): whole-file reads, JSON parsing with
 * the failing line in the message, paths, and the tokenizer_class of a tokenizer_config.json,
 * by which the GLM kinds recognise their files. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizers/tok_base.h"
#include "runtime/base/rt_fs.h"

rt_status tok_json_load(const char *path, cJSON **out) {
    rt_status st = RT_OK;
    char *data = NULL;
    size_t len;
    *out = NULL;
    RT_TRY(rt_read_file(path, 0, &data, &len));
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(data, len, &end, 0);
    if (!*out) {
        size_t line = 1;
        if (end && end >= data && end <= data + len)
            for (const char *p = data; p < end; p++) line += *p == '\n';
        RT_FAIL(RT_ERR_FORMAT, "%s:%zu: invalid JSON", path, line);
    }
fail:
    free(data);
    return st;
}

bool tok_file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

bool tok_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

char *tok_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = rt_xmalloc(a + b + 2);
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

char *tok_config_class(const char *dir) {
    char *path = tok_path_join(dir, "tokenizer_config.json"), *name = NULL;
    cJSON *cfg = NULL;
    if (tok_file_exists(path) && tok_json_load(path, &cfg) == RT_OK) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(cfg, "tokenizer_class");
        if (cJSON_IsString(c)) name = rt_xstrdup(c->valuestring);
    }
    cJSON_Delete(cfg);
    free(path);
    return name;
}

rt_status tok_json_id(const cJSON *entry, const char *where, int32_t *id) {
    const char *piece = entry->string ? entry->string : "";
    const double v = entry->valuedouble;
    if (!cJSON_IsNumber(entry) || v < 0 || v != floor(v))
        return rt_errorf(RT_ERR_FORMAT, "%s: entry \"%s\": expected a non-negative integer id", where, piece);
    if (v > 16777216.0)
        return rt_errorf(RT_ERR_FORMAT, "%s: entry \"%s\": id %.0f is past the largest a vocabulary may hold, 16777216",
                         where, piece, v);
    *id = (int32_t)v;
    return RT_OK;
}
