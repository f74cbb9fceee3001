/* The run folder's lock (runtime/base/rt_run_lock.c): a second taker gets a one-line error naming the
 * folder and the holder's pid; a release, or the holder's death by any means (exit, SIGKILL),
 * frees the folder; a symlink planted at DIR/.lock is refused, never followed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/base/rt_run_lock.h"
#include "tests/testutil.h"

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* A child process takes the lock, tells the parent through a pipe, then waits to be killed. */
static pid_t child_holding(const char *dir) {
    int p[2];
    if (pipe(p) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        rt_run_lock *lock = NULL;
        char ok = rt_run_lock_acquire(dir, &lock) == RT_OK ? 'y' : 'n';
        if (write(p[1], &ok, 1) != 1) _exit(2);
        for (;;) pause();
    }
    char got = 0;
    if (read(p[0], &got, 1) != 1 || got != 'y') {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        pid = -1;
    }
    close(p[0]);
    close(p[1]);
    return pid;
}

int main(void) {
    const char *dir = tz_tmpdir();
    rt_run_lock *a = NULL, *b = NULL;
    TZ_EXPECT_OK(rt_run_lock_acquire(dir, &a));
    /* a second taker in the same process (another open of the file) is refused too */
    rt_status st = rt_run_lock_acquire(dir, &b);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %ld host ", (long)getpid());
    TZ_EXPECT(st == RT_ERR_IO && b == NULL && contains(rt_error_message(), dir) &&
                  contains(rt_error_message(), "in use by another run") && contains(rt_error_message(), pid) &&
                  !strchr(rt_error_message(), '\n'),
              "second taker: %s '%s'", rt_status_name(st), rt_error_message());
    rt_run_lock_release(a);
    TZ_EXPECT_OK(rt_run_lock_acquire(dir, &b));
    rt_run_lock_release(b);
    rt_run_lock_release(NULL);

    /* another process holds it; SIGKILL leaves the file but no lock */
    pid_t child = child_holding(dir);
    TZ_EXPECT(child > 0, "child took the lock");
    if (child > 0) {
        snprintf(pid, sizeof pid, "pid %ld host ", (long)child);
        st = rt_run_lock_acquire(dir, &a);
        TZ_EXPECT(st == RT_ERR_IO && contains(rt_error_message(), pid), "held by the child: '%s'", rt_error_message());
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        TZ_EXPECT_OK(rt_run_lock_acquire(dir, &a));
        rt_run_lock_release(a);
    }

    /* a planted symlink at DIR/.lock is not followed: the victim keeps its bytes */
    const char *dir2 = tz_tmpdir();
    char lock_path[600], victim[600];
    snprintf(lock_path, sizeof lock_path, "%s/.lock", dir2);
    snprintf(victim, sizeof victim, "%s/victim", dir2);
    FILE *f = fopen(victim, "w");
    TZ_EXPECT(f && fputs("precious\n", f) >= 0 && fclose(f) == 0, "victim written");
    TZ_EXPECT(symlink(victim, lock_path) == 0, "symlink");
    a = NULL;
    st = rt_run_lock_acquire(dir2, &a);
    TZ_EXPECT(st == RT_ERR_IO && a == NULL && contains(rt_error_message(), lock_path), "planted link: '%s'",
              rt_error_message());
    struct stat sb;
    TZ_EXPECT(stat(victim, &sb) == 0 && sb.st_size == 9, "the victim is untouched (%lld bytes)", (long long)sb.st_size);
    rt_run_lock_release(a);

    /* a folder that does not exist */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no/such/dir", dir2);
    st = rt_run_lock_acquire(missing, &a);
    TZ_EXPECT(st == RT_ERR_IO && contains(rt_error_message(), missing), "missing folder: '%s'", rt_error_message());
    return tz_test_result("test_run_lock");
}
