/* torch.save zip checkpoints: zip + safe pickle + storage checks (see ckpt_torch.h). */
#include "checkpoints/ckpt_torch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/ckpt_name_index.h"
#include "checkpoints/ckpt_zip.h"

#define TORCH_REHINT                                                                                       \
    "re-save it with a recent torch (torch.save(torch.load(f, weights_only=True), f2)), or convert it to " \
    "safetensors (safetensors.torch.save_file)"

struct ckpt_torch_file {
    char *path;
    ckpt_zip *zip;
    ckpt_pickle_state state;
    const unsigned char **data; /* (n_tensors) first byte of each tensor */
    size_t *entry;              /* (n_tensors) the zip entry of each tensor's storage */
    unsigned char *checked;     /* (zip entries) CRC already checked */
};

bool ckpt_torch_sniff_legacy(const void *head, size_t n) {
    /* PROTO 2, LONG1 10 bytes, the magic number little-endian */
    static const unsigned char magic[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c,
                                          0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
    return n >= sizeof magic && memcmp(head, magic, sizeof magic) == 0;
}

/* The archive folder: the directory of the one entry named .../data.pkl. */
static rt_status torch_find_pickle(const ckpt_torch_file *f, size_t *idx, size_t *prefix_len) {
    const ckpt_zip *z = f->zip;
    long found = -1;
    for (size_t i = 0; i < ckpt_zip_count(z); i++) {
        const char *n = ckpt_zip_name(z, i);
        const char *slash = strchr(n, '/');
        if (!slash || strcmp(slash, "/data.pkl") != 0) continue;
        if (found >= 0)
            return rt_errorf(RT_ERR_FORMAT, "%s: two pickles ('%s' and '%s'); expected one <archive>/data.pkl", f->path,
                             ckpt_zip_name(z, (size_t)found), n);
        found = (long)i;
        *prefix_len = (size_t)(slash - n);
    }
    if (found < 0)
        return rt_errorf(RT_ERR_FORMAT, "%s: a zip without <archive>/data.pkl: not a torch.save checkpoint", f->path);
    *idx = (size_t)found;
    return RT_OK;
}

rt_status ckpt_torch_open(const char *path, ckpt_torch_file **out) {
    rt_status st = RT_OK;
    char *what = NULL, *ename = NULL;
    *out = NULL;
    ckpt_torch_file *f = rt_xcalloc(1, sizeof *f);
    f->path = rt_xstrdup(path);
    {
        unsigned char head[16] = {0};
        ssize_t got = 0;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) RT_FAIL(RT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        got = read(fd, head, sizeof head);
        close(fd);
        if (got > 0 && ckpt_torch_sniff_legacy(head, (size_t)got))
            RT_FAIL(RT_ERR_UNSUPPORTED,
                    "%s: a legacy (torch < 1.6, non-zip) checkpoint, which we do not read; " TORCH_REHINT, path);
        if (got > 0 && head[0] == 0x80)
            RT_FAIL(RT_ERR_UNSUPPORTED, "%s: a bare pickle, not a torch zip checkpoint; " TORCH_REHINT, path);
    }
    RT_TRY(ckpt_zip_open(path, &f->zip));
    size_t pkl = 0, plen = 0;
    RT_TRY(torch_find_pickle(f, &pkl, &plen));
    const char *pname = ckpt_zip_name(f->zip, pkl);
    size_t elen = plen + 32;
    ename = rt_xmalloc(elen + 256);
    snprintf(ename, elen, "%.*s/byteorder", (int)plen, pname);
    long bo = ckpt_zip_find(f->zip, ename);
    if (bo >= 0) {
        const void *d = NULL;
        size_t n = 0;
        RT_TRY(ckpt_zip_data(f->zip, (size_t)bo, &d, &n));
        if (!(n == 6 && memcmp(d, "little", 6) == 0))
            RT_FAIL(RT_ERR_UNSUPPORTED,
                    "%s: '%s' is not \"little\": big-endian checkpoints are not supported; re-save "
                    "it on a little-endian machine",
                    path, ename);
    }
    const void *pdata = NULL;
    size_t psize = 0;
    /* a state dict's pickle names each tensor once and each has a storage entry in the zip: a few
     * hundred bytes per entry. One that would inflate far past that is refused before inflating
     * (a 3.5 MB file whose pickle inflates to 3.2 GB was a memory bomb). */
    const size_t pkl_limit = ((size_t)1 << 20) + ckpt_zip_count(f->zip) * (size_t)4096;
    if (ckpt_zip_size(f->zip, pkl) > pkl_limit)
        RT_FAIL(RT_ERR_FORMAT,
                "%s: '%s' would inflate to %zu bytes, more than the %zu a state dict of %zu zip entries "
                "needs: damaged or hostile",
                path, pname, ckpt_zip_size(f->zip, pkl), pkl_limit, ckpt_zip_count(f->zip));
    RT_TRY(ckpt_zip_verify(f->zip, pkl)); /* small, and the one entry that steers everything else */
    RT_TRY(ckpt_zip_data(f->zip, pkl, &pdata, &psize));
    size_t wlen = strlen(path) + strlen(pname) + 4;
    what = rt_xmalloc(wlen);
    snprintf(what, wlen, "%s: %s", path, pname);
    RT_TRY(ckpt_pickle_read(pdata, psize, what, &f->state));

    f->data = rt_xcalloc(f->state.n_tensors ? f->state.n_tensors : 1, sizeof *f->data);
    f->entry = rt_xcalloc(f->state.n_tensors ? f->state.n_tensors : 1, sizeof *f->entry);
    f->checked = rt_xcalloc(ckpt_zip_count(f->zip) + 1, 1);
    for (size_t i = 0; i < f->state.n_tensors; i++) {
        const ckpt_pickle_tensor *t = &f->state.tensors[i];
        snprintf(ename, elen + 256, "%.*s/data/%s", (int)plen, pname, t->storage_key);
        long e = ckpt_zip_find(f->zip, ename);
        if (e < 0) RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s': storage entry '%s' is missing", path, t->name, ename);
        const void *d = NULL;
        size_t n = 0;
        size_t es = rt_dtype_size(t->dtype);
        if (ckpt_zip_size(f->zip, (size_t)e) != t->storage_numel * es)
            RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s': storage entry '%s' holds %zu bytes, its id declares %zu x %s",
                    path, t->name, ename, ckpt_zip_size(f->zip, (size_t)e), t->storage_numel, rt_dtype_name(t->dtype));
        RT_TRY(ckpt_zip_data(f->zip, (size_t)e, &d, &n));
        /* rebuild checked offset + numel <= storage_numel for non-empty tensors */
        f->data[i] = (const unsigned char *)d + (t->numel ? t->storage_offset * es : 0);
        f->entry[i] = (size_t)e;
    }
    ckpt_name_index ix = {0};
    const char *dup = ckpt_name_index_build(&ix, f->state.tensors, sizeof *f->state.tensors,
                                            offsetof(ckpt_pickle_tensor, name), f->state.n_tensors);
    ckpt_name_index_free(&ix);
    if (dup)
        RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' appears twice (after joining nested dict keys with '.')", path, dup);
    *out = f;
    free(what);
    free(ename);
    return RT_OK;
fail:
    free(what);
    free(ename);
    ckpt_torch_close(f);
    return st;
}

void ckpt_torch_close(ckpt_torch_file *f) {
    if (!f) return;
    ckpt_pickle_state_free(&f->state);
    ckpt_zip_close(f->zip);
    free(f->data);
    free(f->entry);
    free(f->checked);
    free(f->path);
    free(f);
}

size_t ckpt_torch_count(const ckpt_torch_file *f) { return f->state.n_tensors; }

void ckpt_torch_tensor(const ckpt_torch_file *f, size_t i, ckpt_st_tensor *out) {
    RT_CHECK(i < f->state.n_tensors, "tensor index %zu of %zu", i, f->state.n_tensors);
    const ckpt_pickle_tensor *t = &f->state.tensors[i];
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->dtype = t->dtype;
    out->ndim = t->ndim;
    memcpy(out->shape, t->shape, sizeof out->shape);
    out->data = f->data[i];
    out->numel = t->numel;
    out->nbytes = t->numel * rt_dtype_size(t->dtype);
}

rt_status ckpt_torch_verify_tensor(const ckpt_torch_file *f, size_t i) {
    RT_CHECK(i < f->state.n_tensors, "tensor index %zu of %zu", i, f->state.n_tensors);
    size_t e = f->entry[i];
    if (f->checked[e]) return RT_OK;
    rt_status st = ckpt_zip_verify(f->zip, e);
    if (st == RT_OK) f->checked[e] = 1;
    return st;
}

size_t ckpt_torch_scalar_count(const ckpt_torch_file *f) { return f->state.n_scalars; }

const ckpt_pickle_scalar *ckpt_torch_scalar(const ckpt_torch_file *f, size_t i) {
    RT_CHECK(i < f->state.n_scalars, "scalar index %zu of %zu", i, f->state.n_scalars);
    return &f->state.scalars[i];
}

bool ckpt_torch_find_scalar(const ckpt_torch_file *f, const char *name, double *value) {
    for (size_t i = 0; i < f->state.n_scalars; i++) {
        if (strcmp(f->state.scalars[i].name, name) == 0) {
            *value = f->state.scalars[i].value;
            return true;
        }
    }
    return false;
}

void ckpt_torch_release(const ckpt_torch_file *f, size_t i) {
    ckpt_st_tensor t;
    ckpt_torch_tensor(f, i, &t);
    ckpt_zip_release(f->zip, t.data, t.nbytes);
}
