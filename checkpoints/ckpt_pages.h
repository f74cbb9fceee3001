/* Dropping the pages of a read-only file mapping that a reader is done with. A converter walks
 * a checkpoint one tensor at a time through mmap; without this every page it touched would stay
 * in its resident set, so converting a 20 GB file would hold 20 GB. The pages stay in the page
 * cache and come back on the next touch: this changes memory use, never data. */
#ifndef CKPT_PAGES_H
#define CKPT_PAGES_H

#include <stddef.h>

/* Releases the whole pages under [p, p + n) when that range lies inside the mapping
 * [map, map + map_size) (MAP_PRIVATE, PROT_READ); anything else (heap data of an inflated zip
 * entry) is left alone. */
void ckpt_pages_release(const void *map, size_t map_size, const void *p, size_t n);

#endif
