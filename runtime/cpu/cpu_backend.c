/* The CPU backend: the rt_backend_ops table over host memory, with GEMM from oneDNN (OpenBLAS
 * when the build has no oneDNN: on this project's CPUs oneDNN's fp32 matmul measures 1.7-2x
 * OpenBLAS's, scripts/bench/bench_gemm.py) and every other kernel an OpenMP loop (see the other files in runtime/cpu). "Device" memory
 * is plain host memory, 64-byte aligned so that rows start on a cache line and the
 * compiler's vector loads never split one; copies are memcpy and sync has nothing to wait
 * for. It is the reference the CUDA backend is checked against, so correctness comes first. */
#include <cblas.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/cpu_dnnl.h"
#include "runtime/cpu/cpu_internal.h"
#include "runtime/rt_dtype.h"

/* Not every cblas.h declares these (a redundant compatible declaration is harmless). */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
int openblas_get_parallel(void);

typedef struct {
    int threads;     /* as asked for; <= 0 means OpenMP's default */
    rt_dtype matmul; /* RT_F32 or RT_BF16: what gemm rounds its inputs to */
    char model[256]; /* the processor and the GEMM engine, for the start-up log */
} rt_cpu_ctx;

static void *cpu_alloc(void *ctx, size_t bytes) {
    void *p = NULL;
    /* posix_memalign(0) may return NULL, which callers would read as out of memory */
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    memset(p, 0, bytes);
    return p;
}

static void cpu_free(void *ctx, void *p) { free(p); }

static void cpu_memcpy(void *ctx, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memcpy(dst, src, bytes);
}

static void cpu_zero(void *ctx, void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
}

static void cpu_sync(void *ctx) {}

static rt_status cpu_set_matmul_precision(void *ctx, rt_dtype dtype) {
    if (dtype != RT_F32 && dtype != RT_BF16)
        return rt_errorf(RT_ERR_UNSUPPORTED, "%s matmuls are not implemented on the CPU yet (fp32 and bf16 are)",
                         rt_dtype_name(dtype));
    ((rt_cpu_ctx *)ctx)->matmul = dtype;
    return RT_OK;
}

/* This thread's buffers for the bf16 copies of a GEMM's inputs (the thread comm's ranks call
 * gemm at once), grown on demand and freed when the thread ends. */
typedef struct {
    uint16_t *p[2];
    size_t cap[2];
} cpu_bf16_scratch;

static pthread_key_t bf16_key;
static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;

static void bf16_scratch_free(void *v) {
    cpu_bf16_scratch *s = v;
    free(s->p[0]);
    free(s->p[1]);
    free(s);
}

static void bf16_key_init(void) { RT_CHECK(pthread_key_create(&bf16_key, bf16_scratch_free) == 0, "pthread key"); }

/* rows x cols of X (row stride ld) rounded to bf16 into this thread's buffer `which`, packed
 * (row stride cols). */
static const uint16_t *cpu_to_bf16(int which, const float *X, int rows, int cols, int ld) {
    pthread_once(&bf16_once, bf16_key_init);
    cpu_bf16_scratch *s = pthread_getspecific(bf16_key);
    if (!s) {
        s = rt_xcalloc(1, sizeof *s);
        RT_CHECK(pthread_setspecific(bf16_key, s) == 0, "pthread_setspecific");
    }
    const size_t n = (size_t)rows * cols;
    if (n > s->cap[which]) {
        free(s->p[which]);
        s->p[which] = rt_xmalloc(n * sizeof(uint16_t));
        s->cap[which] = n;
    }
    uint16_t *out = s->p[which];
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) out[(size_t)r * cols + c] = rt_f32_to_bf16(X[(size_t)r * ld + c]);
    return out;
}

/* One GEMM with bf16 inputs: oneDNN's bf16 matmul, or (no oneDNN) sgemm over the rounded
 * values, which gives the same products and fp32 sums. */
static void cpu_gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                          const float *B, int ldb, float beta, float *C, int ldc) {
    const int a_rows = trans_a ? K : M, a_cols = trans_a ? M : K, b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    const uint16_t *A16 = cpu_to_bf16(0, A, a_rows, a_cols, lda), *B16 = cpu_to_bf16(1, B, b_rows, b_cols, ldb);
    if (cpu_dnnl_available()) {
        rt_status st = cpu_dnnl_gemm(CPU_DNNL_BF16, trans_a, trans_b, M, N, K, alpha, A16, a_cols, B16, b_cols, beta,
                                     C, ldc);
        RT_CHECK(st == RT_OK, "oneDNN bf16 gemm M=%d N=%d K=%d: %s", M, N, K, rt_error_message());
        return;
    }
    float *Af = rt_xmalloc((size_t)a_rows * a_cols * sizeof(float)), *Bf = rt_xmalloc((size_t)b_rows * b_cols * 4);
    rt_convert_to_f32(Af, A16, RT_BF16, (size_t)a_rows * a_cols);
    rt_convert_to_f32(Bf, B16, RT_BF16, (size_t)b_rows * b_cols);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha,
                Af, a_cols, Bf, b_cols, beta, C, ldc);
    free(Af);
    free(Bf);
}

static void cpu_gemm(void *ctx, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, size_t stride_a, const float *B, int ldb,
                     size_t stride_b, float beta, float *C, int ldc, size_t stride_c, int batch) {
    RT_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0, "M=%d N=%d K=%d batch=%d", M, N, K, batch);
    if (M == 0 || N == 0) return;
    /* Row-major strides must cover a row as stored: cblas rejects (and prints, not aborts)
     * a short ld, so catch it here with the shapes in the message. */
    RT_CHECK(lda >= (trans_a ? M : K) && lda >= 1, "lda=%d M=%d K=%d trans_a=%d", lda, M, K, trans_a);
    RT_CHECK(ldb >= (trans_b ? K : N) && ldb >= 1, "ldb=%d K=%d N=%d trans_b=%d", ldb, K, N, trans_b);
    RT_CHECK(ldc >= N, "ldc=%d N=%d", ldc, N);
    const bool dnnl = cpu_dnnl_available(), bf16 = ((rt_cpu_ctx *)ctx)->matmul == RT_BF16 && K > 0;
    for (int b = 0; b < batch; b++) {
        if (bf16) {
            cpu_gemm_bf16(trans_a, trans_b, M, N, K, alpha, A + (size_t)b * stride_a, lda, B + (size_t)b * stride_b, ldb,
                          beta, C + (size_t)b * stride_c, ldc);
            continue;
        }
        if (dnnl) {
            /* a oneDNN failure here is a bug (the shapes are checked above): stop, naming it */
            rt_status st = cpu_dnnl_gemm(CPU_DNNL_F32, trans_a, trans_b, M, N, K, alpha, A + (size_t)b * stride_a, lda,
                                         B + (size_t)b * stride_b, ldb, beta, C + (size_t)b * stride_c, ldc);
            RT_CHECK(st == RT_OK, "oneDNN gemm M=%d N=%d K=%d: %s", M, N, K, rt_error_message());
            continue;
        }
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A + (size_t)b * stride_a,
                    lda, B + (size_t)b * stride_b, ldb, beta, C + (size_t)b * stride_c, ldc);
    }
}

int rt_cpu_blas_serial_begin(void) {
    /* 1 = pthreads build; an OpenMP build already runs serially inside a parallel region, and
     * its openblas_set_num_threads would also change OpenMP's thread count */
    if (openblas_get_parallel() != 1) return 0;
    int n = openblas_get_num_threads();
    if (n > 1) openblas_set_num_threads(1);
    return n;
}

void rt_cpu_blas_serial_end(int saved) {
    if (saved > 1) openblas_set_num_threads(saved);
}

/* The processor's name, and which GEMM kernels run on it: the start-up log says so. Returns
 * whether oneDNN's bf16 kernel is native. */
static bool cpu_describe(rt_cpu_ctx *c) {
    char name[128] = "CPU", line[256], f32[64], bf16[64];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "model name : %127[^\n]", name) == 1) break;
    if (f) fclose(f);
    if (cpu_dnnl_kernel(CPU_DNNL_F32, 512, 768, 768, f32, sizeof f32) != RT_OK) {
        snprintf(c->model, sizeof c->model, "%s; GEMM OpenBLAS (no oneDNN in this build)", name);
        return false;
    }
    cpu_dnnl_kernel(CPU_DNNL_BF16, 512, 768, 768, bf16, sizeof bf16);
    /* oneDNN's bf16 kernels name the ISA they need; an emulating one names none of these */
    bool native = strstr(bf16, "bf16") || strstr(bf16, "amx");
    snprintf(c->model, sizeof c->model, "%s; GEMM oneDNN %s, bf16 %s (%s)", name, f32, native ? "native" : "emulated",
             bf16);
    return native;
}

static const char *cpu_device_model(void *ctx) { return ((rt_cpu_ctx *)ctx)->model; }

/* MemAvailable from /proc/meminfo: what the kernel could give without swapping. */
static size_t cpu_free_memory(void *ctx) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    fclose(f);
    return (size_t)kib * 1024;
}

static const rt_backend_ops rt_cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .free_memory = cpu_free_memory,
    .to_device = cpu_memcpy,
    .to_host = cpu_memcpy,
    .copy = cpu_memcpy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .device_model = cpu_device_model,
    .set_matmul_precision = cpu_set_matmul_precision,
    .gemm = cpu_gemm,
    .layernorm_fwd = rt_cpu_layernorm_fwd,
    .layernorm_bwd = rt_cpu_layernorm_bwd,
    .rmsnorm_fwd = rt_cpu_rmsnorm_fwd,
    .rmsnorm_bwd = rt_cpu_rmsnorm_bwd,
    .act_fwd = rt_cpu_act_fwd,
    .act_bwd = rt_cpu_act_bwd,
    .gated_act_fwd = rt_cpu_gated_act_fwd,
    .gated_act_bwd = rt_cpu_gated_act_bwd,
    .add_bias = rt_cpu_add_bias,
    .bias_bwd = rt_cpu_bias_bwd,
    .add = rt_cpu_add,
    .axpy = rt_cpu_axpy,
    .scale = rt_cpu_scale,
    .scale_rows = rt_cpu_scale_rows,
    .attention_fwd = rt_cpu_attention_fwd,
    .attention_bwd = rt_cpu_attention_bwd,
    .relbias_fwd = rt_cpu_relbias_fwd,
    .relbias_bwd = rt_cpu_relbias_bwd,
    .embedding_fwd = rt_cpu_embedding_fwd,
    .embedding_bwd = rt_cpu_embedding_bwd,
    .softmax_xent = rt_cpu_softmax_xent,
    .xent_vocab = rt_cpu_xent_vocab,
    .dropout_fwd = rt_cpu_dropout_fwd,
    .dropout_bwd = rt_cpu_dropout_bwd,
    .dropout_cols = rt_cpu_dropout_cols,
    .gather_rows = rt_cpu_gather_rows,
    .scatter_rows_add = rt_cpu_scatter_rows_add,
    .adamw = rt_cpu_adamw,
    .sumsq = rt_cpu_sumsq,
};

rt_status rt_cpu_backend_init(int threads, rt_backend **out) {
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    rt_cpu_ctx *cx = NULL;
    *out = NULL;
    be = calloc(1, sizeof *be);
    cx = calloc(1, sizeof *cx);
    if (!be || !cx) RT_FAIL(RT_ERR_NOMEM, "rt_cpu_backend_init: out of memory for the backend");
    cx->threads = threads;
    cx->matmul = RT_F32;
    if (threads > 0) {
        /* OpenBLAS (pthread build) keeps its own pool: size both so they do not oversubscribe */
        omp_set_num_threads(threads);
        openblas_set_num_threads(threads);
    }
    be->native_bf16 = cpu_describe(cx); /* here, not on first use: the thread comm's ranks would race for it */
    be->ops = &rt_cpu_ops;
    be->ctx = cx;
    be->device = -1;
    *out = be;
    return RT_OK;
fail:
    free(cx);
    free(be);
    return st;
}

void rt_cpu_backend_free(rt_backend *be) {
    if (!be) return;
    free(be->ctx);
    free(be);
}
