/* Parameter slab layout, allocation and seeded initialisation (see rt_params.h). Shape and
 * slab sizes are multiplied and summed with overflow checks: a model checks its config's
 * sizes first, so a wrap here is a caller's bug, never a negative or tiny slab. */
#include "runtime/train/rt_params.h"

#include <stdint.h>
#include <string.h>

#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_rng.h"

void rt_params_init(rt_params *p, rt_backend *be) {
    memset(p, 0, sizeof *p);
    p->be = be->params_staging ? be->params_staging : be;
    p->device = be->params_staging ? be : NULL;
}

void rt_params_free(rt_params *p) {
    if (!p) return;
    if (p->be) {
        if (p->param) rt_free_device(p->be, p->param);
        if (p->grad) rt_free_device(p->be, p->grad);
        if (p->m) rt_free_device(p->be, p->m);
        if (p->v) rt_free_device(p->be, p->v);
    }
    free(p->specs);
    memset(p, 0, sizeof *p);
}

int rt_params_add(rt_params *p, const char *name, int ndim, const int64_t *shape, rt_tp_rule tp, bool no_decay,
                  rt_init_kind init, float init_std) {
    RT_CHECK(p->param == NULL, "rt_params_add(%s) after rt_params_alloc", name);
    RT_CHECK(ndim >= 1 && ndim <= RT_PARAM_MAX_DIMS, "%s: ndim %d", name, ndim);
    RT_CHECK(strlen(name) < RT_PARAM_NAME_MAX, "parameter name too long: %s", name);
    RT_GROW(p->specs, p->cap, (size_t)p->n + 1);
    rt_param_spec *s = &p->specs[p->n];
    memset(s, 0, sizeof *s);
    strcpy(s->name, name);
    s->ndim = ndim;
    s->numel = 1;
    for (int d = 0; d < ndim; d++) {
        RT_CHECK(shape[d] > 0, "%s: dim %d is %lld (expected >= 1; did a size overflow before it got here?)", name, d,
                 (long long)shape[d]);
        s->shape[d] = shape[d];
        RT_CHECK(!__builtin_mul_overflow(s->numel, (size_t)shape[d], &s->numel),
                 "%s: the product of its %d dims overflows size_t at dim %d (%lld)", name, ndim, d,
                 (long long)shape[d]);
    }
    s->tp = tp;
    s->no_decay = no_decay;
    s->init = init;
    s->init_std = init_std;
    s->init_stream = p->n;
    return p->n++;
}

/* Rounds n up to a multiple of 16 floats, false when that overflows. */
static bool params_align16(size_t n, size_t *out) {
    if (n > SIZE_MAX - 15) return false;
    *out = (n + 15) & ~(size_t)15;
    return true;
}

rt_status rt_params_layout(rt_params *p) {
    rt_status st = RT_OK;
    size_t off = 0, end = 0, bytes = 0;
    for (int frozen = 0; frozen < 2; frozen++) { /* the trainable ones, then the frozen ones */
        for (int i = 0; i < p->n; i++) {
            if (p->specs[i].frozen != (frozen == 1)) continue;
            /* 16-float alignment keeps every parameter on a 64-byte boundary for SIMD and copies */
            if (!params_align16(off, &off) || __builtin_add_overflow(off, p->specs[i].numel, &end))
                RT_FAIL(RT_ERR_NOMEM, "parameters: the slab overflows size_t at %s (%zu floats)", p->specs[i].name,
                        p->specs[i].numel);
            p->specs[i].offset = off;
            off = end;
        }
        if (!frozen && !params_align16(off, &p->train_numel))
            RT_FAIL(RT_ERR_NOMEM, "parameters: %zu trainable floats overflow size_t", off);
        off = frozen ? off : p->train_numel;
    }
    /* the slab's bytes too: every buffer of the slab's layout (gradients, m, v) fits in it */
    if (!params_align16(off, &p->numel) || __builtin_mul_overflow(p->numel, sizeof(float), &bytes))
        RT_FAIL(RT_ERR_NOMEM, "parameters: %zu floats overflow size_t in bytes", off);
fail:
    return st;
}

/* Bytes of a buffer in the trainable layout (gradients, m, v); at least one float, so that a
 * model with every parameter frozen still has a buffer to hand around. */
static size_t params_train_bytes(const rt_params *p) { return (p->train_numel ? p->train_numel : 16) * sizeof(float); }

rt_status rt_params_alloc(rt_params *p) {
    rt_status st = RT_OK;
    RT_TRY(rt_params_layout(p));
    const size_t bytes = p->numel * sizeof(float); /* rt_params_layout checked the product */
    RT_TRY(rt_backend_alloc(p->be, bytes, "parameters", (void **)&p->param));
    /* a staged build (ZeRO-3 on a GPU) never has a whole gradient: rt_zero_init gives it blocks */
    if (!p->device) RT_TRY(rt_backend_alloc(p->be, params_train_bytes(p), "gradients", (void **)&p->grad));
fail:
    return st;
}

rt_status rt_params_alloc_moments(rt_params *p) {
    rt_status st = RT_OK;
    if (!p->m) RT_TRY(rt_backend_alloc(p->be, params_train_bytes(p), "AdamW first moments", (void **)&p->m));
    if (!p->v) RT_TRY(rt_backend_alloc(p->be, params_train_bytes(p), "AdamW second moments", (void **)&p->v));
fail:
    return st;
}

void rt_params_init_weights(rt_params *p, uint64_t seed) {
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        float *host = rt_xmalloc(s->numel * sizeof(float));
        const uint64_t stream = RT_STREAM(RT_STREAM_INIT, s->init_stream);
        /* each value is a pure function of (seed, stream, j): the threads' split changes no bit */
#pragma omp parallel for schedule(static) if (s->numel > 65536)
        for (size_t j = 0; j < s->numel; j++) {
            switch (s->init) {
            case RT_INIT_ZEROS: host[j] = 0.0f; break;
            case RT_INIT_ONES: host[j] = 1.0f; break;
            case RT_INIT_NORMAL: host[j] = s->init_std * rt_rng_normal(seed, stream, j); break;
            case RT_INIT_UNIFORM: host[j] = s->init_std * (2.0f * rt_rng_uniform(seed, stream, j) - 1.0f); break;
            }
        }
        rt_to_device(p->be, p->param + s->offset, host, s->numel * sizeof(float));
        free(host);
    }
}

void rt_params_streams_from(rt_params *p, const rt_params *whole) {
    for (int i = 0; i < p->n; i++) {
        const int j = rt_params_find(whole, p->specs[i].name);
        RT_CHECK(j >= 0, "parameter %s is not in the whole model", p->specs[i].name);
        p->specs[i].init_stream = whole->specs[j].init_stream;
    }
}

size_t rt_params_grad_from(const rt_params *p, int idx) {
    for (int i = idx; i < p->n; i++)
        if (!p->specs[i].frozen) return p->specs[i].offset;
    return p->train_numel;
}

float *rt_params_data(const rt_params *p, int idx) {
    RT_CHECK(idx >= 0 && idx < p->n && (p->param || p->source), "parameter %d of %d", idx, p->n);
    if (p->source) return p->source->data(p->source->user, idx);
    return p->param + p->specs[idx].offset;
}

float *rt_params_grad(const rt_params *p, int idx) {
    RT_CHECK(idx >= 0 && idx < p->n && (p->grad || p->source), "parameter %d of %d", idx, p->n);
    if (p->specs[idx].frozen) return NULL;
    if (p->source) return p->source->grad(p->source->user, idx);
    return p->grad + p->specs[idx].offset;
}

int rt_params_find(const rt_params *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->specs[i].name, name) == 0) return i;
    return -1;
}

int rt_params_tied(const rt_params *p) {
    for (int i = 0; i < p->n; i++)
        if (p->specs[i].tied) return i;
    return -1;
}

int rt_params_n_frozen(const rt_params *p) {
    int n = 0;
    for (int i = 0; i < p->n; i++) n += p->specs[i].frozen;
    return n;
}

void rt_params_zero_grad(rt_params *p) { rt_clear(p->be, p->grad, p->train_numel * sizeof(float)); }
