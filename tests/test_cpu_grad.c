/* Finite-difference checks for every backward op of the CPU backend. For each op a scalar
 * L = sum(out * R), R fixed and random, is evaluated in double from the float forward at
 * x + h and x - h (central differences over the exactly representable step), and compared
 * element by element with the analytic gradient the backward op gives for dout = R.
 * h = 1e-2 keeps float rounding in L (~1e-7 relative) well below the tolerance, and the
 * truncation error (h^2 f'''/6) too: the worst errors seen are ~1e-4, so atol 2e-4 +
 * rtol 2e-3 passes with margin and still catches a dropped or mis-scaled term, which
 * moves gradients by O(0.01..0.1). Sizes are tiny so it runs in well
 * under a second. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/rt_backend.h"
#include "runtime/base/rt_rng.h"
#include "tests/testutil.h"

static const rt_backend_ops *ops;
static void *cx;

#define FD_H 1e-2f
#define FD_ATOL 2e-4f
#define FD_RTOL 2e-3f

static float *fill(size_t n, uint64_t stream, float lo, float hi) {
    float *x = rt_xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rt_rng_uniform(4321, stream, i);
    return x;
}

static float *zeros(size_t n) { return rt_xcalloc(n, sizeof(float)); }

static double dot_d(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

typedef double (*loss_fn)(void *st);

/* The finite-difference check at this file's step and tolerances (testutil.h). */
static void fd_check(const char *what, float *x, size_t nx, const float *analytic, loss_fn L, void *st) {
    tz_fd_check(what, x, nx, analytic, L, st, FD_H, FD_ATOL, FD_RTOL);
}

/* Calling a backward op twice must double its output (the "accumulates" contract). */
static void check_accumulates(const char *what, const float *twice, const float *once, size_t n) {
    float *ref = rt_xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) ref[i] = 2.0f * once[i];
    tz_check_close(what, twice, ref, n, 1e-6f, 1e-6f);
    free(ref);
}

static float *dup(const float *x, size_t n) {
    float *y = rt_xmalloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* ---- LayerNorm ---- */
typedef struct {
    float *x, *w, *b, *out, *mean, *rstd, *R;
    size_t N;
    int C;
} ln_st;

static double ln_loss(void *p) {
    ln_st *s = p;
    ops->layernorm_fwd(cx, rt_xf(s->out), s->mean, s->rstd, rt_xf(s->x), s->w, s->b, s->N, s->C, 1e-5f);
    return dot_d(s->out, s->R, s->N * s->C);
}

static void grad_layernorm(void) {
    ln_st s = {.N = 3, .C = 8};
    size_t n = s.N * s.C;
    s.x = fill(n, 1, -1, 1), s.w = fill(s.C, 2, 0.5f, 1.5f), s.b = fill(s.C, 3, -0.5f, 0.5f);
    s.out = zeros(n), s.mean = zeros(s.N), s.rstd = zeros(s.N), s.R = fill(n, 4, -1, 1);
    float *dx = zeros(n), *dw = zeros(s.C), *db = zeros(s.C);
    ln_loss(&s);
    ops->layernorm_bwd(cx, dx, dw, db, rt_xf(s.R), rt_xf(s.x), s.w, s.mean, s.rstd, s.N, s.C);
    float *dx1 = dup(dx, n), *dw1 = dup(dw, s.C), *db1 = dup(db, s.C);
    ops->layernorm_bwd(cx, dx, dw, db, rt_xf(s.R), rt_xf(s.x), s.w, s.mean, s.rstd, s.N, s.C);
    check_accumulates("layernorm_bwd accumulates dinp", dx, dx1, n);
    check_accumulates("layernorm_bwd accumulates dweight", dw, dw1, s.C);
    check_accumulates("layernorm_bwd accumulates dbias", db, db1, s.C);
    fd_check("layernorm dinp", s.x, n, dx1, ln_loss, &s);
    fd_check("layernorm dweight", s.w, s.C, dw1, ln_loss, &s);
    fd_check("layernorm dbias", s.b, s.C, db1, ln_loss, &s);
    free(s.x), free(s.w), free(s.b), free(s.out), free(s.mean), free(s.rstd), free(s.R);
    free(dx), free(dw), free(db), free(dx1), free(dw1), free(db1);
}

/* ---- RMSNorm ---- */
static double rms_loss(void *p) {
    ln_st *s = p;
    ops->rmsnorm_fwd(cx, rt_xf(s->out), s->rstd, rt_xf(s->x), s->w, s->N, s->C, 1e-6f);
    return dot_d(s->out, s->R, s->N * s->C);
}

static void grad_rmsnorm(void) {
    ln_st s = {.N = 3, .C = 8};
    size_t n = s.N * s.C;
    s.x = fill(n, 11, -1, 1), s.w = fill(s.C, 12, 0.5f, 1.5f);
    s.out = zeros(n), s.rstd = zeros(s.N), s.R = fill(n, 14, -1, 1);
    float *dx = zeros(n), *dw = zeros(s.C);
    rms_loss(&s);
    ops->rmsnorm_bwd(cx, dx, dw, rt_xf(s.R), rt_xf(s.x), s.w, s.rstd, s.N, s.C);
    float *dx1 = dup(dx, n), *dw1 = dup(dw, s.C);
    ops->rmsnorm_bwd(cx, dx, dw, rt_xf(s.R), rt_xf(s.x), s.w, s.rstd, s.N, s.C);
    check_accumulates("rmsnorm_bwd accumulates dinp", dx, dx1, n);
    check_accumulates("rmsnorm_bwd accumulates dweight", dw, dw1, s.C);
    fd_check("rmsnorm dinp", s.x, n, dx1, rms_loss, &s);
    fd_check("rmsnorm dweight", s.w, s.C, dw1, rms_loss, &s);
    free(s.x), free(s.w), free(s.out), free(s.rstd), free(s.R), free(dx), free(dw), free(dx1), free(dw1);
}

/* ---- activations ---- */
typedef struct {
    rt_act_kind kind;
    float *x, *out, *R;
    size_t n;
} act_st;

static double act_loss(void *p) {
    act_st *s = p;
    ops->act_fwd(cx, s->kind, rt_xf(s->out), rt_xf(s->x), s->n);
    return dot_d(s->out, s->R, s->n);
}

static void grad_activations(void) {
    const char *names[4] = {"gelu_tanh dinp", "gelu_erf dinp", "relu dinp", "tanh dinp"};
    for (int kind = 0; kind < 4; kind++) {
        act_st s = {.kind = (rt_act_kind)kind, .n = 40};
        s.x = fill(s.n, 20, -3, 3), s.out = zeros(s.n), s.R = fill(s.n, 21, -1, 1);
        /* keep ReLU's kink out of reach of the +-h step */
        for (size_t i = 0; i < s.n; i++)
            if (fabsf(s.x[i]) < 0.05f) s.x[i] = 0.1f;
        float *dx = zeros(s.n);
        ops->act_bwd(cx, s.kind, rt_xf(dx), rt_xf(s.x), rt_xf(s.R), s.n);
        fd_check(names[kind], s.x, s.n, dx, act_loss, &s);
        free(s.x), free(s.out), free(s.R), free(dx);
    }
}

/* ---- gated activations (T5 v1.1): out = act(gate) * lin ---- */
typedef struct {
    rt_act_kind kind;
    float *gate, *lin, *out, *R;
    size_t n;
} gated_st;

static double gated_loss(void *p) {
    gated_st *s = p;
    ops->gated_act_fwd(cx, s->kind, rt_xf(s->out), rt_xf(s->gate), rt_xf(s->lin), s->n);
    return dot_d(s->out, s->R, s->n);
}

static void grad_gated_activations(void) {
    const char *names[4] = {"gated gelu_tanh", "gated gelu_erf", "gated relu", "gated tanh"};
    for (int kind = 0; kind < 4; kind++) {
        gated_st s = {.kind = (rt_act_kind)kind, .n = 40};
        s.gate = fill(s.n, 22, -3, 3), s.lin = fill(s.n, 23, -2, 2), s.out = zeros(s.n), s.R = fill(s.n, 24, -1, 1);
        for (size_t i = 0; i < s.n; i++) /* ReLU's kink out of the step's reach */
            if (fabsf(s.gate[i]) < 0.05f) s.gate[i] = 0.1f;
        /* the forward is act() times lin, element by element */
        float *act = zeros(s.n);
        ops->act_fwd(cx, s.kind, rt_xf(act), rt_xf(s.gate), s.n);
        gated_loss(&s);
        for (size_t i = 0; i < s.n; i++) act[i] *= s.lin[i];
        char what[80];
        snprintf(what, sizeof what, "%s fwd = act(gate) * lin", names[kind]);
        tz_check_close(what, s.out, act, s.n, 0.0f, 0.0f);
        float *dgate = fill(s.n, 25, -5, 5), *dlin = fill(s.n, 26, -5, 5); /* written, not accumulated */
        ops->gated_act_bwd(cx, s.kind, rt_xf(dgate), rt_xf(dlin), rt_xf(s.gate), rt_xf(s.lin), rt_xf(s.R), s.n);
        snprintf(what, sizeof what, "%s dgate", names[kind]);
        fd_check(what, s.gate, s.n, dgate, gated_loss, &s);
        snprintf(what, sizeof what, "%s dlin", names[kind]);
        fd_check(what, s.lin, s.n, dlin, gated_loss, &s);
        free(s.gate), free(s.lin), free(s.out), free(s.R), free(act), free(dgate), free(dlin);
    }
}

/* ---- bias ---- */
typedef struct {
    float *x, *bias, *out, *R;
    size_t N;
    int C;
} bias_st;

static double bias_loss(void *p) {
    bias_st *s = p;
    memcpy(s->out, s->x, s->N * s->C * sizeof(float));
    ops->add_bias(cx, s->out, s->bias, s->N, s->C);
    return dot_d(s->out, s->R, s->N * s->C);
}

static void grad_bias(void) {
    bias_st s = {.N = 5, .C = 6};
    size_t n = s.N * s.C;
    s.x = fill(n, 30, -1, 1), s.bias = fill(s.C, 31, -1, 1), s.out = zeros(n), s.R = fill(n, 32, -1, 1);
    float *db = zeros(s.C);
    ops->bias_bwd(cx, db, rt_xf(s.R), s.N, s.C);
    fd_check("bias_bwd dbias", s.bias, s.C, db, bias_loss, &s);
    free(s.x), free(s.bias), free(s.out), free(s.R), free(db);
}

/* ---- attention ---- */
typedef struct {
    rt_attn_desc d;
    float *q, *k, *v, *out, *probs, *R;
    size_t nout;
} attn_st;

static double attn_loss(void *p) {
    attn_st *s = p;
    ops->attention_fwd(cx, &s->d, rt_xf(s->out), s->probs, rt_xf(s->q), rt_xf(s->k), rt_xf(s->v));
    return dot_d(s->out, s->R, s->nout);
}

/* Self-attention over one fused qkv buffer (ldq = 3C): causal, a -inf padding key, additive
 * bias, with and without dropout. */
static void grad_attention_self(float p, const char *tag, const int32_t *prefix) {
    const int B = 2, NH = 2, T = 4, HS = 3, C = NH * HS;
    size_t nqkv = (size_t)B * T * 3 * C, nbias = (size_t)NH * T * T;
    float *qkv = fill(nqkv, 40, -1, 1), *bias = fill(nbias, 41, -1, 1), *mask = zeros((size_t)B * T);
    mask[1 * T + 3] = -INFINITY;
    mask[0 * T + 2] = -2.0f; /* a finite additive mask too */
    attn_st s = {.d = {.B = B,
                       .NH = NH,
                       .Tq = T,
                       .Tk = T,
                       .HS = HS,
                       .ldq = 3 * C,
                       .ldk = 3 * C,
                       .ldv = 3 * C,
                       .ldo = C,
                       .scale = 1.0f / sqrtf((float)HS),
                       .causal = true,
                       .key_mask = mask,
                       .bias = bias,
                       .dropout_p = p,
                       .seed = 3,
                       .stream = 17,
                       .prefix = prefix}};
    s.q = qkv, s.k = qkv + C, s.v = qkv + 2 * C;
    s.nout = (size_t)B * T * C;
    s.out = zeros(s.nout), s.probs = zeros((size_t)B * NH * T * T), s.R = fill(s.nout, 42, -1, 1);
    float *dqkv = fill(nqkv, 43, -5, 5); /* garbage: dq, dk, dv are written, not accumulated */
    float *dbias = zeros(nbias);
    attn_loss(&s);
    ops->attention_bwd(cx, &s.d, rt_xf(dqkv), rt_xf(dqkv + C), rt_xf(dqkv + 2 * C), dbias, rt_xf(s.R), s.probs,
                       rt_xf(s.q), rt_xf(s.k), rt_xf(s.v));
    char what[80];
    snprintf(what, sizeof what, "attention%s dq,dk,dv (fused qkv)", tag);
    fd_check(what, qkv, nqkv, dqkv, attn_loss, &s);
    snprintf(what, sizeof what, "attention%s dbias", tag);
    fd_check(what, bias, nbias, dbias, attn_loss, &s);
    /* dbias accumulates */
    float *db1 = dup(dbias, nbias);
    attn_loss(&s); /* the last difference left probs from x - h */
    ops->attention_bwd(cx, &s.d, rt_xf(dqkv), rt_xf(dqkv + C), rt_xf(dqkv + 2 * C), dbias, rt_xf(s.R), s.probs,
                       rt_xf(s.q), rt_xf(s.k), rt_xf(s.v));
    snprintf(what, sizeof what, "attention%s dbias accumulates", tag);
    check_accumulates(what, dbias, db1, nbias);
    free(qkv), free(bias), free(mask), free(s.out), free(s.probs), free(s.R), free(dqkv), free(dbias), free(db1);
}

/* Cross-attention: q from its own buffer, k and v from a fused kv buffer, Tq != Tk, not
 * causal, no bias (the other parallel path of the backward). */
static void grad_attention_cross(void) {
    const int B = 2, NH = 2, Tq = 3, Tk = 5, HS = 4, C = NH * HS;
    size_t nq = (size_t)B * Tq * C, nkv = (size_t)B * Tk * 2 * C;
    float *q = fill(nq, 50, -1, 1), *kv = fill(nkv, 51, -1, 1), *mask = zeros((size_t)B * Tk);
    mask[0 * Tk + 4] = -1e9f;
    attn_st s = {.d = {.B = B,
                       .NH = NH,
                       .Tq = Tq,
                       .Tk = Tk,
                       .HS = HS,
                       .ldq = C,
                       .ldk = 2 * C,
                       .ldv = 2 * C,
                       .ldo = C,
                       .scale = 1.0f,
                       .causal = false,
                       .key_mask = mask}};
    s.q = q, s.k = kv, s.v = kv + C;
    s.nout = (size_t)B * Tq * C;
    s.out = zeros(s.nout), s.probs = zeros((size_t)B * NH * Tq * Tk), s.R = fill(s.nout, 52, -1, 1);
    float *dq = fill(nq, 53, -5, 5), *dkv = fill(nkv, 54, -5, 5);
    attn_loss(&s);
    ops->attention_bwd(cx, &s.d, rt_xf(dq), rt_xf(dkv), rt_xf(dkv + C), NULL, rt_xf(s.R), s.probs, rt_xf(s.q),
                       rt_xf(s.k), rt_xf(s.v));
    fd_check("cross-attention dq", q, nq, dq, attn_loss, &s);
    fd_check("cross-attention dk,dv (fused kv)", kv, nkv, dkv, attn_loss, &s);
    free(q), free(kv), free(mask), free(s.out), free(s.probs), free(s.R), free(dq), free(dkv);
}

/* ---- T5 relative position bias: gather by bucket, scatter-add back ---- */
typedef struct {
    float *table, *bias, *R;
    const int32_t *buckets;
    int NH, Tq, Tk, nb;
} relbias_st;

static double relbias_loss(void *p) {
    relbias_st *s = p;
    ops->relbias_fwd(cx, s->bias, s->table, s->buckets, s->NH, s->Tq, s->Tk, s->nb);
    return dot_d(s->bias, s->R, (size_t)s->NH * s->Tq * s->Tk);
}

static void grad_relbias(void) {
    enum { NH = 3, Tq = 4, Tk = 5, NB = 6 };
    int32_t buckets[Tq * Tk];
    for (int i = 0; i < Tq; i++) /* bidirectional-style buckets in [0, 6): several pairs per bucket */
        for (int j = 0; j < Tk; j++) buckets[i * Tk + j] = (j - i > 0 ? 3 : 0) + (abs(j - i) < 2 ? abs(j - i) : 2);
    size_t nb = (size_t)NH * Tq * Tk;
    relbias_st s = {.buckets = buckets, .NH = NH, .Tq = Tq, .Tk = Tk, .nb = NB};
    s.table = fill((size_t)NB * NH, 100, -1, 1), s.bias = zeros(nb), s.R = fill(nb, 101, -1, 1);
    relbias_loss(&s);
    int bad = 0;
    for (int h = 0; h < NH; h++)
        for (int t = 0; t < Tq * Tk; t++) bad += s.bias[(size_t)h * Tq * Tk + t] != s.table[buckets[t] * NH + h];
    TZ_EXPECT(bad == 0, "relbias_fwd: %d elements are not table[bucket, head]", bad);
    float *dt = zeros((size_t)NB * NH);
    ops->relbias_bwd(cx, dt, s.R, buckets, NH, Tq, Tk, NB);
    float *dt1 = dup(dt, (size_t)NB * NH);
    ops->relbias_bwd(cx, dt, s.R, buckets, NH, Tq, Tk, NB);
    check_accumulates("relbias_bwd accumulates dtable", dt, dt1, (size_t)NB * NH);
    fd_check("relbias_bwd dtable", s.table, (size_t)NB * NH, dt1, relbias_loss, &s);
    free(s.table), free(s.bias), free(s.R), free(dt), free(dt1);
}

/* ---- embedding ---- */
typedef struct {
    float *table, *out, *R;
    const int32_t *ids;
    size_t N;
    int C, start, V;
} emb_st;

static double emb_loss(void *p) {
    emb_st *s = p;
    ops->embedding_fwd(cx, s->out, s->ids, s->table, s->N, s->C, s->start, s->V, false);
    return dot_d(s->out, s->R, s->N * s->C);
}

static void grad_embedding(void) {
    static const int32_t ids[8] = {3, 8, 5, 1, 3, 9, 4, 3}; /* shard [3, 9): 1 and 9 are outside */
    emb_st s = {.ids = ids, .N = 8, .C = 4, .start = 3, .V = 6};
    s.table = fill((size_t)s.V * s.C, 60, -1, 1), s.out = zeros(s.N * s.C), s.R = fill(s.N * s.C, 61, -1, 1);
    float *dt = zeros((size_t)s.V * s.C);
    ops->embedding_bwd(cx, dt, s.R, ids, s.N, s.C, s.start, s.V);
    fd_check("embedding_bwd dtable (shard)", s.table, (size_t)s.V * s.C, dt, emb_loss, &s);
    free(s.table), free(s.out), free(s.R), free(dt);
}

/* ---- row losses: softmax cross-entropy, binary cross-entropy of sigmoids ---- */
/* L = grad_scale * sum(losses), the scalar whose gradient the ops write into dlogits. */
static double scaled_sum(const float *losses, size_t N, float gs) {
    double L = 0;
    for (size_t n = 0; n < N; n++) L += losses[n];
    return gs * L;
}

typedef struct {
    float *logits, *losses, *scratch;
    const int32_t *tg;
    size_t N;
    int V;
    float gs;
} xent_st;

static double xent_loss(void *p) {
    xent_st *s = p;
    ops->softmax_xent(cx, s->losses, s->scratch, NULL, s->logits, s->tg, s->N, s->V, s->gs);
    return scaled_sum(s->losses, s->N, s->gs);
}

static void grad_softmax_xent(void) {
    static const int32_t tg[4] = {2, -100, 6, 0};
    xent_st s = {.tg = tg, .N = 4, .V = 7, .gs = 0.5f};
    size_t n = s.N * s.V;
    s.logits = fill(n, 70, -2, 2), s.losses = zeros(s.N), s.scratch = zeros(n);
    float *dl = zeros(n);
    ops->softmax_xent(cx, s.losses, dl, NULL, s.logits, tg, s.N, s.V, s.gs);
    fd_check("softmax_xent dlogits", s.logits, n, dl, xent_loss, &s);
    free(s.logits), free(s.losses), free(s.scratch), free(dl);
}

typedef struct {
    float *z, *losses, *scratch;
    const float *y;
    size_t N;
    int C;
    float gs;
} bce_st;

static double bce_loss(void *p) {
    bce_st *s = p;
    ops->bce_logits_loss(cx, s->losses, s->scratch, s->z, s->y, s->N, s->C, s->gs);
    return scaled_sum(s->losses, s->N, s->gs);
}

/* Saturated logits (+-30), a soft target, and an unlabelled row, whose gradient must be 0. */
static void grad_bce_logits_loss(void) {
    enum { N = 4, C = 3 };
    float z[N * C] = {0.7f, -1.3f, 2.2f, 30.0f, -30.0f, 0.1f, -0.4f, 1.9f, -2.6f, 1.1f, -0.2f, 0.45f};
    static const float y[N * C] = {1, 0, 0.3f, 0, 0, 1, NAN, 1, 0, 0, 1, 1};
    float losses[N], scratch[N * C], dl[N * C];
    bce_st s = {.z = z, .losses = losses, .scratch = scratch, .y = y, .N = N, .C = C, .gs = 0.5f};
    ops->bce_logits_loss(cx, losses, dl, z, y, N, C, s.gs);
    fd_check("bce_logits_loss dlogits", z, N * C, dl, bce_loss, &s);
}

/* ---- gather / scatter ---- */
typedef struct {
    float *inp, *out, *R;
    const int32_t *idx;
    int B, C;
} rows_st;

static double rows_loss(void *p) {
    rows_st *s = p;
    ops->gather_rows(cx, s->out, s->inp, s->idx, s->B, s->C);
    return dot_d(s->out, s->R, (size_t)s->B * s->C);
}

static void grad_rows(void) {
    static const int32_t idx[3] = {4, 1, 4};
    rows_st s = {.idx = idx, .B = 3, .C = 3};
    s.inp = fill(15, 80, -1, 1), s.out = zeros(9), s.R = fill(9, 81, -1, 1);
    float *d = zeros(15);
    ops->scatter_rows_add(cx, d, rt_xf(s.R), idx, s.B, s.C);
    fd_check("scatter_rows_add (gather bwd)", s.inp, 15, d, rows_loss, &s);
    free(s.inp), free(s.out), free(s.R), free(d);
}

/* ---- dropout ---- */
typedef struct {
    float *x, *out, *R;
    size_t n;
} drop_st;

static double drop_loss(void *p) {
    drop_st *s = p;
    ops->dropout_fwd(cx, s->out, s->x, s->n, 0.4f, 9, 2, NULL);
    return dot_d(s->out, s->R, s->n);
}

static void grad_dropout(void) {
    drop_st s = {.n = 64};
    s.x = fill(s.n, 90, -1, 1), s.out = zeros(s.n), s.R = fill(s.n, 91, -1, 1);
    float *dx = zeros(s.n);
    ops->dropout_bwd(cx, dx, s.R, s.n, 0.4f, 9, 2, NULL);
    fd_check("dropout_bwd", s.x, s.n, dx, drop_loss, &s);
    free(s.x), free(s.out), free(s.R), free(dx);
}

/* Dropout on a column block draws the whole matrix's bits (tensor-parallel FFN shards), and
 * as its own backward passes the FD check like dropout_fwd. */
typedef struct {
    float *x, *out, *R;
    size_t rows;
    int cols, total, offset;
} dcols_st;

static double dcols_loss(void *p) {
    dcols_st *s = p;
    ops->dropout_cols(cx, rt_xf(s->out), rt_xf(s->x), s->rows, s->cols, s->total, s->offset, 0.4f, 9, 5, NULL);
    return dot_d(s->out, s->R, s->rows * (size_t)s->cols);
}

static void grad_dropout_cols(void) {
    enum { ROWS = 5, TOTAL = 12, COLS = 5, OFFSET = 4 };
    float *full = fill(ROWS * TOTAL, 92, -1, 1), *full_out = zeros(ROWS * TOTAL);
    ops->dropout_fwd(cx, full_out, full, ROWS * TOTAL, 0.4f, 9, 5, NULL);
    dcols_st s = {.rows = ROWS, .cols = COLS, .total = TOTAL, .offset = OFFSET};
    s.x = zeros(ROWS * COLS), s.out = zeros(ROWS * COLS), s.R = fill(ROWS * COLS, 93, -1, 1);
    float *ref = zeros(ROWS * COLS);
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) {
            s.x[r * COLS + c] = full[r * TOTAL + OFFSET + c];
            ref[r * COLS + c] = full_out[r * TOTAL + OFFSET + c];
        }
    dcols_loss(&s);
    tz_check_close("dropout_cols = dropout_fwd's columns", s.out, ref, ROWS * COLS, 0.0f, 0.0f);
    float *inplace = dup(s.x, ROWS * COLS);
    ops->dropout_cols(cx, rt_xf(inplace), rt_xf(inplace), ROWS, COLS, TOTAL, OFFSET, 0.4f, 9, 5, NULL);
    tz_check_close("dropout_cols in place", inplace, ref, ROWS * COLS, 0.0f, 0.0f);
    float *dx = zeros(ROWS * COLS);
    ops->dropout_cols(cx, rt_xf(dx), rt_xf(s.R), ROWS, COLS, TOTAL, OFFSET, 0.4f, 9, 5, NULL);
    fd_check("dropout_cols (its own backward)", s.x, ROWS * COLS, dx, dcols_loss, &s);
    free(full), free(full_out), free(s.x), free(s.out), free(s.R), free(ref), free(inplace), free(dx);
}

int main(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 0, &be));
    if (!be) return tz_test_result("test_cpu_grad");
    ops = be->ops;
    cx = be->ctx;
    grad_layernorm();
    grad_rmsnorm();
    grad_activations();
    grad_gated_activations();
    grad_bias();
    grad_attention_self(0.0f, "", NULL);
    grad_attention_self(0.0f, " (GLM prefix)", (const int32_t[]){3, 1});
    grad_attention_self(0.3f, " (dropout 0.3)", NULL);
    grad_attention_cross();
    grad_relbias();
    grad_embedding();
    grad_softmax_xent();
    grad_bce_logits_loss();
    grad_rows();
    grad_dropout();
    grad_dropout_cols();
    rt_backend_free(be);
    return tz_test_result("test_cpu_grad");
}
