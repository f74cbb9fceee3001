/* The stop request (see rt_signal.h): one sig_atomic_t, written by the handler only. */
#include "runtime/base/rt_signal.h"

#include <string.h>

static volatile sig_atomic_t rt_signal_received = 0;

static void rt_signal_on_stop(int sig) { rt_signal_received = sig; }

void rt_signal_catch_stop(rt_signal_guard *g) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = rt_signal_on_stop;
    sigemptyset(&sa.sa_mask);
    rt_signal_received = 0;
    sigaction(SIGINT, &sa, &g->old_int);
    sigaction(SIGTERM, &sa, &g->old_term);
}

int rt_signal_stop_requested(void) { return rt_signal_received; }

void rt_signal_release(rt_signal_guard *g) {
    sigaction(SIGINT, &g->old_int, NULL);
    sigaction(SIGTERM, &g->old_term, NULL);
    rt_signal_received = 0;
}

void rt_signal_ignore_file_limit(void) { signal(SIGXFSZ, SIG_IGN); }
