/* Mapped files (runtime/base/rt_mapped.h): a read from a mapping whose file another process truncated
 * stops the program with one line naming the file and exit status 1 (issue 34: a mapped cache
 * entry truncated under a running job was a silent SIGBUS); a SIGBUS outside every registered
 * mapping keeps its default action; an unmapped region is no longer named. Each case runs in a
 * child process. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/base/rt_mapped.h"
#include "tests/testutil.h"

static char g_path[600];

/* A 64 KiB file, mapped; then truncated to nothing and its second page read. */
static void child_truncated(void) {
    int fd = open(g_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    char block[65536];
    memset(block, 7, sizeof block);
    if (fd < 0 || write(fd, block, sizeof block) != (ssize_t)sizeof block) _exit(10);
    volatile const char *m = rt_map_file(fd, sizeof block, g_path);
    if ((void *)m == MAP_FAILED) _exit(11);
    if (m[8192] != 7) _exit(12);
    if (ftruncate(fd, 0) != 0) _exit(13);
    (void)m[8192];
    _exit(0); /* not reached: the read faults */
}

static void child_foreign(void) {
    int fd = open(g_path, O_RDONLY);
    void *m = rt_map_file(fd, 4096, g_path); /* installs the handler */
    rt_unmap_file(m, 4096);
    raise(SIGBUS);
    _exit(0);
}

/* Runs f in a child with stderr into a pipe: its wait status and what it wrote. */
static int run_child(void (*f)(void), char *err, size_t size) {
    int p[2];
    if (pipe(p) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], STDERR_FILENO);
        close(p[0]);
        f();
        _exit(0);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < size && (r = read(p[0], err + n, size - 1 - n)) > 0) n += (size_t)r;
    err[n] = '\0';
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

int main(void) {
    snprintf(g_path, sizeof g_path, "%s/mapped.bin", tz_tmpdir());
    char err[1024];
    int status = run_child(child_truncated, err, sizeof err);
    TZ_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 1, "a truncated mapping: status %#x, stderr '%s'", status,
              err);
    TZ_EXPECT(strstr(err, "error: ") && strstr(err, g_path) && strstr(err, "changed size while it was in use") &&
                  strchr(err, '\n') == err + strlen(err) - 1,
              "a truncated mapping: one line naming the file, got '%s'", err);
    status = run_child(child_foreign, err, sizeof err);
    TZ_EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS && err[0] == '\0',
              "a SIGBUS outside the mappings: status %#x, stderr '%s'", status, err);
    return tz_test_result("test_mapped");
}
