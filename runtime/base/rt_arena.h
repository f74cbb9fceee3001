/* The activation arena (the llm.c pattern): a model lays out every activation buffer twice
 * with the same code, once with no base to measure the total, then over one allocation
 * made at start-up for the largest batch. Nothing is allocated inside the step loop. */
#ifndef RT_ARENA_H
#define RT_ARENA_H

#include <stddef.h>

typedef struct {
    char *base;  /* NULL while measuring */
    size_t used; /* bytes laid out so far */
} rt_arena;

/* Reserves n elements of elem bytes, 64-byte aligned; NULL while measuring. */
static inline void *rt_arena_take(rt_arena *a, size_t n, size_t elem) {
    a->used = (a->used + 63) & ~(size_t)63;
    void *p = a->base ? a->base + a->used : NULL;
    a->used += n * elem;
    return p;
}

#endif
