/* Dropping read pages of a file mapping (see ckpt_pages.h). */
#include "checkpoints/ckpt_pages.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

void ckpt_pages_release(const void *map, size_t map_size, const void *p, size_t n) {
    uintptr_t lo = (uintptr_t)map, hi = lo + map_size, a = (uintptr_t)p, b = a + n;
    if (!map || n == 0 || a < lo || b > hi) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    /* only pages wholly inside the range: a neighbour's page stays (it may be read next) */
    uintptr_t first = (a + page - 1) & ~(page - 1), last = b & ~(page - 1);
    if (last > first) (void)madvise((void *)first, last - first, MADV_DONTNEED);
}
