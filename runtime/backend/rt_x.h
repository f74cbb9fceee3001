/* A typed activation buffer: where an activation (or its gradient) lives and what each value is
 * stored as. Under a 16-bit compute precision a backend that reads and writes it (the CPU) keeps
 * activations as 2-byte values of that type, and every op that takes an rt_x reads and writes the
 * type the handle says; fp32 handles hold floats, rounded to the compute precision as before
 * (rt_store). Weights, gradients of parameters, statistics and losses stay plain float pointers.
 *
 * Passed by value (a pointer and a type). The handle carries no const: an op's comment says
 * which of its buffers it writes. Offsets go through rt_x_at, which knows the element size, so a
 * typed buffer is never indexed as floats by mistake: it has no float pointer to index. */
#ifndef RT_X_H
#define RT_X_H

#include <stddef.h>

#include "runtime/base/rt_dtype.h"
#include "runtime/base/rt_status.h"

typedef struct {
    void *p;    /* NULL: no buffer (an optional operand) */
    rt_dtype t; /* RT_F32, or the compute precision's RT_BF16 or RT_F16 */
} rt_x;

/* Bytes of one value of an activation type. */
static inline size_t rt_x_size(rt_dtype t) { return t == RT_F32 ? sizeof(float) : 2; }

/* A buffer of values of type t as a handle (no compound literal: CUDA's C++ includes this). */
static inline rt_x rt_x_of(void *p, rt_dtype t) {
    rt_x x;
    x.p = p;
    x.t = t;
    return x;
}
/* A buffer of floats (or NULL) as a handle. */
static inline rt_x rt_xf(const float *p) { return rt_x_of((void *)p, RT_F32); }

/* The handle n values further on (NULL stays NULL). */
static inline rt_x rt_x_at(rt_x x, size_t n) {
    if (x.p) x.p = (char *)x.p + n * rt_x_size(x.t);
    return x;
}

/* The floats of an fp32 handle, for code that has no typed path yet; stops, naming `what`, on a
 * 16-bit one. */
static inline float *rt_x_floats(rt_x x, const char *what) {
    RT_CHECK(x.t == RT_F32, "%s: a %s activation where this path reads fp32", what, rt_dtype_name(x.t));
    return (float *)x.p;
}

#endif
