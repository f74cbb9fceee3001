/* Thread-local error messages and the abort path behind RT_CHECK. */
#include "runtime/base/rt_status.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

static _Thread_local char rt_err_buf[1024];

rt_status rt_errorf(rt_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt_err_buf, sizeof rt_err_buf, fmt, ap);
    va_end(ap);
    return code;
}

rt_status rt_error_wrap(rt_status code, const char *fmt, ...) {
    char prefix[512], old[sizeof rt_err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, rt_err_buf, sizeof old);
    /* truncation is fine here: the message is for people */
    size_t n = strlen(prefix);
    if (n > sizeof rt_err_buf - 3) n = sizeof rt_err_buf - 3;
    memcpy(rt_err_buf, prefix, n);
    memcpy(rt_err_buf + n, ": ", 2);
    size_t room = sizeof rt_err_buf - n - 3;
    size_t m = strlen(old);
    if (m > room) m = room;
    memcpy(rt_err_buf + n + 2, old, m);
    rt_err_buf[n + 2 + m] = '\0';
    return code;
}

const char *rt_error_message(void) { return rt_err_buf; }

const char *rt_status_name(rt_status st) {
    switch (st) {
    case RT_OK: return "ok";
    case RT_ERR_IO: return "i/o error";
    case RT_ERR_FORMAT: return "format error";
    case RT_ERR_CONFIG: return "config error";
    case RT_ERR_USAGE: return "usage error";
    case RT_ERR_NOMEM: return "out of memory";
    case RT_ERR_UNSUPPORTED: return "unsupported";
    case RT_ERR_RUNTIME: return "runtime error";
    case RT_HELP_SHOWN: return "help shown";
    }
    return "unknown status";
}

void rt_fputs_printable(const char *s, FILE *f) {
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if ((*c < 0x20 && *c != '\t') || *c == 0x7f)
            fprintf(f, "\\x%02x", *c);
        else
            fputc(*c, f);
    }
}

int rt_status_exit_code(const char *prog, rt_status st) {
    /* what a program printed to stdout (its log, generated text) that never got there (a full
     * disk, /dev/full) is an error, not a silent exit status 0 */
    errno = 0;
    if ((st == RT_OK || st == RT_HELP_SHOWN) && (fflush(stdout) != 0 || ferror(stdout))) {
        fprintf(stderr, "%s: error: standard output: some of the output was not written%s%s\n", prog,
                errno ? ": " : " (a full disk, or a device that takes nothing?)", errno ? strerror(errno) : "");
        return 1;
    }
    if (st == RT_OK || st == RT_HELP_SHOWN) return 0;
    /* one write: under mpirun every rank may print its error at once, and an unbuffered stderr
     * written piece by piece interleaves their lines mid-word */
    char *line = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&line, &len);
    FILE *out = m ? m : stderr;
    fprintf(out, "%s: error: ", prog);
    rt_fputs_printable(rt_err_buf[0] ? rt_err_buf : rt_status_name(st), out);
    fputc('\n', out);
    if (m && fclose(m) == 0) fwrite(line, 1, len, stderr);
    free(line);
    return st == RT_ERR_USAGE ? 2 : 1;
}

void rt_abort_at(const char *file, int line, const char *cond, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s:%d: check failed: %s: ", file, line, cond);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

void *rt_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    RT_CHECK(p != NULL, "malloc(%zu) failed", n);
    return p;
}

void *rt_xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    RT_CHECK(p != NULL, "calloc(%zu, %zu) failed", n, size);
    return p;
}

void *rt_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    RT_CHECK(q != NULL, "realloc(%zu) failed", n);
    return q;
}

char *rt_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = rt_xmalloc(n);
    memcpy(p, s, n);
    return p;
}
