/* Helpers the tokenizer tests share: reading (gzipped) golden files, id lists, and encode /
 * round-trip checks that print the first few mismatches in full. */
#ifndef TZ_TOKTEST_H
#define TZ_TOKTEST_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizers/tok.h"

extern int tzt_n_reported; /* mismatches printed so far (the first 8 are) */

char *tzt_read_all(const char *path, size_t *len);
char *tzt_read_gz(const char *path);
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
/* The line at *cursor (NUL-terminated in place; a final line may lack its '\n'), advancing
 * *cursor past it; NULL at the end of the text. */
char *tzt_next_line(char **cursor);
/* zlib.crc32 of the ids as little-endian int32, as the golden generators write it. */
uint32_t tzt_crc_ids(const tok_ids *v);
/* Compares ids already computed with the expected ones; prints the first few mismatches with
 * the text. Returns 1 on a match. */
int tzt_check_ids(const char *what, const char *text, size_t len, const tok_ids *got, const tok_ids *want);
/* Decodes ids and compares with want[0..wl); returns 1 on a match. */
int tzt_check_decode(const tok_tokenizer *t, const char *what, const tok_ids *ids, const char *want, size_t wl);
/* llama.cpp-style test vectors: inputs split by "\n__ggml_vocab_test__\n" in inp_rel, one line of
 * ids per input in out_rel (both under tests/data/). Calls fn for each pair and
 * returns the number of inputs (0 when a file is missing, which also fails the test). */
typedef void (*tzt_vector_fn)(const char *text, size_t len, const tok_ids *want, void *ctx);
size_t tzt_for_each_vector(const char *inp_rel, const char *out_rel, tzt_vector_fn fn, void *ctx);

/* A golden file of random id runs: "ids<TAB>hex of the reference decode" per line. Checks every
 * decode; returns how many matched and sets *rows. */
size_t tzt_check_decode_file(const tok_tokenizer *t, const char *rel, const char *what, size_t *rows);
/* A golden file of "hex text<TAB>reference ids<TAB>hex of the reference decode of those ids"
 * per line: encodes each text with encode (which appends to a cleared out), compares the ids,
 * and compares the decode of our ids with the reference decode. Returns the rows whose ids
 * matched; sets *rows and *decodes_ok. */
typedef rt_status (*tzt_encode_fn)(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out);
size_t tzt_check_extra_file(const tok_tokenizer *t, const char *rel, const char *what, tzt_encode_fn encode,
                            size_t *rows, size_t *decodes_ok);

#endif
