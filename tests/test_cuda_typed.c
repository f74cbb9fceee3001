/* Typed activations on CUDA (runtime/backend/rt_x.h): every op that takes rt_x handles, given 16-bit ones
 * on the GPU, against the CPU backend given fp32 handles (which test_cpu_typed holds to the CPU's
 * own 16-bit handles bit for bit). Each 16-bit output is the fp32 result rounded once, on either
 * side, so the two agree within the compute type's band (docs/architecture.md): two units of the type
 * relative (a value whose fp32 results straddle a rounding boundary rounds to neighbours), plus a
 * small absolute term for the sums' other order. fp32 outputs computed from 16-bit inputs (the
 * weight and bias gradients, dbias, norm statistics) are held to the fp32 GEMM tolerances of
 * test_cuda_ops, except linear_dact's bias gradient on cuBLASLt's path, which sums the stored
 * 16-bit dpre: there each column may differ by a rounding unit of the sum of its |dpre|.
 *
 * Covered: gemm with 16-bit A, B and C (transposes, padded leading dimensions, a strided batch,
 * beta); linear_fwd with each activation, with and without a bias, through cuBLASLt's epilogues
 * (the bias read from the weights' 16-bit copy) and through the backend's own composition (no
 * copy; an erf GELU; an out_f that is not a multiple of 8); linear_dact and linear_wgrad;
 * act_fwd/bwd, gated_act_fwd/bwd, dropout_cols (the same masks), bias_bwd; the norms' and the
 * fused residual step's 16-bit outputs, and their reading a 16-bit input (the residual sums and
 * the residual stream: the sum, res, the norms' input, the residual backward's sum; the branch
 * and its gradient, at C of 96, 37 and 776);
 * scatter_rows_add; attention over 16-bit q, k, v (views into one fused buffer), out, dout, dq,
 * dk, dv with a key mask, causal with dropout, and a position bias with its gradient, on the
 * materialized path and on the fused kernels (TZ_CUDA_ATTENTION=fused); xent_vocab and
 * scale_rows on 16-bit logits (the LM head's chunk); cuDNN's SDPA (TZ_CUDA_ATTENTION=cudnn) causal or not, with right
 * padding as lengths, T5's position bias and its gradient, cross-attention, and GLM's prefix. Exits
 * 77 (skipped) without CUDA or a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/rt_backend.h"
#include "runtime/base/rt_dtype.h"
#include "tests/testutil.h"

#ifndef TZ_USE_CUDA

int main(void) {
    printf("test_cuda_typed: skipped: built without CUDA\n");
    return 77;
}

#else

static rt_backend *cpu, *gpu;
static rt_dtype dt;
static float unit; /* two rounding steps of dt, relative */

#define ATOL 1e-5f      /* elementwise and row ops */
#define GEMM_ATOL 1e-4f /* sums in another order */

static void *alloc_on(rt_backend *be, size_t bytes) {
    void *p = NULL;
    rt_status st = rt_backend_alloc(be, bytes ? bytes : 4, "test buffer", &p);
    RT_CHECK(st == RT_OK, "%s", rt_error_message());
    return p;
}

/* An activation: c holds n floats on the CPU, g the same values as 16-bit ones (dt) on the GPU. */
typedef struct {
    float *c;
    void *g;
    size_t n;
} act;

static uint16_t to16(float v) { return dt == RT_BF16 ? rt_f32_to_bf16(v) : rt_f32_to_f16(v); }
static float from16(uint16_t h) { return dt == RT_BF16 ? rt_bf16_to_f32(h) : rt_f16_to_f32(h); }

static act act_new(size_t n, unsigned *seed, float scale) {
    float *h = rt_xmalloc(n * sizeof(float) + 4);
    uint16_t *h16 = rt_xmalloc(n * 2 + 4);
    for (size_t i = 0; i < n; i++) {
        h[i] = rt_round_to(dt, scale * tz_uniform(seed));
        h16[i] = to16(h[i]);
    }
    act a = {alloc_on(cpu, n * sizeof(float)), alloc_on(gpu, n * 2), n};
    rt_to_device(cpu, a.c, h, n * sizeof(float));
    rt_to_device(gpu, a.g, h16, n * 2);
    free(h);
    free(h16);
    return a;
}
static void act_free(act *a) {
    rt_free_device(cpu, a->c);
    rt_free_device(gpu, a->g);
}
static rt_x xc(const act *a) { return rt_xf(a->c); }
/* The GPU's values made the CPU's (values of dt already), to test the next op from the same inputs. */
static void act_sync(act *a) {
    float *h = rt_xmalloc(a->n * sizeof(float) + 4);
    uint16_t *h16 = rt_xmalloc(a->n * 2 + 4);
    rt_to_host(cpu, h, a->c, a->n * sizeof(float));
    for (size_t i = 0; i < a->n; i++) h16[i] = to16(h[i]);
    rt_to_device(gpu, a->g, h16, a->n * 2);
    free(h);
    free(h16);
}
static rt_x xg(const act *a) { return rt_x_of(a->g, dt); }

/* Plain floats on both (weights, statistics, parameter gradients). */
typedef struct {
    float *c, *g;
    size_t n;
} flt;

static flt flt_new(size_t n, unsigned *seed, float scale, float offset) {
    float *h = rt_xmalloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) h[i] = seed ? scale * tz_uniform(seed) + offset : 0.0f;
    flt f = {alloc_on(cpu, n * sizeof(float)), alloc_on(gpu, n * sizeof(float)), n};
    rt_to_device(cpu, f.c, h, n * sizeof(float));
    rt_to_device(gpu, f.g, h, n * sizeof(float));
    free(h);
    return f;
}
static void flt_free(flt *f) {
    rt_free_device(cpu, f->c);
    rt_free_device(gpu, f->g);
}

static void check_act(const char *what, const act *a, float atol, float rtol) {
    float *want = rt_xmalloc(a->n * sizeof(float) + 4), *got = rt_xmalloc(a->n * sizeof(float) + 4);
    uint16_t *h16 = rt_xmalloc(a->n * 2 + 4);
    rt_to_host(cpu, want, a->c, a->n * sizeof(float));
    rt_to_host(gpu, h16, a->g, a->n * 2);
    for (size_t i = 0; i < a->n; i++) got[i] = from16(h16[i]);
    char label[160];
    snprintf(label, sizeof label, "%s %s", rt_dtype_name(dt), what);
    tz_check_close(label, got, want, a->n, atol, rtol);
    free(want);
    free(got);
    free(h16);
}
static void check_flt(const char *what, const flt *f, float atol, float rtol) {
    float *want = rt_xmalloc(f->n * sizeof(float) + 4), *got = rt_xmalloc(f->n * sizeof(float) + 4);
    rt_to_host(cpu, want, f->c, f->n * sizeof(float));
    rt_to_host(gpu, got, f->g, f->n * sizeof(float));
    char label[160];
    snprintf(label, sizeof label, "%s %s", rt_dtype_name(dt), what);
    tz_check_close(label, got, want, f->n, atol, rtol);
    free(want);
    free(got);
}
/* The same 16-bit values on both (the dropout masks, the stored inputs an op passes through). */
static void check_act_bits(const char *what, const act *a) {
    float *want = rt_xmalloc(a->n * sizeof(float) + 4);
    uint16_t *h16 = rt_xmalloc(a->n * 2 + 4);
    rt_to_host(cpu, want, a->c, a->n * sizeof(float));
    rt_to_host(gpu, h16, a->g, a->n * 2);
    size_t bad = 0;
    for (size_t i = 0; i < a->n; i++) bad += rt_f32_bits(from16(h16[i])) != rt_f32_bits(want[i]);
    TZ_EXPECT(bad == 0, "%s %s: %zu of %zu values differ", rt_dtype_name(dt), what, bad, a->n);
    free(want);
    free(h16);
}

static void check_gemm(bool ta, bool tb, int batch, float beta) {
    const int M = 19, N = 40, K = 72;
    const int lda = (ta ? M : K) + 8, ldb = (tb ? K : N) + 8, ldc = N + 8;
    const size_t sa = (size_t)(ta ? K : M) * lda, sb = (size_t)(tb ? N : K) * ldb, sc = (size_t)M * ldc;
    unsigned seed = 7 + 3 * ta + 5 * tb + (unsigned)batch;
    act A = act_new(sa * batch, &seed, 1.0f), B = act_new(sb * batch, &seed, 1.0f),
        C = act_new(sc * batch, &seed, 1.0f);
    rt_gemm(cpu, ta, tb, M, N, K, 0.5f, xc(&A), lda, sa, xc(&B), ldb, sb, beta, xc(&C), ldc, sc, batch);
    rt_gemm(gpu, ta, tb, M, N, K, 0.5f, xg(&A), lda, sa, xg(&B), ldb, sb, beta, xg(&C), ldc, sc, batch);
    char what[96];
    snprintf(what, sizeof what, "gemm ta=%d tb=%d batch=%d beta=%g", ta, tb, batch, (double)beta);
    check_act(what, &C, GEMM_ATOL, unit);
    act_free(&A);
    act_free(&B);
    act_free(&C);
}

/* A linear layer whose weight and bias lie in a slab; with_copy: the GPU keeps the slab's 16-bit
 * copy (cuBLASLt's epilogues read the bias from it), else it composes the op itself. */
static void check_linear(const rt_act_kind *actk, bool bias, int out_f, bool with_copy) {
    const int N = 24, in = 64;
    unsigned seed = 31 + (unsigned)out_f + (actk ? 2u * *actk : 9u) + 50u * with_copy;
    const size_t nw = (size_t)out_f * in, slab_n = nw + 64 + (size_t)out_f;
    flt slab = flt_new(slab_n, &seed, 0.2f, 0.0f);
    float *Wc = slab.c, *Wg = slab.g, *bc = slab.c + nw + 64, *bg = slab.g + nw + 64; /* b 16-byte aligned */
    if (with_copy) TZ_EXPECT_OK(rt_weight_copy_set(gpu, slab.g, slab_n));
    act X = act_new((size_t)N * in, &seed, 1.0f), pre = act_new((size_t)N * out_f, &seed, 0.0f),
        out = act_new((size_t)N * out_f, &seed, 0.0f);
    rt_linear_fwd(cpu, actk ? xc(&out) : rt_xf(NULL), xc(&pre), xc(&X), Wc, bias ? bc : NULL, N, in, out_f, actk);
    rt_linear_fwd(gpu, actk ? xg(&out) : rt_xf(NULL), xg(&pre), xg(&X), Wg, bias ? bg : NULL, N, in, out_f, actk);
    char what[128];
    const char *how = with_copy ? "copy" : "no copy";
    /* cuBLASLt's epilogue adds the bias from the 16-bit copy: rounded, half a unit of the type at
     * most (the bias is at most 0.2 here) */
    const float atol = GEMM_ATOL + (with_copy && bias ? unit / 4 * 0.2f : 0.0f);
    snprintf(what, sizeof what, "linear_fwd act %d bias %d F %d (%s): pre", actk ? (int)*actk : -1, bias, out_f, how);
    check_act(what, &pre, atol, unit);
    if (actk) {
        snprintf(what, sizeof what, "linear_fwd act %d F %d (%s): out", (int)*actk, out_f, how);
        check_act(what, &out, 1.2f * atol, unit); /* through the activation, whose slope is under 1.2 */
        /* the backward through the activation from the CPU's pre on both: dpre = act'(pre) * (dY W2) */
        act_sync(&pre);
        act dY = act_new((size_t)N * in, &seed, 1.0f), dpre = act_new(pre.n, &seed, 0.0f);
        flt W2 = flt_new((size_t)in * out_f, &seed, 0.2f, 0.0f), db = flt_new(out_f, NULL, 0, 0);
        rt_linear_dact(cpu, xc(&dpre), db.c, xc(&dY), W2.c, xc(&pre), N, out_f, in, *actk);
        rt_linear_dact(gpu, xg(&dpre), db.g, xg(&dY), W2.g, xg(&pre), N, out_f, in, *actk);
        snprintf(what, sizeof what, "linear_dact act %d F %d: dpre", (int)*actk, out_f);
        check_act(what, &dpre, GEMM_ATOL, unit);
        /* the bias gradient: within a rounding unit of the column's sum of |dpre| (cuBLASLt's path
         * sums the stored values) */
        float *dp = rt_xmalloc(dpre.n * sizeof(float)), *want = rt_xmalloc(out_f * sizeof(float)),
              *got = rt_xmalloc(out_f * sizeof(float));
        rt_to_host(cpu, dp, dpre.c, dpre.n * sizeof(float));
        rt_to_host(cpu, want, db.c, out_f * sizeof(float));
        rt_to_host(gpu, got, db.g, out_f * sizeof(float));
        size_t bad = 0;
        for (int c = 0; c < out_f; c++) {
            double mag = 0;
            for (int n = 0; n < N; n++) mag += fabs(dp[(size_t)n * out_f + c]);
            bad += !(fabs((double)got[c] - want[c]) <= unit * mag + GEMM_ATOL);
        }
        TZ_EXPECT(bad == 0, "%s linear_dact act %d F %d: %zu of %d bias gradients outside the band", rt_dtype_name(dt),
                  (int)*actk, out_f, bad, out_f);
        free(dp), free(want), free(got);
        /* the weight gradient from the same 16-bit dY and X on both (the CPU's dpre): fp32 sums */
        act_sync(&dpre);
        flt dW = flt_new((size_t)out_f * in, &seed, 1.0f, 0.0f), dbw = flt_new(out_f, &seed, 1.0f, 0.0f);
        rt_linear_wgrad(cpu, dW.c, dbw.c, xc(&dpre), xc(&X), N, in, out_f);
        rt_linear_wgrad(gpu, dW.g, dbw.g, xg(&dpre), xg(&X), N, in, out_f);
        snprintf(what, sizeof what, "linear_wgrad F %d: dW", out_f);
        check_flt(what, &dW, GEMM_ATOL, 1e-4f);
        snprintf(what, sizeof what, "linear_wgrad F %d: db", out_f);
        check_flt(what, &dbw, GEMM_ATOL, 1e-4f);
        act_free(&dY), act_free(&dpre), flt_free(&W2), flt_free(&db), flt_free(&dW), flt_free(&dbw);
    }
    if (with_copy) TZ_EXPECT_OK(rt_weight_copy_set(gpu, NULL, 0));
    act_free(&X), act_free(&pre), act_free(&out), flt_free(&slab);
}

static void check_elementwise(void) {
    const size_t n = 3000;
    unsigned seed = 5;
    act x = act_new(n, &seed, 3.0f), g = act_new(n, &seed, 1.0f), dy = act_new(n, &seed, 1.0f);
    act y = act_new(n, &seed, 0.0f), y2 = act_new(n, &seed, 0.0f);
    for (int k = RT_ACT_GELU_TANH; k <= RT_ACT_TANH; k++) {
        char what[48];
        rt_act_fwd(cpu, (rt_act_kind)k, xc(&y), xc(&x), n);
        rt_act_fwd(gpu, (rt_act_kind)k, xg(&y), xg(&x), n);
        snprintf(what, sizeof what, "act_fwd kind %d", k);
        check_act(what, &y, ATOL, unit);
        rt_act_bwd(cpu, (rt_act_kind)k, xc(&y), xc(&x), xc(&dy), n);
        rt_act_bwd(gpu, (rt_act_kind)k, xg(&y), xg(&x), xg(&dy), n);
        snprintf(what, sizeof what, "act_bwd kind %d", k);
        check_act(what, &y, ATOL, unit);
        rt_gated_act_fwd(cpu, (rt_act_kind)k, xc(&y), xc(&x), xc(&g), n);
        rt_gated_act_fwd(gpu, (rt_act_kind)k, xg(&y), xg(&x), xg(&g), n);
        snprintf(what, sizeof what, "gated_act_fwd kind %d", k);
        check_act(what, &y, ATOL, unit);
        rt_gated_act_bwd(cpu, (rt_act_kind)k, xc(&y), xc(&y2), xc(&x), xc(&g), xc(&dy), n);
        rt_gated_act_bwd(gpu, (rt_act_kind)k, xg(&y), xg(&y2), xg(&x), xg(&g), xg(&dy), n);
        snprintf(what, sizeof what, "gated_act_bwd kind %d: dgate", k);
        check_act(what, &y, ATOL, unit);
        snprintf(what, sizeof what, "gated_act_bwd kind %d: dlin", k);
        check_act(what, &y2, ATOL, unit);
    }
    /* views one value in, so no 16-byte packs (the kernels walk one value at a time), then from
     * 8 values in with a tail of 5: the packed walk's two other paths */
    for (size_t at = 1; at <= 8; at += 7) {
        rt_act_fwd(cpu, RT_ACT_GELU_TANH, rt_x_at(xc(&y), at), rt_x_at(xc(&x), at), n - 3 - at);
        rt_act_fwd(gpu, RT_ACT_GELU_TANH, rt_x_at(xg(&y), at), rt_x_at(xg(&x), at), n - 3 - at);
        check_act(at == 1 ? "act_fwd, unaligned view" : "act_fwd, view with a tail", &y, ATOL, unit);
    }
    /* a (rows, 40) column shard of a (rows, 120) matrix at column 40, in place: the same masks,
     * and a kept value times 1/(1-p) rounds the same on both */
    const size_t rows = n / 40;
    rt_dropout_cols(cpu, xc(&x), xc(&x), rows, 40, 120, 40, 0.3f, 11, 2, NULL);
    rt_dropout_cols(gpu, xg(&x), xg(&x), rows, 40, 120, 40, 0.3f, 11, 2, NULL);
    check_act_bits("dropout_cols", &x);
    flt db = flt_new(40, NULL, 0, 0);
    rt_bias_bwd(cpu, db.c, xc(&dy), rows, 40);
    rt_bias_bwd(gpu, db.g, xg(&dy), rows, 40);
    check_flt("bias_bwd", &db, GEMM_ATOL, 1e-4f);
    act_free(&x), act_free(&g), act_free(&dy), act_free(&y), act_free(&y2), flt_free(&db);
}

/* The LM head's chunk: xent_vocab's three phases over 16-bit logits with the padding columns
 * masked, dL/dlogits written over them, then scale_rows; the statistics and losses (fp32, from
 * the same 16-bit values) within the fp32 tolerances, dL/dlogits within the band. */
static void check_xent(void) {
    enum { N = 5, V = 2500 };
    unsigned seed = 9;
    act x = act_new((size_t)N * V, &seed, 8.0f);
    float mask_h[V] = {0};
    for (int j = V - 40; j < V; j++) mask_h[j] = -1e30f;
    const int32_t t_h[N] = {0, 1500, -100, 2459, 1023};
    const float w_h[N] = {0.5f, 3.0f, -1.25f, 1.0f, 0.1f};
    flt mask = flt_new(V, NULL, 0, 0), stats = flt_new(3 * N, NULL, 0, 0), loss = flt_new(N, NULL, 0, 0);
    flt w = flt_new(N, NULL, 0, 0);
    int32_t *t_c = alloc_on(cpu, sizeof t_h), *t_g = alloc_on(gpu, sizeof t_h);
    for (int side = 0; side < 2; side++) {
        rt_backend *be = side ? gpu : cpu;
        rt_to_device(be, side ? mask.g : mask.c, mask_h, sizeof mask_h);
        rt_to_device(be, side ? w.g : w.c, w_h, sizeof w_h);
        rt_to_device(be, side ? t_g : t_c, t_h, sizeof t_h);
        const rt_x logits = side ? xg(&x) : xc(&x);
        for (int ph = 0; ph < 3; ph++)
            rt_xent_vocab(be, ph, side ? stats.g : stats.c, side ? loss.g : loss.c, logits, logits,
                          side ? mask.g : mask.c, side ? t_g : t_c, N, V, 0, 0.25f);
        rt_scale_rows(be, logits, side ? w.g : w.c, N, V);
    }
    check_flt("xent_vocab statistics", &stats, GEMM_ATOL, 1e-5f);
    check_flt("xent_vocab losses", &loss, GEMM_ATOL, 1e-5f);
    check_act("xent_vocab dlogits, scale_rows", &x, ATOL, unit);
    rt_free_device(cpu, t_c), rt_free_device(gpu, t_g);
    act_free(&x), flt_free(&mask), flt_free(&stats), flt_free(&loss), flt_free(&w);
}

/* C: 96 and 776 walk whole packs (776: lanes with three or four), 37 a tail and rows of which
 * only every eighth starts 16-byte aligned (cuda_norm_rows.h, cuda_residual.cu). */
static void check_norms(int C) {
    const int N = 37;
    printf("test_cuda_typed: %s norms and residual step, C=%d\n", rt_dtype_name(dt), C);
    unsigned seed = 3;
    act y = act_new((size_t)N * C, &seed, 0.0f);
    flt x = flt_new((size_t)N * C, &seed, 2.0f, 0.0f), w = flt_new(C, &seed, 0.1f, 1.0f),
        b = flt_new(C, &seed, 0.1f, 0);
    /* a typed stack's residual sums: 16-bit on the GPU (the CPU's side holds their values) */
    act res = act_new((size_t)N * C, &seed, 1.0f), sum = act_new((size_t)N * C, &seed, 0.0f);
    flt mean = flt_new(N, NULL, 0, 0), rstd = flt_new(N, NULL, 0, 0);
    rt_layernorm_fwd(cpu, xc(&y), mean.c, rstd.c, rt_xf(x.c), w.c, b.c, N, C, 1e-5f);
    rt_layernorm_fwd(gpu, xg(&y), mean.g, rstd.g, rt_xf(x.g), w.g, b.g, N, C, 1e-5f);
    check_act("layernorm_fwd", &y, ATOL, unit);
    check_flt("layernorm_fwd's rstd", &rstd, ATOL, 1e-4f);
    rt_rmsnorm_fwd(cpu, xc(&y), rstd.c, rt_xf(x.c), w.c, N, C, 1e-6f);
    rt_rmsnorm_fwd(gpu, xg(&y), rstd.g, rt_xf(x.g), w.g, N, C, 1e-6f);
    check_act("rmsnorm_fwd", &y, ATOL, unit);
    /* a 16-bit input (a residual sum) */
    rt_layernorm_fwd(cpu, xc(&y), mean.c, rstd.c, xc(&res), w.c, b.c, N, C, 1e-5f);
    rt_layernorm_fwd(gpu, xg(&y), mean.g, rstd.g, xg(&res), w.g, b.g, N, C, 1e-5f);
    check_act("layernorm_fwd of a 16-bit input", &y, ATOL, unit);
    check_flt("layernorm_fwd of a 16-bit input: rstd", &rstd, ATOL, 1e-4f);
    rt_rmsnorm_fwd(cpu, xc(&y), rstd.c, xc(&res), w.c, N, C, 1e-6f);
    rt_rmsnorm_fwd(gpu, xg(&y), rstd.g, xg(&res), w.g, N, C, 1e-6f);
    check_act("rmsnorm_fwd of a 16-bit input", &y, ATOL, unit);
    /* a branch (a row-parallel linear's output at tp = 1) and its gradient: 16-bit on the GPU */
    act branch = act_new((size_t)N * C, &seed, 2.0f);
    for (int rms = 0; rms < 2; rms++) {
        rt_residual_desc d = {
            .N = N, .C = C, .bias = NULL, .rms = rms, .eps = 1e-5f, .dropout_p = 0.1f, .seed = 4, .stream = 6};
        d.weight = w.c, d.bias = rms ? NULL : b.c;
        rt_residual_fwd(cpu, &d, xc(&sum), xc(&y), mean.c, rstd.c, xc(&res), xc(&branch));
        d.weight = w.g, d.bias = rms ? NULL : b.g;
        rt_residual_fwd(gpu, &d, xg(&sum), xg(&y), mean.g, rstd.g, xg(&res), xg(&branch));
        check_act_bits(rms ? "residual_fwd (RMSNorm): 16-bit sum" : "residual_fwd (LayerNorm): 16-bit sum", &sum);
        check_act(rms ? "residual_fwd (RMSNorm): out" : "residual_fwd (LayerNorm): out", &y, ATOL, unit);
        /* its backward reads the 16-bit sum and a 16-bit dout (a sublayer's input gradient at tp = 1) */
        act dout = act_new((size_t)N * C, &seed, 1.0f);
        flt dres = flt_new((size_t)N * C, &seed, 0.5f, 0.0f);
        act dbranch = act_new((size_t)N * C, &seed, 0.0f);
        flt dw = flt_new(C, NULL, 0, 0), db = flt_new(C, NULL, 0, 0);
        rt_to_device(gpu, mean.g, mean.c, N * sizeof(float)); /* the CPU's statistics on both */
        rt_to_device(gpu, rstd.g, rstd.c, N * sizeof(float));
        d.weight = w.c, d.bias = rms ? NULL : b.c;
        rt_residual_bwd(cpu, &d, dres.c, xc(&dbranch), dw.c, rms ? NULL : db.c, xc(&dout), xc(&sum), mean.c, rstd.c);
        d.weight = w.g, d.bias = rms ? NULL : b.g;
        rt_residual_bwd(gpu, &d, dres.g, xg(&dbranch), dw.g, rms ? NULL : db.g, xg(&dout), xg(&sum), mean.g, rstd.g);
        check_flt(rms ? "residual_bwd (RMSNorm) of a 16-bit sum: dres"
                      : "residual_bwd (LayerNorm) of a 16-bit sum: dres",
                  &dres, ATOL, unit);
        check_act(rms ? "residual_bwd (RMSNorm): 16-bit dbranch" : "residual_bwd (LayerNorm): 16-bit dbranch", &dbranch,
                  ATOL, unit);
        check_flt(rms ? "residual_bwd (RMSNorm): dweight" : "residual_bwd (LayerNorm): dweight", &dw, 1e-4f, 1e-4f);
        act_free(&dout), flt_free(&dres), act_free(&dbranch), flt_free(&dw), flt_free(&db);
    }
    act_free(&branch);
    /* the norms' backward alone from a 16-bit dout of a 16-bit input (the CPU's statistics on both),
     * then the add of that gradient and an fp32 one into a 16-bit out over it (a post-norm block's
     * dL/d(input); LoRA's dropped part) */
    for (int rms = 0; rms < 2; rms++) {
        act g = act_new((size_t)N * C, &seed, 1.0f);
        flt dx = flt_new((size_t)N * C, &seed, 0.5f, 0.0f), dw = flt_new(C, NULL, 0, 0), db = flt_new(C, NULL, 0, 0);
        flt other = flt_new((size_t)N * C, &seed, 1.0f, 0.0f);
        rt_layernorm_fwd(cpu, xc(&y), mean.c, rstd.c, xc(&res), w.c, b.c, N, C, 1e-5f);
        rt_to_device(gpu, mean.g, mean.c, N * sizeof(float));
        rt_to_device(gpu, rstd.g, rstd.c, N * sizeof(float));
        if (rms) {
            rt_rmsnorm_bwd(cpu, dx.c, dw.c, xc(&g), xc(&res), w.c, rstd.c, N, C);
            rt_rmsnorm_bwd(gpu, dx.g, dw.g, xg(&g), xg(&res), w.g, rstd.g, N, C);
        } else {
            rt_layernorm_bwd(cpu, dx.c, dw.c, db.c, xc(&g), xc(&res), w.c, mean.c, rstd.c, N, C);
            rt_layernorm_bwd(gpu, dx.g, dw.g, db.g, xg(&g), xg(&res), w.g, mean.g, rstd.g, N, C);
            check_flt("layernorm_bwd from a 16-bit dout: dbias", &db, 1e-4f, 1e-4f);
        }
        check_flt(rms ? "rmsnorm_bwd from a 16-bit dout: dinp" : "layernorm_bwd from a 16-bit dout: dinp", &dx, ATOL,
                  unit);
        check_flt(rms ? "rmsnorm_bwd from a 16-bit dout: dweight" : "layernorm_bwd from a 16-bit dout: dweight", &dw,
                  1e-4f, 1e-4f);
        rt_add(cpu, xc(&g), xc(&g), rt_xf(other.c), (size_t)N * C);
        rt_add(gpu, xg(&g), xg(&g), rt_xf(other.g), (size_t)N * C);
        check_act("add of a 16-bit and an fp32 handle into the 16-bit one", &g, ATOL, unit);
        act_free(&g), flt_free(&dx), flt_free(&dw), flt_free(&db), flt_free(&other);
    }
    flt rows = flt_new((size_t)5 * C, NULL, 0, 0);
    const int32_t idx_h[4] = {3, 0, 3, 1};
    int32_t *idx_c = alloc_on(cpu, sizeof idx_h), *idx_g = alloc_on(gpu, sizeof idx_h);
    rt_to_device(cpu, idx_c, idx_h, sizeof idx_h);
    rt_to_device(gpu, idx_g, idx_h, sizeof idx_h);
    act_sync(&y);
    rt_scatter_rows_add(cpu, rows.c, xc(&y), idx_c, 4, C);
    rt_scatter_rows_add(gpu, rows.g, xg(&y), idx_g, 4, C);
    check_flt("scatter_rows_add", &rows, 0, 0); /* the same adds in the same order */
    rt_free_device(cpu, idx_c), rt_free_device(gpu, idx_g);
    act_free(&y), flt_free(&x), flt_free(&w), flt_free(&b), act_free(&res), act_free(&sum), flt_free(&mean);
    flt_free(&rstd), flt_free(&rows);
}

/* q, k, v as views into one fused (B T, 3 C) buffer; out, dout (B T, C); probabilities at dt. */
static void check_attention(int variant) {
    enum { B = 2, NH = 3, T = 21, HS = 16, C = NH * HS };
    unsigned seed = 40 + (unsigned)variant;
    act qkv = act_new((size_t)B * T * 3 * C, &seed, 1.0f), dout = act_new((size_t)B * T * C, &seed, 1.0f);
    act out = act_new((size_t)B * T * C, &seed, 0.0f), dqkv = act_new((size_t)B * T * 3 * C, &seed, 0.0f);
    float km_h[B * T] = {0};
    for (int j = 15; j < T; j++) km_h[T + j] = -INFINITY; /* row 1's last keys are padding */
    flt km = flt_new(B * T, NULL, 0, 0), bias = flt_new((size_t)NH * T * T, &seed, 1.0f, 0.0f);
    flt dbias = flt_new((size_t)NH * T * T, NULL, 0, 0);
    rt_to_device(cpu, km.c, km_h, sizeof km_h);
    rt_to_device(gpu, km.g, km_h, sizeof km_h);
    const size_t np = (size_t)B * NH * T * T;
    void *pc = alloc_on(cpu, np * 2), *pg = alloc_on(gpu, np * 2);
    rt_attn_desc d = {.B = B,
                      .NH = NH,
                      .Tq = T,
                      .Tk = T,
                      .HS = HS,
                      .ldq = 3 * C,
                      .ldk = 3 * C,
                      .ldv = 3 * C,
                      .ldo = C,
                      .scale = 0.25f,
                      .probs_dtype = dt};
    if (variant == 1) d.causal = true, d.dropout_p = 0.2f, d.seed = 3, d.stream = 8;
    for (int side = 0; side < 2; side++) {
        rt_backend *be = side ? gpu : cpu;
        rt_x (*X)(const act *) = side ? xg : xc;
        d.key_mask = variant == 0 ? (side ? km.g : km.c) : NULL;
        d.bias = variant == 2 ? (side ? bias.g : bias.c) : NULL;
        void *probs = side ? pg : pc;
        rt_attention_fwd(be, &d, X(&out), probs, X(&qkv), rt_x_at(X(&qkv), C), rt_x_at(X(&qkv), 2 * C));
        rt_attention_bwd(be, &d, X(&dqkv), rt_x_at(X(&dqkv), C), rt_x_at(X(&dqkv), 2 * C),
                         variant == 2 ? (side ? dbias.g : dbias.c) : NULL, X(&dout), probs, X(&qkv),
                         rt_x_at(X(&qkv), C), rt_x_at(X(&qkv), 2 * C));
    }
    char what[48];
    snprintf(what, sizeof what, "attention variant %d: out", variant);
    check_act(what, &out, GEMM_ATOL, 2 * unit); /* a probability may round to its neighbour, then out */
    snprintf(what, sizeof what, "attention variant %d: dqkv", variant);
    check_act(what, &dqkv, GEMM_ATOL, 2 * unit);
    if (variant == 2) check_flt("attention's dbias", &dbias, GEMM_ATOL, unit);
    rt_free_device(cpu, pc), rt_free_device(gpu, pg);
    act_free(&qkv), act_free(&dout), act_free(&out), act_free(&dqkv), flt_free(&km), flt_free(&bias);
    flt_free(&dbias);
}

/* One call for cuDNN's SDPA: Tq queries over Tk keys; padded: the last batch row's last 7 keys are
 * padding (the CPU reads the mask, cuDNN the lengths); bias: T5's position bias (NH, Tq, Tk) and its
 * gradient; prefix: GLM's, per batch row (with causal); scale 0: 1/sqrt(HS). Self-attention reads
 * q, k and v in one fused (B T, 3 C) buffer; cross-attention (Tq != Tk) q from (B Tq, C) and k, v
 * from one (B Tk, 2 C) buffer. */
typedef struct {
    int B, NH, Tq, Tk, HS;
    bool causal, padded, bias, prefix;
    float scale;
    bool left; /* padded on the left instead (the first 7 keys): cuDNN takes the shape, not the call */
} sdpa_case;

/* cuDNN's SDPA (TZ_CUDA_ATTENTION=cudnn, cuda_sdpa_path.cu) on 16-bit activations without dropout:
 * out, dq, dk and dv against the CPU's attention within the band above, dbias within it after one
 * more rounding (cuDNN writes the bias gradient at the compute type before it is added in fp32), and
 * proof that cuDNN ran: its kept buffer starts with a copy of out (what its backward reads,
 * cuda_sdpa_plan.h), which the materialized path would have filled with probabilities. */
static void check_attention_cudnn(rt_backend *sdpa, sdpa_case k) {
    const int B = k.B, NH = k.NH, Tq = k.Tq, Tk = k.Tk, HS = k.HS, C = NH * HS;
    const bool cross = Tq != Tk;
    unsigned seed = 70 + (unsigned)(Tq * 3 + Tk);
    const size_t nq = (size_t)B * Tq * (cross ? C : 3 * C), nkv = cross ? (size_t)B * Tk * 2 * C : 0;
    const size_t no = (size_t)B * Tq * C;
    act xq = act_new(nq, &seed, 1.0f), xkv = act_new(nkv, &seed, 1.0f), dout = act_new(no, &seed, 1.0f);
    act out = act_new(no, &seed, 0.0f), dxq = act_new(nq, &seed, 0.0f), dxkv = act_new(nkv, &seed, 0.0f);
    const size_t ld_q = cross ? (size_t)C : (size_t)3 * C, ld_kv = cross ? (size_t)2 * C : (size_t)3 * C;
    const rt_attn_desc d = {.B = B,
                            .NH = NH,
                            .Tq = Tq,
                            .Tk = Tk,
                            .HS = HS,
                            .ldq = ld_q,
                            .ldk = ld_kv,
                            .ldv = ld_kv,
                            .ldo = (size_t)C,
                            .scale = k.scale > 0 ? k.scale : 1.0f / sqrtf((float)HS),
                            .causal = k.causal,
                            .probs_dtype = dt};
    float *km_h = rt_xmalloc((size_t)B * Tk * sizeof(float));
    int32_t *len_h = rt_xmalloc((size_t)B * sizeof(int32_t)), *prefix_h = rt_xmalloc((size_t)B * sizeof(int32_t));
    for (int b = 0; b < B; b++) {
        len_h[b] = b == B - 1 ? Tk - 7 : Tk;
        prefix_h[b] = (int32_t)((size_t)b * 37 % (size_t)(Tk + 1)); /* 0, 37, ...: none, some, all */
        for (int j = 0; j < Tk; j++) {
            const bool masked = k.left ? b == B - 1 && j < 7 : j >= len_h[b];
            km_h[(size_t)b * Tk + j] = masked ? -INFINITY : 0.0f;
        }
    }
    flt km = flt_new((size_t)B * Tk, NULL, 0, 0), bias = flt_new((size_t)NH * Tq * Tk, &seed, 1.0f, 0.0f);
    flt dbias = flt_new((size_t)NH * Tq * Tk, NULL, 0, 0);
    rt_to_device(cpu, km.c, km_h, (size_t)B * Tk * sizeof(float));
    rt_to_device(gpu, km.g, km_h, (size_t)B * Tk * sizeof(float));
    int32_t *len_g = alloc_on(gpu, (size_t)B * sizeof(int32_t));
    int32_t *prefix_c = alloc_on(cpu, (size_t)B * sizeof(int32_t)),
            *prefix_g = alloc_on(gpu, (size_t)B * sizeof(int32_t));
    rt_to_device(gpu, len_g, len_h, (size_t)B * sizeof(int32_t));
    rt_to_device(cpu, prefix_c, prefix_h, (size_t)B * sizeof(int32_t));
    rt_to_device(gpu, prefix_g, prefix_h, (size_t)B * sizeof(int32_t));
    free(km_h), free(len_h), free(prefix_h);
    void *pc = alloc_on(cpu, rt_attn_kept_bytes(cpu, &d)), *pg = alloc_on(gpu, rt_attn_kept_bytes(sdpa, &d));
    for (int side = 0; side < 2; side++) {
        rt_backend *be = side ? sdpa : cpu;
        rt_x (*X)(const act *) = side ? xg : xc;
        void *probs = side ? pg : pc;
        rt_attn_desc ds = d;
        if (k.padded) ds.key_mask = side ? km.g : km.c, ds.key_len = side && !k.left ? len_g : NULL;
        if (k.bias) ds.bias = side ? bias.g : bias.c;
        if (k.prefix) ds.prefix = side ? prefix_g : prefix_c;
        const rt_x q = X(&xq), kk = cross ? X(&xkv) : rt_x_at(X(&xq), C),
                   v = rt_x_at(cross ? X(&xkv) : X(&xq), cross ? C : 2 * C);
        const rt_x dq = X(&dxq), dk = cross ? X(&dxkv) : rt_x_at(X(&dxq), C),
                   dv = rt_x_at(cross ? X(&dxkv) : X(&dxq), cross ? C : 2 * C);
        rt_attention_fwd(be, &ds, X(&out), probs, q, kk, v);
        rt_attention_bwd(be, &ds, dq, dk, dv, k.bias ? (side ? dbias.g : dbias.c) : NULL, X(&dout), probs, q, kk, v);
    }
    rt_sync(sdpa); /* its stream is not the one the checks below read on */
    char name[96], what[128];
    snprintf(name, sizeof name, "cuDNN SDPA %dx%dx%dx%dx%d%s%s%s%s", B, NH, Tq, Tk, HS, k.causal ? " causal" : "",
             k.left     ? " left-padded (recomputed)"
             : k.padded ? " padded"
                        : "",
             k.bias ? " bias" : "", k.prefix ? " prefix" : "");
    snprintf(what, sizeof what, "%s: out", name);
    check_act(what, &out, GEMM_ATOL, 2 * unit);
    snprintf(what, sizeof what, "%s: dq%s", name, cross ? "" : "kv");
    check_act(what, &dxq, GEMM_ATOL, 2 * unit);
    if (cross) {
        snprintf(what, sizeof what, "%s: dkv", name);
        check_act(what, &dxkv, GEMM_ATOL, 2 * unit);
    }
    if (k.bias) {
        snprintf(what, sizeof what, "%s: dbias", name);
        check_flt(what, &dbias, GEMM_ATOL, 2 * unit);
    }
    uint16_t *kept = rt_xmalloc(no * 2), *got = rt_xmalloc(no * 2);
    rt_to_host(gpu, kept, pg, no * 2);
    rt_to_host(gpu, got, out.g, no * 2);
    if (k.left) /* the materialized path ran in a buffer sized for cuDNN: it kept nothing there */
        TZ_EXPECT(rt_attn_kept_bytes(sdpa, &d) < (size_t)B * NH * Tq * Tk * 2, "%s: laid out the probabilities", name);
    else
        TZ_EXPECT(memcmp(kept, got, no * 2) == 0, "%s: its kept buffer holds no copy of out: it did not run", name);
    free(kept), free(got);
    rt_free_device(cpu, pc), rt_free_device(gpu, pg), rt_free_device(gpu, len_g);
    rt_free_device(cpu, prefix_c), rt_free_device(gpu, prefix_g);
    act_free(&xq), act_free(&xkv), act_free(&dout), act_free(&out), act_free(&dxq), act_free(&dxkv);
    flt_free(&km), flt_free(&bias), flt_free(&dbias);
}

/* A backend with TZ_CUDA_ATTENTION=attention (cudnn: cuDNN's SDPA; fused: cuda_flash.cu), or NULL
 * (said) where this build or machine has none. */
static rt_backend *attention_backend(const char *attention) {
    setenv("TZ_CUDA_ATTENTION", attention, 1);
    rt_backend *be = NULL;
    rt_status st = rt_backend_init("cuda:0", 0, &be);
    unsetenv("TZ_CUDA_ATTENTION");
    if (st == RT_ERR_UNSUPPORTED) {
        printf("test_cuda_typed: TZ_CUDA_ATTENTION=%s not checked: %s\n", attention, rt_error_message());
        return NULL;
    }
    TZ_EXPECT_OK(st);
    return st == RT_OK ? be : NULL;
}

/* The attention cases on the fused kernels (TZ_CUDA_ATTENTION=fused), whose tiles read and write
 * the 16-bit handles: proof that they run is the two floats a query row keeps. */
static void check_attention_fused(rt_backend *fused) {
    const rt_attn_desc probe = {.B = 2, .NH = 3, .Tq = 21, .Tk = 21, .HS = 16, .scale = 0.25f, .probs_dtype = dt};
    TZ_EXPECT(fused->typed_acts && rt_attn_kept_row_bytes(fused, &probe) == 2 * sizeof(float),
              "%s: the fused kernels take the attention cases on 16-bit handles", rt_dtype_name(dt));
    rt_backend *plain = gpu;
    gpu = fused; /* check_attention's GPU side */
    for (int v = 0; v < 3; v++) check_attention(v);
    gpu = plain;
}

int main(void) {
    rt_status st = rt_backend_init("cuda:0", 0, &gpu);
    if (st == RT_ERR_UNSUPPORTED) {
        printf("test_cuda_typed: skipped: no CUDA device\n");
        fprintf(stderr, "test_cuda_typed: %s\n", rt_error_message());
        return 77;
    }
    TZ_EXPECT_OK(st);
    if (st != RT_OK) return tz_test_result("test_cuda_typed");
    TZ_EXPECT_OK(rt_backend_init("cpu", 0, &cpu));
    TZ_EXPECT(gpu->typed_acts, "the CUDA backend takes 16-bit activation handles");
    rt_backend *sdpa = attention_backend("cudnn"), *fused = attention_backend("fused");
    const rt_dtype types[2] = {RT_BF16, RT_F16};
    for (int t = 0; t < 2; t++) {
        dt = types[t];
        unit = dt == RT_BF16 ? 1.0f / 128 : 1.0f / 1024;
        if (rt_set_precision(gpu, dt) != RT_OK) {
            printf("test_cuda_typed: %s skipped: %s\n", rt_dtype_name(dt), rt_error_message());
            continue;
        }
        TZ_EXPECT_OK(rt_set_precision(cpu, dt));
        for (int tr = 0; tr < 4; tr++) check_gemm(tr & 1, tr >> 1, 1, 0.0f);
        check_gemm(false, true, 3, 0.0f);
        check_gemm(true, false, 2, 0.5f);
        const rt_act_kind acts[4] = {RT_ACT_GELU_TANH, RT_ACT_GELU_ERF, RT_ACT_RELU, RT_ACT_TANH};
        for (int copy = 0; copy < 2; copy++) {
            for (int a = 0; a < 4; a++) check_linear(&acts[a], true, 96, copy);
            check_linear(&acts[0], true, 100, copy); /* out_f not a multiple of 8: composed */
            check_linear(NULL, true, 96, copy);
            check_linear(NULL, false, 96, copy);
        }
        check_elementwise();
        const int widths[3] = {96, 37, 776};
        for (int k = 0; k < 3; k++) check_norms(widths[k]);
        check_xent();
        for (int v = 0; v < 3; v++) check_attention(v);
        if (fused && rt_set_precision(fused, dt) == RT_OK) check_attention_fused(fused);
        if (sdpa && rt_set_precision(sdpa, dt) == RT_OK) {
            const sdpa_case cases[] = {
                {2, 3, 70, 70, 64, .causal = true},                               /* GPT-2's heads, two key tiles */
                {2, 4, 128, 128, 32, .causal = false},                            /* an encoder without padding */
                {2, 2, 40, 40, 128, .causal = false},                             /* T5-3B's head size */
                {1, 2, 1024, 1024, 64, .causal = true},                           /* a long causal row */
                {3, 4, 48, 48, 64, .padded = true},                               /* BERT's padding as lengths */
                {2, 3, 70, 70, 64, .causal = true, .padded = true},               /* GPT-2 classification's */
                {2, 4, 48, 48, 64, .padded = true, .bias = true, .scale = 1.0f},  /* T5's encoder */
                {2, 4, 40, 40, 64, .causal = true, .bias = true, .scale = 1.0f},  /* T5's decoder */
                {3, 4, 24, 48, 64, .padded = true, .scale = 1.0f},                /* T5's cross-attention */
                {3, 2, 64, 64, 64, .causal = true, .prefix = true},               /* GLM's prefix */
                {2, 3, 96, 96, 64, .causal = true, .padded = true, .left = true}, /* left padding: recomputed */
            };
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) check_attention_cudnn(sdpa, cases[c]);
        }
    }
    rt_backend_free(sdpa);
    rt_backend_free(fused);
    rt_backend_free(cpu);
    rt_backend_free(gpu);
    return tz_test_result("test_cuda_typed");
}

#endif
