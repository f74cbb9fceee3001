/* sacrebleu's 13a tokenizer (tokenizer_13a.py + tokenizer_re.py), byte for byte.
 *
 * The Python version runs four regex substitutions over a str. Their character classes are
 * ASCII, except [^0-9] which also takes any non-ASCII code point. Working on UTF-8 bytes gives
 * the same output: a non-ASCII code point's bytes are all >= 0x80, so they never match an
 * ASCII class, and where [^0-9] consumes a whole code point the byte scanner consumes its
 * first byte and copies the rest unchanged, which nothing else could have matched anyway
 * (the other half of each pattern is ASCII). Only the final whitespace split needs decoding,
 * because Python's str.split() also splits at U+00A0, U+2003 and the like. */
#include "metrics/metric_bleu.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_utf8.h"

/* Replaces every non-overlapping `from` (left to right, one pass, as str.replace) in
 * s[0..*len) in place; to is never longer than from. */
static void metric_replace_in_place(char *s, size_t *len, const char *from, const char *to) {
    size_t nf = strlen(from), nt = strlen(to), w = 0;
    for (size_t r = 0; r < *len;) {
        if (*len - r >= nf && memcmp(s + r, from, nf) == 0) {
            memcpy(s + w, to, nt);
            w += nt;
            r += nf;
        } else {
            s[w++] = s[r++];
        }
    }
    *len = w;
}

/* ([\{-\~\[-\` -\&\(-\+\:-\@\/]): ASCII punctuation except ' , - . and the space itself. */
static bool metric_13a_punct(unsigned char c) {
    return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') || (c >= '(' && c <= '+') ||
           (c >= ':' && c <= '@') || c == '/';
}

static bool metric_is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool metric_is_dot_comma(unsigned char c) { return c == '.' || c == ','; }

typedef enum {
    METRIC_13A_DOT_AFTER_NONDIGIT,  /* ([^0-9])([\.,]) -> \1 \2 '  */
    METRIC_13A_DOT_BEFORE_NONDIGIT, /* ([\.,])([^0-9]) -> ' \1 \2' */
    METRIC_13A_DASH_AFTER_DIGIT     /* ([0-9])(-)      -> \1 \2 '  */
} metric_13a_rule;

/* One re.sub of a two-character pattern: at each position try the pair, on a match emit the
 * replacement and skip both characters, else copy one. Each match grows 2 bytes into 4. */
static size_t metric_13a_pair_rule(const char *in, size_t n, char *out, metric_13a_rule rule) {
    const unsigned char *s = (const unsigned char *)in;
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        bool match = false;
        if (i + 1 < n) {
            unsigned char a = s[i], b = s[i + 1];
            if (rule == METRIC_13A_DOT_AFTER_NONDIGIT)
                match = !metric_is_digit(a) && metric_is_dot_comma(b);
            else if (rule == METRIC_13A_DOT_BEFORE_NONDIGIT)
                match = metric_is_dot_comma(a) && !metric_is_digit(b);
            else
                match = metric_is_digit(a) && b == '-';
        }
        if (!match) {
            out[w++] = in[i++];
            continue;
        }
        if (rule == METRIC_13A_DOT_BEFORE_NONDIGIT) out[w++] = ' ';
        out[w++] = in[i];
        out[w++] = ' ';
        out[w++] = in[i + 1];
        if (rule != METRIC_13A_DOT_BEFORE_NONDIGIT) out[w++] = ' ';
        i += 2;
    }
    return w;
}

/* ' '.join(s.split()) in place: Python whitespace (Unicode) separates tokens. */
static size_t metric_collapse_whitespace(char *s, size_t n) {
    size_t w = 0;
    bool pending_space = false;
    for (size_t i = 0; i < n;) {
        size_t k;
        uint32_t cp = rt_utf8_decode(s + i, &k);
        if (rt_unicode_is_space(cp)) {
            pending_space = w > 0;
        } else {
            if (pending_space) s[w++] = ' ';
            pending_space = false;
            memmove(s + w, s + i, k);
            w += k;
        }
        i += k;
    }
    return w;
}

rt_status metric_bleu_tokenize_13a(const char *line, char **out) {
    *out = NULL;
    size_t len = strlen(line), bad;
    if (!rt_utf8_valid(line, len, &bad))
        return rt_errorf(RT_ERR_FORMAT, "13a tokenizer: invalid UTF-8 at byte %zu of a %zu-byte line", bad, len);
    /* Two buffers, used in turn. Rule 1 pads a punctuation byte with 2 spaces; rules 2 and 3
     * each add 2 spaces at most once per '.' or ',' and rule 4 once per '-', none of which
     * rule 1 touches: no byte of the padded line grows past 5 bytes. */
    size_t cap = 6 * (len + 2) + 1;
    char *a = malloc(cap), *b = malloc(cap);
    if (!a || !b) {
        free(a);
        free(b);
        return rt_errorf(RT_ERR_NOMEM, "13a tokenizer: out of memory for a %zu-byte line", len);
    }
    /* Language-independent part. */
    memcpy(a + 1, line, len);
    size_t n = len;
    char *body = a + 1;
    metric_replace_in_place(body, &n, "<skipped>", "");
    metric_replace_in_place(body, &n, "-\n", "");
    metric_replace_in_place(body, &n, "\n", " ");
    if (memchr(body, '&', n)) {
        metric_replace_in_place(body, &n, "&quot;", "\"");
        metric_replace_in_place(body, &n, "&amp;", "&");
        metric_replace_in_place(body, &n, "&lt;", "<");
        metric_replace_in_place(body, &n, "&gt;", ">");
    }
    a[0] = ' ';
    a[n + 1] = ' ';
    n += 2;
    /* Rule 1: ASCII punctuation -> ' c '. */
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (metric_13a_punct((unsigned char)a[i])) {
            b[w++] = ' ';
            b[w++] = a[i];
            b[w++] = ' ';
        } else {
            b[w++] = a[i];
        }
    }
    n = metric_13a_pair_rule(b, w, a, METRIC_13A_DOT_AFTER_NONDIGIT);
    n = metric_13a_pair_rule(a, n, b, METRIC_13A_DOT_BEFORE_NONDIGIT);
    n = metric_13a_pair_rule(b, n, a, METRIC_13A_DASH_AFTER_DIGIT);
    n = metric_collapse_whitespace(a, n);
    a[n] = '\0';
    free(b);
    *out = a;
    return RT_OK;
}
