/* oneDNN's matmul (runtime/backend/cpu/cpu_dnnl.c) against a double-precision reference: fp32 inputs,
 * and bf16 inputs (the reference takes the same bf16-rounded values), every transpose, alpha
 * and beta, padded leading dimensions and odd sizes, from two threads at once; the error bound
 * is fp32 accumulation's, K ulps of the sum of |a b|. OpenBLAS's sgemm is checked against the
 * same bound beside it. A build without oneDNN must refuse each call with one clear error, and so
 * must bf16 on a CPU for which oneDNN has no bf16 matmul (AVX2 alone). */
#include <cblas.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/cpu/cpu_dnnl.h"
#include "runtime/base/rt_dtype.h"
#include "tests/testutil.h"

typedef struct {
    int M, N, K;
    bool ta, tb;
    float alpha, beta;
    unsigned seed;
    int failures; /* of this case (thread-safe: each case counts its own) */
} gemm_case;

/* Runs one case with fp32 and bf16 inputs (and OpenBLAS on the fp32 ones). */
static void *run_case(void *arg) {
    gemm_case *g = arg;
    const int M = g->M, N = g->N, K = g->K;
    const int lda = (g->ta ? M : K) + 3, ldb = (g->tb ? K : N) + 5, ldc = N + 2;
    const size_t na = (size_t)(g->ta ? K : M) * lda, nb = (size_t)(g->tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = malloc(na * sizeof(float)), *B = malloc(nb * sizeof(float)), *C0 = malloc(nc * sizeof(float));
    float *C = malloc(nc * sizeof(float));
    uint16_t *A16 = malloc(na * sizeof(uint16_t)), *B16 = malloc(nb * sizeof(uint16_t));
    unsigned s = g->seed;
    for (size_t i = 0; i < na; i++) A[i] = tz_uniform(&s);
    for (size_t i = 0; i < nb; i++) B[i] = tz_uniform(&s);
    for (size_t i = 0; i < nc; i++) C0[i] = tz_uniform(&s);
    for (int pass = 0; pass < 3; pass++) { /* fp32 oneDNN, bf16 oneDNN, fp32 OpenBLAS */
        const bool bf16 = pass == 1;
        if (bf16 && !cpu_dnnl_has(CPU_DNNL_BF16)) continue; /* checked in main */
        if (bf16) { /* the inputs as bf16, and the reference over exactly those values */
            for (size_t i = 0; i < na; i++) A[i] = rt_bf16_to_f32(A16[i] = rt_f32_to_bf16(A[i]));
            for (size_t i = 0; i < nb; i++) B[i] = rt_bf16_to_f32(B16[i] = rt_f32_to_bf16(B[i]));
        }
        memcpy(C, C0, nc * sizeof(float));
        if (pass < 2) {
            rt_status st =
                cpu_dnnl_gemm(bf16 ? CPU_DNNL_BF16 : CPU_DNNL_F32, g->ta, g->tb, M, N, K, g->alpha,
                              bf16 ? (const void *)A16 : A, lda, bf16 ? (const void *)B16 : B, ldb, g->beta, C, ldc);
            if (st != RT_OK) {
                fprintf(stderr, "FAILED: %dx%dx%d: %s\n", M, N, K, rt_error_message());
                g->failures++;
                continue;
            }
        } else {
            cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans, M, N, K,
                        g->alpha, A, lda, B, ldb, g->beta, C, ldc);
        }
        g->failures +=
            tz_gemm_misses(pass == 2 ? "openblas"
                           : bf16    ? "dnnl bf16"
                                     : "dnnl f32",
                           g->ta, g->tb, M, N, K, g->alpha, A, lda, B, ldb, g->beta, C0, C, ldc, RT_F32, false);
        /* the padding columns of C are the caller's: untouched */
        for (int i = 0; i < M; i++)
            for (int j = N; j < ldc; j++)
                if (C[(size_t)i * ldc + j] != C0[(size_t)i * ldc + j] && g->failures++ < 3)
                    fprintf(stderr, "FAILED: C's padding column %d of row %d was written\n", j, i);
    }
    free(A);
    free(B);
    free(C0);
    free(C);
    free(A16);
    free(B16);
    return NULL;
}

int main(void) {
    if (!cpu_dnnl_has(CPU_DNNL_F32)) {
        float c = 0;
        rt_status st = cpu_dnnl_gemm(CPU_DNNL_F32, false, false, 1, 1, 1, 1.0f, &c, 1, &c, 1, 0.0f, &c, 1);
        TZ_EXPECT(st == RT_ERR_UNSUPPORTED && strstr(rt_error_message(), "libdnnl-dev"), "no oneDNN: %s",
                  rt_error_message());
        return tz_test_result("test_cpu_dnnl");
    }
    const int shapes[][3] = {{37, 29, 53}, {1, 64, 16}, {64, 1, 130}, {16, 48, 1}, {128, 96, 64}};
    const float alphas[] = {1.0f, 0.5f}, betas[] = {0.0f, 1.0f, 0.25f};
    unsigned seed = 1;
    for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++)
        for (int t = 0; t < 4; t++)
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 3; b++) {
                    gemm_case g = {shapes[sh][0], shapes[sh][1], shapes[sh][2], t & 1, t >> 1,
                                   alphas[a],     betas[b],      seed++,        0};
                    run_case(&g);
                    TZ_EXPECT(g.failures == 0, "%dx%dx%d ta=%d tb=%d alpha=%g beta=%g: %d wrong", g.M, g.N, g.K, g.ta,
                              g.tb, g.alpha, g.beta, g.failures);
                }
    /* two threads at once (the thread comm's ranks call the backend concurrently) */
    gemm_case both[2] = {{96, 80, 72, false, true, 1.0f, 0.0f, 77, 0}, {64, 112, 48, true, false, 0.5f, 1.0f, 78, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, run_case, &both[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    TZ_EXPECT(both[0].failures == 0 && both[1].failures == 0, "concurrent calls: %d and %d wrong", both[0].failures,
              both[1].failures);
    char kernel[128];
    if (cpu_dnnl_has(CPU_DNNL_BF16)) {
        TZ_EXPECT_OK(cpu_dnnl_kernel(CPU_DNNL_BF16, 512, 768, 768, kernel, sizeof kernel));
        TZ_EXPECT(kernel[0] != '\0', "no kernel name");
        printf("oneDNN bf16 512x768x768: %s\n", kernel);
    } else { /* a CPU without AVX-512: a clear refusal, which the backend answers with fp32 GEMMs */
        float c = 0;
        uint16_t h = 0;
        rt_status st = cpu_dnnl_gemm(CPU_DNNL_BF16, false, false, 1, 1, 1, 1.0f, &h, 1, &h, 1, 0.0f, &c, 1);
        TZ_EXPECT(st == RT_ERR_UNSUPPORTED && rt_error_message()[0], "bf16 on this CPU: %s", rt_error_message());
        printf("oneDNN has no bf16 matmul for this CPU; the bf16 cases were skipped\n");
    }
    float c = 1.0f;
    TZ_EXPECT_OK(cpu_dnnl_gemm(CPU_DNNL_F32, false, false, 0, 4, 4, 1.0f, &c, 4, &c, 4, 0.0f, &c, 4));
    /* K 0: C = beta C (oneDNN's own kernels would divide by zero) */
    float c2[4] = {1, 2, 3, 4};
    TZ_EXPECT_OK(cpu_dnnl_gemm(CPU_DNNL_F32, false, false, 2, 2, 0, 1.0f, c2, 1, c2, 2, 0.5f, c2, 2));
    TZ_EXPECT(c2[0] == 0.5f && c2[3] == 2.0f, "K 0 with beta 0.5: C = %g .. %g", c2[0], c2[3]);
    return tz_test_result("test_cpu_dnnl");
}
