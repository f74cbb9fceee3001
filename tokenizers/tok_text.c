/* Lower-casing for the data readers (tok.h), over the tokenizers' own UTF-8 codec and Unicode
 * tables, so there is one copy of each. */
#include <stdlib.h>

#include "tokenizers/tok.h"
#include "tokenizers/tok_internal.h"

rt_status tok_lowercase(const char *s, size_t n, char **out) {
    const uint8_t *u = (const uint8_t *)s;
    /* ASCII lowers to one byte; any other code point (2+ bytes) to at most 3 code points of
     * at most 4 bytes: 6 bytes out per byte in is always enough */
    uint8_t *dst = malloc(6 * n + 1);
    if (!dst) return rt_errorf(RT_ERR_NOMEM, "lowercase: out of memory for %zu bytes", n);
    size_t i = 0, o = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            dst[o++] = (u[i] >= 'A' && u[i] <= 'Z') ? (uint8_t)(u[i] + 32) : u[i];
            i++;
            continue;
        }
        uint32_t cp, low[4];
        size_t len = tok_utf8_decode(u + i, n - i, &cp);
        if (len == 0) {
            free(dst);
            return rt_errorf(RT_ERR_FORMAT, "lowercase: invalid UTF-8 at byte %zu", i + 1);
        }
        size_t k = tok_bert_lower(cp, low);
        for (size_t j = 0; j < k; j++) o += tok_utf8_encode(low[j], dst + o);
        i += len;
    }
    dst[o] = '\0';
    *out = (char *)dst;
    return RT_OK;
}
