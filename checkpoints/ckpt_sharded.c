/* The tunezoo sharded checkpoint folder (see ckpt_sharded.h). */
#include "checkpoints/ckpt_sharded.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoints/ckpt_name_index.h"
#include "checkpoints/ckpt_native.h"
#include "checkpoints/ckpt_tp.h"
#include "runtime/base/rt_atomic.h"
#include "runtime/base/rt_fs.h"
#include "runtime/base/rt_json.h"

#define SHARDED_FORMAT "tunezoo-sharded"
#define SHARDED_VERSION 1
#define SHARDED_PATH_MAX 4096
#define CKPT_SHARDED_NAME_MSG (SHARDED_PATH_MAX + 256)

static const char *const sharded_rules[] = {"none", "col", "row", "vocab", "qkv"};

const char *ckpt_sharded_rule_name(rt_tp_rule rule) {
    return (unsigned)rule < sizeof sharded_rules / sizeof *sharded_rules ? sharded_rules[rule] : "?";
}

bool ckpt_sharded_rule_from_name(const char *name, rt_tp_rule *rule) {
    for (size_t i = 0; i < sizeof sharded_rules / sizeof *sharded_rules; i++)
        if (strcmp(name, sharded_rules[i]) == 0) {
            *rule = (rt_tp_rule)i;
            return true;
        }
    return false;
}

bool ckpt_sharded_is_dir(const char *path) {
    char m[SHARDED_PATH_MAX];
    struct stat sb;
    if ((size_t)snprintf(m, sizeof m, "%s/%s", path, CKPT_SHARDED_MANIFEST) >= sizeof m) return false;
    return stat(m, &sb) == 0 && S_ISREG(sb.st_mode);
}

static void sharded_rank_path(const char *dir, int rank, int tp, char *out, size_t size) {
    snprintf(out, size, "%s/rank-%02d-of-%02d.tzck", dir, rank, tp);
}

static const char *sharded_base(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static void sharded_crc_hex(uint32_t crc, char out[9]) { snprintf(out, 9, "%08x", (unsigned)crc); }

/* Float32 into F16 or BF16 bytes, rounding to nearest even. */
static void sharded_from_f32(void *dst, const float *src, size_t n, rt_dtype dtype) {
    uint16_t *h = dst;
    for (size_t i = 0; i < n; i++) h[i] = dtype == RT_BF16 ? rt_f32_to_bf16(src[i]) : rt_f32_to_f16(src[i]);
}

/* A file name the manifest may list: a plain name in the folder. */
static bool sharded_plain_name(const char *s) { return s[0] && s[0] != '.' && !strchr(s, '/') && strlen(s) < 256; }

/* ---- writing ---- */

struct ckpt_sharded_writer {
    char *dir, *partial;
    ckpt_sharded_spec spec;
    char *arch, *source_arch, *source;
    ckpt_native_writer **ranks;
    cJSON *tensors, *files;
    float *shard;
    void *bytes;
    size_t cap;
};

/* Removes the files of a folder we created, then the folder. */
rt_status ckpt_sharded_writer_begin(const char *dir, const ckpt_sharded_spec *spec, ckpt_sharded_writer **out) {
    rt_status st = RT_OK;
    struct stat sb;
    *out = NULL;
    if (spec->tp < 1 || spec->tp > CKPT_SHARDED_MAX_TP)
        return rt_errorf(RT_ERR_CONFIG, "--tp %d: must be 1 to %d", spec->tp, CKPT_SHARDED_MAX_TP);
    if (spec->dtype != RT_F32 && spec->dtype != RT_BF16 && spec->dtype != RT_F16)
        return rt_errorf(RT_ERR_CONFIG, "%s: dtype %s cannot be stored (F32, BF16 or F16)", dir,
                         rt_dtype_name(spec->dtype));
    if (stat(dir, &sb) == 0)
        return rt_errorf(RT_ERR_IO,
                         "%s: already exists; tz-convert does not overwrite (remove it or pick another name)", dir);
    ckpt_sharded_writer *w = rt_xcalloc(1, sizeof *w);
    w->dir = rt_xstrdup(dir);
    w->spec = *spec;
    w->arch = rt_xstrdup(spec->arch);
    w->source_arch = rt_xstrdup(spec->source_arch ? spec->source_arch : spec->arch);
    w->source = rt_xstrdup(spec->source ? spec->source : "");
    w->tensors = cJSON_CreateArray();
    w->files = cJSON_CreateArray();
    w->ranks = rt_xcalloc((size_t)spec->tp, sizeof *w->ranks);
    RT_TRY(rt_atomic_partial_dir(dir, &w->partial));
    for (int r = 0; r < spec->tp; r++) {
        char path[SHARDED_PATH_MAX], meta[128];
        sharded_rank_path(w->partial, r, spec->tp, path, sizeof path);
        snprintf(meta, sizeof meta, "{\"tp_rank\": %d, \"tp\": %d}", r, spec->tp);
        RT_TRY(ckpt_native_writer_begin(path, meta, &w->ranks[r]));
    }
    *out = w;
    return RT_OK;
fail:
    ckpt_sharded_writer_abort(w);
    return st;
}

static void sharded_writer_free(ckpt_sharded_writer *w) {
    free(w->dir);
    free(w->partial);
    free(w->arch);
    free(w->source_arch);
    free(w->source);
    free(w->ranks);
    cJSON_Delete(w->tensors);
    cJSON_Delete(w->files);
    free(w->shard);
    free(w->bytes);
    free(w);
}

rt_status ckpt_sharded_writer_add(ckpt_sharded_writer *w, const char *name, rt_tp_rule rule, int ndim,
                                  const size_t *full_shape, const float *full) {
    rt_status st = RT_OK;
    const int tp = w->spec.tp;
    if (ndim < 1 || ndim > 2)
        return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s' has %d dims (1 or 2 expected)", w->dir, name, ndim);
    ckpt_tp_desc d = {.rule = rule, .ndim = ndim, .n_head = rule == RT_TP_QKV ? w->spec.n_head : 0, .size = tp};
    for (int k = 0; k < ndim; k++) d.full[k] = (int64_t)full_shape[k];
    cJSON *t = cJSON_CreateObject(), *shape = NULL, *crcs = NULL;
    cJSON_AddItemToArray(w->tensors, t);
    cJSON_AddStringToObject(t, "name", name);
    shape = cJSON_AddArrayToObject(t, "shape");
    for (int k = 0; k < ndim; k++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)full_shape[k]));
    cJSON_AddStringToObject(t, "tp", ckpt_sharded_rule_name(rule));
    crcs = cJSON_AddArrayToObject(t, "crc32");
    for (int r = 0; r < tp; r++) {
        int64_t ls[RT_PARAM_MAX_DIMS];
        d.rank = r;
        char what[CKPT_SHARDED_NAME_MSG];
        snprintf(what, sizeof what, "%s: tensor '%s'", w->dir, name);
        RT_TRY(ckpt_tp_local_shape(&d, what, ls));
        size_t local[CKPT_MAX_DIMS], n = 1;
        for (int k = 0; k < ndim; k++) n *= local[k] = (size_t)ls[k];
        if (n > w->cap) {
            w->cap = n;
            w->shard = rt_xrealloc(w->shard, n * sizeof(float));
            w->bytes = rt_xrealloc(w->bytes, n * sizeof(float));
        }
        /* a replicated tensor's shard is the tensor: no copy (a VOCAB one is padded even at tp 1) */
        const float *shard = full;
        if (rule == RT_TP_VOCAB || (tp > 1 && rule != RT_TP_NONE)) {
            ckpt_tp_shard(&d, w->shard, full);
            shard = w->shard;
        }
        const void *bytes = shard;
        if (w->spec.dtype != RT_F32) {
            sharded_from_f32(w->bytes, shard, n, w->spec.dtype);
            bytes = w->bytes;
        }
        RT_TRY(ckpt_native_writer_add(w->ranks[r], name, w->spec.dtype, ndim, local, bytes));
        char hex[9];
        sharded_crc_hex(ckpt_native_writer_last_crc(w->ranks[r]), hex);
        cJSON_AddItemToArray(crcs, cJSON_CreateString(hex));
    }
fail:
    return st;
}

rt_status ckpt_sharded_writer_put_file(ckpt_sharded_writer *w, const char *name, const void *data, size_t n) {
    char dst[SHARDED_PATH_MAX], hex[9];
    RT_CHECK(sharded_plain_name(name), "file name '%s'", name);
    snprintf(dst, sizeof dst, "%s/%s", w->partial, name);
    rt_status st = rt_atomic_write_file(dst, data, n);
    if (st != RT_OK) return st;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", name);
    sharded_crc_hex(ckpt_native_crc32(data, n), hex);
    cJSON_AddStringToObject(e, "crc32", hex);
    cJSON_AddItemToArray(w->files, e);
    return RT_OK;
}

rt_status ckpt_sharded_writer_copy(ckpt_sharded_writer *w, const char *src_path) {
    char *buf = NULL;
    size_t n = 0;
    rt_status st = rt_read_file(src_path, 0, &buf, &n);
    if (st == RT_OK) st = ckpt_sharded_writer_put_file(w, sharded_base(src_path), buf, n);
    free(buf);
    return st;
}

rt_status ckpt_sharded_writer_commit(ckpt_sharded_writer *w) {
    rt_status st = RT_OK;
    char *text = NULL, path[SHARDED_PATH_MAX];
    for (int r = 0; r < w->spec.tp; r++) {
        ckpt_native_writer *rw = w->ranks[r];
        w->ranks[r] = NULL; /* commit consumes it */
        RT_TRY(ckpt_native_writer_commit(rw));
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "format", SHARDED_FORMAT);
    cJSON_AddNumberToObject(m, "version", SHARDED_VERSION);
    cJSON_AddStringToObject(m, "arch", w->arch);
    cJSON_AddStringToObject(m, "source_arch", w->source_arch);
    cJSON_AddStringToObject(m, "source", w->source);
    cJSON_AddNumberToObject(m, "tp", w->spec.tp);
    cJSON_AddStringToObject(m, "dtype", rt_dtype_name(w->spec.dtype));
    cJSON_AddNumberToObject(m, "n_head", w->spec.n_head);
    cJSON_AddNumberToObject(m, "vocab_size", w->spec.vocab_size);
    cJSON_AddItemToObject(m, "files", w->files);
    cJSON_AddItemToObject(m, "tensors", w->tensors);
    w->files = w->tensors = NULL; /* owned by m now */
    text = cJSON_Print(m);
    cJSON_Delete(m);
    snprintf(path, sizeof path, "%s/%s", w->partial, CKPT_SHARDED_MANIFEST);
    RT_TRY(rt_atomic_write_file(path, text, strlen(text)));
    if (rename(w->partial, w->dir) != 0)
        RT_FAIL(RT_ERR_IO, "%s: cannot move the finished folder into place: %s", w->dir, strerror(errno));
    free(w->partial);
    w->partial = NULL;
fail:
    cJSON_free(text);
    ckpt_sharded_writer_abort(w);
    return st;
}

void ckpt_sharded_writer_abort(ckpt_sharded_writer *w) {
    if (!w) return;
    for (int r = 0; r < w->spec.tp; r++) ckpt_native_writer_abort(w->ranks[r]);
    if (w->partial) rt_atomic_partial_dir_remove(w->partial);
    sharded_writer_free(w);
}

/* ---- reading ---- */

typedef struct {
    char *name;
    ckpt_sharded_tensor t;
    uint32_t *crc; /* (tp) */
} sharded_entry;

struct ckpt_sharded {
    char *dir, *arch;
    int tp, n_head, vocab_size;
    rt_dtype dtype;
    sharded_entry *e;
    size_t n;
    char **files;
    size_t n_files;
    ckpt_native_file **ranks;
    ckpt_name_index by_name;
    float *scratch;
    size_t scratch_cap;
};

/* A manifest integer in [lo, hi]. */
static rt_status sharded_int(const cJSON *o, const char *path, const char *key, int lo, int hi, int *out) {
    rt_status st = rt_json_get_int(o, path, key, out, true, 0);
    if (st != RT_OK) return st;
    if (*out < lo || *out > hi)
        return rt_errorf(RT_ERR_FORMAT, "%s: \"%s\" is %d, expected %d to %d", path, key, *out, lo, hi);
    return RT_OK;
}

static bool sharded_parse_hex(const cJSON *item, uint32_t *out) {
    if (!cJSON_IsString(item) || strlen(item->valuestring) != 8) return false;
    char *end;
    unsigned long v = strtoul(item->valuestring, &end, 16);
    *out = (uint32_t)v;
    return *end == '\0';
}

static rt_status sharded_parse_tensor(ckpt_sharded *s, const cJSON *item, const char *mpath, size_t i) {
    sharded_entry *e = &s->e[i];
    const char *name = NULL, *rule = NULL;
    rt_status st = RT_OK;
    if (!cJSON_IsObject(item)) return rt_errorf(RT_ERR_FORMAT, "%s: tensors[%zu] is not an object", mpath, i);
    RT_TRY(rt_json_get_string(item, mpath, "name", &name, true, NULL));
    RT_TRY(rt_json_get_string(item, mpath, "tp", &rule, true, NULL));
    e->name = rt_xstrdup(name);
    e->t.name = e->name;
    if (!ckpt_sharded_rule_from_name(rule, &e->t.rule))
        RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s': unknown tp rule \"%s\" (none, col, row, vocab or qkv)", mpath, name,
                rule);
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    int nd = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : -1;
    if (nd < 1 || nd > 2)
        RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s': \"shape\" must be an array of 1 or 2 sizes", mpath, name);
    e->t.ndim = nd;
    e->t.numel = 1;
    for (int k = 0; k < nd; k++) {
        const cJSON *d = cJSON_GetArrayItem(shape, k);
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 9.0e15 ||
            d->valuedouble != (double)(int64_t)d->valuedouble)
            RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a size", mpath, name, k);
        e->t.shape[k] = (size_t)d->valuedouble;
        if (e->t.shape[k] && e->t.numel > SIZE_MAX / sizeof(double) / e->t.shape[k])
            RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s': the shape's size overflows", mpath, name);
        e->t.numel *= e->t.shape[k];
    }
    const cJSON *crcs = cJSON_GetObjectItemCaseSensitive(item, "crc32");
    if (!cJSON_IsArray(crcs) || cJSON_GetArraySize(crcs) != s->tp)
        RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s': \"crc32\" must list %d checksums, one per rank", mpath, name, s->tp);
    e->crc = rt_xcalloc((size_t)s->tp, sizeof *e->crc);
    for (int r = 0; r < s->tp; r++)
        if (!sharded_parse_hex(cJSON_GetArrayItem(crcs, r), &e->crc[r]))
            RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s': crc32[%d] is not 8 hex digits", mpath, name, r);
fail:
    return st;
}

/* The tp split of entry e on rank r. */
static void sharded_desc(const ckpt_sharded *s, const sharded_entry *e, int r, ckpt_tp_desc *d) {
    memset(d, 0, sizeof *d);
    d->rule = e->t.rule;
    d->ndim = e->t.ndim;
    for (int k = 0; k < e->t.ndim; k++) d->full[k] = (int64_t)e->t.shape[k];
    d->n_head = e->t.rule == RT_TP_QKV ? s->n_head : 0;
    d->rank = r;
    d->size = s->tp;
}

/* Every rank file holds the tensor with the shard's shape, the dtype and the manifest's CRC. */
static rt_status sharded_check_entry(const ckpt_sharded *s, const sharded_entry *e) {
    rt_status st = RT_OK;
    for (int r = 0; r < s->tp; r++) {
        ckpt_tp_desc d;
        int64_t ls[RT_PARAM_MAX_DIMS];
        ckpt_native_record rec;
        sharded_desc(s, e, r, &d);
        RT_TRY(ckpt_tp_local_shape(&d, e->name, ls));
        RT_TRY(ckpt_native_find(s->ranks[r], e->name, &rec));
        int ok = rec.ndim == e->t.ndim && rec.dtype == s->dtype;
        for (int k = 0; ok && k < rec.ndim; k++) ok = rec.shape[k] == (size_t)ls[k];
        if (!ok) {
            char got[96];
            RT_FAIL(RT_ERR_FORMAT, "%s: record '%s' is %s %s, the manifest's split says %s [%lld%s%lld]",
                    ckpt_native_path(s->ranks[r]), e->name, rt_dtype_name(rec.dtype),
                    ckpt_shape_str(rec.ndim, rec.shape, got, sizeof got), rt_dtype_name(s->dtype), (long long)ls[0],
                    e->t.ndim > 1 ? ", " : "", e->t.ndim > 1 ? (long long)ls[1] : 0LL);
        }
        if (rec.crc32 != e->crc[r])
            RT_FAIL(RT_ERR_FORMAT,
                    "%s: record '%s' has checksum %08x, the manifest says %08x (the files do not belong "
                    "together)",
                    ckpt_native_path(s->ranks[r]), e->name, (unsigned)rec.crc32, (unsigned)e->crc[r]);
    }
fail:
    return st;
}

/* The copied files exist with the manifest's checksum. */
static rt_status sharded_check_files(const ckpt_sharded *s, const cJSON *files, const char *mpath) {
    rt_status st = RT_OK;
    for (size_t i = 0; i < s->n_files; i++) {
        const cJSON *item = cJSON_GetArrayItem(files, (int)i);
        uint32_t want, got;
        char path[SHARDED_PATH_MAX];
        char *buf = NULL;
        if (!sharded_parse_hex(cJSON_GetObjectItemCaseSensitive(item, "crc32"), &want))
            return rt_errorf(RT_ERR_FORMAT, "%s: files[%zu]: \"crc32\" is not 8 hex digits", mpath, i);
        snprintf(path, sizeof path, "%s/%s", s->dir, s->files[i]);
        size_t n = 0;
        rt_status rst = rt_read_file(path, 0, &buf, &n);
        if (rst != RT_OK) return rst;
        got = ckpt_native_crc32(buf, n);
        free(buf);
        if (got != want)
            return rt_errorf(RT_ERR_FORMAT, "%s: checksum %08x, the manifest says %08x (the file was changed)", path,
                             (unsigned)got, (unsigned)want);
    }
    return st;
}

rt_status ckpt_sharded_open(const char *dir, ckpt_sharded **out) {
    rt_status st = RT_OK;
    cJSON *m = NULL;
    char mpath[SHARDED_PATH_MAX];
    const char *format = NULL, *arch = NULL, *dtype = NULL;
    *out = NULL;
    ckpt_sharded *s = rt_xcalloc(1, sizeof *s);
    s->dir = rt_xstrdup(dir);
    snprintf(mpath, sizeof mpath, "%s/%s", dir, CKPT_SHARDED_MANIFEST);
    RT_TRY(rt_json_load(mpath, &m));
    if (!cJSON_IsObject(m)) RT_FAIL(RT_ERR_FORMAT, "%s: not a JSON object", mpath);
    RT_TRY(rt_json_get_string(m, mpath, "format", &format, true, NULL));
    if (strcmp(format, SHARDED_FORMAT) != 0)
        RT_FAIL(RT_ERR_FORMAT, "%s: \"format\" is \"%s\", expected \"%s\"", mpath, format, SHARDED_FORMAT);
    int version;
    RT_TRY(sharded_int(m, mpath, "version", SHARDED_VERSION, SHARDED_VERSION, &version));
    RT_TRY(sharded_int(m, mpath, "tp", 1, CKPT_SHARDED_MAX_TP, &s->tp));
    RT_TRY(sharded_int(m, mpath, "n_head", 0, 1 << 20, &s->n_head));
    RT_TRY(sharded_int(m, mpath, "vocab_size", 0, 1 << 30, &s->vocab_size));
    RT_TRY(rt_json_get_string(m, mpath, "arch", &arch, true, NULL));
    s->arch = rt_xstrdup(arch);
    RT_TRY(rt_json_get_string(m, mpath, "dtype", &dtype, true, NULL));
    if (!rt_dtype_from_name(dtype, &s->dtype) || (s->dtype != RT_F32 && s->dtype != RT_BF16 && s->dtype != RT_F16))
        RT_FAIL(RT_ERR_FORMAT, "%s: \"dtype\" is \"%s\", expected F32, BF16 or F16", mpath, dtype);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(m, "files");
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(m, "tensors");
    if (!cJSON_IsArray(files) || !cJSON_IsArray(tensors))
        RT_FAIL(RT_ERR_FORMAT, "%s: \"files\" and \"tensors\" must be arrays", mpath);
    s->n_files = (size_t)cJSON_GetArraySize(files);
    s->files = rt_xcalloc(s->n_files + 1, sizeof *s->files);
    for (size_t i = 0; i < s->n_files; i++) {
        const char *name = NULL;
        const cJSON *item = cJSON_GetArrayItem(files, (int)i);
        if (!cJSON_IsObject(item)) RT_FAIL(RT_ERR_FORMAT, "%s: files[%zu] is not an object", mpath, i);
        RT_TRY(rt_json_get_string(item, mpath, "name", &name, true, NULL));
        if (!sharded_plain_name(name))
            RT_FAIL(RT_ERR_FORMAT, "%s: files[%zu] \"%s\" is not a plain file name", mpath, i, name);
        s->files[i] = rt_xstrdup(name);
    }
    s->n = (size_t)cJSON_GetArraySize(tensors);
    s->e = rt_xcalloc(s->n + 1, sizeof *s->e);
    for (size_t i = 0; i < s->n; i++) RT_TRY(sharded_parse_tensor(s, cJSON_GetArrayItem(tensors, (int)i), mpath, i));
    const char *dup = ckpt_name_index_build(&s->by_name, s->e, sizeof *s->e, offsetof(sharded_entry, name), s->n);
    if (dup) RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' is listed twice", mpath, dup);
    s->ranks = rt_xcalloc((size_t)s->tp, sizeof *s->ranks);
    for (int r = 0; r < s->tp; r++) {
        char path[SHARDED_PATH_MAX];
        sharded_rank_path(dir, r, s->tp, path, sizeof path);
        RT_TRY(ckpt_native_open(path, &s->ranks[r]));
        if (ckpt_native_count(s->ranks[r]) != s->n)
            RT_FAIL(RT_ERR_FORMAT, "%s: holds %zu records, the manifest lists %zu tensors", path,
                    ckpt_native_count(s->ranks[r]), s->n);
    }
    for (size_t i = 0; i < s->n; i++) RT_TRY(sharded_check_entry(s, &s->e[i]));
    RT_TRY(sharded_check_files(s, files, mpath));
    cJSON_Delete(m);
    *out = s;
    return RT_OK;
fail:
    cJSON_Delete(m);
    ckpt_sharded_close(s);
    return st;
}

void ckpt_sharded_close(ckpt_sharded *s) {
    if (!s) return;
    for (int r = 0; s->ranks && r < s->tp; r++) ckpt_native_close(s->ranks[r]);
    for (size_t i = 0; i < s->n; i++) {
        free(s->e[i].name);
        free(s->e[i].crc);
    }
    for (size_t i = 0; i < s->n_files; i++) free(s->files[i]);
    ckpt_name_index_free(&s->by_name);
    free(s->files);
    free(s->ranks);
    free(s->e);
    free(s->scratch);
    free(s->arch);
    free(s->dir);
    free(s);
}

const char *ckpt_sharded_dir(const ckpt_sharded *s) { return s->dir; }
const char *ckpt_sharded_arch(const ckpt_sharded *s) { return s->arch; }
int ckpt_sharded_tp(const ckpt_sharded *s) { return s->tp; }
rt_dtype ckpt_sharded_dtype(const ckpt_sharded *s) { return s->dtype; }
int ckpt_sharded_n_head(const ckpt_sharded *s) { return s->n_head; }
int ckpt_sharded_vocab_size(const ckpt_sharded *s) { return s->vocab_size; }
size_t ckpt_sharded_count(const ckpt_sharded *s) { return s->n; }
size_t ckpt_sharded_file_count(const ckpt_sharded *s) { return s->n_files; }
const char *ckpt_sharded_file(const ckpt_sharded *s, size_t i) { return i < s->n_files ? s->files[i] : NULL; }

void ckpt_sharded_tensor_at(const ckpt_sharded *s, size_t i, ckpt_sharded_tensor *out) {
    RT_CHECK(i < s->n, "tensor %zu of %zu", i, s->n);
    *out = s->e[i].t;
}

long ckpt_sharded_find(const ckpt_sharded *s, const char *name) { return ckpt_name_index_find(&s->by_name, name); }

void ckpt_sharded_shard(const ckpt_sharded *s, size_t i, int rank, const void **data, size_t *nbytes) {
    ckpt_native_record rec;
    RT_CHECK(i < s->n && rank >= 0 && rank < s->tp, "tensor %zu rank %d", i, rank);
    RT_CHECK(ckpt_native_find(s->ranks[rank], s->e[i].name, &rec) == RT_OK, "record checked at open");
    *data = rec.data;
    *nbytes = rec.nbytes;
}

rt_status ckpt_sharded_read_full(ckpt_sharded *s, size_t i, float *dst) {
    RT_CHECK(i < s->n, "tensor %zu of %zu", i, s->n);
    const sharded_entry *e = &s->e[i];
    size_t total = 0;
    for (int r = 0; r < s->tp; r++) {
        ckpt_native_record rec;
        RT_CHECK(ckpt_native_find(s->ranks[r], e->name, &rec) == RT_OK, "record checked at open");
        total += rec.numel;
    }
    if (total > s->scratch_cap) {
        s->scratch_cap = total;
        s->scratch = rt_xrealloc(s->scratch, total * sizeof(float));
    }
    size_t at = 0;
    for (int r = 0; r < s->tp; r++) {
        ckpt_native_record rec;
        RT_CHECK(ckpt_native_find(s->ranks[r], e->name, &rec) == RT_OK, "record checked at open");
        rt_convert_to_f32(s->scratch + at, rec.data, rec.dtype, rec.numel);
        ckpt_native_release(s->ranks[r], rec.data, rec.nbytes);
        at += rec.numel;
    }
    ckpt_tp_desc d;
    sharded_desc(s, e, 0, &d);
    ckpt_tp_gather(&d, dst, s->scratch);
    return RT_OK;
}
