/* JSON loading and typed getters over cJSON (see rt_json.h). cJSON only says where parsing
 * stopped, so the line and column are counted here from that position. */
#include "runtime/base/rt_json.h"

#include <errno.h>
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_fs.h"

const char *rt_json_type_name(const cJSON *item) {
    if (!item) return "missing";
    if (cJSON_IsNull(item)) return "null";
    if (cJSON_IsBool(item)) return "a boolean";
    if (cJSON_IsNumber(item)) return "a number";
    if (cJSON_IsString(item)) return "a string";
    if (cJSON_IsArray(item)) return "an array";
    if (cJSON_IsObject(item)) return "an object";
    return "an invalid value";
}

/* Line and column (both from 1) of byte offset pos in text. */
static void json_line_col(const char *text, size_t pos, size_t *line, size_t *col) {
    size_t l = 1, c = 1;
    for (size_t i = 0; i < pos; i++) {
        if (text[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static int json_cmp_keys(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A key that appears twice in one object of the tree (JSON allows it; which value counts would be
 * a guess), or NULL. Keys sorted per object: a tokenizer's 50k-entry vocab stays n log n. */
static const char *json_duplicate_key(const cJSON *item) {
    size_t n = 0;
    for (const cJSON *c = item ? item->child : NULL; c; c = c->next) n++;
    const char *found = NULL;
    if (cJSON_IsObject(item) && n > 1) {
        const char **keys = rt_xmalloc(n * sizeof *keys);
        size_t k = 0;
        for (const cJSON *c = item->child; c; c = c->next) keys[k++] = c->string ? c->string : "";
        qsort(keys, n, sizeof *keys, json_cmp_keys);
        for (size_t i = 1; i < n && !found; i++)
            if (strcmp(keys[i - 1], keys[i]) == 0) found = keys[i];
        free(keys);
    }
    for (const cJSON *c = item ? item->child : NULL; c && !found; c = c->next) found = json_duplicate_key(c);
    return found;
}

rt_status rt_json_parse(const char *text, size_t len, const char *name_for_errors, cJSON **out) {
    rt_status st = RT_OK;
    const char *end = NULL;
    *out = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    size_t pos = 0;
    if (!root) {
        /* cJSON reports the position where it gave up; clamp in case it points past the end */
        pos = (end && end >= text && (size_t)(end - text) <= len) ? (size_t)(end - text) : len;
        size_t line, col;
        json_line_col(text, pos, &line, &col);
        if (pos >= len)
            RT_FAIL(RT_ERR_FORMAT, "%s:%zu:%zu: invalid JSON: unexpected end of input", name_for_errors, line, col);
        char near[24];
        size_t n = 0;
        for (size_t i = pos; i < len && n < 16 && text[i] != '\n'; i++)
            near[n++] = (text[i] >= 0x20 && text[i] < 0x7f) ? text[i] : '?';
        near[n] = '\0';
        RT_FAIL(RT_ERR_FORMAT, "%s:%zu:%zu: invalid JSON near '%s'", name_for_errors, line, col, near);
    }
    pos = (size_t)(end - text);
    while (pos < len && (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n' || text[pos] == '\r')) pos++;
    if (pos < len && text[pos] != '\0') {
        size_t line, col;
        json_line_col(text, pos, &line, &col);
        RT_FAIL(RT_ERR_FORMAT, "%s:%zu:%zu: invalid JSON: unexpected text after the value", name_for_errors, line, col);
    }
    const char *twice = json_duplicate_key(root);
    if (twice)
        RT_FAIL(RT_ERR_FORMAT, "%s: key \"%s\" appears twice in one object (which one counts?)", name_for_errors,
                twice);
    *out = root;
    return RT_OK;
fail:
    cJSON_Delete(root);
    return st;
}

rt_status rt_json_load(const char *path, cJSON **out) {
    rt_status st = RT_OK;
    char *buf = NULL;
    size_t size = 0;
    *out = NULL;
    RT_TRY(rt_read_file(path, 0, &buf, &size));
    RT_TRY(rt_json_parse(buf, size, path, out));
fail:
    free(buf);
    return st;
}

/* Looks key up in obj; *item is NULL when the key is absent or null, so callers treat a JSON
 * null (HF writes "n_inner": null) like a missing key. */
static rt_status json_lookup(const cJSON *obj, const char *path, const char *key, const char *expected, bool required,
                             const cJSON **item) {
    *item = NULL;
    if (!cJSON_IsObject(obj))
        return rt_errorf(RT_ERR_CONFIG, "%s: expected an object holding field '%s', found %s", path, key,
                         rt_json_type_name(obj));
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) {
        if (required)
            return rt_errorf(RT_ERR_CONFIG, "%s: field '%s' is %s (expected %s)", path, key, it ? "null" : "missing",
                             expected);
        return RT_OK;
    }
    *item = it;
    return RT_OK;
}

static rt_status json_wrong_type(const char *path, const char *key, const cJSON *it, const char *expected) {
    if (cJSON_IsNumber(it))
        return rt_errorf(RT_ERR_CONFIG, "%s: field '%s' is the number %.17g (expected %s)", path, key, it->valuedouble,
                         expected);
    return rt_errorf(RT_ERR_CONFIG, "%s: field '%s' is %s (expected %s)", path, key, rt_json_type_name(it), expected);
}

rt_status rt_json_get_int(const cJSON *obj, const char *path_for_errors, const char *key, int *out, bool required,
                          int def) {
    const char *expected = "an integer";
    const cJSON *it;
    rt_status st = json_lookup(obj, path_for_errors, key, expected, required, &it);
    if (st != RT_OK) return st;
    if (!it) {
        *out = def;
        return RT_OK;
    }
    if (!cJSON_IsNumber(it)) return json_wrong_type(path_for_errors, key, it, expected);
    double d = it->valuedouble;
    if (!(d >= (double)INT_MIN && d <= (double)INT_MAX) || floor(d) != d)
        return json_wrong_type(path_for_errors, key, it, "an integer within int range");
    *out = (int)d;
    return RT_OK;
}

rt_status rt_json_get_int_range(const cJSON *obj, const char *path_for_errors, const char *key, int *out, bool required,
                                int def, int min, int max) {
    const cJSON *it;
    rt_status st = json_lookup(obj, path_for_errors, key, "an integer", required, &it);
    if (st != RT_OK) return st;
    if (!it) {
        *out = def;
        return RT_OK;
    }
    /* the bounds come first, so that 2^31 is "more than the limit", not "not an int" */
    if (cJSON_IsNumber(it) && it->valuedouble > (double)max)
        return rt_errorf(RT_ERR_CONFIG, "%s: field '%s' is %.15g, more than the limit %d", path_for_errors, key,
                         it->valuedouble, max);
    if (cJSON_IsNumber(it) && it->valuedouble < (double)min)
        return rt_errorf(RT_ERR_CONFIG, "%s: field '%s' is %.15g, less than the minimum %d", path_for_errors, key,
                         it->valuedouble, min);
    return rt_json_get_int(obj, path_for_errors, key, out, required, def);
}

rt_status rt_json_get_double(const cJSON *obj, const char *path_for_errors, const char *key, double *out, bool required,
                             double def) {
    const char *expected = "a number";
    const cJSON *it;
    rt_status st = json_lookup(obj, path_for_errors, key, expected, required, &it);
    if (st != RT_OK) return st;
    if (!it) {
        *out = def;
        return RT_OK;
    }
    if (!cJSON_IsNumber(it)) return json_wrong_type(path_for_errors, key, it, expected);
    *out = it->valuedouble;
    return RT_OK;
}

rt_status rt_json_get_float(const cJSON *obj, const char *path_for_errors, const char *key, float *out, bool required,
                            double def) {
    double d = def;
    rt_status st = rt_json_get_double(obj, path_for_errors, key, &d, required, def);
    if (st == RT_OK) *out = (float)d;
    return st;
}

rt_status rt_json_get_string(const cJSON *obj, const char *path_for_errors, const char *key, const char **out,
                             bool required, const char *def) {
    const char *expected = "a string";
    const cJSON *it;
    rt_status st = json_lookup(obj, path_for_errors, key, expected, required, &it);
    if (st != RT_OK) return st;
    if (!it) {
        *out = def;
        return RT_OK;
    }
    if (!cJSON_IsString(it) || !it->valuestring) return json_wrong_type(path_for_errors, key, it, expected);
    *out = it->valuestring;
    return RT_OK;
}

rt_status rt_json_get_bool(const cJSON *obj, const char *path_for_errors, const char *key, bool *out, bool required,
                           bool def) {
    const char *expected = "true or false";
    const cJSON *it;
    rt_status st = json_lookup(obj, path_for_errors, key, expected, required, &it);
    if (st != RT_OK) return st;
    if (!it) {
        *out = def;
        return RT_OK;
    }
    if (!cJSON_IsBool(it)) return json_wrong_type(path_for_errors, key, it, expected);
    *out = cJSON_IsTrue(it) != 0;
    return RT_OK;
}

cJSON *rt_json_add_number(cJSON *obj, const char *key, double v) {
    if (!isfinite(v)) return cJSON_AddNullToObject(obj, key);
    char text[32];
    for (int digits = 1; digits <= 17; digits++) { /* 17 significant digits always come back exactly */
        snprintf(text, sizeof text, "%.*g", digits, v);
        if (strtod(text, NULL) == v) break;
    }
    return cJSON_AddRawToObject(obj, key, text);
}
