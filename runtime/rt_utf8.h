/* UTF-8 as the text metrics need it: strict validation (what Python's bytes.decode('utf-8')
 * accepts: no overlong forms, no surrogates, nothing above U+10FFFF), decoding one code
 * point, and Python's str.isspace(), which decides where str.split() and str.rstrip() cut.
 * sacrebleu and rouge_score work on Python strings, so these rules fix where tokens end.
 * The text readers (GLUE TSV, SuperGLUE JSONL, tz-tokenize's stdin) check each line with the
 * same rules and give one message, so a bad byte is reported alike whichever reader met it. */
#ifndef RT_UTF8_H
#define RT_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/rt_status.h"

/* True when s[0..len) is valid UTF-8; otherwise *bad_offset (may be NULL) is the offset of
 * the first byte of the first invalid sequence. */
bool rt_utf8_valid(const char *s, size_t len, size_t *bad_offset);
/* RT_OK when the line s[0..len) (no newline) is valid UTF-8; otherwise RT_ERR_FORMAT with
 * "name:lineno: invalid UTF-8 at byte N of the line", N 1-based, t5-finetune's wording. */
rt_status rt_utf8_check_line(const char *name, size_t lineno, const char *s, size_t len);
/* The code point at s (valid UTF-8, at least one byte); *len gets its byte length, 1..4. */
uint32_t rt_utf8_decode(const char *s, size_t *len);
/* Python's str.isspace() for one code point (Unicode 15: the 29 whitespace code points). */
bool rt_unicode_is_space(uint32_t cp);
/* Byte length of s without its trailing whitespace (Python's str.rstrip()); s valid UTF-8. */
size_t rt_utf8_rstrip_len(const char *s, size_t len);

#endif
