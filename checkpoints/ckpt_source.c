/* HF weights in any of their file layouts behind one tensor list (see ckpt_source.h).
 *
 * A source is a set of open files (safetensors or torch) and one table of tensors, each
 * naming its file and its index there; a name index over the table gives lookups. */
#include "checkpoints/ckpt_source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoints/ckpt_name_index.h"
#include "checkpoints/ckpt_sharded.h"
#include "checkpoints/ckpt_torch.h"
#include "checkpoints/ckpt_zip.h"
#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_json.h"

typedef struct {
    char *path;
    ckpt_st_file *st; /* one of st, torch */
    ckpt_torch_file *torch;
} src_file;

typedef struct {
    const char *name; /* owned by its file */
    size_t file, index;
} src_entry;

struct ckpt_source {
    char *path;
    src_file *files;
    size_t n_files;
    src_entry *e;
    size_t n, cap;
    ckpt_name_index by_name;
};

static int src_is_file(const char *dir, const char *name, char *out, size_t size) {
    struct stat sb;
    if ((size_t)snprintf(out, size, "%s/%s", dir, name) >= size) return 0;
    return stat(out, &sb) == 0 && S_ISREG(sb.st_mode);
}

rt_status ckpt_source_find_weights(const char *dir, char *out_path, size_t size) {
    static const char *const names[] = {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                                        "pytorch_model.bin.index.json"};
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return rt_errorf(RT_ERR_IO,
                         "%s: cannot open model directory: %s (expected a Hugging Face model folder with "
                         "config.json and model.safetensors or pytorch_model.bin)",
                         dir, strerror(errno));
    if (S_ISREG(sb.st_mode)) {
        if ((size_t)snprintf(out_path, size, "%s", dir) >= size) return rt_errorf(RT_ERR_IO, "%s: path too long", dir);
        return RT_OK;
    }
    if (!S_ISDIR(sb.st_mode)) return rt_errorf(RT_ERR_IO, "%s: not a directory", dir);
    if (ckpt_sharded_is_dir(dir)) { /* tz-convert's folder: ckpt_weights reads it whole */
        if ((size_t)snprintf(out_path, size, "%s", dir) >= size) return rt_errorf(RT_ERR_IO, "%s: path too long", dir);
        return RT_OK;
    }
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        if (src_is_file(dir, names[k], out_path, size)) return RT_OK;
    return rt_errorf(RT_ERR_IO,
                     "%s: no weights in this directory (looked for model.safetensors, "
                     "model.safetensors.index.json, pytorch_model.bin, pytorch_model.bin.index.json)",
                     dir);
}

static int src_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static const char *src_torch_name(const ckpt_torch_file *f, size_t i) {
    ckpt_st_tensor t;
    ckpt_torch_tensor(f, i, &t);
    return t.name;
}

/* Opens one weights file by its first bytes and appends its tensors to the table. */
static rt_status src_add_file(ckpt_source *s, const char *path) {
    rt_status st = RT_OK;
    unsigned char head[16] = {0};
    ssize_t got = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return rt_errorf(RT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    got = read(fd, head, sizeof head);
    close(fd);
    s->files = rt_xrealloc(s->files, (s->n_files + 1) * sizeof *s->files);
    src_file *f = &s->files[s->n_files++];
    memset(f, 0, sizeof *f);
    f->path = rt_xstrdup(path);
    size_t count = 0;
    /* a safetensors header length may start with 0x80 too: only the legacy magic counts */
    if (got > 0 && (ckpt_zip_sniff(head, (size_t)got) || ckpt_torch_sniff_legacy(head, (size_t)got))) {
        RT_TRY(ckpt_torch_open(path, &f->torch));
        count = ckpt_torch_count(f->torch);
    } else {
        RT_TRY(ckpt_safetensors_open(path, &f->st));
        count = ckpt_safetensors_count(f->st);
    }
    RT_GROW(s->e, s->cap, s->n + count);
    for (size_t i = 0; i < count; i++) {
        src_entry *e = &s->e[s->n++];
        e->file = s->n_files - 1;
        e->index = i;
        e->name = f->torch ? src_torch_name(f->torch, i) : ckpt_safetensors_name(f->st, i);
    }
fail:
    return st;
}

/* The shards of an index, each opened once, in the order the weight_map first names them. */
static rt_status src_add_index(ckpt_source *s, const char *path) {
    rt_status st = RT_OK;
    cJSON *root = NULL;
    char *dir = NULL, shard[4096];
    RT_TRY(rt_json_load(path, &root));
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map)) RT_FAIL(RT_ERR_FORMAT, "%s: field 'weight_map' is missing or not an object", path);
    dir = rt_xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, 2, ".");
    const cJSON *it;
    cJSON_ArrayForEach(it, map) {
        if (!cJSON_IsString(it) || !it->valuestring[0])
            RT_FAIL(RT_ERR_FORMAT, "%s: weight_map['%s'] is not a file name", path, it->string);
        const char *fn = it->valuestring;
        if (strchr(fn, '/') || !strcmp(fn, ".") || !strcmp(fn, ".."))
            RT_FAIL(RT_ERR_FORMAT, "%s: weight_map['%s'] = '%.200s' is not a plain file name in the index's folder",
                    path, it->string, fn);
        if ((size_t)snprintf(shard, sizeof shard, "%s/%s", dir, fn) >= sizeof shard)
            RT_FAIL(RT_ERR_IO, "%s: shard path too long", path);
        size_t k = 0;
        while (k < s->n_files && strcmp(s->files[k].path, shard) != 0) k++;
        if (k == s->n_files) RT_TRY(src_add_file(s, shard));
    }
    const char *dup = ckpt_name_index_build(&s->by_name, s->e, sizeof *s->e, offsetof(src_entry, name), s->n);
    if (dup) RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' is in two shards", path, dup);
    cJSON_ArrayForEach(it, map) {
        long i = ckpt_name_index_find(&s->by_name, it->string);
        snprintf(shard, sizeof shard, "%s/%s", dir, it->valuestring);
        if (i < 0 || strcmp(s->files[s->e[i].file].path, shard) != 0)
            RT_FAIL(RT_ERR_FORMAT, "%s: weight_map puts '%s' in %s, which does not hold it", path, it->string, shard);
    }
fail:
    cJSON_Delete(root);
    free(dir);
    return st;
}

rt_status ckpt_source_open(const char *path, ckpt_source **out) {
    rt_status st = RT_OK;
    char file[4096];
    *out = NULL;
    ckpt_source *s = rt_xcalloc(1, sizeof *s);
    RT_TRY(ckpt_source_find_weights(path, file, sizeof file));
    s->path = rt_xstrdup(file);
    if (src_ends_with(file, ".index.json")) {
        RT_TRY(src_add_index(s, file));
    } else {
        RT_TRY(src_add_file(s, file));
        const char *dup = ckpt_name_index_build(&s->by_name, s->e, sizeof *s->e, offsetof(src_entry, name), s->n);
        if (dup) RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' appears twice", file, dup);
    }
    *out = s;
    return RT_OK;
fail:
    ckpt_source_close(s);
    return st;
}

void ckpt_source_close(ckpt_source *s) {
    if (!s) return;
    for (size_t k = 0; k < s->n_files; k++) {
        ckpt_safetensors_close(s->files[k].st);
        ckpt_torch_close(s->files[k].torch);
        free(s->files[k].path);
    }
    free(s->files);
    free(s->e);
    ckpt_name_index_free(&s->by_name);
    free(s->path);
    free(s);
}

const char *ckpt_source_path(const ckpt_source *s) { return s->path; }
size_t ckpt_source_count(const ckpt_source *s) { return s->n; }

const char *ckpt_source_name(const ckpt_source *s, size_t i) {
    RT_CHECK(i < s->n, "tensor index %zu of %zu", i, s->n);
    return s->e[i].name;
}

void ckpt_source_tensor(const ckpt_source *s, size_t i, ckpt_st_tensor *out) {
    RT_CHECK(i < s->n, "tensor index %zu of %zu", i, s->n);
    const src_file *f = &s->files[s->e[i].file];
    if (f->torch)
        ckpt_torch_tensor(f->torch, s->e[i].index, out);
    else
        ckpt_safetensors_tensor(f->st, s->e[i].index, out);
}

const char *ckpt_source_file_of(const ckpt_source *s, size_t i) {
    RT_CHECK(i < s->n, "tensor index %zu of %zu", i, s->n);
    return s->files[s->e[i].file].path;
}

long ckpt_source_index(const ckpt_source *s, const char *name) { return ckpt_name_index_find(&s->by_name, name); }

rt_status ckpt_source_read_f32(const ckpt_source *s, const char *name, float *dst, size_t numel_expected) {
    char sbuf[160];
    long i = ckpt_source_index(s, name);
    if (i < 0) return rt_errorf(RT_ERR_FORMAT, "%s: no tensor '%s' (it holds %zu tensors)", s->path, name, s->n);
    ckpt_st_tensor t;
    ckpt_source_tensor(s, (size_t)i, &t);
    const char *file = ckpt_source_file_of(s, (size_t)i);
    if (t.dtype != RT_F32 && t.dtype != RT_F16 && t.dtype != RT_BF16 && t.dtype != RT_F64)
        return rt_errorf(RT_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s, which does not convert to float32", file,
                         name, rt_dtype_name(t.dtype));
    if (t.numel != numel_expected)
        return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s' has shape %s (%zu elements), expected %zu elements", file,
                         name, ckpt_shape_str(t.ndim, t.shape, sbuf, sizeof sbuf), t.numel, numel_expected);
    const src_file *f = &s->files[s->e[i].file];
    if (f->torch) { /* a stored zip entry is read in place: its CRC is checked on first read */
        rt_status st = ckpt_torch_verify_tensor(f->torch, s->e[i].index);
        if (st != RT_OK) return st;
    }
    rt_convert_to_f32(dst, t.data, t.dtype, t.numel);
    return RT_OK;
}

bool ckpt_source_scalar(const ckpt_source *s, const char *name, double *value) {
    for (size_t k = 0; k < s->n_files; k++)
        if (s->files[k].torch && ckpt_torch_find_scalar(s->files[k].torch, name, value)) return true;
    return false;
}

void ckpt_source_release(const ckpt_source *s, size_t i) {
    RT_CHECK(i < s->n, "tensor index %zu of %zu", i, s->n);
    const src_file *f = &s->files[s->e[i].file];
    if (f->torch) {
        ckpt_torch_release(f->torch, s->e[i].index);
    } else {
        ckpt_st_tensor t;
        ckpt_safetensors_tensor(f->st, s->e[i].index, &t);
        ckpt_safetensors_release(f->st, t.data, t.nbytes);
    }
}
