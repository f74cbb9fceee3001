/* Growable arrays and text (runtime/base/rt_buf.h): the capacity doubles from 16 and never shrinks,
 * the contents survive each move, a text stays NUL-terminated and takes bytes that are not,
 * including NULs; rt_grow_try reports a size that overflows with NULL and leaves the array and
 * its capacity as they were. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_buf.h"
#include "tests/testutil.h"

int main(void) {
    int *v = NULL;
    size_t cap = 0;
    for (int i = 0; i < 1000; i++) {
        RT_GROW(v, cap, (size_t)i + 1);
        v[i] = 3 * i;
        TZ_EXPECT(cap >= (size_t)i + 1 && cap >= 16 && (cap & (cap - 1)) == 0, "capacity %zu for %d elements", cap,
                  i + 1);
    }
    bool kept = true;
    for (int i = 0; i < 1000; i++) kept = kept && v[i] == 3 * i;
    TZ_EXPECT(kept && cap == 1024, "1000 elements kept in a capacity of %zu", cap);
    RT_GROW(v, cap, 10);
    TZ_EXPECT(cap == 1024, "a smaller need keeps the capacity (%zu)", cap);
    /* rt_grow_try: an overflowing size is NULL, and the array is still the caller's */
    int *same = v;
    size_t c = cap;
    TZ_EXPECT(rt_grow_try(v, &c, SIZE_MAX / 2, sizeof *v) == NULL && c == cap && v == same,
              "an overflowing size: NULL, capacity %zu", c);
    int *w = rt_grow_try(v, &c, 2000, sizeof *v);
    TZ_EXPECT(w != NULL && c == 2048 && w[999] == 2997, "grown to %zu", c);
    free(w ? w : v);

    rt_text t = {0};
    rt_text_put(&t, "", 0);
    TZ_EXPECT(t.s && t.n == 0 && t.s[0] == '\0', "an empty text is the empty string");
    rt_text_puts(&t, "abc");
    rt_text_put(&t, "d\0e", 3);
    TZ_EXPECT(t.n == 6 && memcmp(t.s, "abcd\0e", 7) == 0, "bytes with a NUL, then the terminator (%zu bytes)", t.n);
    for (int i = 0; i < 100; i++) rt_text_puts(&t, "0123456789");
    TZ_EXPECT(t.n == 1006 && t.s[1006] == '\0' && t.s[1005] == '9' && t.cap >= 1007, "1006 bytes (capacity %zu)",
              t.cap);
    rt_text_free(&t);
    TZ_EXPECT(!t.s && t.n == 0 && t.cap == 0, "freed and zeroed");
    return tz_test_result("test_buf");
}
