/* The tokenized cache's file format (format 2, described in data_cache.h), inside the data
 * folder only: the writer that appends sets to an entry (a file through rt_atomic, or memory)
 * and the parser that points sets into an entry's bytes. data_cache.c puts them on disk. */
#ifndef DATA_CACHE_FORMAT_H
#define DATA_CACHE_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/data_cache.h"

/* The smallest entry there can be (its start and trailer): a shorter file is truncated. */
#define DATA_CACHE_MIN_BYTES 64
/* Targets a row may have: a multi-label row's one per class, up to a classifier's classes. */
#define DATA_CACHE_MAX_TARGET_WIDTH (1u << 16)

/* Adds n bytes to a CRC-32 and an Adler-32 (zlib's, in pieces zlib's uInt can take): the
 * entries' checksums and the input files' in the cache key. */
void data_cache_checksums_add(unsigned long *crc, unsigned long *adl, const void *bytes, uint64_t n);

/* Starts an entry at path (written atomically; NULL: in memory). */
rt_status data_cache_writer_begin(const char *path, data_cache_writer **out);
/* Appends the set table and the trailer once n_sets sets have ended. In memory, *bytes and *len
 * take the file; to a file, it is committed under its name. The writer is still to be freed. */
rt_status data_cache_writer_finish(data_cache_writer *w, const data_cache_key *key, int n_sets, void **bytes,
                                   size_t *len);
/* Whether a write failed (the entry is lost; the data may still be good). */
bool data_cache_writer_io_failed(const data_cache_writer *w);
/* Frees the writer, removing an entry it did not commit. NULL is fine. */
void data_cache_writer_free(data_cache_writer *w);

/* Parses the entry in bytes (8-byte aligned) into sets that point into it and share backing
 * (one reference each; the caller keeps its own). RT_ERR_FORMAT naming what is wrong. */
rt_status data_cache_parse_into(const char *name, const unsigned char *bytes, size_t len, const data_cache_key *key,
                                int n_sets, data_backing *backing, data_tokenized *sets);

#endif
