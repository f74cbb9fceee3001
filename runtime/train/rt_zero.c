/* ZeRO stages 1, 2 and 3 and offload over the parameter slab (see rt_zero.h; stage 3's blocks
 * and window are in rt_zero3.c). */
#include "runtime/train/rt_zero.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "runtime/base/rt_log.h"

/* A sub-range [off, off + n) of this rank's slice (slice-relative) lying inside one run of
 * parameters that share key: for the update, no_decay (0 or 1); for the norm, ZERO_NORM_REPLICATED,
 * ZERO_NORM_SHARDED (tensor-parallel) or ZERO_NORM_COPY (a tied weight's copy on a later pipeline
 * stage, which the norm counts once, at the first stage). */
typedef struct {
    size_t off, n;
    int key;
} zero_range;

enum { ZERO_NORM_REPLICATED = 0, ZERO_NORM_SHARDED = 1, ZERO_NORM_COPY = 2 };

static int zero_key(const rt_param_spec *s, bool by_decay) {
    if (by_decay) return s->no_decay;
    return s->copy ? ZERO_NORM_COPY : s->tp != RT_TP_NONE ? ZERO_NORM_SHARDED : ZERO_NORM_REPLICATED;
}

/* Cuts the slab into runs of parameters with the same key and intersects each with the slab
 * segment [lo, hi), which sits at `at` in this rank's shard, so a segment that starts or ends
 * inside a parameter still gets that parameter's setting. The alignment gaps inside a run hold
 * zeros everywhere and stay zero under AdamW and add nothing to a norm; gaps between runs and
 * the padding are never touched. Frozen parameters (LoRA's base) are skipped: they sit after the
 * trainable ones, which keep their declaration order, so the runs stay in slab order. Returns
 * the count. */
static int zero_ranges_in(const rt_params *p, bool by_decay, size_t lo, size_t hi, size_t at, zero_range *out) {
    int n = 0;
    for (int i = 0; i < p->n;) {
        if (p->specs[i].frozen) {
            i++;
            continue;
        }
        int key = zero_key(&p->specs[i], by_decay), last = i;
        int j = i + 1;
        for (; j < p->n && (p->specs[j].frozen || zero_key(&p->specs[j], by_decay) == key); j++)
            if (!p->specs[j].frozen) last = j;
        size_t b = p->specs[i].offset, e = p->specs[last].offset + p->specs[last].numel;
        if (b < lo) b = lo;
        if (e > hi) e = hi;
        if (b < e) out[n++] = (zero_range){.off = at + b - lo, .n = e - b, .key = key};
        i = j;
    }
    return n;
}

/* Room for zero_ranges' output. */
static zero_range *zero_ranges_alloc(const rt_zero *z) {
    return rt_xmalloc(sizeof(zero_range) * (size_t)(z->p->n + (z->stage == 3 ? z->n_blocks : 1) + 1));
}

/* The floats of this rank's slice that are trainable parameters: stages 1-2 cut the trainable
 * floats padded up to dp slices, so the last slice may reach past them (into the padding, or
 * with frozen parameters into the room the frozen ones take in p->param). */
static size_t zero_slice_owned(const rt_zero *z) {
    if (z->stage == 3) return z->shard;
    if (z->begin >= z->sharded) return 0;
    return z->sharded - z->begin < z->shard ? z->sharded - z->begin : z->shard;
}

/* This rank's shard as ranges of one key: its slice of the slab (stages 1-2), or its piece of
 * every block's trainable span (stage 3). */
static int zero_ranges(const rt_zero *z, bool by_decay, zero_range *out) {
    if (z->stage != 3) return zero_ranges_in(z->p, by_decay, z->begin, z->begin + zero_slice_owned(z), 0, out);
    int n = 0;
    for (int k = 0; k < z->n_blocks; k++) {
        size_t lo, hi;
        rt_zero3_piece(z, &z->blocks[k].train, &lo, &hi);
        n += zero_ranges_in(z->p, by_decay, lo, hi, z->blocks[k].train.at, out + n);
    }
    return n;
}

/* Frees full moments (a checkpoint's, or a reader's). */
static void zero_free_moments(rt_params *p) {
    if (p->m) rt_free_device(p->be, p->m);
    if (p->v) rt_free_device(p->be, p->v);
    p->m = p->v = NULL;
}

/* Replaces *buf (`have` floats of backend memory) by a zeroed buffer of z->padded floats
 * holding the same first `have` values. */
static rt_status zero_grow(rt_zero *z, float **buf, size_t have, const char *what) {
    rt_params *p = z->p;
    float *nb = NULL;
    if (z->padded == have || !*buf) return RT_OK;
    rt_status st = rt_backend_alloc(p->be, z->padded * sizeof(float), what, (void **)&nb);
    if (st != RT_OK) return st;
    rt_copy(p->be, nb, *buf, have * sizeof(float));
    rt_free_device(p->be, *buf);
    *buf = nb;
    return RT_OK;
}

rt_status rt_zero_init(rt_params *p, rt_comm *dp, rt_comm *tp, const rt_zero_opts *o, rt_zero **out) {
    rt_status st = RT_OK;
    const int stage = o->stage;
    *out = NULL;
    if (stage < 1 || stage > 3)
        return rt_errorf(RT_ERR_CONFIG, "--zero %d: expected 1, 2 or 3 (--offload-optimizer needs --zero 1, 2 or 3)",
                         stage);
    if (o->offload_params && stage != 3)
        return rt_errorf(RT_ERR_CONFIG, "--offload-params needs --zero 3 (only stage 3 shards the parameters)");
    if (p->device && stage != 3)
        return rt_errorf(RT_ERR_CONFIG, "the parameters were laid out in host memory for ZeRO-3, but --zero is %d",
                         stage);
    const bool frozen = rt_params_n_frozen(p) > 0;
    zero_free_moments(p); /* full moments, if any, are not kept */
    /* a staged slab (rt_backend.params_staging): from here on the parameters live on the device */
    rt_backend *staging = p->device ? p->be : NULL;
    if (staging) {
        p->be = p->device;
        p->device = NULL;
    }
    rt_zero *z = rt_xcalloc(1, sizeof *z);
    z->p = p;
    z->dp = dp ? dp : rt_comm_self();
    z->tp = tp ? tp : rt_comm_self();
    z->dp_host = z->dp; /* on CPU the same comm; rt_zero_set_host_comms gives the host twins */
    z->tp_host = z->tp;
    z->stage = stage;
    z->offload = o->offload_optimizer || o->offload_params;
    z->offload_params = o->offload_params;
    const size_t ranks = (size_t)z->dp->size;
    if (stage == 3) {
        rt_zero3_cut(z);
    } else {
        z->sharded = p->train_numel;
        z->shard = (z->sharded + ranks - 1) / ranks;
        z->padded = z->shard * ranks;
        z->begin = (size_t)z->dp->rank * z->shard;
        if (frozen) /* the frozen tail follows the trainable floats: the gather goes through a buffer */
            RT_TRY(rt_backend_alloc(p->be, (z->padded ? z->padded : 1) * sizeof(float), "ZeRO all-gather buffer",
                                    (void **)&z->pgather));
        else
            RT_TRY(zero_grow(z, &p->param, p->numel, "parameters (padded for ZeRO)"));
        RT_TRY(zero_grow(z, &p->grad, z->sharded, "gradients (padded for ZeRO)"));
    }
    const size_t shard_bytes = (z->shard ? z->shard : 1) * sizeof(float);
    RT_TRY(rt_backend_alloc(p->be, shard_bytes, "ZeRO gradient shard", (void **)&z->gshard));
    if (z->offload) {
        if (p->be->device < 0) {
            z->host_be = p->be;
        } else {
            RT_TRY(rt_cpu_backend_init(0, &z->host_be));
            z->own_host_be = true;
        }
        RT_TRY(rt_backend_alloc(z->host_be, shard_bytes, "offloaded master weights", (void **)&z->h_master));
        RT_TRY(rt_backend_alloc(z->host_be, shard_bytes, "offloaded gradient shard", (void **)&z->h_grad));
        RT_TRY(rt_backend_alloc(z->host_be, shard_bytes, "offloaded AdamW first moments", (void **)&z->m));
        RT_TRY(rt_backend_alloc(z->host_be, shard_bytes, "offloaded AdamW second moments", (void **)&z->v));
        if (stage != 3) rt_to_host(p->be, z->h_master, p->param + z->begin, zero_slice_owned(z) * sizeof(float));
    } else {
        RT_TRY(rt_backend_alloc(p->be, shard_bytes, "AdamW first moments (ZeRO shard)", (void **)&z->m));
        RT_TRY(rt_backend_alloc(p->be, shard_bytes, "AdamW second moments (ZeRO shard)", (void **)&z->v));
    }
    if (stage == 3) RT_TRY(rt_zero3_init(z, staging));
    if (z->dp->rank == 0 && z->tp->rank == 0) {
        const double mib = 4.0 / (1 << 20);
        if (stage == 3) {
            /* the trainable floats have a weight, a gradient, m and v; frozen ones a weight only */
            const double frozen_numel = (double)(p->numel - p->train_numel);
            rt_log_info("ZeRO-3 over %d data-parallel ranks%s: weights, gradients and AdamW m and v in %d blocks, "
                        "%.1f MiB per rank instead of %.1f MiB, plus up to %d blocks gathered at once for the "
                        "weights and as many for the gradients (the largest block %.1f MiB)%s",
                        z->dp->size,
                        z->offload_params ? ", parameters and optimizer offloaded to host memory"
                        : z->offload      ? ", optimizer offloaded to host memory"
                                          : "",
                        z->n_blocks, (4.0 * (double)z->shard + (double)z->frozen_shard) * mib,
                        (4.0 * (double)p->train_numel + frozen_numel) * mib, RT_ZERO3_WINDOW,
                        (double)z->max_gathered * mib, staging ? "; the model was built in host memory" : "");
        } else {
            rt_log_info("ZeRO-%d over %d data-parallel ranks%s: AdamW m and v %.1f MiB per rank instead of %.1f MiB%s",
                        stage, z->dp->size, z->offload ? ", optimizer offloaded to host memory" : "",
                        2.0 * (double)z->shard * mib, 2.0 * (double)z->sharded * mib,
                        stage == 2 && p->be->device < 0 ? "; the full gradient is released between steps" : "");
        }
    }
    *out = z;
    return RT_OK;
fail:
    rt_zero_free(z);
    return st;
}

void rt_zero_free(rt_zero *z) {
    if (!z) return;
    rt_params *p = z->p;
    zero_free_moments(p); /* the parameters stay as they are: gathered or not */
    if (z->grad_released && !p->grad) {
        /* leave the slab whole for whoever uses it after training */
        p->grad = p->be->ops->alloc(p->be->ctx, z->padded * sizeof(float));
    }
    if (z->stage == 3) rt_zero3_free(z);
    if (z->stage == 3 && !p->grad) p->grad = p->be->ops->alloc(p->be->ctx, p->train_numel * sizeof(float));
    if (z->gshard) rt_free_device(p->be, z->gshard);
    if (z->pgather) rt_free_device(p->be, z->pgather);
    rt_backend *mbe = z->offload ? z->host_be : p->be;
    if (mbe) {
        if (z->m) rt_free_device(mbe, z->m);
        if (z->v) rt_free_device(mbe, z->v);
    }
    if (z->host_be) {
        if (z->h_master) rt_free_device(z->host_be, z->h_master);
        if (z->h_grad) rt_free_device(z->host_be, z->h_grad);
        if (z->own_host_be) rt_backend_free(z->host_be);
    }
    free(z);
}

rt_status rt_zero_begin_step(rt_zero *z) {
    rt_params *p = z->p;
    if (z->stage == 3) { /* the blocks' flushes add into the shard */
        rt_clear(p->be, z->gshard, z->shard * sizeof(float));
        return RT_OK;
    }
    if (z->grad_released) {
        rt_status st = rt_backend_alloc(p->be, z->padded * sizeof(float), "gradients", (void **)&p->grad);
        if (st != RT_OK) return st;
        z->grad_released = false;
        return RT_OK;
    }
    rt_params_zero_grad(p); /* the padding beyond the trainable floats is never written: it stays zero */
    return RT_OK;
}

rt_status rt_zero_reduce_grads(rt_zero *z) {
    rt_params *p = z->p;
    if (z->stage == 3) return rt_zero3_flush_all(z);
    rt_status st = z->dp->ops->reduce_scatter(z->dp->ctx, z->gshard, p->grad, z->shard, RT_REDUCE_SUM);
    if (st != RT_OK) return st;
    /* stage 2: nothing reads the full gradient again before the next backward, so its memory
     * goes back (on CPU a fresh zeroed allocation is cheap; on a GPU a cudaMalloc per step
     * would synchronise, so the buffer stays there until a caching allocator exists) */
    if (z->stage == 2 && p->be->device < 0) {
        rt_free_sized(p->be, p->grad, z->padded * sizeof(float));
        p->grad = NULL;
        z->grad_released = true;
    }
    return RT_OK;
}

void rt_zero_set_host_comms(rt_zero *z, rt_comm *dp_host, rt_comm *tp_host) {
    RT_CHECK(dp_host && tp_host && dp_host->size == z->dp->size && dp_host->rank == z->dp->rank &&
                 tp_host->size == z->tp->size && tp_host->rank == z->tp->rank,
             "ZeRO host comms do not match the device comms' ranks");
    z->dp_host = dp_host;
    z->tp_host = tp_host;
}

/* Gathers k doubles from every rank of the host comm c into all (c->size * k, rank-major).
 * Comm buffers are float32: each double travels as hi + lo floats (about 48 bits). */
static rt_status zero_gather_doubles(rt_comm *c, const double *mine, int k, double *all) {
    rt_status st = RT_OK;
    const size_t n = 2 * (size_t)k, size = (size_t)c->size;
    float *host = rt_xmalloc(sizeof(float) * n * (size + 1));
    for (int i = 0; i < k; i++) {
        host[2 * i] = (float)mine[i];
        host[2 * i + 1] = (float)(mine[i] - (double)host[2 * i]);
    }
    RT_TRY(c->ops->all_gather(c->ctx, host + n, host, n));
    for (size_t r = 0; r < size; r++)
        for (int i = 0; i < k; i++)
            all[r * (size_t)k + (size_t)i] =
                (double)host[n + r * n + 2 * (size_t)i] + (double)host[n + r * n + 2 * (size_t)i + 1];
fail:
    free(host);
    return st;
}

rt_status rt_zero_grad_norm(rt_zero *z, double *norm) {
    rt_status st = RT_OK;
    rt_params *p = z->p;
    zero_range *r = zero_ranges_alloc(z);
    double *all = rt_xmalloc(sizeof(double) * 2 * (size_t)(z->dp->size > z->tp->size ? z->dp->size : z->tp->size));
    double mine[2] = {0, 0}; /* replicated, tensor-parallel sharded */
    int nr = zero_ranges(z, false, r);
    for (int i = 0; i < nr; i++)
        if (r[i].key != ZERO_NORM_COPY) mine[r[i].key] += rt_sumsq(p->be, z->gshard + r[i].off, r[i].n);
    /* the slices hold the dp-summed gradient: their squares add up to the summed gradient's */
    RT_TRY(zero_gather_doubles(z->dp_host, mine, 2, all));
    mine[0] = mine[1] = 0;
    for (int k = 0; k < z->dp->size; k++) { /* rank order, so every rank gets the same bits */
        mine[0] += all[2 * k];
        mine[1] += all[2 * k + 1];
    }
    if (z->tp->size > 1) {
        /* replicated parameters: every tp rank holds the same gradient, but its slab (and so
         * its slicing) differs, so the sums can differ in the last bits; take tp rank 0's so the
         * whole grid clips with one coefficient. Sharded ones add over tp. */
        RT_TRY(zero_gather_doubles(z->tp_host, mine, 2, all));
        mine[0] = all[0];
        mine[1] = 0;
        for (int k = 0; k < z->tp->size; k++) mine[1] += all[2 * k + 1];
    }
    *norm = sqrt(mine[0] + mine[1]);
fail:
    free(r);
    free(all);
    return st;
}

/* One chunk [lo, hi) of the shard through the host AdamW, range by range (a range keeps its
 * weight-decay setting wherever the chunk cuts it). */
typedef struct {
    rt_zero *z;
    const zero_range *r;
    int nr;
    const rt_adamw_hparams *h;
    float grad_scale;
    int64_t t;
    size_t lo, hi;
} offload_chunk;

static void *offload_adamw(void *arg) {
    const offload_chunk *c = arg;
    rt_backend *hb = c->z->host_be;
    for (int i = 0; i < c->nr; i++) {
        size_t b = c->r[i].off > c->lo ? c->r[i].off : c->lo, e = c->r[i].off + c->r[i].n;
        e = e < c->hi ? e : c->hi;
        if (b >= e) continue;
        rt_adamw(hb, c->z->h_master + b, c->z->h_grad + b, c->z->m + b, c->z->v + b, e - b, (float)c->h->lr,
                 (float)c->h->beta1, (float)c->h->beta2, (float)c->h->eps,
                 c->r[i].key ? 0.0f : (float)c->h->weight_decay, c->grad_scale, c->t);
    }
    return NULL;
}

/* Copies the updated host slice's [lo, hi) up to `up`, cut off at `owned` floats. */
static void offload_upload(rt_backend *be, float *up, const float *h_master, size_t lo, size_t hi, size_t owned) {
    if (hi > owned) hi = owned;
    if (lo < hi) rt_to_device(be, up + lo, h_master + lo, (hi - lo) * sizeof(float));
}

/* The offloaded update, pipelined over 4 chunks of the shard: while a worker thread runs AdamW
 * on chunk k in host memory, this thread copies chunk k + 1's gradients down and chunk k - 1's
 * parameters back up, so on a GPU the copies and the CPU update overlap. The same arithmetic as
 * one pass, element by element. */
static void offload_step(rt_zero *z, const zero_range *r, int nr, const rt_adamw_hparams *h, float grad_scale,
                         int64_t t) {
    rt_params *p = z->p;
    /* where the updated slice goes: none when the host copy is the parameters themselves; only
     * its trainable floats (past them, p->param may hold frozen ones) */
    float *up = z->offload_params ? NULL : z->stage == 3 ? z->pshard : p->param + z->begin;
    const size_t n = z->shard, owned = zero_slice_owned(z), chunk = n / 4 + 1, f = sizeof(float);
    const size_t K = (n + chunk - 1) / chunk;
    if (K > 0) rt_to_host(p->be, z->h_grad, z->gshard, (chunk < n ? chunk : n) * f);
    for (size_t k = 0; k < K; k++) {
        size_t lo = k * chunk, hi = lo + chunk < n ? lo + chunk : n;
        offload_chunk job = {.z = z, .r = r, .nr = nr, .h = h, .grad_scale = grad_scale, .t = t, .lo = lo, .hi = hi};
        pthread_t worker;
        bool threaded = pthread_create(&worker, NULL, offload_adamw, &job) == 0;
        if (!threaded) offload_adamw(&job); /* no thread to be had: the same work, in turn */
        if (k + 1 < K) {
            size_t nlo = hi, nhi = nlo + chunk < n ? nlo + chunk : n;
            rt_to_host(p->be, z->h_grad + nlo, z->gshard + nlo, (nhi - nlo) * f);
        }
        if (k > 0 && up) offload_upload(p->be, up, z->h_master, lo - chunk, lo, owned);
        if (threaded) pthread_join(worker, NULL);
    }
    if (K > 0 && up) offload_upload(p->be, up, z->h_master, (K - 1) * chunk, n, owned);
}

rt_status rt_zero_step(rt_zero *z, const rt_adamw_hparams *h, float grad_scale, int64_t t) {
    rt_status st = RT_OK;
    rt_params *p = z->p;
    RT_CHECK(t >= 1, "AdamW step %lld", (long long)t);
    zero_range *r = zero_ranges_alloc(z);
    int nr = zero_ranges(z, true, r);
    if (z->offload) {
        /* gradient shard down, AdamW on the host's fp32 master copy, parameters back up */
        offload_step(z, r, nr, h, grad_scale, t);
    } else {
        float *param = z->stage == 3 ? z->pshard : p->param + z->begin;
        for (int i = 0; i < nr; i++)
            rt_adamw(p->be, param + r[i].off, z->gshard + r[i].off, z->m + r[i].off, z->v + r[i].off, r[i].n,
                     (float)h->lr, (float)h->beta1, (float)h->beta2, (float)h->eps,
                     r[i].key ? 0.0f : (float)h->weight_decay, grad_scale, t);
    }
    if (z->stage == 3) { /* the window's gathered values are stale; the next use gathers anew */
        rt_zero3_drop_window(z);
        goto fail;
    }
    const size_t N = z->sharded;
    const size_t end = z->begin + z->shard < N ? z->begin + z->shard : N;
    const size_t lo = z->begin < N ? z->begin : N;
    if (z->pgather) { /* through the buffer: the slab's frozen tail is no padding */
        rt_copy(p->be, z->pgather + z->begin, p->param + lo, (end - lo) * sizeof(float));
        RT_TRY(z->dp->ops->all_gather(z->dp->ctx, z->pgather, z->pgather + z->begin, z->shard));
        rt_copy(p->be, p->param, z->pgather, N * sizeof(float));
    } else { /* in place: this rank's slice already sits at its spot in the slab */
        RT_TRY(z->dp->ops->all_gather(z->dp->ctx, p->param, p->param + z->begin, z->shard));
    }
    /* the other ranks' slices changed the weights' low-precision copy too (AdamW wrote this
     * rank's, unless offloaded: then the host did and the copy needs that slice as well) */
    rt_weight_copy_update(p->be, p->param, lo);
    rt_weight_copy_update(p->be, p->param + end, N - end);
    if (z->offload) rt_weight_copy_update(p->be, p->param + lo, end - lo);
fail:
    free(r);
    return st;
}

rt_status rt_zero_gather_state(rt_zero *z) {
    rt_status st = RT_OK;
    rt_params *p = z->p;
    float **full[2] = {&p->m, &p->v};
    const float *mine[2] = {z->m, z->v};
    rt_zero_release_state(z);
    RT_TRY(rt_zero_gather_params(z));
    for (int k = 0; k < 2; k++) {
        RT_TRY(rt_backend_alloc(p->be, (z->stage == 3 ? p->train_numel : z->padded) * sizeof(float),
                                k ? "AdamW second moments (checkpoint)" : "AdamW first moments (checkpoint)",
                                (void **)full[k]));
        if (z->stage == 3) {
            RT_TRY(rt_zero3_gather_full(z, mine[k], NULL, z->offload, *full[k]));
            continue;
        }
        float *at = *full[k] + z->begin;
        if (z->offload)
            rt_to_device(p->be, at, mine[k], z->shard * sizeof(float));
        else
            rt_copy(p->be, at, mine[k], z->shard * sizeof(float));
        RT_TRY(z->dp->ops->all_gather(z->dp->ctx, *full[k], at, z->shard));
    }
fail:
    if (st != RT_OK) rt_zero_release_state(z);
    return st;
}

void rt_zero_release_state(rt_zero *z) {
    zero_free_moments(z->p);
    rt_zero_shard_params(z, false);
}

rt_status rt_zero_scatter_state(rt_zero *z) {
    rt_params *p = z->p;
    const float *full[2] = {p->m, p->v};
    float *mine[2] = {z->m, z->v};
    const size_t bytes = z->shard * sizeof(float);
    if (z->stage == 3) {
        for (int k = 0; k < 2; k++) {
            if (z->offload)
                memset(mine[k], 0, bytes);
            else
                rt_clear(p->be, mine[k], bytes);
            if (full[k]) rt_zero3_pieces(z, false, (float *)full[k], false, mine[k], z->offload, true);
        }
        rt_zero_shard_params(z, true);
        if (z->offload && !z->offload_params) rt_to_host(p->be, z->h_master, z->pshard, bytes);
        rt_zero_release_state(z);
        return RT_OK;
    }
    /* a reader fills the sharded floats (the trainable ones): the last slice may reach into the padding */
    const size_t n = zero_slice_owned(z);
    for (int k = 0; k < 2; k++) {
        if (z->offload) {
            memset(mine[k], 0, bytes);
            if (full[k] && n) rt_to_host(p->be, mine[k], full[k] + z->begin, n * sizeof(float));
        } else {
            rt_clear(p->be, mine[k], bytes);
            if (full[k] && n) rt_copy(p->be, mine[k], full[k] + z->begin, n * sizeof(float));
        }
    }
    if (z->offload) rt_to_host(p->be, z->h_master, p->param + z->begin, n * sizeof(float));
    rt_zero_release_state(z);
    return RT_OK;
}
