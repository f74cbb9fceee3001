/* The .tzck container (layout in ckpt_native.h): a streaming writer on rt_atomic and an
 * mmap reader that validates every byte it will hand out. The reader treats the file as
 * untrusted: each length is checked against the bytes that remain before it is used, and
 * each count against what the table could hold, so a corrupt file cannot make it read out
 * of bounds or allocate without limit. */
#include "checkpoints/ckpt_name_index.h"
#include "checkpoints/ckpt_native.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoints/ckpt_pages.h"
#include "runtime/base/rt_atomic.h"
#include "runtime/base/rt_json.h"
#include "runtime/base/rt_mapped.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .tzck record data is little-endian and is read in place"
#endif

static const char nat_magic[8] = {'T', 'Z', 'C', 'K', 'P', 'T', 0, 0};
static const char nat_end_magic[8] = {'T', 'Z', 'C', 'K', 'E', 'N', 'D', 0};
#define NAT_HEADER_SIZE 24
#define NAT_FOOTER_SIZE 48
/* smallest table entry: name length, empty name, dtype, ndim, offset, length, crc */
#define NAT_MIN_RECORD (4 + 8 + 4 + 8 + 8 + 4)

/* Fuzzing builds (tests/fuzz/fuzz_ckpt_native.c) skip the CRC comparisons so that mutated
 * inputs reach the table parser behind them instead of all failing the first CRC. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define NAT_CRC_OK(got, want) ((void)(got), (void)(want), 1)
#else
#define NAT_CRC_OK(got, want) ((got) == (want))
#endif

/* zlib's crc32 takes a 32-bit length; feed it in pieces. */
static uLong nat_crc_serial(uLong c, const unsigned char *b, size_t n) {
    while (n) {
        uInt m = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, b, m);
        b += m;
        n -= m;
    }
    return c;
}

/* Large buffers in pieces on every thread, joined with crc32_combine: the checksum was a fifth
 * of an import's time on one core. Same value as the serial CRC. */
uint32_t ckpt_native_crc32(const void *p, size_t n) {
    enum { PIECES = 16 };
    const unsigned char *b = p;
    if (n < ((size_t)16 << 20)) return (uint32_t)nat_crc_serial(crc32(0L, Z_NULL, 0), b, n);
    uLong part[PIECES];
    size_t step = (n + PIECES - 1) / PIECES;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < PIECES; k++) {
        size_t lo = (size_t)k * step, hi = lo + step < n ? lo + step : n;
        part[k] = nat_crc_serial(crc32(0L, Z_NULL, 0), b + lo, hi > lo ? hi - lo : 0);
    }
    uLong c = part[0];
    for (int k = 1; k < PIECES; k++) {
        size_t lo = (size_t)k * step, hi = lo + step < n ? lo + step : n;
        if (hi > lo) c = crc32_combine(c, part[k], (z_off_t)(hi - lo));
    }
    return (uint32_t)c;
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* ---- writer ---- */

struct ckpt_native_writer {
    rt_atomic_file *af;
    char *path;
    unsigned char *table; /* serialized record table, grown as records are added */
    size_t table_len, table_cap;
    uint64_t n_records;
    char **names; /* for the duplicate check */
    uint32_t meta_crc;
    uint32_t last_crc; /* of the last record added */
};

static void tbl_put(ckpt_native_writer *w, const void *p, size_t n) {
    if (w->table_len + n > w->table_cap) {
        w->table_cap = (w->table_len + n) * 2 + 256;
        w->table = rt_xrealloc(w->table, w->table_cap);
    }
    memcpy(w->table + w->table_len, p, n);
    w->table_len += n;
}

static void nat_writer_free(ckpt_native_writer *w) {
    for (uint64_t i = 0; i < w->n_records; i++) free(w->names[i]);
    free(w->names);
    free(w->table);
    free(w->path);
    free(w);
}

rt_status ckpt_native_writer_begin(const char *path, const char *metadata_json, ckpt_native_writer **out) {
    rt_status st = RT_OK;
    cJSON *check = NULL;
    *out = NULL;
    ckpt_native_writer *w = rt_xcalloc(1, sizeof *w);
    w->path = rt_xstrdup(path);
    const char *meta = metadata_json ? metadata_json : "{}";
    size_t mlen = strlen(meta);
    {
        size_t nlen = strlen(path) + 16;
        char *label = rt_xmalloc(nlen);
        snprintf(label, nlen, "%s metadata", path);
        st = rt_json_parse(meta, mlen, label, &check);
        free(label);
        if (st != RT_OK) goto fail;
    }
    unsigned char hdr[NAT_HEADER_SIZE];
    memcpy(hdr, nat_magic, 8);
    put_u32(hdr + 8, CKPT_NATIVE_VERSION);
    put_u32(hdr + 12, 0);
    put_u64(hdr + 16, mlen);
    w->meta_crc = ckpt_native_crc32(meta, mlen);
    RT_TRY(rt_atomic_begin(path, &w->af));
    RT_TRY(rt_atomic_write(w->af, hdr, sizeof hdr));
    RT_TRY(rt_atomic_write(w->af, meta, mlen));
    cJSON_Delete(check);
    *out = w;
    return RT_OK;
fail:
    cJSON_Delete(check);
    ckpt_native_writer_abort(w);
    return st;
}

rt_status ckpt_native_writer_add(ckpt_native_writer *w, const char *name, rt_dtype dtype, int ndim, const size_t *shape,
                                 const void *data) {
    rt_status st = RT_OK;
    RT_CHECK(name != NULL && strlen(name) < (1u << 20), "record name");
    RT_CHECK(ndim >= 0 && ndim <= CKPT_MAX_DIMS, "record '%s' ndim=%d", name, ndim);
    RT_CHECK(dtype >= 0 && dtype < RT_DTYPE_COUNT, "record '%s' dtype=%d", name, (int)dtype);
    for (uint64_t i = 0; i < w->n_records; i++)
        RT_CHECK(strcmp(w->names[i], name) != 0, "duplicate record '%s' in %s", name, w->path);
    size_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        RT_CHECK(shape[d] == 0 || numel <= SIZE_MAX / shape[d], "record '%s' shape overflows", name);
        numel *= shape[d];
    }
    size_t esize = rt_dtype_size(dtype);
    RT_CHECK(numel <= SIZE_MAX / esize, "record '%s' size overflows", name);
    size_t nbytes = numel * esize;
    RT_CHECK(nbytes == 0 || data != NULL, "record '%s' has no data", name);

    RT_TRY(rt_atomic_pad(w->af, CKPT_NATIVE_ALIGN));
    uint64_t offset = rt_atomic_tell(w->af);
    RT_TRY(rt_atomic_write(w->af, data, nbytes));

    unsigned char b[8];
    uint32_t name_len = (uint32_t)strlen(name);
    put_u32(b, name_len);
    tbl_put(w, b, 4);
    tbl_put(w, name, name_len);
    char dt[8] = {0};
    memcpy(dt, rt_dtype_name(dtype), strlen(rt_dtype_name(dtype)));
    tbl_put(w, dt, 8);
    put_u32(b, (uint32_t)ndim);
    tbl_put(w, b, 4);
    for (int d = 0; d < ndim; d++) {
        put_u64(b, shape[d]);
        tbl_put(w, b, 8);
    }
    put_u64(b, offset);
    tbl_put(w, b, 8);
    put_u64(b, nbytes);
    tbl_put(w, b, 8);
    w->last_crc = ckpt_native_crc32(data, nbytes);
    put_u32(b, w->last_crc);
    tbl_put(w, b, 4);
    w->names = rt_xrealloc(w->names, (size_t)(w->n_records + 1) * sizeof *w->names);
    w->names[w->n_records++] = rt_xstrdup(name);
fail:
    return st;
}

rt_status ckpt_native_writer_commit(ckpt_native_writer *w) {
    rt_status st = RT_OK;
    RT_TRY(rt_atomic_pad(w->af, CKPT_NATIVE_ALIGN));
    uint64_t table_offset = rt_atomic_tell(w->af);
    RT_TRY(rt_atomic_write(w->af, w->table, w->table_len));
    unsigned char foot[NAT_FOOTER_SIZE];
    put_u64(foot, table_offset);
    put_u64(foot + 8, w->table_len);
    put_u64(foot + 16, w->n_records);
    put_u32(foot + 24, ckpt_native_crc32(w->table, w->table_len));
    put_u32(foot + 28, w->meta_crc);
    put_u64(foot + 32, 0);
    memcpy(foot + 40, nat_end_magic, 8);
    RT_TRY(rt_atomic_write(w->af, foot, sizeof foot));
    st = rt_atomic_commit(w->af);
    w->af = NULL;
fail:
    ckpt_native_writer_abort(w);
    return st;
}

void ckpt_native_writer_abort(ckpt_native_writer *w) {
    if (!w) return;
    rt_atomic_abort(w->af);
    nat_writer_free(w);
}

/* ---- reader ---- */

typedef struct {
    char *name;
    rt_dtype dtype;
    int ndim;
    size_t shape[CKPT_MAX_DIMS];
    size_t numel;
    uint64_t offset, nbytes;
    uint32_t crc32;
} nat_entry;

struct ckpt_native_file {
    char *path;
    unsigned char *map;
    size_t map_size;
    char *metadata;
    nat_entry *entries; /* file order */
    size_t n;
    ckpt_name_index by_name; /* entries by name */
};

/* The writer's padding is zeros and shorter than the alignment; checking that means every
 * byte of a file is covered by a check (CRC, bound or this), so no flipped bit goes unseen. */
static int nat_is_padding(const unsigned char *p, uint64_t n) {
    if (n >= CKPT_NATIVE_ALIGN) return 0;
    for (uint64_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

/* Parses table entry i at tbl[*pos], at most len bytes, into e; checks it against the data
 * region [data_begin, data_end) and the end of the previous record. */
static rt_status nat_parse_entry(const ckpt_native_file *f, const unsigned char *tbl, size_t len, size_t *pos, size_t i,
                                 uint64_t data_begin, uint64_t data_end, uint64_t prev_end, nat_entry *e) {
    const char *path = f->path;
    size_t p = *pos;
#define NEED(n, what)                                                                                           \
    do {                                                                                                        \
        if (len - p < (size_t)(n))                                                                              \
            return rt_errorf(RT_ERR_FORMAT, "%s: record table is cut short in record %zu (%s)", path, i, what); \
    } while (0)
    NEED(4, "name length");
    uint32_t name_len = get_u32(tbl + p);
    p += 4;
    NEED(name_len, "name");
    if (memchr(tbl + p, 0, name_len))
        return rt_errorf(RT_ERR_FORMAT, "%s: record %zu has a NUL byte in its name", path, i);
    e->name = rt_xmalloc((size_t)name_len + 1);
    memcpy(e->name, tbl + p, name_len);
    e->name[name_len] = '\0';
    p += name_len;
    NEED(8 + 4, "dtype and ndim");
    char dt[9];
    memcpy(dt, tbl + p, 8);
    dt[8] = '\0';
    p += 8;
    if (!rt_dtype_from_name(dt, &e->dtype))
        return rt_errorf(RT_ERR_FORMAT, "%s: record '%s' has an unknown dtype", path, e->name);
    uint32_t ndim = get_u32(tbl + p);
    p += 4;
    if (ndim > CKPT_MAX_DIMS)
        return rt_errorf(RT_ERR_FORMAT, "%s: record '%s' has %u dimensions (at most %d)", path, e->name, ndim,
                         CKPT_MAX_DIMS);
    e->ndim = (int)ndim;
    NEED((size_t)ndim * 8 + 8 + 8 + 4, "shape, offset, length, crc");
    e->numel = 1;
    int overflow = 0;
    for (uint32_t d = 0; d < ndim; d++) {
        uint64_t s = get_u64(tbl + p);
        p += 8;
        if (s > SIZE_MAX) overflow = 1;
        e->shape[d] = (size_t)s;
    }
    /* a zero dimension makes numel 0 whatever the others say */
    for (uint32_t d = 0; d < ndim; d++)
        if (e->shape[d] == 0) e->numel = 0;
    if (e->numel) {
        for (uint32_t d = 0; d < ndim && !overflow; d++) {
            if (e->numel > SIZE_MAX / e->shape[d])
                overflow = 1;
            else
                e->numel *= e->shape[d];
        }
    }
    size_t esize = rt_dtype_size(e->dtype);
    if (overflow || e->numel > SIZE_MAX / esize)
        return rt_errorf(RT_ERR_FORMAT, "%s: record '%s' has a shape whose size overflows", path, e->name);
    e->offset = get_u64(tbl + p);
    e->nbytes = get_u64(tbl + p + 8);
    uint32_t crc = get_u32(tbl + p + 16);
    e->crc32 = crc;
    p += 20;
    if (e->nbytes != (uint64_t)e->numel * esize) {
        char sbuf[160];
        return rt_errorf(RT_ERR_FORMAT, "%s: record '%s': %s %s needs %zu bytes, the table says %llu", path, e->name,
                         rt_dtype_name(e->dtype), ckpt_shape_str(e->ndim, e->shape, sbuf, sizeof sbuf),
                         e->numel * esize, (unsigned long long)e->nbytes);
    }
    if (e->offset % CKPT_NATIVE_ALIGN || e->offset < data_begin || e->offset < prev_end || e->offset > data_end ||
        e->nbytes > data_end - e->offset)
        return rt_errorf(
            RT_ERR_FORMAT,
            "%s: record '%s': bytes [%llu, +%llu) lie outside the data region or overlap the previous record", path,
            e->name, (unsigned long long)e->offset, (unsigned long long)e->nbytes);
    if (!nat_is_padding(f->map + prev_end, e->offset - prev_end))
        return rt_errorf(RT_ERR_FORMAT, "%s: record '%s': unexpected bytes before the record (corrupt padding)", path,
                         e->name);
    if (!NAT_CRC_OK(ckpt_native_crc32(f->map + e->offset, (size_t)e->nbytes), crc))
        return rt_errorf(RT_ERR_FORMAT, "%s: record '%s': CRC mismatch (the data is corrupt)", path, e->name);
    *pos = p;
    return RT_OK;
#undef NEED
}

rt_status ckpt_native_open(const char *path, ckpt_native_file **out) {
    rt_status st = RT_OK;
    int fd = -1;
    *out = NULL;
    ckpt_native_file *f = rt_xcalloc(1, sizeof *f);
    f->path = rt_xstrdup(path);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) RT_FAIL(RT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) RT_FAIL(RT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) RT_FAIL(RT_ERR_IO, "%s: not a regular file", path);
    size_t size = (size_t)sb.st_size;
    if (size < NAT_HEADER_SIZE)
        RT_FAIL(RT_ERR_FORMAT, "%s: file is %zu bytes, too short for a checkpoint header (truncated?)", path, size);
    void *m = rt_map_file(fd, size, path);
    if (m == MAP_FAILED) RT_FAIL(RT_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    f->map = m;
    f->map_size = size;
    close(fd);
    fd = -1;

    if (memcmp(f->map, nat_magic, 8) != 0) RT_FAIL(RT_ERR_FORMAT, "%s: not a tunezoo checkpoint (bad magic)", path);
    uint32_t version = get_u32(f->map + 8);
    if (version != CKPT_NATIVE_VERSION)
        RT_FAIL(RT_ERR_UNSUPPORTED, "%s: checkpoint version %u (this build reads version %d)", path, version,
                CKPT_NATIVE_VERSION);
    if (get_u32(f->map + 12) != 0)
        RT_FAIL(RT_ERR_UNSUPPORTED, "%s: checkpoint uses flags 0x%x that this build does not know", path,
                get_u32(f->map + 12));
    if (size < NAT_HEADER_SIZE + NAT_FOOTER_SIZE)
        RT_FAIL(RT_ERR_FORMAT, "%s: file is %zu bytes, too short to hold the footer (truncated)", path, size);
    const unsigned char *foot = f->map + size - NAT_FOOTER_SIZE;
    if (memcmp(foot + 40, nat_end_magic, 8) != 0)
        RT_FAIL(RT_ERR_FORMAT, "%s: no end marker: the file is truncated or was not finished", path);
    if (get_u64(foot + 32) != 0) RT_FAIL(RT_ERR_FORMAT, "%s: footer reserved field is not zero (corrupt)", path);
    uint64_t body_end = size - NAT_FOOTER_SIZE; /* where the table must end */
    uint64_t meta_len = get_u64(f->map + 16);
    if (meta_len > body_end - NAT_HEADER_SIZE)
        RT_FAIL(RT_ERR_FORMAT, "%s: metadata length %llu runs past the end of the file", path,
                (unsigned long long)meta_len);
    uint64_t table_offset = get_u64(foot), table_len = get_u64(foot + 8), n_records = get_u64(foot + 16);
    uint64_t data_begin = NAT_HEADER_SIZE + meta_len;
    if (table_offset < data_begin || table_offset > body_end || table_len != body_end - table_offset)
        RT_FAIL(RT_ERR_FORMAT,
                "%s: record table at %llu (+%llu bytes) does not fit between the metadata and the footer", path,
                (unsigned long long)table_offset, (unsigned long long)table_len);
    if (!NAT_CRC_OK(ckpt_native_crc32(f->map + table_offset, (size_t)table_len), get_u32(foot + 24)))
        RT_FAIL(RT_ERR_FORMAT, "%s: record table CRC mismatch (the file is corrupt)", path);
    if (!NAT_CRC_OK(ckpt_native_crc32(f->map + NAT_HEADER_SIZE, (size_t)meta_len), get_u32(foot + 28)))
        RT_FAIL(RT_ERR_FORMAT, "%s: metadata CRC mismatch (the file is corrupt)", path);
    if (memchr(f->map + NAT_HEADER_SIZE, 0, (size_t)meta_len))
        RT_FAIL(RT_ERR_FORMAT, "%s: metadata holds a NUL byte", path);
    f->metadata = rt_xmalloc((size_t)meta_len + 1);
    memcpy(f->metadata, f->map + NAT_HEADER_SIZE, (size_t)meta_len);
    f->metadata[meta_len] = '\0';
    if (n_records > table_len / NAT_MIN_RECORD)
        RT_FAIL(RT_ERR_FORMAT, "%s: record count %llu cannot fit in a %llu-byte table", path,
                (unsigned long long)n_records, (unsigned long long)table_len);

    f->entries = rt_xcalloc(n_records ? (size_t)n_records : 1, sizeof *f->entries);
    const unsigned char *tbl = f->map + table_offset;
    size_t pos = 0;
    uint64_t prev_end = data_begin;
    for (size_t i = 0; i < (size_t)n_records; i++) {
        f->n = i + 1; /* so close frees a half-parsed name */
        RT_TRY(nat_parse_entry(f, tbl, (size_t)table_len, &pos, i, data_begin, table_offset, prev_end, &f->entries[i]));
        prev_end = f->entries[i].offset + f->entries[i].nbytes;
    }
    f->n = (size_t)n_records;
    if (!nat_is_padding(f->map + prev_end, table_offset - prev_end))
        RT_FAIL(RT_ERR_FORMAT, "%s: unexpected bytes between the last record and the record table (corrupt)", path);
    if (pos != table_len)
        RT_FAIL(RT_ERR_FORMAT, "%s: %llu unexpected bytes after the last record in the table", path,
                (unsigned long long)(table_len - pos));
    const char *dup =
        ckpt_name_index_build(&f->by_name, f->entries, sizeof *f->entries, offsetof(nat_entry, name), f->n);
    if (dup) RT_FAIL(RT_ERR_FORMAT, "%s: record '%s' appears twice", path, dup);
    *out = f;
    return RT_OK;
fail:
    if (fd >= 0) close(fd);
    ckpt_native_close(f);
    return st;
}

void ckpt_native_close(ckpt_native_file *f) {
    if (!f) return;
    if (f->map) rt_unmap_file(f->map, f->map_size);
    for (size_t i = 0; i < f->n; i++) free(f->entries[i].name);
    free(f->entries);
    ckpt_name_index_free(&f->by_name);
    free(f->metadata);
    free(f->path);
    free(f);
}

const char *ckpt_native_path(const ckpt_native_file *f) { return f->path; }
const char *ckpt_native_metadata(const ckpt_native_file *f) { return f->metadata; }
size_t ckpt_native_count(const ckpt_native_file *f) { return f->n; }

void ckpt_native_record_at(const ckpt_native_file *f, size_t i, ckpt_native_record *out) {
    RT_CHECK(i < f->n, "record index %zu of %zu", i, f->n);
    const nat_entry *e = &f->entries[i];
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->dtype = e->dtype;
    out->ndim = e->ndim;
    memcpy(out->shape, e->shape, sizeof e->shape);
    out->data = f->map + e->offset;
    out->numel = e->numel;
    out->nbytes = (size_t)e->nbytes;
    out->crc32 = e->crc32;
}

static long nat_lookup(const ckpt_native_file *f, const char *name) { return ckpt_name_index_find(&f->by_name, name); }

bool ckpt_native_has(const ckpt_native_file *f, const char *name) { return nat_lookup(f, name) >= 0; }

rt_status ckpt_native_find(const ckpt_native_file *f, const char *name, ckpt_native_record *out) {
    long i = nat_lookup(f, name);
    if (i < 0)
        return rt_errorf(RT_ERR_FORMAT, "%s: no record '%s' (the checkpoint holds %zu records)", f->path, name, f->n);
    ckpt_native_record_at(f, (size_t)i, out);
    return RT_OK;
}

rt_status ckpt_native_read_f32(const ckpt_native_file *f, const char *name, float *dst, size_t numel) {
    rt_status st = RT_OK;
    ckpt_native_record r;
    char sbuf[160];
    RT_TRY(ckpt_native_find(f, name, &r));
    if (r.dtype != RT_F32 && r.dtype != RT_F16 && r.dtype != RT_BF16 && r.dtype != RT_F64)
        RT_FAIL(RT_ERR_FORMAT, "%s: record '%s' has dtype %s, which does not convert to float32", f->path, name,
                rt_dtype_name(r.dtype));
    if (r.numel != numel)
        RT_FAIL(RT_ERR_FORMAT, "%s: record '%s' has shape %s (%zu elements), expected %zu elements", f->path, name,
                ckpt_shape_str(r.ndim, r.shape, sbuf, sizeof sbuf), r.numel, numel);
    rt_convert_to_f32(dst, r.data, r.dtype, numel);
fail:
    return st;
}

rt_status ckpt_native_read_raw(const ckpt_native_file *f, const char *name, rt_dtype dtype, void *dst, size_t numel) {
    rt_status st = RT_OK;
    ckpt_native_record r;
    char sbuf[160];
    RT_TRY(ckpt_native_find(f, name, &r));
    if (r.dtype != dtype)
        RT_FAIL(RT_ERR_FORMAT, "%s: record '%s' has dtype %s, expected %s", f->path, name, rt_dtype_name(r.dtype),
                rt_dtype_name(dtype));
    if (r.numel != numel)
        RT_FAIL(RT_ERR_FORMAT, "%s: record '%s' has shape %s (%zu elements), expected %zu elements", f->path, name,
                ckpt_shape_str(r.ndim, r.shape, sbuf, sizeof sbuf), r.numel, numel);
    memcpy(dst, r.data, r.nbytes);
fail:
    return st;
}

/* ---- checkpoint directories ---- */

rt_status ckpt_native_step_path(const char *dir, long long step, char *out, size_t size) {
    if ((size_t)snprintf(out, size, "%s/%s%06lld%s", dir, CKPT_NATIVE_PREFIX, step, CKPT_NATIVE_EXT) >= size)
        return rt_errorf(RT_ERR_IO, "%s: checkpoint path too long", dir);
    return RT_OK;
}

/* "<prefix><1-18 digits>.tzck" -> step; 0 when the name does not match. */
static int nat_parse_step(const char *name, const char *prefix, long long *step) {
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0) return 0;
    const char *p = name + pl;
    long long v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        if (++digits > 18) return 0;
        v = v * 10 + (*p - '0');
        p++;
    }
    if (!digits || strcmp(p, CKPT_NATIVE_EXT) != 0) return 0;
    *step = v;
    return 1;
}

static int nat_cmp_entry(const void *a, const void *b) {
    const ckpt_native_entry *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return strcmp(x->path, y->path);
}

rt_status ckpt_native_list(const char *dir, const char *prefix, ckpt_native_entry **out, size_t *n_out) {
    rt_status st = RT_OK;
    ckpt_native_entry *list = NULL;
    size_t n = 0;
    *out = NULL;
    *n_out = 0;
    if (!prefix) prefix = CKPT_NATIVE_PREFIX;
    DIR *d = opendir(dir);
    if (!d) RT_FAIL(RT_ERR_IO, "%s: cannot list checkpoint directory: %s", dir, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        long long step;
        if (!nat_parse_step(de->d_name, prefix, &step)) continue;
        size_t plen = strlen(dir) + strlen(de->d_name) + 2;
        char *p = rt_xmalloc(plen);
        snprintf(p, plen, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            free(p);
            continue;
        }
        list = rt_xrealloc(list, (n + 1) * sizeof *list);
        list[n].path = p;
        list[n].step = step;
        n++;
    }
    closedir(d);
    if (n) qsort(list, n, sizeof *list, nat_cmp_entry);
    *out = list;
    *n_out = n;
    return RT_OK;
fail:
    return st;
}

void ckpt_native_list_free(ckpt_native_entry *list, size_t n) {
    if (!list) return;
    for (size_t i = 0; i < n; i++) free(list[i].path);
    free(list);
}

rt_status ckpt_native_prune(const char *dir, size_t keep) {
    rt_status st = RT_OK;
    ckpt_native_entry *list = NULL;
    size_t n = 0;
    if (keep < 1) keep = 1;
    RT_TRY(ckpt_native_list(dir, NULL, &list, &n));
    for (size_t i = 0; i + keep < n; i++) {
        if (unlink(list[i].path) != 0 && errno != ENOENT)
            RT_FAIL(RT_ERR_IO, "%s: cannot remove old checkpoint: %s", list[i].path, strerror(errno));
    }
fail:
    ckpt_native_list_free(list, n);
    return st;
}

rt_status ckpt_native_resume_list(const char *dir_or_file, char ***paths, size_t *n) {
    rt_status st = RT_OK;
    ckpt_native_entry *list = NULL;
    size_t count = 0;
    struct stat sb;
    *paths = NULL;
    *n = 0;
    if (stat(dir_or_file, &sb) != 0) return rt_errorf(RT_ERR_IO, "%s: cannot resume: %s", dir_or_file, strerror(errno));
    if (S_ISREG(sb.st_mode)) {
        *paths = rt_xmalloc(sizeof **paths);
        (*paths)[0] = rt_xstrdup(dir_or_file);
        *n = 1;
        return RT_OK;
    }
    RT_TRY(ckpt_native_list(dir_or_file, NULL, &list, &count));
    *paths = rt_xcalloc(count ? count : 1, sizeof **paths);
    for (size_t i = 0; i < count; i++) { /* newest first: take the paths from the end */
        (*paths)[i] = list[count - 1 - i].path;
        list[count - 1 - i].path = NULL;
    }
    *n = count;
fail:
    ckpt_native_list_free(list, count);
    return st;
}

void ckpt_native_release(const ckpt_native_file *f, const void *data, size_t nbytes) {
    ckpt_pages_release(f->map, f->map_size, data, nbytes);
}

uint32_t ckpt_native_writer_last_crc(const ckpt_native_writer *w) { return w->last_crc; }
