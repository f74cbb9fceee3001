/* Rank-aware logging (see rt_log.h). */
#include "runtime/base/rt_log.h"

#include <stdarg.h>
#include <stdio.h>

#include "runtime/base/rt_status.h"

static int rt_log_rank_ = 0, rt_log_world_ = 1;
static bool rt_log_quiet_ = false;
static bool rt_log_info_to_stderr_ = false;

void rt_log_set_rank(int rank, int world) {
    rt_log_rank_ = rank;
    rt_log_world_ = world;
}

int rt_log_rank(void) { return rt_log_rank_; }

void rt_log_set_quiet(bool quiet) { rt_log_quiet_ = quiet; }

void rt_log_info_to_stderr(bool on) { rt_log_info_to_stderr_ = on; }

void rt_log_info(const char *fmt, ...) {
    if (rt_log_rank_ != 0 || rt_log_quiet_) return;
    FILE *out = rt_log_info_to_stderr_ ? stderr : stdout;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    fflush(out);
}

/* Warnings and errors quote input (a line of a file, a name): its control bytes are escaped. */
static void rt_log_stderr(const char *level, const char *fmt, va_list ap) {
    char text[4096];
    vsnprintf(text, sizeof text, fmt, ap);
    if (rt_log_world_ > 1) fprintf(stderr, "[rank %d] ", rt_log_rank_);
    fprintf(stderr, "%s: ", level);
    rt_fputs_printable(text, stderr);
    fputc('\n', stderr);
    fflush(stderr);
}

void rt_log_warn(const char *fmt, ...) {
    if (rt_log_rank_ != 0) return;
    va_list ap;
    va_start(ap, fmt);
    rt_log_stderr("warning", fmt, ap);
    va_end(ap);
}

void rt_log_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    rt_log_stderr("error", fmt, ap);
    va_end(ap);
}
