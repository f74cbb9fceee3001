/* A model's weights by our names, from HF-style files, Megatron rank files or a tunezoo
 * sharded folder (see ckpt_weights.h). */
#include "checkpoints/ckpt_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_peft.h"
#include "checkpoints/ckpt_sharded.h"
#include "checkpoints/ckpt_source.h"
#include "checkpoints/ckpt_torch_write.h"
#include "checkpoints/ckpt_tp.h"
#include "runtime/base/rt_buf.h"

typedef enum { W_SOURCE, W_RANKS, W_SHARDED } w_kind;

typedef struct {
    char *name; /* ours */
    const ckpt_map_row *row;
    long part[3]; /* tensor index in the (rank 0) source; -1 when absent */
    long alias;   /* an ALIAS row's tensor, used when no main one */
    const ckpt_map_row *alias_row;
    int ndim;
    size_t shape[CKPT_MAX_DIMS]; /* full, ours */
    size_t local[CKPT_MAX_DIMS]; /* W_RANKS: one rank's shard, ours */
    size_t numel;
    rt_dtype dtype;
} w_entry;

struct ckpt_weights {
    w_kind kind;
    char *path;
    const ckpt_map *map;
    int n_head;
    ckpt_source **src; /* W_SOURCE: 1; W_RANKS: one per rank */
    int n_src;
    ckpt_sharded *sharded;
    w_entry *e;
    size_t n, cap;
    size_t unused, ignored;
    char *first_unused;
    float *scratch, *scratch2;
    size_t scratch_cap;
};

static long w_lookup(const ckpt_weights *w, const char *ours) {
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, ours) == 0) return (long)i;
    return -1;
}

static w_entry *w_add(ckpt_weights *w, const char *ours, const ckpt_map_row *row) {
    RT_GROW(w->e, w->cap, w->n + 1);
    w_entry *e = &w->e[w->n++];
    memset(e, 0, sizeof *e);
    e->name = rt_xstrdup(ours);
    e->row = row;
    e->part[0] = e->part[1] = e->part[2] = -1;
    e->alias = -1;
    return e;
}

static void w_scratch(ckpt_weights *w, size_t n) {
    if (n <= w->scratch_cap) return;
    w->scratch_cap = n;
    w->scratch = rt_xrealloc(w->scratch, n * sizeof(float));
    w->scratch2 = rt_xrealloc(w->scratch2, n * sizeof(float));
}

static const char *w_their_name(const ckpt_weights *w, const w_entry *e, int part) {
    long idx = e->part[part] >= 0 ? e->part[part] : e->alias;
    return idx >= 0 ? ckpt_source_name(w->src[0], (size_t)idx) : "?";
}

/* Sorts the source's tensors into entries by our name (the first source for rank files). */
static rt_status w_classify(ckpt_weights *w) {
    rt_status st = RT_OK;
    const ckpt_source *src = w->src[0];
    for (size_t i = 0; i < ckpt_source_count(src); i++) {
        const char *theirs = ckpt_source_name(src, i);
        ckpt_map_match m;
        ckpt_map_kind kind = ckpt_map_import_name(w->map, theirs, &m);
        if (kind == CKPT_MAP_IGNORED) {
            w->ignored++;
            continue;
        }
        if (kind == CKPT_MAP_UNKNOWN) {
            if (w->unused++ == 0) w->first_unused = rt_xstrdup(theirs);
            continue;
        }
        long at = w_lookup(w, m.ours);
        w_entry *e = at >= 0 ? &w->e[at] : w_add(w, m.ours, (m.row->flags & CKPT_ROW_ALIAS) ? NULL : m.row);
        if (m.row->flags & CKPT_ROW_ALIAS) {
            if (e->alias >= 0) {
                w->ignored++; /* a second copy under another alias */
            } else {
                e->alias = (long)i;
                e->alias_row = m.row;
            }
            continue;
        }
        e->row = m.row;
        if (e->part[m.part] >= 0)
            RT_FAIL(RT_ERR_FORMAT, "%s: tensors '%s' and '%s' both hold our '%s' (a copy with and without a prefix?)",
                    ckpt_source_file_of(src, i), ckpt_source_name(src, (size_t)e->part[m.part]), theirs, m.ours);
        e->part[m.part] = (long)i;
    }
fail:
    return st;
}

/* Completes an entry: picks main or alias tensors, checks the parts agree, our shape. */
static rt_status w_finish_entry(ckpt_weights *w, w_entry *e) {
    const ckpt_source *src = w->src[0];
    const int parts = e->row ? ckpt_map_parts(e->row) : 1;
    int found = 0;
    for (int k = 0; k < parts; k++) found += e->part[k] >= 0;
    if (found == 0) { /* only an alias holds it */
        e->row = e->alias_row;
        e->part[0] = e->alias;
        e->alias = -1;
        found = 1;
    } else if (e->alias >= 0) {
        w->ignored++; /* the main tensor wins; the alias is a copy */
    }
    if (found < parts) {
        char want[CKPT_MAP_NAME_MAX];
        int k = e->part[0] < 0 ? 0 : e->part[1] < 0 ? 1 : 2;
        ckpt_map_export_name(w->map, e->name, k, want, sizeof want);
        return rt_errorf(RT_ERR_FORMAT,
                         "%s: tensor '%s' is missing while the other attention projections of its "
                         "layer are there",
                         w->path, want);
    }
    ckpt_st_tensor t0;
    ckpt_source_tensor(src, (size_t)e->part[0], &t0);
    for (int k = 1; k < parts; k++) {
        ckpt_st_tensor t;
        ckpt_source_tensor(src, (size_t)e->part[k], &t);
        int same = t.ndim == t0.ndim && t.dtype == t0.dtype;
        for (int j = 0; same && j < t.ndim; j++) same = t.shape[j] == t0.shape[j];
        if (!same) {
            char a[96], b[96];
            return rt_errorf(RT_ERR_FORMAT, "%s: tensors '%s' %s %s and '%s' %s %s must have one shape and dtype",
                             ckpt_source_file_of(src, (size_t)e->part[k]), t0.name, rt_dtype_name(t0.dtype),
                             ckpt_shape_str(t0.ndim, t0.shape, a, sizeof a), t.name, rt_dtype_name(t.dtype),
                             ckpt_shape_str(t.ndim, t.shape, b, sizeof b));
        }
    }
    if (t0.dtype != RT_F32 && t0.dtype != RT_F16 && t0.dtype != RT_BF16 && t0.dtype != RT_F64)
        return rt_errorf(RT_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; weights must be F32, F16, BF16 or F64",
                         ckpt_source_file_of(src, (size_t)e->part[0]), t0.name, rt_dtype_name(t0.dtype));
    char got[96];
    if (t0.ndim < 1 || t0.ndim > 2 || !ckpt_map_our_shape(e->row, t0.ndim, t0.shape, e->shape))
        return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s' has shape %s, which its layout cannot take",
                         ckpt_source_file_of(src, (size_t)e->part[0]), t0.name,
                         ckpt_shape_str(t0.ndim, t0.shape, got, sizeof got));
    if (e->row->layout == CKPT_LAYOUT_QKV_PER_HEAD) {
        int heads = w->n_head / (w->n_src > 1 ? w->n_src : 1);
        if (w->n_head < 1 || heads < 1 || e->shape[0] % (3 * (size_t)heads))
            return rt_errorf(RT_ERR_FORMAT,
                             "%s: tensor '%s' (shape %s) does not split into %d heads of q, k and v "
                             "(is num_attention_heads right?)",
                             w->path, t0.name, ckpt_shape_str(t0.ndim, t0.shape, got, sizeof got), heads);
    }
    e->ndim = t0.ndim;
    e->dtype = t0.dtype;
    return RT_OK;
}

static rt_status w_finish(ckpt_weights *w) {
    rt_status st = RT_OK;
    for (size_t i = 0; i < w->n; i++) {
        w_entry *e = &w->e[i];
        RT_TRY(w_finish_entry(w, e));
        e->numel = 1;
        for (int k = 0; k < e->ndim; k++) e->numel *= e->shape[k];
    }
fail:
    return st;
}

static ckpt_weights *w_new(const char *path, const ckpt_map *map, int n_head) {
    ckpt_weights *w = rt_xcalloc(1, sizeof *w);
    w->path = rt_xstrdup(path);
    w->map = map;
    w->n_head = n_head;
    return w;
}

static rt_status w_open_sharded(ckpt_weights *w) {
    rt_status st = RT_OK;
    w->kind = W_SHARDED;
    RT_TRY(ckpt_sharded_open(w->path, &w->sharded));
    const char *arch = ckpt_sharded_arch(w->sharded);
    const ckpt_map *own = ckpt_map_for_arch(arch);
    if (!own)
        RT_FAIL(RT_ERR_FORMAT, "%s: arch \"%s\" is not one tunezoo knows (%s)", w->path, arch, ckpt_map_arch_list());
    /* bert and roberta share their parameter names; their HF prefixes differ */
    if (own->rows != w->map->rows && !(w->map->ours_arch && strcmp(w->map->ours_arch, arch) == 0))
        RT_FAIL(RT_ERR_CONFIG, "%s: holds a %s model, this program needs %s", w->path, arch, w->map->arch);
    if (w->n_head < 1) w->n_head = ckpt_sharded_n_head(w->sharded);
    for (size_t i = 0; i < ckpt_sharded_count(w->sharded); i++) {
        ckpt_sharded_tensor t;
        long nums[CKPT_MAP_MAX_NUMS];
        int n_nums;
        ckpt_sharded_tensor_at(w->sharded, i, &t);
        const ckpt_map_row *row = ckpt_map_find_ours(w->map, t.name, nums, &n_nums);
        if (!row) RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' is not a %s parameter", w->path, t.name, w->map->arch);
        if (row->tp != t.rule)
            RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' is split \"%s\", the %s table says \"%s\"", w->path, t.name,
                    ckpt_sharded_rule_name(t.rule), w->map->arch, ckpt_sharded_rule_name(row->tp));
        w_entry *e = w_add(w, t.name, row);
        e->ndim = t.ndim;
        memcpy(e->shape, t.shape, sizeof e->shape);
        e->numel = t.numel;
        e->dtype = ckpt_sharded_dtype(w->sharded);
        e->part[0] = (long)i;
    }
fail:
    return st;
}

rt_status ckpt_weights_open(const char *path, const ckpt_map *map, int n_head, ckpt_weights **out) {
    rt_status st = RT_OK;
    *out = NULL;
    ckpt_weights *w = w_new(path, map, n_head);
    if (ckpt_sharded_is_dir(path)) {
        RT_TRY(w_open_sharded(w));
    } else {
        w->kind = W_SOURCE;
        w->src = rt_xcalloc(1, sizeof *w->src);
        w->n_src = 1;
        RT_TRY(ckpt_source_open(path, &w->src[0]));
        RT_TRY(w_classify(w));
        RT_TRY(w_finish(w));
    }
    *out = w;
    return RT_OK;
fail:
    ckpt_weights_close(w);
    return st;
}

/* A rank file's shard shape (ours) to the full shape, by the tp rule. */
static rt_status w_ranks_full_shape(ckpt_weights *w, w_entry *e, int vocab_size) {
    const int tp = w->n_src;
    memcpy(e->local, e->shape, sizeof e->local);
    switch (e->row->tp) {
    case RT_TP_NONE: break;
    case RT_TP_COL:
    case RT_TP_QKV: e->shape[0] *= (size_t)tp; break;
    case RT_TP_ROW:
        if (e->ndim == 2) e->shape[1] *= (size_t)tp;
        break;
    case RT_TP_VOCAB:
        /* ranks hold consecutive rows; the padding (Megatron pads to a multiple of 128*tp,
         * FlagAI does not pad) is what lies past the real vocab */
        if (e->local[0] * (size_t)tp < (size_t)vocab_size)
            return rt_errorf(RT_ERR_FORMAT, "%s: '%s' has %zu rows on each of %d ranks, fewer than the vocab's %d",
                             w->path, w_their_name(w, e, 0), e->local[0], tp, vocab_size);
        e->shape[0] = (size_t)vocab_size;
        break;
    }
    return RT_OK;
}

rt_status ckpt_weights_open_ranks(const char *const *paths, int n_ranks, const ckpt_map *map, int n_head,
                                  int vocab_size, ckpt_weights **out) {
    rt_status st = RT_OK;
    *out = NULL;
    if (n_ranks < 1) return rt_errorf(RT_ERR_CONFIG, "no rank files");
    ckpt_weights *w = w_new(paths[0], map, n_head);
    w->kind = W_RANKS;
    w->n_src = n_ranks;
    w->src = rt_xcalloc((size_t)n_ranks, sizeof *w->src);
    if (vocab_size < 1) RT_FAIL(RT_ERR_CONFIG, "%s: the vocab size is needed to join the embedding's shards", paths[0]);
    if (n_head > 0 && n_head % n_ranks)
        RT_FAIL(RT_ERR_CONFIG, "%s: %d heads do not split over %d ranks", paths[0], n_head, n_ranks);
    for (int r = 0; r < n_ranks; r++) RT_TRY(ckpt_source_open(paths[r], &w->src[r]));
    RT_TRY(w_classify(w));
    RT_TRY(w_finish(w));
    for (size_t i = 0; i < w->n; i++) {
        w_entry *e = &w->e[i];
        RT_TRY(w_ranks_full_shape(w, e, vocab_size));
        e->numel = 1;
        for (int k = 0; k < e->ndim; k++) e->numel *= e->shape[k];
        /* every rank holds the same tensors with the same shard shapes */
        for (int r = 1; r < n_ranks; r++)
            for (int k = 0; k < ckpt_map_parts(e->row); k++) {
                const char *name = w_their_name(w, e, k);
                long j = ckpt_source_index(w->src[r], name);
                ckpt_st_tensor a, b;
                if (j < 0) RT_FAIL(RT_ERR_FORMAT, "%s: no tensor '%s' (rank 0 has it)", paths[r], name);
                ckpt_source_tensor(w->src[0], (size_t)(e->part[k]), &a);
                ckpt_source_tensor(w->src[r], (size_t)j, &b);
                int same = a.ndim == b.ndim && a.dtype == b.dtype;
                for (int d = 0; same && d < a.ndim; d++) same = a.shape[d] == b.shape[d];
                if (!same) {
                    char sa[96], sb[96];
                    RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' is %s here and %s on rank 0", paths[r], name,
                            ckpt_shape_str(b.ndim, b.shape, sb, sizeof sb),
                            ckpt_shape_str(a.ndim, a.shape, sa, sizeof sa));
                }
            }
    }
    *out = w;
    return RT_OK;
fail:
    ckpt_weights_close(w);
    return st;
}

void ckpt_weights_close(ckpt_weights *w) {
    if (!w) return;
    for (int r = 0; r < w->n_src; r++) ckpt_source_close(w->src[r]);
    ckpt_sharded_close(w->sharded);
    for (size_t i = 0; i < w->n; i++) free(w->e[i].name);
    free(w->e);
    free(w->src);
    free(w->first_unused);
    free(w->scratch);
    free(w->scratch2);
    free(w->path);
    free(w);
}

const char *ckpt_weights_path(const ckpt_weights *w) { return w->path; }
const ckpt_map *ckpt_weights_map(const ckpt_weights *w) { return w->map; }
size_t ckpt_weights_count(const ckpt_weights *w) { return w->n; }
long ckpt_weights_find(const ckpt_weights *w, const char *ours) { return w_lookup(w, ours); }
size_t ckpt_weights_ignored(const ckpt_weights *w) { return w->ignored; }

size_t ckpt_weights_unused(const ckpt_weights *w, const char **first) {
    if (first) *first = w->first_unused;
    return w->unused;
}

bool ckpt_weights_scalar(const ckpt_weights *w, const char *name, double *value) {
    return w->n_src > 0 && ckpt_source_scalar(w->src[0], name, value);
}

void ckpt_weights_info(const ckpt_weights *w, size_t i, ckpt_weight_info *out) {
    RT_CHECK(i < w->n, "weight %zu of %zu", i, w->n);
    const w_entry *e = &w->e[i];
    out->name = e->name;
    out->row = e->row;
    out->ndim = e->ndim;
    memcpy(out->shape, e->shape, sizeof out->shape);
    out->numel = e->numel;
    out->dtype = e->dtype;
    out->source = w->kind == W_SHARDED ? e->name : w_their_name(w, e, 0);
}

/* Reads the parts of entry e from source src (their names looked up there) into dst. */
static rt_status w_read_parts(ckpt_weights *w, const w_entry *e, const ckpt_source *src, size_t part_n, float *dst) {
    rt_status st = RT_OK;
    for (int k = 0; k < ckpt_map_parts(e->row); k++) {
        const char *name = w_their_name(w, e, k);
        RT_TRY(ckpt_source_read_f32(src, name, dst + (size_t)k * part_n, part_n));
        ckpt_source_release(src, (size_t)ckpt_source_index(src, name));
    }
fail:
    return st;
}

rt_status ckpt_weights_read(ckpt_weights *w, size_t i, float *dst) {
    rt_status st = RT_OK;
    RT_CHECK(i < w->n, "weight %zu of %zu", i, w->n);
    const w_entry *e = &w->e[i];
    const int parts = ckpt_map_parts(e->row);
    if (w->kind == W_SHARDED) return ckpt_sharded_read_full(w->sharded, (size_t)e->part[0], dst);
    if (w->kind == W_SOURCE) {
        if (e->row->layout == CKPT_LAYOUT_SAME || e->row->layout == CKPT_LAYOUT_QKV_PARTS)
            return w_read_parts(w, e, w->src[0], e->numel / (size_t)parts, dst); /* theirs is ours */
        w_scratch(w, e->numel);
        RT_TRY(w_read_parts(w, e, w->src[0], e->numel / (size_t)parts, w->scratch));
        ckpt_map_to_ours(e->row, e->ndim, e->shape, w->n_head, w->scratch, dst);
        return RT_OK;
    }
    /* rank files: each shard to our layout, then joined by the tp rule */
    size_t local_n = 1;
    for (int k = 0; k < e->ndim; k++) local_n *= e->local[k];
    if (e->row->tp == RT_TP_NONE) { /* replicated: rank 0's copy */
        w_scratch(w, local_n);
        RT_TRY(w_read_parts(w, e, w->src[0], local_n / (size_t)parts, w->scratch));
        ckpt_map_to_ours(e->row, e->ndim, e->local, w->n_head, w->scratch, dst);
        return RT_OK;
    }
    w_scratch(w, local_n * (size_t)w->n_src);
    for (int r = 0; r < w->n_src; r++) {
        RT_TRY(w_read_parts(w, e, w->src[r], local_n / (size_t)parts, w->scratch2));
        ckpt_map_to_ours(e->row, e->ndim, e->local, w->n_head / w->n_src, w->scratch2,
                         w->scratch + (size_t)r * local_n);
    }
    if (e->row->tp == RT_TP_VOCAB) { /* the rows in rank order, cut to the vocab */
        memcpy(dst, w->scratch, e->numel * sizeof(float));
        return RT_OK;
    }
    ckpt_tp_desc d = {.rule = e->row->tp, .ndim = e->ndim, .size = w->n_src};
    for (int k = 0; k < e->ndim; k++) d.full[k] = (int64_t)e->shape[k];
    ckpt_tp_gather(&d, dst, w->scratch);
fail:
    return st;
}

bool ckpt_weights_same_bytes(const ckpt_weights *w, size_t a, size_t b) {
    const w_entry *x = &w->e[a], *y = &w->e[b];
    if (x->dtype != y->dtype || x->numel != y->numel) return false;
    if (w->kind == W_SOURCE && ckpt_map_parts(x->row) == 1 && ckpt_map_parts(y->row) == 1) {
        ckpt_st_tensor tx, ty;
        ckpt_source_tensor(w->src[0], (size_t)x->part[0], &tx);
        ckpt_source_tensor(w->src[0], (size_t)y->part[0], &ty);
        return tx.nbytes == ty.nbytes && memcmp(tx.data, ty.data, tx.nbytes) == 0;
    }
    float *fx = rt_xmalloc(x->numel * sizeof(float)), *fy = rt_xmalloc(y->numel * sizeof(float));
    bool same = ckpt_weights_read((ckpt_weights *)w, a, fx) == RT_OK &&
                ckpt_weights_read((ckpt_weights *)w, b, fy) == RT_OK && memcmp(fx, fy, x->numel * sizeof(float)) == 0;
    free(fx);
    free(fy);
    return same;
}

/* ---- parameters ---- */

static bool w_listed(const char *const *list, const char *name) {
    for (size_t i = 0; list && list[i]; i++)
        if (strcmp(list[i], name) == 0) return true;
    return false;
}

rt_status ckpt_weights_load_params(ckpt_weights *w, rt_params *p, int vocab_size, int tp_rank, int tp_size,
                                   const char *const *may_be_unused, ckpt_load_report *report) {
    rt_status st = RT_OK;
    float *full = NULL, *shard = NULL;
    char *used = rt_xcalloc(w->n + 1, 1);
    memset(report, 0, sizeof *report);
    RT_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size, "tp rank %d of %d", tp_rank, tp_size);
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        long idx = w_lookup(w, s->name);
        if (idx < 0 && ckpt_peft_adapter_stem(s->name, NULL)) {
            report->adapters++;
            continue;
        }
        if (idx < 0) {
            if (report->missing++ == 0) snprintf(report->first_missing, sizeof report->first_missing, "%s", s->name);
            const size_t at = strlen(report->missing_names);
            if (at + strlen(s->name) + 3 < sizeof report->missing_names)
                snprintf(report->missing_names + at, sizeof report->missing_names - at, "%s%s", at ? ", " : "",
                         s->name);
            continue;
        }
        ckpt_weight_info info;
        ckpt_weights_info(w, (size_t)idx, &info);
        ckpt_tp_desc d;
        ckpt_tp_param_desc(s, vocab_size, tp_rank, tp_size, &d);
        size_t want[CKPT_MAX_DIMS];
        int ok = info.ndim == s->ndim;
        for (int k = 0; k < s->ndim; k++) {
            want[k] = (size_t)d.full[k];
            ok = ok && info.shape[k] == want[k];
        }
        if (!ok) {
            char got[96], exp[96];
            RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' has shape %s (as %s in our layout), expected %s for this config",
                    w->path, info.source, ckpt_shape_str(info.ndim, info.shape, got, sizeof got), s->name,
                    ckpt_shape_str(s->ndim, want, exp, sizeof exp));
        }
        int64_t ls[RT_PARAM_MAX_DIMS];
        RT_TRY(ckpt_tp_local_shape(&d, s->name, ls));
        for (int k = 0; k < s->ndim; k++)
            if (ls[k] != s->shape[k])
                RT_FAIL(RT_ERR_FORMAT, "%s: parameter '%s' shards to %lld rows/cols on tp rank %d, the model has %lld",
                        w->path, s->name, (long long)ls[k], tp_rank, (long long)s->shape[k]);
        full = rt_xrealloc(full, info.numel * sizeof(float));
        RT_TRY(ckpt_weights_read(w, (size_t)idx, full));
        shard = rt_xrealloc(shard, s->numel * sizeof(float));
        ckpt_tp_shard(&d, shard, full);
        rt_to_device(p->be, rt_params_data(p, i), shard, s->numel * sizeof(float));
        used[idx] = 1;
        report->loaded++;
    }
    if (report->loaded == 0 && p->n > 0) {
        /* what the file holds instead: its first tensor as named there */
        const size_t held = w->n + w->unused + w->ignored;
        const char *first = w->first_unused;
        ckpt_weight_info info;
        if (!first && w->n) {
            ckpt_weights_info(w, 0, &info);
            first = info.source;
        }
        RT_FAIL(RT_ERR_FORMAT,
                "%s: no tensor in it is a parameter of this model (it holds %zu tensor%s%s%s%s; the "
                "model's first is '%s'): is it another model's checkpoint?",
                w->path, held, held == 1 ? "" : "s", first ? ", the first '" : "", first ? first : "", first ? "'" : "",
                p->specs[0].name);
    }
    report->unused = (int)w->unused;
    if (w->first_unused) snprintf(report->first_unused, sizeof report->first_unused, "%s", w->first_unused);
    for (size_t i = 0; i < w->n; i++) {
        if (used[i] || w_listed(may_be_unused, w->e[i].name)) continue;
        if (report->unused++ == 0) snprintf(report->first_unused, sizeof report->first_unused, "%s", w->e[i].name);
    }
fail:
    free(used);
    free(full);
    free(shard);
    return st;
}

void ckpt_load_report_describe(const ckpt_load_report *r, char *out, size_t size) {
    int n = snprintf(out, size, "%d tensors loaded", r->loaded);
    if (r->missing && n >= 0 && (size_t)n < size) {
        /* the names that fit, and how many more there are */
        int listed = 1;
        for (const char *c = r->missing_names; *c; c++) listed += *c == ',';
        n += snprintf(out + n, size - (size_t)n, "; newly initialized: %s", r->missing_names);
        if (listed < r->missing && n >= 0 && (size_t)n < size)
            snprintf(out + n, size - (size_t)n, " (and %d more)", r->missing - listed);
    }
}

rt_status ckpt_load_hf(const char *path, const ckpt_map *map, rt_params *p, int vocab_size, int n_head, int tp_rank,
                       int tp_size, const char *const *may_be_unused, ckpt_load_report *report) {
    rt_status st = RT_OK;
    ckpt_weights *w = NULL;
    memset(report, 0, sizeof *report);
    RT_TRY(ckpt_weights_open(path, map, n_head, &w));
    RT_TRY(ckpt_weights_load_params(w, p, vocab_size, tp_rank, tp_size, may_be_unused, report));
fail:
    ckpt_weights_close(w);
    return st;
}

/* The entries as a torch checkpoint {wrap: state_dict} (float32 tensors). */
static rt_status ckpt_save_torch_entries(const char *path, const char *wrap, size_t n, const ckpt_st_write_entry *e) {
    rt_status st = RT_OK;
    ckpt_torch_writer *w = NULL;
    RT_TRY(ckpt_torch_writer_begin(path, wrap, &w));
    for (size_t i = 0; i < n; i++)
        RT_TRY(ckpt_torch_writer_add(w, e[i].name, RT_F32, e[i].ndim, e[i].shape, e[i].data));
    st = ckpt_torch_writer_commit(w);
    w = NULL;
fail:
    ckpt_torch_writer_abort(w);
    return st;
}

rt_status ckpt_save_hf(const char *path, const ckpt_map *map, const rt_params *p, int vocab_size, int n_head,
                       rt_comm *tp) {
    rt_status st = RT_OK;
    const int n = p->n;
    rt_backend *be = p->be;
    /* up to three HF tensors per parameter (q, k, v) */
    ckpt_st_write_entry *entries = rt_xcalloc((size_t)n * 3, sizeof *entries);
    char(*names)[CKPT_MAP_NAME_MAX] = rt_xcalloc((size_t)n * 3, sizeof *names);
    size_t(*shapes)[CKPT_MAX_DIMS] = rt_xcalloc((size_t)n * 3, sizeof *shapes);
    float **bufs = rt_xcalloc((size_t)n, sizeof *bufs);
    float *gathered = NULL;
    ckpt_tp_scratch scr = {0};
    size_t ne = 0;
    for (int i = 0; i < n; i++) {
        const rt_param_spec *s = &p->specs[i];
        long nums[CKPT_MAP_MAX_NUMS];
        int n_nums;
        const ckpt_map_row *row = ckpt_map_find_ours(map, s->name, nums, &n_nums);
        if (!row && ckpt_peft_adapter_stem(s->name, NULL)) continue; /* LoRA's: merged, or in a PEFT folder */
        if (!row) RT_FAIL(RT_ERR_CONFIG, "parameter '%s' has no row in the %s map", s->name, map->arch);
        ckpt_tp_desc d;
        ckpt_tp_param_desc(s, vocab_size, tp->rank, tp->size, &d);
        size_t full_n = ckpt_tp_full_numel(&d), full_shape[CKPT_MAX_DIMS];
        for (int k = 0; k < s->ndim; k++) full_shape[k] = (size_t)d.full[k];
        gathered = tp->rank == 0 ? rt_xrealloc(gathered, full_n * sizeof(float)) : NULL;
        RT_TRY(ckpt_tp_gather_param(be, tp, &d, p->param + s->offset, s->numel, &scr, gathered));
        if (tp->rank != 0) continue;
        bufs[i] = rt_xmalloc(full_n * sizeof(float));
        ckpt_map_to_theirs(row, s->ndim, full_shape, n_head, gathered, bufs[i]);
        const int parts = ckpt_map_parts(row);
        for (int k = 0; k < parts; k++, ne++) {
            if (!ckpt_map_export_name(map, s->name, k, names[ne], sizeof names[ne]))
                RT_FAIL(RT_ERR_CONFIG, "parameter '%s': no %s name", s->name, map->arch);
            ckpt_map_their_shape(row, s->ndim, full_shape, shapes[ne]);
            entries[ne] = (ckpt_st_write_entry){.name = names[ne],
                                                .ndim = s->ndim,
                                                .shape = shapes[ne],
                                                .data = bufs[i] + (size_t)k * (full_n / (size_t)parts)};
        }
    }
    if (tp->rank == 0)
        st = map->torch_wrap ? ckpt_save_torch_entries(path, map->torch_wrap, ne, entries)
                             : ckpt_safetensors_write(path, ne, entries, "{\"format\":\"pt\"}");
    st = ckpt_tp_agree(tp, st, path, "HF export");
fail:
    for (int i = 0; i < n; i++) free(bufs[i]);
    ckpt_tp_scratch_free(be, &scr);
    free(gathered);
    free(bufs);
    free(shapes);
    free(names);
    free(entries);
    return st;
}
