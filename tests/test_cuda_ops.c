/* The CUDA backend against the CPU backend, op by op: every op runs on the same random
 * inputs on both, and the outputs must agree within fp32 tolerances (1e-5 abs / 1e-4 rel for
 * elementwise and row ops, looser for GEMM and attention, whose sums run in another order).
 * Dropout masks must be the same bits, and the reductions that are meant to be
 * deterministic (norm and bias gradients, embedding scatter, sumsq) must give the same bits
 * when run twice. Uploads through the pinned staging slots keep their data. Exits 77 (skipped) in a build without CUDA or on a machine without a GPU; a GPU
 * that CUDA cannot use (a driver too old for the runtime) fails instead. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/rt_backend.h"
#include "runtime/train/rt_optim.h"
#include "tests/fused_attn_cases.h"
#include "tests/testutil.h"

#ifndef TZ_USE_CUDA

int main(void) {
    printf("test_cuda_ops: skipped: built without CUDA\n");
    return 77;
}

#else

static rt_backend *g_cpu, *g_gpu;

/* xorshift64*: the test's own inputs, independent of the RNG under test */
static uint64_t g_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    g_state ^= g_state >> 12;
    g_state ^= g_state << 25;
    g_state ^= g_state >> 27;
    uint64_t r = g_state * 0x2545F4914F6CDD1Dull;
    return (float)(r >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

static float *host_rand(size_t n, float scale, float offset) {
    float *h = rt_xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = frand() * scale + offset;
    return h;
}

/* The same data on both backends: c on the CPU one, g on the CUDA one. */
typedef struct {
    size_t n;
    float *c, *g;
} dbuf;

typedef struct {
    size_t n;
    int32_t *c, *g;
} ibuf;

static void *be_alloc(rt_backend *be, size_t bytes) {
    void *p = NULL;
    rt_status st = rt_backend_alloc(be, bytes, "test buffer", &p);
    RT_CHECK(st == RT_OK, "%s", rt_error_message());
    return p;
}

static dbuf dbuf_from(const float *h, size_t n) {
    dbuf b = {n, be_alloc(g_cpu, n * sizeof(float)), be_alloc(g_gpu, n * sizeof(float))};
    rt_to_device(g_cpu, b.c, h, n * sizeof(float));
    rt_to_device(g_gpu, b.g, h, n * sizeof(float));
    return b;
}

static dbuf dbuf_rand(size_t n, float scale, float offset) {
    float *h = host_rand(n, scale, offset);
    dbuf b = dbuf_from(h, n);
    free(h);
    return b;
}

/* An activation or activation gradient at the compute precision: stored rounded to dtype, as
 * every op writes them (rt_set_precision), which the 16-bit matmuls' fused sums rely on. */
static dbuf dbuf_rand_stored(rt_dtype dtype, size_t n, float scale, float offset) {
    float *h = host_rand(n, scale, offset);
    for (size_t i = 0; i < n; i++) h[i] = rt_round_to(dtype, h[i]);
    dbuf b = dbuf_from(h, n);
    free(h);
    return b;
}

static dbuf dbuf_zero(size_t n) {
    dbuf b = {n, be_alloc(g_cpu, n * sizeof(float)), be_alloc(g_gpu, n * sizeof(float))};
    return b; /* alloc zeroes */
}

static void dbuf_free(dbuf *b) {
    rt_free_device(g_cpu, b->c);
    rt_free_device(g_gpu, b->g);
    b->c = b->g = NULL;
}

static ibuf ibuf_from(const int32_t *h, size_t n) {
    ibuf b = {n, be_alloc(g_cpu, n * sizeof(int32_t)), be_alloc(g_gpu, n * sizeof(int32_t))};
    rt_to_device(g_cpu, b.c, h, n * sizeof(int32_t));
    rt_to_device(g_gpu, b.g, h, n * sizeof(int32_t));
    return b;
}

static void ibuf_free(ibuf *b) {
    rt_free_device(g_cpu, b->c);
    rt_free_device(g_gpu, b->g);
    b->c = b->g = NULL;
}

/* Host copies of both sides; caller frees both. */
static void dbuf_fetch(const dbuf *b, float **hc, float **hg) {
    *hc = rt_xmalloc(b->n * sizeof(float));
    *hg = rt_xmalloc(b->n * sizeof(float));
    rt_to_host(g_cpu, *hc, b->c, b->n * sizeof(float));
    rt_to_host(g_gpu, *hg, b->g, b->n * sizeof(float));
}

/* CUDA result against the CPU reference. */
static void dbuf_check(const char *what, const dbuf *b, float atol, float rtol) {
    float *hc, *hg;
    dbuf_fetch(b, &hc, &hg);
    tz_check_close(what, hg, hc, b->n, atol, rtol);
    free(hc);
    free(hg);
}

/* CUDA result equal to the CPU's bit for bit (infs included). */
static void dbuf_check_bits(const char *what, const dbuf *b) {
    float *hc, *hg;
    dbuf_fetch(b, &hc, &hg);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < b->n; i++)
        if (memcmp(&hc[i], &hg[i], sizeof(float)) != 0 && bad++ == 0) first = i;
    TZ_EXPECT(bad == 0, "%s: %zu of %zu differ; first [%zu] got %.9g, CPU %.9g", what, bad, b->n, first, hg[first],
              hc[first]);
    free(hc);
    free(hg);
}

/* Makes the CUDA copy equal to the CPU copy, to test a backward on exactly the forward's
 * saved statistics. */
static void dbuf_sync_from_cpu(dbuf *b) {
    float *h = rt_xmalloc(b->n * sizeof(float));
    rt_to_host(g_cpu, h, b->c, b->n * sizeof(float));
    rt_to_device(g_gpu, b->g, h, b->n * sizeof(float));
    free(h);
}

static float *gpu_fetch(const float *g, size_t n) {
    float *h = rt_xmalloc(n * sizeof(float));
    rt_to_host(g_gpu, h, g, n * sizeof(float));
    return h;
}

#define ATOL 1e-5f
#define RTOL 1e-4f
#define GEMM_ATOL 1e-4f
#define GEMM_RTOL 1e-4f
#define ATTN_ATOL 1e-4f
#define ATTN_RTOL 1e-3f

static void test_memory(void) {
    const size_t n = 1000;
    float *h = host_rand(n, 1.0f, 0.0f);
    void *empty = be_alloc(g_gpu, 0); /* a zero-byte buffer is valid, not out of memory */
    rt_free_device(g_gpu, empty);
    float *p = be_alloc(g_gpu, n * sizeof(float));
    float *back = gpu_fetch(p, n);
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += back[i] != 0.0f;
    TZ_EXPECT(nonzero == 0, "alloc left %zu nonzero floats", nonzero);
    free(back);

    float *q = be_alloc(g_gpu, n * sizeof(float));
    rt_to_device(g_gpu, p, h, n * sizeof(float));
    rt_copy(g_gpu, q, p, n * sizeof(float));
    rt_clear(g_gpu, q + 100, 50 * sizeof(float));
    rt_sync(g_gpu);
    back = gpu_fetch(q, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = (i >= 100 && i < 150) ? 0.0f : h[i];
        bad += back[i] != want;
    }
    TZ_EXPECT(bad == 0, "to_device/copy/zero/to_host: %zu floats differ", bad);
    free(back);
    rt_free_device(g_gpu, p);
    rt_free_device(g_gpu, q);
    rt_free_device(g_gpu, NULL);
    free(h);
}

/* Uploads through the pinned staging slots (cuda_backend.cu): more small uploads than slots,
 * each from the same host array rewritten between calls (the data is taken at the call, and a
 * slot is reused only once its copy has run), with a kernel on each buffer between; and one
 * upload past a slot's size, which goes straight from the caller's memory. */
static void test_uploads(void) {
    enum { BUFS = 20, NS = 1000 };
    float host[NS], *buf[BUFS];
    for (int b = 0; b < BUFS; b++) {
        buf[b] = be_alloc(g_gpu, NS * sizeof(float));
        for (int i = 0; i < NS; i++) host[i] = (float)(b * NS + i);
        rt_to_device(g_gpu, buf[b], host, sizeof host);
        rt_scale(g_gpu, buf[b], 2.0f, NS);
    }
    size_t bad = 0;
    for (int b = 0; b < BUFS; b++) {
        float *back = gpu_fetch(buf[b], NS);
        for (int i = 0; i < NS; i++) bad += back[i] != 2.0f * (float)(b * NS + i);
        free(back);
        rt_free_device(g_gpu, buf[b]);
    }
    TZ_EXPECT(bad == 0, "staged uploads: %zu of %d floats differ", bad, BUFS * NS);
    const size_t big = (3u << 20) / sizeof(float) + 7; /* 3 MiB and a bit: past a slot */
    float *h = host_rand(big, 1.0f, 0.0f), *p = be_alloc(g_gpu, big * sizeof(float));
    rt_to_device(g_gpu, p, h, big * sizeof(float));
    float *back = gpu_fetch(p, big);
    TZ_EXPECT(memcmp(back, h, big * sizeof(float)) == 0, "a %zu-byte upload differs", big * sizeof(float));
    free(back);
    free(h);
    rt_free_device(g_gpu, p);
}

static void test_gemm(void) {
    const int M = 37, N = 29, K = 41, batch = 3;
    for (int ta = 0; ta < 2; ta++) {
        for (int tb = 0; tb < 2; tb++) {
            for (int broadcast_b = 0; broadcast_b < 2; broadcast_b++) {
                int rows_a = ta ? K : M, cols_a = ta ? M : K;
                int rows_b = tb ? N : K, cols_b = tb ? K : N;
                int lda = cols_a + 3, ldb = cols_b + 5, ldc = N + 2;
                size_t sa = (size_t)rows_a * lda + 7, sb = broadcast_b ? 0 : (size_t)rows_b * ldb + 1;
                size_t sc = (size_t)M * ldc + 4;
                dbuf A = dbuf_rand(sa * batch, 1.0f, 0.0f);
                dbuf B = dbuf_rand(broadcast_b ? sb + (size_t)rows_b * ldb : sb * batch, 1.0f, 0.0f);
                dbuf C = dbuf_rand(sc * batch, 1.0f, 0.0f);
                float alpha = 0.75f, beta = (ta ^ tb) ? 0.0f : 0.5f;
                rt_gemm(g_cpu, ta, tb, M, N, K, alpha, rt_xf(A.c), lda, sa, rt_xf(B.c), ldb, sb, beta, rt_xf(C.c), ldc,
                        sc, batch);
                rt_gemm(g_gpu, ta, tb, M, N, K, alpha, rt_xf(A.g), lda, sa, rt_xf(B.g), ldb, sb, beta, rt_xf(C.g), ldc,
                        sc, batch);
                char what[64];
                snprintf(what, sizeof what, "gemm ta=%d tb=%d bcast=%d", ta, tb, broadcast_b);
                dbuf_check(what, &C, GEMM_ATOL, GEMM_RTOL);
                dbuf_free(&A);
                dbuf_free(&B);
                dbuf_free(&C);
            }
        }
    }
}

static void test_norms(void) {
    const size_t N = 150; /* more than one 64-row chunk of the column sums */
    const int C = 300;    /* not a multiple of 32 */
    const size_t n = N * (size_t)C;
    const float eps = 1e-5f;
    dbuf x = dbuf_rand(n, 2.0f, 0.5f);
    dbuf w = dbuf_rand(C, 0.5f, 1.0f);
    dbuf bias = dbuf_rand(C, 0.5f, 0.0f);
    dbuf out = dbuf_zero(n), mean = dbuf_zero(N), rstd = dbuf_zero(N);

    rt_layernorm_fwd(g_cpu, rt_xf(out.c), mean.c, rstd.c, rt_xf(x.c), w.c, bias.c, N, C, eps);
    rt_layernorm_fwd(g_gpu, rt_xf(out.g), mean.g, rstd.g, rt_xf(x.g), w.g, bias.g, N, C, eps);
    dbuf_check("layernorm_fwd out", &out, ATOL, RTOL);
    dbuf_check("layernorm_fwd mean", &mean, ATOL, RTOL);
    dbuf_check("layernorm_fwd rstd", &rstd, ATOL, RTOL);
    rt_layernorm_fwd(g_cpu, rt_xf(out.c), mean.c, rstd.c, rt_xf(x.c), w.c, NULL, N, C, eps);
    rt_layernorm_fwd(g_gpu, rt_xf(out.g), mean.g, rstd.g, rt_xf(x.g), w.g, NULL, N, C, eps);
    dbuf_check("layernorm_fwd out (no bias)", &out, ATOL, RTOL);

    /* backward accumulates into non-zero gradients, from the same saved statistics */
    dbuf_sync_from_cpu(&mean);
    dbuf_sync_from_cpu(&rstd);
    dbuf dout = dbuf_rand(n, 1.0f, 0.0f);
    dbuf dx = dbuf_rand(n, 1.0f, 0.0f), dw = dbuf_rand(C, 1.0f, 0.0f), db = dbuf_rand(C, 1.0f, 0.0f);
    rt_layernorm_bwd(g_cpu, dx.c, dw.c, db.c, rt_xf(dout.c), rt_xf(x.c), w.c, mean.c, rstd.c, N, C);
    rt_layernorm_bwd(g_gpu, dx.g, dw.g, db.g, rt_xf(dout.g), rt_xf(x.g), w.g, mean.g, rstd.g, N, C);
    dbuf_check("layernorm_bwd dinp", &dx, ATOL, RTOL);
    dbuf_check("layernorm_bwd dweight", &dw, 1e-4f, RTOL);
    dbuf_check("layernorm_bwd dbias", &db, 1e-4f, RTOL);

    /* the same backward twice from zero gives the same bits */
    {
        dbuf dw1 = dbuf_zero(C), dw2 = dbuf_zero(C), dx1 = dbuf_zero(n);
        rt_layernorm_bwd(g_gpu, dx1.g, dw1.g, NULL, rt_xf(dout.g), rt_xf(x.g), w.g, mean.g, rstd.g, N, C);
        rt_layernorm_bwd(g_gpu, dx1.g, dw2.g, NULL, rt_xf(dout.g), rt_xf(x.g), w.g, mean.g, rstd.g, N, C);
        float *a = gpu_fetch(dw1.g, C), *b = gpu_fetch(dw2.g, C);
        TZ_EXPECT(memcmp(a, b, C * sizeof(float)) == 0, "layernorm_bwd dweight differs between runs");
        free(a);
        free(b);
        dbuf_free(&dw1);
        dbuf_free(&dw2);
        dbuf_free(&dx1);
    }

    rt_rmsnorm_fwd(g_cpu, rt_xf(out.c), rstd.c, rt_xf(x.c), w.c, N, C, eps);
    rt_rmsnorm_fwd(g_gpu, rt_xf(out.g), rstd.g, rt_xf(x.g), w.g, N, C, eps);
    dbuf_check("rmsnorm_fwd out", &out, ATOL, RTOL);
    dbuf_check("rmsnorm_fwd rstd", &rstd, ATOL, RTOL);
    dbuf_sync_from_cpu(&rstd);
    rt_rmsnorm_bwd(g_cpu, dx.c, dw.c, rt_xf(dout.c), rt_xf(x.c), w.c, rstd.c, N, C);
    rt_rmsnorm_bwd(g_gpu, dx.g, dw.g, rt_xf(dout.g), rt_xf(x.g), w.g, rstd.g, N, C);
    dbuf_check("rmsnorm_bwd dinp", &dx, ATOL, RTOL);
    dbuf_check("rmsnorm_bwd dweight", &dw, 1e-4f, RTOL);

    dbuf_free(&x);
    dbuf_free(&w);
    dbuf_free(&bias);
    dbuf_free(&out);
    dbuf_free(&mean);
    dbuf_free(&rstd);
    dbuf_free(&dout);
    dbuf_free(&dx);
    dbuf_free(&dw);
    dbuf_free(&db);
}

static void test_elementwise(void) {
    const size_t n = 1003;
    dbuf x = dbuf_rand(n, 4.0f, 0.0f), dout = dbuf_rand(n, 1.0f, 0.0f);
    dbuf y = dbuf_zero(n);
    static const struct {
        rt_act_kind kind;
        const char *name;
    } acts[] = {
        {RT_ACT_GELU_TANH, "gelu_tanh"}, {RT_ACT_GELU_ERF, "gelu_erf"}, {RT_ACT_RELU, "relu"}, {RT_ACT_TANH, "tanh"}};
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
        const rt_act_kind k = acts[a].kind;
        char what[64];
        rt_act_fwd(g_cpu, k, rt_xf(y.c), rt_xf(x.c), n);
        rt_act_fwd(g_gpu, k, rt_xf(y.g), rt_xf(x.g), n);
        snprintf(what, sizeof what, "act_fwd %s", acts[a].name);
        dbuf_check(what, &y, ATOL, RTOL);
        rt_act_bwd(g_cpu, k, rt_xf(y.c), rt_xf(x.c), rt_xf(dout.c), n);
        rt_act_bwd(g_gpu, k, rt_xf(y.g), rt_xf(x.g), rt_xf(dout.g), n);
        snprintf(what, sizeof what, "act_bwd %s", acts[a].name);
        dbuf_check(what, &y, ATOL, RTOL);
        /* gated (T5 v1.1): act(x) * dout as the linear half, then both gradients */
        rt_gated_act_fwd(g_cpu, k, rt_xf(y.c), rt_xf(x.c), rt_xf(dout.c), n);
        rt_gated_act_fwd(g_gpu, k, rt_xf(y.g), rt_xf(x.g), rt_xf(dout.g), n);
        snprintf(what, sizeof what, "gated_act_fwd %s", acts[a].name);
        dbuf_check(what, &y, ATOL, RTOL);
        dbuf dgate = dbuf_zero(n), dlin = dbuf_zero(n);
        rt_gated_act_bwd(g_cpu, k, rt_xf(dgate.c), rt_xf(dlin.c), rt_xf(x.c), rt_xf(dout.c), rt_xf(y.c), n);
        rt_gated_act_bwd(g_gpu, k, rt_xf(dgate.g), rt_xf(dlin.g), rt_xf(x.g), rt_xf(dout.g), rt_xf(y.g), n);
        snprintf(what, sizeof what, "gated_act_bwd %s dgate", acts[a].name);
        dbuf_check(what, &dgate, ATOL, RTOL);
        snprintf(what, sizeof what, "gated_act_bwd %s dlin", acts[a].name);
        dbuf_check(what, &dlin, ATOL, RTOL);
        dbuf_free(&dgate);
        dbuf_free(&dlin);
    }

    /* add with out aliasing a, then axpy and scale */
    rt_add(g_cpu, rt_xf(y.c), rt_xf(y.c), rt_xf(x.c), n);
    rt_add(g_gpu, rt_xf(y.g), rt_xf(y.g), rt_xf(x.g), n);
    dbuf_check("add", &y, ATOL, RTOL);
    rt_axpy(g_cpu, y.c, -0.3f, dout.c, n);
    rt_axpy(g_gpu, y.g, -0.3f, dout.g, n);
    dbuf_check("axpy", &y, ATOL, RTOL);
    rt_scale(g_cpu, y.c, 1.7f, n);
    rt_scale(g_gpu, y.g, 1.7f, n);
    dbuf_check("scale", &y, ATOL, RTOL);
    dbuf rw = dbuf_rand(17, 2.0f, -1.0f); /* 1003 = 17 rows of 59 */
    rt_scale_rows(g_cpu, rt_xf(y.c), rw.c, 17, 59);
    rt_scale_rows(g_gpu, rt_xf(y.g), rw.g, 17, 59);
    dbuf_check("scale_rows", &y, ATOL, RTOL);
    dbuf_free(&rw);

    const size_t N = 150;
    const int C = 77;
    dbuf m = dbuf_rand(N * C, 1.0f, 0.0f), bias = dbuf_rand(C, 1.0f, 0.0f);
    dbuf dbias = dbuf_rand(C, 1.0f, 0.0f);
    rt_add_bias(g_cpu, m.c, bias.c, N, C);
    rt_add_bias(g_gpu, m.g, bias.g, N, C);
    dbuf_check("add_bias", &m, ATOL, RTOL);
    rt_bias_bwd(g_cpu, dbias.c, rt_xf(m.c), N, C);
    rt_bias_bwd(g_gpu, dbias.g, rt_xf(m.g), N, C);
    dbuf_check("bias_bwd", &dbias, 1e-4f, RTOL);

    dbuf_free(&x);
    dbuf_free(&dout);
    dbuf_free(&y);
    dbuf_free(&m);
    dbuf_free(&bias);
    dbuf_free(&dbias);
}

static void test_dropout(void) {
    const size_t n = 10007;
    const float p = 0.3f;
    const uint64_t seed = 1234, stream = ((uint64_t)3 << 56) | 42u;
    dbuf x = dbuf_rand(n, 1.0f, 2.0f); /* in [1, 3): never 0, so 0 means dropped */
    dbuf y = dbuf_zero(n);
    rt_dropout_fwd(g_cpu, y.c, x.c, n, p, seed, stream, NULL);
    rt_dropout_fwd(g_gpu, y.g, x.g, n, p, seed, stream, NULL);
    float *hc, *hg;
    dbuf_fetch(&y, &hc, &hg);
    size_t differ = 0, dropped = 0;
    for (size_t i = 0; i < n; i++) {
        differ += (hc[i] == 0.0f) != (hg[i] == 0.0f);
        dropped += hg[i] == 0.0f;
    }
    TZ_EXPECT(differ == 0, "dropout masks differ at %zu of %zu elements", differ, n);
    TZ_EXPECT(dropped > n * 0.27 && dropped < n * 0.33, "dropped %zu of %zu at p=0.3", dropped, n);
    tz_check_close("dropout_fwd", hg, hc, n, ATOL, RTOL);
    free(hc);
    free(hg);

    /* backward in place (dinp aliasing dout) regenerates the same mask */
    rt_dropout_bwd(g_cpu, x.c, x.c, n, p, seed, stream, NULL);
    rt_dropout_bwd(g_gpu, x.g, x.g, n, p, seed, stream, NULL);
    dbuf_check("dropout_bwd", &x, ATOL, RTOL);
    float *hx = gpu_fetch(x.g, n), *hy = gpu_fetch(y.g, n);
    size_t mismatch = 0;
    for (size_t i = 0; i < n; i++) mismatch += (hx[i] == 0.0f) != (hy[i] == 0.0f);
    TZ_EXPECT(mismatch == 0, "dropout_bwd mask differs from fwd at %zu elements", mismatch);
    free(hx);
    free(hy);

    /* p = 0 is a copy */
    rt_dropout_fwd(g_cpu, y.c, x.c, n, 0.0f, seed, stream, NULL);
    rt_dropout_fwd(g_gpu, y.g, x.g, n, 0.0f, seed, stream, NULL);
    dbuf_check("dropout_fwd p=0", &y, 0.0f, 0.0f);
    /* p = 1 drops everything: zeros, not 0 * inf = nan from a 1/(1-p) scale */
    rt_dropout_fwd(g_cpu, y.c, x.c, n, 1.0f, seed, stream, NULL);
    rt_dropout_fwd(g_gpu, y.g, x.g, n, 1.0f, seed, stream, NULL);
    dbuf_check("dropout_fwd p=1", &y, 0.0f, 0.0f);
    float *h1 = gpu_fetch(y.g, n);
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += h1[i] != 0.0f; /* a nan counts too */
    TZ_EXPECT(nonzero == 0, "dropout p=1 left %zu of %zu elements nonzero", nonzero, n);
    free(h1);
    /* the step's part of the stream from device memory (a step graph's replay): the whole
     * stream's mask, fwd and cols alike */
    const uint64_t at0 = ((uint64_t)3 << 56) | 42u, step = (uint64_t)9 << 20;
    uint64_t *step_g = NULL;
    TZ_EXPECT_OK(rt_backend_alloc(g_gpu, sizeof step, "the step", (void **)&step_g));
    if (step_g) {
        rt_to_device(g_gpu, step_g, &step, sizeof step);
        rt_dropout_fwd(g_cpu, y.c, x.c, n, p, seed, at0 + step, NULL);
        rt_dropout_fwd(g_gpu, y.g, x.g, n, p, seed, at0, step_g);
        dbuf_check("dropout_fwd, the step from device memory", &y, ATOL, RTOL);
        rt_dropout_cols(g_cpu, rt_xf(y.c), rt_xf(x.c), 10, 500, 1000, 250, p, seed, at0 + step, NULL);
        rt_dropout_cols(g_gpu, rt_xf(y.g), rt_xf(x.g), 10, 500, 1000, 250, p, seed, at0, step_g);
        dbuf_check("dropout_cols, the step from device memory", &y, ATOL, RTOL);
        rt_free_device(g_gpu, step_g);
    }
    dbuf_free(&x);
    dbuf_free(&y);
}

/* Dropout on a column block (a tensor-parallel FFN shard): the CPU's bits, and on the GPU
 * the columns dropout_fwd drops in the whole matrix. Every fourth row of a 75-column block starts
 * 16-byte aligned; at offset 100 its stream index is on a Philox block too, so those rows go in
 * packs of eight with a tail of three, at offset 150 by Philox blocks (rt_cuda_drop_walk). */
static void test_dropout_cols(int offset) {
    const size_t rows = 37;
    const int total = 300, cols = 75;
    const float p = 0.3f;
    const uint64_t seed = 77, stream = ((uint64_t)3 << 56) | 7u;
    dbuf full = dbuf_rand(rows * total, 1.0f, 2.0f), full_y = dbuf_zero(rows * total);
    dbuf x = dbuf_rand(rows * cols, 1.0f, 2.0f), y = dbuf_zero(rows * cols);
    rt_dropout_cols(g_cpu, rt_xf(y.c), rt_xf(x.c), rows, cols, total, offset, p, seed, stream, NULL);
    rt_dropout_cols(g_gpu, rt_xf(y.g), rt_xf(x.g), rows, cols, total, offset, p, seed, stream, NULL);
    char what[64];
    snprintf(what, sizeof what, "dropout_cols at column %d", offset);
    dbuf_check(what, &y, 0.0f, 0.0f);
    rt_dropout_fwd(g_gpu, full_y.g, full.g, rows * total, p, seed, stream, NULL);
    float *hf = gpu_fetch(full_y.g, rows * total), *hy = gpu_fetch(y.g, rows * cols);
    size_t differ = 0;
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) differ += (hf[r * total + offset + c] == 0.0f) != (hy[r * cols + c] == 0.0f);
    TZ_EXPECT(differ == 0, "dropout_cols at column %d: %zu elements differ from dropout_fwd's columns", offset, differ);
    free(hf);
    free(hy);
    dbuf_free(&full);
    dbuf_free(&full_y);
    dbuf_free(&x);
    dbuf_free(&y);
}

/* T5's relative position bias: the gather is exact, the scatter-add close to the CPU's and the
 * same bits when run twice. */
static void test_relbias(void) {
    const int NH = 6, Tq = 33, Tk = 41, NB = 32;
    int32_t *hb = rt_xmalloc((size_t)Tq * Tk * sizeof(int32_t));
    for (int i = 0; i < Tq; i++)
        for (int j = 0; j < Tk; j++) {
            int d = j - i, a = d < 0 ? -d : d;
            hb[i * Tk + j] = (d > 0 ? NB / 2 : 0) + (a < NB / 2 ? a : NB / 2 - 1);
        }
    ibuf buckets = ibuf_from(hb, (size_t)Tq * Tk);
    dbuf table = dbuf_rand((size_t)NB * NH, 1.0f, 0.0f), bias = dbuf_zero((size_t)NH * Tq * Tk);
    rt_relbias_fwd(g_cpu, bias.c, table.c, buckets.c, NH, Tq, Tk, NB);
    rt_relbias_fwd(g_gpu, bias.g, table.g, buckets.g, NH, Tq, Tk, NB);
    dbuf_check("relbias_fwd", &bias, 0.0f, 0.0f);
    dbuf dbias = dbuf_rand((size_t)NH * Tq * Tk, 1.0f, 0.0f), dt = dbuf_rand((size_t)NB * NH, 1.0f, 0.0f);
    dbuf dt2 = dbuf_zero((size_t)NB * NH);
    rt_copy(g_gpu, dt2.g, dt.g, dt.n * sizeof(float));
    rt_relbias_bwd(g_cpu, dt.c, dbias.c, buckets.c, NH, Tq, Tk, NB);
    rt_relbias_bwd(g_gpu, dt.g, dbias.g, buckets.g, NH, Tq, Tk, NB);
    dbuf_check("relbias_bwd (accumulates)", &dt, 1e-4f, RTOL);
    rt_relbias_bwd(g_gpu, dt2.g, dbias.g, buckets.g, NH, Tq, Tk, NB);
    float *h1 = gpu_fetch(dt.g, dt.n), *h2 = gpu_fetch(dt2.g, dt.n);
    TZ_EXPECT(memcmp(h1, h2, dt.n * sizeof(float)) == 0, "relbias_bwd differs between runs");
    free(h1);
    free(h2);
    free(hb);
    ibuf_free(&buckets);
    dbuf_free(&table);
    dbuf_free(&bias);
    dbuf_free(&dbias);
    dbuf_free(&dt);
    dbuf_free(&dt2);
}

/* One attention configuration forward and backward on both backends. When fused, q/k/v
 * (and dq/dk/dv) are views into one (B, T, 3*NH*HS) buffer as a fused QKV projection gives. */
typedef struct {
    const char *name;
    int B, NH, Tq, Tk, HS;
    bool causal, fused, use_mask, use_bias;
    int masked_batch; /* batch whose keys are all -inf, or -1 */
    float dropout_p;
    bool use_prefix; /* GLM: batch b sees keys j < 2 + 5b whatever the query */
} attn_case;

static void test_attention_case(const attn_case *tc) {
    const int B = tc->B, NH = tc->NH, Tq = tc->Tq, Tk = tc->Tk, HS = tc->HS, C = NH * HS;
    rt_attn_desc d;
    memset(&d, 0, sizeof d);
    d.B = B;
    d.NH = NH;
    d.Tq = Tq;
    d.Tk = Tk;
    d.HS = HS;
    d.scale = 1.0f / sqrtf((float)HS);
    d.causal = tc->causal;
    d.dropout_p = tc->dropout_p;
    d.seed = 777;
    d.stream = ((uint64_t)3 << 56) | 5u;

    size_t nq, nk, nv;
    dbuf qkv = {0}, qb = {0}, kb = {0}, vb = {0}, dqkv = {0}, dqb = {0}, dkb = {0}, dvb = {0};
    const float *qc, *kc, *vc, *qg, *kg, *vg;
    float *dqc, *dkc, *dvc, *dqg, *dkg, *dvg;
    if (tc->fused) {
        d.ldq = d.ldk = d.ldv = (size_t)3 * C;
        size_t n = (size_t)B * Tq * 3 * C;
        qkv = dbuf_rand(n, 1.0f, 0.0f);
        dqkv = dbuf_zero(n);
        qc = qkv.c, kc = qkv.c + C, vc = qkv.c + 2 * C;
        qg = qkv.g, kg = qkv.g + C, vg = qkv.g + 2 * C;
        dqc = dqkv.c, dkc = dqkv.c + C, dvc = dqkv.c + 2 * C;
        dqg = dqkv.g, dkg = dqkv.g + C, dvg = dqkv.g + 2 * C;
    } else {
        /* padded rows: ld larger than NH*HS, and the padding must stay untouched */
        d.ldq = (size_t)C + 3;
        d.ldk = (size_t)C + 1;
        d.ldv = (size_t)C + 5;
        nq = (size_t)B * Tq * d.ldq;
        nk = (size_t)B * Tk * d.ldk;
        nv = (size_t)B * Tk * d.ldv;
        qb = dbuf_rand(nq, 1.0f, 0.0f);
        kb = dbuf_rand(nk, 1.0f, 0.0f);
        vb = dbuf_rand(nv, 1.0f, 0.0f);
        dqb = dbuf_zero(nq);
        dkb = dbuf_zero(nk);
        dvb = dbuf_zero(nv);
        qc = qb.c, kc = kb.c, vc = vb.c, qg = qb.g, kg = kb.g, vg = vb.g;
        dqc = dqb.c, dkc = dkb.c, dvc = dvb.c, dqg = dqb.g, dkg = dkb.g, dvg = dvb.g;
    }
    d.ldo = (size_t)C + (tc->fused ? 0 : 2);
    size_t no = (size_t)B * Tq * d.ldo;
    dbuf out = dbuf_zero(no), dout = dbuf_rand(no, 1.0f, 0.0f);
    dbuf probs = dbuf_zero((size_t)B * NH * Tq * Tk);

    dbuf mask = {0}, bias = {0}, dbias = {0};
    if (tc->use_mask) {
        float *h = tz_attention_key_mask(B, Tk, tc->masked_batch);
        mask = dbuf_from(h, (size_t)B * Tk);
        free(h);
    }
    if (tc->use_bias) {
        bias = dbuf_rand((size_t)NH * Tq * Tk, 1.0f, 0.0f);
        dbias = dbuf_rand((size_t)NH * Tq * Tk, 1.0f, 0.0f);
    }

    int32_t prefix_h[8];
    for (int b = 0; b < 8; b++) prefix_h[b] = 2 + 5 * b;
    ibuf prefix = {0};
    if (tc->use_prefix) prefix = ibuf_from(prefix_h, (size_t)B);
    rt_attn_desc dc = d, dg = d;
    dc.prefix = prefix.c;
    dg.prefix = prefix.g;
    dc.key_mask = mask.c;
    dg.key_mask = mask.g;
    dc.bias = bias.c;
    dg.bias = bias.g;
    rt_attention_fwd(g_cpu, &dc, rt_xf(out.c), probs.c, rt_xf(qc), rt_xf(kc), rt_xf(vc));
    rt_attention_fwd(g_gpu, &dg, rt_xf(out.g), probs.g, rt_xf(qg), rt_xf(kg), rt_xf(vg));
    char what[128];
    snprintf(what, sizeof what, "attention_fwd %s out", tc->name);
    dbuf_check(what, &out, ATTN_ATOL, ATTN_RTOL);
    snprintf(what, sizeof what, "attention_fwd %s probs", tc->name);
    dbuf_check(what, &probs, ATTN_ATOL, ATTN_RTOL);

    /* backward from the CPU's probabilities on both, so it is tested on its own */
    dbuf_sync_from_cpu(&probs);
    rt_attention_bwd(g_cpu, &dc, rt_xf(dqc), rt_xf(dkc), rt_xf(dvc), dbias.c, rt_xf(dout.c), probs.c, rt_xf(qc),
                     rt_xf(kc), rt_xf(vc));
    rt_attention_bwd(g_gpu, &dg, rt_xf(dqg), rt_xf(dkg), rt_xf(dvg), dbias.g, rt_xf(dout.g), probs.g, rt_xf(qg),
                     rt_xf(kg), rt_xf(vg));
    if (tc->fused) {
        snprintf(what, sizeof what, "attention_bwd %s dqkv", tc->name);
        dbuf_check(what, &dqkv, ATTN_ATOL, ATTN_RTOL);
    } else {
        snprintf(what, sizeof what, "attention_bwd %s dq", tc->name);
        dbuf_check(what, &dqb, ATTN_ATOL, ATTN_RTOL);
        snprintf(what, sizeof what, "attention_bwd %s dk", tc->name);
        dbuf_check(what, &dkb, ATTN_ATOL, ATTN_RTOL);
        snprintf(what, sizeof what, "attention_bwd %s dv", tc->name);
        dbuf_check(what, &dvb, ATTN_ATOL, ATTN_RTOL);
    }
    if (tc->use_bias) {
        snprintf(what, sizeof what, "attention_bwd %s dbias", tc->name);
        dbuf_check(what, &dbias, ATTN_ATOL, ATTN_RTOL);
    }

    if (tc->fused) {
        dbuf_free(&qkv);
        dbuf_free(&dqkv);
    } else {
        dbuf_free(&qb);
        dbuf_free(&kb);
        dbuf_free(&vb);
        dbuf_free(&dqb);
        dbuf_free(&dkb);
        dbuf_free(&dvb);
    }
    dbuf_free(&out);
    dbuf_free(&dout);
    dbuf_free(&probs);
    if (tc->use_mask) dbuf_free(&mask);
    if (tc->use_prefix) ibuf_free(&prefix);
    if (tc->use_bias) {
        dbuf_free(&bias);
        dbuf_free(&dbias);
    }
}

static void test_attention(void) {
    static const attn_case cases[] = {
        /* GPT-2 style: causal, fused qkv, no dropout */
        {"causal fused", 2, 3, 17, 17, 8, true, true, false, false, -1, 0.0f, false},
        /* GPT-2 training: causal with dropout and a padding mask */
        {"causal dropout mask", 2, 2, 33, 33, 16, true, true, true, false, -1, 0.1f, false},
        /* T5 cross-attention: Tq != Tk, padded lds, mask, position bias, dropout */
        {"cross bias dropout", 2, 2, 5, 19, 16, false, false, true, true, -1, 0.2f, false},
        /* a batch whose keys are all masked: zero probabilities, output and gradients */
        {"fully masked", 2, 2, 4, 6, 8, false, false, true, true, 1, 0.0f, false},
        /* GLM: a bidirectional prefix per batch row, then causal, with dropout */
        {"glm prefix dropout", 2, 2, 13, 13, 8, true, true, false, false, -1, 0.1f, true},
        /* T5's decoder self-attention: causal with the position bias, a mask and dropout */
        {"causal bias", 3, 2, 11, 11, 8, true, false, true, true, -1, 0.1f, false},
        /* cached decoding: one query against the keys so far */
        {"decode Tq 1", 4, 2, 1, 9, 16, false, false, true, true, -1, 0.0f, false},
        /* the real models' head size, and a batch above 2 */
        {"head 64 batch 4", 4, 2, 16, 16, 64, true, true, true, false, -1, 0.1f, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_attention_case(&cases[i]);
}

static void test_embedding(void) {
    const size_t N = 50;
    const int C = 37, V = 40, vocab_start = 10;
    int32_t ids[50];
    for (size_t i = 0; i < N; i++) ids[i] = (int32_t)((frand() + 1.0f) * 30.0f); /* [0, 60): some outside the shard */
    ids[3] = ids[7] = ids[11] = 25;                                              /* repeats accumulate */
    ids[5] = -1;                                                                 /* padding id */
    ibuf id = ibuf_from(ids, N);
    dbuf table = dbuf_rand((size_t)V * C, 1.0f, 0.0f);
    dbuf out = dbuf_rand(N * C, 1.0f, 0.0f);

    rt_embedding_fwd(g_cpu, out.c, id.c, table.c, N, C, vocab_start, V, true);
    rt_embedding_fwd(g_gpu, out.g, id.g, table.g, N, C, vocab_start, V, true);
    dbuf_check("embedding_fwd accumulate", &out, ATOL, RTOL);
    rt_embedding_fwd(g_cpu, out.c, id.c, table.c, N, C, vocab_start, V, false);
    rt_embedding_fwd(g_gpu, out.g, id.g, table.g, N, C, vocab_start, V, false);
    dbuf_check("embedding_fwd", &out, 0.0f, 0.0f);

    dbuf dout = dbuf_rand(N * C, 1.0f, 0.0f);
    dbuf dtable = dbuf_rand((size_t)V * C, 1.0f, 0.0f);
    rt_embedding_bwd(g_cpu, dtable.c, dout.c, id.c, N, C, vocab_start, V);
    rt_embedding_bwd(g_gpu, dtable.g, dout.g, id.g, N, C, vocab_start, V);
    /* same ids in the same order: the same sums in the same order as the CPU */
    dbuf_check("embedding_bwd", &dtable, 0.0f, 0.0f);

    /* gather / scatter rows of a (10, C) matrix, with a repeated index */
    int32_t idx[7] = {3, 0, 9, 3, 5, 3, 1};
    ibuf ix = ibuf_from(idx, 7);
    dbuf src = dbuf_rand((size_t)10 * C, 1.0f, 0.0f), rows = dbuf_zero((size_t)7 * C);
    rt_gather_rows(g_cpu, rows.c, src.c, ix.c, 7, C);
    rt_gather_rows(g_gpu, rows.g, src.g, ix.g, 7, C);
    dbuf_check("gather_rows", &rows, 0.0f, 0.0f);
    rt_scatter_rows_add(g_cpu, src.c, rt_xf(rows.c), ix.c, 7, C);
    rt_scatter_rows_add(g_gpu, src.g, rt_xf(rows.g), ix.g, 7, C);
    dbuf_check("scatter_rows_add", &src, 0.0f, 0.0f);

    ibuf_free(&id);
    ibuf_free(&ix);
    dbuf_free(&table);
    dbuf_free(&out);
    dbuf_free(&dout);
    dbuf_free(&dtable);
    dbuf_free(&src);
    dbuf_free(&rows);
}

static void test_xent(void) {
    const size_t N = 9;
    const int V = 1237;
    int32_t t[9] = {0, 5, -100, 1236, 77, -100, 600, 3, 1000};
    ibuf tg = ibuf_from(t, N);
    dbuf logits = dbuf_rand(N * V, 3.0f, 0.0f);
    dbuf losses = dbuf_zero(N), dlogits = dbuf_zero(N * V), probs = dbuf_zero(N * V);
    rt_softmax_xent(g_cpu, losses.c, dlogits.c, probs.c, logits.c, tg.c, N, V, 0.5f);
    rt_softmax_xent(g_gpu, losses.g, dlogits.g, probs.g, logits.g, tg.g, N, V, 0.5f);
    dbuf_check("softmax_xent losses", &losses, ATOL, RTOL);
    dbuf_check("softmax_xent dlogits", &dlogits, ATOL, RTOL);
    dbuf_check("softmax_xent probs", &probs, ATOL, RTOL);

    /* dlogits aliasing logits gives the same result as separate buffers */
    float *sep = gpu_fetch(dlogits.g, N * V);
    rt_softmax_xent(g_gpu, losses.g, logits.g, NULL, logits.g, tg.g, N, V, 0.5f);
    float *alias = gpu_fetch(logits.g, N * V);
    tz_check_close("softmax_xent aliased dlogits", alias, sep, N * V, 0.0f, 0.0f);
    free(sep);
    free(alias);
    ibuf_free(&tg);
    dbuf_free(&logits);
    dbuf_free(&losses);
    dbuf_free(&dlogits);
    dbuf_free(&probs);
}

/* The regression head's squared error, bit for bit (the same float operations), NaN targets
 * unlabelled, with the targets read from dlogits as the heads pass them. */
static void test_mse_loss(void) {
    const size_t N = 300;
    float *t = host_rand(N, 2.0f, 0.0f);
    for (size_t i = 0; i < N; i += 7) t[i] = NAN;
    dbuf z = dbuf_rand(N, 2.0f, 0.0f), dl = dbuf_from(t, N), losses = dbuf_zero(N);
    rt_mse_loss(g_cpu, losses.c, dl.c, z.c, dl.c, N, 0.25f);
    rt_mse_loss(g_gpu, losses.g, dl.g, z.g, dl.g, N, 0.25f);
    dbuf_check_bits("mse_loss losses", &losses);
    dbuf_check_bits("mse_loss dlogits", &dl);
    free(t);
    dbuf_free(&z), dbuf_free(&dl), dbuf_free(&losses);
}

/* The multi-label head's binary cross-entropy against the CPU's: the same float formula, with
 * expf and log1pf that may differ from the host's libm by an ulp or two. Hence rtol 1e-6 (8
 * ulps); losses' atol 1e-6 bounds a z - (z - log1p(e)) that rounds the other way (an ulp of
 * |z| <= 20, over C); dlogits' atol 4 ulps of 1 times grad_scale / C, sigmoid(z) - 1 cancelling.
 * NaN rows unlabelled, saturated logits (+-30, +-100), soft targets; the targets read from
 * dlogits as the heads pass them give the separate buffers' bits. */
static void test_bce_logits_loss(void) {
    const size_t N = 200;
    const int C = 7;
    const size_t n = N * (size_t)C;
    const float gs = 0.25f, big[4] = {30.0f, -30.0f, 100.0f, -100.0f};
    float *t = host_rand(n, 0.5f, 0.5f), *zh = host_rand(n, 20.0f, 0.0f);
    for (size_t i = 0; i < n; i++) t[i] = t[i] > 0.5f ? 1.0f : 0.0f;
    for (size_t i = 0; i < N; i += 9) t[i * (size_t)C] = NAN;
    for (size_t i = 1; i < n; i += 11) zh[i] = big[(i / 11) % 4];
    for (size_t i = 3; i < n; i += 13)
        if (!isnan(t[i])) t[i] = 0.25f;
    dbuf z = dbuf_from(zh, n), y = dbuf_from(t, n), dl = dbuf_zero(n), losses = dbuf_zero(N);
    rt_bce_logits_loss(g_cpu, losses.c, dl.c, z.c, y.c, N, C, gs);
    rt_bce_logits_loss(g_gpu, losses.g, dl.g, z.g, y.g, N, C, gs);
    dbuf_check("bce_logits_loss losses", &losses, 1e-6f, 1e-6f);
    dbuf_check("bce_logits_loss dlogits", &dl, 4 * FLT_EPSILON * gs / C, 1e-6f);

    float *sep_l = gpu_fetch(losses.g, N), *sep_d = gpu_fetch(dl.g, n);
    rt_bce_logits_loss(g_gpu, losses.g, y.g, z.g, y.g, N, C, gs);
    float *ali_l = gpu_fetch(losses.g, N), *ali_d = gpu_fetch(y.g, n);
    tz_check_close("bce_logits_loss aliased losses", ali_l, sep_l, N, 0.0f, 0.0f);
    tz_check_close("bce_logits_loss aliased dlogits", ali_d, sep_d, n, 0.0f, 0.0f);
    free(t), free(zh), free(sep_l), free(sep_d), free(ali_l), free(ali_d);
    dbuf_free(&z), dbuf_free(&y), dbuf_free(&dl), dbuf_free(&losses);
}

/* The vocab-parallel cross-entropy's three phases over two vocab shards, the shards' statistics
 * combined on the host as the all-reduces would: every phase's output against the CPU's. */
static void test_xent_vocab(void) {
    const size_t N = 7;
    const int halves[2] = {300, 313}, starts[2] = {0, 300}; /* a vocab of 613 */
    int32_t t[7] = {0, 299, 300, -100, 612, 17, 450};
    ibuf tg = ibuf_from(t, N);
    dbuf logits[2], dlogits[2], stats[2], losses = dbuf_zero(N);
    /* shard 1's last 13 columns are vocab padding, masked as the LM head masks them */
    float mask_h[313] = {0};
    for (int j = 300; j < 313; j++) mask_h[j] = -1e30f;
    dbuf mask = dbuf_zero(313);
    rt_to_device(g_cpu, mask.c, mask_h, sizeof mask_h);
    rt_to_device(g_gpu, mask.g, mask_h, sizeof mask_h);
    for (int r = 0; r < 2; r++) {
        logits[r] = dbuf_rand(N * (size_t)halves[r], 3.0f, 0.0f);
        dlogits[r] = dbuf_zero(N * (size_t)halves[r]);
        stats[r] = dbuf_zero(3 * N);
    }
    char what[96];
    for (int phase = 0; phase < 3; phase++) {
        for (int r = 0; r < 2; r++) {
            rt_xent_vocab(g_cpu, phase, stats[r].c, losses.c, rt_xf(dlogits[r].c), rt_xf(logits[r].c),
                          r ? mask.c : NULL, tg.c, N, halves[r], starts[r], 0.5f);
            rt_xent_vocab(g_gpu, phase, stats[r].g, losses.g, rt_xf(dlogits[r].g), rt_xf(logits[r].g),
                          r ? mask.g : NULL, tg.g, N, halves[r], starts[r], 0.5f);
        }
        if (phase == 2) break;
        for (int r = 0; r < 2; r++) {
            snprintf(what, sizeof what, "xent_vocab phase %d, shard %d: stats", phase, r);
            dbuf_check(what, &stats[r], ATOL, RTOL);
        }
        /* the all-reduce: MAX over [0, N) and SUM over [N, 2N) after phase 0, SUM over [2N, 3N) after 1 */
        float *h[2];
        for (int r = 0; r < 2; r++) h[r] = gpu_fetch(stats[r].g, 3 * N);
        for (size_t i = 0; i < N; i++) {
            if (phase == 0) {
                h[0][i] = h[0][i] > h[1][i] ? h[0][i] : h[1][i];
                h[0][N + i] += h[1][N + i];
            } else {
                h[0][2 * N + i] += h[1][2 * N + i];
            }
        }
        for (int r = 0; r < 2; r++) {
            rt_to_device(g_cpu, stats[r].c, h[0], 3 * N * sizeof(float));
            rt_to_device(g_gpu, stats[r].g, h[0], 3 * N * sizeof(float));
        }
        free(h[0]);
        free(h[1]);
    }
    dbuf_check("xent_vocab losses", &losses, ATOL, RTOL);
    dbuf_free(&mask);
    for (int r = 0; r < 2; r++) {
        snprintf(what, sizeof what, "xent_vocab dlogits, shard %d", r);
        dbuf_check(what, &dlogits[r], ATOL, RTOL);
        dbuf_free(&logits[r]);
        dbuf_free(&dlogits[r]);
        dbuf_free(&stats[r]);
    }
    dbuf_free(&losses);
    ibuf_free(&tg);
}

static void test_adamw(void) {
    const size_t n = 5000;
    dbuf p = dbuf_rand(n, 1.0f, 0.0f), m = dbuf_zero(n), v = dbuf_zero(n);
    for (int step = 1; step <= 3; step++) {
        dbuf g = dbuf_rand(n, 0.1f, 0.0f);
        float beta1 = step == 3 ? 0.3f : 0.9f; /* 0.3 takes torch's other lerp branch */
        rt_adamw(g_cpu, p.c, g.c, m.c, v.c, n, 1e-3f, beta1, 0.999f, 1e-8f, 0.01f, 0.8f, step);
        rt_adamw(g_gpu, p.g, g.g, m.g, v.g, n, 1e-3f, beta1, 0.999f, 1e-8f, 0.01f, 0.8f, step);
        dbuf_free(&g);
    }
    /* a slice one float in (as a ZeRO shard may start), off the 16-byte packs, with a tail */
    dbuf g = dbuf_rand(n, 0.1f, 0.0f);
    rt_adamw(g_cpu, p.c + 1, g.c + 1, m.c + 1, v.c + 1, n - 4, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.8f, 4);
    rt_adamw(g_gpu, p.g + 1, g.g + 1, m.g + 1, v.g + 1, n - 4, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.8f, 4);
    dbuf_free(&g);
    dbuf_check("adamw params", &p, ATOL, RTOL);
    dbuf_check("adamw m", &m, ATOL, RTOL);
    dbuf_check("adamw v", &v, 1e-7f, RTOL);
    dbuf_free(&p);
    dbuf_free(&m);
    dbuf_free(&v);
}

/* The step on the device (rt_step_state): sumsq_into onto a running sum, step_finish, and
 * adamw_step for both decay groups, against the CPU's; the norm within sumsq's tolerance, the
 * factor and skip decision from it, the update as adamw's; then a gradient with an inf: skipped,
 * weights and moments unchanged on the GPU. */
static void test_step_state(void) {
    const size_t n = 70001;
    dbuf p = dbuf_rand(n, 1.0f, 0.0f), m = dbuf_zero(n), v = dbuf_zero(n), g = dbuf_rand(n, 0.1f, 0.0f);
    rt_step_state *sc = be_alloc(g_cpu, sizeof *sc), *sg = be_alloc(g_gpu, sizeof *sg), h[2];
    const rt_adamw_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    for (int inf = 0; inf < 2; inf++) {
        if (inf) {
            const float bad = INFINITY;
            rt_to_device(g_cpu, g.c + 7, &bad, sizeof bad);
            rt_to_device(g_gpu, g.g + 7, &bad, sizeof bad);
        }
        for (int k = 0; k < 2; k++) {
            rt_backend *be = k ? g_gpu : g_cpu;
            rt_step_state *s = k ? sg : sc;
            rt_step_scalars(&h[k], &hp, 1 + inf);
            h[k].sumsq = 0.5; /* what an earlier part of the slab added */
            rt_to_device(be, s, &h[k], sizeof h[k]);
            be->ops->sumsq_into(be->ctx, s, k ? g.g : g.c, n);
            be->ops->step_finish(be->ctx, s, 1.0, 4.0);
            be->ops->adamw_step(be->ctx, s, 0, k ? p.g : p.c, k ? g.g : g.c, k ? m.g : m.c, k ? v.g : v.c, n / 2);
            be->ops->adamw_step(be->ctx, s, 1, (k ? p.g : p.c) + n / 2, (k ? g.g : g.c) + n / 2,
                                (k ? m.g : m.c) + n / 2, (k ? v.g : v.c) + n / 2, n - n / 2);
            rt_to_host(be, &h[k], s, sizeof h[k]);
        }
        TZ_EXPECT(h[1].skip == inf && h[0].skip == inf, "step %d: skip cpu %d cuda %d, want %d", inf + 1, h[0].skip,
                  h[1].skip, inf);
        if (!inf)
            TZ_EXPECT(fabs(h[1].norm - h[0].norm) <= 1e-9 * h[0].norm &&
                          fabsf(h[1].coef - h[0].coef) <= 1e-6f * h[0].coef,
                      "step state: norm cuda %.17g cpu %.17g, coef cuda %.9g cpu %.9g", h[1].norm, h[0].norm,
                      (double)h[1].coef, (double)h[0].coef);
        dbuf_check(inf ? "adamw_step params after a skipped step" : "adamw_step params", &p, ATOL, RTOL);
        dbuf_check(inf ? "adamw_step m after a skipped step" : "adamw_step m", &m, ATOL, RTOL);
        dbuf_check(inf ? "adamw_step v after a skipped step" : "adamw_step v", &v, 1e-7f, RTOL);
    }
    /* the heads' losses onto the step's loss (one block's fixed tree on the GPU, in order on the CPU) */
    for (int k = 0; k < 2; k++) {
        rt_backend *be = k ? g_gpu : g_cpu;
        rt_step_state *s = k ? sg : sc;
        h[k].loss = 2.0;
        rt_to_device(be, s, &h[k], sizeof h[k]);
        be->ops->loss_into(be->ctx, &s->loss, k ? p.g : p.c, 3001);
        rt_to_host(be, &h[k], s, sizeof h[k]);
    }
    TZ_EXPECT(fabs(h[1].loss - h[0].loss) <= 1e-12 * fabs(h[0].loss), "loss_into: cuda %.17g cpu %.17g", h[1].loss,
              h[0].loss);
    rt_free_device(g_cpu, sc), rt_free_device(g_gpu, sg);
    dbuf_free(&p), dbuf_free(&m), dbuf_free(&v), dbuf_free(&g);
}

static void test_sumsq(void) {
    const size_t sizes[] = {1, 1000, 1000003};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        dbuf x = dbuf_rand(n, 1.0f, 0.0f);
        double c = rt_sumsq(g_cpu, x.c, n);
        double g = rt_sumsq(g_gpu, x.g, n);
        double g2 = rt_sumsq(g_gpu, x.g, n);
        TZ_EXPECT(fabs(g - c) <= 1e-9 * fabs(c), "sumsq n=%zu: cuda %.17g cpu %.17g", n, g, c);
        TZ_EXPECT(g == g2, "sumsq n=%zu differs between runs: %.17g %.17g", n, g, g2);
        dbuf_free(&x);
    }
}

/* The compute precisions (rt_set_precision) at the same rounding points on both backends:
 * round_to is the same bits (both round to nearest even; fp16 overflows to inf), the clamp and
 * its backward are exact, and the matmul (16-bit inputs, fp32 sums, C stored in the type) and
 * stored activations agree within one unit of the type (sums in another order may round the
 * other way) on top of the fp32 tolerances. bf16 is skipped on a GPU older than sm_80. */
static void test_precision(void) {
    for (int d = 0; d < 2; d++) {
        const rt_dtype dtype = d ? RT_F16 : RT_BF16;
        const float unit = d ? 1.0f / 1024 : 1.0f / 128; /* two rounding steps of the type, relative */
        rt_status st = rt_set_precision(g_gpu, dtype);
        if (st == RT_ERR_UNSUPPORTED) {
            printf("test_cuda_ops: %s skipped: %s\n", rt_dtype_name(dtype), rt_error_message());
            continue;
        }
        TZ_EXPECT_OK(st);
        TZ_EXPECT_OK(rt_set_precision(g_cpu, dtype));
        char what[96];
        /* round_to over a strided block, values past fp16's range included */
        dbuf X = dbuf_rand(40 * 33, 80000.0f, 0.0f);
        g_cpu->ops->round_to(g_cpu->ctx, dtype, X.c, 40, 30, 33);
        g_gpu->ops->round_to(g_gpu->ctx, dtype, X.g, 40, 30, 33);
        snprintf(what, sizeof what, "%s round_to", rt_dtype_name(dtype));
        dbuf_check_bits(what, &X);
        /* fp16's inf among them: clamped on both */
        const bool inf = dtype == RT_F16;
        TZ_EXPECT(rt_clamp_inf(g_cpu, rt_xf(X.c), X.n, 64504.0f) == inf, "%s: the CPU's clamp_inf",
                  rt_dtype_name(dtype));
        TZ_EXPECT(rt_clamp_inf(g_gpu, rt_xf(X.g), X.n, 64504.0f) == inf, "%s: CUDA's clamp_inf", rt_dtype_name(dtype));
        snprintf(what, sizeof what, "%s clamp_inf", rt_dtype_name(dtype));
        dbuf_check_bits(what, &X);
        dbuf dX = dbuf_rand(X.n, 1.0f, 0.0f);
        rt_clamp_abs_bwd(g_cpu, dX.c, rt_xf(X.c), X.n, 64504.0f);
        rt_clamp_abs_bwd(g_gpu, dX.g, rt_xf(X.g), X.n, 64504.0f);
        snprintf(what, sizeof what, "%s clamp_abs_bwd", rt_dtype_name(dtype));
        dbuf_check_bits(what, &dX);
        /* the matmul, a model's shapes: (N, K) x (N_out, K)^T */
        const int M = 64, N = 96, K = 200;
        dbuf A = dbuf_rand((size_t)M * K, 1.0f, 0.0f), B = dbuf_rand((size_t)N * K, 0.1f, 0.0f);
        dbuf C = dbuf_zero((size_t)M * N);
        rt_gemm(g_cpu, false, true, M, N, K, 1.0f, rt_xf(A.c), K, 0, rt_xf(B.c), K, 0, 0.0f, rt_xf(C.c), N, 0, 1);
        rt_gemm(g_gpu, false, true, M, N, K, 1.0f, rt_xf(A.g), K, 0, rt_xf(B.g), K, 0, 0.0f, rt_xf(C.g), N, 0, 1);
        snprintf(what, sizeof what, "%s gemm", rt_dtype_name(dtype));
        dbuf_check(what, &C, GEMM_ATOL, unit);
        /* stored activations: GELU and LayerNorm outputs */
        dbuf G = dbuf_zero(A.n), mean = dbuf_zero(M), rstd = dbuf_zero(M), W = dbuf_rand(K, 0.5f, 1.0f),
             bias = dbuf_rand(K, 0.1f, 0.0f);
        rt_act_fwd(g_cpu, RT_ACT_GELU_TANH, rt_xf(G.c), rt_xf(A.c), A.n);
        rt_act_fwd(g_gpu, RT_ACT_GELU_TANH, rt_xf(G.g), rt_xf(A.g), A.n);
        snprintf(what, sizeof what, "%s gelu", rt_dtype_name(dtype));
        dbuf_check(what, &G, ATOL, unit);
        rt_layernorm_fwd(g_cpu, rt_xf(G.c), mean.c, rstd.c, rt_xf(A.c), W.c, bias.c, M, K, 1e-5f);
        rt_layernorm_fwd(g_gpu, rt_xf(G.g), mean.g, rstd.g, rt_xf(A.g), W.g, bias.g, M, K, 1e-5f);
        snprintf(what, sizeof what, "%s layernorm", rt_dtype_name(dtype));
        dbuf_check(what, &G, ATOL, unit);
        /* the ops that store what they copy, drop or add, rounding it themselves: the same bits */
        dbuf D = dbuf_zero(A.n), E = dbuf_rand(A.n, 1.0f, 0.0f), emb = dbuf_rand((size_t)M * K, 1.0f, 0.0f);
        const char *names[7] = {"dropout_fwd", "dropout_bwd p 0", "dropout_cols", "add", "embedding_fwd accumulate",
                                "gather_rows", "relbias_fwd"};
        int32_t ids_h[64];
        for (int i = 0; i < M; i++) ids_h[i] = (i * 7) % 50; /* rows of A's first 50, some twice */
        ibuf ids = ibuf_from(ids_h, (size_t)M);
        for (int k = 0; k < 7; k++) {
            for (int side = 0; side < 2; side++) {
                rt_backend *be = side ? g_gpu : g_cpu;
                float *a = side ? A.g : A.c, *e = side ? E.g : E.c, *d = side ? D.g : D.c;
                float *out = k == 4 ? (side ? emb.g : emb.c) : d;
                const int32_t *id = side ? ids.g : ids.c;
                if (k == 0) rt_dropout_fwd(be, d, a, A.n, 0.1f, 5, 9, NULL);
                if (k == 1) rt_dropout_bwd(be, d, a, A.n, 0.0f, 5, 9, NULL);
                if (k == 2) rt_dropout_cols(be, rt_xf(d), rt_xf(a), (size_t)M, 100, K, 50, 0.2f, 5, 9, NULL);
                if (k == 3) rt_add(be, rt_xf(d), rt_xf(a), rt_xf(e), A.n);
                if (k == 4) rt_embedding_fwd(be, out, id, a, (size_t)M, K, 0, 50, true);
                if (k == 5) rt_gather_rows(be, d, a, id, M, K);
                if (k == 6) rt_relbias_fwd(be, d, e, id, 4, 8, 8, 50); /* (50, 4) table, buckets from ids */
            }
            snprintf(what, sizeof what, "%s %s", rt_dtype_name(dtype), names[k]);
            dbuf_check_bits(what, k == 4 ? &emb : &D);
        }
        ibuf_free(&ids);
        dbuf *all[] = {&X, &dX, &A, &B, &C, &G, &mean, &rstd, &W, &bias, &D, &E, &emb};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dbuf_free(all[i]);
    }
    TZ_EXPECT_OK(rt_set_precision(g_cpu, RT_F32));
    TZ_EXPECT_OK(rt_set_precision(g_gpu, RT_F32));
}

/* The fused linear ops (cuBLASLt's BIAS, GELU_AUX_BIAS, BGRADB and DGELU_BGRAD epilogues where
 * the CUDA backend fuses) against the CPU's composition of the plain ops, in fp32 and bf16; F is
 * a multiple of 8 (the epilogues' rule) for GELU tanh, and GELU erf (never fused: cuBLASLt's
 * GELU is the tanh form) and an F of 100 take the composed path on CUDA too. */
static void test_linear_case(rt_dtype dtype, rt_act_kind act, int F) {
    const size_t N = 48;
    const int C = 64;
    const float tol = dtype == RT_F32 ? RTOL : 1.0f / 128;
    char what[128];
    if (rt_set_precision(g_gpu, dtype) != RT_OK) return; /* bf16 before sm_80: test_precision says so */
    TZ_EXPECT_OK(rt_set_precision(g_cpu, dtype));
    dbuf X = dbuf_rand_stored(dtype, N * C, 1.0f, 0.0f), W = dbuf_rand((size_t)F * C, 0.2f, 0.0f),
         b = dbuf_rand(F, 0.5f, 0.0f);
    dbuf pre = dbuf_zero(N * F), out = dbuf_zero(N * F), plain = dbuf_zero(N * F);
    rt_linear_fwd(g_cpu, rt_xf(out.c), rt_xf(pre.c), rt_xf(X.c), W.c, b.c, N, C, F, &act);
    rt_linear_fwd(g_gpu, rt_xf(out.g), rt_xf(pre.g), rt_xf(X.g), W.g, b.g, N, C, F, &act);
    rt_linear_fwd(g_cpu, rt_xf(NULL), rt_xf(plain.c), rt_xf(X.c), W.c, b.c, N, C, F, NULL);
    rt_linear_fwd(g_gpu, rt_xf(NULL), rt_xf(plain.g), rt_xf(X.g), W.g, b.g, N, C, F, NULL);
    snprintf(what, sizeof what, "%s linear_fwd act %d F %d: pre", rt_dtype_name(dtype), (int)act, F);
    dbuf_check(what, &pre, GEMM_ATOL, tol);
    snprintf(what, sizeof what, "%s linear_fwd act %d F %d: out", rt_dtype_name(dtype), (int)act, F);
    dbuf_check(what, &out, GEMM_ATOL, tol);
    snprintf(what, sizeof what, "%s linear_fwd (bias only) F %d", rt_dtype_name(dtype), F);
    dbuf_check(what, &plain, GEMM_ATOL, tol);
    /* backward: dW and db accumulate onto what is there */
    dbuf dY = dbuf_rand_stored(dtype, N * F, 1.0f, 0.0f), dW = dbuf_rand((size_t)F * C, 1.0f, 0.0f),
         db = dbuf_rand(F, 1.0f, 0.0f);
    rt_linear_wgrad(g_cpu, dW.c, db.c, rt_xf(dY.c), rt_xf(X.c), N, C, F);
    rt_linear_wgrad(g_gpu, dW.g, db.g, rt_xf(dY.g), rt_xf(X.g), N, C, F);
    snprintf(what, sizeof what, "%s linear_wgrad F %d: dW", rt_dtype_name(dtype), F);
    dbuf_check(what, &dW, GEMM_ATOL, tol);
    snprintf(what, sizeof what, "%s linear_wgrad F %d: db", rt_dtype_name(dtype), F);
    dbuf_check(what, &db, GEMM_ATOL, GEMM_RTOL);
    /* the FFN's down projection W2 (C, F): dpre = act'(pre) * (dY2 W2), db1 += column sums */
    dbuf dY2 = dbuf_rand_stored(dtype, N * C, 1.0f, 0.0f), W2 = dbuf_rand((size_t)C * F, 0.2f, 0.0f),
         dpre = dbuf_zero(N * F);
    dbuf_sync_from_cpu(&pre); /* the same pre-activations on both */
    rt_linear_dact(g_cpu, rt_xf(dpre.c), db.c, rt_xf(dY2.c), W2.c, rt_xf(pre.c), N, F, C, act);
    rt_linear_dact(g_gpu, rt_xf(dpre.g), db.g, rt_xf(dY2.g), W2.g, rt_xf(pre.g), N, F, C, act);
    snprintf(what, sizeof what, "%s linear_dact act %d F %d: dpre", rt_dtype_name(dtype), (int)act, F);
    dbuf_check(what, &dpre, GEMM_ATOL, tol);
    snprintf(what, sizeof what, "%s linear_dact act %d F %d: db", rt_dtype_name(dtype), (int)act, F);
    dbuf_check(what, &db, GEMM_ATOL, tol);
    dbuf *all[] = {&X, &W, &b, &pre, &out, &plain, &dY, &dW, &db, &dY2, &W2, &dpre};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dbuf_free(all[i]);
    TZ_EXPECT_OK(rt_set_precision(g_cpu, RT_F32));
    TZ_EXPECT_OK(rt_set_precision(g_gpu, RT_F32));
}

static void test_linear(void) {
    const rt_dtype dtypes[2] = {RT_F32, RT_BF16};
    for (int d = 0; d < 2; d++) {
        test_linear_case(dtypes[d], RT_ACT_GELU_TANH, 96);
        test_linear_case(dtypes[d], RT_ACT_GELU_ERF, 96);
        test_linear_case(dtypes[d], RT_ACT_GELU_TANH, 100);
    }
}

/* The fused residual step (rt_residual_fwd/bwd; cuda_residual.cu's kernels) against the CPU's op,
 * the reference: the dropout masks are the same draws and the sum the same IEEE operations, so it
 * is the same bits; the norm's output, statistics and gradients within fp32 tolerances, or two
 * rounding steps of a 16-bit compute precision. norm: 0 LayerNorm with bias, 1 without, 2
 * RMSNorm, 3 none. The backward runs from the CPU's sum and statistics. */
static void test_residual_case(rt_dtype dtype, int norm, float p, size_t N, int C) {
    static const char *const names[4] = {"layernorm+bias", "layernorm", "rmsnorm", "no norm"};
    const size_t n = N * (size_t)C;
    const float tol = dtype == RT_F32 ? RTOL : dtype == RT_BF16 ? 1.0f / 128 : 1.0f / 1024;
    if (rt_set_precision(g_gpu, dtype) != RT_OK) return; /* bf16 before sm_80: test_precision says so */
    TZ_EXPECT_OK(rt_set_precision(g_cpu, dtype));
    char where[128], what[192];
    snprintf(where, sizeof where, "%s residual %s p=%g N=%zu C=%d", rt_dtype_name(dtype), names[norm], (double)p, N, C);
    dbuf res = dbuf_rand_stored(dtype, n, 3.0f, 1.0f), branch = dbuf_rand_stored(dtype, n, 1.0f, 0.0f);
    dbuf w = dbuf_rand(C, 0.5f, 1.0f), bias = dbuf_rand(C, 0.2f, 0.0f);
    dbuf sum = dbuf_zero(n), out = dbuf_zero(n), mean = dbuf_zero(N), rstd = dbuf_zero(N);
    rt_residual_desc dc = {.N = N,
                           .C = C,
                           .weight = norm == 3 ? NULL : w.c,
                           .bias = norm == 0 ? bias.c : NULL,
                           .rms = norm == 2,
                           .eps = 1e-5f,
                           .dropout_p = p,
                           .seed = 99,
                           .stream = 7};
    rt_residual_desc dg = dc;
    dg.weight = norm == 3 ? NULL : w.g;
    dg.bias = norm == 0 ? bias.g : NULL;
    rt_residual_fwd(g_cpu, &dc, rt_xf(sum.c), rt_xf(out.c), mean.c, rstd.c, rt_xf(res.c), rt_xf(branch.c));
    rt_residual_fwd(g_gpu, &dg, rt_xf(sum.g), rt_xf(out.g), mean.g, rstd.g, rt_xf(res.g), rt_xf(branch.g));
    snprintf(what, sizeof what, "%s: sum", where);
    dbuf_check_bits(what, &sum);
    if (norm != 3) {
        snprintf(what, sizeof what, "%s: out", where);
        dbuf_check(what, &out, ATOL, tol);
        snprintf(what, sizeof what, "%s: rstd", where);
        dbuf_check(what, &rstd, ATOL, RTOL);
        if (norm != 2) {
            snprintf(what, sizeof what, "%s: mean", where);
            dbuf_check(what, &mean, ATOL, RTOL);
        }
    }
    dbuf_sync_from_cpu(&sum);
    dbuf_sync_from_cpu(&mean);
    dbuf_sync_from_cpu(&rstd);
    dbuf dout = dbuf_rand_stored(dtype, n, 1.0f, 0.0f), dres = dbuf_rand_stored(dtype, n, 0.5f, 0.0f);
    dbuf dbranch = dbuf_zero(n), dw = dbuf_rand(C, 1.0f, 0.0f), db = dbuf_rand(C, 1.0f, 0.0f);
    rt_residual_bwd(g_cpu, &dc, dres.c, rt_xf(dbranch.c), dw.c, norm == 0 ? db.c : NULL, rt_xf(dout.c), rt_xf(sum.c),
                    mean.c, rstd.c);
    rt_residual_bwd(g_gpu, &dg, dres.g, rt_xf(dbranch.g), dw.g, norm == 0 ? db.g : NULL, rt_xf(dout.g), rt_xf(sum.g),
                    mean.g, rstd.g);
    snprintf(what, sizeof what, "%s: dres", where);
    dbuf_check(what, &dres, ATOL, tol);
    if (p > 0) {
        snprintf(what, sizeof what, "%s: dbranch", where);
        dbuf_check(what, &dbranch, ATOL, tol);
    }
    if (norm != 3) {
        snprintf(what, sizeof what, "%s: dweight", where);
        dbuf_check(what, &dw, 1e-4f, RTOL);
        snprintf(what, sizeof what, "%s: dbias", where);
        dbuf_check(what, &db, 1e-4f, RTOL); /* accumulated with bias, untouched without */
    }
    dbuf *all[] = {&res, &branch, &w, &bias, &sum, &out, &mean, &rstd, &dout, &dres, &dbranch, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dbuf_free(all[i]);
    TZ_EXPECT_OK(rt_set_precision(g_cpu, RT_F32));
    TZ_EXPECT_OK(rt_set_precision(g_gpu, RT_F32));
}

static void test_residual(void) {
    const rt_dtype dtypes[3] = {RT_F32, RT_BF16, RT_F16};
    for (int t = 0; t < 3; t++)
        for (int norm = 0; norm < 4; norm++)
            for (int ip = 0; ip < 2; ip++) {
                const float p = ip ? 0.1f : 0.0f;
                test_residual_case(dtypes[t], norm, p, 5, 37);    /* rows not a multiple of a Philox block */
                test_residual_case(dtypes[t], norm, p, 150, 768); /* GPT-2's width, several row blocks */
            }
}

/* The weights' low-precision copy (rt_weight_copy_set) on both backends: a GEMM and a fused
 * linear op whose weight lies in the copied slab (at an odd offset, with a wider row stride),
 * then again after AdamW updated the whole slab and a part of it (the copy follows), then with
 * the copy dropped. The CPU's results are the reference (bit-equal to rounding at each use,
 * test_cpu_precision); the GPU must agree within the 16-bit GEMM tolerance. */
static void test_weight_copy_case(rt_dtype dtype) {
    enum { M = 24, N = 40, K = 64, SLAB = 4096, OFF = 104, LDB = 72 }; /* 16-byte-aligned blocks: read from the copy */
    const float tol = 1.0f / 128;
    char what[128];
    if (rt_set_precision(g_gpu, dtype) != RT_OK) return; /* bf16 before sm_80: test_precision says so */
    TZ_EXPECT_OK(rt_set_precision(g_cpu, dtype));
    dbuf W = dbuf_rand(SLAB, 0.2f, 0.0f), G = dbuf_rand(SLAB, 1.0f, 0.0f), Mo = dbuf_zero(SLAB), Vo = dbuf_zero(SLAB);
    dbuf A = dbuf_rand((size_t)M * K, 1.0f, 0.0f), C = dbuf_zero((size_t)M * N), b = dbuf_rand(N, 0.5f, 0.0f);
    dbuf pre = dbuf_zero((size_t)M * N), out = dbuf_zero((size_t)M * N);
    rt_backend *bes[2] = {g_cpu, g_gpu};
    for (int round = 0; round < 4; round++) { /* 0: fresh copy; 1, 2: after AdamW (whole, part); 3: dropped */
        for (int k = 0; k < 2; k++) {
            float *w = k ? W.g : W.c;
            if (round == 0) TZ_EXPECT_OK(rt_weight_copy_set(bes[k], w, SLAB));
            if (round == 1 || round == 2) {
                const size_t lo = round == 2 ? 300 : 0, n = round == 2 ? 1000 : SLAB;
                rt_adamw(bes[k], w + lo, (k ? G.g : G.c) + lo, (k ? Mo.g : Mo.c) + lo, (k ? Vo.g : Vo.c) + lo, n, 0.05f,
                         0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, round);
            }
            if (round == 3) TZ_EXPECT_OK(rt_weight_copy_set(bes[k], NULL, 0));
            /* C (M, N) = A (M, K) B^T, B (N, K) a block of the slab with row stride LDB */
            rt_gemm(bes[k], false, true, M, N, K, 1.0f, rt_xf(k ? A.g : A.c), K, 0, rt_xf(w + OFF), LDB, 0, 0.0f,
                    rt_xf(k ? C.g : C.c), N, 0, 1);
            /* a linear layer whose weight (N, K) is packed in the slab */
            const rt_act_kind act = RT_ACT_GELU_TANH;
            rt_linear_fwd(bes[k], rt_xf(k ? out.g : out.c), rt_xf(k ? pre.g : pre.c), rt_xf(k ? A.g : A.c), w + 2 * OFF,
                          k ? b.g : b.c, M, K, N, &act);
        }
        dbuf_check("weight copy: AdamW's weights", &W, RTOL, RTOL);
        snprintf(what, sizeof what, "%s weight copy, round %d: gemm from the slab", rt_dtype_name(dtype), round);
        dbuf_check(what, &C, GEMM_ATOL, tol);
        snprintf(what, sizeof what, "%s weight copy, round %d: linear_fwd from the slab", rt_dtype_name(dtype), round);
        dbuf_check(what, &out, GEMM_ATOL, tol);
    }
    dbuf *all[] = {&W, &G, &Mo, &Vo, &A, &C, &b, &pre, &out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dbuf_free(all[i]);
    TZ_EXPECT_OK(rt_set_precision(g_cpu, RT_F32));
    TZ_EXPECT_OK(rt_set_precision(g_gpu, RT_F32));
}

static void test_weight_copy(void) {
    test_weight_copy_case(RT_BF16);
    test_weight_copy_case(RT_F16);
}

/* Attention at a 16-bit compute precision with 16-bit probabilities (rt_attn_desc.probs_dtype)
 * on the GPU: the same bits as fp32 probabilities rounded after the op (out, dqkv, dbias and the
 * stored values, with and without dropout, and a position bias; the backward reads 16-bit ones
 * as they are); the stored values, out, dqkv and dbias
 * within one unit of the type of the CPU's (from 2^28 multiply-adds a product, at T 1024, the
 * products run on the tensor cores, in another order). q/k/v and dout are stored activations,
 * so rounded to the type. */
static void test_attention_probs16_case(rt_dtype dtype, int B, int NH, int T, int HS, float dropout) {
    const int C = NH * HS;
    const size_t np = (size_t)B * NH * T * T, nb = (size_t)NH * T * T, nx = (size_t)B * T * 3 * C;
    if (rt_set_precision(g_gpu, dtype) != RT_OK) return; /* bf16 before sm_80: test_precision says so */
    TZ_EXPECT_OK(rt_set_precision(g_cpu, dtype));
    dbuf x = dbuf_rand_stored(dtype, nx, 1.0f, 0.0f), dy = dbuf_rand_stored(dtype, (size_t)B * T * C, 1.0f, 0.0f),
         bias = dbuf_rand(nb, 1.0f, 0.0f);
    dbuf out[2] = {dbuf_zero((size_t)B * T * C), dbuf_zero((size_t)B * T * C)};
    dbuf dqkv[2] = {dbuf_zero(nx), dbuf_zero(nx)}, dbias[2] = {dbuf_zero(nb), dbuf_zero(nb)}, p32 = dbuf_zero(np);
    uint16_t *p16c = be_alloc(g_cpu, np * 2), *p16g = be_alloc(g_gpu, np * 2);
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
                      .dropout_p = dropout,
                      .seed = 11,
                      .stream = 4};
    for (int w = 0; w < 2; w++) {
        d.probs_dtype = w ? dtype : RT_F32;
        void *pg = w ? (void *)p16g : (void *)p32.g;
        d.bias = bias.g;
        rt_attention_fwd(g_gpu, &d, rt_xf(out[w].g), pg, rt_xf(x.g), rt_xf(x.g + C), rt_xf(x.g + 2 * C));
        rt_attention_bwd(g_gpu, &d, rt_xf(dqkv[w].g), rt_xf(dqkv[w].g + C), rt_xf(dqkv[w].g + 2 * C), dbias[w].g,
                         rt_xf(dy.g), pg, rt_xf(x.g), rt_xf(x.g + C), rt_xf(x.g + 2 * C));
    }
    d.probs_dtype = dtype;
    d.bias = bias.c;
    rt_attention_fwd(g_cpu, &d, rt_xf(out[1].c), p16c, rt_xf(x.c), rt_xf(x.c + C), rt_xf(x.c + 2 * C));
    rt_attention_bwd(g_cpu, &d, rt_xf(dqkv[1].c), rt_xf(dqkv[1].c + C), rt_xf(dqkv[1].c + 2 * C), dbias[1].c,
                     rt_xf(dy.c), p16c, rt_xf(x.c), rt_xf(x.c + C), rt_xf(x.c + 2 * C));
    float *o32 = gpu_fetch(out[0].g, out[0].n), *o16 = gpu_fetch(out[1].g, out[1].n);
    float *d32 = gpu_fetch(dqkv[0].g, nx), *d16 = gpu_fetch(dqkv[1].g, nx);
    float *b32 = gpu_fetch(dbias[0].g, nb), *b16 = gpu_fetch(dbias[1].g, nb), *h32 = gpu_fetch(p32.g, np);
    uint16_t *hg = rt_xmalloc(np * 2), *hc = rt_xmalloc(np * 2);
    rt_to_host(g_gpu, hg, p16g, np * 2);
    rt_to_host(g_cpu, hc, p16c, np * 2);
    float *wg = rt_xmalloc(np * 4), *wc = rt_xmalloc(np * 4);
    size_t off = 0;
    for (size_t i = 0; i < np; i++) {
        wg[i] = dtype == RT_BF16 ? rt_bf16_to_f32(hg[i]) : rt_f16_to_f32(hg[i]);
        wc[i] = dtype == RT_BF16 ? rt_bf16_to_f32(hc[i]) : rt_f16_to_f32(hc[i]);
        off += memcmp(&wg[i], &h32[i], 4) != 0;
    }
    const char *name = rt_dtype_name(dtype);
    TZ_EXPECT(off == 0, "%s probs16: %zu stored values differ from fp32 probabilities rounded", name, off);
    TZ_EXPECT(memcmp(o32, o16, out[0].n * 4) == 0, "%s probs16: out differs from fp32 probabilities'", name);
    TZ_EXPECT(memcmp(d32, d16, nx * 4) == 0, "%s probs16: dqkv differs from fp32 probabilities'", name);
    TZ_EXPECT(memcmp(b32, b16, nb * 4) == 0, "%s probs16: dbias differs from fp32 probabilities'", name);
    char what[96];
    const float unit = dtype == RT_BF16 ? 1.0f / 128 : 1.0f / 1024;
    snprintf(what, sizeof what, "%s probs16 against the CPU (T %d, dropout %g)", name, T, (double)dropout);
    tz_check_close(what, wg, wc, np, ATTN_ATOL, unit);
    snprintf(what, sizeof what, "%s attention out against the CPU (T %d, dropout %g)", name, T, (double)dropout);
    dbuf_check(what, &out[1], ATTN_ATOL, unit);
    snprintf(what, sizeof what, "%s attention dqkv against the CPU (T %d, dropout %g)", name, T, (double)dropout);
    dbuf_check(what, &dqkv[1], ATTN_ATOL, unit);
    snprintf(what, sizeof what, "%s attention dbias against the CPU (T %d, dropout %g)", name, T, (double)dropout);
    dbuf_check(what, &dbias[1], ATTN_ATOL, unit);
    free(o32), free(o16), free(d32), free(d16), free(b32), free(b16), free(h32), free(hg), free(hc), free(wg), free(wc);
    dbuf *all[] = {&x, &dy, &bias, &out[0], &out[1], &dqkv[0], &dqkv[1], &dbias[0], &dbias[1], &p32};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dbuf_free(all[i]);
    rt_free_device(g_cpu, p16c);
    rt_free_device(g_gpu, p16g);
    TZ_EXPECT_OK(rt_set_precision(g_cpu, RT_F32));
    TZ_EXPECT_OK(rt_set_precision(g_gpu, RT_F32));
}

static void test_attention_probs16(void) {
    test_attention_probs16_case(RT_BF16, 2, 4, 40, 16, 0.1f);
    test_attention_probs16_case(RT_F16, 2, 4, 40, 16, 0.1f);
    test_attention_probs16_case(RT_BF16, 2, 4, 40, 16, 0.0f); /* dv from the widened stored values */
    /* 2^28 multiply-adds a product: q k^T and dout v^T on the tensor cores (cuda_attention.cu) */
    test_attention_probs16_case(RT_BF16, 1, 4, 1024, 64, 0.1f);
}

/* The fused attention (TZ_CUDA_ATTENTION=fused, cuda_flash.cu) against the CPU at a 16-bit
 * compute precision: out, dq, dk and dv within a unit of the type of each value plus a unit of
 * the largest (the tensor cores sum in another order, so a probability may round to its
 * neighbour; tests/test_flash_tiles.c holds the same block code to a quarter of that on the CPU).
 * The fused path must have run: it keeps two floats per query row in the probabilities buffer
 * and leaves the rest as allocated (zeros). And it gives the same bits twice. */
static void test_attention_fused_case(rt_backend *fused, const fused_attn_case *tc) {
    rt_backend *materialized = g_gpu;
    g_gpu = fused; /* the dbuf helpers' GPU side */
    const int B = tc->B, NH = tc->NH, Tq = tc->Tq, Tk = tc->Tk, HS = tc->HS, C = NH * HS;
    const rt_dtype dt = tc->dtype;
    if (rt_set_precision(fused, dt) != RT_OK) { /* bf16 before sm_80: test_precision says so */
        g_gpu = materialized;
        return;
    }
    TZ_EXPECT_OK(rt_set_precision(g_cpu, dt));
    const rt_attn_desc d = fused_attn_desc(tc);
    const size_t nq = (size_t)B * Tq * d.ldq, nk = (size_t)B * Tk * d.ldk, nv = (size_t)B * Tk * d.ldv;
    const size_t nx = tc->fused_qkv ? nq : nq + nk + nv, no = (size_t)B * Tq * d.ldo;
    dbuf x = dbuf_rand_stored(dt, nx, 1.0f, 0.0f), dout = dbuf_rand_stored(dt, no, 1.0f, 0.0f);
    dbuf out = dbuf_zero(no), dx = dbuf_zero(nx);
    const size_t kq = tc->fused_qkv ? (size_t)C : nq, kv = tc->fused_qkv ? (size_t)2 * C : nq + nk;
    dbuf mask = {0};
    if (tc->mask) {
        float *h = tz_attention_key_mask(B, Tk, tc->masked_batch);
        mask = dbuf_from(h, (size_t)B * Tk);
        free(h);
    }
    ibuf prefix = {0};
    if (tc->prefix) prefix = ibuf_from(FUSED_ATTN_PREFIX, (size_t)B);
    const size_t nb = (size_t)NH * Tq * Tk;
    dbuf bias = {0}, dbias[2] = {{0}}; /* dbias accumulates: each GPU run, and the CPU's [0].c, from the same values */
    if (tc->bias) {
        bias = dbuf_rand(nb, 1.0f, 0.0f);
        float *h = host_rand(nb, 1.0f, 0.0f);
        dbias[0] = dbuf_from(h, nb);
        dbias[1] = dbuf_from(h, nb);
        free(h);
    }
    const size_t pbytes = (size_t)B * NH * Tq * Tk * 2, rows = (size_t)B * NH * Tq;
    void *pc = be_alloc(g_cpu, pbytes), *pg[2] = {be_alloc(fused, pbytes), be_alloc(fused, pbytes)};
    float *got[2][2];
    for (int w = 0; w < 2; w++) { /* twice on the GPU: the same bits */
        rt_attn_desc dg = d;
        dg.key_mask = mask.g, dg.prefix = prefix.g, dg.bias = bias.g;
        rt_attention_fwd(fused, &dg, rt_xf(out.g), pg[w], rt_xf(x.g), rt_xf(x.g + kq), rt_xf(x.g + kv));
        rt_attention_bwd(fused, &dg, rt_xf(dx.g), rt_xf(dx.g + kq), rt_xf(dx.g + kv), dbias[w].g, rt_xf(dout.g), pg[w],
                         rt_xf(x.g), rt_xf(x.g + kq), rt_xf(x.g + kv));
        got[w][0] = gpu_fetch(out.g, no);
        got[w][1] = gpu_fetch(dx.g, nx);
    }
    rt_attn_desc dc = d;
    dc.key_mask = mask.c, dc.prefix = prefix.c, dc.bias = bias.c;
    rt_attention_fwd(g_cpu, &dc, rt_xf(out.c), pc, rt_xf(x.c), rt_xf(x.c + kq), rt_xf(x.c + kv));
    rt_attention_bwd(g_cpu, &dc, rt_xf(dx.c), rt_xf(dx.c + kq), rt_xf(dx.c + kv), dbias[0].c, rt_xf(dout.c), pc,
                     rt_xf(x.c), rt_xf(x.c + kq), rt_xf(x.c + kv));

    char what[160];
    const char *name = rt_dtype_name(dt);
    const float unit = dt == RT_BF16 ? 1.0f / 128 : 1.0f / 1024;
    float *ref = rt_xmalloc(nx * sizeof(float));
    rt_to_host(g_cpu, ref, out.c, no * sizeof(float));
    float big = 0.0f;
    for (size_t i = 0; i < no; i++) big = fmaxf(big, isfinite(ref[i]) ? fabsf(ref[i]) : 0.0f);
    snprintf(what, sizeof what, "fused attention %s (%s): out against the CPU", tc->name, name);
    tz_check_close(what, got[0][0], ref, no, unit * big, unit);
    rt_to_host(g_cpu, ref, dx.c, nx * sizeof(float));
    big = 0.0f;
    for (size_t i = 0; i < nx; i++) big = fmaxf(big, isfinite(ref[i]) ? fabsf(ref[i]) : 0.0f);
    snprintf(what, sizeof what, "fused attention %s (%s): dq, dk, dv against the CPU", tc->name, name);
    tz_check_close(what, got[0][1], ref, nx, unit * big, unit);
    TZ_EXPECT(memcmp(got[0][0], got[1][0], no * 4) == 0 && memcmp(got[0][1], got[1][1], nx * 4) == 0,
              "fused attention %s (%s): two runs differ", tc->name, name);
    if (tc->bias) {
        float *db = rt_xmalloc(nb * sizeof(float)), *g0 = gpu_fetch(dbias[0].g, nb), *g1 = gpu_fetch(dbias[1].g, nb);
        rt_to_host(g_cpu, db, dbias[0].c, nb * sizeof(float));
        big = 0.0f;
        for (size_t i = 0; i < nb; i++) big = fmaxf(big, fabsf(db[i]));
        snprintf(what, sizeof what, "fused attention %s (%s): dbias against the CPU", tc->name, name);
        tz_check_close(what, g0, db, nb, unit * big, unit);
        TZ_EXPECT(memcmp(g0, g1, nb * 4) == 0, "fused attention %s (%s): two runs' dbias differ", tc->name, name);
        free(db), free(g0), free(g1);
        dbuf_free(&bias), dbuf_free(&dbias[0]), dbuf_free(&dbias[1]);
    }
    unsigned char *kept = rt_xmalloc(pbytes);
    rt_to_host(fused, kept, pg[0], pbytes);
    size_t touched = 0;
    for (size_t i = rows * 8; i < pbytes; i++) touched += kept[i] != 0;
    TZ_EXPECT(touched == 0,
              "fused attention %s (%s): %zu bytes past the row statistics written: the fused path did not run",
              tc->name, name, touched);
    free(kept), free(ref);
    for (int w = 0; w < 2; w++) free(got[w][0]), free(got[w][1]);
    rt_free_device(g_cpu, pc);
    rt_free_device(fused, pg[0]);
    rt_free_device(fused, pg[1]);
    dbuf_free(&x), dbuf_free(&dout), dbuf_free(&out), dbuf_free(&dx);
    if (tc->mask) dbuf_free(&mask);
    if (tc->prefix) ibuf_free(&prefix);
    TZ_EXPECT_OK(rt_set_precision(g_cpu, RT_F32));
    TZ_EXPECT_OK(rt_set_precision(fused, RT_F32));
    g_gpu = materialized;
}

static void test_attention_fused(void) {
    setenv("TZ_CUDA_ATTENTION", "fused", 1);
    rt_backend *fused = NULL;
    rt_status st = rt_backend_init("cuda", 0, &fused);
    unsetenv("TZ_CUDA_ATTENTION");
    TZ_EXPECT_OK(st);
    if (st != RT_OK) return;
    for (size_t i = 0; i < FUSED_ATTN_CASE_COUNT; i++) test_attention_fused_case(fused, &FUSED_ATTN_CASES[i]);
    rt_backend_free(fused);
}

int main(void) {
    rt_status st = rt_backend_init("cuda:0", 0, &g_gpu);
    if (st == RT_ERR_UNSUPPORTED) {
        printf("test_cuda_ops: skipped: no CUDA device\n");
        fprintf(stderr, "test_cuda_ops: %s\n", rt_error_message());
        return 77;
    }
    TZ_EXPECT_OK(st);
    if (st != RT_OK) return tz_test_result("test_cuda_ops");
    st = rt_backend_init("cpu", 0, &g_cpu);
    TZ_EXPECT_OK(st);
    if (st != RT_OK) {
        rt_backend_free(g_gpu);
        return tz_test_result("test_cuda_ops");
    }

    test_memory();
    test_uploads();
    test_gemm();
    test_norms();
    test_elementwise();
    test_dropout();
    test_dropout_cols(150);
    test_dropout_cols(100);
    test_attention();
    test_relbias();
    test_embedding();
    test_xent();
    test_xent_vocab();
    test_mse_loss();
    test_bce_logits_loss();
    test_adamw();
    test_sumsq();
    test_step_state();
    test_precision();
    test_linear();
    test_residual();
    test_weight_copy();
    test_attention_probs16();
    test_attention_fused();

    rt_backend_free(g_cpu);
    rt_backend_free(g_gpu);
    return tz_test_result("test_cuda_ops");
}

#endif
