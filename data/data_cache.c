/* The tokenized cache (see data_cache.h). */
#include "data/data_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoints/ckpt_atomic.h"
#include "runtime/rt_fs.h"
#include "runtime/rt_log.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the cache file is little-endian and written with the host's byte order"
#endif

#define CACHE_MAGIC "TZDSET\0\1"
#define CACHE_VERSION 2u
#define CACHE_END "TZDS-END"
#define FLAG_SEGMENTS 1u
#define FLAG_TARGETS 2u

static const uint64_t fnv_prime = 0x100000001b3ull;

void data_cache_key_init(data_cache_key *k, const char *kind) {
    k->h[0] = 0xcbf29ce484222325ull; /* FNV-1a's offset basis, and a second stream's */
    k->h[1] = 0x84222325cbf29ce4ull;
    data_cache_key_str(k, kind);
}

void data_cache_key_bytes(data_cache_key *k, const void *bytes, size_t n) {
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; i++) {
        k->h[0] = (k->h[0] ^ p[i]) * fnv_prime;
        k->h[1] = (k->h[1] ^ (unsigned char)(p[i] + 0x5b)) * fnv_prime;
    }
}

void data_cache_key_int(data_cache_key *k, int64_t v) { data_cache_key_bytes(k, &v, sizeof v); }

void data_cache_key_str(data_cache_key *k, const char *s) {
    /* the length first, so that ("ab", "c") and ("a", "bc") differ; -1 for NULL */
    data_cache_key_int(k, s ? (int64_t)strlen(s) : -1);
    if (s) data_cache_key_bytes(k, s, strlen(s));
}

rt_status data_cache_key_file(data_cache_key *k, const char *path) {
    FILE *f = fopen(path, "rb");
    struct stat sb;
    if (!f || fstat(fileno(f), &sb) != 0) {
        rt_status st = rt_errorf(RT_ERR_IO, "%s: cannot read it for the cache key: %s", path, strerror(errno));
        if (f) fclose(f);
        return st;
    }
    uLong crc = crc32(0L, Z_NULL, 0), adl = adler32(0L, Z_NULL, 0);
    unsigned char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        crc = crc32(crc, buf, (uInt)got);
        adl = adler32(adl, buf, (uInt)got);
    }
    const bool bad = ferror(f);
    fclose(f);
    if (bad) return rt_errorf(RT_ERR_IO, "%s: read error while hashing it for the cache key", path);
    data_cache_key_str(k, path);
    data_cache_key_int(k, (int64_t)sb.st_size);
    data_cache_key_int(k, (int64_t)sb.st_mtim.tv_sec);
    data_cache_key_int(k, (int64_t)sb.st_mtim.tv_nsec);
    data_cache_key_int(k, (int64_t)crc);
    data_cache_key_int(k, (int64_t)adl);
    return RT_OK;
}

rt_status data_cache_key_tokenizer(data_cache_key *k, const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return rt_errorf(RT_ERR_IO, "%s: cannot read the tokenizer: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return data_cache_key_file(k, path);
    static const char *const names[] = {"tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", "spiece.model",
                                        "sentencepiece.bpe.model", "tokenizer_config.json",
                                        "special_tokens_map.json", "added_tokens.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", path, names[i]);
        if (stat(p, &sb) != 0) {
            data_cache_key_str(k, NULL); /* absent, which is part of the key too */
            continue;
        }
        rt_status st = data_cache_key_file(k, p);
        if (st != RT_OK) return st;
    }
    return RT_OK;
}

const char *data_cache_default_dir(void) {
    static char dir[PATH_MAX];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0] == '/')
        snprintf(dir, sizeof dir, "%s/tunezoo", xdg);
    else if (home && home[0])
        snprintf(dir, sizeof dir, "%s/.cache/tunezoo", home);
    else
        return NULL;
    return dir;
}

/* ---- the file format ---- */

/* The file starts with the magic and the version; the payload follows at byte 16 (8-aligned, so
 * the arrays can be used where they lie): each set's arrays, then the set table, then the
 * trailer. Everything is appended in order, so a corpus streams to disk as it is tokenized. */
#define CACHE_START 16
#define CACHE_TABLE_ENTRY 48
#define CACHE_TRAILER 48

_Static_assert(sizeof(size_t) == 8, "row offsets are used in place as 64-bit integers");

static uint64_t pad8(uint64_t n) { return (8 - (n & 7)) & 7; }

/* The bytes of a set's arrays (ids, padding, offsets, lengths, len_a, labels, targets, padding),
 * or UINT64_MAX when the counts are too large to be real. */
static uint64_t set_bytes(uint64_t n, uint64_t n_ids, bool targets) {
    if (n > INT32_MAX || n_ids > (UINT64_MAX >> 8)) return UINT64_MAX;
    const uint64_t rest = (n + 1) * 8 + n * 4 * (targets ? 4 : 3);
    return n_ids * 4 + pad8(n_ids * 4) + rest + pad8(rest);
}

struct data_cache_writer {
    ckpt_atomic_file *file;     /* the entry being written; NULL: into mem */
    unsigned char *mem;         /* the whole file, when it is kept in memory */
    size_t mem_len, mem_cap;
    uLong crc, adl;             /* over the payload so far */
    uint64_t at;                /* payload bytes so far */
    uint64_t set_start, set_ids; /* the set being written */
    int sets_done;
    unsigned char *table;       /* CACHE_TABLE_ENTRY bytes per finished set */
    bool io_failed;             /* a write failed: the entry is lost, the data may still be good */
};

static rt_status w_raw(data_cache_writer *w, const void *data, size_t n) {
    if (w->file) {
        rt_status st = ckpt_atomic_write(w->file, data, n);
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

/* Appends payload bytes, summing them into the checksums. */
static rt_status w_put(data_cache_writer *w, const void *data, size_t n) {
    if (n == 0) return RT_OK; /* (zlib restarts a checksum given no bytes) */
    const unsigned char *p = data;
    for (size_t off = 0; off < n; off += 1u << 30) { /* zlib takes uInt lengths */
        const uInt chunk = (uInt)(n - off < (1u << 30) ? n - off : (1u << 30));
        w->crc = crc32(w->crc, p + off, chunk);
        w->adl = adler32(w->adl, p + off, chunk);
    }
    w->at += n;
    return w_raw(w, data, n);
}

static rt_status w_pad8(data_cache_writer *w) {
    static const unsigned char zeros[8];
    return w_put(w, zeros, (size_t)pad8(w->at));
}

/* Starts an entry at path (NULL: in memory). */
static rt_status writer_begin(const char *path, data_cache_writer **out) {
    data_cache_writer *w = rt_xcalloc(1, sizeof *w);
    w->crc = crc32(0L, Z_NULL, 0);
    w->adl = adler32(0L, Z_NULL, 0);
    rt_status st = path ? ckpt_atomic_begin(path, &w->file) : RT_OK;
    const uint32_t version = CACHE_VERSION, zero = 0;
    if (st == RT_OK) st = w_raw(w, CACHE_MAGIC, 8);
    if (st == RT_OK) st = w_raw(w, &version, 4);
    if (st == RT_OK) st = w_raw(w, &zero, 4);
    if (st != RT_OK) {
        ckpt_atomic_abort(w->file);
        free(w);
        return st;
    }
    *out = w;
    return RT_OK;
}

static void writer_free(data_cache_writer *w) {
    if (!w) return;
    ckpt_atomic_abort(w->file);
    free(w->mem);
    free(w->table);
    free(w);
}

rt_status data_cache_write_ids(data_cache_writer *w, const int32_t *ids, size_t n) {
    w->set_ids += n;
    return w_put(w, ids, n * sizeof *ids);
}

/* Appends n values of v (each `size` bytes) through a staging buffer; shift is subtracted from
 * 8-byte values (row offsets, rebased to the set's first id). */
static rt_status w_array(data_cache_writer *w, const void *v, size_t n, size_t size, uint64_t shift) {
    if (size == 4 || n == 0) return w_put(w, v, n * size);
    uint64_t stage[4096];
    const size_t *offs = v;
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < 4096 && i < n; k++, i++) stage[k] = (uint64_t)offs[i] - shift;
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
    if (rows->n) {
        RT_TRY(w_array(w, rows->offsets, rows->n + 1, 8, base));
    } else {
        const uint64_t zero = 0;
        RT_TRY(w_put(w, &zero, 8));
    }
    RT_TRY(w_array(w, rows->lengths, rows->n, 4, 0));
    RT_TRY(w_array(w, rows->len_a, rows->n, 4, 0));
    RT_TRY(w_array(w, rows->labels, rows->n, 4, 0));
    if (rows->targets) RT_TRY(w_array(w, rows->targets, rows->n, 4, 0));
    RT_TRY(w_pad8(w));
    unsigned char e[CACHE_TABLE_ENTRY] = {0};
    const uint64_t n = rows->n, n_trunc = rows->n_truncated;
    const uint32_t max_len = (uint32_t)rows->max_len, longest = (uint32_t)rows->longest,
                   flags = (rows->segments ? FLAG_SEGMENTS : 0) | (rows->targets ? FLAG_TARGETS : 0);
    memcpy(e, &w->set_start, 8);
    memcpy(e + 8, &n, 8);
    memcpy(e + 16, &n_ids, 8);
    memcpy(e + 24, &max_len, 4);
    memcpy(e + 28, &longest, 4);
    memcpy(e + 32, &n_trunc, 8);
    memcpy(e + 40, &flags, 4);
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

/* Appends the table and the trailer. In memory, *bytes and *len take the file (the writer no
 * longer owns it); to a file, it is committed under its name. Frees w either way. */
static rt_status writer_finish(data_cache_writer *w, const data_cache_key *key, int n_sets, void **bytes,
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
        ckpt_atomic_file *f = w->file;
        w->file = NULL;
        st = ckpt_atomic_commit(f);
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
    RT_TRY(writer_begin(NULL, &w));
    for (int s = 0; s < n_sets; s++) RT_TRY(data_cache_write_set(w, &sets[s]));
    st = writer_finish(w, key, n_sets, bytes, len);
fail:
    writer_free(w);
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
                   pad = get_u32(e + 44);
    if (at != start)
        RT_FAIL(RT_ERR_FORMAT, "%s: set %d starts at byte %llu, expected %llu", name, s, (unsigned long long)at,
                (unsigned long long)start);
    if (n > INT32_MAX || max_len > INT32_MAX || longest > max_len || n_trunc > n || (flags & ~3u) || pad)
        RT_FAIL(RT_ERR_FORMAT, "%s: set %d: bad header (%llu rows, max_len %u, longest %u, flags %#x)", name, s,
                (unsigned long long)n, max_len, longest, flags);
    const bool has_targets = flags & FLAG_TARGETS;
    const uint64_t size = set_bytes(n, n_ids, has_targets);
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
static rt_status parse_into(const char *name, const unsigned char *p, size_t len, const data_cache_key *key,
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
    for (uint64_t off = 0; off < payload_len; off += 1u << 30) {
        const uInt chunk = (uInt)(payload_len - off < (1u << 30) ? payload_len - off : (1u << 30));
        crc = crc32(crc, payload + off, chunk);
        adl = adler32(adl, payload + off, chunk);
    }
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
    if (at != table) RT_FAIL(RT_ERR_FORMAT, "%s: %llu bytes between the last set and the table", name,
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
    rt_status st = parse_into(name, bytes, len, key, n_sets, b, sets);
    data_backing_release(b);
    return st;
}

/* ---- on disk ---- */

static size_t rows_of(const data_tokenized *sets, int n_sets, int stride) {
    size_t n = 0;
    for (int s = 0; s < n_sets; s += stride) n += sets[s].n;
    return n;
}

/* The entry at path, mapped read-only, into sets; false when there is none, or after a warning
 * (unless *warned) that names what is wrong with the file (the caller then rebuilds it). Entries
 * are replaced by rename, never changed in place, so a mapped one cannot shrink under us. */
static bool try_load(const char *path, const data_cache_key *key, int n_sets, data_tokenized *sets, bool *warned) {
    rt_status st = RT_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return false;
    struct stat sb;
    if (fd < 0)
        st = rt_errorf(RT_ERR_IO, "%s: %s", path, strerror(errno));
    else if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        st = rt_errorf(RT_ERR_IO, "%s: not a regular file", path);
    else if ((uint64_t)sb.st_size < CACHE_START + CACHE_TRAILER)
        st = rt_errorf(RT_ERR_FORMAT, "%s: truncated (%lld bytes)", path, (long long)sb.st_size);
    void *addr = MAP_FAILED;
    if (st == RT_OK) {
        addr = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (addr == MAP_FAILED) st = rt_errorf(RT_ERR_IO, "%s: cannot map it: %s", path, strerror(errno));
    }
    if (fd >= 0) close(fd);
    if (st == RT_OK) {
        data_backing *b = data_backing_new(addr, (size_t)sb.st_size, DATA_BACKING_MAPPED);
        st = parse_into(path, addr, (size_t)sb.st_size, key, n_sets, b, sets);
        data_backing_release(b); /* the sets hold it now, or nobody does and it is unmapped */
    }
    if (st != RT_OK && !*warned) {
        rt_log_warn("cache: %s; rebuilding it", rt_error_message());
        *warned = true;
    }
    return st == RT_OK;
}

/* Runs the stream into memory and parses the result into sets (no cache file). */
static rt_status stream_in_memory(const data_cache_key *key, int n_sets, data_cache_stream_fn stream, void *ctx,
                                  data_tokenized *sets) {
    rt_status st = RT_OK;
    data_cache_writer *w = NULL;
    void *bytes = NULL;
    size_t len = 0;
    RT_TRY(writer_begin(NULL, &w));
    RT_TRY(stream(ctx, w, n_sets));
    RT_TRY(writer_finish(w, key, n_sets, &bytes, &len));
    data_backing *b = data_backing_new(bytes, len, DATA_BACKING_MALLOC);
    st = parse_into("the tokenized data", bytes, len, key, n_sets, b, sets);
    data_backing_release(b);
fail:
    writer_free(w);
    return st;
}

/* Runs the stream into the entry at path. *io_failed: the entry could not be written (the data
 * itself may be fine). */
static rt_status stream_to_file(const char *path, const data_cache_key *key, int n_sets, data_cache_stream_fn stream,
                                void *ctx, bool *io_failed) {
    rt_status st = RT_OK;
    data_cache_writer *w = NULL;
    *io_failed = false;
    if ((st = writer_begin(path, &w)) != RT_OK) {
        *io_failed = true;
        return st;
    }
    st = stream(ctx, w, n_sets);
    if (st == RT_OK) st = writer_finish(w, key, n_sets, NULL, NULL);
    *io_failed = w->io_failed;
    writer_free(w);
    return st;
}

rt_status data_cache_load_or_stream(const char *dir, const data_cache_key *key, const char *what, int n_sets,
                                    int stride, data_cache_stream_fn stream, void *ctx, data_tokenized *sets) {
    rt_status st = RT_OK;
    char path[PATH_MAX], lock_path[PATH_MAX];
    int lock = -1;
    bool warned = false;
    if (stride < 1) stride = 1;
    for (int s = 0; s < n_sets; s++) memset(&sets[s], 0, sizeof sets[s]);
    struct timespec t0, t1;
    if (dir) {
        snprintf(path, sizeof path, "%s/%016llx%016llx.tzds", dir, (unsigned long long)key->h[0],
                 (unsigned long long)key->h[1]);
        snprintf(lock_path, sizeof lock_path, "%.*s.lock", (int)(strlen(path) - 5), path);
        if (try_load(path, key, n_sets, sets, &warned)) goto hit;
        if ((st = rt_make_dirs(dir, "--cache-dir")) != RT_OK) {
            rt_log_warn("cache: %s; tokenizing without it", rt_error_message());
            dir = NULL;
            st = RT_OK;
        }
    }
    if (dir) {
        /* one builder per key: the others wait here, then load what it wrote */
        lock = open(lock_path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (lock < 0 || flock(lock, LOCK_EX) != 0)
            rt_log_warn("cache: %s: cannot lock (%s); building without the lock", lock_path, strerror(errno));
        else if (try_load(path, key, n_sets, sets, &warned)) /* another run may have built it meanwhile */
            goto hit;
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (dir) {
        bool io_failed = false;
        st = stream_to_file(path, key, n_sets, stream, ctx, &io_failed);
        if (st == RT_OK && !try_load(path, key, n_sets, sets, &warned)) {
            /* written but not readable back (a filesystem that cannot map files, say) */
            st = rt_errorf(RT_ERR_IO, "%s: written, but it does not read back%s", path,
                           warned ? " (see the warning above)" : "");
            io_failed = true;
        }
        if (st != RT_OK && !io_failed) goto fail;
        if (st != RT_OK) { /* a read-only folder or a full disk: the run goes on without the cache */
            rt_log_warn("cache: not saved (%s); the next run tokenizes again", rt_error_message());
            dir = NULL;
            st = RT_OK;
        }
    }
    if (!dir) RT_TRY(stream_in_memory(key, n_sets, stream, ctx, sets));
#ifdef __GLIBC__
    malloc_trim(0); /* the tokenizers' freed pieces: back to the system, not kept for the run */
#endif
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (dir)
        rt_log_info("%s: tokenized %zu rows in %.2f s (cached as %s)", what, rows_of(sets, n_sets, stride), secs, path);
    else
        rt_log_info("%s: tokenized %zu rows in %.2f s (no cache)", what, rows_of(sets, n_sets, stride), secs);
    goto done;
hit:
    rt_log_info("%s: cache hit: %s (%zu rows)", what, path, rows_of(sets, n_sets, stride));
done:
fail:
    if (lock >= 0) close(lock); /* releases the flock */
    return st;
}

/* load_or_build as a stream: the sets are built in memory, then written as they are. */
typedef struct {
    data_cache_build_fn build;
    void *ctx;
} build_stream;

static rt_status build_then_write(void *ctx, data_cache_writer *w, int n_sets) {
    const build_stream *b = ctx;
    rt_status st = RT_OK;
    data_tokenized *built = rt_xcalloc((size_t)n_sets, sizeof *built);
    RT_TRY(b->build(b->ctx, built, n_sets));
    for (int s = 0; s < n_sets; s++) RT_TRY(data_cache_write_set(w, &built[s]));
fail:
    for (int s = 0; s < n_sets; s++) data_tokenized_free(&built[s]);
    free(built);
    return st;
}

rt_status data_cache_load_or_build(const char *dir, const data_cache_key *key, const char *what, int n_sets,
                                   int stride, data_cache_build_fn build, void *ctx, data_tokenized *sets) {
    build_stream b = {build, ctx};
    return data_cache_load_or_stream(dir, key, what, n_sets, stride, build_then_write, &b, sets);
}
