/* Status codes and the error contract shared by every folder.
 *
 * A recoverable failure (bad file, bad config, bad option) returns an rt_status and leaves
 * a one-line message, naming the file and the field, in a thread-local buffer that the
 * program prints. A broken invariant aborts with file:line through RT_CHECK, in every build.
 * Functions use one cleanup label:
 *
 *     rt_status st = RT_OK;
 *     RT_TRY(ckpt_safetensors_open(path, &f));
 *     ...
 *   fail:
 *     ckpt_safetensors_close(f);
 *     return st;
 */
#ifndef RT_STATUS_H
#define RT_STATUS_H

#include <stdio.h>
#include <stdlib.h>

typedef enum {
    RT_OK = 0,
    RT_ERR_IO,     /* missing, unreadable or unwritable file */
    RT_ERR_FORMAT, /* a file's content is malformed or truncated */
    RT_ERR_CONFIG, /* a config or option value is wrong */
    RT_ERR_USAGE,  /* a command-line mistake: programs exit 2 */
    RT_ERR_NOMEM,  /* an allocation at set-up failed */
    RT_ERR_UNSUPPORTED,
    RT_ERR_RUNTIME, /* e.g. a non-finite loss */
    RT_HELP_SHOWN   /* not an error: --help printed, the program exits 0 */
} rt_status;

/* Sets the thread's error message (printf-style) and returns code. */
rt_status rt_errorf(rt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends "prefix: " to the current message (adds context as an error travels up). */
rt_status rt_error_wrap(rt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last message set on this thread ("" if none). */
const char *rt_error_message(void);
const char *rt_status_name(rt_status st);
/* Prints "prog: error: <message>" to stderr and returns the exit code for st (0, 1 or 2). */
/* Writes s to f with its control bytes (ESC, CR, BEL, ...; a tab and the text's own characters
 * pass) as \xNN: a message that quotes input never drives the terminal it is printed on. */
void rt_fputs_printable(const char *s, FILE *f);
int rt_status_exit_code(const char *prog, rt_status st);

#define RT_TRY(expr)                   \
    do {                               \
        rt_status rt_try_st_ = (expr); \
        if (rt_try_st_ != RT_OK) {     \
            st = rt_try_st_;           \
            goto fail;                 \
        }                              \
    } while (0)

/* Jump to fail with a formatted error. */
#define RT_FAIL(code, ...)                   \
    do {                                     \
        st = rt_errorf((code), __VA_ARGS__); \
        goto fail;                           \
    } while (0)

void rt_abort_at(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

/* Invariants: always on, even in release builds. */
#define RT_CHECK(cond, ...)                                               \
    do {                                                                  \
        if (!(cond)) rt_abort_at(__FILE__, __LINE__, #cond, __VA_ARGS__); \
    } while (0)

/* Allocation that aborts on failure: for small bookkeeping, never for user-sized data. */
void *rt_xmalloc(size_t n);
void *rt_xcalloc(size_t n, size_t size);
void *rt_xrealloc(void *p, size_t n);
char *rt_xstrdup(const char *s);

#endif
