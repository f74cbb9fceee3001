/* The CPU backend's compute precision (rt_set_precision), its matmul and rounding parts:
 *   - rt_round_bf16/rt_round_f16 equal a store to bf16/fp16 and back (rt_dtype.c's
 *     conversions, bit-exact with PyTorch's casts): edges, subnormals, overflow, random bits;
 *   - the round_to op rounds a strided block in place and leaves the padding alone;
 *   - in bf16 and fp16 the gemm op equals a double reference over the rounded inputs within
 *     fp32 accumulation's bound (so the rounding happens, once, to nearest even, and the sums
 *     stay fp32), for every transpose, batched with strides, padded leading dimensions, and from
 *     two threads at once; back in fp32 it is plain fp32 again;
 *   - rt_gemm stores C at the compute precision, rt_linear_wgrad keeps its sums fp32;
 *   - the weights' low-precision copy (rt_weight_copy_set): a GEMM whose operand lies in the
 *     copied slab gives the same bits as rounding at each use, for every transpose, and a block
 *     that is not packed is rounded at use; AdamW writes it as it updates weights (the whole slab or a part), and
 *     rt_weight_copy_update refreshes what changed otherwise; an operand that lies only partly
 *     in the slab is rounded as before; the copy is really read (a weight changed behind its
 *     back shows), and it is dropped at n 0 and when the precision changes. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/rt_backend.h"
#include "runtime/base/rt_dtype.h"
#include "tests/testutil.h"

typedef struct {
    rt_backend *be;
    int M, N, K, batch;
    bool ta, tb;
    rt_dtype round; /* what the reference rounds the inputs to (RT_F32: nothing) */
    bool quiet;     /* a run expected to differ: count, do not print */
    unsigned seed;
    int wrong;
} gemm_run;

static void *run(void *arg) {
    gemm_run *g = arg;
    const int M = g->M, N = g->N, K = g->K;
    const int lda = (g->ta ? M : K) + 1, ldb = (g->tb ? K : N) + 2, ldc = N + 3;
    const size_t sa = (size_t)(g->ta ? K : M) * lda, sb = (size_t)(g->tb ? N : K) * ldb, sc = (size_t)M * ldc;
    float *A = malloc(sa * g->batch * 4), *B = malloc(sb * g->batch * 4), *C = malloc(sc * g->batch * 4);
    unsigned s = g->seed;
    for (size_t i = 0; i < sa * g->batch; i++) A[i] = tz_uniform(&s);
    for (size_t i = 0; i < sb * g->batch; i++) B[i] = tz_uniform(&s);
    for (size_t i = 0; i < sc * g->batch; i++) C[i] = tz_uniform(&s);
    float *C0 = malloc(sc * g->batch * 4);
    memcpy(C0, C, sc * g->batch * 4);
    const float alpha = 0.75f, beta = 0.5f;
    /* the op itself: C in fp32 (rt_gemm would then store it rounded) */
    g->be->ops->gemm(g->be->ctx, g->ta, g->tb, M, N, K, alpha, rt_xf(A), lda, sa, rt_xf(B), ldb, sb, beta, rt_xf(C),
                     ldc, sc, g->batch);
    for (int b = 0; b < g->batch; b++)
        g->wrong += tz_gemm_misses(rt_dtype_name(g->round), g->ta, g->tb, M, N, K, alpha, A + b * sa, lda, B + b * sb,
                                   ldb, beta, C0 + b * sc, C + b * sc, ldc, g->round, g->quiet);
    free(A);
    free(B);
    free(C);
    free(C0);
    return NULL;
}

/* rt_round_f16/bf16 against the conversions to the 16-bit type and back. */
static void check_rounding(void) {
    const float edges[] = {0.0f,           -0.0f,          1.0f,           65504.0f,       65519.99f,
                           65520.0f,       -65520.0f,      1e9f,           6.1035156e-05f, 6.0975552e-05f,
                           5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f, 8.9406967e-08f, 1e-30f,
                           3.14159265f,    INFINITY,       -INFINITY,      1.00048828125f, 1.00146484375f};
    int bad = 0;
    unsigned st = 12345;
    for (int i = 0; i < 2000000 + (int)(sizeof edges / sizeof edges[0]); i++) {
        float x;
        if (i < (int)(sizeof edges / sizeof edges[0])) {
            x = edges[i];
        } else { /* random bits, every exponent */
            st = st * 1664525u + 1013904223u;
            uint32_t u = st;
            memcpy(&x, &u, 4);
            if (isnan(x)) continue;
        }
        const float h = rt_f16_to_f32(rt_f32_to_f16(x)), b = rt_bf16_to_f32(rt_f32_to_bf16(x));
        const float rh = rt_round_f16(x), rb = rt_round_bf16(x);
        if ((memcmp(&h, &rh, 4) != 0 || memcmp(&b, &rb, 4) != 0) && bad++ < 5)
            fprintf(stderr, "FAILED: round %.9g: f16 %.9g vs %.9g, bf16 %.9g vs %.9g\n", x, rh, h, rb, b);
    }
    TZ_EXPECT(bad == 0, "%d values round differently from a store and load", bad);
    TZ_EXPECT(isnan(rt_round_f16(NAN)) && isnan(rt_round_bf16(NAN)), "nan stays nan");
}

/* round_to over a (5, 7) block with row stride 9: the block rounds, the padding stays. */
static void check_round_op(rt_backend *be) {
    for (int d = 0; d < 2; d++) {
        const rt_dtype dtype = d ? RT_F16 : RT_BF16;
        float x[45], want[45];
        unsigned st = 7;
        for (int i = 0; i < 45; i++) x[i] = 70000.0f * tz_uniform(&st);
        for (int i = 0; i < 45; i++) want[i] = i % 9 < 7 ? rt_round_to(dtype, x[i]) : x[i];
        be->ops->round_to(be->ctx, dtype, x, 5, 7, 9);
        TZ_EXPECT(memcmp(x, want, sizeof x) == 0, "%s round_to on a strided block", rt_dtype_name(dtype));
    }
}

/* rt_gemm's C is stored at the compute precision; rt_linear_wgrad's weight gradient is not. */
static void check_stored_c(rt_backend *be, rt_dtype dtype) {
    enum { M = 8, N = 12, K = 40 };
    float A[M * K], B[K * N], C[M * N], G[M * N];
    unsigned st = 3;
    for (int i = 0; i < M * K; i++) A[i] = tz_uniform(&st);
    for (int i = 0; i < K * N; i++) B[i] = tz_uniform(&st);
    rt_gemm(be, false, false, M, N, K, 1.0f, rt_xf(A), K, 0, rt_xf(B), N, 0, 0.0f, rt_xf(C), N, 0, 1);
    memset(G, 0, sizeof G);
    rt_linear_wgrad(be, G, NULL, rt_xf(A), rt_xf(B), K, N, M); /* G (M, N) += A^T B, A read as (K, M), B as (K, N) */
    int stored = 0, kept = 0;
    for (int i = 0; i < M * N; i++) {
        stored += C[i] == rt_round_to(dtype, C[i]);
        kept += G[i] != rt_round_to(dtype, G[i]);
    }
    TZ_EXPECT(stored == M * N, "%s: %d of %d rt_gemm outputs are not %s values", rt_dtype_name(dtype), M * N - stored,
              M * N, rt_dtype_name(dtype));
    TZ_EXPECT(kept > M * N / 2, "%s: rt_linear_wgrad's fp32 sums were rounded (%d of %d not)", rt_dtype_name(dtype),
              kept, M * N);
}

/* C (M x N) = op(A) op(B) with B a block of the slab W at offset off with row stride ldb. */
static void slab_gemm(rt_backend *be, bool ta, bool tb, const float *A, const float *W, size_t off, int ldb, float *C) {
    enum { M = 6, N = 10, K = 24 };
    rt_gemm(be, ta, tb, M, N, K, 1.0f, rt_xf(A), ta ? M : K, 0, rt_xf(W + off), ldb, 0, 0.0f, rt_xf(C), N, 0, 1);
}

static void check_weight_copy(rt_backend *be, rt_dtype dtype) {
    enum { M = 6, N = 10, K = 24, SLAB = 1000 };
    static float W[SLAB], A[M * K], G[SLAB], Mo[SLAB], Vo[SLAB];
    float want[M * N], got[M * N];
    unsigned st = 21;
    for (int i = 0; i < SLAB; i++) W[i] = tz_uniform(&st), G[i] = tz_uniform(&st), Mo[i] = Vo[i] = 0;
    for (int i = 0; i < M * K; i++) A[i] = tz_uniform(&st);
    const char *name = rt_dtype_name(dtype);
    /* each transpose of B at even and odd offsets (read from the copy), and B as a block of wider
     * rows (ldb 37, not packed: rounded at use, so that oneDNN sees the same descriptor) */
    const struct {
        bool ta, tb;
        size_t off;
        int ldb;
    } cases[] = {{false, false, 0, N}, {false, true, 5, K}, {true, false, 17, N}, {true, true, 101, 37}};
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    float ref[4][M * N];
    for (int c = 0; c < n_cases; c++) slab_gemm(be, cases[c].ta, cases[c].tb, A, W, cases[c].off, cases[c].ldb, ref[c]);
    TZ_EXPECT_OK(rt_weight_copy_set(be, W, SLAB));
    for (int c = 0; c < n_cases; c++) {
        slab_gemm(be, cases[c].ta, cases[c].tb, A, W, cases[c].off, cases[c].ldb, got);
        TZ_EXPECT(memcmp(got, ref[c], sizeof got) == 0, "%s copy, case %d: not the bits of rounding at each use", name,
                  c);
    }
    /* AdamW over the whole slab, then over a part: the copy follows the weights */
    for (int part = 0; part < 2; part++) {
        const size_t lo = part ? 300 : 0, n = part ? 400 : SLAB;
        rt_adamw(be, W + lo, G + lo, Mo + lo, Vo + lo, n, 0.05f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, part + 1);
        for (int c = 0; c < n_cases; c++) {
            slab_gemm(be, cases[c].ta, cases[c].tb, A, W, cases[c].off, cases[c].ldb, got);
            TZ_EXPECT_OK(rt_weight_copy_set(be, NULL, 0));
            slab_gemm(be, cases[c].ta, cases[c].tb, A, W, cases[c].off, cases[c].ldb, want);
            TZ_EXPECT_OK(rt_weight_copy_set(be, W, SLAB));
            TZ_EXPECT(memcmp(got, want, sizeof got) == 0, "%s copy after AdamW %d, case %d: stale", name, part, c);
        }
    }
    /* a weight changed behind the copy's back is not seen (the copy is read) until updated */
    for (int i = 0; i < K * N; i++) W[i] = -2.0f * W[i];
    slab_gemm(be, false, false, A, W, 0, N, got); /* the old weights' result, from the copy */
    rt_weight_copy_update(be, W, K * N);
    slab_gemm(be, false, false, A, W, 0, N, want);
    TZ_EXPECT(memcmp(got, want, sizeof got) != 0, "%s: a GEMM did not read the copy (it saw a change not copied)",
              name);
    TZ_EXPECT_OK(rt_weight_copy_set(be, NULL, 0));
    slab_gemm(be, false, false, A, W, 0, N, got);
    TZ_EXPECT(memcmp(got, want, sizeof got) == 0, "%s: rt_weight_copy_update did not refresh the copy", name);
    /* B reaching past the slab's end: rounded at use, as without a copy */
    TZ_EXPECT_OK(rt_weight_copy_set(be, W, SLAB - 50));
    slab_gemm(be, false, false, A, W, SLAB - K * N, N, got);
    TZ_EXPECT_OK(rt_weight_copy_set(be, NULL, 0));
    slab_gemm(be, false, false, A, W, SLAB - K * N, N, want);
    TZ_EXPECT(memcmp(got, want, sizeof got) == 0, "%s: an operand partly outside the copy", name);
    /* a change of precision drops the copy: nothing reads values of the old precision */
    TZ_EXPECT_OK(rt_weight_copy_set(be, W, SLAB));
    W[0] += 1.0f;
    TZ_EXPECT_OK(rt_set_precision(be, RT_F32));
    TZ_EXPECT_OK(rt_set_precision(be, dtype));
    slab_gemm(be, false, false, A, W, 0, N, got);
    TZ_EXPECT_OK(rt_weight_copy_set(be, NULL, 0));
    slab_gemm(be, false, false, A, W, 0, N, want);
    TZ_EXPECT(memcmp(got, want, sizeof got) == 0, "%s: a copy outlived a change of precision", name);
}

int main(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_cpu_backend_init(2, &be));
    if (!be) return tz_test_result("test_cpu_precision");
    check_rounding();
    check_round_op(be);
    for (int d = 0; d < 2; d++) {
        const rt_dtype dtype = d ? RT_F16 : RT_BF16;
        TZ_EXPECT_OK(rt_set_precision(be, dtype));
        unsigned seed = 11;
        for (int t = 0; t < 4; t++) {
            gemm_run g = {be, 33, 45, 70, 2, t & 1, t >> 1, dtype, false, seed++, 0};
            run(&g);
            TZ_EXPECT(g.wrong == 0, "%s ta=%d tb=%d: %d wrong", rt_dtype_name(dtype), g.ta, g.tb, g.wrong);
        }
        /* the same GEMM against the unrounded inputs is off by far more than fp32's bound: the
         * inputs really were rounded */
        gemm_run off = {be, 16, 16, 64, 1, false, false, RT_F32, true, 99, 0};
        run(&off);
        TZ_EXPECT(off.wrong > 0, "%s results match unrounded inputs to fp32 accuracy: no rounding happened",
                  rt_dtype_name(dtype));
        gemm_run both[2] = {{be, 40, 24, 96, 1, false, true, dtype, false, 5, 0},
                            {be, 24, 56, 48, 3, true, false, dtype, false, 6, 0}};
        pthread_t th[2];
        for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, run, &both[i]);
        for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
        TZ_EXPECT(both[0].wrong == 0 && both[1].wrong == 0, "%s, two threads at once: %d and %d wrong",
                  rt_dtype_name(dtype), both[0].wrong, both[1].wrong);
        check_stored_c(be, dtype);
        check_weight_copy(be, dtype);
    }
    TZ_EXPECT(rt_set_precision(be, RT_I32) == RT_ERR_UNSUPPORTED, "int32 is not a compute precision");
    TZ_EXPECT_OK(rt_set_precision(be, RT_F32));
    gemm_run f32 = {be, 16, 16, 64, 1, false, false, RT_F32, false, 99, 0};
    run(&f32);
    TZ_EXPECT(f32.wrong == 0, "fp32 again: %d wrong", f32.wrong);
    rt_backend_free(be);
    return tz_test_result("test_cpu_precision");
}
