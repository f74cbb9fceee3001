/* torch.save's zip format, written (see ckpt_torch_write.h). */
#include "checkpoints/ckpt_torch_write.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_native.h"      /* ckpt_native_crc32 */
#include "checkpoints/ckpt_safetensors.h" /* CKPT_MAX_DIMS */
#include "runtime/base/rt_atomic.h"
#include "runtime/base/rt_buf.h"

#define TW_ARCHIVE "archive"
#define TW_32 0xFFFFFFFFu

typedef struct {
    char *name; /* zip entry name */
    uint64_t offset, size;
    uint32_t crc;
} tw_entry;

typedef struct {
    char *name;
    rt_dtype dtype;
    int ndim;
    size_t shape[CKPT_MAX_DIMS];
    size_t numel;
} tw_tensor;

struct ckpt_torch_writer {
    rt_atomic_file *af;
    char *wrap;
    tw_entry *e;
    size_t n_e, cap_e;
    tw_tensor *t;
    size_t n_t, cap_t;
};

static void buf_u8(rt_text *b, unsigned v) {
    const char c = (char)(unsigned char)v;
    rt_text_put(b, &c, 1);
}
static void buf_le(rt_text *b, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) buf_u8(b, (unsigned)((v >> (8 * i)) & 0xff));
}

/* ---- the zip container ---- */

static rt_status tw_entry_write(ckpt_torch_writer *w, const char *name, const void *data, uint64_t size) {
    rt_status st = RT_OK;
    rt_text h = {0};
    RT_GROW(w->e, w->cap_e, w->n_e + 1);
    tw_entry *e = &w->e[w->n_e++];
    e->name = rt_xstrdup(name);
    e->offset = rt_atomic_tell(w->af);
    e->size = size;
    e->crc = ckpt_native_crc32(data, (size_t)size);
    const int z64 = size >= TW_32;
    buf_le(&h, 0x04034b50u, 4);
    buf_le(&h, z64 ? 45 : 20, 2); /* version needed */
    buf_le(&h, 0, 2);             /* flags */
    buf_le(&h, 0, 2);             /* stored */
    buf_le(&h, 0, 2);             /* time */
    buf_le(&h, 0x21, 2);          /* date: 1980-01-01 */
    buf_le(&h, e->crc, 4);
    buf_le(&h, z64 ? TW_32 : size, 4);
    buf_le(&h, z64 ? TW_32 : size, 4);
    buf_le(&h, strlen(name), 2);
    buf_le(&h, z64 ? 20 : 0, 2);
    rt_text_puts(&h, name);
    if (z64) { /* ZIP64 extra: uncompressed, compressed */
        buf_le(&h, 0x0001, 2);
        buf_le(&h, 16, 2);
        buf_le(&h, size, 8);
        buf_le(&h, size, 8);
    }
    RT_TRY(rt_atomic_write(w->af, h.s, h.n));
    RT_TRY(rt_atomic_write(w->af, data, (size_t)size));
fail:
    rt_text_free(&h);
    return st;
}

static rt_status tw_directory(ckpt_torch_writer *w) {
    rt_text d = {0};
    const uint64_t cd_offset = rt_atomic_tell(w->af);
    for (size_t i = 0; i < w->n_e; i++) {
        const tw_entry *e = &w->e[i];
        const int big_size = e->size >= TW_32, big_off = e->offset >= TW_32;
        const int extra = (big_size ? 16 : 0) + (big_off ? 8 : 0);
        buf_le(&d, 0x02014b50u, 4);
        buf_le(&d, 45, 2); /* made by */
        buf_le(&d, extra ? 45 : 20, 2);
        buf_le(&d, 0, 2);
        buf_le(&d, 0, 2);
        buf_le(&d, 0, 2);
        buf_le(&d, 0x21, 2);
        buf_le(&d, e->crc, 4);
        buf_le(&d, big_size ? TW_32 : e->size, 4);
        buf_le(&d, big_size ? TW_32 : e->size, 4);
        buf_le(&d, strlen(e->name), 2);
        buf_le(&d, extra ? extra + 4 : 0, 2);
        buf_le(&d, 0, 2); /* comment */
        buf_le(&d, 0, 2); /* disk */
        buf_le(&d, 0, 2); /* internal attributes */
        buf_le(&d, 0, 4); /* external attributes */
        buf_le(&d, big_off ? TW_32 : e->offset, 4);
        rt_text_puts(&d, e->name);
        if (extra) { /* the ZIP64 fields in the order the spec lists them, only those needed */
            buf_le(&d, 0x0001, 2);
            buf_le(&d, (uint64_t)extra, 2);
            if (big_size) {
                buf_le(&d, e->size, 8);
                buf_le(&d, e->size, 8);
            }
            if (big_off) buf_le(&d, e->offset, 8);
        }
    }
    const uint64_t cd_size = d.n, z64_at = cd_offset + cd_size;
    const int z64 = w->n_e >= 0xFFFF || cd_offset >= TW_32 || cd_size >= TW_32;
    if (z64) {
        buf_le(&d, 0x06064b50u, 4);
        buf_le(&d, 44, 8);
        buf_le(&d, 45, 2);
        buf_le(&d, 45, 2);
        buf_le(&d, 0, 4);
        buf_le(&d, 0, 4);
        buf_le(&d, w->n_e, 8);
        buf_le(&d, w->n_e, 8);
        buf_le(&d, cd_size, 8);
        buf_le(&d, cd_offset, 8);
        buf_le(&d, 0x07064b50u, 4);
        buf_le(&d, 0, 4);
        buf_le(&d, z64_at, 8);
        buf_le(&d, 1, 4);
    }
    buf_le(&d, 0x06054b50u, 4);
    buf_le(&d, 0, 2);
    buf_le(&d, 0, 2);
    buf_le(&d, z64 ? 0xFFFF : w->n_e, 2);
    buf_le(&d, z64 ? 0xFFFF : w->n_e, 2);
    buf_le(&d, z64 ? TW_32 : cd_size, 4);
    buf_le(&d, z64 ? TW_32 : cd_offset, 4);
    buf_le(&d, 0, 2);
    rt_status st = rt_atomic_write(w->af, d.s, d.n);
    rt_text_free(&d);
    return st;
}

/* ---- the pickle (protocol 2, the opcodes torch.save uses) ---- */

static void pk_int(rt_text *b, uint64_t v) {
    if (v < 256) {
        buf_u8(b, 'K');
        buf_u8(b, (unsigned)v);
    } else if (v < 0x80000000u) {
        buf_u8(b, 'J');
        buf_le(b, v, 4);
    } else { /* LONG1: 8 little-endian bytes, non-negative (the top bit is clear below 2^63) */
        buf_u8(b, 0x8a);
        buf_u8(b, 8);
        buf_le(b, v, 8);
    }
}
static void pk_str(rt_text *b, const char *s) {
    buf_u8(b, 'X');
    buf_le(b, strlen(s), 4);
    rt_text_puts(b, s);
}
static void pk_global(rt_text *b, const char *module, const char *name) {
    buf_u8(b, 'c');
    rt_text_puts(b, module);
    buf_u8(b, '\n');
    rt_text_puts(b, name);
    buf_u8(b, '\n');
}
static void pk_ordered_dict(rt_text *b) {
    pk_global(b, "collections", "OrderedDict");
    buf_u8(b, ')');
    buf_u8(b, 'R');
}

static const char *tw_storage(rt_dtype t) {
    return t == RT_F16 ? "HalfStorage" : t == RT_BF16 ? "BFloat16Storage" : "FloatStorage";
}

/* _rebuild_tensor_v2(persistent storage k, 0, shape, contiguous strides, False, OrderedDict()) */
static void pk_tensor(rt_text *b, const tw_tensor *t, size_t k) {
    char key[32];
    snprintf(key, sizeof key, "%zu", k);
    pk_global(b, "torch._utils", "_rebuild_tensor_v2");
    buf_u8(b, '(');
    buf_u8(b, '(');
    pk_str(b, "storage");
    pk_global(b, "torch", tw_storage(t->dtype));
    pk_str(b, key);
    pk_str(b, "cpu");
    pk_int(b, t->numel);
    buf_u8(b, 't');
    buf_u8(b, 'Q');
    pk_int(b, 0);
    buf_u8(b, '(');
    for (int d = 0; d < t->ndim; d++) pk_int(b, t->shape[d]);
    buf_u8(b, 't');
    buf_u8(b, '(');
    for (int d = 0; d < t->ndim; d++) {
        uint64_t stride = 1;
        for (int j = d + 1; j < t->ndim; j++) stride *= t->shape[j];
        pk_int(b, stride);
    }
    buf_u8(b, 't');
    buf_u8(b, 0x89); /* requires_grad False */
    pk_ordered_dict(b);
    buf_u8(b, 't');
    buf_u8(b, 'R');
}

static void tw_pickle(const ckpt_torch_writer *w, rt_text *b) {
    buf_u8(b, 0x80);
    buf_u8(b, 2);
    if (w->wrap) {
        buf_u8(b, '}');
        pk_str(b, w->wrap);
    }
    pk_ordered_dict(b);
    buf_u8(b, '(');
    for (size_t k = 0; k < w->n_t; k++) {
        pk_str(b, w->t[k].name);
        pk_tensor(b, &w->t[k], k);
    }
    buf_u8(b, 'u');
    if (w->wrap) buf_u8(b, 's');
    buf_u8(b, '.');
}

/* ---- the writer ---- */

rt_status ckpt_torch_writer_begin(const char *path, const char *wrap, ckpt_torch_writer **out) {
    rt_status st = RT_OK;
    *out = NULL;
    ckpt_torch_writer *w = rt_xcalloc(1, sizeof *w);
    w->wrap = wrap ? rt_xstrdup(wrap) : NULL;
    RT_TRY(rt_atomic_begin(path, &w->af));
    *out = w;
    return RT_OK;
fail:
    ckpt_torch_writer_abort(w);
    return st;
}

rt_status ckpt_torch_writer_add(ckpt_torch_writer *w, const char *name, rt_dtype dtype, int ndim, const size_t *shape,
                                const void *data) {
    RT_CHECK(dtype == RT_F32 || dtype == RT_F16 || dtype == RT_BF16, "tensor '%s' dtype %s", name,
             rt_dtype_name(dtype));
    RT_CHECK(ndim >= 0 && ndim <= CKPT_MAX_DIMS, "tensor '%s' ndim %d", name, ndim);
    RT_GROW(w->t, w->cap_t, w->n_t + 1);
    tw_tensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = rt_xstrdup(name);
    t->dtype = dtype;
    t->ndim = ndim;
    t->numel = 1;
    for (int d = 0; d < ndim; d++) t->numel *= t->shape[d] = shape[d];
    char entry[64];
    snprintf(entry, sizeof entry, TW_ARCHIVE "/data/%zu", w->n_t);
    w->n_t++;
    return tw_entry_write(w, entry, data, (uint64_t)t->numel * rt_dtype_size(dtype));
}

rt_status ckpt_torch_writer_commit(ckpt_torch_writer *w) {
    rt_status st = RT_OK;
    rt_text pk = {0};
    tw_pickle(w, &pk);
    RT_TRY(tw_entry_write(w, TW_ARCHIVE "/data.pkl", pk.s, pk.n));
    RT_TRY(tw_entry_write(w, TW_ARCHIVE "/byteorder", "little", 6));
    RT_TRY(tw_entry_write(w, TW_ARCHIVE "/version", "3\n", 2));
    RT_TRY(tw_directory(w));
    st = rt_atomic_commit(w->af);
    w->af = NULL;
fail:
    rt_text_free(&pk);
    ckpt_torch_writer_abort(w);
    return st;
}

void ckpt_torch_writer_abort(ckpt_torch_writer *w) {
    if (!w) return;
    rt_atomic_abort(w->af);
    for (size_t i = 0; i < w->n_e; i++) free(w->e[i].name);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->e);
    free(w->t);
    free(w->wrap);
    free(w);
}
