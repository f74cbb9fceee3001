/* Growable arrays and text (see rt_buf.h). */
#include "runtime/base/rt_buf.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_status.h"

/* The capacity rt_grow_to and rt_grow_try move to (doubling from *cap, or 16), in elements and
 * bytes; false when it overflows. */
static bool buf_capacity(size_t cap, size_t need, size_t size, size_t *c, size_t *bytes) {
    *c = cap ? cap : 16;
    while (*c < need) {
        if (*c > SIZE_MAX / 2) return false;
        *c *= 2;
    }
    return !__builtin_mul_overflow(*c, size, bytes);
}

void *rt_grow_to(void *p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return p;
    size_t c, bytes;
    RT_CHECK(buf_capacity(*cap, need, size, &c, &bytes), "a growable array of %zu elements of %zu bytes", need, size);
    p = rt_xrealloc(p, bytes);
    *cap = c;
    return p;
}

void *rt_grow_try(void *p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return p;
    size_t c, bytes;
    if (!buf_capacity(*cap, need, size, &c, &bytes)) return NULL;
    void *q = realloc(p, bytes);
    if (q) *cap = c;
    return q;
}

void rt_text_put(rt_text *t, const char *s, size_t n) {
    RT_GROW(t->s, t->cap, t->n + n + 1);
    if (n) memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = '\0';
}

void rt_text_puts(rt_text *t, const char *s) { rt_text_put(t, s, strlen(s)); }

void rt_text_free(rt_text *t) {
    free(t->s);
    *t = (rt_text){0};
}
