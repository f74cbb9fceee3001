/* Shared tokenizer-test helpers (see toktest.h). */
#include "tests/toktest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "tests/testutil.h"
#include "tokenizers/tok_internal.h"
#include "runtime/base/rt_fs.h"

int tzt_n_reported = 0;

char *tzt_read_all(const char *path, size_t *len) {
    char *data = NULL;
    size_t n = 0;
    rt_status st = rt_read_file(path, 0, &data, &n);
    TZ_EXPECT(st == RT_OK, "%s", rt_error_message());
    if (len) *len = n;
    return data;
}

char *tzt_read_gz(const char *path) {
    gzFile f = gzopen(path, "rb");
    TZ_EXPECT(f != NULL, "cannot open %s", path);
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    int got;
    while ((got = gzread(f, buf + n, (unsigned)(cap - n - 1))) > 0) {
        n += (size_t)got;
        if (cap - n < 2) buf = realloc(buf, cap *= 2);
    }
    gzclose(f);
    buf[n] = '\0';
    return buf;
}

void tzt_parse_ids(const char *s, tok_ids *out) {
    tok_ids_clear(out);
    char *end;
    for (;;) {
        while (*s == ' ') s++;
        if (*s < '0' || *s > '9') break;
        tok_ids_push(out, (int32_t)strtol(s, &end, 10));
        s = end;
    }
}

int tzt_ids_equal(const tok_ids *a, const tok_ids *b) {
    return a->n == b->n && (a->n == 0 || memcmp(a->ids, b->ids, a->n * sizeof *a->ids) == 0);
}

void tzt_print_ids(const char *label, const tok_ids *v) {
    fprintf(stderr, "  %s:", label);
    for (size_t i = 0; i < v->n && i < 80; i++) fprintf(stderr, " %d", v->ids[i]);
    fputc('\n', stderr);
}

int tzt_check_ids(const char *what, const char *text, size_t len, const tok_ids *got, const tok_ids *want) {
    int ok = tzt_ids_equal(got, want);
    if (!ok && tzt_n_reported++ < 8) {
        fprintf(stderr, "%s: mismatch on \"%.*s\"\n", what, (int)(len > 200 ? 200 : len), text);
        tzt_print_ids("want", want);
        tzt_print_ids("got ", got);
    }
    return ok;
}

/* Encodes text and compares with the expected ids; returns 1 on a match. */
int tzt_check_encode(const tok_tokenizer *t, const char *what, const char *text, size_t len, const tok_ids *want) {
    tok_ids got = {0};
    rt_status st = tok_encode(t, text, len, &got);
    if (st != RT_OK) fprintf(stderr, "%s: encode failed: %s\n", what, rt_error_message());
    int ok = st == RT_OK && tzt_check_ids(what, text, len, &got, want);
    tok_ids_free(&got);
    return ok;
}

int tzt_check_decode(const tok_tokenizer *t, const char *what, const tok_ids *ids, const char *want, size_t wl) {
    char *got = NULL;
    rt_status st = tok_decode(t, ids->ids, ids->n, &got);
    int ok = st == RT_OK && strlen(got) == wl && memcmp(got, want, wl) == 0;
    if (!ok && tzt_n_reported++ < 8) {
        fprintf(stderr, "%s: decode mismatch (%s)\n  want \"%.*s\"\n  got  \"%s\"\n", what, rt_status_name(st), (int)wl,
                want, got ? got : "");
        tzt_print_ids("ids", ids);
    }
    free(got);
    return ok;
}

int tzt_check_roundtrip(const tok_tokenizer *t, const char *text, size_t len) {
    tok_ids ids = {0};
    char *back = NULL;
    /* tok_decode returns a C string, so text with a NUL byte compares up to that byte */
    size_t visible = strnlen(text, len);
    int ok = tok_encode(t, text, len, &ids) == RT_OK && tok_decode(t, ids.ids, ids.n, &back) == RT_OK &&
             strlen(back) == visible && memcmp(back, text, visible) == 0;
    if (!ok && tzt_n_reported++ < 8) fprintf(stderr, "round trip failed on \"%.*s\"\n", (int)len, text);
    free(back);
    tok_ids_free(&ids);
    return ok;
}

size_t tzt_unhex(const char *h, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i + 1 < n; i += 2) {
        char b[3] = {h[i], h[i + 1], 0};
        out[o++] = (char)strtol(b, NULL, 16);
    }
    return o;
}

tok_tokenizer *tzt_load_ok(const char *path) {
    tok_tokenizer *t = NULL;
    rt_status st = tok_load(path, &t);
    TZ_EXPECT(st == RT_OK, "loading %s: %s", path, rt_error_message());
    return t;
}

char *tzt_next_line(char **cursor) {
    char *line = *cursor;
    if (!line || !*line) return NULL;
    char *nl = strchr(line, '\n');
    if (nl) {
        *nl = '\0';
        *cursor = nl + 1;
    } else {
        *cursor = line + strlen(line);
    }
    return line;
}

uint32_t tzt_crc_ids(const tok_ids *v) {
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t i = 0; i < v->n; i++) {
        uint32_t u = (uint32_t)v->ids[i];
        unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                              (unsigned char)(u >> 24)};
        crc = crc32(crc, b, 4);
    }
    return (uint32_t)crc;
}

size_t tzt_for_each_vector(const char *inp_rel, const char *out_rel, tzt_vector_fn fn, void *ctx) {
    char *inp = tzt_read_all(tz_data_path(inp_rel), NULL);
    char *outs = tzt_read_all(tz_data_path(out_rel), NULL);
    size_t n = 0;
    if (!inp || !outs) goto done;
    const char *marker = "\n__ggml_vocab_test__\n";
    char *p = inp, *o = outs;
    tok_ids want = {0};
    for (char *m; (m = strstr(p, marker)) != NULL; p = m + strlen(marker)) {
        char *line = tzt_next_line(&o);
        TZ_EXPECT(line != NULL, "%s: fewer id lines than inputs in %s", out_rel, inp_rel);
        if (!line) break;
        tzt_parse_ids(line, &want);
        fn(p, (size_t)(m - p), &want, ctx);
        n++;
    }
    tok_ids_free(&want);
done:
    free(inp);
    free(outs);
    return n;
}

size_t tzt_check_decode_file(const tok_tokenizer *t, const char *rel, const char *what, size_t *rows) {
    char *data = tzt_read_all(tz_source_path(rel), NULL);
    size_t n = 0, good = 0;
    tok_ids ids = {0};
    char *cur = data;
    for (char *line; data && (line = tzt_next_line(&cur)) != NULL; n++) {
        char *tab = strchr(line, '\t');
        TZ_EXPECT(tab != NULL, "%s: expected 2 columns", rel);
        if (!tab) break;
        *tab = '\0';
        tzt_parse_ids(line, &ids);
        char *want = malloc(strlen(tab + 1) / 2 + 1);
        size_t wl = tzt_unhex(tab + 1, strlen(tab + 1), want);
        good += (size_t)tzt_check_decode(t, what, &ids, want, wl);
        free(want);
    }
    tok_ids_free(&ids);
    free(data);
    *rows = n;
    return good;
}

size_t tzt_check_extra_file(const tok_tokenizer *t, const char *rel, const char *what, tzt_encode_fn encode,
                            size_t *rows, size_t *decodes_ok) {
    char *data = tzt_read_all(tz_source_path(rel), NULL);
    size_t n = 0, good = 0, dec = 0;
    tok_ids want = {0}, got = {0};
    char *cur = data;
    for (char *line; data && (line = tzt_next_line(&cur)) != NULL; n++) {
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        TZ_EXPECT(t2 != NULL, "%s: expected 3 columns", rel);
        if (!t2) break;
        *t2 = '\0';
        char *text = malloc((size_t)(t1 - line) / 2 + 1), *want_dec = malloc(strlen(t2 + 1) / 2 + 1);
        size_t len = tzt_unhex(line, (size_t)(t1 - line), text);
        text[len] = '\0';
        size_t wl = tzt_unhex(t2 + 1, strlen(t2 + 1), want_dec);
        tzt_parse_ids(t1 + 1, &want);
        tok_ids_clear(&got);
        TZ_EXPECT_OK(encode(t, text, len, &got));
        good += (size_t)tzt_check_ids(what, text, len, &got, &want);
        /* decoding our own ids gives the reference decode of its ids */
        dec += (size_t)tzt_check_decode(t, what, &got, want_dec, wl);
        free(text);
        free(want_dec);
    }
    tok_ids_free(&want);
    tok_ids_free(&got);
    free(data);
    *rows = n;
    *decodes_ok = dec;
    return good;
}
