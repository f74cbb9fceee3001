/* Tensor-parallel shard <-> full tensor maps (see ckpt_tp.h). Every rule is a map from a
 * local (row, col) to a full (row, col), or to "padding"; shard and unshard walk the local
 * tensor once with it, so the two directions cannot disagree. */
#include "checkpoints/ckpt_tp.h"

#include <stdlib.h>
#include <string.h>

int64_t ckpt_tp_padded_vocab(int64_t vocab, int tp_size) {
    int64_t m = (int64_t)CKPT_TP_VOCAB_DIVISOR * tp_size;
    return (vocab + m - 1) / m * m;
}

static int64_t ckpt_tp_rows(const ckpt_tp_desc *d) { return d->full[0]; }
static int64_t ckpt_tp_cols(const ckpt_tp_desc *d) { return d->ndim == 2 ? d->full[1] : 1; }

rt_status ckpt_tp_local_shape(const ckpt_tp_desc *d, const char *what, int64_t *local) {
    const int64_t rows = ckpt_tp_rows(d), cols = ckpt_tp_cols(d);
    const int tp = d->size;
    RT_CHECK(d->ndim == 1 || d->ndim == 2, "%s: ndim %d", what, d->ndim);
    RT_CHECK(tp >= 1 && d->rank >= 0 && d->rank < tp, "%s: tp rank %d of %d", what, d->rank, tp);
    local[0] = rows;
    if (d->ndim == 2) local[1] = cols;
    switch (d->rule) {
    case RT_TP_NONE: break;
    case RT_TP_COL:
        if (rows % tp)
            return rt_errorf(RT_ERR_CONFIG, "%s: %lld output rows do not split over tp=%d", what, (long long)rows, tp);
        local[0] = rows / tp;
        break;
    case RT_TP_ROW:
        if (d->ndim != 2 || cols % tp)
            return rt_errorf(RT_ERR_CONFIG, "%s: %lld input columns do not split over tp=%d (row-parallel)", what,
                             (long long)(d->ndim == 2 ? cols : 0), tp);
        local[1] = cols / tp;
        break;
    case RT_TP_VOCAB: local[0] = ckpt_tp_padded_vocab(rows, tp) / tp; break;
    case RT_TP_QKV:
        if (rows % (3 * (int64_t)tp))
            return rt_errorf(RT_ERR_CONFIG, "%s: %lld rows are not [q; k; v] splitting over tp=%d", what,
                             (long long)rows, tp);
        if (d->n_head > 0 && (d->n_head % tp || (rows / 3) % d->n_head))
            return rt_errorf(RT_ERR_CONFIG, "%s: n_head %d does not split over tp=%d (or divide %lld rows per q/k/v)",
                             what, d->n_head, tp, (long long)(rows / 3));
        local[0] = rows / tp;
        break;
    }
    return RT_OK;
}

/* The full row of local row r for `rank`, or -1 for a padding row. */
static int64_t ckpt_tp_full_row(const ckpt_tp_desc *d, int rank, int64_t r) {
    const int64_t rows = ckpt_tp_rows(d);
    switch (d->rule) {
    case RT_TP_COL: return rank * (rows / d->size) + r;
    case RT_TP_VOCAB: {
        int64_t g = rank * (ckpt_tp_padded_vocab(rows, d->size) / d->size) + r;
        return g < rows ? g : -1;
    }
    case RT_TP_QKV: {
        /* the rank's heads are contiguous rows within each of q, k and v */
        int64_t per = rows / 3, lpart = per / d->size;
        return (r / lpart) * per + rank * lpart + r % lpart;
    }
    default: return r;
    }
}

/* Walks the shard of `rank`: to_local copies full -> local, else local -> full. */
static void ckpt_tp_walk(const ckpt_tp_desc *d, int rank, float *full, float *local, int to_local) {
    int64_t ls[RT_PARAM_MAX_DIMS] = {0};
    ckpt_tp_desc dd = *d;
    dd.rank = rank;
    rt_status st = ckpt_tp_local_shape(&dd, "ckpt_tp", ls);
    RT_CHECK(st == RT_OK, "%s", rt_error_message());
    const int64_t lrows = ls[0], lcols = d->ndim == 2 ? ls[1] : 1, cols = ckpt_tp_cols(d);
    const int64_t col0 = d->rule == RT_TP_ROW ? rank * lcols : 0;
    for (int64_t r = 0; r < lrows; r++) {
        int64_t g = ckpt_tp_full_row(d, rank, r);
        float *lp = local + (size_t)r * (size_t)lcols;
        if (g < 0) {
            if (to_local) memset(lp, 0, (size_t)lcols * sizeof(float));
            continue;
        }
        float *fp = full + (size_t)g * (size_t)cols + (size_t)col0;
        if (to_local)
            memcpy(lp, fp, (size_t)lcols * sizeof(float));
        else
            memcpy(fp, lp, (size_t)lcols * sizeof(float));
    }
}

void ckpt_tp_shard(const ckpt_tp_desc *d, float *local, const float *full) {
    ckpt_tp_walk(d, d->rank, (float *)full, local, 1); /* full is only read on this path */
}

void ckpt_tp_unshard(const ckpt_tp_desc *d, float *full, const float *local) {
    ckpt_tp_walk(d, d->rank, full, (float *)local, 0); /* local is only read on this path */
}

void ckpt_tp_gather(const ckpt_tp_desc *d, float *full, const float *shards) {
    int64_t ls[RT_PARAM_MAX_DIMS] = {0};
    ckpt_tp_desc dd = *d;
    dd.rank = 0;
    rt_status st = ckpt_tp_local_shape(&dd, "ckpt_tp", ls);
    RT_CHECK(st == RT_OK, "%s", rt_error_message());
    size_t n = (size_t)ls[0] * (size_t)(d->ndim == 2 ? ls[1] : 1);
    /* a replicated tensor's shards are all the full tensor: rank 0's is enough */
    int ranks = d->rule == RT_TP_NONE ? 1 : d->size;
    for (int r = 0; r < ranks; r++) ckpt_tp_walk(d, r, full, (float *)shards + (size_t)r * n, 0);
}

void ckpt_tp_param_desc(const rt_param_spec *s, int64_t vocab_rows, int rank, int size, ckpt_tp_desc *d) {
    *d = (ckpt_tp_desc){.rule = s->tp, .ndim = s->ndim, .rank = rank, .size = size};
    for (int k = 0; k < s->ndim; k++) d->full[k] = s->shape[k];
    switch (s->tp) {
    case RT_TP_COL:
    case RT_TP_QKV: d->full[0] *= size; break;
    case RT_TP_ROW: d->full[1] *= size; break;
    case RT_TP_VOCAB: d->full[0] = vocab_rows; break;
    case RT_TP_NONE: break;
    }
}

rt_status ckpt_tp_spec_desc(const char *what, const rt_param_spec *s, const rt_comm *tp, ckpt_tp_desc *d) {
    if (s->tp == RT_TP_VOCAB && s->vocab_rows < 1)
        return rt_errorf(RT_ERR_CONFIG,
                         "%s: parameter '%s' is vocab-parallel but its spec has no vocab_rows (the "
                         "model must set the real vocab size)",
                         what, s->name);
    ckpt_tp_param_desc(s, s->vocab_rows, tp->rank, tp->size, d);
    return RT_OK;
}

size_t ckpt_tp_full_numel(const ckpt_tp_desc *d) {
    size_t n = 1;
    for (int k = 0; k < d->ndim; k++) n *= (size_t)d->full[k];
    return n;
}

rt_status ckpt_tp_gather_param(rt_backend *be, rt_comm *tp, const ckpt_tp_desc *d, const float *local, size_t local_n,
                               ckpt_tp_scratch *scr, float *full) {
    rt_status st = RT_OK;
    RT_CHECK(d->size == tp->size && d->rank == tp->rank, "desc tp %d/%d, comm %d/%d", d->rank, d->size, tp->rank,
             tp->size);
    /* a replicated tensor needs only this rank's copy */
    const size_t parts = d->rule == RT_TP_NONE ? 1 : (size_t)tp->size;
    const float *src = local;
    if (parts > 1) {
        if (scr->dev_cap < local_n * parts) {
            if (scr->dev) rt_free_device(be, scr->dev);
            scr->dev = NULL;
            scr->dev_cap = 0;
            RT_TRY(rt_backend_alloc(be, local_n * parts * sizeof(float), "checkpoint (gathered shards)",
                                    (void **)&scr->dev));
            scr->dev_cap = local_n * parts;
        }
        RT_TRY(tp->ops->all_gather(tp->ctx, scr->dev, local, local_n));
        src = scr->dev;
    }
    if (tp->rank != 0) return RT_OK;
    if (scr->host_cap < local_n * parts) {
        scr->host_cap = local_n * parts;
        scr->host = rt_xrealloc(scr->host, scr->host_cap * sizeof(float));
    }
    rt_to_host(be, scr->host, src, local_n * parts * sizeof(float));
    ckpt_tp_gather(d, full, scr->host);
fail:
    return st;
}

void ckpt_tp_scratch_free(rt_backend *be, ckpt_tp_scratch *scr) {
    if (scr->dev) rt_free_device(be, scr->dev);
    free(scr->host);
    *scr = (ckpt_tp_scratch){0};
}

rt_status ckpt_tp_agree(rt_comm *tp, rt_status written, const char *path, const char *what) {
    if (tp->size == 1) return written;
    int code = (int)written;
    rt_status st = tp->ops->broadcast(tp->ctx, &code, sizeof code, 0); /* on failure its own message stands */
    if (st != RT_OK) return st;
    if (tp->rank != 0 && code != RT_OK)
        return rt_errorf((rt_status)code, "%s: tp rank 0 failed to write the %s", path, what);
    return written;
}
