/* The CPU backend's matmul precision (rt_set_matmul_precision): in bf16, rt_gemm equals a double
 * reference over the bf16-rounded inputs within fp32 accumulation's bound (so the rounding
 * happens, once, to nearest even, and the sums stay fp32), for every transpose, batched with
 * strides, padded leading dimensions, and from two threads at once; back in fp32 it is plain
 * fp32 again; fp16 is refused with a message. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/rt_backend.h"
#include "runtime/rt_dtype.h"
#include "tests/testutil.h"

typedef struct {
    rt_backend *be;
    int M, N, K, batch;
    bool ta, tb, round; /* round: the reference rounds the inputs to bf16 */
    bool quiet;         /* a run expected to differ: count, do not print */
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
    rt_gemm(g->be, g->ta, g->tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, g->batch);
    for (int b = 0; b < g->batch; b++)
        g->wrong += tz_gemm_misses("bf16", g->ta, g->tb, M, N, K, alpha, A + b * sa, lda, B + b * sb, ldb, beta,
                                   C0 + b * sc, C + b * sc, ldc, g->round, g->quiet);
    free(A);
    free(B);
    free(C);
    free(C0);
    return NULL;
}

int main(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_cpu_backend_init(2, &be));
    if (!be) return tz_test_result("test_cpu_precision");
    rt_status st = rt_set_matmul_precision(be, RT_F16);
    TZ_EXPECT(st == RT_ERR_UNSUPPORTED && strstr(rt_error_message(), "not implemented"), "fp16: %s",
              rt_error_message());
    TZ_EXPECT_OK(rt_set_matmul_precision(be, RT_BF16));
    unsigned seed = 11;
    for (int t = 0; t < 4; t++) {
        gemm_run g = {be, 33, 45, 70, 2, t & 1, t >> 1, true, false, seed++, 0};
        run(&g);
        TZ_EXPECT(g.wrong == 0, "bf16 ta=%d tb=%d: %d wrong", g.ta, g.tb, g.wrong);
    }
    /* the same GEMM against the unrounded inputs is off by far more than fp32's bound: the
     * inputs really were rounded */
    gemm_run off = {be, 16, 16, 64, 1, false, false, false, true, 99, 0};
    run(&off);
    TZ_EXPECT(off.wrong > 0, "bf16 results match unrounded inputs to fp32 accuracy: no rounding happened");
    gemm_run both[2] = {{be, 40, 24, 96, 1, false, true, true, false, 5, 0},
                        {be, 24, 56, 48, 3, true, false, true, false, 6, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, run, &both[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    TZ_EXPECT(both[0].wrong == 0 && both[1].wrong == 0, "two threads at once: %d and %d wrong", both[0].wrong,
              both[1].wrong);
    TZ_EXPECT_OK(rt_set_matmul_precision(be, RT_F32));
    gemm_run f32 = {be, 16, 16, 64, 1, false, false, false, false, 99, 0};
    run(&f32);
    TZ_EXPECT(f32.wrong == 0, "fp32 again: %d wrong", f32.wrong);
    rt_backend_free(be);
    return tz_test_result("test_cpu_precision");
}
