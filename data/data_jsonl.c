/* JSON Lines reader (see data_jsonl.h). */
#include "data/data_jsonl.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "runtime/base/rt_json.h"
#include "runtime/base/rt_utf8.h"

rt_status data_json_parse_text(const char *name, size_t line, const char *s, size_t len, cJSON **out) {
    *out = NULL;
    const char *nul = memchr(s, '\0', len);
    if (nul)
        return rt_errorf(RT_ERR_FORMAT, "%s:%zu: NUL byte at column %zu (expected UTF-8 JSON text)", name, line,
                         (size_t)(nul - s) + 1);
    /* line 0: a whole file, whose lines the UTF-8 check numbers itself */
    if (line == 0) {
        size_t ln = 1;
        for (size_t at = 0; at <= len;) {
            const char *nl = memchr(s + at, '\n', len - at);
            size_t n = nl ? (size_t)(nl - (s + at)) : len - at;
            rt_status st = rt_utf8_check_line(name, ln++, s + at, n);
            if (st != RT_OK) return st;
            at += n + 1;
        }
        if (rt_json_parse(s, len, name, out) != RT_OK) return RT_ERR_FORMAT; /* "name:line:col: ..." */
        return RT_OK;
    }
    rt_status st = rt_utf8_check_line(name, line, s, len);
    if (st != RT_OK) return st;
    if (rt_json_parse(s, len, name, out) != RT_OK) {
        /* The parser saw one line and says "name:1:col: ..."; put the file's line back. */
        const char *msg = rt_error_message();
        size_t nl = strlen(name);
        const bool named = strncmp(msg, name, nl) == 0;
        const char *rest = named && strncmp(msg + nl, ":1:", 3) == 0  ? msg + nl + 3 /* "col: ..." */
                           : named && strncmp(msg + nl, ": ", 2) == 0 ? msg + nl + 1 /* " key ..." */
                                                                      : NULL;
        char detail[256];
        snprintf(detail, sizeof detail, "%s", rest ? rest : msg);
        return rt_errorf(RT_ERR_FORMAT, "%s:%zu:%s%s", name, line, rest ? "" : " ", detail);
    }
    return RT_OK;
}

rt_status data_jsonl_each(const char *name, const char *buf, size_t len, size_t first_line, data_jsonl_record_fn record,
                          void *ctx) {
    rt_status st = RT_OK;
    cJSON *root = NULL;
    char where[320];
    size_t pos = first_line <= 1 ? rt_utf8_bom_len(buf, len) : 0, line = first_line ? first_line - 1 : 0;
    size_t blank_line = 0, n_records = 0;
    while (pos < len) {
        line++;
        const char *s = buf + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl != NULL);
        if (n > 0 && s[n - 1] == '\r') n--;
        size_t k = 0;
        while (k < n && (s[k] == ' ' || s[k] == '\t')) k++;
        if (k == n) { /* blank: fine only if nothing but blank lines follows */
            if (!blank_line) blank_line = line;
            continue;
        }
        if (blank_line) RT_FAIL(RT_ERR_FORMAT, "%s:%zu: blank line (expected a JSON object)", name, blank_line);
        snprintf(where, sizeof where, "%.300s:%zu", name, line);
        RT_TRY(data_json_parse_text(name, line, s, n, &root));
        if (!cJSON_IsObject(root))
            RT_FAIL(RT_ERR_FORMAT, "%s: the line is %s (expected a JSON object, one record per line)", where,
                    rt_json_type_name(root));
        RT_TRY(record(ctx, root, where, line));
        cJSON_Delete(root);
        root = NULL;
        n_records++;
    }
    if (n_records == 0)
        RT_FAIL(RT_ERR_FORMAT, "%s:%zu: no records (expected one JSON object per line)", name,
                first_line ? first_line : 1);
fail:
    cJSON_Delete(root);
    return st;
}
