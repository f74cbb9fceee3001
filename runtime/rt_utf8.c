/* UTF-8 validation, decoding and Python's whitespace set (see rt_utf8.h). */
#include "runtime/rt_utf8.h"

bool rt_utf8_valid(const char *s, size_t len, size_t *bad_offset) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned c = p[i];
        size_t n;
        unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            n = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 3;
            if (c == 0xE0) lo = 0xA0; /* overlong */
            if (c == 0xED) hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 4;
            if (c == 0xF0) lo = 0x90; /* overlong */
            if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
        } else {
            goto bad; /* continuation byte, C0/C1 overlong lead, or F5..FF */
        }
        if (len - i < n || p[i + 1] < lo || p[i + 1] > hi) goto bad;
        for (size_t k = 2; k < n; k++)
            if ((p[i + k] & 0xC0) != 0x80) goto bad;
        i += n;
        continue;
    bad:
        if (bad_offset) *bad_offset = i;
        return false;
    }
    return true;
}

rt_status rt_utf8_check_line(const char *name, size_t lineno, const char *s, size_t len) {
    size_t bad = 0;
    if (rt_utf8_valid(s, len, &bad)) return RT_OK;
    return rt_errorf(RT_ERR_FORMAT, "%s:%zu: invalid UTF-8 at byte %zu of the line", name, lineno, bad + 1);
}

uint32_t rt_utf8_decode(const char *s, size_t *len) {
    const unsigned char *p = (const unsigned char *)s;
    if (p[0] < 0x80) {
        *len = 1;
        return p[0];
    }
    if (p[0] < 0xE0) {
        *len = 2;
        return ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    }
    if (p[0] < 0xF0) {
        *len = 3;
        return ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    }
    *len = 4;
    return ((uint32_t)(p[0] & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) | ((uint32_t)(p[2] & 0x3F) << 6) |
           (p[3] & 0x3F);
}

bool rt_unicode_is_space(uint32_t cp) {
    if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

size_t rt_utf8_rstrip_len(const char *s, size_t len) {
    size_t end = 0;
    for (size_t i = 0; i < len;) {
        size_t n;
        uint32_t cp = rt_utf8_decode(s + i, &n);
        i += n;
        if (!rt_unicode_is_space(cp)) end = i;
    }
    return end;
}
