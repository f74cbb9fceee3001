/* Logging: only rank 0 prints info (every rank prints errors, prefixed with its rank when
 * there are several). Progress lines go to stdout; warnings and errors to stderr. */
#ifndef RT_LOG_H
#define RT_LOG_H

#include <stdbool.h>

void rt_log_set_rank(int rank, int world);
int rt_log_rank(void);
void rt_log_set_quiet(bool quiet);
/* Progress lines to stderr too, for a program whose stdout carries its output (a filter). */
void rt_log_info_to_stderr(bool on);

void rt_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void rt_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void rt_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
