/* The tokenized cache (see data_cache.h). */
#include "data/data_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
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
#define CACHE_VERSION 1u
#define CACHE_HEADER 64
#define CACHE_SET_HEADER 40
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

typedef struct {
    unsigned char *p;
    size_t len, cap;
} out_buf;

static void put(out_buf *b, const void *data, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->p = rt_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void put_u32(out_buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(out_buf *b, uint64_t v) { put(b, &v, 8); }

rt_status data_cache_serialize(const data_cache_key *key, const data_tokenized *sets, int n_sets, void **bytes,
                               size_t *len) {
    out_buf b = {0};
    unsigned char header[CACHE_HEADER] = {0};
    put(&b, header, sizeof header); /* filled in at the end */
    for (int s = 0; s < n_sets; s++) {
        const data_tokenized *d = &sets[s];
        const uint64_t n_ids = d->n ? (uint64_t)d->offsets[d->n] : 0;
        put_u64(&b, d->n);
        put_u64(&b, n_ids);
        put_u32(&b, (uint32_t)d->max_len);
        put_u32(&b, (uint32_t)d->longest);
        put_u64(&b, d->n_truncated);
        put_u32(&b, (d->segments ? FLAG_SEGMENTS : 0) | (d->targets ? FLAG_TARGETS : 0));
        put_u32(&b, 0);
        for (size_t i = 0; i <= d->n; i++) put_u64(&b, d->n ? (uint64_t)d->offsets[i] : 0);
        put(&b, d->ids, n_ids * sizeof(int32_t));
        put(&b, d->lengths, d->n * sizeof(int32_t));
        put(&b, d->len_a, d->n * sizeof(int32_t));
        put(&b, d->labels, d->n * sizeof(int32_t));
        if (d->targets) put(&b, d->targets, d->n * sizeof(float));
    }
    const unsigned char *payload = b.p + CACHE_HEADER;
    const uint64_t payload_len = b.len - CACHE_HEADER;
    uLong crc = crc32(0L, Z_NULL, 0), adl = adler32(0L, Z_NULL, 0);
    for (uint64_t off = 0; off < payload_len; off += 1u << 30) { /* zlib takes uInt lengths */
        const uInt chunk = (uInt)(payload_len - off < (1u << 30) ? payload_len - off : (1u << 30));
        crc = crc32(crc, payload + off, chunk);
        adl = adler32(adl, payload + off, chunk);
    }
    const uint32_t version = CACHE_VERSION, count = (uint32_t)n_sets, c32 = (uint32_t)crc, a32 = (uint32_t)adl;
    memcpy(b.p, CACHE_MAGIC, 8);
    memcpy(b.p + 8, &version, 4);
    memcpy(b.p + 12, &count, 4);
    memcpy(b.p + 16, &payload_len, 8);
    memcpy(b.p + 24, &c32, 4);
    memcpy(b.p + 28, &a32, 4);
    memcpy(b.p + 32, key->h, 16);
    *bytes = b.p;
    *len = b.len;
    return RT_OK;
}

typedef struct {
    const unsigned char *p;
    size_t len, at;
} in_buf;

/* Takes n elements of size bytes each, or NULL when fewer are left (no overflow in the check). */
static const void *take(in_buf *b, uint64_t n, size_t size) {
    if (n > (b->len - b->at) / size) return NULL;
    const void *q = b->p + b->at;
    b->at += (size_t)n * size;
    return q;
}

static bool take_u64(in_buf *b, uint64_t *v) {
    const void *q = take(b, 1, 8);
    if (q) memcpy(v, q, 8);
    return q != NULL;
}

static bool take_u32(in_buf *b, uint32_t *v) {
    const void *q = take(b, 1, 4);
    if (q) memcpy(v, q, 4);
    return q != NULL;
}

/* One set from b into d (owned copies), checked for consistency. */
static rt_status parse_set(const char *name, int s, in_buf *b, data_tokenized *d) {
    rt_status st = RT_OK;
    uint64_t n = 0, n_ids = 0, n_trunc = 0;
    uint32_t max_len = 0, longest = 0, flags = 0, pad = 0;
    if (!take_u64(b, &n) || !take_u64(b, &n_ids) || !take_u32(b, &max_len) || !take_u32(b, &longest) ||
        !take_u64(b, &n_trunc) || !take_u32(b, &flags) || !take_u32(b, &pad))
        RT_FAIL(RT_ERR_FORMAT, "%s: set %d: its header is cut short", name, s);
    if (n > INT32_MAX || max_len > INT32_MAX || longest > max_len || n_trunc > n || (flags & ~3u) || pad)
        RT_FAIL(RT_ERR_FORMAT, "%s: set %d: bad header (%llu rows, max_len %u, longest %u, flags %#x)", name, s,
                (unsigned long long)n, max_len, longest, flags);
    const unsigned char *offs = take(b, n + 1, 8), *ids = take(b, n_ids, 4), *lens = take(b, n, 4),
                        *la = take(b, n, 4), *labels = take(b, n, 4);
    const unsigned char *targets = (flags & FLAG_TARGETS) ? take(b, n, 4) : NULL;
    if (!offs || !ids || !lens || !la || !labels || ((flags & FLAG_TARGETS) && !targets))
        RT_FAIL(RT_ERR_FORMAT, "%s: set %d: its arrays are cut short (%llu rows, %llu ids)", name, s,
                (unsigned long long)n, (unsigned long long)n_ids);
    d->n = (size_t)n;
    d->offsets = rt_xmalloc(((size_t)n + 1) * sizeof(size_t));
    d->ids = rt_xmalloc(((size_t)n_ids + 1) * sizeof(int32_t));
    d->lengths = rt_xmalloc(((size_t)n + 1) * sizeof(int32_t));
    d->len_a = rt_xmalloc(((size_t)n + 1) * sizeof(int32_t));
    d->labels = rt_xmalloc(((size_t)n + 1) * sizeof(int32_t));
    memcpy(d->ids, ids, (size_t)n_ids * 4);
    memcpy(d->lengths, lens, (size_t)n * 4);
    memcpy(d->len_a, la, (size_t)n * 4);
    memcpy(d->labels, labels, (size_t)n * 4);
    if (targets) {
        d->targets = rt_xmalloc(((size_t)n + 1) * sizeof(float));
        memcpy(d->targets, targets, (size_t)n * 4);
    }
    d->segments = flags & FLAG_SEGMENTS;
    d->max_len = (int)max_len;
    d->longest = (int)longest;
    d->n_truncated = (size_t)n_trunc;
    int32_t seen_longest = 0;
    for (size_t i = 0; i <= (size_t)n; i++) {
        uint64_t o;
        memcpy(&o, offs + i * 8, 8);
        if (o > n_ids || (i > 0 && o < d->offsets[i - 1]) || (i == 0 && o != 0) || (i == (size_t)n && o != n_ids))
            RT_FAIL(RT_ERR_FORMAT, "%s: set %d: row offset %zu is %llu, out of order or past the %llu ids", name, s, i,
                    (unsigned long long)o, (unsigned long long)n_ids);
        d->offsets[i] = (size_t)o;
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

rt_status data_cache_parse(const char *name, const void *bytes, size_t len, const data_cache_key *key, int n_sets,
                           data_tokenized *sets) {
    rt_status st = RT_OK;
    const unsigned char *p = bytes;
    for (int s = 0; s < n_sets; s++) memset(&sets[s], 0, sizeof sets[s]);
    uint32_t version, count, c32, a32;
    uint64_t payload_len, h[2];
    if (len < CACHE_HEADER || memcmp(p, CACHE_MAGIC, 8) != 0)
        RT_FAIL(RT_ERR_FORMAT, "%s: not a tunezoo dataset cache (%zu bytes, no TZDSET header)", name, len);
    memcpy(&version, p + 8, 4);
    memcpy(&count, p + 12, 4);
    memcpy(&payload_len, p + 16, 8);
    memcpy(&c32, p + 24, 4);
    memcpy(&a32, p + 28, 4);
    memcpy(h, p + 32, 16);
    for (int i = 48; i < CACHE_HEADER; i++)
        if (p[i]) RT_FAIL(RT_ERR_FORMAT, "%s: header byte %d is %u, expected 0", name, i, p[i]);
    if (version != CACHE_VERSION) RT_FAIL(RT_ERR_FORMAT, "%s: format version %u, expected %u", name, version, CACHE_VERSION);
    if (count != (uint32_t)n_sets) RT_FAIL(RT_ERR_FORMAT, "%s: %u sets, expected %d", name, count, n_sets);
    if (key && (h[0] != key->h[0] || h[1] != key->h[1])) RT_FAIL(RT_ERR_FORMAT, "%s: made for another key", name);
    if (payload_len != len - CACHE_HEADER)
        RT_FAIL(RT_ERR_FORMAT, "%s: truncated or extended: %zu payload bytes, the header says %llu", name,
                len - CACHE_HEADER, (unsigned long long)payload_len);
    uLong crc = crc32(0L, Z_NULL, 0), adl = adler32(0L, Z_NULL, 0);
    for (uint64_t off = 0; off < payload_len; off += 1u << 30) {
        const uInt chunk = (uInt)(payload_len - off < (1u << 30) ? payload_len - off : (1u << 30));
        crc = crc32(crc, p + CACHE_HEADER + off, chunk);
        adl = adler32(adl, p + CACHE_HEADER + off, chunk);
    }
    if ((uint32_t)crc != c32 || (uint32_t)adl != a32) RT_FAIL(RT_ERR_FORMAT, "%s: checksum mismatch (damaged)", name);
    in_buf b = {p, len, CACHE_HEADER};
    for (int s = 0; s < n_sets; s++) RT_TRY(parse_set(name, s, &b, &sets[s]));
    if (b.at != len) RT_FAIL(RT_ERR_FORMAT, "%s: %zu bytes left after the last set", name, len - b.at);
    return RT_OK;
fail:
    for (int s = 0; s < n_sets; s++) data_tokenized_free(&sets[s]);
    return st;
}

/* ---- on disk ---- */

/* *absent: there is no file at path (no error message then). */
static rt_status read_whole(const char *path, void **bytes, size_t *len, bool *absent) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    *absent = fd < 0 && errno == ENOENT;
    if (fd < 0) return rt_errorf(RT_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return rt_errorf(RT_ERR_IO, "%s: not a regular file", path);
    }
    unsigned char *p = rt_xmalloc((size_t)sb.st_size + 1);
    size_t got = 0;
    while (got < (size_t)sb.st_size) {
        ssize_t r = read(fd, p + got, (size_t)sb.st_size - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    *bytes = p;
    *len = got;
    return RT_OK;
}

static size_t rows_of(const data_tokenized *sets, int n_sets, int stride) {
    size_t n = 0;
    for (int s = 0; s < n_sets; s += stride) n += sets[s].n;
    return n;
}

/* The entry at path into sets; false when there is none, or after a warning (unless *warned)
 * that names what is wrong with the file (the caller then rebuilds it). */
static bool try_load(const char *path, const data_cache_key *key, int n_sets, data_tokenized *sets, bool *warned) {
    void *bytes = NULL;
    size_t len = 0;
    bool absent = false;
    rt_status st = read_whole(path, &bytes, &len, &absent);
    if (st == RT_OK) st = data_cache_parse(path, bytes, len, key, n_sets, sets);
    free(bytes);
    if (st != RT_OK && !absent && !*warned) {
        rt_log_warn("cache: %s; rebuilding it", rt_error_message());
        *warned = true;
    }
    return st == RT_OK;
}

rt_status data_cache_load_or_build(const char *dir, const data_cache_key *key, const char *what, int n_sets,
                                   int stride, data_cache_build_fn build, void *ctx, data_tokenized *sets) {
    rt_status st = RT_OK;
    char path[PATH_MAX], lock_path[PATH_MAX];
    int lock = -1;
    bool warned = false;
    if (stride < 1) stride = 1;
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
    RT_TRY(build(ctx, sets, n_sets));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (!dir) {
        rt_log_info("%s: tokenized %zu rows in %.2f s (no cache)", what, rows_of(sets, n_sets, stride), secs);
        goto done;
    }
    void *bytes = NULL;
    size_t len = 0;
    RT_TRY(data_cache_serialize(key, sets, n_sets, &bytes, &len));
    rt_status wst = ckpt_atomic_write_file(path, bytes, len);
    free(bytes);
    if (wst != RT_OK)
        rt_log_warn("cache: not saved (%s); the next run tokenizes again", rt_error_message());
    else
        rt_log_info("%s: tokenized %zu rows in %.2f s (cached as %s)", what, rows_of(sets, n_sets, stride), secs, path);
    goto done;
hit:
    rt_log_info("%s: cache hit: %s (%zu rows)", what, path, rows_of(sets, n_sets, stride));
done:
fail:
    if (lock >= 0) close(lock); /* releases the flock */
    return st;
}
