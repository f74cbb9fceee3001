/* A user's data file as a table (see data_table.h). CSV and TSV are data_csv's table seen as
 * cells; JSON records are gathered as (row, column, kind, text) entries while the columns are
 * still being discovered, then laid out row-major once the file's columns are known. */
#include "data/data_table.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_csv.h"
#include "data/data_jsonl.h"
#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_fs.h"
#include "runtime/base/rt_json.h"
#include "runtime/base/rt_utf8.h"

static const char *const format_names[] = {"auto", "csv", "tsv", "jsonl", "json"};

const char *data_format_name(data_format fmt) {
    return (unsigned)fmt < sizeof format_names / sizeof format_names[0] ? format_names[fmt] : "?";
}

int data_format_parse(const char *name) {
    for (int f = DATA_FORMAT_AUTO; name && f <= DATA_FORMAT_JSON; f++)
        if (strcmp(format_names[f], name) == 0) return f;
    return -1;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

rt_status data_format_of(const char *path, data_format fmt, data_format *out) {
    *out = fmt;
    if (fmt != DATA_FORMAT_AUTO) return RT_OK;
    static const struct {
        const char *ext;
        data_format fmt;
    } exts[] = {{".csv", DATA_FORMAT_CSV},      {".tsv", DATA_FORMAT_TSV},     {".jsonl", DATA_FORMAT_JSONL},
                {".ndjson", DATA_FORMAT_JSONL}, {".json", DATA_FORMAT_JSON},   {".CSV", DATA_FORMAT_CSV},
                {".TSV", DATA_FORMAT_TSV},      {".JSONL", DATA_FORMAT_JSONL}, {".JSON", DATA_FORMAT_JSON}};
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++)
        if (ends_with(path, exts[i].ext)) {
            *out = exts[i].fmt;
            return RT_OK;
        }
    return rt_errorf(RT_ERR_USAGE,
                     "%s: cannot tell the format from the name (expected .csv, .tsv, .jsonl or .json); pass "
                     "--data-format csv|tsv|jsonl|json",
                     path);
}

const char *data_cell_kind_name(data_cell_kind kind) {
    switch (kind) {
    case DATA_CELL_TEXT: return "text";
    case DATA_CELL_NUMBER: return "a number";
    case DATA_CELL_BOOL: return "true/false";
    case DATA_CELL_LIST: return "a list";
    case DATA_CELL_OBJECT: return "an object";
    }
    return "?";
}

int data_table_col(const data_table *t, const char *name) {
    for (int c = 0; name && c < t->n_cols; c++)
        if (strcmp(t->col_names[c], name) == 0) return c;
    return -1;
}

void data_table_where(const data_table *t, size_t row, char *buf, size_t cap) {
    if (t->row_line[row])
        snprintf(buf, cap, "%s:%zu", t->path, t->row_line[row]);
    else
        snprintf(buf, cap, "%s: record %zu", t->path, row + 1);
}

void data_table_columns(const data_table *t, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    for (int c = 0; c < t->n_cols && n + 8 < cap; c++) {
        int w = snprintf(buf + n, cap - n, "%s%s", c ? ", " : "", t->col_names[c]);
        if (w < 0) break;
        n += (size_t)w;
    }
    if (n >= cap - 8) snprintf(buf + cap - 5, 5, "...");
}

rt_status data_table_missing_column(const data_table *t, const char *name, const char *option) {
    char cols[512];
    data_table_columns(t, cols, sizeof cols);
    return rt_errorf(RT_ERR_USAGE, "%s: no column '%s' (its columns: %s); name the column with %s", t->path, name, cols,
                     option);
}

rt_status data_table_text(const data_table *t, size_t row, int col, const char **out) {
    const char *s = data_table_cell(t, row, col);
    data_cell_kind kind = data_table_kind(t, row, col);
    *out = s;
    if (s && *s && (kind == DATA_CELL_TEXT || kind == DATA_CELL_NUMBER)) return RT_OK;
    char where[400];
    data_table_where(t, row, where, sizeof where);
    return rt_errorf(RT_ERR_FORMAT, "%s: column '%s': the text is %s", where, t->col_names[col],
                     !s    ? "missing"
                     : !*s ? "empty"
                           : data_cell_kind_name(kind));
}

void data_table_free(data_table *t) {
    if (!t) return;
    free(t->path);
    if (t->format != DATA_FORMAT_CSV && t->format != DATA_FORMAT_TSV) free(t->col_names);
    free(t->kinds);
    if (t->format != DATA_FORMAT_CSV && t->format != DATA_FORMAT_TSV) {
        free(t->cells);
        free(t->row_line);
    }
    data_tsv_free(&t->csv);
    for (size_t i = 0; i < t->n_strings; i++) free(t->strings[i]);
    free(t->strings);
    memset(t, 0, sizeof *t);
}

/* CSV and TSV: every record has the header's width (data_csv checked it), so the rows' fields
 * are one row-major block after the header's. */
static void table_from_csv(data_table *t) {
    t->n_cols = t->csv.n_header;
    t->col_names = t->csv.header;
    t->n_rows = t->csv.n_rows;
    t->cells = (const char **)(t->csv.fields + t->csv.n_header);
    t->row_line = t->csv.row_line;
}

/* ---- JSON ---- */

#define TABLE_BLOCK (1u << 20) /* strings are packed into blocks of this size (or one larger string) */

typedef struct {
    size_t row;
    int col;
    uint8_t kind;
    const char *text; /* NULL: null */
} json_entry;

typedef struct {
    data_table *t;
    json_entry *entries;
    size_t n_entries, cap_entries;
    size_t block_used, block_cap; /* in the last of t->strings */
    size_t *lines;                /* (rows) */
    size_t cap_rows;
    size_t cap_cols;
} json_builder;

/* A stable copy of s[0..n) with a NUL; NULL when out of memory. */
static const char *json_keep(json_builder *b, const char *s, size_t n) {
    data_table *t = b->t;
    if (t->n_strings == 0 || b->block_used + n + 1 > b->block_cap) {
        char **p = rt_grow_try(t->strings, &t->cap_strings, t->n_strings + 1, sizeof *p);
        if (!p) return NULL;
        t->strings = p;
        size_t size = n + 1 > TABLE_BLOCK ? n + 1 : TABLE_BLOCK;
        char *block = malloc(size);
        if (!block) return NULL;
        t->strings[t->n_strings++] = block;
        b->block_used = 0;
        b->block_cap = size;
    }
    char *dst = t->strings[t->n_strings - 1] + b->block_used;
    memcpy(dst, s, n);
    dst[n] = '\0';
    b->block_used += n + 1;
    return dst;
}

static int json_column(json_builder *b, const char *key) {
    data_table *t = b->t;
    int c = data_table_col(t, key);
    if (c >= 0) return c;
    char **p = rt_grow_try(t->col_names, &b->cap_cols, (size_t)t->n_cols + 1, sizeof *p);
    if (!p) return -1;
    t->col_names = p;
    const char *name = json_keep(b, key, strlen(key));
    if (!name) return -1;
    t->col_names[t->n_cols] = (char *)name;
    return t->n_cols++;
}

/* The shortest %g text that reads back as v. */
static void json_number_text(double v, char *buf, size_t cap) {
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, cap, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* The offset of the first \u0000 escape in the raw text, or len: cJSON would end the string
 * there and drop the rest of it. */
static size_t json_nul_escape_at(const char *s, size_t len) {
    for (size_t i = 1; i + 5 <= len; i++) {
        if (s[i] != 'u' || memcmp(s + i + 1, "0000", 4) != 0 || s[i - 1] != '\\') continue;
        size_t slashes = 0;
        for (size_t k = i; k > 0 && s[k - 1] == '\\'; k--) slashes++;
        if (slashes % 2 == 1) return i - 1;
    }
    return len;
}

static rt_status json_record(void *ctx, const cJSON *obj, const char *where, size_t line) {
    json_builder *b = ctx;
    data_table *t = b->t;
    const size_t row = t->n_rows;
    size_t *lines = rt_grow_try(b->lines, &b->cap_rows, row + 1, sizeof *lines);
    if (!lines) return rt_errorf(RT_ERR_NOMEM, "%s: out of memory", where);
    b->lines = lines;
    b->lines[row] = line;
    for (const cJSON *it = obj->child; it; it = it->next) {
        int col = json_column(b, it->string);
        if (col < 0) return rt_errorf(RT_ERR_NOMEM, "%s: out of memory", where);
        json_entry e = {.row = row, .col = col, .kind = DATA_CELL_TEXT};
        char num[40];
        const char *text = NULL;
        char *printed = NULL;
        if (cJSON_IsString(it)) {
            text = it->valuestring;
        } else if (cJSON_IsNumber(it)) {
            json_number_text(it->valuedouble, num, sizeof num);
            text = num;
            e.kind = DATA_CELL_NUMBER;
        } else if (cJSON_IsBool(it)) {
            text = cJSON_IsTrue(it) ? "true" : "false";
            e.kind = DATA_CELL_BOOL;
        } else if (cJSON_IsArray(it) || cJSON_IsObject(it)) {
            printed = cJSON_PrintUnformatted(it);
            if (!printed) return rt_errorf(RT_ERR_NOMEM, "%s: out of memory", where);
            text = printed;
            e.kind = cJSON_IsArray(it) ? DATA_CELL_LIST : DATA_CELL_OBJECT;
        }
        if (text) {
            e.text = json_keep(b, text, strlen(text));
            cJSON_free(printed);
            if (!e.text) return rt_errorf(RT_ERR_NOMEM, "%s: out of memory", where);
        }
        json_entry *p = rt_grow_try(b->entries, &b->cap_entries, b->n_entries + 1, sizeof *p);
        if (!p) return rt_errorf(RT_ERR_NOMEM, "%s: out of memory", where);
        b->entries = p;
        b->entries[b->n_entries++] = e;
    }
    t->n_rows++;
    return RT_OK;
}

/* The entries into the row-major cells, once the columns are known. */
static rt_status json_lay_out(json_builder *b) {
    data_table *t = b->t;
    const size_t n = t->n_rows * (size_t)t->n_cols;
    t->cells = calloc(n ? n : 1, sizeof *t->cells);
    t->kinds = calloc(n ? n : 1, 1);
    if (!t->cells || !t->kinds) return rt_errorf(RT_ERR_NOMEM, "%s: out of memory for %zu cells", t->path, n);
    for (size_t i = 0; i < b->n_entries; i++) {
        const json_entry *e = &b->entries[i];
        size_t at = e->row * (size_t)t->n_cols + (size_t)e->col;
        t->cells[at] = e->text;
        t->kinds[at] = e->kind;
    }
    t->row_line = b->lines;
    b->lines = NULL;
    return RT_OK;
}

/* A JSON array of objects: the file is parsed whole; a record's line is not known (0). */
static rt_status json_array(json_builder *b, const char *name, const char *buf, size_t len) {
    rt_status st = RT_OK;
    cJSON *root = NULL;
    const size_t bom = rt_utf8_bom_len(buf, len);
    RT_TRY(data_json_parse_text(name, 0, buf + bom, len - bom, &root));
    if (!cJSON_IsArray(root))
        RT_FAIL(RT_ERR_FORMAT,
                "%s: the file holds %s (expected an array of objects, one per record; one object per "
                "line is --data-format jsonl)",
                name, rt_json_type_name(root));
    size_t k = 0;
    for (const cJSON *it = root->child; it; it = it->next, k++) {
        char where[340];
        snprintf(where, sizeof where, "%.300s: record %zu", name, k + 1);
        if (!cJSON_IsObject(it)) RT_FAIL(RT_ERR_FORMAT, "%s is %s (expected an object)", where, rt_json_type_name(it));
        RT_TRY(json_record(b, it, where, 0));
    }
    if (k == 0) RT_FAIL(RT_ERR_FORMAT, "%s: the array is empty (no records)", name);
fail:
    cJSON_Delete(root);
    return st;
}

static rt_status table_json(data_table *t, const char *name, const char *buf, size_t len, size_t first_line) {
    rt_status st = RT_OK;
    json_builder b = {.t = t};
    const size_t nul = json_nul_escape_at(buf, len);
    if (nul < len) {
        size_t line = first_line;
        for (size_t i = 0; i < nul; i++) line += buf[i] == '\n';
        RT_FAIL(RT_ERR_FORMAT, "%s:%zu: a string holds \\u0000 (NUL), which text cannot carry", name, line);
    }
    if (t->format == DATA_FORMAT_JSONL)
        RT_TRY(data_jsonl_each(name, buf, len, first_line, json_record, &b));
    else
        RT_TRY(json_array(&b, name, buf, len));
    RT_TRY(json_lay_out(&b));
fail:
    free(b.entries);
    free(b.lines);
    return st;
}

/* ---- entry points ---- */

/* Takes ownership of buf (len bytes and a spare one) on every path. */
static rt_status table_from_buffer(const char *name, data_format fmt, char *buf, size_t len, size_t first_line,
                                   data_table *out) {
    rt_status st = RT_OK;
    memset(out, 0, sizeof *out);
    out->path = rt_xstrdup(name);
    out->format = fmt;
    RT_CHECK(fmt != DATA_FORMAT_AUTO, "a table's format is decided before reading");
    if (fmt == DATA_FORMAT_CSV || fmt == DATA_FORMAT_TSV) {
        st = data_csv_take(name, buf, len, fmt == DATA_FORMAT_CSV ? ',' : '\t', &out->csv);
        buf = NULL;
        RT_TRY(st);
        table_from_csv(out);
    } else {
        RT_TRY(table_json(out, name, buf, len, first_line));
    }
    if (out->n_rows == 0) RT_FAIL(RT_ERR_FORMAT, "%s: no rows after the %s", name, out->kinds ? "records" : "header");
fail:
    free(buf);
    if (st != RT_OK) data_table_free(out);
    return st;
}

rt_status data_table_parse(const char *name, data_format fmt, const char *bytes, size_t len, data_table *out) {
    char *buf = rt_xmalloc(len + 1);
    if (len) memcpy(buf, bytes, len);
    buf[len] = '\0';
    return table_from_buffer(name, fmt, buf, len, 1, out);
}

rt_status data_table_parse_jsonl_piece(const char *name, char *buf, size_t len, size_t first_line, data_table *out) {
    return table_from_buffer(name, DATA_FORMAT_JSONL, buf, len, first_line, out);
}

rt_status data_table_read(const char *path, data_format fmt, data_table *out) {
    char *buf = NULL;
    size_t len = 0;
    memset(out, 0, sizeof *out);
    rt_status st = data_format_of(path, fmt, &fmt);
    if (st == RT_OK) st = rt_read_file(path, 0, &buf, &len);
    if (st != RT_OK) return st;
    return table_from_buffer(path, fmt, buf, len, 1, out);
}
