/* Registered read-only mappings and the SIGBUS handler that names them (see rt_mapped.h). The
 * handler only reads the table and calls write and _exit, both async-signal-safe; the table's
 * slots are published with a release store of their end address, so a handler never sees a slot
 * half written. */
#define _GNU_SOURCE
#include "runtime/base/rt_mapped.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define RT_MAPPED_SLOTS 256

typedef struct {
    _Atomic uintptr_t lo, hi; /* hi 0: free */
    char path[512];
} rt_mapped_slot;

static rt_mapped_slot rt_mapped_table[RT_MAPPED_SLOTS];
static pthread_mutex_t rt_mapped_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t rt_mapped_once = PTHREAD_ONCE_INIT;

static void rt_mapped_say(const char *s) {
    size_t n = strlen(s);
    while (n) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0) return;
        s += w, n -= (size_t)w;
    }
}

static void rt_mapped_sigbus(int sig, siginfo_t *info, void *uctx) {
    (void)uctx;
    const uintptr_t a = (uintptr_t)info->si_addr;
    for (int i = 0; i < RT_MAPPED_SLOTS; i++) {
        const uintptr_t hi = atomic_load_explicit(&rt_mapped_table[i].hi, memory_order_acquire);
        if (!hi || a < atomic_load_explicit(&rt_mapped_table[i].lo, memory_order_relaxed) || a >= hi) continue;
        rt_mapped_say(program_invocation_short_name);
        rt_mapped_say(": error: ");
        rt_mapped_say(rt_mapped_table[i].path);
        rt_mapped_say(" changed size while it was in use (truncated or replaced by another process?): stopping\n");
        _exit(1);
    }
    signal(sig, SIG_DFL); /* not ours: the default action, as if no handler were installed */
    raise(sig);
}

static void rt_mapped_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = rt_mapped_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

void *rt_map_file(int fd, size_t size, const char *path) {
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) return m;
    pthread_once(&rt_mapped_once, rt_mapped_install);
    pthread_mutex_lock(&rt_mapped_lock);
    for (int i = 0; i < RT_MAPPED_SLOTS; i++) {
        rt_mapped_slot *s = &rt_mapped_table[i];
        if (atomic_load_explicit(&s->hi, memory_order_relaxed)) continue;
        snprintf(s->path, sizeof s->path, "%s", path);
        atomic_store_explicit(&s->lo, (uintptr_t)m, memory_order_relaxed);
        atomic_store_explicit(&s->hi, (uintptr_t)m + size, memory_order_release);
        break;
    }
    pthread_mutex_unlock(&rt_mapped_lock);
    return m;
}

void rt_unmap_file(void *addr, size_t size) {
    if (!addr || addr == MAP_FAILED) return;
    pthread_mutex_lock(&rt_mapped_lock);
    for (int i = 0; i < RT_MAPPED_SLOTS; i++)
        if (atomic_load_explicit(&rt_mapped_table[i].hi, memory_order_relaxed) &&
            atomic_load_explicit(&rt_mapped_table[i].lo, memory_order_relaxed) == (uintptr_t)addr) {
            atomic_store_explicit(&rt_mapped_table[i].hi, 0, memory_order_release);
            break;
        }
    pthread_mutex_unlock(&rt_mapped_lock);
    munmap(addr, size);
}
