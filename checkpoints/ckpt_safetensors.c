/* safetensors reader (mmap + strict header validation) and writer (see ckpt_safetensors.h).
 *
 * The header is untrusted input: every number is checked to be a whole, non-negative value
 * that fits, shape products and byte sizes are checked for overflow before they are
 * compared, and offsets are checked against the data section and against each other (sorted
 * by offset, so overlap is one pass). Only then is any data pointer handed out. */
#include "checkpoints/ckpt_name_index.h"
#include "checkpoints/ckpt_safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoints/ckpt_pages.h"
#include "runtime/base/rt_atomic.h"
#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_json.h"
#include "runtime/base/rt_mapped.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this code reads it in place and needs a little-endian host"
#endif

/* Whole numbers up to 2^53 are exact in a double, which is what cJSON gives us. */
#define ST_MAX_JSON_INT 9007199254740992.0

typedef struct {
    const char *name; /* points into header */
    rt_dtype dtype;
    int ndim;
    size_t shape[CKPT_MAX_DIMS];
    size_t numel;
    size_t begin, end; /* relative to the data section */
} st_entry;

struct ckpt_st_file {
    char *path;
    unsigned char *map;
    size_t map_size;
    size_t data_start; /* 8 + header length */
    size_t data_size;
    cJSON *header;         /* kept alive: entry names and metadata point into it */
    const cJSON *metadata; /* "__metadata__" or NULL */
    st_entry *entries;     /* sorted by begin */
    size_t n;
    ckpt_name_index by_name; /* entries by name */
};

const char *ckpt_shape_str(int ndim, const size_t *shape, char *buf, size_t size) {
    size_t pos = 0;
    buf[0] = '\0';
    pos += (size_t)snprintf(buf + pos, pos < size ? size - pos : 0, "[");
    for (int d = 0; d < ndim; d++)
        pos += (size_t)snprintf(buf + pos, pos < size ? size - pos : 0, "%s%zu", d ? ", " : "", shape[d]);
    snprintf(buf + pos, pos < size ? size - pos : 0, "]");
    return buf;
}

/* A JSON number that is a whole value in [0, 2^53]. */
static int st_json_uint(const cJSON *it, size_t *out) {
    if (!cJSON_IsNumber(it)) return 0;
    double d = it->valuedouble;
    if (!(d >= 0.0 && d <= ST_MAX_JSON_INT) || floor(d) != d) return 0;
    if (d > (double)SIZE_MAX) return 0;
    *out = (size_t)d;
    return 1;
}

static rt_status st_parse_entry(const ckpt_st_file *f, const cJSON *item, st_entry *e) {
    const char *path = f->path;
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s' is %s (expected an object with dtype, shape, data_offsets)",
                         path, name, rt_json_type_name(item));
    e->name = name;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dt) || !dt->valuestring)
        return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': field 'dtype' is %s (expected a string)", path, name,
                         rt_json_type_name(dt));
    if (!rt_dtype_from_name(dt->valuestring, &e->dtype))
        return rt_errorf(RT_ERR_UNSUPPORTED,
                         "%s: tensor '%s' has dtype '%.32s' (supported: F32 F16 BF16 F64 I64 I32 U8 BOOL)", path, name,
                         dt->valuestring);
    if (!cJSON_IsArray(sh))
        return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': field 'shape' is %s (expected an array of sizes)", path, name,
                         rt_json_type_name(sh));
    int nd = cJSON_GetArraySize(sh);
    if (nd > CKPT_MAX_DIMS)
        return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s' has %d dimensions (at most %d supported)", path, name, nd,
                         CKPT_MAX_DIMS);
    e->ndim = nd;
    e->numel = 1;
    int d = 0;
    const cJSON *dim;
    cJSON_ArrayForEach(dim, sh) {
        size_t s;
        if (!st_json_uint(dim, &s))
            return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer below 2^53", path,
                             name, d);
        e->shape[d++] = s;
    }
    /* Products only overflow when no dimension is zero, so check that case alone. */
    for (d = 0; d < nd; d++) {
        if (e->shape[d] == 0) {
            e->numel = 0;
            break;
        }
    }
    if (e->numel) {
        for (d = 0; d < nd; d++) {
            if (e->numel > SIZE_MAX / e->shape[d])
                return rt_errorf(RT_ERR_FORMAT,
                                 "%s: tensor '%s': shape overflows (the element count does not fit in 64 bits)", path,
                                 name);
            e->numel *= e->shape[d];
        }
    }
    size_t esize = rt_dtype_size(e->dtype);
    if (e->numel > SIZE_MAX / esize)
        return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': shape overflows (the byte size does not fit in 64 bits)",
                         path, name);
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !st_json_uint(cJSON_GetArrayItem(off, 0), &e->begin) ||
        !st_json_uint(cJSON_GetArrayItem(off, 1), &e->end))
        return rt_errorf(RT_ERR_FORMAT,
                         "%s: tensor '%s': field 'data_offsets' is not [begin, end] (two non-negative integers)", path,
                         name);
    if (e->begin > e->end)
        return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': data_offsets [%zu, %zu] end before they begin", path, name,
                         e->begin, e->end);
    if (e->end > f->data_size)
        return rt_errorf(RT_ERR_FORMAT,
                         "%s: tensor '%s': data_offsets [%zu, %zu] lie outside the data section (%zu bytes)", path,
                         name, e->begin, e->end, f->data_size);
    if (e->end - e->begin != e->numel * esize) {
        char sbuf[160];
        return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s': %s %s needs %zu bytes but data_offsets [%zu, %zu] hold %zu",
                         path, name, rt_dtype_name(e->dtype), ckpt_shape_str(nd, e->shape, sbuf, sizeof sbuf),
                         e->numel * esize, e->begin, e->end, e->end - e->begin);
    }
    return RT_OK;
}

static int st_cmp_offset(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

rt_status ckpt_safetensors_open(const char *path, ckpt_st_file **out) {
    rt_status st = RT_OK;
    int fd = -1;
    *out = NULL;
    ckpt_st_file *f = rt_xcalloc(1, sizeof *f);
    f->path = rt_xstrdup(path);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) RT_FAIL(RT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) RT_FAIL(RT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) RT_FAIL(RT_ERR_IO, "%s: not a regular file", path);
    if (sb.st_size == 0) RT_FAIL(RT_ERR_FORMAT, "%s: empty file (expected a safetensors header)", path);
    if (sb.st_size < 8)
        RT_FAIL(RT_ERR_FORMAT, "%s: file is %lld bytes, too short for the 8-byte header length", path,
                (long long)sb.st_size);
    f->map_size = (size_t)sb.st_size;
    void *m = rt_map_file(fd, f->map_size, path);
    if (m == MAP_FAILED) RT_FAIL(RT_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
    f->map = m;
    close(fd);
    fd = -1;

    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->map[i];
    if (hlen > f->map_size - 8)
        RT_FAIL(RT_ERR_FORMAT,
                "%s: header length %llu runs past the end of the file (%zu bytes): truncated or not safetensors", path,
                (unsigned long long)hlen, f->map_size);
    if (hlen < 2)
        RT_FAIL(RT_ERR_FORMAT, "%s: header length %llu is too small for a JSON object", path, (unsigned long long)hlen);
    f->data_start = 8 + (size_t)hlen;
    f->data_size = f->map_size - f->data_start;
    if (f->map[8] != '{') RT_FAIL(RT_ERR_FORMAT, "%s: header does not start with '{' (not a safetensors file?)", path);
    {
        size_t nlen = strlen(path) + 16;
        char *hname = rt_xmalloc(nlen);
        snprintf(hname, nlen, "%s header", path);
        st = rt_json_parse((const char *)f->map + 8, (size_t)hlen, hname, &f->header);
        free(hname);
        if (st != RT_OK) goto fail;
    }
    if (!cJSON_IsObject(f->header)) RT_FAIL(RT_ERR_FORMAT, "%s: header is not a JSON object", path);

    size_t cap = (size_t)cJSON_GetArraySize(f->header);
    f->entries = rt_xcalloc(cap ? cap : 1, sizeof *f->entries);
    const cJSON *item;
    cJSON_ArrayForEach(item, f->header) {
        if (item->string && strcmp(item->string, "__metadata__") == 0) {
            if (f->metadata) RT_FAIL(RT_ERR_FORMAT, "%s: '__metadata__' appears twice", path);
            if (!cJSON_IsObject(item))
                RT_FAIL(RT_ERR_FORMAT, "%s: '__metadata__' is %s (expected an object of strings)", path,
                        rt_json_type_name(item));
            const cJSON *kv;
            cJSON_ArrayForEach(kv, item) {
                if (!cJSON_IsString(kv))
                    RT_FAIL(RT_ERR_FORMAT, "%s: '__metadata__' field '%s' is %s (expected a string)", path,
                            kv->string ? kv->string : "", rt_json_type_name(kv));
            }
            f->metadata = item;
            continue;
        }
        if (!item->string) RT_FAIL(RT_ERR_FORMAT, "%s: header entry without a name", path);
        RT_TRY(st_parse_entry(f, item, &f->entries[f->n]));
        f->n++;
    }
    if (f->n) qsort(f->entries, f->n, sizeof *f->entries, st_cmp_offset);
    for (size_t i = 1; i < f->n; i++) {
        if (f->entries[i].begin < f->entries[i - 1].end)
            RT_FAIL(RT_ERR_FORMAT, "%s: tensors '%s' [%zu, %zu] and '%s' [%zu, %zu] overlap", path,
                    f->entries[i - 1].name, f->entries[i - 1].begin, f->entries[i - 1].end, f->entries[i].name,
                    f->entries[i].begin, f->entries[i].end);
    }
    const char *dup =
        ckpt_name_index_build(&f->by_name, f->entries, sizeof *f->entries, offsetof(st_entry, name), f->n);
    if (dup) RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' appears twice", path, dup);
    *out = f;
    return RT_OK;
fail:
    if (fd >= 0) close(fd);
    ckpt_safetensors_close(f);
    return st;
}

void ckpt_safetensors_close(ckpt_st_file *f) {
    if (!f) return;
    if (f->map) rt_unmap_file(f->map, f->map_size);
    cJSON_Delete(f->header);
    free(f->entries);
    ckpt_name_index_free(&f->by_name);
    free(f->path);
    free(f);
}

const char *ckpt_safetensors_path(const ckpt_st_file *f) { return f->path; }
size_t ckpt_safetensors_count(const ckpt_st_file *f) { return f->n; }

const char *ckpt_safetensors_name(const ckpt_st_file *f, size_t i) {
    RT_CHECK(i < f->n, "tensor index %zu of %zu", i, f->n);
    return f->entries[i].name;
}

void ckpt_safetensors_tensor(const ckpt_st_file *f, size_t i, ckpt_st_tensor *out) {
    RT_CHECK(i < f->n, "tensor index %zu of %zu", i, f->n);
    const st_entry *e = &f->entries[i];
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->dtype = e->dtype;
    out->ndim = e->ndim;
    memcpy(out->shape, e->shape, sizeof e->shape);
    out->data = f->map + f->data_start + e->begin;
    out->numel = e->numel;
    out->nbytes = e->end - e->begin;
}

static long st_lookup(const ckpt_st_file *f, const char *name) { return ckpt_name_index_find(&f->by_name, name); }

bool ckpt_safetensors_has(const ckpt_st_file *f, const char *name) { return st_lookup(f, name) >= 0; }

long ckpt_safetensors_index(const ckpt_st_file *f, const char *name) { return st_lookup(f, name); }

rt_status ckpt_safetensors_find(const ckpt_st_file *f, const char *name, ckpt_st_tensor *out) {
    long i = st_lookup(f, name);
    if (i < 0) return rt_errorf(RT_ERR_FORMAT, "%s: no tensor '%s' (the file holds %zu tensors)", f->path, name, f->n);
    ckpt_safetensors_tensor(f, (size_t)i, out);
    return RT_OK;
}

const char *ckpt_safetensors_metadata(const ckpt_st_file *f, const char *key) {
    if (!f->metadata) return NULL;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(f->metadata, key);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

rt_status ckpt_safetensors_read_f32(const ckpt_st_file *f, const char *name, float *dst, size_t numel_expected) {
    rt_status st = RT_OK;
    ckpt_st_tensor t = {0};
    char sbuf[160];
    RT_TRY(ckpt_safetensors_find(f, name, &t));
    if (t.dtype != RT_F32 && t.dtype != RT_F16 && t.dtype != RT_BF16 && t.dtype != RT_F64)
        RT_FAIL(RT_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s, which does not convert to float32", f->path, name,
                rt_dtype_name(t.dtype));
    if (t.numel != numel_expected)
        RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' has shape %s (%zu elements), expected %zu elements", f->path, name,
                ckpt_shape_str(t.ndim, t.shape, sbuf, sizeof sbuf), t.numel, numel_expected);
    rt_convert_to_f32(dst, t.data, t.dtype, t.numel);
fail:
    return st;
}

/* ---- writer ---- */

static void st_json_string(rt_text *b, const char *s) {
    rt_text_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char esc[8];
        if (*c == '"' || *c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*c;
            rt_text_put(b, esc, 2);
        } else if (*c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *c);
            rt_text_put(b, esc, 6);
        } else {
            rt_text_put(b, (const char *)c, 1);
        }
    }
    rt_text_put(b, "\"", 1);
}

static int st_cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

struct ckpt_st_writer {
    rt_atomic_file *af;
    const ckpt_st_write_entry *entries; /* the caller's, alive until commit */
    size_t n, next;
};

rt_status ckpt_safetensors_writer_begin(const char *path, size_t n, const ckpt_st_write_entry *entries,
                                        const char *metadata_json, ckpt_st_writer **out) {
    rt_status st = RT_OK;
    rt_text hdr = {0};
    cJSON *meta = NULL;
    char *meta_text = NULL;
    const char **names = NULL;
    rt_atomic_file *af = NULL;
    *out = NULL;

    /* duplicate names would make a file that our own reader (and HF's) rejects */
    names = rt_xmalloc((n ? n : 1) * sizeof *names);
    for (size_t i = 0; i < n; i++) {
        RT_CHECK(entries[i].name != NULL, "entry %zu has no name", i);
        RT_CHECK(strcmp(entries[i].name, "__metadata__") != 0, "tensor name __metadata__ is reserved");
        names[i] = entries[i].name;
    }
    if (n) qsort(names, n, sizeof *names, st_cmp_str);
    for (size_t i = 1; i < n; i++)
        RT_CHECK(strcmp(names[i], names[i - 1]) != 0, "duplicate tensor name '%s'", names[i]);

    rt_text_puts(&hdr, "{");
    if (metadata_json) {
        RT_TRY(rt_json_parse(metadata_json, strlen(metadata_json), "safetensors metadata", &meta));
        if (!cJSON_IsObject(meta)) RT_FAIL(RT_ERR_CONFIG, "%s: metadata must be a JSON object of strings", path);
        const cJSON *kv;
        cJSON_ArrayForEach(kv, meta) {
            if (!cJSON_IsString(kv))
                RT_FAIL(RT_ERR_CONFIG, "%s: metadata field '%s' is %s (expected a string)", path, kv->string,
                        rt_json_type_name(kv));
        }
        meta_text = cJSON_PrintUnformatted(meta);
        RT_CHECK(meta_text != NULL, "cJSON_PrintUnformatted failed");
        rt_text_puts(&hdr, "\"__metadata__\":");
        rt_text_puts(&hdr, meta_text);
    }
    size_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        const ckpt_st_write_entry *e = &entries[i];
        RT_CHECK(e->ndim >= 0 && e->ndim <= CKPT_MAX_DIMS, "tensor '%s' ndim=%d", e->name, e->ndim);
        RT_CHECK(e->store == RT_F32 || e->store == RT_F16 || e->store == RT_BF16, "tensor '%s' store dtype %d", e->name,
                 (int)e->store);
        size_t numel = 1;
        for (int d = 0; d < e->ndim; d++) {
            RT_CHECK(e->shape[d] == 0 || numel <= SIZE_MAX / e->shape[d], "tensor '%s' shape overflows", e->name);
            numel *= e->shape[d];
        }
        size_t nbytes = numel * rt_dtype_size(e->store);
        char num[64];
        if (i || metadata_json) rt_text_puts(&hdr, ",");
        st_json_string(&hdr, e->name);
        rt_text_puts(&hdr, ":{\"dtype\":\"");
        rt_text_puts(&hdr, rt_dtype_name(e->store));
        rt_text_puts(&hdr, "\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) {
            snprintf(num, sizeof num, "%s%zu", d ? "," : "", e->shape[d]);
            rt_text_puts(&hdr, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%zu,%zu]}", offset, offset + nbytes);
        rt_text_puts(&hdr, num);
        offset += nbytes;
    }
    rt_text_puts(&hdr, "}");
    /* pad with spaces so the data section starts 8-byte aligned, as the reference writer does */
    while ((8 + hdr.n) % 8) rt_text_puts(&hdr, " ");

    unsigned char lenbuf[8];
    uint64_t hlen = hdr.n;
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)(hlen >> (8 * i));
    RT_TRY(rt_atomic_begin(path, &af));
    RT_TRY(rt_atomic_write(af, lenbuf, 8));
    RT_TRY(rt_atomic_write(af, hdr.s, hdr.n));
    ckpt_st_writer *w = rt_xcalloc(1, sizeof *w);
    w->af = af;
    w->entries = entries;
    w->n = n;
    af = NULL;
    *out = w;
fail:
    rt_atomic_abort(af);
    free(names);
    rt_text_free(&hdr);
    cJSON_free(meta_text);
    cJSON_Delete(meta);
    return st;
}

rt_status ckpt_safetensors_writer_put(ckpt_st_writer *w, const float *data) {
    RT_CHECK(w->next < w->n, "more tensors than the header lists (%zu)", w->n);
    const ckpt_st_write_entry *e = &w->entries[w->next++];
    size_t numel = 1;
    for (int d = 0; d < e->ndim; d++) numel *= e->shape[d];
    RT_CHECK(numel == 0 || data != NULL, "tensor '%s' has no data", e->name);
    if (e->store == RT_F32) return rt_atomic_write(w->af, data, numel * sizeof(float));
    uint16_t tmp[2048];
    for (size_t j = 0; j < numel;) {
        size_t m = numel - j < 2048 ? numel - j : 2048;
        for (size_t k = 0; k < m; k++)
            tmp[k] = e->store == RT_F16 ? rt_f32_to_f16(data[j + k]) : rt_f32_to_bf16(data[j + k]);
        rt_status st = rt_atomic_write(w->af, tmp, m * 2);
        if (st != RT_OK) return st;
        j += m;
    }
    return RT_OK;
}

rt_status ckpt_safetensors_writer_commit(ckpt_st_writer *w) {
    RT_CHECK(w->next == w->n, "%zu of %zu tensors written", w->next, w->n);
    rt_status st = rt_atomic_commit(w->af);
    free(w);
    return st;
}

void ckpt_safetensors_writer_abort(ckpt_st_writer *w) {
    if (!w) return;
    rt_atomic_abort(w->af);
    free(w);
}

rt_status ckpt_safetensors_write(const char *path, size_t n, const ckpt_st_write_entry *entries,
                                 const char *metadata_json) {
    rt_status st = RT_OK;
    ckpt_st_writer *w = NULL;
    RT_TRY(ckpt_safetensors_writer_begin(path, n, entries, metadata_json, &w));
    for (size_t i = 0; i < n; i++) RT_TRY(ckpt_safetensors_writer_put(w, entries[i].data));
    st = ckpt_safetensors_writer_commit(w);
    w = NULL;
fail:
    ckpt_safetensors_writer_abort(w);
    return st;
}

void ckpt_safetensors_release(const ckpt_st_file *f, const void *p, size_t n) {
    ckpt_pages_release(f->map, f->map_size, p, n);
}
