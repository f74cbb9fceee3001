/* CPU backend forward kernels against naive double-precision references written here:
 * gemm (all transposes, padded strides, batch, beta=1), LayerNorm, RMSNorm, activations,
 * attention (causal + key mask + bias on a fused qkv buffer, fully masked rows, dropout),
 * embedding over a vocab shard, softmax cross-entropy (ignore -100, aliasing, large
 * logits), AdamW over 3 steps against the PyTorch formula, the rows of dropout uniforms (the
 * CPU's, and the CUDA kernels' block-at-a-time walk) against rt_rng_uniform, dropout, sumsq,
 * rows, the
 * device-string dispatch, and that sizes big enough to run in parallel give the same bits
 * with 1 and 3 threads. Gradients are checked in test_cpu_grad.c. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/cpu/cpu_internal.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/base/rt_rng.h"
#include "tests/testutil.h"

static const rt_backend_ops *ops;
static void *cx;

static float *fill(size_t n, uint64_t stream, float lo, float hi) {
    float *x = rt_xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rt_rng_uniform(1234, stream, i);
    return x;
}

static float *zeros(size_t n) { return rt_xcalloc(n, sizeof(float)); }

static float *dup_f(const float *x, size_t n) {
    float *y = rt_xmalloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* double results rounded to float for tz_check_close */
static float *to_f(const double *d, size_t n) {
    float *f = rt_xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = (float)d[i];
    return f;
}

static void check_d(const char *what, const float *got, const double *ref, size_t n, float atol, float rtol) {
    float *r = to_f(ref, n);
    tz_check_close(what, got, r, n, atol, rtol);
    free(r);
}

static void test_gemm(void) {
    const int M = 5, N = 7, K = 3, batch = 2;
    for (int ta = 0; ta < 2; ta++) {
        for (int tb = 0; tb < 2; tb++) {
            int lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 1, ldc = N + 3;
            size_t sa = (size_t)(ta ? K : M) * lda + 5, sb = (size_t)(tb ? N : K) * ldb + 1, sc = (size_t)M * ldc + 2;
            float *A = fill(sa * batch, 10, -1, 1), *B = fill(sb * batch, 11, -1, 1);
            float *C = fill(sc * batch, 12, -1, 1);
            float *C0 = rt_xmalloc(sc * batch * sizeof(float));
            memcpy(C0, C, sc * batch * sizeof(float));
            for (int pass = 0; pass < 2; pass++) {
                float alpha = 0.7f, beta = pass ? 1.0f : 0.0f;
                if (pass) memcpy(C, C0, sc * batch * sizeof(float));
                ops->gemm(cx, ta, tb, M, N, K, alpha, rt_xf(A), lda, sa, rt_xf(B), ldb, sb, beta, rt_xf(C), ldc, sc,
                          batch);
                double *ref = rt_xcalloc(sc * batch, sizeof(double));
                for (size_t i = 0; i < sc * batch; i++) ref[i] = C0[i]; /* padding untouched */
                for (int b = 0; b < batch; b++)
                    for (int m = 0; m < M; m++)
                        for (int n = 0; n < N; n++) {
                            double s = 0;
                            for (int k = 0; k < K; k++) {
                                double a = ta ? A[b * sa + (size_t)k * lda + m] : A[b * sa + (size_t)m * lda + k];
                                double bb = tb ? B[b * sb + (size_t)n * ldb + k] : B[b * sb + (size_t)k * ldb + n];
                                s += a * bb;
                            }
                            size_t ci = b * sc + (size_t)m * ldc + n;
                            ref[ci] = alpha * s + beta * C0[ci];
                        }
                char what[64];
                snprintf(what, sizeof what, "gemm ta=%d tb=%d beta=%g", ta, tb, (double)beta);
                check_d(what, C, ref, sc * batch, 1e-6f, 1e-5f);
                free(ref);
            }
            free(A), free(B), free(C), free(C0);
        }
    }
}

static void test_layernorm(void) {
    const size_t N = 6;
    const int C = 37;
    float *x = fill(N * C, 20, 2.0f, 4.0f); /* |mean| >> std exercises the two-pass variance */
    float *w = fill(C, 21, 0.5f, 1.5f), *bias = fill(C, 22, -0.5f, 0.5f);
    float *out = zeros(N * C), *mean = zeros(N), *rstd = zeros(N);
    ops->layernorm_fwd(cx, rt_xf(out), mean, rstd, rt_xf(x), w, bias, N, C, 1e-5f);
    double *ro = rt_xcalloc(N * C, sizeof(double)), *rm = rt_xcalloc(N, sizeof(double)),
           *rr = rt_xcalloc(N, sizeof(double));
    for (size_t n = 0; n < N; n++) {
        double s = 0, v = 0;
        for (int c = 0; c < C; c++) s += x[n * C + c];
        double mu = s / C;
        for (int c = 0; c < C; c++) v += (x[n * C + c] - mu) * (x[n * C + c] - mu);
        double r = 1.0 / sqrt(v / C + 1e-5);
        rm[n] = mu, rr[n] = r;
        for (int c = 0; c < C; c++) ro[n * C + c] = (x[n * C + c] - mu) * r * w[c] + bias[c];
    }
    check_d("layernorm out", out, ro, N * C, 1e-5f, 1e-5f);
    check_d("layernorm mean", mean, rm, N, 1e-6f, 1e-6f);
    check_d("layernorm rstd", rstd, rr, N, 1e-6f, 1e-5f);
    /* bias NULL is allowed */
    ops->layernorm_fwd(cx, rt_xf(out), mean, rstd, rt_xf(x), w, NULL, N, C, 1e-5f);
    for (size_t n = 0; n < N; n++)
        for (int c = 0; c < C; c++) ro[n * C + c] -= bias[c];
    check_d("layernorm out no bias", out, ro, N * C, 1e-5f, 1e-5f);
    free(x), free(w), free(bias), free(out), free(mean), free(rstd), free(ro), free(rm), free(rr);
}

static void test_rmsnorm(void) {
    const size_t N = 5;
    const int C = 33;
    float *x = fill(N * C, 30, -2.0f, 2.0f), *w = fill(C, 31, 0.5f, 1.5f);
    float *out = zeros(N * C), *rstd = zeros(N);
    ops->rmsnorm_fwd(cx, rt_xf(out), rstd, rt_xf(x), w, N, C, 1e-6f);
    double *ro = rt_xcalloc(N * C, sizeof(double)), *rr = rt_xcalloc(N, sizeof(double));
    for (size_t n = 0; n < N; n++) {
        double s = 0;
        for (int c = 0; c < C; c++) s += (double)x[n * C + c] * x[n * C + c];
        double r = 1.0 / sqrt(s / C + 1e-6);
        rr[n] = r;
        for (int c = 0; c < C; c++) ro[n * C + c] = x[n * C + c] * r * w[c];
    }
    check_d("rmsnorm out", out, ro, N * C, 1e-6f, 1e-5f);
    check_d("rmsnorm rstd", rstd, rr, N, 1e-6f, 1e-5f);
    free(x), free(w), free(out), free(rstd), free(ro), free(rr);
}

static void test_activations(void) {
    const size_t n = 241;
    float *x = rt_xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = -6.0f + 12.0f * (float)i / (float)(n - 1) + 0.0137f;
    float *dy = fill(n, 40, -1, 1), *y = zeros(n), *dx = zeros(n);
    double *ry = rt_xcalloc(n, sizeof(double)), *rdx = rt_xcalloc(n, sizeof(double));
    const double beta = sqrt(2.0 / M_PI), kappa = 0.044715;
    for (int kind = 0; kind < 4; kind++) {
        for (size_t i = 0; i < n; i++) {
            double v = x[i], f, df;
            if (kind == RT_ACT_GELU_TANH) {
                double t = tanh(beta * (v + kappa * v * v * v));
                f = 0.5 * v * (1 + t);
                df = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * beta * (1 + 3 * kappa * v * v);
            } else if (kind == RT_ACT_GELU_ERF) {
                f = 0.5 * v * (1 + erf(v / sqrt(2.0)));
                df = 0.5 * (1 + erf(v / sqrt(2.0))) + v * exp(-0.5 * v * v) / sqrt(2 * M_PI);
            } else if (kind == RT_ACT_TANH) {
                f = tanh(v);
                df = 1 - f * f;
            } else {
                f = v > 0 ? v : 0;
                df = v > 0 ? 1 : 0;
            }
            ry[i] = f;
            rdx[i] = dy[i] * df;
        }
        ops->act_fwd(cx, (rt_act_kind)kind, rt_xf(y), rt_xf(x), n);
        memset(dx, 0x7f, n * sizeof(float)); /* bwd writes, not accumulates */
        ops->act_bwd(cx, (rt_act_kind)kind, rt_xf(dx), rt_xf(x), rt_xf(dy), n);
        char what[64];
        snprintf(what, sizeof what, "act %d fwd", kind);
        check_d(what, y, ry, n, 2e-6f, 1e-5f);
        snprintf(what, sizeof what, "act %d bwd", kind);
        check_d(what, dx, rdx, n, 2e-6f, 1e-5f);
    }
    /* gelu_new at a known point: 0.5*1*(1+tanh(sqrt(2/pi)*1.044715)) = 0.8411919906 */
    float one = 1.0f, g = 0;
    ops->act_fwd(cx, RT_ACT_GELU_TANH, rt_xf(&g), rt_xf(&one), 1);
    TZ_EXPECT(fabsf(g - 0.8411919906f) < 1e-6f, "gelu_tanh(1) = %.9g", (double)g);
    free(x), free(dy), free(y), free(dx), free(ry), free(rdx);
}

static void test_elementwise(void) {
    const size_t N = 7;
    const int C = 70;
    size_t n = N * C;
    float *a = fill(n, 50, -1, 1), *b = fill(n, 51, -1, 1), *bias = fill(C, 52, -1, 1);
    float *y = zeros(n), *db = fill(C, 53, -1, 1);
    double *r = rt_xcalloc(n, sizeof(double)), *rb = rt_xcalloc(C, sizeof(double));
    ops->add(cx, rt_xf(y), rt_xf(a), rt_xf(b), n);
    for (size_t i = 0; i < n; i++) r[i] = (double)a[i] + b[i];
    check_d("add", y, r, n, 1e-6f, 1e-6f);
    ops->axpy(cx, y, -0.5f, a, n); /* y = a + b - 0.5 a */
    for (size_t i = 0; i < n; i++) r[i] -= 0.5 * a[i];
    check_d("axpy", y, r, n, 1e-6f, 1e-6f);
    ops->scale(cx, y, 3.0f, n);
    for (size_t i = 0; i < n; i++) r[i] *= 3.0;
    check_d("scale", y, r, n, 1e-6f, 1e-6f);
    float w[7] = {0.5f, -2.0f, 0.0f, 1.0f, 3.25f, -0.125f, 7.0f};
    ops->scale_rows(cx, rt_xf(y), w, N, C);
    for (size_t i = 0; i < n; i++) r[i] *= w[i / C];
    check_d("scale_rows", y, r, n, 1e-6f, 1e-6f);
    ops->add_bias(cx, y, bias, N, C);
    for (size_t i = 0; i < n; i++) r[i] += bias[i % C];
    check_d("add_bias", y, r, n, 1e-6f, 1e-6f);
    for (int c = 0; c < C; c++) {
        rb[c] = db[c];
        for (size_t k = 0; k < N; k++) rb[c] += a[k * C + c];
    }
    ops->bias_bwd(cx, db, rt_xf(a), N, C);
    check_d("bias_bwd accumulates", db, rb, C, 1e-6f, 1e-6f);
    /* gather / scatter with a repeated row */
    int32_t idx[4] = {3, 0, 3, 6};
    float *g = zeros(4 * (size_t)C), *d = zeros(n);
    ops->gather_rows(cx, g, a, idx, 4, C);
    int ok = 1;
    for (int k = 0; k < 4; k++) ok &= memcmp(g + (size_t)k * C, a + (size_t)idx[k] * C, C * sizeof(float)) == 0;
    TZ_EXPECT(ok, "gather_rows copies rows idx[b]");
    ops->scatter_rows_add(cx, d, rt_xf(g), idx, 4, C);
    for (size_t i = 0; i < n; i++) r[i] = 0;
    for (int k = 0; k < 4; k++)
        for (int c = 0; c < C; c++) r[(size_t)idx[k] * C + c] += g[(size_t)k * C + c];
    check_d("scatter_rows_add", d, r, n, 1e-6f, 1e-6f);
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * a[i];
    double got = ops->sumsq(cx, a, n);
    TZ_EXPECT(fabs(got - s) <= 1e-12 * s, "sumsq %.17g vs %.17g", got, s);
    size_t big = 100003;
    float *x = fill(big, 54, -2, 2);
    s = 0;
    for (size_t i = 0; i < big; i++) s += (double)x[i] * x[i];
    got = ops->sumsq(cx, x, big);
    TZ_EXPECT(fabs(got - s) <= 1e-12 * s, "sumsq (parallel) %.17g vs %.17g", got, s);
    /* the same bits on any number of threads (a gradient norm must not depend on --threads) */
    const int threads = omp_get_max_threads();
    double on[3];
    for (int t = 1; t <= 3; t++) {
        omp_set_num_threads(t);
        on[t - 1] = ops->sumsq(cx, x, big);
    }
    omp_set_num_threads(threads);
    TZ_EXPECT(on[0] == on[1] && on[1] == on[2], "sumsq on 1, 2, 3 threads: %.17g %.17g %.17g", on[0], on[1], on[2]);
    free(a), free(b), free(bias), free(y), free(db), free(r), free(rb), free(g), free(d), free(x);
}

/* Naive attention in double, same description; probs before dropout. */
static void ref_attention(const rt_attn_desc *d, double *out, double *probs, const float *q, const float *k,
                          const float *v) {
    int B = d->B, NH = d->NH, Tq = d->Tq, Tk = d->Tk, HS = d->HS;
    double *s = rt_xcalloc((size_t)Tk, sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < Tq; i++) {
                double mx = -INFINITY;
                for (int j = 0; j < Tk; j++) {
                    if (d->causal && j > i && !(d->prefix && j < d->prefix[b])) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    double dot = 0;
                    for (int c = 0; c < HS; c++)
                        dot += (double)q[((size_t)b * Tq + i) * d->ldq + h * HS + c] *
                               k[((size_t)b * Tk + j) * d->ldk + h * HS + c];
                    s[j] = dot * d->scale;
                    if (d->key_mask) s[j] += d->key_mask[b * Tk + j];
                    if (d->bias) s[j] += d->bias[((size_t)h * Tq + i) * Tk + j];
                    if (s[j] > mx) mx = s[j];
                }
                size_t prow = (((size_t)b * NH + h) * Tq + i) * Tk;
                double sum = 0;
                for (int j = 0; j < Tk; j++) {
                    double e = mx == -INFINITY ? 0.0 : exp(s[j] - mx);
                    probs[prow + j] = e;
                    sum += e;
                }
                for (int j = 0; j < Tk; j++) probs[prow + j] = sum > 0 ? probs[prow + j] / sum : 0.0;
                for (int c = 0; c < HS; c++) {
                    double o = 0;
                    for (int j = 0; j < Tk; j++) {
                        double p = probs[prow + j];
                        if (d->dropout_p > 0)
                            p = rt_rng_uniform(d->seed, d->stream, prow + j) >= d->dropout_p ? p / (1.0 - d->dropout_p)
                                                                                             : 0.0;
                        o += p * v[((size_t)b * Tk + j) * d->ldv + h * HS + c];
                    }
                    out[((size_t)b * Tq + i) * d->ldo + h * HS + c] = o;
                }
            }
    free(s);
}

static void test_attention(void) {
    const int B = 2, NH = 3, T = 6, HS = 4, C = NH * HS;
    float *qkv = fill((size_t)B * T * 3 * C, 60, -1.5f, 1.5f);
    float *bias = fill((size_t)NH * T * T, 61, -1, 1);
    float *mask = zeros((size_t)B * T);
    mask[1 * T + 4] = -INFINITY; /* padding keys in sequence 1 */
    mask[1 * T + 5] = -1e9f;
    rt_attn_desc d = {.B = B,
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
                      .dropout_p = 0.0f,
                      .seed = 7,
                      .stream = 99};
    size_t no = (size_t)B * T * C, np = (size_t)B * NH * T * T;
    float *out = zeros(no), *probs = zeros(np);
    double *ro = rt_xcalloc(no, sizeof(double)), *rp = rt_xcalloc(np, sizeof(double));
    const int32_t prefix[2] = {4, 1}; /* GLM: the first 4 (1) keys seen by every query */
    const char *names[5] = {"causal+mask+bias", "causal+mask+bias+dropout", "causal+prefix+dropout", "no mask",
                            "fully masked rows"};
    for (int cfg = 0; cfg < 5; cfg++) {
        d.dropout_p = cfg == 1 || cfg == 2 ? 0.3f : 0.0f;
        d.prefix = cfg == 2 ? prefix : NULL;
        if (cfg == 2) d.key_mask = NULL;
        if (cfg == 3) d.causal = false, d.key_mask = NULL, d.bias = NULL, d.scale = 0.8f;
        if (cfg == 4) { /* every key of sequence 1 masked: its rows must be zero, not NaN */
            d.key_mask = mask;
            for (int j = 0; j < T; j++) mask[1 * T + j] = -INFINITY;
        }
        ops->attention_fwd(cx, &d, rt_xf(out), probs, rt_xf(qkv), rt_xf(qkv + C), rt_xf(qkv + 2 * C));
        ref_attention(&d, ro, rp, qkv, qkv + C, qkv + 2 * C);
        char what[96];
        snprintf(what, sizeof what, "attention out (%s)", names[cfg]);
        check_d(what, out, ro, no, 1e-5f, 1e-4f);
        snprintf(what, sizeof what, "attention probs (%s)", names[cfg]);
        check_d(what, probs, rp, np, 1e-6f, 1e-4f);
    }
    int finite = 1;
    for (size_t i = 0; i < no; i++) finite &= isfinite(out[i]);
    TZ_EXPECT(finite, "fully masked rows give finite outputs");
    free(qkv), free(bias), free(mask), free(out), free(probs), free(ro), free(rp);
}

static void test_embedding(void) {
    const int C = 5, V = 8, start = 10;
    const size_t N = 7;
    float *table = fill((size_t)V * C, 70, -1, 1);
    int32_t ids[7] = {12, 5, 17, 18, 10, 12, -100};
    float *out = fill(N * C, 71, -1, 1), *pos = zeros(N * C);
    memcpy(pos, out, N * C * sizeof(float));
    double *r = rt_xcalloc(N * C, sizeof(double));
    for (int acc = 0; acc < 2; acc++) {
        ops->embedding_fwd(cx, out, ids, table, N, C, start, V, acc);
        for (size_t n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                int local = ids[n] - start;
                double e = local >= 0 && local < V ? table[local * C + c] : 0.0;
                r[n * C + c] = e + (acc ? e : 0.0); /* second pass adds onto the first */
            }
        check_d(acc ? "embedding_fwd accumulate" : "embedding_fwd", out, r, N * C, 0, 0);
    }
    float *dtab = fill((size_t)V * C, 72, -1, 1);
    double *rd = rt_xcalloc((size_t)V * C, sizeof(double));
    for (int i = 0; i < V * C; i++) rd[i] = dtab[i];
    for (size_t n = 0; n < N; n++) {
        int local = ids[n] - start;
        if (local >= 0 && local < V)
            for (int c = 0; c < C; c++) rd[local * C + c] += pos[n * C + c];
    }
    ops->embedding_bwd(cx, dtab, pos, ids, N, C, start, V);
    check_d("embedding_bwd (shard, repeats, accumulate)", dtab, rd, (size_t)V * C, 1e-6f, 1e-6f);
    free(table), free(out), free(pos), free(r), free(dtab), free(rd);
}

static void test_softmax_xent(void) {
    const size_t N = 5;
    const int V = 11;
    float *logits = fill(N * V, 80, -3, 3);
    for (int j = 0; j < V; j++) logits[3 * V + j] += 1000.0f; /* overflow without the max shift */
    int32_t tg[5] = {3, -100, 0, 10, 7};
    float gs = 0.25f;
    double *rl = rt_xcalloc(N, sizeof(double)), *rg = rt_xcalloc(N * V, sizeof(double)),
           *rp = rt_xcalloc(N * V, sizeof(double));
    for (size_t n = 0; n < N; n++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, logits[n * V + j]);
        for (int j = 0; j < V; j++) s += exp(logits[n * V + j] - mx);
        for (int j = 0; j < V; j++) rp[n * V + j] = exp(logits[n * V + j] - mx) / s;
        if (tg[n] == -100) continue;
        rl[n] = mx + log(s) - logits[n * V + tg[n]];
        for (int j = 0; j < V; j++) rg[n * V + j] = (rp[n * V + j] - (j == tg[n])) * gs;
    }
    float *losses = fill(N, 81, 5, 6), *probs = zeros(N * V), *dl = zeros(N * V);
    ops->softmax_xent(cx, losses, dl, probs, logits, tg, N, V, gs);
    check_d("xent losses", losses, rl, N, 1e-5f, 1e-5f);
    check_d("xent dlogits", dl, rg, N * V, 1e-7f, 1e-5f);
    check_d("xent probs", probs, rp, N * V, 1e-7f, 1e-5f);
    /* dlogits aliasing logits, no probs */
    ops->softmax_xent(cx, losses, logits, NULL, logits, tg, N, V, gs);
    check_d("xent losses (aliased)", losses, rl, N, 1e-5f, 1e-5f);
    check_d("xent dlogits (aliased)", logits, rg, N * V, 1e-7f, 1e-5f);
    free(logits), free(rl), free(rg), free(rp), free(losses), free(probs), free(dl);
}

/* The regression head's squared error: float arithmetic as PyTorch's MSELoss, NaN targets
 * unlabelled (loss and gradient 0), and targets read from dlogits itself (as the heads pass them). */
static void test_mse_loss(void) {
    const size_t N = 6;
    float *z = fill(N, 82, -2, 2), *t = fill(N, 83, -2, 2);
    t[2] = NAN;
    t[5] = NAN;
    const float gs = 0.125f;
    float *losses = fill(N, 84, 5, 6), *dl = fill(N, 85, 5, 6), rl[6], rg[6];
    for (size_t i = 0; i < N; i++) {
        const float d = z[i] - t[i];
        rl[i] = isnan(t[i]) ? 0.0f : d * d;
        rg[i] = isnan(t[i]) ? 0.0f : 2.0f * d * gs;
    }
    ops->mse_loss(cx, losses, dl, z, t, N, gs);
    TZ_EXPECT(memcmp(losses, rl, sizeof rl) == 0 && memcmp(dl, rg, sizeof rg) == 0, "mse_loss: not PyTorch's floats");
    memcpy(dl, t, N * sizeof(float)); /* targets in dlogits */
    ops->mse_loss(cx, losses, dl, z, dl, N, gs);
    TZ_EXPECT(memcmp(losses, rl, sizeof rl) == 0 && memcmp(dl, rg, sizeof rg) == 0, "mse_loss: targets in dlogits");
    free(z), free(t), free(losses), free(dl);
}

/* BCEWithLogitsLoss of a row, in double: the mean over its C classes of (1 - y) z + log(1 + e^-z). */
static double bce_row(const double *z, const float *y, int C) {
    double sum = 0;
    for (int c = 0; c < C; c++) sum += (1.0 - y[c]) * z[c] + (z[c] >= 0 ? log1p(exp(-z[c])) : -z[c] + log1p(exp(z[c])));
    return sum / C;
}

/* The multi-label head's binary cross-entropy against the double formula and its derivative
 * (sigmoid(z) - y) grad_scale / C (test_cpu_grad checks it by finite differences), large logits
 * finite, a row with a NaN first target unlabelled, and the targets read from dlogits itself as
 * the heads pass them. The losses are checked relatively, so that the last, well-classified
 * row's tiny loss needs log1p; dlogits' atol is 2 ulps of 1 times grad_scale / C: sigmoid(z) - 1
 * cancels in float, as in PyTorch's (sigmoid(input) - target). */
static void test_bce_logits_loss(void) {
    enum { N = 6, C = 3 };
    const float z[N * C] = {0.5f,   -1.25f, 2.0f, 30.0f, -30.0f, 100.0f, -100.0f, 0.0f,  7.5f,
                            0.125f, -3.0f,  1.0f, 4.0f,  5.0f,   6.0f,   12.0f,   15.0f, 17.0f};
    const float y[N * C] = {1, 0, 1, 0, 1, 1, 0, 1, 0.25f, NAN, 1, 0, 1, 1, 1, 1, 1, 1};
    const float gs = 0.2f;
    float losses[N], dl[N * C];
    for (int i = 0; i < N * C; i++) dl[i] = 7.0f; /* every element must be written */
    for (int i = 0; i < N; i++) losses[i] = 7.0f;
    ops->bce_logits_loss(cx, losses, dl, z, y, N, C, gs);
    double rl[N], rg[N * C];
    for (int i = 0; i < N; i++) {
        const bool labelled = !isnan(y[i * C]);
        double zd[C];
        for (int c = 0; c < C; c++) zd[c] = z[i * C + c];
        rl[i] = labelled ? bce_row(zd, y + i * C, C) : 0.0;
        for (int c = 0; c < C; c++)
            rg[i * C + c] = labelled ? (1.0 / (1.0 + exp(-zd[c])) - y[i * C + c]) * gs / C : 0.0;
    }
    check_d("bce losses", losses, rl, N, 0.0f, 1e-6f);
    check_d("bce dlogits", dl, rg, N * C, 2 * FLT_EPSILON * gs / C, 1e-6f);
    for (int i = 0; i < N * C; i++) TZ_EXPECT(isfinite(dl[i]), "bce dlogits[%d] not finite", i);
    TZ_EXPECT(losses[3] == 0.0f && dl[9] == 0.0f && dl[10] == 0.0f && dl[11] == 0.0f,
              "bce_logits_loss: the unlabelled row is not 0");
    float losses2[N], dl2[N * C];
    memcpy(dl2, y, sizeof dl2); /* targets in dlogits */
    ops->bce_logits_loss(cx, losses2, dl2, z, dl2, N, C, gs);
    TZ_EXPECT(memcmp(losses2, losses, sizeof losses) == 0 && memcmp(dl2, dl, sizeof dl) == 0,
              "bce_logits_loss: targets in dlogits give other numbers");
}

static void test_adamw(void) {
    const size_t n = 1000;
    float *p = fill(n, 90, -1, 1), *m = zeros(n), *v = zeros(n);
    double *rp = rt_xcalloc(n, sizeof(double)), *rm = rt_xcalloc(n, sizeof(double)),
           *rv = rt_xcalloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) rp[i] = p[i];
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1, gs = 0.5;
    for (int t = 1; t <= 3; t++) {
        float *g = fill(n, 91 + t, -1, 1);
        ops->adamw(cx, p, g, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, (float)gs, t);
        /* torch.optim.AdamW written out in double, with the hyperparameters as the Python
         * floats PyTorch would hold (the backend recovers 0.999 from 0.999f; with 0.999f
         * itself, 1 - beta2 would be off by 1.3e-5 relative and v would fail rtol 1e-5) */
        for (size_t i = 0; i < n; i++) {
            double gi = (double)g[i] * gs;
            rp[i] *= 1.0 - lr * wd;
            rm[i] = b1 * rm[i] + (1 - b1) * gi;
            rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
            double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
            rp[i] -= lr / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + eps);
        }
        free(g);
    }
    check_d("adamw params after 3 steps", p, rp, n, 1e-6f, 1e-6f);
    check_d("adamw m", m, rm, n, 1e-7f, 2e-6f);
    check_d("adamw v", v, rv, n, 1e-10f, 2e-6f);
    free(p), free(m), free(v), free(rp), free(rm), free(rv);
}

/* The CPU's row of uniforms (Philox blocks as lanes, scalar partial blocks at either end)
 * against rt_rng_uniform, value by value: starts at every offset within a block and past 2^32,
 * lengths from 1 to past a lane batch. */
static void test_uniform_row(void) {
    static float u[5000];
    int bad = 0;
    for (int t = 0; t < 2000 && !bad; t++) {
        const uint64_t seed = 0x123456789abcull * (uint64_t)t + 7, stream = (uint64_t)t * 0x9E3779B97F4A7C15ull;
        const uint64_t start = (uint64_t)t * 7919 % 100000 + (t % 3 == 0 ? (uint64_t)1 << 33 : 0);
        const size_t n = (size_t)t * 37 % 4999 + 1;
        rt_cpu_uniform_row(seed, stream, start, n, u);
        for (size_t k = 0; k < n && !bad; k++) {
            const float want = rt_rng_uniform(seed, stream, start + k);
            if (memcmp(&want, &u[k], sizeof want) != 0) {
                bad = 1;
                TZ_EXPECT(0, "row %d (start %llu, %zu values): value %zu is %.9g, rt_rng_uniform %.9g", t,
                          (unsigned long long)start, n, k, u[k], want);
            }
        }
    }
    TZ_EXPECT(!bad, "rt_cpu_uniform_row differs from rt_rng_uniform");
}

/* The block-at-a-time row walk the CUDA dropout kernels use (rt_rng_row_blocks, rt_rng_row_j0,
 * rt_rng_uniform4), run here lane by lane as a GPU would: for rows starting at every offset
 * within a block and past 2^32, of 1 to 300 elements, over 1, 3, 32 and 256 lanes, every
 * element is drawn exactly once, with rt_rng_uniform's value for its index. */
static void test_uniform_row_blocks(void) {
    enum { N = 300 };
    static const int lane_counts[] = {1, 3, 32, 256};
    int bad = 0;
    for (int t = 0; t < 600 && !bad; t++) {
        const uint64_t seed = 0xabcdefull * (uint64_t)t + 3, stream = (uint64_t)t * 0x2545F4914F6CDD1Dull;
        const uint64_t g0 = (uint64_t)t * 104729 % 50000 + (t % 4 == 0 ? (uint64_t)1 << 34 : 0);
        const uint64_t n = (uint64_t)t * 41 % N + 1;
        for (size_t lc = 0; lc < sizeof lane_counts / sizeof *lane_counts && !bad; lc++) {
            int seen[N] = {0};
            float got[N];
            uint64_t first, count;
            rt_rng_row_blocks(g0, n, &first, &count);
            for (int lane = 0; lane < lane_counts[lc]; lane++)
                for (uint64_t k = (uint64_t)lane; k < count; k += (uint64_t)lane_counts[lc]) {
                    float u[4];
                    rt_rng_uniform4(seed, stream, first + k, u);
                    const int64_t j0 = rt_rng_row_j0(g0, first, k);
                    for (int w = 0; w < 4; w++)
                        if (j0 + w >= 0 && j0 + w < (int64_t)n) {
                            seen[j0 + w]++;
                            got[j0 + w] = u[w];
                        }
                }
            for (uint64_t j = 0; j < n && !bad; j++) {
                const float want = rt_rng_uniform(seed, stream, g0 + j);
                if (seen[j] != 1 || memcmp(&want, &got[j], sizeof want) != 0) {
                    bad = 1;
                    TZ_EXPECT(0, "row %d (g0 %llu, %llu values, %d lanes): element %llu drawn %d times, %.9g for %.9g",
                              t, (unsigned long long)g0, (unsigned long long)n, lane_counts[lc], (unsigned long long)j,
                              seen[j], seen[j] ? got[j] : 0.0f, want);
                }
            }
        }
    }
    TZ_EXPECT(!bad, "the block-at-a-time row walk differs from rt_rng_uniform");
}

static void test_dropout(void) {
    const size_t n = 100000;
    const float p = 0.25f;
    float *x = fill(n, 100, 0.5f, 1.5f), *y = zeros(n), *dx = zeros(n), *dy = fill(n, 101, 0.5f, 1.5f);
    ops->dropout_fwd(cx, y, x, n, p, 42, 5, NULL);
    ops->dropout_bwd(cx, dx, dy, n, p, 42, 5, NULL);
    size_t kept = 0, bad_mask = 0, bad_val = 0, bad_bwd = 0;
    for (size_t i = 0; i < n; i++) {
        int keep = rt_rng_uniform(42, 5, i) >= p;
        kept += keep;
        if ((y[i] != 0.0f) != keep) bad_mask++;
        if (keep && y[i] != x[i] * (1.0f / (1.0f - p))) bad_val++;
        if ((dx[i] != 0.0f) != keep || (keep && dx[i] != dy[i] * (1.0f / (1.0f - p)))) bad_bwd++;
    }
    double frac = (double)kept / n;
    TZ_EXPECT(fabs(frac - 0.75) < 0.01, "kept fraction %.4f, expected about 0.75", frac);
    TZ_EXPECT(bad_mask == 0, "%zu elements disagree with rt_rng_uniform >= p", bad_mask);
    TZ_EXPECT(bad_val == 0, "%zu kept elements not scaled by 1/(1-p)", bad_val);
    TZ_EXPECT(bad_bwd == 0, "%zu elements where bwd's mask differs from fwd's", bad_bwd);
    /* in place gives the same result; another stream gives another mask; p = 0 copies */
    float *z = rt_xmalloc(n * sizeof(float));
    memcpy(z, x, n * sizeof(float));
    ops->dropout_fwd(cx, z, z, n, p, 42, 5, NULL);
    TZ_EXPECT(memcmp(z, y, n * sizeof(float)) == 0, "in-place dropout matches out-of-place");
    ops->dropout_fwd(cx, z, x, n, p, 42, 6, NULL);
    TZ_EXPECT(memcmp(z, y, n * sizeof(float)) != 0, "stream 6 drops other elements than stream 5");
    ops->dropout_fwd(cx, z, x, n, 0.0f, 42, 5, NULL);
    TZ_EXPECT(memcmp(z, x, n * sizeof(float)) == 0, "p=0 is the identity");
    /* the step's part of the stream from (backend) memory: the mask of the whole stream */
    const uint64_t whole = RT_STREAM(RT_STREAM_DROPOUT, RT_STREAM_STEP_DROPOUT(7) | 3),
                   at0 = RT_STREAM(RT_STREAM_DROPOUT, 3);
    const uint64_t step = RT_STREAM_STEP_DROPOUT(7);
    ops->dropout_fwd(cx, y, x, n, p, 42, whole, NULL);
    ops->dropout_fwd(cx, z, x, n, p, 42, at0, &step);
    TZ_EXPECT(memcmp(z, y, n * sizeof(float)) == 0,
              "dropout with the step from memory differs from the whole stream's");
    ops->dropout_bwd(cx, z, x, n, p, 42, at0, &step);
    TZ_EXPECT(memcmp(z, y, n * sizeof(float)) == 0, "its backward differs");
    float *c0 = zeros(n), *c1 = zeros(n);
    ops->dropout_cols(cx, rt_xf(c0), rt_xf(x), n / 100, 40, 100, 20, p, 42, whole, NULL);
    ops->dropout_cols(cx, rt_xf(c1), rt_xf(x), n / 100, 40, 100, 20, p, 42, at0, &step);
    TZ_EXPECT(memcmp(c0, c1, (n / 100) * 40 * sizeof(float)) == 0, "dropout_cols with the step from memory differs");
    free(c0), free(c1);
    free(x), free(y), free(dx), free(dy), free(z);
}

/* Runs every row-parallel kernel at sizes above the parallel threshold with `threads`
 * threads and returns the outputs concatenated, so two thread counts can be compared. */
static float *run_parallel_kernels(int threads, size_t *count) {
    omp_set_num_threads(threads);
    const size_t N = 96;
    const int C = 320, V = 1000, Bt = 2, NH = 4, T = 48, HS = 8, Ca = NH * HS;
    size_t nx = N * C, nl = N * V, nqkv = (size_t)Bt * T * 3 * Ca, nb = (size_t)NH * T * T;
    size_t total = 9 * nx + 3 * C + 3 * N + nl + nqkv + nb + (size_t)Bt * T * Ca;
    float *res = zeros(total), *o = res;
    float *x = fill(nx, 200, -2, 2), *w = fill(C, 201, 0.5f, 1.5f), *b = fill(C, 202, -1, 1);
    float *dy = fill(nx, 203, -1, 1), *mean = zeros(N), *rstd = zeros(N);
    ops->layernorm_fwd(cx, rt_xf(o), mean, rstd, rt_xf(x), w, b, N, C, 1e-5f), o += nx;
    ops->layernorm_bwd(cx, o, o + nx, o + nx + C, rt_xf(dy), rt_xf(x), w, mean, rstd, N, C), o += nx + 2 * C;
    ops->rmsnorm_fwd(cx, rt_xf(o), rstd, rt_xf(x), w, N, C, 1e-6f), o += nx;
    ops->rmsnorm_bwd(cx, o, o + nx, rt_xf(dy), rt_xf(x), w, rstd, N, C), o += nx + C;
    memcpy(o, mean, N * sizeof(float)), o += N;
    memcpy(o, rstd, N * sizeof(float)), o += N;
    float *logits = fill(nl, 204, -3, 3);
    int32_t *tg = rt_xmalloc(N * sizeof(int32_t)), *ids = rt_xmalloc(N * sizeof(int32_t));
    for (size_t n = 0; n < N; n++) tg[n] = n % 7 == 0 ? -100 : (int32_t)((n * 37) % V);
    for (size_t n = 0; n < N; n++) ids[n] = (int32_t)((n * 13) % 50); /* repeats */
    ops->softmax_xent(cx, o + nl, o, NULL, logits, tg, N, V, 0.5f), o += nl + N;
    ops->embedding_bwd(cx, o, dy, ids, N, C, 5, 40), o += nx; /* table rows 0..39 < N */
    ops->act_fwd(cx, RT_ACT_GELU_TANH, rt_xf(o), rt_xf(x), nx), o += nx;
    ops->dropout_fwd(cx, o, x, nx, 0.2f, 11, 12, NULL), o += nx;
    float *m = zeros(nx), *v = zeros(nx), *p = dup_f(x, nx);
    ops->adamw(cx, p, dy, m, v, nx, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, 1);
    memcpy(o, p, nx * sizeof(float)), o += nx;
    float *qkv = fill(nqkv, 205, -1, 1), *bias = fill(nb, 206, -1, 1);
    rt_attn_desc d = {.B = Bt,
                      .NH = NH,
                      .Tq = T,
                      .Tk = T,
                      .HS = HS,
                      .ldq = 3 * Ca,
                      .ldk = 3 * Ca,
                      .ldv = 3 * Ca,
                      .ldo = Ca,
                      .scale = 0.35f,
                      .causal = true,
                      .bias = bias,
                      .dropout_p = 0.1f,
                      .seed = 1,
                      .stream = 2};
    float *out = zeros((size_t)Bt * T * Ca), *probs = zeros((size_t)Bt * NH * T * T);
    ops->attention_fwd(cx, &d, rt_xf(out), probs, rt_xf(qkv), rt_xf(qkv + Ca), rt_xf(qkv + 2 * Ca));
    ops->attention_bwd(cx, &d, rt_xf(o), rt_xf(o + Ca), rt_xf(o + 2 * Ca), o + nqkv, rt_xf(out), probs, rt_xf(qkv),
                       rt_xf(qkv + Ca), rt_xf(qkv + 2 * Ca));
    o += nqkv + nb;
    memcpy(o, out, (size_t)Bt * T * Ca * sizeof(float)), o += (size_t)Bt * T * Ca;
    *count = (size_t)(o - res);
    RT_CHECK(*count <= total, "test buffer overrun");
    free(x), free(w), free(b), free(dy), free(mean), free(rstd), free(logits), free(tg), free(ids);
    free(m), free(v), free(p), free(qkv), free(bias), free(out), free(probs);
    return res;
}

static void test_thread_determinism(void) {
    size_t n1 = 0, n3 = 0;
    float *r1 = run_parallel_kernels(1, &n1);
    float *r3 = run_parallel_kernels(3, &n3);
    omp_set_num_threads(2);
    TZ_EXPECT(n1 == n3 && memcmp(r1, r3, n1 * sizeof(float)) == 0, "kernels give different bits with 1 and 3 threads");
    int finite = 1;
    for (size_t i = 0; i < n1; i++) finite &= isfinite(r1[i]);
    TZ_EXPECT(finite, "large-size kernel outputs are finite");
    free(r1), free(r3);
}

static void test_dispatch(rt_backend *be) {
    rt_backend *other = NULL;
    TZ_EXPECT(rt_backend_init("gpu", 0, &other) == RT_ERR_USAGE && !other, "\"gpu\" is a usage error");
    TZ_EXPECT(strstr(rt_error_message(), "gpu") != NULL, "message names the string: %s", rt_error_message());
    TZ_EXPECT(rt_backend_init("cuda:x", 0, &other) == RT_ERR_USAGE, "cuda:x is a usage error");
    TZ_EXPECT(rt_backend_init("cuda:", 0, &other) == RT_ERR_USAGE, "cuda: is a usage error");
    TZ_EXPECT(rt_backend_init("cuda:-1", 0, &other) == RT_ERR_USAGE, "cuda:-1 is a usage error");
#ifndef TZ_USE_CUDA
    TZ_EXPECT(rt_backend_init("cuda:0", 0, &other) == RT_ERR_UNSUPPORTED, "cuda:0 without CUDA");
    TZ_EXPECT(strstr(rt_error_message(), "no CUDA") != NULL, "message: %s", rt_error_message());
#endif
    TZ_EXPECT(be->device == -1 && strcmp(be->ops->name, "cpu") == 0, "cpu backend identity");
    void *buf = NULL;
    TZ_EXPECT_OK(rt_backend_alloc(be, 1000, "test buffer", &buf));
    int zero = buf != NULL && ((uintptr_t)buf & 63) == 0;
    for (size_t i = 0; buf && i < 1000; i++) zero &= ((unsigned char *)buf)[i] == 0;
    TZ_EXPECT(zero, "alloc gives 64-byte aligned zeroed memory");
    float host[4] = {1, 2, 3, 4}, back[4] = {0};
    rt_to_device(be, buf, host, sizeof host);
    rt_copy(be, (char *)buf + 64, buf, sizeof host);
    rt_to_host(be, back, (char *)buf + 64, sizeof back);
    TZ_EXPECT(memcmp(host, back, sizeof host) == 0, "to_device/copy/to_host round trip");
    rt_clear(be, buf, sizeof host);
    rt_sync(be);
    TZ_EXPECT(((float *)buf)[0] == 0.0f && ((float *)buf)[3] == 0.0f, "zero");
    rt_free_device(be, buf);
    rt_backend_free(NULL);
}

int main(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 2, &be));
    if (!be) return tz_test_result("test_cpu_ops");
    ops = be->ops;
    cx = be->ctx;
    test_gemm();
    test_layernorm();
    test_rmsnorm();
    test_activations();
    test_elementwise();
    test_attention();
    test_embedding();
    test_softmax_xent();
    test_mse_loss();
    test_bce_logits_loss();
    test_adamw();
    test_uniform_row();
    test_uniform_row_blocks();
    test_dropout();
    test_thread_determinism();
    test_dispatch(be);
    rt_backend_free(be);
    return tz_test_result("test_cpu_ops");
}
