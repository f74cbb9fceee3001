/* The set-up progress bar (see rt_progress.h). */
#include "runtime/base/rt_progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define TICK_NS 250000000ull /* redraw every 0.25 s at most */

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void rt_progress_format(char *buf, size_t size, const char *what, uint64_t done, uint64_t total, double secs) {
    enum { WIDTH = 20 };
    const double frac = total ? (double)(done < total ? done : total) / (double)total : 1.0;
    char bar[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++) bar[i] = i < (int)(frac * WIDTH) ? '#' : '-';
    bar[WIDTH] = '\0';
    const double mb = (double)done / 1e6, rate = secs > 0 ? mb / secs : 0;
    snprintf(buf, size, "[%s] %s: %.0f%% of %.0f MB, %.1f MB/s", bar, what, 100 * frac, (double)total / 1e6, rate);
}

void rt_progress_begin(rt_progress *p, const char *what, uint64_t total, bool show) {
    *p = (rt_progress){.what = what, .total = total, .on = show && isatty(STDOUT_FILENO) == 1};
    p->start_ns = now_ns();
    p->next_ns = p->start_ns + TICK_NS;
}

void rt_progress_add(rt_progress *p, uint64_t n) {
    const uint64_t done = __atomic_add_fetch(&p->done, n, __ATOMIC_RELAXED);
    if (!p->on) return;
    const uint64_t t = now_ns();
    uint64_t next = __atomic_load_n(&p->next_ns, __ATOMIC_RELAXED);
    /* one thread wins each tick */
    if (t < next ||
        !__atomic_compare_exchange_n(&p->next_ns, &next, t + TICK_NS, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return;
    char line[160];
    rt_progress_format(line, sizeof line, p->what, done, p->total, 1e-9 * (double)(t - p->start_ns));
    printf("\r\033[K%s", line);
    fflush(stdout);
}

void rt_progress_end(rt_progress *p) {
    if (p->on) {
        printf("\r\033[K");
        fflush(stdout);
    }
}
