/* Rows out (see data_table_out.h): each row is assembled in a buffer that goes to the file a
 * megabyte at a time. */
#include "data/data_table_out.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_atomic.h"
#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_log.h"

static void out_csv_field(rt_text *o, const char *s, char delim) {
    if (!strchr(s, delim) && !strpbrk(s, "\"\r\n")) {
        rt_text_puts(o, s);
        return;
    }
    rt_text_put(o, "\"", 1);
    for (const char *p = s; *p; p++) {
        rt_text_put(o, p, 1);
        if (*p == '"') rt_text_put(o, "\"", 1); /* doubled */
    }
    rt_text_put(o, "\"", 1);
}

/* A JSON string literal: quotes, backslashes and control bytes escaped; UTF-8 as it is. */
static void out_json_string(rt_text *o, const char *s) {
    rt_text_put(o, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            rt_text_put(o, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            rt_text_puts(o, esc);
        } else {
            rt_text_put(o, (const char *)p, 1);
        }
    }
    rt_text_put(o, "\"", 1);
}

/* One cell: a field (CSV, TSV), or "name": value (JSON Lines; kind says how to write text). */
static void out_cell(rt_text *o, data_format fmt, int col, const char *name, const char *text, data_cell_kind kind) {
    if (fmt == DATA_FORMAT_JSONL) {
        rt_text_puts(o, col ? ", " : "{");
        out_json_string(o, name);
        rt_text_puts(o, ": ");
        if (kind == DATA_CELL_TEXT)
            out_json_string(o, text);
        else
            rt_text_puts(o, text); /* a number, true/false, a list or an object: its JSON text */
    } else {
        const char delim = fmt == DATA_FORMAT_TSV ? '\t' : ',';
        if (col) rt_text_put(o, &delim, 1);
        out_csv_field(o, text, delim);
    }
}

data_format data_table_out_format(const data_table *t) {
    return t->format == DATA_FORMAT_JSON ? DATA_FORMAT_JSONL : t->format;
}

rt_status data_table_write_rows(const data_table *t, const char *path, int n_added, const char *const *added_names,
                                data_added_cell_fn cell, void *ctx) {
    rt_status st = RT_OK;
    const data_format fmt = data_table_out_format(t);
    rt_atomic_file *file = NULL;
    rt_text o = {0};
    bool *keep = rt_xcalloc((size_t)t->n_cols + 1, sizeof *keep);
    int dropped = 0;
    for (int c = 0; c < t->n_cols; c++) {
        keep[c] = true;
        for (int k = 0; k < n_added && keep[c]; k++) keep[c] = strcmp(added_names[k], t->col_names[c]) != 0;
        dropped += !keep[c];
    }
    if (dropped)
        rt_log_warn("%s: %d of its columns are named as columns %s adds; %s writes its own in their place", t->path,
                    dropped, path, path);
    RT_TRY(rt_atomic_begin(path, &file));
    if (fmt != DATA_FORMAT_JSONL) { /* the header */
        int col = 0;
        for (int c = 0; c < t->n_cols; c++)
            if (keep[c]) out_cell(&o, fmt, col++, NULL, t->col_names[c], DATA_CELL_TEXT);
        for (int k = 0; k < n_added; k++) out_cell(&o, fmt, col++, NULL, added_names[k], DATA_CELL_TEXT);
        rt_text_puts(&o, "\n");
    }
    for (size_t r = 0; r < t->n_rows; r++) {
        int col = 0;
        for (int c = 0; c < t->n_cols; c++) {
            const char *s = data_table_cell(t, r, c);
            if (!keep[c] || (!s && fmt == DATA_FORMAT_JSONL)) continue; /* JSON: a key left out stays out */
            out_cell(&o, fmt, col++, t->col_names[c], s ? s : "", data_table_kind(t, r, c));
        }
        for (int k = 0; k < n_added; k++) {
            char scratch[64];
            data_cell_kind kind = DATA_CELL_TEXT;
            const char *s = cell(ctx, r, k, scratch, &kind);
            out_cell(&o, fmt, col++, added_names[k], s, kind);
        }
        rt_text_puts(&o, fmt == DATA_FORMAT_JSONL ? "}\n" : "\n");
        if (o.n > (1u << 20) || r + 1 == t->n_rows) {
            RT_TRY(rt_atomic_write(file, o.s, o.n));
            o.n = 0;
        }
    }
    st = rt_atomic_commit(file);
    file = NULL;
fail:
    rt_atomic_abort(file);
    rt_text_free(&o);
    free(keep);
    return st;
}
