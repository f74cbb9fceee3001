/* ZeRO stage 3: the parameters sharded block by block, gathered into a small window as the
 * model asks for them, and the gradients reduce-scattered block by block (see rt_zero.h). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "runtime/base/rt_log.h"
#include "runtime/train/rt_zero.h"

/* The part of a parameter name that names its block: through the first all-digit component
 * ("h.3.attn.c_attn.weight" -> "h.3."), or "" for unnumbered names. */
static size_t zero3_block_key(const char *name) {
    const char *c = name;
    while (*c) {
        const char *end = strchr(c, '.');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        bool digits = len > 0;
        for (size_t i = 0; i < len; i++) digits = digits && isdigit((unsigned char)c[i]);
        if (digits && end) return (size_t)(end + 1 - name);
        if (!end) break;
        c = end + 1;
    }
    return 0;
}

static bool zero3_same_block(const char *a, const char *b) {
    size_t ka = zero3_block_key(a), kb = zero3_block_key(b);
    return ka == kb && strncmp(a, b, ka) == 0;
}

/* The span of the parameters [i, j) that are frozen (or not): they follow one another in the
 * slab, since the trainable ones keep their declaration order and so do the frozen ones after
 * them. Its pieces go at the end of *shard, which grows by one; none of them: empty, at `empty`. */
static rt_zero_span zero3_span(const rt_params *p, int i, int j, bool frozen, size_t empty, size_t dp, size_t *shard) {
    int a = -1, b = -1;
    for (int k = i; k < j; k++)
        if (p->specs[k].frozen == frozen) {
            if (a < 0) a = k;
            b = k;
        }
    rt_zero_span s = {.off = empty, .at = *shard};
    if (a >= 0) {
        s.off = p->specs[a].offset;
        s.n = p->specs[b].offset + p->specs[b].numel - s.off;
    }
    s.piece = (s.n + dp - 1) / dp;
    *shard += s.piece;
    return s;
}

void rt_zero3_cut(rt_zero *z) {
    rt_params *p = z->p;
    const size_t dp = (size_t)z->dp->size;
    z->blocks = rt_xcalloc((size_t)(p->n > 0 ? p->n : 1), sizeof *z->blocks);
    z->block_of = rt_xcalloc((size_t)(p->n > 0 ? p->n : 1), sizeof *z->block_of);
    z->shard = z->frozen_shard = 0;
    z->max_piece = z->max_gathered = 1; /* at least one float: buffers sized by them are never empty */
    for (int i = 0; i < p->n;) {
        int j = i + 1;
        /* a tied weight is a block of its own, so its pieces line up on every stage holding it */
        while (j < p->n && !p->specs[i].tied && !p->specs[j].tied &&
               zero3_same_block(p->specs[i].name, p->specs[j].name))
            j++;
        rt_zero_block *b = &z->blocks[z->n_blocks];
        b->first = i;
        b->train = zero3_span(p, i, j, false, rt_params_grad_from(p, i), dp, &z->shard);
        b->frozen = zero3_span(p, i, j, true, p->train_numel, dp, &z->frozen_shard);
        const size_t gathered = (b->train.piece + b->frozen.piece) * dp;
        z->max_piece = b->train.piece > z->max_piece ? b->train.piece : z->max_piece;
        z->max_gathered = gathered > z->max_gathered ? gathered : z->max_gathered;
        for (int k = i; k < j; k++) z->block_of[k] = z->n_blocks;
        z->n_blocks++;
        i = j;
    }
}

void rt_zero3_grad_piece(const rt_zero *z, int param, float **grad, size_t *n) {
    const rt_zero_span *s = &z->blocks[z->block_of[param]].train;
    *grad = z->gshard + s->at;
    *n = s->piece;
}

void rt_zero3_piece(const rt_zero *z, const rt_zero_span *s, size_t *lo, size_t *hi) {
    size_t b = s->piece * (size_t)z->dp->rank, e = b + s->piece;
    *lo = s->off + (b < s->n ? b : s->n);
    *hi = s->off + (e < s->n ? e : s->n);
}

/* Copies bytes between any two of the backend's memory and host memory. */
static void zero3_move(rt_backend *be, void *dst, bool dst_host, const void *src, bool src_host, size_t bytes) {
    if (dst_host && src_host)
        memcpy(dst, src, bytes);
    else if (dst_host)
        rt_to_host(be, dst, src, bytes);
    else if (src_host)
        rt_to_device(be, dst, src, bytes);
    else
        rt_copy(be, dst, src, bytes);
}

void rt_zero3_pieces(rt_zero *z, bool frozen, float *full, bool full_host, float *shard, bool shard_host,
                     bool to_shard) {
    if (frozen && !z->frozen_shard) return; /* nothing frozen: no frozen shard either */
    for (int k = 0; k < z->n_blocks; k++) {
        const rt_zero_span *s = frozen ? &z->blocks[k].frozen : &z->blocks[k].train;
        size_t lo, hi;
        rt_zero3_piece(z, s, &lo, &hi);
        float *mine = shard + s->at;
        const size_t bytes = (hi - lo) * sizeof(float);
        if (!bytes) continue;
        if (to_shard)
            zero3_move(z->p->be, mine, shard_host, full + lo, full_host, bytes);
        else
            zero3_move(z->p->be, full + lo, full_host, mine, shard_host, bytes);
    }
}

/* Keeps the first failure of a call made inside the model's (which cannot return it) for
 * rt_zero3_flush_all, with its message: the calls after it fail too, on the broken comm, and
 * their messages would hide the cause. */
static void zero3_failed(rt_zero *z, rt_status st) {
    if (st == RT_OK || z->error != RT_OK) return;
    z->error = st;
    snprintf(z->error_msg, sizeof z->error_msg, "%s", rt_error_message());
}

/* Completes slot s's prefetch, if one is under way. */
static void zero3_settle(rt_zero *z, rt_zero_slot *s) {
    for (int i = 0; i < 2; i++) {
        if (!s->req[i]) continue;
        rt_status st = rt_comm_wait(z->dp, s->req[i]);
        s->req[i] = NULL;
        zero3_failed(z, st);
    }
}

/* Completes every prefetch before a blocking collective on dp: NCCL runs a prefetch on its own
 * stream, and two streams' collectives on one communicator could run in a different order on
 * different ranks. The prefetch has still overlapped the compute since it started. */
static void zero3_settle_all(rt_zero *z) {
    for (int i = 0; i < RT_ZERO3_WINDOW; i++) zero3_settle(z, &z->pslots[i]);
}

/* Puts this rank's piece of a span of a shard (pshard, fshard, m or v; host memory when
 * on_host) at its place in buf (piece * dp floats) and all-gathers the rest in place: blocking,
 * or started when req is not NULL (*req then NULL if the comm finished it at once). The padding
 * past the span's end is zero in every piece. An empty span gathers nothing (on every rank). */
static rt_status zero3_gather(rt_zero *z, const rt_zero_span *s, const float *shard, bool on_host, float *buf,
                              void **req) {
    if (req) *req = NULL;
    if (!s->n) return RT_OK;
    float *at = buf + s->piece * (size_t)z->dp->rank;
    zero3_move(z->p->be, at, false, shard + s->at, on_host, s->piece * sizeof(float));
    if (req) return rt_comm_all_gather_start(z->dp, buf, at, s->piece, req);
    zero3_settle_all(z);
    return z->dp->ops->all_gather(z->dp->ctx, buf, at, s->piece);
}

/* Block k's values into buf (zero3_values floats): the trainable span's, then the frozen one's.
 * req: NULL to wait, else two requests for a prefetch. */
static rt_status zero3_gather_values(rt_zero *z, int k, float *buf, void **req) {
    const rt_zero_block *b = &z->blocks[k];
    z->gathers++;
    rt_status st = zero3_gather(z, &b->train, z->pshard, z->offload_params, buf, req ? &req[0] : NULL);
    if (st != RT_OK) return st;
    return zero3_gather(z, &b->frozen, z->fshard, z->offload_params, buf + b->train.piece * (size_t)z->dp->size,
                        req ? &req[1] : NULL);
}

/* Floats in block k's gathered values, and in its gradient. */
static size_t zero3_values(const rt_zero *z, int k) {
    return (z->blocks[k].train.piece + z->blocks[k].frozen.piece) * (size_t)z->dp->size;
}
static size_t zero3_grads(const rt_zero *z, int k) { return z->blocks[k].train.piece * (size_t)z->dp->size; }

/* Empties slot s. Its buffer goes to the spares for the next block of its size (the blocks of a
 * stack are all one size), so a step allocates nothing once the window has filled: no
 * cudaMalloc, which synchronises, per gather on a GPU. */
static void zero3_slot_free(rt_zero *z, rt_zero_slot *s) {
    zero3_settle(z, s);
    if (s->buf) {
        const size_t n = s->floats;
        int room = -1;
        for (int i = 0; i < RT_ZERO3_SPARES && room < 0; i++)
            if (!z->spares[i].buf) room = i;
        if (room >= 0)
            z->spares[room] = (rt_zero_spare){.buf = s->buf, .floats = n};
        else
            rt_free_sized(z->p->be, s->buf, n * sizeof(float));
    }
    *s = (rt_zero_slot){.block = -1};
}

/* A buffer of n floats for block k in slot s: a spare of its size (zeroed when `zeroed`:
 * gradients add into it, while a gather writes every float), else a new zeroed one. The model's
 * calls cannot fail, so running out of memory here stops the process, naming the block. */
static void zero3_alloc(rt_zero *z, int k, size_t n, rt_zero_slot *s, const char *what, bool zeroed) {
    s->block = k;
    s->floats = n;
    for (int i = 0; i < RT_ZERO3_SPARES; i++)
        if (z->spares[i].buf && z->spares[i].floats == n) {
            s->buf = z->spares[i].buf;
            z->spares[i] = (rt_zero_spare){0};
            if (zeroed) rt_clear(z->p->be, s->buf, n * sizeof(float));
            return;
        }
    rt_status st = rt_backend_alloc(z->p->be, n * sizeof(float), what, (void **)&s->buf);
    RT_CHECK(st == RT_OK, "ZeRO-3: no memory for the %s of block %d (from %s, %zu floats): %s", what, k,
             z->p->specs[z->blocks[k].first].name, n, rt_error_message());
}

/* The slot holding block k in slots, or a free one, or (none free) the least recently used
 * one other than `keep`, which *evicted says must be emptied first. */
static rt_zero_slot *zero3_slot(rt_zero_slot *slots, int k, int keep, bool *found, bool *evicted) {
    rt_zero_slot *free_slot = NULL, *lru = NULL;
    *found = *evicted = false;
    for (int i = 0; i < RT_ZERO3_WINDOW; i++) {
        rt_zero_slot *s = &slots[i];
        if (s->block == k) {
            *found = true;
            return s;
        }
        if (s->block < 0 && !free_slot) free_slot = s;
        if (s->block >= 0 && s->block != keep && (!lru || s->used < lru->used)) lru = s;
    }
    if (free_slot) return free_slot;
    *evicted = true;
    return lru;
}

/* Block k's gathered values in the window (a sticky error leaves a zeroed buffer: the step
 * fails at rt_zero_reduce_grads). keep: a block that must not be evicted now. ahead: start the
 * gather and return without waiting (the prefetch); otherwise the values are there on return. */
static float *zero3_fetch(rt_zero *z, int k, int keep, bool ahead) {
    bool found, evicted;
    rt_zero_slot *s = zero3_slot(z->pslots, k, keep, &found, &evicted);
    if (!found) {
        if (evicted) zero3_slot_free(z, s);
        zero3_alloc(z, k, zero3_values(z, k), s, "gathered parameters", false);
        rt_status st = zero3_gather_values(z, k, s->buf, ahead ? s->req : NULL);
        zero3_failed(z, st);
    }
    s->used = ++z->clock; /* after the eviction, which empties the slot */
    if (!ahead) zero3_settle(z, s);
    return s->buf;
}

static float *zero3_data(void *user, int idx) {
    rt_zero *z = user;
    const int k = z->block_of[idx];
    float *buf = zero3_fetch(z, k, -1, false);
    /* one block ahead in the pass's direction (forward ascends, backward descends) */
    const int dir = k > z->last_block ? 1 : k < z->last_block ? -1 : 0;
    if (dir && k + dir >= 0 && k + dir < z->n_blocks) zero3_fetch(z, k + dir, k, true);
    z->last_block = k;
    const rt_zero_block *b = &z->blocks[k];
    const rt_param_spec *s = &z->p->specs[idx];
    if (s->frozen) return buf + b->train.piece * (size_t)z->dp->size + (s->offset - b->frozen.off);
    return buf + (s->offset - b->train.off);
}

/* Adds block k's gradient (in s) to this rank's gradient shard: a reduce-scatter over dp, then
 * gshard += the summed piece, and empties the slot. A stand-in's gradients go in as zeros. */
static rt_status zero3_flush(rt_zero *z, rt_zero_slot *s) {
    const rt_zero_span *t = &z->blocks[s->block].train;
    zero3_settle_all(z);
    if (z->discard) rt_clear(z->p->be, s->buf, s->floats * sizeof(float));
    rt_status st = z->dp->ops->reduce_scatter(z->dp->ctx, z->rs_out, s->buf, t->piece, RT_REDUCE_SUM);
    if (st == RT_OK) rt_axpy(z->p->be, z->gshard + t->at, 1.0f, z->rs_out, t->piece);
    zero3_slot_free(z, s);
    return st;
}

static float *zero3_grad(void *user, int idx) {
    rt_zero *z = user;
    const int k = z->block_of[idx];
    bool found, evicted;
    rt_zero_slot *s = zero3_slot(z->gslots, k, k, &found, &evicted);
    if (!found) {
        if (evicted) { /* partial sums flush as well as final ones: the shard adds them up */
            rt_status st = zero3_flush(z, s);
            zero3_failed(z, st);
        }
        zero3_alloc(z, k, zero3_grads(z, k), s, "gradients", true);
    }
    s->used = ++z->clock;
    return s->buf + (z->p->specs[idx].offset - z->blocks[k].train.off);
}

void rt_zero_grads_ready(rt_zero *z, size_t first) {
    if (!z || z->stage != 3) return;
    /* highest block first, the order every rank's backward finishes them in */
    for (int k = z->n_blocks - 1; k >= 0 && z->blocks[k].train.off >= first; k--)
        for (int i = 0; i < RT_ZERO3_WINDOW; i++)
            if (z->gslots[i].block == k) {
                rt_status st = zero3_flush(z, &z->gslots[i]);
                zero3_failed(z, st);
            }
}

void rt_zero_discard_grads(rt_zero *z) {
    if (z && z->stage == 3) z->discard = true;
}

rt_status rt_zero_micro_done(rt_zero *z) {
    if (!z || z->stage != 3) return RT_OK;
    rt_status st = rt_zero3_flush_all(z);
    z->discard = false;
    return st;
}

rt_status rt_zero3_flush_all(rt_zero *z) {
    rt_zero_grads_ready(z, 0);
    rt_status st = z->error;
    z->error = RT_OK;
    if (st != RT_OK) return rt_errorf(st, "%s", z->error_msg);
    return st;
}

void rt_zero3_drop_window(rt_zero *z) {
    for (int i = 0; i < RT_ZERO3_WINDOW; i++) zero3_slot_free(z, &z->pslots[i]);
    z->last_block = -1;
}

rt_status rt_zero3_gather_full(rt_zero *z, const float *shard, const float *frozen_shard, bool on_host, float *full) {
    rt_status st = RT_OK;
    rt_params *p = z->p;
    float *buf = NULL;
    const size_t bytes = z->max_gathered * sizeof(float);
    RT_TRY(rt_backend_alloc(p->be, bytes, "ZeRO-3 gather buffer", (void **)&buf));
    for (int k = 0; k < z->n_blocks; k++)
        for (int f = 0; f < (frozen_shard ? 2 : 1); f++) {
            const rt_zero_span *s = f ? &z->blocks[k].frozen : &z->blocks[k].train;
            RT_TRY(zero3_gather(z, s, f ? frozen_shard : shard, on_host, buf, NULL));
            if (s->n) rt_copy(p->be, full + s->off, buf, s->n * sizeof(float));
        }
fail:
    if (buf) rt_free_sized(p->be, buf, bytes);
    return st;
}

rt_status rt_zero_gather_params(rt_zero *z) {
    rt_status st = RT_OK;
    if (!z || z->stage != 3 || z->p->param) return RT_OK;
    rt_params *p = z->p;
    rt_zero3_drop_window(z);
    RT_TRY(rt_backend_alloc(p->be, p->numel * sizeof(float), "parameters (gathered from the ZeRO-3 shards)",
                            (void **)&p->param));
    RT_TRY(rt_zero3_gather_full(z, z->pshard, z->fshard, z->offload_params, p->param));
    p->source = NULL;
fail:
    if (st != RT_OK && p->param) {
        rt_free_sized(p->be, p->param, p->numel * sizeof(float));
        p->param = NULL;
    }
    return st;
}

void rt_zero_shard_params(rt_zero *z, bool take) {
    if (!z || z->stage != 3) return;
    rt_params *p = z->p;
    if (p->param) {
        if (take) {
            rt_zero3_pieces(z, false, p->param, false, z->pshard, z->offload_params, true);
            rt_zero3_pieces(z, true, p->param, false, z->fshard, z->offload_params, true);
        }
        rt_free_sized(p->be, p->param, p->numel * sizeof(float));
        p->param = NULL;
    }
    rt_zero3_drop_window(z);
    p->source = &z->source;
}

rt_status rt_zero3_init(rt_zero *z, rt_backend *staging) {
    rt_status st = RT_OK;
    rt_params *p = z->p;
    for (int i = 0; i < RT_ZERO3_WINDOW; i++) z->pslots[i] = z->gslots[i] = (rt_zero_slot){.block = -1};
    z->last_block = -1;
    RT_TRY(rt_backend_alloc(p->be, z->max_piece * sizeof(float), "ZeRO-3 reduce-scatter output", (void **)&z->rs_out));
    if (z->offload_params)
        z->pshard = z->h_master; /* the host's master weights are the parameters */
    else
        RT_TRY(rt_backend_alloc(p->be, (z->shard ? z->shard : 1) * sizeof(float), "ZeRO-3 parameter shard",
                                (void **)&z->pshard));
    if (z->frozen_shard) /* with the parameters: on the host when they are offloaded */
        RT_TRY(rt_backend_alloc(z->offload_params ? z->host_be : p->be, z->frozen_shard * sizeof(float),
                                "ZeRO-3 frozen parameter shard", (void **)&z->fshard));
    /* the slab is in host memory when the model was built there (staging) */
    rt_zero3_pieces(z, false, p->param, staging != NULL, z->pshard, z->offload_params, true);
    rt_zero3_pieces(z, true, p->param, staging != NULL, z->fshard, z->offload_params, true);
    if (z->offload && !z->offload_params) rt_zero3_pieces(z, false, p->param, staging != NULL, z->h_master, true, true);
    rt_backend *home = staging ? staging : p->be;
    rt_free_sized(home, p->param, p->numel * sizeof(float));
    if (p->grad) rt_free_sized(home, p->grad, p->train_numel * sizeof(float));
    p->param = p->grad = NULL;
    z->source = (rt_params_source){.data = zero3_data, .grad = zero3_grad, .user = z};
    p->source = &z->source;
fail:
    return st;
}

void rt_zero3_free(rt_zero *z) {
    rt_params *p = z->p;
    rt_zero3_drop_window(z);
    for (int i = 0; i < RT_ZERO3_WINDOW; i++) zero3_slot_free(z, &z->gslots[i]);
    for (int i = 0; i < RT_ZERO3_SPARES; i++)
        if (z->spares[i].buf) rt_free_sized(p->be, z->spares[i].buf, z->spares[i].floats * sizeof(float));
    if (p->source == &z->source) p->source = NULL;
    if (z->pshard && z->pshard != z->h_master) rt_free_device(p->be, z->pshard);
    if (z->fshard) rt_free_device(z->offload_params ? z->host_be : p->be, z->fshard);
    if (z->rs_out) rt_free_device(p->be, z->rs_out);
    free(z->blocks);
    free(z->block_of);
}
