/* Helpers the tokenizer tests share: reading (gzipped) golden files, id lists, and encode /
 * round-trip checks that print the first few mismatches in full. */
#ifndef TZ_TOKTEST_H
#define TZ_TOKTEST_H

#include <stddef.h>

#include "tokenizers/tok.h"

extern int tzt_n_reported; /* mismatches printed so far (the first 8 are) */

char *tzt_read_all(const char *path, size_t *len);
char *tzt_read_gz(const char *path);
void tzt_write_file(const char *path, const char *data, size_t n);
/* Space-separated decimal ids into out (cleared first). */
void tzt_parse_ids(const char *s, tok_ids *out);
int tzt_ids_equal(const tok_ids *a, const tok_ids *b);
void tzt_print_ids(const char *label, const tok_ids *v);
/* Encodes text and compares with the expected ids; returns 1 on a match. */
int tzt_check_encode(const tok_tokenizer *t, const char *what, const char *text, size_t len, const tok_ids *want);
/* encode then decode gives the text back; returns 1 on a match. */
int tzt_check_roundtrip(const tok_tokenizer *t, const char *text, size_t len);
/* Hex digits to bytes; returns the byte count. */
size_t tzt_unhex(const char *h, size_t n, char *out);
tok_tokenizer *tzt_load_ok(const char *path);

#endif
