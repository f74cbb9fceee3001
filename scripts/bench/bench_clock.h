/* What the CPU benchmarks share: a monotonic clock in seconds and the comparison qsort needs to
 * take a median of repeated timings. */
#ifndef TZ_BENCH_CLOCK_H
#define TZ_BENCH_CLOCK_H

#include <time.h>

static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
