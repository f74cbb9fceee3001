/* Zip reader for torch.save files (see ckpt_zip.h).
 *
 * Layout, from the end: the end-of-central-directory record (EOCD, possibly followed by a
 * comment), optionally a ZIP64 EOCD locator and record before it, the central directory
 * (one record per entry), and at the front the entries, each a local header followed by its
 * data. We trust nothing: the directory must lie inside the file before the EOCD, each
 * record inside the directory, each entry's local header and data before the directory, and
 * entries, sorted by offset, must not overlap. */
#include "checkpoints/ckpt_pages.h"
#include "checkpoints/ckpt_zip.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoints/ckpt_name_index.h"
#include "runtime/base/rt_mapped.h"

#define ZIP_EOCD_SIG 0x06054b50u
#define ZIP_EOCD_SIZE 22
#define ZIP64_LOCATOR_SIG 0x07064b50u
#define ZIP64_LOCATOR_SIZE 20
#define ZIP64_EOCD_SIG 0x06064b50u
#define ZIP64_EOCD_SIZE 56
#define ZIP_CDIR_SIG 0x02014b50u
#define ZIP_CDIR_SIZE 46
#define ZIP_LOCAL_SIG 0x04034b50u
#define ZIP_LOCAL_SIZE 30
/* deflate never expands data more than about 1032:1; a declared size beyond that is a lie */
#define ZIP_MAX_DEFLATE_RATIO 1100u

typedef struct {
    const char *name; /* owned, NUL-terminated */
    int method;       /* 0 stored, 8 deflated */
    uint32_t crc;
    size_t csize, usize;
    size_t local_off;        /* local header */
    size_t data_off;         /* first data byte */
    unsigned char *inflated; /* deflated entries after first use */
} zip_entry;

struct ckpt_zip {
    char *path;
    unsigned char *map;
    size_t map_size;
    zip_entry *e;
    size_t n;
    ckpt_name_index by_name;
};

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

bool ckpt_zip_sniff(const void *head, size_t n) {
    const unsigned char *p = head;
    return n >= 4 && rd32(p) == ZIP_LOCAL_SIG;
}

/* Whether [off, off + len) lies inside [0, limit). */
static bool zip_fits(uint64_t off, uint64_t len, uint64_t limit) { return off <= limit && len <= limit - off; }

/* Applies the ZIP64 extra field of a directory record: each 0xFFFFFFFF field is replaced by
 * the next 8-byte value, in the order usize, csize, offset. */
static rt_status zip_apply_zip64(const ckpt_zip *z, const char *name, const unsigned char *extra, size_t elen,
                                 uint64_t *usize, uint64_t *csize, uint64_t *off) {
    size_t pos = 0;
    while (pos + 4 <= elen) {
        uint16_t id = rd16(extra + pos), len = rd16(extra + pos + 2);
        if ((size_t)len > elen - pos - 4)
            return rt_errorf(RT_ERR_FORMAT, "%s: entry '%s': extra field runs past its record", z->path, name);
        if (id == 0x0001) {
            const unsigned char *q = extra + pos + 4;
            size_t left = len;
            uint64_t *fields[3] = {usize, csize, off};
            for (int k = 0; k < 3; k++) {
                if (*fields[k] != 0xFFFFFFFFu) continue;
                if (left < 8)
                    return rt_errorf(RT_ERR_FORMAT, "%s: entry '%s': ZIP64 extra field is too short", z->path, name);
                *fields[k] = rd64(q);
                q += 8;
                left -= 8;
            }
            return RT_OK;
        }
        pos += 4 + (size_t)len;
    }
    if (*usize == 0xFFFFFFFFu || *csize == 0xFFFFFFFFu || *off == 0xFFFFFFFFu)
        return rt_errorf(RT_ERR_FORMAT, "%s: entry '%s': sizes say ZIP64 but there is no ZIP64 extra field", z->path,
                         name);
    return RT_OK;
}

static int zip_cmp_off(const void *a, const void *b) {
    const zip_entry *x = a, *y = b;
    return x->local_off < y->local_off ? -1 : x->local_off > y->local_off;
}

/* Finds the EOCD (the last signature that leaves room for its own comment). */
static rt_status zip_find_eocd(const ckpt_zip *z, size_t *eocd) {
    if (z->map_size < ZIP_EOCD_SIZE)
        return rt_errorf(RT_ERR_FORMAT, "%s: %zu bytes, too short for a zip end-of-directory record (truncated?)",
                         z->path, z->map_size);
    size_t lo = z->map_size > ZIP_EOCD_SIZE + 65535 ? z->map_size - ZIP_EOCD_SIZE - 65535 : 0;
    for (size_t p = z->map_size - ZIP_EOCD_SIZE + 1; p-- > lo;) {
        if (rd32(z->map + p) == ZIP_EOCD_SIG && p + ZIP_EOCD_SIZE + rd16(z->map + p + 20) == z->map_size) {
            *eocd = p;
            return RT_OK;
        }
    }
    return rt_errorf(RT_ERR_FORMAT, "%s: no zip end-of-directory record (the file is truncated or not a zip)", z->path);
}

static rt_status zip_read_directory(ckpt_zip *z) {
    rt_status st = RT_OK;
    const char *path = z->path;
    size_t eocd = 0;
    RT_TRY(zip_find_eocd(z, &eocd));
    const unsigned char *r = z->map + eocd;
    uint64_t n = rd16(r + 10), cd_size = rd32(r + 12), cd_off = rd32(r + 16);
    size_t cd_limit = eocd; /* the directory ends before the EOCD (or the ZIP64 records) */
    if (rd16(r + 4) != 0 || rd16(r + 6) != 0 || rd16(r + 8) != rd16(r + 10))
        RT_FAIL(RT_ERR_FORMAT, "%s: multi-disk zip archives are not supported", path);
    if (n == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_off == 0xFFFFFFFFu) {
        if (eocd < ZIP64_LOCATOR_SIZE || rd32(z->map + eocd - ZIP64_LOCATOR_SIZE) != ZIP64_LOCATOR_SIG)
            RT_FAIL(RT_ERR_FORMAT, "%s: end-of-directory record says ZIP64 but there is no ZIP64 locator", path);
        const unsigned char *loc = z->map + eocd - ZIP64_LOCATOR_SIZE;
        uint64_t z64 = rd64(loc + 8);
        cd_limit = eocd - ZIP64_LOCATOR_SIZE;
        if (!zip_fits(z64, ZIP64_EOCD_SIZE, cd_limit) || rd32(z->map + z64) != ZIP64_EOCD_SIG)
            RT_FAIL(RT_ERR_FORMAT, "%s: ZIP64 end-of-directory record at %llu is missing or out of range", path,
                    (unsigned long long)z64);
        const unsigned char *r64 = z->map + z64;
        if (rd32(r64 + 16) != 0 || rd32(r64 + 20) != 0 || rd64(r64 + 24) != rd64(r64 + 32))
            RT_FAIL(RT_ERR_FORMAT, "%s: multi-disk zip archives are not supported", path);
        n = rd64(r64 + 32);
        cd_size = rd64(r64 + 40);
        cd_off = rd64(r64 + 48);
        cd_limit = (size_t)z64;
    }
    if (!zip_fits(cd_off, cd_size, cd_limit))
        RT_FAIL(RT_ERR_FORMAT,
                "%s: central directory [%llu, +%llu) lies outside the file before its end record (%zu): "
                "truncated or corrupt",
                path, (unsigned long long)cd_off, (unsigned long long)cd_size, cd_limit);
    if (n > cd_size / ZIP_CDIR_SIZE)
        RT_FAIL(RT_ERR_FORMAT, "%s: directory claims %llu entries, more than its %llu bytes can hold", path,
                (unsigned long long)n, (unsigned long long)cd_size);
    z->e = rt_xcalloc(n ? (size_t)n : 1, sizeof *z->e);
    size_t pos = (size_t)cd_off, end = (size_t)(cd_off + cd_size);
    for (size_t i = 0; i < n; i++) {
        if (end - pos < ZIP_CDIR_SIZE || rd32(z->map + pos) != ZIP_CDIR_SIG)
            RT_FAIL(RT_ERR_FORMAT, "%s: directory record %zu of %llu is truncated or has a bad signature", path, i,
                    (unsigned long long)n);
        const unsigned char *c = z->map + pos;
        size_t nlen = rd16(c + 28), elen = rd16(c + 30), clen = rd16(c + 32);
        if (end - pos - ZIP_CDIR_SIZE < nlen + elen + clen)
            RT_FAIL(RT_ERR_FORMAT, "%s: directory record %zu runs past the directory", path, i);
        zip_entry *e = &z->e[i];
        char *name = rt_xmalloc(nlen + 1);
        memcpy(name, c + ZIP_CDIR_SIZE, nlen);
        name[nlen] = '\0';
        e->name = name;
        z->n = i + 1; /* owns name from here, for cleanup */
        if (strlen(name) != nlen) RT_FAIL(RT_ERR_FORMAT, "%s: directory record %zu: name holds a NUL byte", path, i);
        uint16_t flags = rd16(c + 8);
        e->method = rd16(c + 10);
        e->crc = rd32(c + 16);
        uint64_t csize = rd32(c + 20), usize = rd32(c + 24), loff = rd32(c + 42);
        if (flags & 1) RT_FAIL(RT_ERR_FORMAT, "%s: entry '%s' is encrypted", path, name);
        if (e->method != 0 && e->method != 8)
            RT_FAIL(RT_ERR_UNSUPPORTED, "%s: entry '%s' uses compression method %d (only stored and deflate)", path,
                    name, e->method);
        RT_TRY(zip_apply_zip64(z, name, c + ZIP_CDIR_SIZE + nlen, elen, &usize, &csize, &loff));
        if (e->method == 0 && csize != usize)
            RT_FAIL(RT_ERR_FORMAT, "%s: entry '%s' is stored but its sizes differ (%llu compressed, %llu not)", path,
                    name, (unsigned long long)csize, (unsigned long long)usize);
        if (e->method == 8 && usize / ZIP_MAX_DEFLATE_RATIO > csize + 64)
            RT_FAIL(RT_ERR_FORMAT,
                    "%s: entry '%s' claims %llu bytes from %llu deflated bytes, more than deflate can give", path, name,
                    (unsigned long long)usize, (unsigned long long)csize);
        if (!zip_fits(loff, ZIP_LOCAL_SIZE, cd_off) || rd32(z->map + loff) != ZIP_LOCAL_SIG)
            RT_FAIL(RT_ERR_FORMAT, "%s: entry '%s': local header at %llu is out of range or has a bad signature", path,
                    name, (unsigned long long)loff);
        const unsigned char *l = z->map + loff;
        uint64_t data = loff + ZIP_LOCAL_SIZE + rd16(l + 26) + rd16(l + 28);
        if (!zip_fits(data, csize, cd_off))
            RT_FAIL(RT_ERR_FORMAT,
                    "%s: entry '%s': data [%llu, +%llu) runs past the entries into the directory "
                    "(truncated or corrupt)",
                    path, name, (unsigned long long)data, (unsigned long long)csize);
        if (rd16(l + 8) != e->method)
            RT_FAIL(RT_ERR_FORMAT, "%s: entry '%s': local header and directory disagree on the method", path, name);
        e->csize = (size_t)csize;
        e->usize = (size_t)usize;
        e->local_off = (size_t)loff;
        e->data_off = (size_t)data;
        pos += ZIP_CDIR_SIZE + nlen + elen + clen;
    }
    /* overlap: sorted by local header, each entry's data must end before the next header */
    zip_entry *sorted = rt_xmalloc((z->n ? z->n : 1) * sizeof *sorted);
    memcpy(sorted, z->e, z->n * sizeof *sorted);
    qsort(sorted, z->n, sizeof *sorted, zip_cmp_off);
    for (size_t i = 1; i < z->n; i++) {
        if (sorted[i].local_off < sorted[i - 1].data_off + sorted[i - 1].csize) {
            st =
                rt_errorf(RT_ERR_FORMAT, "%s: entries '%s' and '%s' overlap", path, sorted[i - 1].name, sorted[i].name);
            break;
        }
    }
    free(sorted);
    if (st != RT_OK) goto fail;
    const char *dup = ckpt_name_index_build(&z->by_name, z->e, sizeof *z->e, offsetof(zip_entry, name), z->n);
    if (dup) RT_FAIL(RT_ERR_FORMAT, "%s: entry '%s' appears twice", path, dup);
fail:
    return st;
}

rt_status ckpt_zip_open(const char *path, ckpt_zip **out) {
    rt_status st = RT_OK;
    int fd = -1;
    *out = NULL;
    ckpt_zip *z = rt_xcalloc(1, sizeof *z);
    z->path = rt_xstrdup(path);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) RT_FAIL(RT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) RT_FAIL(RT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) RT_FAIL(RT_ERR_IO, "%s: not a regular file", path);
    if (sb.st_size == 0) RT_FAIL(RT_ERR_FORMAT, "%s: empty file (expected a zip archive)", path);
    z->map_size = (size_t)sb.st_size;
    void *m = rt_map_file(fd, z->map_size, path);
    if (m == MAP_FAILED) RT_FAIL(RT_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    z->map = m;
    close(fd);
    fd = -1;
    RT_TRY(zip_read_directory(z));
    *out = z;
    return RT_OK;
fail:
    if (fd >= 0) close(fd);
    ckpt_zip_close(z);
    return st;
}

void ckpt_zip_close(ckpt_zip *z) {
    if (!z) return;
    for (size_t i = 0; i < z->n; i++) {
        free((char *)z->e[i].name);
        free(z->e[i].inflated);
    }
    free(z->e);
    ckpt_name_index_free(&z->by_name);
    if (z->map) rt_unmap_file(z->map, z->map_size);
    free(z->path);
    free(z);
}

const char *ckpt_zip_path(const ckpt_zip *z) { return z->path; }
size_t ckpt_zip_count(const ckpt_zip *z) { return z->n; }

const char *ckpt_zip_name(const ckpt_zip *z, size_t i) {
    RT_CHECK(i < z->n, "zip entry %zu of %zu", i, z->n);
    return z->e[i].name;
}

size_t ckpt_zip_size(const ckpt_zip *z, size_t i) {
    RT_CHECK(i < z->n, "zip entry %zu of %zu", i, z->n);
    return z->e[i].usize;
}

long ckpt_zip_find(const ckpt_zip *z, const char *name) { return ckpt_name_index_find(&z->by_name, name); }

static uint32_t zip_crc(const unsigned char *p, size_t n) {
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t off = 0; off < n;) {
        size_t k = n - off > (1u << 30) ? (1u << 30) : n - off;
        crc = crc32(crc, p + off, (uInt)k);
        off += k;
    }
    return (uint32_t)crc;
}

static rt_status zip_inflate(const ckpt_zip *z, zip_entry *e) {
    rt_status st = RT_OK;
    /* one spare byte so a stream longer than declared is caught as a size mismatch */
    unsigned char *buf = rt_xmalloc(e->usize + 1);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) {
        free(buf);
        return rt_errorf(RT_ERR_IO, "%s: entry '%s': zlib inflateInit failed", z->path, e->name);
    }
    /* zlib counts in uInt: feed and drain in chunks so entries over 4 GB work */
    size_t in_done = 0, out_done = 0;
    int rc = Z_OK;
    while (rc == Z_OK) {
        size_t in_left = e->csize - in_done, out_left = e->usize + 1 - out_done;
        zs.next_in = (unsigned char *)z->map + e->data_off + in_done;
        zs.avail_in = (uInt)(in_left > (1u << 30) ? (1u << 30) : in_left);
        zs.next_out = buf + out_done;
        zs.avail_out = (uInt)(out_left > (1u << 30) ? (1u << 30) : out_left);
        uInt ai = zs.avail_in, ao = zs.avail_out;
        rc = inflate(&zs, Z_NO_FLUSH);
        in_done += ai - zs.avail_in;
        out_done += ao - zs.avail_out;
        if (rc == Z_OK && ai == zs.avail_in && ao == zs.avail_out) rc = Z_BUF_ERROR; /* no progress */
    }
    inflateEnd(&zs);
    if (rc != Z_STREAM_END || out_done != e->usize)
        RT_FAIL(RT_ERR_FORMAT, "%s: entry '%s': deflate data is corrupt or not %zu bytes long (zlib: %s)", z->path,
                e->name, e->usize,
                zs.msg               ? zs.msg
                : rc == Z_STREAM_END ? "size mismatch"
                                     : "truncated");
    if (zip_crc(buf, e->usize) != e->crc)
        RT_FAIL(RT_ERR_FORMAT, "%s: entry '%s': CRC mismatch after inflating (corrupt data)", z->path, e->name);
    e->inflated = buf;
    return RT_OK;
fail:
    free(buf);
    return st;
}

rt_status ckpt_zip_data(ckpt_zip *z, size_t i, const void **data, size_t *size) {
    RT_CHECK(i < z->n, "zip entry %zu of %zu", i, z->n);
    zip_entry *e = &z->e[i];
    if (e->method == 8 && !e->inflated) {
        rt_status st = zip_inflate(z, e);
        if (st != RT_OK) return st;
    }
    *data = e->method == 8 ? (const void *)e->inflated : (const void *)(z->map + e->data_off);
    *size = e->usize;
    return RT_OK;
}

rt_status ckpt_zip_verify(ckpt_zip *z, size_t i) {
    const void *d = NULL;
    size_t n = 0;
    rt_status st = ckpt_zip_data(z, i, &d, &n);
    if (st != RT_OK) return st;
    if (zip_crc(d, n) != z->e[i].crc)
        return rt_errorf(RT_ERR_FORMAT, "%s: entry '%s': CRC mismatch (corrupt data)", z->path, z->e[i].name);
    return RT_OK;
}

void ckpt_zip_release(const ckpt_zip *z, const void *p, size_t n) { ckpt_pages_release(z->map, z->map_size, p, n); }
