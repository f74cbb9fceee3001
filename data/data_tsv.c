/* GLUE TSV reader: one read, one buffer, fields split in place (see data_tsv.h). Two passes
 * over the bytes: the first counts lines and tabs so the index arrays are allocated once,
 * the second checks each line's UTF-8, cuts the buffer into NUL-terminated fields and checks
 * the column counts. */
#include "data/data_tsv.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_utf8.h"

/* 1-based line of byte offset off (for the rare error that is found before line splitting). */
static size_t tsv_line_of(const char *buf, size_t off) {
    size_t line = 1;
    for (size_t i = 0; i < off; i++) line += buf[i] == '\n';
    return line;
}

/* Takes ownership of buf (len bytes plus one spare byte at buf[len]) on every path. */
static rt_status tsv_split(const char *name, char *buf, size_t len, bool has_header, int min_cols, data_tsv *out) {
    rt_status st = RT_OK;
    memset(out, 0, sizeof *out);
    out->path = rt_xstrdup(name);
    out->buf = buf;
    buf[len] = '\0';

    const size_t begin = rt_utf8_bom_len(buf, len);

    /* A NUL would silently cut a field short, so it is an error rather than text. */
    const char *nul = memchr(buf + begin, '\0', len - begin);
    if (nul)
        RT_FAIL(RT_ERR_FORMAT, "%s:%zu: NUL byte in a text file (expected UTF-8 text)", name,
                tsv_line_of(buf, (size_t)(nul - buf)));

    size_t n_lines = 1, n_tabs = 0;
    for (size_t i = begin; i < len; i++) {
        n_lines += buf[i] == '\n';
        n_tabs += buf[i] == '\t';
    }
    size_t cap_fields = n_tabs + n_lines;
    out->fields = malloc(cap_fields * sizeof *out->fields);
    out->row_start = malloc((n_lines + 1) * sizeof *out->row_start);
    out->row_line = malloc(n_lines * sizeof *out->row_line);
    if (!out->fields || !out->row_start || !out->row_line)
        RT_FAIL(RT_ERR_NOMEM, "%s: out of memory indexing %zu lines", name, n_lines);

    size_t nf = 0, nr = 0, line = 0, blank_line = 0;
    bool header_done = !has_header;
    char *p = buf + begin, *end = buf + len;
    while (p < end) {
        line++;
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        char *next = nl ? nl + 1 : end;
        if (le > p && le[-1] == '\r') le--;
        *le = '\0';
        if (le == p) {
            /* Blank: fine only if nothing but blank lines follows; remember the first one. */
            if (!blank_line) blank_line = line;
            p = next;
            continue;
        }
        if (blank_line)
            RT_FAIL(RT_ERR_FORMAT, "%s:%zu: blank line (expected at least %d tab-separated columns)", name, blank_line,
                    min_cols);
        /* The whole line before the cut: tabs are ASCII, so this covers every field, and the
         * byte is counted from the line's start (after a BOM), as t5-finetune counts it. */
        RT_TRY(rt_utf8_check_line(name, line, p, (size_t)(le - p)));
        size_t first = nf;
        out->fields[nf++] = p;
        for (char *q = p; q < le; q++) {
            if (*q == '\t') {
                *q = '\0';
                out->fields[nf++] = q + 1;
            }
        }
        int ncols = (int)(nf - first);
        if (ncols < min_cols)
            RT_FAIL(RT_ERR_FORMAT, "%s:%zu: expected at least %d tab-separated columns, found %d", name, line, min_cols,
                    ncols);
        if (!header_done) {
            out->n_header = ncols;
            header_done = true;
        } else {
            out->row_start[nr] = first;
            out->row_line[nr] = line;
            nr++;
        }
        p = next;
    }
    if (!header_done) RT_FAIL(RT_ERR_FORMAT, "%s:1: empty file (expected a header line)", name);
    out->row_start[nr] = nf;
    out->n_rows = nr;
    if (has_header) out->header = out->fields; /* the header's fields come first */
    return RT_OK;

fail:
    data_tsv_free(out);
    return st;
}

rt_status data_tsv_parse(const char *name, const char *bytes, size_t len, bool has_header, int min_cols,
                         data_tsv *out) {
    char *buf = malloc(len + 1);
    if (!buf) {
        memset(out, 0, sizeof *out);
        return rt_errorf(RT_ERR_NOMEM, "%s: out of memory for %zu bytes", name, len);
    }
    if (len) memcpy(buf, bytes, len);
    return tsv_split(name, buf, len, has_header, min_cols, out);
}

rt_status data_tsv_read(const char *path, bool has_header, int min_cols, data_tsv *out) {
    rt_status st = RT_OK;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) RT_FAIL(RT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    /* Read in growing chunks rather than trusting the file size: works for pipes too. */
    for (;;) {
        char *nb = rt_grow_try(buf, &cap, len + ((size_t)1 << 20), 1); /* a MiB's room at least */
        if (!nb) RT_FAIL(RT_ERR_NOMEM, "%s: out of memory reading past %zu bytes", path, len);
        buf = nb;
        size_t got = fread(buf + len, 1, cap - len - 1, f); /* keep one byte for the NUL */
        len += got;
        if (got == 0) break;
    }
    if (ferror(f)) RT_FAIL(RT_ERR_IO, "%s: read error", path);
    fclose(f);
    f = NULL;
    st = tsv_split(path, buf, len, has_header, min_cols, out); /* owns buf from here */
    return st;

fail:
    if (f) fclose(f);
    free(buf);
    return st;
}

void data_tsv_free(data_tsv *t) {
    if (!t) return;
    free(t->path);
    free(t->buf);
    free(t->fields);
    free(t->row_start);
    free(t->row_line);
    memset(t, 0, sizeof *t);
}
