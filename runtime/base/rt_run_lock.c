/* The run folder's lock (see rt_run_lock.h). flock, not fcntl locks: an fcntl lock belongs to
 * the process and vanishes when any descriptor of the file is closed, and two locks of one
 * process never conflict, which would let in-process tests (and a program that opened the
 * file twice) take one folder twice. */
#include "runtime/base/rt_run_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "runtime/base/rt_log.h"

struct rt_run_lock {
    int fd;
};

/* The holder's "pid N host H" line, for the error message ("unknown" when it wrote none yet). */
static void read_holder(int fd, char *out, size_t size) {
    ssize_t n = pread(fd, out, size - 1, 0);
    if (n <= 0) n = 0;
    out[n] = '\0';
    out[strcspn(out, "\n")] = '\0';
    if (!out[0]) snprintf(out, size, "unknown");
}

rt_status rt_run_lock_acquire(const char *dir, rt_run_lock **out) {
    rt_status st = RT_OK;
    *out = NULL;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/.lock", dir) >= (int)sizeof path)
        return rt_errorf(RT_ERR_USAGE, "run folder %s: path is too long", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0)
        return rt_errorf(RT_ERR_IO, "run folder %s: cannot open its lock file %s: %s", dir, path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char holder[256];
        read_holder(fd, holder, sizeof holder);
        if (e == EWOULDBLOCK)
            RT_FAIL(RT_ERR_IO, "run folder %s is in use by another run (%s); wait for it, or pass another --save-dir",
                    dir, holder);
        RT_FAIL(RT_ERR_IO, "run folder %s: cannot lock %s: %s", dir, path, strerror(e));
    }
    char host[256] = "unknown", line[320];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    int n = snprintf(line, sizeof line, "pid %ld host %s\n", (long)getpid(), host);
    /* the holder line is a courtesy for the next run's message: failing to write it is no
     * reason to refuse this run, which holds the lock either way */
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n)
        rt_log_warn("run folder %s: could not record this run in %s: %s", dir, path, strerror(errno));
    rt_run_lock *lock = rt_xcalloc(1, sizeof *lock);
    lock->fd = fd;
    *out = lock;
    return RT_OK;
fail:
    close(fd);
    return st;
}

void rt_run_lock_release(rt_run_lock *lock) {
    if (!lock) return;
    flock(lock->fd, LOCK_UN);
    close(lock->fd);
    free(lock);
}
