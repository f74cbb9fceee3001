/* Shared tokenizer-test helpers (see toktest.h). */
#include "tests/toktest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "tests/testutil.h"
#include "tokenizers/tok_internal.h"

int tzt_n_reported = 0;

char *tzt_read_all(const char *path, size_t *len) {
    char *data = NULL;
    size_t n = 0;
    rt_status st = tok_read_file(path, &data, &n);
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

/* Encodes text and compares with the expected ids; returns 1 on a match. */
int tzt_check_encode(const tok_tokenizer *t, const char *what, const char *text, size_t len,
                        const tok_ids *want) {
    tok_ids got = {0};
    rt_status st = tok_encode(t, text, len, &got);
    int ok = st == RT_OK && tzt_ids_equal(&got, want);
    if (!ok && tzt_n_reported++ < 8) {
        fprintf(stderr, "%s: mismatch on \"%.*s\"\n", what, (int)(len > 200 ? 200 : len), text);
        tzt_print_ids("want", want);
        tzt_print_ids("got ", &got);
    }
    tok_ids_free(&got);
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

void tzt_write_file(const char *path, const char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    TZ_EXPECT(f != NULL, "cannot write %s", path);
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}
