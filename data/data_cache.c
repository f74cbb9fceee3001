/* The tokenized cache (see data_cache.h). */
#include "data/data_cache.h"
#include "data/data_cache_format.h"

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

#include "runtime/base/rt_atomic.h"
#include "runtime/base/rt_fs.h"
#include "runtime/base/rt_log.h"
#include "runtime/base/rt_mapped.h"

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
    if (S_ISDIR(sb.st_mode)) {
        fclose(f);
        return rt_errorf(RT_ERR_IO, "%s: a directory, not a file", path);
    }
    uLong crc = crc32(0L, Z_NULL, 0), adl = adler32(0L, Z_NULL, 0);
    unsigned char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) data_cache_checksums_add(&crc, &adl, buf, got);
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
    static const char *const names[] = {"tokenizer.json",
                                        "vocab.txt",
                                        "vocab.json",
                                        "merges.txt",
                                        "spiece.model",
                                        "sentencepiece.bpe.model",
                                        "tokenizer_config.json",
                                        "special_tokens_map.json",
                                        "added_tokens.json"};
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
    else if ((uint64_t)sb.st_size < DATA_CACHE_MIN_BYTES)
        st = rt_errorf(RT_ERR_FORMAT, "%s: truncated (%lld bytes)", path, (long long)sb.st_size);
    void *addr = MAP_FAILED;
    if (st == RT_OK) {
        addr = rt_map_file(fd, (size_t)sb.st_size, path);
        if (addr == MAP_FAILED) st = rt_errorf(RT_ERR_IO, "%s: cannot map it: %s", path, strerror(errno));
    }
    if (fd >= 0) close(fd);
    if (st == RT_OK) {
        data_backing *b = data_backing_new(addr, (size_t)sb.st_size, DATA_BACKING_MAPPED);
        st = data_cache_parse_into(path, addr, (size_t)sb.st_size, key, n_sets, b, sets);
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
    RT_TRY(data_cache_writer_begin(NULL, &w));
    RT_TRY(stream(ctx, w, n_sets));
    RT_TRY(data_cache_writer_finish(w, key, n_sets, &bytes, &len));
    data_backing *b = data_backing_new(bytes, len, DATA_BACKING_MALLOC);
    st = data_cache_parse_into("the tokenized data", bytes, len, key, n_sets, b, sets);
    data_backing_release(b);
fail:
    data_cache_writer_free(w);
    return st;
}

/* Runs the stream into the entry at path. *io_failed: the entry could not be written (the data
 * itself may be fine). */
static rt_status stream_to_file(const char *path, const data_cache_key *key, int n_sets, data_cache_stream_fn stream,
                                void *ctx, bool *io_failed) {
    rt_status st = RT_OK;
    data_cache_writer *w = NULL;
    *io_failed = false;
    if ((st = data_cache_writer_begin(path, &w)) != RT_OK) {
        *io_failed = true;
        return st;
    }
    st = stream(ctx, w, n_sets);
    if (st == RT_OK) st = data_cache_writer_finish(w, key, n_sets, NULL, NULL);
    *io_failed = data_cache_writer_io_failed(w);
    data_cache_writer_free(w);
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
        /* holding the key's lock: its temporary files whose writer is gone are a killed build's */
        const char *base = strrchr(path, '/');
        (void)rt_atomic_remove_dead(dir, base ? base + 1 : path, NULL);
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

rt_status data_cache_load_or_build(const char *dir, const data_cache_key *key, const char *what, int n_sets, int stride,
                                   data_cache_build_fn build, void *ctx, data_tokenized *sets) {
    build_stream b = {build, ctx};
    return data_cache_load_or_stream(dir, key, what, n_sets, stride, build_then_write, &b, sets);
}
