/* The tokenized cache's file format (see data_cache_format.h): its writer and its parser. */
#include "data/data_cache_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "runtime/base/rt_atomic.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the cache file is little-endian and written with the host's byte order"
#endif

#define CACHE_MAGIC "TZDSET\0\1"
#define CACHE_VERSION 3u /* 3: targets of any width per row (multi-label) */
#define CACHE_END "TZDS-END"
#define FLAG_SEGMENTS 1u
#define FLAG_TARGETS 2u

/* The file starts with the magic and the version; the payload follows at byte 16 (8-aligned, so
 * the arrays can be used where they lie): each set's arrays, then the set table, then the
 * trailer. Everything is appended in order, so a corpus streams to disk as it is tokenized. */
#define CACHE_START 16
#define CACHE_TABLE_ENTRY 48
#define CACHE_TRAILER 48
_Static_assert(CACHE_START + CACHE_TRAILER == DATA_CACHE_MIN_BYTES, "the smallest entry");

_Static_assert(sizeof(size_t) == 8, "row offsets are used in place as 64-bit integers");

static uint64_t pad8(uint64_t n) { return (8 - (n & 7)) & 7; }

/* The bytes of a set's arrays (ids, padding, offsets, lengths, len_a, labels, width targets a
 * row, padding), or UINT64_MAX when the counts are too large to be real. */
static uint64_t set_bytes(uint64_t n, uint64_t n_ids, uint32_t width) {
    if (n > INT32_MAX || n_ids > (UINT64_MAX >> 8) || width > DATA_CACHE_MAX_TARGET_WIDTH) return UINT64_MAX;
    const uint64_t rest = (n + 1) * 8 + n * 4 * (3 + (uint64_t)width);
    return n_ids * 4 + pad8(n_ids * 4) + rest + pad8(rest);
}

struct data_cache_writer {
    rt_atomic_file *file; /* the entry being written; NULL: into mem */
    unsigned char *mem;   /* the whole file, when it is kept in memory */
    size_t mem_len, mem_cap;
    uLong crc, adl;              /* over the payload so far */
    uint64_t at;                 /* payload bytes so far */
    uint64_t set_start, set_ids; /* the set being written */
    int sets_done;
    unsigned char *table; /* CACHE_TABLE_ENTRY bytes per finished set */
    bool io_failed;       /* a write failed: the entry is lost, the data may still be good */
};

static rt_status w_raw(data_cache_writer *w, const void *data, size_t n) {
    if (w->file) {
        rt_status st = rt_atomic_write(w->file, data, n);
        if (st != RT_OK) w->io_failed = true;
        return st;
    }
    if (w->mem_len + n > w->mem_cap) {
        w->mem_cap = (w->mem_len + n) * 2;
        w->mem = rt_xrealloc(w->mem, w->mem_cap);
    }
    memcpy(w->mem + w->mem_len, data, n);
    w->mem_len += n;
    return RT_OK;
}

void data_cache_checksums_add(unsigned long *crc, unsigned long *adl, const void *bytes, uint64_t n) {
    const unsigned char *p = bytes;
    for (uint64_t off = 0; off < n; off += 1u << 30) { /* (zlib restarts a checksum given no bytes) */
        const uInt chunk = (uInt)(n - off < (1u << 30) ? n - off : (1u << 30));
        *crc = crc32(*crc, p + off, chunk);
        *adl = adler32(*adl, p + off, chunk);
    }
}

/* Appends payload bytes, summing them into the checksums. */
static rt_status w_put(data_cache_writer *w, const void *data, size_t n) {
    if (n == 0) return RT_OK;
    data_cache_checksums_add(&w->crc, &w->adl, data, n);
    w->at += n;
    return w_raw(w, data, n);
}

static rt_status w_pad8(data_cache_writer *w) {
    static const unsigned char zeros[8];
    return w_put(w, zeros, (size_t)pad8(w->at));
}

/* Starts an entry at path (NULL: in memory). */
rt_status data_cache_writer_begin(const char *path, data_cache_writer **out) {
    data_cache_writer *w = rt_xcalloc(1, sizeof *w);
    w->crc = crc32(0L, Z_NULL, 0);
    w->adl = adler32(0L, Z_NULL, 0);
    rt_status st = path ? rt_atomic_begin(path, &w->file) : RT_OK;
    const uint32_t version = CACHE_VERSION, zero = 0;
    if (st == RT_OK) st = w_raw(w, CACHE_MAGIC, 8);
    if (st == RT_OK) st = w_raw(w, &version, 4);
    if (st == RT_OK) st = w_raw(w, &zero, 4);
    if (st != RT_OK) {
        rt_atomic_abort(w->file);
        free(w);
        return st;
    }
    *out = w;
    return RT_OK;
}

void data_cache_writer_free(data_cache_writer *w) {
    if (!w) return;
    rt_atomic_abort(w->file);
    free(w->mem);
    free(w->table);
    free(w);
}

rt_status data_cache_write_ids(data_cache_writer *w, const int32_t *ids, size_t n) {
    w->set_ids += n;
    return w_put(w, ids, n * sizeof *ids);
}

/* Appends n row offsets rebased to the set's first id (base), through a staging buffer. */
static rt_status w_offsets(data_cache_writer *w, const size_t *offs, size_t n, uint64_t base) {
    uint64_t stage[4096];
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < 4096 && i < n; k++, i++) stage[k] = (uint64_t)offs[i] - base;
        rt_status st = w_put(w, stage, k * 8);
        if (st != RT_OK) return st;
    }
    return RT_OK;
}

rt_status data_cache_end_set(data_cache_writer *w, const data_tokenized *rows) {
    rt_status st = RT_OK;
    const uint64_t base = rows->n ? rows->offsets[0] : 0, n_ids = rows->n ? rows->offsets[rows->n] - base : 0;
    RT_CHECK(n_ids == w->set_ids, "cache set %d: its rows cover %llu ids, %llu were written", w->sets_done,
             (unsigned long long)n_ids, (unsigned long long)w->set_ids);
    RT_TRY(w_pad8(w));
    const size_t no_rows = 0; /* an empty set still has its one offset, 0 */
    RT_TRY(w_offsets(w, rows->n ? rows->offsets : &no_rows, rows->n + 1, base));
    RT_TRY(w_put(w, rows->lengths, rows->n * sizeof(int32_t)));
    RT_TRY(w_put(w, rows->len_a, rows->n * sizeof(int32_t)));
    RT_TRY(w_put(w, rows->labels, rows->n * sizeof(int32_t)));
    if (rows->targets) RT_TRY(w_put(w, rows->targets, rows->n * (size_t)rows->target_width * sizeof(float)));
    RT_TRY(w_pad8(w));
    unsigned char e[CACHE_TABLE_ENTRY] = {0};
    const uint64_t n = rows->n, n_trunc = rows->n_truncated;
    const uint32_t max_len = (uint32_t)rows->max_len, longest = (uint32_t)rows->longest,
                   flags = (rows->segments ? FLAG_SEGMENTS : 0) | (rows->targets ? FLAG_TARGETS : 0),
                   width = rows->targets ? (uint32_t)rows->target_width : 0;
    memcpy(e, &w->set_start, 8);
    memcpy(e + 8, &n, 8);
    memcpy(e + 16, &n_ids, 8);
    memcpy(e + 24, &max_len, 4);
    memcpy(e + 28, &longest, 4);
    memcpy(e + 32, &n_trunc, 8);
    memcpy(e + 40, &flags, 4);
    memcpy(e + 44, &width, 4);
    w->table = rt_xrealloc(w->table, (size_t)(w->sets_done + 1) * CACHE_TABLE_ENTRY);
    memcpy(w->table + (size_t)w->sets_done * CACHE_TABLE_ENTRY, e, CACHE_TABLE_ENTRY);
    w->sets_done++;
    w->set_start = w->at;
    w->set_ids = 0;
fail:
    return st;
}

rt_status data_cache_write_set(data_cache_writer *w, const data_tokenized *d) {
    rt_status st = d->n ? data_cache_write_ids(w, d->ids + d->offsets[0], d->offsets[d->n] - d->offsets[0]) : RT_OK;
    return st == RT_OK ? data_cache_end_set(w, d) : st;
}

rt_status data_cache_writer_finish(data_cache_writer *w, const data_cache_key *key, int n_sets, void **bytes,
                                   size_t *len) {
    rt_status st = RT_OK;
    RT_CHECK(w->sets_done == n_sets && w->set_ids == 0, "cache: %d sets ended of %d", w->sets_done, n_sets);
    if (n_sets) RT_TRY(w_put(w, w->table, (size_t)n_sets * CACHE_TABLE_ENTRY));
    unsigned char t[CACHE_TRAILER] = {0};
    const uint32_t count = (uint32_t)n_sets, c32 = (uint32_t)w->crc, a32 = (uint32_t)w->adl;
    memcpy(t, &count, 4);
    memcpy(t + 8, &w->at, 8);
    memcpy(t + 16, &c32, 4);
    memcpy(t + 20, &a32, 4);
    memcpy(t + 24, key->h, 16);
    memcpy(t + 40, CACHE_END, 8);
    RT_TRY(w_raw(w, t, sizeof t));
    if (w->file) {
        rt_atomic_file *f = w->file;
        w->file = NULL;
        st = rt_atomic_commit(f);
        if (st != RT_OK) w->io_failed = true;
    } else {
        *bytes = w->mem;
        *len = w->mem_len;
        w->mem = NULL;
    }
fail:
    return st;
}

rt_status data_cache_serialize(const data_cache_key *key, const data_tokenized *sets, int n_sets, void **bytes,
                               size_t *len) {
    rt_status st = RT_OK;
    data_cache_writer *w = NULL;
    RT_TRY(data_cache_writer_begin(NULL, &w));
    for (int s = 0; s < n_sets; s++) RT_TRY(data_cache_write_set(w, &sets[s]));
    st = data_cache_writer_finish(w, key, n_sets, bytes, len);
fail:
    data_cache_writer_free(w);
    return st;
}

static uint64_t get_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t get_u32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Set s, described by table entry e, whose arrays start at payload byte `start` and must end
 * by `limit`; d's arrays point into the payload p. *end is where they end. */
static rt_status parse_set(const char *name, int s, const unsigned char *p, const unsigned char *e, uint64_t start,
                           uint64_t limit, data_tokenized *d, uint64_t *end) {
    rt_status st = RT_OK;
    const uint64_t at = get_u64(e), n = get_u64(e + 8), n_ids = get_u64(e + 16), n_trunc = get_u64(e + 32);
    const uint32_t max_len = get_u32(e + 24), longest = get_u32(e + 28), flags = get_u32(e + 40),
                   width = get_u32(e + 44);
    if (at != start)
        RT_FAIL(RT_ERR_FORMAT, "%s: set %d starts at byte %llu, expected %llu", name, s, (unsigned long long)at,
                (unsigned long long)start);
    const bool has_targets = flags & FLAG_TARGETS;
    if (n > INT32_MAX || max_len > INT32_MAX || longest > max_len || n_trunc > n || (flags & ~3u) ||
        has_targets != (width > 0) || width > DATA_CACHE_MAX_TARGET_WIDTH)
        RT_FAIL(RT_ERR_FORMAT,
                "%s: set %d: bad header (%llu rows, max_len %u, longest %u, flags %#x, %u targets a row)", name, s,
                (unsigned long long)n, max_len, longest, flags, width);
    const uint64_t size = set_bytes(n, n_ids, width);
    if (size == UINT64_MAX || size > limit - start)
        RT_FAIL(RT_ERR_FORMAT, "%s: set %d: its arrays are cut short (%llu rows, %llu ids)", name, s,
                (unsigned long long)n, (unsigned long long)n_ids);
    const unsigned char *q = p + start;
    d->n = (size_t)n;
    d->ids = (int32_t *)q;
    q += n_ids * 4 + pad8(n_ids * 4);
    d->offsets = (size_t *)q;
    q += (n + 1) * 8;
    d->lengths = (int32_t *)q;
    d->len_a = d->lengths + n;
    d->labels = d->len_a + n;
    d->targets = has_targets ? (float *)(d->labels + n) : NULL;
    d->target_width = (int)width;
    d->segments = flags & FLAG_SEGMENTS;
    d->max_len = (int)max_len;
    d->longest = (int)longest;
    d->n_truncated = (size_t)n_trunc;
    *end = start + size;
    int32_t seen_longest = 0;
    for (size_t i = 0; i <= (size_t)n; i++) {
        const uint64_t o = d->offsets[i];
        if (o > n_ids || (i > 0 && o < d->offsets[i - 1]) || (i == 0 && o != 0) || (i == (size_t)n && o != n_ids))
            RT_FAIL(RT_ERR_FORMAT, "%s: set %d: row offset %zu is %llu, out of order or past the %llu ids", name, s, i,
                    (unsigned long long)o, (unsigned long long)n_ids);
        if (i == 0) continue;
        const uint64_t row = o - d->offsets[i - 1];
        const int32_t len = d->lengths[i - 1], a = d->len_a[i - 1];
        if (row != (uint64_t)len || len > (int32_t)max_len || a < 0 || a > len)
            RT_FAIL(RT_ERR_FORMAT, "%s: set %d: row %zu has %llu ids, length %d, segment A %d (max_len %u)", name, s,
                    i - 1, (unsigned long long)row, len, a, max_len);
        if (len > seen_longest) seen_longest = len;
    }
    if (seen_longest != (int32_t)longest)
        RT_FAIL(RT_ERR_FORMAT, "%s: set %d: its longest row has %d ids, the header says %u", name, s, seen_longest,
                longest);
fail:
    return st;
}

/* Parses the file in bytes into sets that point into it and share `backing` (one reference
 * each; the caller keeps its own). */
rt_status data_cache_parse_into(const char *name, const unsigned char *p, size_t len, const data_cache_key *key,
                                int n_sets, data_backing *backing, data_tokenized *sets) {
    rt_status st = RT_OK;
    for (int s = 0; s < n_sets; s++) memset(&sets[s], 0, sizeof sets[s]);
    if (len < CACHE_START + CACHE_TRAILER || memcmp(p, CACHE_MAGIC, 8) != 0)
        RT_FAIL(RT_ERR_FORMAT, "%s: not a tunezoo dataset cache (%zu bytes, no TZDSET header)", name, len);
    if ((uintptr_t)p % 8 != 0) RT_FAIL(RT_ERR_USAGE, "%s: the bytes are not 8-byte aligned in memory", name);
    const uint32_t version = get_u32(p + 8);
    if (version != CACHE_VERSION || get_u32(p + 12))
        RT_FAIL(RT_ERR_FORMAT, "%s: format version %u, expected %u", name, version, CACHE_VERSION);
    const unsigned char *t = p + len - CACHE_TRAILER;
    const uint32_t count = get_u32(t), c32 = get_u32(t + 16), a32 = get_u32(t + 20);
    const uint64_t payload_len = get_u64(t + 8), h0 = get_u64(t + 24), h1 = get_u64(t + 32);
    if (memcmp(t + 40, CACHE_END, 8) != 0)
        RT_FAIL(RT_ERR_FORMAT, "%s: truncated or unfinished (%zu bytes, no trailer at the end)", name, len);
    if (get_u32(t + 4)) RT_FAIL(RT_ERR_FORMAT, "%s: the trailer's reserved bytes are not 0", name);
    if (count != (uint32_t)n_sets) RT_FAIL(RT_ERR_FORMAT, "%s: %u sets, expected %d", name, count, n_sets);
    if (key && (h0 != key->h[0] || h1 != key->h[1])) RT_FAIL(RT_ERR_FORMAT, "%s: made for another key", name);
    const uint64_t have = len - CACHE_START - CACHE_TRAILER;
    if (payload_len != have)
        RT_FAIL(RT_ERR_FORMAT, "%s: truncated or extended: %llu payload bytes, the trailer says %llu", name,
                (unsigned long long)have, (unsigned long long)payload_len);
    const unsigned char *payload = p + CACHE_START;
    uLong crc = crc32(0L, Z_NULL, 0), adl = adler32(0L, Z_NULL, 0);
    data_cache_checksums_add(&crc, &adl, payload, payload_len);
    if ((uint32_t)crc != c32 || (uint32_t)adl != a32) RT_FAIL(RT_ERR_FORMAT, "%s: checksum mismatch (damaged)", name);
    if ((uint64_t)n_sets * CACHE_TABLE_ENTRY > payload_len)
        RT_FAIL(RT_ERR_FORMAT, "%s: %llu payload bytes cannot hold the table of %d sets", name,
                (unsigned long long)payload_len, n_sets);
    const uint64_t table = payload_len - (uint64_t)n_sets * CACHE_TABLE_ENTRY;
    uint64_t at = 0;
    for (int s = 0; s < n_sets; s++) {
        RT_TRY(parse_set(name, s, payload, payload + table + (size_t)s * CACHE_TABLE_ENTRY, at, table, &sets[s], &at));
        sets[s].backing = backing;
        backing->refs++;
    }
    if (at != table)
        RT_FAIL(RT_ERR_FORMAT, "%s: %llu bytes between the last set and the table", name,
                (unsigned long long)(table - at));
    return RT_OK;
fail:
    for (int s = 0; s < n_sets; s++) {
        if (!sets[s].backing) memset(&sets[s], 0, sizeof sets[s]);
        data_tokenized_free(&sets[s]);
    }
    return st;
}

rt_status data_cache_parse(const char *name, const void *bytes, size_t len, const data_cache_key *key, int n_sets,
                           data_tokenized *sets) {
    data_backing *b = data_backing_new((void *)bytes, len, DATA_BACKING_BORROWED);
    rt_status st = data_cache_parse_into(name, bytes, len, key, n_sets, b, sets);
    data_backing_release(b);
    return st;
}

bool data_cache_writer_io_failed(const data_cache_writer *w) { return w->io_failed; }
