/* Growable arrays and text: the one place for the doubling every parser, reader and writer
 * needs (issue 37), so that no file keeps its own `n, cap` arithmetic. */
#ifndef RT_BUF_H
#define RT_BUF_H

#include <stddef.h>

/* Room for `need` elements of `size` bytes in the array p, whose capacity *cap (in elements)
 * doubles, from 16, until it holds them; returns the array, moved or not, and the new elements
 * past the old capacity are not initialized. Aborts when need * size overflows, and (as
 * rt_xrealloc) when memory runs out: for bookkeeping, not for user-sized data. */
void *rt_grow_to(void *p, size_t *cap, size_t need, size_t size);
/* The typed form: RT_GROW(v->items, v->cap, v->n + 1). */
#define RT_GROW(ptr, cap, need) ((ptr) = rt_grow_to((ptr), &(cap), (need), sizeof *(ptr)))
/* As rt_grow_to, for arrays a file's contents size (a reader returns RT_ERR_NOMEM instead of
 * stopping): NULL when memory runs out or the size overflows, p and *cap then as they were. */
void *rt_grow_try(void *p, size_t *cap, size_t need, size_t size);

/* A growable text (or bytes), always NUL-terminated once anything was put; zero-initialise it. */
typedef struct {
    char *s;
    size_t n, cap; /* bytes held (without the NUL), bytes allocated */
} rt_text;

/* Appends n bytes of s (which need not be NUL-terminated). */
void rt_text_put(rt_text *t, const char *s, size_t n);
void rt_text_puts(rt_text *t, const char *s);
/* Frees the text and zeroes t. */
void rt_text_free(rt_text *t);

#endif
