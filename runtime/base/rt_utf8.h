/* UTF-8 as the text metrics and the tokenizers need it: strict validation (what Python's
 * bytes.decode('utf-8') accepts: no overlong forms, no surrogates, nothing above U+10FFFF),
 * decoding and encoding one code point, the lossy repair HF's decode applies, and Python's
 * str.isspace(), which decides where str.split() and str.rstrip() cut. sacrebleu, rouge_score
 * and the slow HF tokenizers work on Python strings, so these rules fix where tokens end.
 * The text readers (GLUE TSV, SuperGLUE JSONL, tz-tokenize's stdin) check each line with the
 * same rules and give one message, so a bad byte is reported alike whichever reader met it. */
#ifndef RT_UTF8_H
#define RT_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/base/rt_status.h"

/* True when s[0..len) is valid UTF-8; otherwise *bad_offset (may be NULL) is the offset of
 * the first byte of the first invalid sequence. */
bool rt_utf8_valid(const char *s, size_t len, size_t *bad_offset);
/* RT_OK when the line s[0..len) (no newline) is valid UTF-8; otherwise RT_ERR_FORMAT with
 * "name:lineno: invalid UTF-8 at byte N of the line", N 1-based, t5-finetune's wording. */
rt_status rt_utf8_check_line(const char *name, size_t lineno, const char *s, size_t len);
/* 3 when s (len bytes) starts with a UTF-8 byte-order mark, which text readers skip, else 0. */
static inline size_t rt_utf8_bom_len(const char *s, size_t len) {
    return len >= 3 && (unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB && (unsigned char)s[2] == 0xBF ? 3
                                                                                                                 : 0;
}
/* The code point at s (valid UTF-8, at least one byte); *len gets its byte length, 1..4. */
uint32_t rt_utf8_decode(const char *s, size_t *len);
/* The code point at s[0..n), n >= 1, for text that may be invalid: returns its byte length,
 * 1..4, and sets *cp, or returns 0 when no valid sequence starts there (by rt_utf8_valid's
 * rules; a sequence that n cuts short included). */
size_t rt_utf8_decode_checked(const char *s, size_t n, uint32_t *cp);
/* Writes cp (at most U+10FFFF) as UTF-8 into out, which has room for 4 bytes; returns the
 * byte length. */
size_t rt_utf8_encode(uint32_t cp, char *out);
/* s[0..n) as a malloc'd NUL-terminated string with each maximal subpart of an invalid sequence
 * replaced by U+FFFD, exactly as Rust's String::from_utf8_lossy (what HF's decode does). */
char *rt_utf8_lossy(const char *s, size_t n);
/* Python's str.isspace() for one code point (Unicode 15: the 29 whitespace code points). */
bool rt_unicode_is_space(uint32_t cp);
/* Byte length of s without its trailing whitespace (Python's str.rstrip()); an invalid byte
 * is not whitespace. */
size_t rt_utf8_rstrip_len(const char *s, size_t len);

#endif
