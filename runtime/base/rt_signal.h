/* SIGINT and SIGTERM as requests to stop at the next safe point, not as instant death: a
 * training step finishes and saves a checkpoint; a conversion stops between tensors and removes
 * its half-built output. The handler only records the signal; the work polls for it.
 *
 *     rt_signal_guard g;
 *     rt_signal_catch_stop(&g);
 *     while (...) { if (rt_signal_stop_requested()) break; ... }
 *     rt_signal_release(&g);   // the previous handlers again
 */
#ifndef RT_SIGNAL_H
#define RT_SIGNAL_H

#include <signal.h>

typedef struct {
    struct sigaction old_int, old_term;
} rt_signal_guard;

/* Clears any earlier request and installs the recording handlers for SIGINT and SIGTERM. */
void rt_signal_catch_stop(rt_signal_guard *g);
/* The signal received since rt_signal_catch_stop (SIGINT or SIGTERM), or 0. */
int rt_signal_stop_requested(void);
/* Puts back the handlers that were there before and forgets the request (read it first). */
void rt_signal_release(rt_signal_guard *g);
/* For every program that writes files: a file-size limit (ulimit -f) then fails the write with
 * EFBIG, which every writer reports as an error naming the file (and removes what it half wrote),
 * instead of SIGXFSZ killing the program without a word. */
void rt_signal_ignore_file_limit(void);

#endif
