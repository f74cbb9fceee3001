/* The CPU backend's attention (runtime/backend/cpu/cpu_attention.c) on realistic head shapes, and the
 * per-head products inside it timed alone on each GEMM engine, to tell which engine attention
 * should call (issue 31: Debian's OpenBLAS falls back to its generic kernels on CPUs it does not
 * know, while oneDNN has kernels for each ISA but a per-call set-up cost that small heads feel).
 * scripts/bench/bench_cpu_attention.sh runs it under each ISA and OpenBLAS core type:
 *
 *   tz-bench-attention [--threads N] [--reps R] [BxNHxTxHS[:c|:m] ...]
 *
 * :c is causal (GPT-2), :m a padding key mask on the last quarter of the keys (BERT). The
 * default list is GPT-2 small's heads at T=128 and 512, BERT-base's at T=128 and the tests'
 * tiny heads. q, k and v are views into one fused qkv buffer (row stride 3*NH*HS), as in
 * models/layers/block.c. For each shape it prints, as medians of R runs after two warm-ups:
 *   rt        the backend's attention_fwd + attention_bwd (whichever engine this build routes
 *             attention to), fwd and bwd also apart;
 *   products  the six GEMMs of fwd + bwd (S = QK^T, out = PV, dP = dO V^T, dV = P^T dO,
 *             dQ = dS K, dK = dS^T Q) per (batch, head) pair over an OpenMP loop as the
 *             backend runs them, with OpenBLAS's cblas_sgemm and with oneDNN's fp32 matmul
 *             (cpu_dnnl_gemm), and their ratio; no softmax, so only the engines differ. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"
#include "runtime/backend/cpu/cpu_dnnl.h"
#include "runtime/backend/rt_backend.h"

typedef struct {
    int B, NH, T, HS;
    char kind; /* 'c' causal, 'm' key mask, 0 neither */
} shape;

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
    return t[n / 2];
}

/* One GEMM of the products loop on engine e (0 OpenBLAS, 1 oneDNN fp32); aborts on a oneDNN
 * failure, which here can only be a missing oneDNN (main checks first). */
static void gemm(int e, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                 int ldb, float *C, int ldc) {
    if (e == 0) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
                    lda, B, ldb, 0.0f, C, ldc);
    } else if (cpu_dnnl_gemm(CPU_DNNL_F32, ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc) != RT_OK) {
        fprintf(stderr, "tz-bench-attention: oneDNN gemm %dx%dx%d: %s\n", M, N, K, rt_error_message());
        exit(1);
    }
}

/* The six per-head products of attention fwd + bwd on engine e, one (b, h) pair per task as in
 * cpu_attention.c; P and dS are per-thread Tq x Tk buffers holding whatever the last head left. */
static void products(int e, const rt_attn_desc *d, float *out, const float *q, const float *k, const float *v,
                     float *dq, float *dk, float *dv, const float *dout) {
    const int T = d->Tq, HS = d->HS, NH = d->NH, ld = (int)d->ldq, ldo = (int)d->ldo;
    const size_t tt = (size_t)T * T;
#pragma omp parallel
    {
        float *P = calloc(tt, sizeof(float)), *dS = calloc(tt, sizeof(float));
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < d->B * NH; t++) {
            const size_t row = (size_t)(t / NH) * T * ld + (size_t)(t % NH) * HS;
            const size_t orow = (size_t)(t / NH) * T * ldo + (size_t)(t % NH) * HS;
            gemm(e, false, true, T, T, HS, d->scale, q + row, ld, k + row, ld, P, T);
            gemm(e, false, false, T, HS, T, 1.0f, P, T, v + row, ld, out + orow, ldo);
            gemm(e, false, true, T, T, HS, 1.0f, dout + orow, ldo, v + row, ld, dS, T);
            gemm(e, true, false, T, HS, T, 1.0f, P, T, dout + orow, ldo, dv + row, ld);
            gemm(e, false, false, T, HS, T, d->scale, dS, T, k + row, ld, dq + row, ld);
            gemm(e, true, false, T, HS, T, d->scale, dS, T, q + row, ld, dk + row, ld);
        }
        free(P);
        free(dS);
    }
}

static int bench_shape(rt_backend *be, const shape *s, int reps) {
    const int C = s->NH * s->HS;
    const size_t ld = 3 * (size_t)C, n_qkv = (size_t)s->B * s->T * ld, n_out = (size_t)s->B * s->T * C;
    float *qkv = malloc(n_qkv * sizeof(float)), *dqkv = calloc(n_qkv, sizeof(float));
    float *out = calloc(n_out, sizeof(float)), *dout = malloc(n_out * sizeof(float));
    float *probs = calloc((size_t)s->B * s->NH * s->T * s->T, sizeof(float));
    float *mask = calloc((size_t)s->B * s->T, sizeof(float));
    double *t_fwd = malloc((size_t)reps * sizeof(double)), *t_bwd = malloc((size_t)reps * sizeof(double));
    double *t_sum = malloc((size_t)reps * sizeof(double)), *t_eng[2];
    unsigned seed = 7;
    for (size_t i = 0; i < n_qkv; i++) qkv[i] = (float)((seed = seed * 1103515245u + 12345u) >> 16) / 32768.0f - 1.0f;
    for (size_t i = 0; i < n_out; i++) dout[i] = (float)((seed = seed * 1103515245u + 12345u) >> 16) / 32768.0f - 1.0f;
    for (int b = 0; b < s->B; b++) /* BERT's padding: the last quarter of each row's keys */
        for (int j = s->T - s->T / 4; j < s->T; j++) mask[(size_t)b * s->T + j] = -INFINITY;
    rt_attn_desc d = {.B = s->B,
                      .NH = s->NH,
                      .Tq = s->T,
                      .Tk = s->T,
                      .HS = s->HS,
                      .ldq = ld,
                      .ldk = ld,
                      .ldv = ld,
                      .ldo = (size_t)C,
                      .scale = 1.0f / sqrtf((float)s->HS),
                      .causal = s->kind == 'c',
                      .key_mask = s->kind == 'm' ? mask : NULL,
                      .probs_dtype = RT_F32};
    const float *q = qkv, *k = qkv + C, *v = qkv + 2 * C;
    float *dq = dqkv, *dk = dqkv + C, *dv = dqkv + 2 * C;
    for (int r = -2; r < reps; r++) {
        double t0 = bench_now();
        rt_attention_fwd(be, &d, rt_xf(out), probs, rt_xf(q), rt_xf(k), rt_xf(v));
        double t1 = bench_now();
        rt_attention_bwd(be, &d, rt_xf(dq), rt_xf(dk), rt_xf(dv), NULL, rt_xf(dout), probs, rt_xf(q), rt_xf(k),
                         rt_xf(v));
        double t2 = bench_now();
        if (r >= 0) t_fwd[r] = t1 - t0, t_bwd[r] = t2 - t1, t_sum[r] = t2 - t0;
    }
    double ms_rt = 1e3 * median(t_sum, reps), ms_fwd = 1e3 * median(t_fwd, reps), ms_bwd = 1e3 * median(t_bwd, reps);
    double ms_eng[2] = {-1, -1};
    for (int e = 0; e < 2; e++) {
        if (e == 1 && !cpu_dnnl_has(CPU_DNNL_F32)) break;
        t_eng[e] = malloc((size_t)reps * sizeof(double));
        for (int r = -2; r < reps; r++) {
            double t0 = bench_now();
            products(e, &d, out, q, k, v, dq, dk, dv, dout);
            if (r >= 0) t_eng[e][r] = bench_now() - t0;
        }
        ms_eng[e] = 1e3 * median(t_eng[e], reps);
        free(t_eng[e]);
    }
    /* the products' FLOPs: six T x T x HS GEMMs per head, causal or not */
    const double gf = 6.0 * 2.0 * s->T * (double)s->T * s->HS * s->B * s->NH / 1e9;
    char name[64];
    snprintf(name, sizeof name, "%dx%dx%dx%d%s", s->B, s->NH, s->T, s->HS,
             s->kind == 'c'   ? ":c"
             : s->kind == 'm' ? ":m"
                              : "");
    printf("%-16s %9.3f %9.3f %9.3f | %9.3f %7.1f", name, ms_rt, ms_fwd, ms_bwd, ms_eng[0], gf / ms_eng[0] * 1e3);
    if (ms_eng[1] >= 0)
        printf(" %9.3f %7.1f %7.2f\n", ms_eng[1], gf / ms_eng[1] * 1e3, ms_eng[0] / ms_eng[1]);
    else
        printf(" %9s %7s %7s\n", "-", "-", "-");
    fflush(stdout);
    free(qkv);
    free(dqkv);
    free(out);
    free(dout);
    free(probs);
    free(mask);
    free(t_fwd);
    free(t_bwd);
    free(t_sum);
    return 0;
}

int main(int argc, char **argv) {
    int threads = 2, reps = 5, n_shapes = 0;
    shape shapes[32];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (n_shapes < 32) {
            shape s = {0};
            char kind = 0;
            int n = sscanf(argv[i], "%dx%dx%dx%d:%c", &s.B, &s.NH, &s.T, &s.HS, &kind);
            if (n < 4 || s.B < 1 || s.NH < 1 || s.T < 1 || s.HS < 1 || (n == 5 && kind != 'c' && kind != 'm')) {
                fprintf(stderr, "tz-bench-attention: shape '%s' is not BxNHxTxHS[:c|:m] (e.g. 8x12x128x64:c)\n",
                        argv[i]);
                return 2;
            }
            s.kind = n == 5 ? kind : 0;
            shapes[n_shapes++] = s;
        }
    }
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "tz-bench-attention: --threads and --reps must be >= 1\n");
        return 2;
    }
    if (n_shapes == 0) { /* GPT-2 small at 128 and 512 tokens, BERT-base at 128, the tests' tiny heads */
        const shape def[] = {{8, 12, 128, 64, 'c'}, {8, 12, 512, 64, 'c'}, {8, 12, 128, 64, 'm'}, {2, 4, 20, 16, 'c'}};
        n_shapes = (int)(sizeof def / sizeof *def);
        memcpy(shapes, def, sizeof def);
    }
    rt_backend *be = NULL;
    if (rt_cpu_backend_init(threads, &be) != RT_OK) {
        fprintf(stderr, "tz-bench-attention: %s\n", rt_error_message());
        return 1;
    }
    printf("# %s; %d threads, median of %d\n", be->ops->device_model(be->ctx), threads, reps);
    printf("# ms: rt = the backend's attention fwd+bwd (fwd, bwd); products = the six per-head GEMMs alone\n");
    printf("%-16s %9s %9s %9s | %9s %7s %9s %7s %7s\n", "BxNHxTxHS", "rt", "rt_fwd", "rt_bwd", "openblas", "GF/s",
           "onednn", "GF/s", "ob/dnn");
    for (int i = 0; i < n_shapes; i++) bench_shape(be, &shapes[i], reps);
    rt_backend_free(be);
    return 0;
}
