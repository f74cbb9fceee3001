/* The metrics log (see rt_jsonl.h). Plain write(2) on an O_APPEND descriptor, not stdio: a
 * buffered fprintf reports a full disk late or never, and one write per record keeps a record
 * whole on disk or absent (short of a kill inside the write, which the resume cut handles). */
#include "runtime/base/rt_jsonl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/base/rt_log.h"

struct rt_jsonl {
    int fd;
    char *path;
};

/* The "step" of one record, or -1 when it has none. */
static int64_t record_step(const char *line, size_t len) {
    static const char key[] = "\"step\":";
    for (size_t i = 0; i + sizeof key - 1 < len; i++)
        if (memcmp(line + i, key, sizeof key - 1) == 0) return strtoll(line + i + sizeof key - 1, NULL, 10);
    return -1;
}

/* Cuts the file after its last complete record with step <= keep (an unterminated last line
 * is a record a kill cut short: always dropped). */
static rt_status cut_back(int fd, const char *path, int64_t keep) {
    struct stat sb;
    if (fstat(fd, &sb) != 0) return rt_errorf(RT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    size_t size = (size_t)sb.st_size;
    char *text = malloc(size + 1);
    if (!text) return rt_errorf(RT_ERR_NOMEM, "%s: no memory to read %zu bytes", path, size);
    size_t got = 0;
    while (got < size) {
        ssize_t n = pread(fd, text + got, size - got, (off_t)got);
        if (n <= 0) {
            free(text);
            return rt_errorf(RT_ERR_IO, "%s: read failed: %s", path, n < 0 ? strerror(errno) : "file shrank");
        }
        got += (size_t)n;
    }
    size_t cut = 0, dropped = 0;
    for (size_t at = 0; at < size;) {
        char *nl = memchr(text + at, '\n', size - at);
        size_t end = nl ? (size_t)(nl - text) + 1 : size;
        if (!nl || record_step(text + at, end - at) > keep) {
            for (size_t k = at; k < size; k++) dropped += text[k] == '\n';
            dropped += text[size - 1] != '\n';
            break;
        }
        cut = end;
        at = end;
    }
    free(text);
    if (cut == size) return RT_OK;
    if (ftruncate(fd, (off_t)cut) != 0)
        return rt_errorf(RT_ERR_IO, "%s: cannot cut it back: %s", path, strerror(errno));
    rt_log_info("%s: dropped %zu record%s past step %lld; the resumed run logs those steps again", path, dropped,
                dropped == 1 ? "" : "s", (long long)keep);
    return RT_OK;
}

rt_status rt_jsonl_open(const char *path, int64_t keep_through_step, rt_jsonl **out) {
    rt_status st = RT_OK;
    *out = NULL;
    /* read-write for the resume cut; O_APPEND still sends every write to the end */
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0) return rt_errorf(RT_ERR_IO, "%s: cannot open for appending: %s", path, strerror(errno));
    /* a FIFO or a device would take the records and keep none */
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return rt_errorf(RT_ERR_IO, "%s: not a regular file; the metrics go into a file", path);
    }
    const int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    if (keep_through_step >= 0) RT_TRY(cut_back(fd, path, keep_through_step));
    rt_jsonl *log = rt_xcalloc(1, sizeof *log);
    log->fd = fd;
    log->path = rt_xstrdup(path);
    *out = log;
    return RT_OK;
fail:
    close(fd);
    return st;
}

rt_status rt_jsonl_append(rt_jsonl *log, const char *line) {
    size_t n = strlen(line);
    char *rec = rt_xmalloc(n + 1);
    memcpy(rec, line, n);
    rec[n] = '\n';
    size_t done = 0;
    while (done < n + 1) {
        ssize_t w = write(log->fd, rec + done, n + 1 - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            free(rec);
            return rt_errorf(RT_ERR_IO, "%s: cannot write a record: %s", log->path, strerror(e));
        }
        done += (size_t)w;
    }
    free(rec);
    return RT_OK;
}

rt_status rt_jsonl_close(rt_jsonl *log) {
    if (!log) return RT_OK;
    rt_status st = RT_OK;
    if (fsync(log->fd) != 0 && errno != EINVAL)
        st = rt_errorf(RT_ERR_IO, "%s: fsync failed: %s", log->path, strerror(errno));
    if (close(log->fd) != 0 && st == RT_OK)
        st = rt_errorf(RT_ERR_IO, "%s: close failed: %s", log->path, strerror(errno));
    free(log->path);
    free(log);
    return st;
}
