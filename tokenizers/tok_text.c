/* Lower-casing for the data readers (tok.h), over runtime's UTF-8 codec and the tokenizers'
 * Unicode tables, so there is one copy of each. */
#include <stdlib.h>

#include "runtime/base/rt_utf8.h"
#include "tokenizers/tok.h"
#include "tokenizers/tok_base.h"

rt_status tok_lowercase(const char *s, size_t n, char **out) {
    /* ASCII lowers to one byte; any other code point (2+ bytes) to at most 3 code points of
     * at most 4 bytes: 6 bytes out per byte in is always enough */
    char *dst = malloc(6 * n + 1);
    if (!dst) return rt_errorf(RT_ERR_NOMEM, "lowercase: out of memory for %zu bytes", n);
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            dst[o++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
            i++;
            continue;
        }
        uint32_t cp, low[4];
        size_t len = rt_utf8_decode_checked(s + i, n - i, &cp);
        if (len == 0) {
            free(dst);
            return rt_errorf(RT_ERR_FORMAT, "lowercase: invalid UTF-8 at byte %zu", i + 1);
        }
        size_t k = tok_bert_lower(cp, low);
        for (size_t j = 0; j < k; j++) o += rt_utf8_encode(low[j], dst + o);
        i += len;
    }
    dst[o] = '\0';
    *out = dst;
    return RT_OK;
}
