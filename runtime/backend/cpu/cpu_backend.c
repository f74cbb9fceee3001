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

#include "runtime/backend/cpu/cpu_dnnl.h"
#include "runtime/backend/cpu/cpu_internal.h"
#include "runtime/base/rt_dtype.h"

/* Not every cblas.h declares these (a redundant compatible declaration is harmless). */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
int openblas_get_parallel(void);

typedef struct {
    int threads;     /* as asked for; <= 0 means OpenMP's default */
    rt_dtype matmul; /* RT_F32, RT_BF16 or RT_F16: what gemm rounds its inputs to */
    char model[256]; /* the processor and the GEMM engine, for the start-up log */
    /* The weights' copy at the matmul precision (rt_weight_copy_set): w[0 .. n) as bf16 bits
     * (bits16: what oneDNN's bf16 matmul reads) or as rounded floats (fp16, or bf16 where the
     * fp32 GEMM does the work). copy NULL: none. */
    const float *w;
    size_t n;
    void *copy;
    bool bits16;
} rt_cpu_ctx;

rt_dtype rt_cpu_matmul_dtype(const void *ctx) { return ((const rt_cpu_ctx *)ctx)->matmul; }

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

/* Rounds w[0 .. n) into the copy at offset `at`. */
static void cpu_weight_copy_round(rt_cpu_ctx *c, size_t at, const float *w, size_t n) {
    if (c->bits16) {
        uint16_t *out = (uint16_t *)c->copy + at;
#pragma omp parallel for schedule(static) if (n >= RT_CPU_PAR_MIN)
        for (size_t i = 0; i < n; i++) out[i] = rt_f32_to_bf16(w[i]);
    } else {
        float *out = (float *)c->copy + at;
        const size_t chunk = 1 << 14, n_chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n >= RT_CPU_PAR_MIN)
        for (size_t k = 0; k < n_chunks; k++)
            rt_cpu_round_span(c->matmul, out + k * chunk, w + k * chunk, k + 1 < n_chunks ? chunk : n - k * chunk);
    }
}

static rt_status cpu_weight_copy_set(void *ctx, const float *w, size_t n) {
    rt_cpu_ctx *c = ctx;
    free(c->copy);
    c->copy = NULL;
    c->w = NULL;
    c->n = 0;
    if (!w || n == 0 || c->matmul == RT_F32) return RT_OK;
    c->bits16 = c->matmul == RT_BF16 && cpu_dnnl_has(CPU_DNNL_BF16);
    const size_t bytes = n * (c->bits16 ? sizeof(uint16_t) : sizeof(float));
    if (posix_memalign(&c->copy, 64, bytes) != 0) {
        c->copy = NULL;
        return rt_errorf(RT_ERR_NOMEM, "out of memory for the %s copy of the weights (%.1f MiB)",
                         rt_dtype_name(c->matmul), (double)bytes / 1048576.0);
    }
    c->w = w;
    c->n = n;
    cpu_weight_copy_round(c, 0, w, n);
    return RT_OK;
}

static void cpu_weight_copy_update(void *ctx, const float *part, size_t n) {
    rt_cpu_ctx *c = ctx;
    size_t at = 0, len = rt_weight_copy_overlap(c->w, c->n, part, n, &at);
    if (len) cpu_weight_copy_round(c, at, c->w + at, len);
}

/* AdamW with scalars k, writing the weights' copy as it goes where the copy holds all of these
 * weights (a part is rounded after). */
static void cpu_adamw_with(rt_cpu_ctx *c, float *params, const float *grads, float *m, float *v, size_t n,
                           const rt_adamw_scalars *k, float grad_scale) {
    size_t at = 0;
    const bool whole = rt_weight_copy_overlap(c->w, c->n, params, n, &at) == n;
    rt_cpu_adamw(params, grads, m, v, n, k, grad_scale, whole && c->bits16 ? (uint16_t *)c->copy + at : NULL,
                 whole && !c->bits16 ? (float *)c->copy + at : NULL, c->matmul);
    if (!whole) cpu_weight_copy_update(c, params, n);
}

static void cpu_adamw(void *ctx, float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1,
                      float beta2, float eps, float weight_decay, float grad_scale, int64_t t) {
    RT_CHECK(t >= 1, "AdamW step t=%lld must be >= 1", (long long)t);
    const rt_adamw_scalars k = rt_adamw_scalars_of(lr, beta1, beta2, eps, weight_decay, t);
    cpu_adamw_with(ctx, params, grads, m, v, n, &k, grad_scale);
}

/* The step's ops (rt_step_state): on the CPU its record is host memory, read at once. */
static void cpu_loss_into(void *ctx, double *acc, const float *losses, size_t n) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += losses[i];
    *acc += sum;
}

static void cpu_sumsq_into(void *ctx, rt_step_state *s, const float *x, size_t n) {
    s->sumsq += rt_cpu_sumsq(ctx, x, n);
}

static void cpu_step_finish(void *ctx, rt_step_state *s, double max_norm, double loss_scale) {
    rt_step_finish(s, max_norm, loss_scale);
}

static void cpu_adamw_step(void *ctx, const rt_step_state *s, int group, float *params, const float *grads, float *m,
                           float *v, size_t n) {
    RT_CHECK(group == 0 || group == 1, "AdamW group %d", group);
    if (!s->skip) cpu_adamw_with(ctx, params, grads, m, v, n, &s->adam[group], s->coef);
}

/* X's rows x cols (row stride ld) read from the weights' copy, when they all lie in it, are packed
 * (ld == cols: a whole weight matrix, the same matmul descriptor as a rounded scratch copy, so
 * oneDNN picks the same kernel and the bits cannot differ) and it holds the form asked for (bf16
 * bits or floats): the copy at X's offset. */
static const void *cpu_weight_copy_find(const rt_cpu_ctx *c, bool bits16, const float *X, int rows, int cols, int ld) {
    const size_t n = (size_t)rows * (size_t)cols;
    size_t at = 0;
    if (!c->copy || c->bits16 != bits16 || rows < 1 || (rows > 1 && ld != cols) ||
        rt_weight_copy_overlap(c->w, c->n, X, n, &at) != n)
        return NULL;
    return bits16 ? (const void *)((const uint16_t *)c->copy + at) : (const void *)((const float *)c->copy + at);
}

static rt_status cpu_set_matmul_precision(void *ctx, rt_dtype dtype) {
    /* rt_set_precision lets only these three through */
    RT_CHECK(dtype == RT_F32 || dtype == RT_BF16 || dtype == RT_F16, "matmul precision %s", rt_dtype_name(dtype));
    rt_cpu_ctx *c = ctx;
    if (c->matmul != dtype) cpu_weight_copy_set(ctx, NULL, 0); /* it holds the old precision's values */
    c->matmul = dtype;
    return RT_OK;
}

static void cpu_round_to(void *ctx, rt_dtype dtype, float *x, size_t rows, int cols, size_t ld) {
    RT_CHECK(dtype == RT_BF16 || dtype == RT_F16, "round_to %s", rt_dtype_name(dtype));
    if (ld == (size_t)cols) { /* contiguous: one flat loop the compiler vectorizes */
        const size_t n = rows * (size_t)cols;
        if (dtype == RT_BF16) {
#pragma omp parallel for schedule(static) if (n >= RT_CPU_PAR_MIN)
            for (size_t i = 0; i < n; i++) x[i] = rt_round_bf16(x[i]);
        } else {
#pragma omp parallel for schedule(static) if (n >= RT_CPU_PAR_MIN)
            for (size_t i = 0; i < n; i++) x[i] = rt_round_f16(x[i]);
        }
        return;
    }
#pragma omp parallel for schedule(static) if (rows * (size_t)cols >= RT_CPU_PAR_MIN)
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) x[r * ld + c] = rt_round_to(dtype, x[r * ld + c]);
}

/* fp32 src as 2-byte dtype values at dst, in chunks so that each thread converts a contiguous run. */
#define CPU_CONVERT_CHUNK ((size_t)1 << 14)
static void cpu_narrow16(rt_dtype dtype, void *dst, const float *src, size_t n) {
    RT_CHECK(dtype == RT_BF16 || dtype == RT_F16, "narrow to %s", rt_dtype_name(dtype));
    const size_t chunks = (n + CPU_CONVERT_CHUNK - 1) / CPU_CONVERT_CHUNK;
#pragma omp parallel for schedule(static) if (n >= RT_CPU_PAR_MIN)
    for (size_t k = 0; k < chunks; k++) {
        const size_t at = k * CPU_CONVERT_CHUNK, len = n - at < CPU_CONVERT_CHUNK ? n - at : CPU_CONVERT_CHUNK;
        rt_cpu_narrow_span(dtype, (uint16_t *)dst + at, src + at, len);
    }
}

/* One fp32 GEMM: oneDNN's, else OpenBLAS's (cpu_internal.h). */
void rt_cpu_gemm_f32(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc) {
    if (cpu_dnnl_has(CPU_DNNL_F32)) {
        /* a oneDNN failure here is a bug (callers check the shapes): stop, naming it */
        rt_status st = cpu_dnnl_gemm(CPU_DNNL_F32, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        RT_CHECK(st == RT_OK, "oneDNN gemm M=%d N=%d K=%d: %s", M, N, K, rt_error_message());
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha,
                A, lda, B, ldb, beta, C, ldc);
}

/* This thread's scratch buffers (the thread comm's ranks call gemm at once), grown on demand and
 * freed when the thread ends: a GEMM's inputs rounded or widened to the form its kernel reads
 * (bf16 values for oneDNN's bf16 matmul; else floats, where fp16 x fp16 and bf16 x bf16 products
 * are exact in fp32, so an fp32 GEMM over them is the 16-bit GEMM with fp32 sums, on any CPU), its
 * fp32 output before a 16-bit C is stored, and a fused linear's fp32 sums. */
enum { SCRATCH_A, SCRATCH_B, SCRATCH_C, SCRATCH_LINEAR, SCRATCH_COUNT };
typedef struct {
    void *p[SCRATCH_COUNT];
    size_t cap[SCRATCH_COUNT]; /* bytes */
} cpu_scratch_set;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
/* Scratch that grew, on any thread (rt_memory_epoch): the step-graph plan counts it as a GPU's */
static _Atomic uint64_t scratch_epoch;

static void scratch_set_free(void *v) {
    cpu_scratch_set *s = v;
    for (int i = 0; i < SCRATCH_COUNT; i++) free(s->p[i]);
    free(s);
}

static void scratch_key_init(void) { RT_CHECK(pthread_key_create(&scratch_key, scratch_set_free) == 0, "pthread key"); }

/* This thread's buffer `which` of at least `bytes`. */
static uint64_t cpu_memory_epoch(void *ctx) {
    (void)ctx;
    return scratch_epoch;
}

static void *cpu_scratch(int which, size_t bytes) {
    pthread_once(&scratch_once, scratch_key_init);
    cpu_scratch_set *s = pthread_getspecific(scratch_key);
    if (!s) {
        s = rt_xcalloc(1, sizeof *s);
        RT_CHECK(pthread_setspecific(scratch_key, s) == 0, "pthread_setspecific");
    }
    if (bytes > s->cap[which]) {
        free(s->p[which]);
        s->p[which] = rt_xmalloc(bytes);
        s->cap[which] = bytes;
        scratch_epoch++;
    }
    return s->p[which];
}

/* rows x cols of X (row stride ld) as the GEMM kernel reads them, packed (row stride cols) into
 * this thread's buffer `which`: bf16 bits when bits16, else floats; an fp32 X is rounded to dtype,
 * a 16-bit one converted (exactly, to floats). */
static const void *cpu_gemm_input(int which, rt_dtype dtype, bool bits16, rt_x X, int rows, int cols, int ld) {
    const size_t n = (size_t)rows * cols;
    void *buf = cpu_scratch(which, n * (bits16 ? sizeof(uint16_t) : sizeof(float)));
    if (X.t != RT_F32) { /* 16-bit: widened (bf16 bits needing no conversion are read in place) */
        RT_CHECK(!bits16, "cpu_gemm_input: %s for a bf16 kernel", rt_dtype_name(X.t));
#pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++)
            rt_cpu_widen_span(X.t, (float *)buf + (size_t)r * cols, (const uint16_t *)X.p + (size_t)r * ld,
                              (size_t)cols);
        return buf;
    }
    const float *x = X.p;
    if (bits16) {
        uint16_t *out = buf;
#pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++)
            rt_cpu_narrow_span(RT_BF16, out + (size_t)r * cols, x + (size_t)r * ld, (size_t)cols);
    } else {
        float *out = buf;
#pragma omp parallel for schedule(static)
        for (int r = 0; r < rows; r++)
            rt_cpu_round_span(dtype, out + (size_t)r * cols, x + (size_t)r * ld, (size_t)cols);
    }
    return buf;
}

/* One GEMM whose inputs are read at dtype (bf16 or fp16): oneDNN's bf16 matmul where this CPU has
 * one, else the fp32 GEMM over the 16-bit values as floats, which gives the same products and
 * fp32 sums. A weight comes from the copy the optimizer wrote, a bf16 activation is read where it
 * lies, anything else is converted now. */
static void cpu_gemm_rounded(const rt_cpu_ctx *c, bool trans_a, bool trans_b, int M, int N, int K, float alpha, rt_x A,
                             int lda, rt_x B, int ldb, float beta, float *C, int ldc) {
    const rt_dtype dtype = c->matmul;
    const int a_rows = trans_a ? K : M, a_cols = trans_a ? M : K, b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    const bool dnnl_bf16 = dtype == RT_BF16 && cpu_dnnl_has(CPU_DNNL_BF16);
    const void *A16 = NULL, *B16 = NULL;
    int lda16 = a_cols, ldb16 = b_cols; /* the copy's blocks and the scratch are packed */
    if (A.t == RT_F32) A16 = cpu_weight_copy_find(c, dnnl_bf16, A.p, a_rows, a_cols, lda);
    if (B.t == RT_F32) B16 = cpu_weight_copy_find(c, dnnl_bf16, B.p, b_rows, b_cols, ldb);
    if (dnnl_bf16 && A.t == RT_BF16) A16 = A.p, lda16 = lda;
    if (dnnl_bf16 && B.t == RT_BF16) B16 = B.p, ldb16 = ldb;
    if (!A16) A16 = cpu_gemm_input(SCRATCH_A, dtype, dnnl_bf16, A, a_rows, a_cols, lda);
    if (!B16) B16 = cpu_gemm_input(SCRATCH_B, dtype, dnnl_bf16, B, b_rows, b_cols, ldb);
    if (!dnnl_bf16) {
        rt_cpu_gemm_f32(trans_a, trans_b, M, N, K, alpha, A16, lda16, B16, ldb16, beta, C, ldc);
        return;
    }
    rt_status st = cpu_dnnl_gemm(CPU_DNNL_BF16, trans_a, trans_b, M, N, K, alpha, A16, lda16, B16, ldb16, beta, C, ldc);
    RT_CHECK(st == RT_OK, "oneDNN bf16 gemm M=%d N=%d K=%d: %s", M, N, K, rt_error_message());
}

/* One GEMM into fp32 C (row stride ldc). */
static void cpu_gemm_one(const rt_cpu_ctx *c, bool trans_a, bool trans_b, int M, int N, int K, float alpha, rt_x A,
                         int lda, rt_x B, int ldb, float beta, float *C, int ldc) {
    if (c->matmul != RT_F32 && K > 0)
        cpu_gemm_rounded(c, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        rt_cpu_gemm_f32(trans_a, trans_b, M, N, K, alpha, rt_x_floats(A, "fp32 gemm"), lda, rt_x_floats(B, "fp32 gemm"),
                        ldb, beta, C, ldc);
}

static void cpu_gemm(void *ctx, bool trans_a, bool trans_b, int M, int N, int K, float alpha, rt_x A, int lda,
                     size_t stride_a, rt_x B, int ldb, size_t stride_b, float beta, rt_x C, int ldc, size_t stride_c,
                     int batch) {
    RT_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0, "M=%d N=%d K=%d batch=%d", M, N, K, batch);
    if (M == 0 || N == 0) return;
    /* Row-major strides must cover a row as stored: cblas rejects (and prints, not aborts)
     * a short ld, so catch it here with the shapes in the message. */
    RT_CHECK(lda >= (trans_a ? M : K) && lda >= 1, "lda=%d M=%d K=%d trans_a=%d", lda, M, K, trans_a);
    RT_CHECK(ldb >= (trans_b ? K : N) && ldb >= 1, "ldb=%d K=%d N=%d trans_b=%d", ldb, K, N, trans_b);
    RT_CHECK(ldc >= N, "ldc=%d N=%d", ldc, N);
    const rt_cpu_ctx *c = ctx;
    for (int b = 0; b < batch; b++) {
        const rt_x Ab = rt_x_at(A, (size_t)b * stride_a), Bb = rt_x_at(B, (size_t)b * stride_b);
        const rt_x Cb = rt_x_at(C, (size_t)b * stride_c);
        if (C.t == RT_F32) {
            cpu_gemm_one(c, trans_a, trans_b, M, N, K, alpha, Ab, lda, Bb, ldb, beta, Cb.p, ldc);
            continue;
        }
        /* a 16-bit C: the fp32 sums (with beta C added) in scratch, then stored rounded */
        float *acc = cpu_scratch(SCRATCH_C, (size_t)M * N * sizeof(float));
        if (beta != 0.0f)
#pragma omp parallel for schedule(static) if ((size_t)M * N >= RT_CPU_PAR_MIN)
            for (int r = 0; r < M; r++)
                rt_cpu_widen_span(C.t, acc + (size_t)r * N, (const uint16_t *)Cb.p + (size_t)r * ldc, (size_t)N);
        cpu_gemm_one(c, trans_a, trans_b, M, N, K, alpha, Ab, lda, Bb, ldb, beta, acc, N);
#pragma omp parallel for schedule(static) if ((size_t)M * N >= RT_CPU_PAR_MIN)
        for (int r = 0; r < M; r++)
            rt_cpu_narrow_span(C.t, (uint16_t *)Cb.p + (size_t)r * ldc, acc + (size_t)r * N, (size_t)N);
    }
}

/* The fused linear layer where pre (or out) is 16-bit: the fp32 sums in scratch, then one pass per
 * row adds the bias, applies the activation and stores pre and out, each rounded once from the
 * fp32 values (the composed ops' numbers). fp32 buffers take the composed ops. */
static bool cpu_linear_fwd(void *ctx, rt_x out, rt_x pre, rt_x X, const float *W, const float *b, size_t N, int in,
                           int out_f, const rt_act_kind *act) {
    if (pre.t == RT_F32 && (!act || out.t == RT_F32)) return false;
    RT_CHECK(N <= INT32_MAX, "linear_fwd: %zu rows", N);
    float *acc = cpu_scratch(SCRATCH_LINEAR, N * (size_t)out_f * sizeof(float));
    cpu_gemm(ctx, false, true, (int)N, out_f, in, 1.0f, X, in, 0, rt_xf(W), in, 0, 0.0f, rt_xf(acc), out_f, 0, 1);
#pragma omp parallel for schedule(static) if (N * (size_t)out_f >= RT_CPU_PAR_MIN)
    for (size_t r = 0; r < N; r++) {
        float *row = acc + r * (size_t)out_f;
        if (b)
            for (int k = 0; k < out_f; k++) row[k] += b[k];
        for (size_t k = 0; k < (size_t)out_f; k += RT_CPU_X_RUN) {
            const size_t at = r * (size_t)out_f + k;
            const size_t m = (size_t)out_f - k < RT_CPU_X_RUN ? (size_t)out_f - k : RT_CPU_X_RUN;
            float buf[RT_CPU_X_RUN];
            if (act) {
                float *y = rt_cpu_x_dst(out, at, buf);
                rt_cpu_act_span(*act, y, row + k, m);
                rt_cpu_x_commit(out, at, m, y);
            }
            if (pre.t == RT_F32) memcpy((float *)pre.p + at, row + k, m * sizeof(float));
            rt_cpu_x_commit(pre, at, m, row + k); /* 16-bit: narrowed straight from the sums */
        }
    }
    return true;
}

/* Its backward through the activation where dpre is 16-bit: the fp32 product dY W in scratch,
 * act' applied to it in place, the bias gradient summed from it, then dpre stored rounded (the
 * composed ops' numbers). */
static bool cpu_linear_dact(void *ctx, rt_x dpre, float *db, rt_x dY, const float *W, rt_x pre, size_t N, int in,
                            int out_f, rt_act_kind act) {
    if (dpre.t == RT_F32) return false;
    RT_CHECK(N <= INT32_MAX, "linear_dact: %zu rows", N);
    const size_t n = N * (size_t)in;
    float *acc = cpu_scratch(SCRATCH_LINEAR, n * sizeof(float));
    cpu_gemm(ctx, false, false, (int)N, in, out_f, 1.0f, dY, out_f, 0, rt_xf(W), in, 0, 0.0f, rt_xf(acc), in, 0, 1);
    rt_cpu_act_bwd(ctx, act, rt_xf(acc), pre, rt_xf(acc), n);
    if (db) rt_cpu_bias_bwd(ctx, db, rt_xf(acc), N, in);
    cpu_narrow16(dpre.t, dpre.p, acc, n);
    return true;
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
    if (!cpu_dnnl_has(CPU_DNNL_F32) || cpu_dnnl_kernel(CPU_DNNL_F32, 512, 768, 768, f32, sizeof f32) != RT_OK) {
        snprintf(c->model, sizeof c->model, "%s; GEMM OpenBLAS (no oneDNN in this build)", name);
        return false;
    }
    if (!cpu_dnnl_has(CPU_DNNL_BF16)) {
        snprintf(c->model, sizeof c->model,
                 "%s; GEMM oneDNN %s, bf16 emulated (fp32 GEMM over bf16-rounded inputs: "
                 "oneDNN has no bf16 matmul for this CPU)",
                 name, f32);
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
    .memory_epoch = cpu_memory_epoch,
    .device_model = cpu_device_model,
    .set_matmul_precision = cpu_set_matmul_precision,
    .round_to = cpu_round_to,
    .gemm = cpu_gemm,
    .linear_fwd = cpu_linear_fwd,
    .linear_dact = cpu_linear_dact,
    .layernorm_fwd = rt_cpu_layernorm_fwd,
    .layernorm_bwd = rt_cpu_layernorm_bwd,
    .rmsnorm_fwd = rt_cpu_rmsnorm_fwd,
    .rmsnorm_bwd = rt_cpu_rmsnorm_bwd,
    .residual_fwd = rt_cpu_residual_fwd,
    .residual_bwd = rt_cpu_residual_bwd,
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
    .clamp_inf = rt_cpu_clamp_inf,
    .clamp_abs_bwd = rt_cpu_clamp_abs_bwd,
    .attention_fwd = rt_cpu_attention_fwd,
    .attention_bwd = rt_cpu_attention_bwd,
    .relbias_fwd = rt_cpu_relbias_fwd,
    .relbias_bwd = rt_cpu_relbias_bwd,
    .embedding_fwd = rt_cpu_embedding_fwd,
    .embedding_bwd = rt_cpu_embedding_bwd,
    .softmax_xent = rt_cpu_softmax_xent,
    .mse_loss = rt_cpu_mse_loss,
    .bce_logits_loss = rt_cpu_bce_logits_loss,
    .xent_vocab = rt_cpu_xent_vocab,
    .dropout_fwd = rt_cpu_dropout_fwd,
    .dropout_bwd = rt_cpu_dropout_bwd,
    .dropout_cols = rt_cpu_dropout_cols,
    .gather_rows = rt_cpu_gather_rows,
    .scatter_rows_add = rt_cpu_scatter_rows_add,
    .adamw = cpu_adamw,
    .weight_copy_set = cpu_weight_copy_set,
    .weight_copy_update = cpu_weight_copy_update,
    .sumsq = rt_cpu_sumsq,
    .sumsq_into = cpu_sumsq_into,
    .loss_into = cpu_loss_into,
    .step_finish = cpu_step_finish,
    .adamw_step = cpu_adamw_step,
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
    be->typed_acts = true;
    *out = be;
    return RT_OK;
fail:
    free(cx);
    free(be);
    return st;
}

void rt_cpu_backend_free(rt_backend *be) {
    if (!be) return;
    free(((rt_cpu_ctx *)be->ctx)->copy);
    free(be->ctx);
    free(be);
}
