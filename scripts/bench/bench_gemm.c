/* The CPU GEMM engines tunezoo can call, timed on the same shapes: OpenBLAS's sgemm (the
 * backend's today), oneDNN's fp32 matmul and oneDNN's bf16 matmul (bf16 inputs, fp32
 * accumulation and output; runtime/backend/cpu/cpu_dnnl.c). scripts/bench/bench_gemm.py runs it beside
 * PyTorch's matmul; it prints one JSON line per shape and engine:
 *
 *   tz-bench-gemm [--threads N] [--reps R] [MxNxK[:tA tB] ...]
 *
 * A shape's default list is GPT-2 124M's linears at 512 tokens, forward and backward (weights
 * [out, in]: forward X W^T, dX = dY W, dW = dY^T X). Each engine runs R timed calls after two
 * warm-up calls; the median time gives GFLOP/s = 2 M N K / t. */
#include <cblas.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"
#include "runtime/backend/cpu/cpu_dnnl.h"
#include "runtime/base/rt_dtype.h"

typedef struct {
    int M, N, K;
    int ta, tb;
} shape;

/* One engine on one shape: the median seconds of reps calls. engine 0 OpenBLAS, 1 oneDNN fp32,
 * 2 oneDNN bf16. */
static double time_engine(int engine, const shape *s, const float *A, const float *B, const uint16_t *A16,
                          const uint16_t *B16, float *C, int reps) {
    const int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    double *t = malloc((size_t)reps * sizeof *t);
    for (int r = -2; r < reps; r++) {
        double t0 = bench_now();
        if (engine == 0)
            cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, s->M, s->N,
                        s->K, 1.0f, A, lda, B, ldb, 0.0f, C, s->N);
        else if (cpu_dnnl_gemm(engine == 2 ? CPU_DNNL_BF16 : CPU_DNNL_F32, s->ta, s->tb, s->M, s->N, s->K, 1.0f,
                               engine == 2 ? (const void *)A16 : A, lda, engine == 2 ? (const void *)B16 : B, ldb, 0.0f,
                               C, s->N) != RT_OK) {
            free(t);
            return -1;
        }
        if (r >= 0) t[r] = bench_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, bench_cmp_double);
    double median = t[reps / 2];
    free(t);
    return median;
}

int main(int argc, char **argv) {
    int threads = 2, reps = 20, n_shapes = 0;
    shape *shapes = calloc((size_t)argc + 8, sizeof *shapes); /* every argument a shape, or the defaults */
    if (!shapes) return 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else {
            shape s = {0};
            if (sscanf(argv[i], "%dx%dx%d:%1d%1d", &s.M, &s.N, &s.K, &s.ta, &s.tb) < 3 || s.M < 1 || s.N < 1 ||
                s.K < 1) {
                fprintf(stderr, "tz-bench-gemm: shape '%s' is not MxNxK[:tA tB] (e.g. 512x768x768:01)\n", argv[i]);
                return 2;
            }
            shapes[n_shapes++] = s;
        }
    }
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "tz-bench-gemm: --threads and --reps must be >= 1\n");
        return 2;
    }
    if (n_shapes == 0) { /* GPT-2 124M at 512 tokens: qkv, proj, fc, fc_proj, forward and backward */
        const shape def[] = {{512, 2304, 768, 0, 1}, {512, 768, 768, 0, 1},  {512, 3072, 768, 0, 1},
                             {512, 768, 3072, 0, 1}, {512, 768, 3072, 0, 0}, {512, 3072, 768, 0, 0},
                             {3072, 768, 512, 1, 0}, {768, 3072, 512, 1, 0}};
        n_shapes = (int)(sizeof def / sizeof *def);
        memcpy(shapes, def, sizeof def);
    }
    omp_set_num_threads(threads);
    char kernel[128] = "none";
    for (int i = 0; i < n_shapes; i++) {
        const shape *s = &shapes[i];
        const size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N;
        float *A = malloc(na * sizeof(float)), *B = malloc(nb * sizeof(float)), *C = malloc((size_t)s->M * s->N * 4);
        uint16_t *A16 = malloc(na * 2), *B16 = malloc(nb * 2);
        unsigned seed = 7;
        for (size_t j = 0; j < na; j++)
            A16[j] = rt_f32_to_bf16(A[j] = (float)((seed = seed * 1103515245u + 12345u) >> 16) / 65536.0f - 0.5f);
        for (size_t j = 0; j < nb; j++)
            B16[j] = rt_f32_to_bf16(B[j] = (float)((seed = seed * 1103515245u + 12345u) >> 16) / 65536.0f - 0.5f);
        const char *names[3] = {"openblas_f32", "onednn_f32", "onednn_bf16"};
        for (int e = 0; e < 3; e++) {
            double sec = time_engine(e, s, A, B, A16, B16, C, reps);
            if (e == 2) cpu_dnnl_kernel(CPU_DNNL_BF16, s->M, s->N, s->K, kernel, sizeof kernel);
            if (sec < 0) {
                printf("{\"shape\": \"%dx%dx%d:%d%d\", \"engine\": \"%s\", \"error\": \"oneDNN has no such matmul here "
                       "(no oneDNN in this build, or no bf16 kernel for this CPU)\"}\n",
                       s->M, s->N, s->K, s->ta, s->tb, names[e]);
                continue;
            }
            printf("{\"shape\": \"%dx%dx%d:%d%d\", \"engine\": \"%s\", \"ms\": %.4f, \"gflops\": %.1f%s%s%s}\n", s->M,
                   s->N, s->K, s->ta, s->tb, names[e], 1e3 * sec, 2.0 * s->M * s->N * s->K / sec / 1e9,
                   e == 2 ? ", \"kernel\": \"" : "", e == 2 ? kernel : "", e == 2 ? "\"" : "");
            fflush(stdout);
        }
        free(A);
        free(B);
        free(C);
        free(A16);
        free(B16);
    }
    free(shapes);
    return 0;
}
