/* UTF-8 validation, decoding, encoding and Python's whitespace set (see rt_utf8.h). */
#include "runtime/base/rt_utf8.h"

#include <string.h>

/* The one reading of Unicode's table of well-formed byte sequences (Table 3-7). Returns the
 * length, 1..4, of the valid sequence at s[0..n) and sets *cp; or returns 0 and sets *bad to
 * the length of the maximal subpart there: the longest prefix that could still begin a valid
 * sequence (at least 1), which the lossy repair turns into one U+FFFD. */
static size_t rt_utf8_scan(const unsigned char *s, size_t n, uint32_t *cp, size_t *bad) {
    unsigned c = s[0], lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    size_t len;
    uint32_t v;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0; /* overlong */
        if (c == 0xED) hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        v = c & 0x07;
        if (c == 0xF0) lo = 0x90; /* overlong */
        if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
    } else {
        *bad = 1; /* continuation byte, C0/C1 overlong lead, or F5..FF */
        return 0;
    }
    if (n < 2 || s[1] < lo || s[1] > hi) {
        *bad = 1;
        return 0;
    }
    v = (v << 6) | (s[1] & 0x3F);
    size_t i = 2;
    for (; i < len && i < n && (s[i] & 0xC0) == 0x80; i++) v = (v << 6) | (s[i] & 0x3F);
    if (i < len) {
        *bad = i;
        return 0;
    }
    *cp = v;
    return len;
}

bool rt_utf8_valid(const char *s, size_t len, size_t *bad_offset) {
    for (size_t i = 0, n, bad; i < len; i += n) {
        uint32_t cp;
        n = rt_utf8_scan((const unsigned char *)s + i, len - i, &cp, &bad);
        if (!n) {
            if (bad_offset) *bad_offset = i;
            return false;
        }
    }
    return true;
}

rt_status rt_utf8_check_line(const char *name, size_t lineno, const char *s, size_t len) {
    size_t bad = 0;
    if (rt_utf8_valid(s, len, &bad)) return RT_OK;
    return rt_errorf(RT_ERR_FORMAT, "%s:%zu: invalid UTF-8 at byte %zu of the line", name, lineno, bad + 1);
}

uint32_t rt_utf8_decode(const char *s, size_t *len) {
    /* valid text ends no sequence early, so 4 bytes of room never reads past it; text that
     * breaks the promise reads as U+FFFD over its maximal subpart */
    uint32_t cp = 0xFFFD;
    size_t bad;
    *len = rt_utf8_scan((const unsigned char *)s, 4, &cp, &bad);
    if (!*len) *len = bad;
    return cp;
}

size_t rt_utf8_decode_checked(const char *s, size_t n, uint32_t *cp) {
    size_t bad;
    return rt_utf8_scan((const unsigned char *)s, n, cp, &bad);
}

size_t rt_utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

char *rt_utf8_lossy(const char *s, size_t n) {
    char *out = rt_xmalloc(3 * n + 1); /* worst case: every byte becomes EF BF BD */
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if ((unsigned char)s[i] < 0x80) {
            out[o++] = s[i++];
            continue;
        }
        uint32_t cp;
        size_t bad, len = rt_utf8_scan((const unsigned char *)s + i, n - i, &cp, &bad);
        if (len) {
            memcpy(out + o, s + i, len);
            o += len;
            i += len;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += bad;
        }
    }
    out[o] = '\0';
    return out;
}

bool rt_unicode_is_space(uint32_t cp) {
    if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
    switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200A;
    }
}

size_t rt_utf8_rstrip_len(const char *s, size_t len) {
    size_t end = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = rt_utf8_decode_checked(s + i, len - i, &cp);
        if (!n) n = 1, cp = 0xFFFD;
        i += n;
        if (!rt_unicode_is_space(cp)) end = i;
    }
    return end;
}
