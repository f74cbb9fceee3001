/* A progress bar for long set-up work (tokenizing a large corpus): "\r[#####-----] what: 45% of
 * 501 MB, 47.0 MB/s" redrawn at most every 0.25 s, on a terminal only (a log file gets the final
 * summary line from the caller instead). rt_progress_add is safe from any thread (OpenMP loops);
 * the thread that crosses a redraw tick prints. */
#ifndef RT_PROGRESS_H
#define RT_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *what;
    uint64_t total;             /* units of work (bytes) */
    uint64_t done;              /* atomically added */
    uint64_t start_ns, next_ns; /* monotonic: the start and the next redraw */
    bool on;                    /* stdout is a terminal and this is the lead rank */
} rt_progress;

/* show: whether this process may draw (e.g. rank 0); drawing also needs stdout to be a terminal. */
void rt_progress_begin(rt_progress *p, const char *what, uint64_t total, bool show);
void rt_progress_add(rt_progress *p, uint64_t n);
/* Clears the bar. */
void rt_progress_end(rt_progress *p);
/* The bar's text for done of total after secs (for tests and the drawing itself). */
void rt_progress_format(char *buf, size_t size, const char *what, uint64_t done, uint64_t total, double secs);

#endif
