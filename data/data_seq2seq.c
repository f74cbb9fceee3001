/* Line-aligned seq2seq files and their tokenization (see data_seq2seq.h). */
#include "data/data_seq2seq.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_log.h"
#include "runtime/base/rt_utf8.h"

rt_status data_lines_from_column(const data_table *t, const char *column, const char *option, data_lines *out) {
    memset(out, 0, sizeof *out);
    int col = data_table_col(t, column);
    if (col < 0) return data_table_missing_column(t, column, option);
    const char *text;
    for (size_t r = 0; r < t->n_rows; r++) {
        rt_status st = data_table_text(t, r, col, &text);
        if (st != RT_OK) return st;
    }
    out->path = rt_xstrdup(t->path);
    out->n = t->n_rows;
    out->first_line = 1;
    out->line = rt_xcalloc(t->n_rows ? t->n_rows : 1, sizeof *out->line);
    for (size_t r = 0; r < t->n_rows; r++) out->line[r] = (char *)data_table_cell(t, r, col);
    return RT_OK;
}

void data_lines_free(data_lines *l) {
    if (!l) return;
    free(l->path);
    free(l->buf);
    free(l->line);
    memset(l, 0, sizeof *l);
}

/* Lines of bytes numbered from first_line; the BOM is skipped at the file's start only. */
static rt_status parse_lines(const char *name, const char *bytes, size_t len, size_t first_line, bool at_start,
                             data_lines *out) {
    rt_status st = RT_OK;
    memset(out, 0, sizeof *out);
    out->first_line = first_line;
    out->path = rt_xstrdup(name);
    out->buf = malloc(len + 1);
    if (!out->buf) RT_FAIL(RT_ERR_NOMEM, "%s: out of memory for %zu bytes", name, len);
    memcpy(out->buf, bytes, len);
    out->buf[len] = '\0';
    char *p = out->buf, *end = out->buf + len;
    if (at_start) p += rt_utf8_bom_len(p, len);
    size_t cap = 0;
    for (size_t lineno = first_line; p < end; lineno++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *stop = nl ? nl : end;
        size_t n = (size_t)(stop - p);
        if (n > 0 && p[n - 1] == '\r') n--;
        if (memchr(p, '\0', n))
            RT_FAIL(RT_ERR_FORMAT, "%s:%zu: a NUL byte in the text (is this a binary file?)", name, lineno);
        RT_TRY(rt_utf8_check_line(name, lineno, p, n));
        p[n] = '\0';
        RT_GROW(out->line, cap, out->n + 1);
        out->line[out->n++] = p;
        p = nl ? nl + 1 : end;
    }
    return RT_OK;
fail:
    data_lines_free(out);
    return st;
}

rt_status data_lines_parse(const char *name, const char *bytes, size_t len, data_lines *out) {
    rt_status st = parse_lines(name, bytes, len, 1, true, out);
    if (st != RT_OK) return st;
    if (out->n == 0) {
        data_lines_free(out);
        return rt_errorf(RT_ERR_FORMAT, "%s: the file is empty (one example per line expected)", name);
    }
    return RT_OK;
}

rt_status data_lines_reader_open(const char *path, data_lines_reader *r) {
    memset(r, 0, sizeof *r);
    r->f = fopen(path, "rb");
    if (!r->f) return rt_errorf(RT_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(r->f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(r->f);
        r->f = NULL;
        return rt_errorf(RT_ERR_IO, "%s: a directory, not a text file", path);
    }
    r->path = rt_xstrdup(path);
    r->next_line = 1;
    return RT_OK;
}

rt_status data_lines_reader_next(data_lines_reader *r, size_t chunk, data_lines *out, bool *end) {
    memset(out, 0, sizeof *out);
    *end = false;
    if (chunk == 0) chunk = 1;
    /* read until the piece holds chunk bytes and a line end, or the file ends */
    char *last_nl = NULL;
    while (!r->eof) {
        last_nl = NULL;
        for (size_t i = r->carry_len; i > 0 && !last_nl; i--)
            if (r->carry[i - 1] == '\n') last_nl = r->carry + i - 1;
        if (last_nl && r->carry_len >= chunk) break;
        /* room for the next read: the piece's size, at most 16 MB at a time (a whole-file piece
         * grows by half again each time) */
        const size_t room = chunk < ((size_t)1 << 24) ? chunk : (size_t)1 << 24;
        if (r->carry_cap - r->carry_len < room) {
            r->carry_cap = r->carry_len + room + r->carry_cap / 2;
            r->carry = rt_xrealloc(r->carry, r->carry_cap);
        }
        const size_t got = fread(r->carry + r->carry_len, 1, r->carry_cap - r->carry_len, r->f);
        r->carry_len += got;
        if (got == 0) {
            if (ferror(r->f)) return rt_errorf(RT_ERR_IO, "%s: read error", r->path);
            r->eof = true;
        }
    }
    if (r->eof) last_nl = NULL;
    const size_t cut = last_nl ? (size_t)(last_nl - r->carry) + 1 : r->carry_len;
    if (cut == 0) {
        *end = true;
        if (r->next_line == 1)
            return rt_errorf(RT_ERR_FORMAT, "%s: the file is empty (one example per line expected)", r->path);
        return RT_OK;
    }
    rt_status st = parse_lines(r->path, r->carry, cut, r->next_line, r->next_line == 1, out);
    if (st != RT_OK) return st;
    r->next_line += out->n;
    memmove(r->carry, r->carry + cut, r->carry_len - cut);
    r->carry_len -= cut;
    if (out->n == 0) { /* only a BOM: the file has no lines */
        data_lines_free(out);
        *end = true;
        return rt_errorf(RT_ERR_FORMAT, "%s: the file is empty (one example per line expected)", r->path);
    }
    return RT_OK;
}

void data_lines_reader_close(data_lines_reader *r) {
    if (r->f) fclose(r->f);
    free(r->path);
    free(r->carry);
    memset(r, 0, sizeof *r);
}

rt_status data_lines_read(const char *path, data_lines *out) {
    data_lines_reader r;
    memset(out, 0, sizeof *out);
    rt_status st = data_lines_reader_open(path, &r);
    if (st != RT_OK) return st;
    bool end = false;
    st = data_lines_reader_next(&r, SIZE_MAX, out, &end); /* one piece, however large: the whole file */
    data_lines_reader_close(&r);
    return st;
}

rt_status data_lines_read_pair(const char *src_path, const char *tgt_path, data_lines *src, data_lines *tgt) {
    rt_status st = RT_OK;
    memset(tgt, 0, sizeof *tgt);
    RT_TRY(data_lines_read(src_path, src));
    RT_TRY(data_lines_read(tgt_path, tgt));
    if (src->n != tgt->n)
        RT_FAIL(RT_ERR_FORMAT, "%s has %zu lines but %s has %zu: source and target files must be line-aligned",
                src_path, src->n, tgt_path, tgt->n);
    return RT_OK;
fail:
    data_lines_free(src);
    data_lines_free(tgt);
    return st;
}

rt_status data_seq2seq_encode(const tok_tokenizer *tok, const char *prefix, bool lowercase, const char *text,
                              int max_len, tok_ids *out, bool *truncated) {
    rt_status st = RT_OK;
    char *joined = NULL, *lowered = NULL;
    size_t plen = prefix ? strlen(prefix) : 0, tlen = strlen(text);
    if (max_len < 1) return rt_errorf(RT_ERR_CONFIG, "max length %d: must be at least 1", max_len);
    joined = rt_xmalloc(plen + tlen + 1);
    memcpy(joined, prefix ? prefix : "", plen);
    memcpy(joined + plen, text, tlen + 1);
    const char *s = joined;
    if (lowercase) {
        RT_TRY(tok_lowercase(joined, plen + tlen, &lowered));
        s = lowered;
    }
    tok_ids_clear(out);
    RT_TRY(tok_encode(tok, s, strlen(s), out));
    int32_t eos = tok_eos_id(tok);
    size_t room = (size_t)max_len - (eos >= 0 ? 1 : 0);
    *truncated = out->n > room;
    if (out->n > room) out->n = room;
    if (eos >= 0) tok_ids_push(out, eos);
fail:
    free(joined);
    free(lowered);
    return st;
}

/* One side of lines [begin, end) as a data_tokenized. */
static rt_status data_seq2seq_side(const data_lines *lines, size_t begin, size_t end, const tok_tokenizer *tok,
                                   const char *prefix, bool lowercase, int max_len, data_tokenized *out) {
    rt_status st = RT_OK;
    size_t n = end - begin;
    tok_ids *rows = rt_xcalloc(n ? n : 1, sizeof *rows);
    rt_status *row_st = rt_xcalloc(n ? n : 1, sizeof *row_st);
    char **row_err = rt_xcalloc(n ? n : 1, sizeof *row_err);
    bool *cut = rt_xcalloc(n ? n : 1, sizeof *cut);
    int32_t **ptrs = rt_xcalloc(n ? n : 1, sizeof *ptrs);
    int32_t *lengths = rt_xcalloc(n ? n : 1, sizeof *lengths);
#pragma omp parallel for schedule(dynamic, 64)
    for (size_t i = 0; i < n; i++) {
        row_st[i] = data_seq2seq_encode(tok, prefix, lowercase, lines->line[begin + i], max_len, &rows[i], &cut[i]);
        if (row_st[i] != RT_OK) row_err[i] = rt_xstrdup(rt_error_message()); /* messages are per thread */
    }
    size_t n_cut = 0;
    for (size_t i = 0; i < n; i++) {
        if (row_st[i] != RT_OK) RT_FAIL(row_st[i], "%s:%zu: %s", lines->path, begin + i + 1, row_err[i]);
        ptrs[i] = rows[i].ids;
        lengths[i] = (int32_t)rows[i].n;
        n_cut += cut[i];
    }
    RT_TRY(data_tokenized_from_rows((const int32_t *const *)ptrs, lengths, NULL, NULL, n, out));
    out->max_len = max_len;
    out->n_truncated = n_cut;
fail:
    for (size_t i = 0; i < n; i++) {
        tok_ids_free(&rows[i]);
        free(row_err[i]);
    }
    free(rows);
    free(row_st);
    free(row_err);
    free(cut);
    free(ptrs);
    free(lengths);
    return st;
}

rt_status data_seq2seq_tokenize(const data_lines *src, const data_lines *tgt, size_t begin, size_t end,
                                const tok_tokenizer *tok, const data_seq2seq_opts *o, data_tokenized *src_out,
                                data_tokenized *tgt_out) {
    rt_status st = RT_OK;
    memset(src_out, 0, sizeof *src_out);
    memset(tgt_out, 0, sizeof *tgt_out);
    if (src->n != tgt->n || begin > end || end > src->n)
        return rt_errorf(RT_ERR_CONFIG, "seq2seq: lines [%zu, %zu) of %zu sources and %zu targets", begin, end, src->n,
                         tgt->n);
    RT_TRY(data_seq2seq_side(src, begin, end, tok, o->source_prefix, o->lowercase, o->max_source_len, src_out));
    RT_TRY(data_seq2seq_side(tgt, begin, end, tok, NULL, o->lowercase, o->max_target_len, tgt_out));
    return RT_OK;
fail:
    data_tokenized_free(src_out);
    data_tokenized_free(tgt_out);
    return st;
}
