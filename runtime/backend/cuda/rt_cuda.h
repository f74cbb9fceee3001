/* Private to the CUDA backend: the context behind its rt_backend, the CUDA_CHECK and
 * CUBLAS_CHECK wrappers, launch helpers, warp/block reductions, and the kernels each .cu
 * file in runtime/cuda provides to the ops table in cuda_backend.cu. Nothing outside
 * runtime/cuda includes this; models reach the kernels only through rt_backend_ops.
 *
 * Everything runs on the backend's one stream (rt_cuda_ctx.stream), so ops are ordered
 * exactly as they are called and a to_host copy waits for all earlier work; the device is the
 * one made current by rt_cuda_backend_init on the calling thread.
 *
 * Reductions across rows (dweight, dbias, embedding and scatter gradients, attention dbias)
 * never use float atomics: each output element is summed by one thread in a fixed order,
 * so a run gives the same bits every time (resume depends on that). */
#ifndef RT_CUDA_H
#define RT_CUDA_H

/* The C headers below include these; taking them first, outside extern "C", keeps the C++
 * overloads of <math.h> out of a C-linkage block. */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

extern "C" {
#include "runtime/backend/rt_backend.h"
#include "runtime/base/rt_status.h"
}
/* Inline __host__ __device__ helpers only (no linkage to match), so C++ linkage is fine. */
#include "runtime/backend/cuda/cuda_pack.h"
#include "runtime/base/rt_rng.h"

/* Every CUDA and cuBLAS call is checked, in every build: a device fault aborts with file:line. */
#define CUDA_CHECK(call)                                                                        \
    do {                                                                                        \
        cudaError_t rt_cuda_err_ = (call);                                                      \
        if (rt_cuda_err_ != cudaSuccess)                                                        \
            rt_abort_at(__FILE__, __LINE__, #call, "%s (%s)", cudaGetErrorString(rt_cuda_err_), \
                        cudaGetErrorName(rt_cuda_err_));                                        \
    } while (0)

#define CUBLAS_CHECK(call)                                                                                        \
    do {                                                                                                          \
        cublasStatus_t rt_cublas_st_ = (call);                                                                    \
        if (rt_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                                               \
            rt_abort_at(__FILE__, __LINE__, #call, "%s (cuBLAS status %d)", cublasGetStatusString(rt_cublas_st_), \
                        (int)rt_cublas_st_);                                                                      \
    } while (0)

/* After every kernel launch: catches a bad launch configuration at the call that made it
 * (a fault inside the kernel surfaces at the next checked call). */
#define CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

/* Scratch buffers the backend owns, one per purpose so two users never overlap. Each is
 * allocated on first use and only grows, so the training loop allocates nothing once its
 * first step has run. */
enum {
    RT_CUDA_SCRATCH_ATTN_P = 0, /* attention: dropped probabilities (B, NH, Tq, Tk); later dS at 16 bits */
    RT_CUDA_SCRATCH_ATTN_DS,    /* attention backward: dP then dS (B, NH, Tq, Tk) */
    RT_CUDA_SCRATCH_ATTN_S,     /* attention with 16-bit probabilities: their fp32 values (B, NH, Tq, Tk) */
    RT_CUDA_SCRATCH_ATTN_D,     /* fused attention backward: D = rowsum(P dP) (B, NH, Tq) */
    RT_CUDA_SCRATCH_COLSUM,     /* per-chunk column partial sums (norm/bias gradients) */
    RT_CUDA_SCRATCH_SUMSQ,      /* per-block double partials of sumsq */
    RT_CUDA_SCRATCH_SUMSQ_OUT,  /* sumsq's total, or clamp_inf's flag, read by the host */
    RT_CUDA_SCRATCH_GEMM_A,     /* a bf16/fp16 matmul's inputs, converted (cuda_precision.cu) */
    RT_CUDA_SCRATCH_GEMM_B,
    RT_CUDA_SCRATCH_LT_WORKSPACE,       /* cuBLASLt's workspace */
    RT_CUDA_SCRATCH_BGRAD,              /* a bias gradient an epilogue writes, before it is added */
    RT_CUDA_SCRATCH_LINEAR,             /* a composed 16-bit linear op's fp32 product (cuda_lt.cu) */
    RT_CUDA_SCRATCH_SDPA,               /* cuDNN SDPA's workspace (cuda_sdpa_path.cu) */
    RT_CUDA_SCRATCH_SDPA_LEN,           /* its padding mask's query lengths (B) */
    RT_CUDA_SCRATCH_SDPA_BIAS,          /* its bias at the compute type: T5's position bias, GLM's prefix mask */
    RT_CUDA_SCRATCH_SDPA_DBIAS,         /* the position bias's gradient at the compute type, before it is added */
    RT_CUDA_SCRATCH_ATTN_RECOMPUTE,     /* a materialized attention's probabilities the stack has no room for */
    RT_CUDA_SCRATCH_ATTN_RECOMPUTE_OUT, /* its recomputed output in the backward (discarded) */
    RT_CUDA_SCRATCH_COUNT
};

/* Pinned upload staging: this many slots of this many bytes; larger uploads go straight from
 * the caller's memory. */
#define RT_CUDA_STAGE_SLOTS 8
#define RT_CUDA_STAGE_BYTES ((size_t)1 << 20)

typedef struct {
    int device;
    char model[256];        /* cudaDeviceProp.name */
    char described[384];    /* model and what runs on it, for the start-up log (rt_backend_ops.device_model) */
    int sm_major, sm_minor; /* compute capability */
    rt_dtype matmul;        /* the matmuls' input precision (cuda_precision.cu) */
    cublasHandle_t cublas;
    cublasLtHandle_t cublaslt;
    void *scratch[RT_CUDA_SCRATCH_COUNT];
    size_t scratch_bytes[RT_CUDA_SCRATCH_COUNT];
    /* The weights' copy at the matmul precision (rt_weight_copy_set; cuda_precision.cu):
     * copy_w[0 .. copy_n) as bf16 or fp16 values; copy NULL: none. */
    const float *copy_w;
    size_t copy_n;
    void *copy;
    /* The one stream all of this backend's work goes on (kernels, cuBLAS, copies), in call
     * order. A blocking stream: work a library queues on the legacy default stream is still
     * ordered with it. NCCL's collectives wait for it (rt_cuda_thread_stream). */
    cudaStream_t stream;
    /* Pinned staging for uploads (cuda_backend.cu): a batch's ids and masks are copied into
     * slot k and go up asynchronously; the slot is reused once its event has passed. */
    void *stage[RT_CUDA_STAGE_SLOTS];
    cudaEvent_t stage_done[RT_CUDA_STAGE_SLOTS];
    int stage_next;
    /* Bumped whenever scratch grows or the weights' copy is (re)made (rt_memory_epoch): a captured
     * graph holds the old addresses */
    uint64_t memory_epoch;
    /* cuBLASLt's algorithm per matmul shape (cuda_lt_plans.h), allocated at the first matmul */
    struct lt_plan_cache *lt_plans;
    /* Attention through the fused kernels (cuda_flash.cu) where they apply: TZ_CUDA_ATTENTION=fused */
    bool attn_fused;
    /* cuDNN's fused SDPA (cuda_sdpa.h) where it applies: TZ_CUDA_ATTENTION=cudnn; NULL: off */
    struct rt_sdpa *sdpa;
    const char *sdpa_logged[8]; /* the reasons it did not take a call, each logged once */
    /* be->typed_acts: the models' activation handles hold c->matmul's type (else fp32) */
    bool typed_acts;
    /* A step graph being captured or rehearsed (cuda_graphs.cu): uploads go to its staging */
    struct rt_cuda_graph *capturing, *rehearsing;
    const char *graph_logged[4]; /* the reasons a capture failed, each logged once */
} rt_cuda_ctx;

/* The stream of a backend context (the ops' void *ctx). */
static inline cudaStream_t rt_cuda_stream(const void *ctx) { return ((const rt_cuda_ctx *)ctx)->stream; }
/* The stream of the CUDA backend made last on this thread (NULL: none), which NCCL's collectives
 * on this thread wait for: each rank's backend and comms live on one thread. */
extern "C" cudaStream_t rt_cuda_thread_stream(void);

/* At least bytes of the given scratch slot (contents undefined); aborts when the device is
 * out of memory, since this runs inside the step loop where there is no way to recover. */
void *rt_cuda_scratch(rt_cuda_ctx *c, int slot, size_t bytes);

/* An upload while a step graph is captured or rehearsed (c->capturing or c->rehearsing): into the
 * graph's pinned staging, which the graph copies up when it runs (cuda_graphs.cu). */
void rt_cuda_graph_upload(rt_cuda_ctx *c, void *dst, const void *host_src, size_t bytes);
/* The step-graph ops of the table (rt_backend_ops.graph_*) */
bool rt_cuda_graph_capture_begin(void *ctx, uint64_t uploads, uint64_t upload_bytes);
void *rt_cuda_graph_capture_end(void *ctx);
void rt_cuda_graph_rehearse_begin(void *ctx, void *graph);
bool rt_cuda_graph_rehearse_end(void *ctx);
void rt_cuda_graph_launch(void *ctx, void *graph);
void rt_cuda_graph_free(void *ctx, void *graph);

/* Threads per block for the simple kernels, and the block count for n work items (capped;
 * the kernels loop with a grid stride, so a capped grid still covers every item). */
#define RT_CUDA_THREADS 256
static inline unsigned rt_cuda_grid(size_t n, unsigned threads) {
    size_t blocks = (n + threads - 1) / threads;
    if (blocks < 1) blocks = 1;
    if (blocks > 65536u * 16u) blocks = 65536u * 16u;
    return (unsigned)blocks;
}

/* A grid-stride loop over size_t indices: any n works with a capped grid. */
#define RT_CUDA_FOR_EACH(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* A grid-stride walk over a rows x cols block: rows across blockIdx.y, columns across
 * blockIdx.x and the threads (launch with rt_cuda_grid_rows), so no index is divided. */
#define RT_CUDA_FOR_EACH_ROW_COL(r, c, rows, cols)          \
    for (size_t r = blockIdx.y; r < (rows); r += gridDim.y) \
        for (int c = (int)(blockIdx.x * blockDim.x + threadIdx.x); c < (cols); c += (int)(gridDim.x * blockDim.x))

static inline dim3 rt_cuda_grid_rows(size_t rows, int cols, unsigned threads) {
    const unsigned x = rt_cuda_grid((size_t)cols, threads);
    const size_t y = rows < 1 ? 1 : rows > 65535 ? 65535 : rows;
    return dim3(x, (unsigned)y);
}

/* A buffer's element type as kernels take it at run time: fp32, or a 16-bit one (bf16, fp16).
 * Loads widen exactly; stores and round16 go to nearest even (fp16 overflows to inf). */
enum { RT_CUDA_KIND_F32 = 0, RT_CUDA_KIND_BF16, RT_CUDA_KIND_F16 };
static inline int rt_cuda_kind16(rt_dtype t) {
    return t == RT_BF16 ? RT_CUDA_KIND_BF16 : t == RT_F16 ? RT_CUDA_KIND_F16 : RT_CUDA_KIND_F32;
}
/* The kind a kernel rounds what it stores to: ctx's compute precision. */
static inline int rt_cuda_store_kind(const void *ctx) { return rt_cuda_kind16(((const rt_cuda_ctx *)ctx)->matmul); }
__device__ __forceinline__ float rt_cuda_load16(const void *p, int kind, size_t i) {
    if (kind == RT_CUDA_KIND_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (kind == RT_CUDA_KIND_F16) return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}
__device__ __forceinline__ float rt_cuda_round16(float x, int kind) {
    if (kind == RT_CUDA_KIND_BF16) return __bfloat162float(__float2bfloat16_rn(x));
    if (kind == RT_CUDA_KIND_F16) return __half2float(__float2half_rn(x));
    return x;
}
/* kind RT_CUDA_KIND_BF16 or RT_CUDA_KIND_F16 */
__device__ __forceinline__ void rt_cuda_store16(void *p, int kind, size_t i, float x) {
    if (kind == RT_CUDA_KIND_BF16)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x);
    else
        ((__half *)p)[i] = __float2half_rn(x);
}

/* A typed activation handle (rt_x, runtime/backend/rt_x.h) in a kernel, at element i: a load widens
 * exactly; a store to a 16-bit handle rounds to nearest even (fp16 overflows to inf), to an fp32
 * one writes the float as it is (the op's wrapper rounds it, rt_store_x). The type is the same for
 * every thread of a launch, so the branches never diverge. */
__device__ __forceinline__ float rt_cuda_xload(rt_x x, size_t i) {
    if (x.t == RT_BF16) return __bfloat162float(((const __nv_bfloat16 *)x.p)[i]);
    if (x.t == RT_F16) return __half2float(((const __half *)x.p)[i]);
    return ((const float *)x.p)[i];
}
__device__ __forceinline__ void rt_cuda_xstore(rt_x x, size_t i, float v) {
    if (x.t == RT_BF16)
        ((__nv_bfloat16 *)x.p)[i] = __float2bfloat16_rn(v);
    else if (x.t == RT_F16)
        ((__half *)x.p)[i] = __float2half_rn(v);
    else
        ((float *)x.p)[i] = v;
}
/* rt_x_at for kernels (rt_x.h's is a host function). */
__device__ __forceinline__ rt_x rt_cuda_x_at(rt_x x, size_t n) {
    x.p = (char *)x.p + n * (x.t == RT_F32 ? sizeof(float) : 2);
    return x;
}
/* The cuBLASLt type of a handle's values. */
static inline cudaDataType_t rt_cuda_x_type(rt_dtype t) {
    return t == RT_BF16 ? CUDA_R_16BF : t == RT_F16 ? CUDA_R_16F : CUDA_R_32F;
}
/* Dropout's draws along a row whose element j has stream index g0 + j, a Philox block (four
 * elements) at a time (rt_rng_row_blocks): the caller's share is the row's blocks start, start +
 * step, ... (a lane's, or a thread's of a grid), and f(j, u) runs for each of their elements in
 * [0, n) with its uniform. Each block is drawn once, a quarter of the Philox work of drawing per
 * element (which made dropout the larger part of its cost on an H200). */
template <typename F>
__device__ __forceinline__ void rt_cuda_rng_row_walk(uint64_t seed, uint64_t stream, uint64_t g0, uint64_t n,
                                                     uint64_t start, uint64_t step, F f) {
    uint64_t first, count;
    rt_rng_row_blocks(g0, n, &first, &count);
    for (uint64_t k = start; k < count; k += step) {
        float u[4];
        rt_rng_uniform4(seed, stream, first + k, u);
        const int64_t j0 = rt_rng_row_j0(g0, first, k);
        for (int w = 0; w < 4; w++)
            if (j0 + w >= 0 && j0 + w < (int64_t)n) f((size_t)(j0 + w), u[w]);
    }
}

/* Dropout's walk over the n values of a row whose value j has stream index g0 + j, shared by the
 * callers first = 0 .. step - 1 (a warp's lanes, a grid's threads): f(j, w, u) for the w values
 * from j with their uniforms u (rt_pack_uniforms). In packs of eight (two Philox blocks) where
 * every handle the body moves starts the row aligned and g0 is on a block; else a value at a time
 * by Philox blocks (rt_cuda_rng_row_walk, u in slot 0). Either way the uniforms are the CPU's. */
template <typename F>
__device__ __forceinline__ void rt_cuda_drop_walk(uint64_t seed, uint64_t stream, uint64_t g0, size_t n, bool aligned,
                                                  size_t first, size_t step, F f) {
    if (aligned && g0 % 4 == 0) {
        rt_cuda_pack_walk_from(n, true, first, step,
                               [&](size_t j, int w) { f(j, w, rt_pack_uniforms(seed, stream, g0 + j, w)); });
        return;
    }
    rt_cuda_rng_row_walk(seed, stream, g0, (uint64_t)n, (uint64_t)first, (uint64_t)step, [&](size_t j, float u) {
        rt_pack one = {};
        one.v[0] = u;
        f(j, 1, one);
    });
}

/* Warp and block reductions. block_* need blockDim.x a multiple of 32 (<= 1024), every
 * thread of the block calling, and shared scratch of 32 elements; every thread gets the
 * result. The leading __syncthreads lets a block call them back to back with one buffer. */
__device__ __forceinline__ float rt_cuda_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float rt_cuda_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ double rt_cuda_warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float rt_cuda_block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = rt_cuda_warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nwarps ? sh[lane] : 0.0f;
    return rt_cuda_warp_sum(v);
}
__device__ __forceinline__ float rt_cuda_block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = rt_cuda_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nwarps ? sh[lane] : -INFINITY;
    return rt_cuda_warp_max(v);
}
__device__ __forceinline__ double rt_cuda_block_sum_d(double v, double *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = rt_cuda_warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nwarps ? sh[lane] : 0.0;
    return rt_cuda_warp_sum_d(v);
}

/* cuda_backend.cu: releases what rt_cuda_backend_init made (called by rt_backend_free, which
 * declares it itself since rt_backend.h does not). */
extern "C" void rt_cuda_backend_free(rt_backend *be);
/* cuda_backend.cu: cuBLAS's fp32 gemm (float operands), where cuBLASLt has no algorithm and for
 * attention's small products at fp32. */
void rt_cuda_gemm(void *ctx, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                  size_t stride_a, const float *B, int ldb, size_t stride_b, float beta, float *C, int ldc,
                  size_t stride_c, int batch);

/* cuda_precision.cu: the compute precision's rounding; n floats as 2-byte dtype values (narrow,
 * to nearest even) and back (widen); and X (rows x cols, row stride ld) converted to a packed bf16
 * or fp16 matrix (c->matmul) in scratch slot `slot`. */
void rt_cuda_round_to(void *ctx, rt_dtype dtype, float *x, size_t rows, int cols, size_t ld);
void rt_cuda_narrow(void *ctx, rt_dtype dtype, void *dst, const float *src, size_t n);
void rt_cuda_widen(void *ctx, rt_dtype dtype, float *dst, const void *src, size_t n);
rt_status rt_cuda_set_matmul_precision(void *ctx, rt_dtype dtype);
const void *rt_cuda_round_input(rt_cuda_ctx *c, int slot, const float *X, int rows, int cols, int ld);
/* A matmul input at the matmul precision: a weight from the weights' copy (*ld_out = ld), anything
 * else converted into scratch slot `slot` (*ld_out = cols, packed). */
const void *rt_cuda_matmul_input(rt_cuda_ctx *c, int slot, const float *X, int rows, int cols, int ld, int *ld_out);
/* The weights' copy (the ops). */
rt_status rt_cuda_weight_copy_set(void *ctx, const float *w, size_t n);
void rt_cuda_weight_copy_update(void *ctx, const float *part, size_t n);

/* cuda_lt.cu: the ops table's matmuls through cuBLASLt, fused linear ops included.
 * rt_cuda_lt_plans_free destroys the kept plans' descriptors and the cache (at the backend's end). */
void rt_cuda_lt_plans_free(rt_cuda_ctx *c);
bool rt_cuda_linear_fwd(void *ctx, rt_x out, rt_x pre, rt_x X, const float *W, const float *b, size_t N, int in,
                        int out_f, const rt_act_kind *act);
bool rt_cuda_linear_wgrad(void *ctx, float *dW, float *db, rt_x dY, rt_x X, size_t N, int in, int out_f);
bool rt_cuda_linear_dact(void *ctx, rt_x dpre, float *db, rt_x dY, const float *W, rt_x pre, size_t N, int in,
                         int out_f, rt_act_kind act);
void rt_cuda_gemm_op(void *ctx, bool trans_a, bool trans_b, int M, int N, int K, float alpha, rt_x A, int lda,
                     size_t stride_a, rt_x B, int ldb, size_t stride_b, float beta, rt_x C, int ldc, size_t stride_c,
                     int batch);

/* cuda_norm.cu: also the column sums behind bias_bwd and the fused residual step's backward. */
void rt_cuda_layernorm_fwd(void *ctx, rt_x out, float *mean, float *rstd, rt_x inp, const float *weight,
                           const float *bias, size_t N, int C, float eps);
void rt_cuda_layernorm_bwd(void *ctx, float *dinp, float *dweight, float *dbias, rt_x dout, rt_x inp,
                           const float *weight, const float *mean, const float *rstd, size_t N, int C);
void rt_cuda_rmsnorm_fwd(void *ctx, rt_x out, float *rstd, rt_x inp, const float *weight, size_t N, int C, float eps);
void rt_cuda_rmsnorm_bwd(void *ctx, float *dinp, float *dweight, rt_x dout, rt_x inp, const float *weight,
                         const float *rstd, size_t N, int C);
void rt_cuda_bias_bwd(void *ctx, float *dbias, rt_x dout, size_t N, int C);
/* What a column sum adds up, per row n and column c (g = dout[n, c]). */
enum {
    RT_COLSUM_DOUT = 0, /* g: bias gradients */
    RT_COLSUM_LN = 1,   /* a: g * (x - mean) * rstd (LayerNorm dweight); b: g (dbias) */
    RT_COLSUM_RMS = 2   /* a: g * x * rstd (RMSNorm dweight) */
};
/* out_a[c] += sum over rows of the mode's term a, out_b[c] (LN only, may be NULL) of b: the norms'
 * parameter gradients and bias_bwd, deterministic (two passes, no atomics). */
void rt_cuda_colsum(rt_cuda_ctx *ctx, int mode, float *out_a, float *out_b, rt_x dout, rt_x inp, const float *mean,
                    const float *rstd, size_t N, int C);

/* cuda_residual.cu: the fused residual step (rt_backend_ops.residual_fwd/bwd). */
void rt_cuda_residual_fwd(void *ctx, const rt_residual_desc *d, rt_x sum, rt_x out, float *mean, float *rstd, rt_x res,
                          rt_x branch);
void rt_cuda_residual_bwd(void *ctx, const rt_residual_desc *d, float *dres, rt_x dbranch, float *dweight, float *dbias,
                          rt_x dout, rt_x sum, const float *mean, const float *rstd);

/* cuda_elementwise.cu */
void rt_cuda_act_fwd(void *ctx, rt_act_kind kind, rt_x out, rt_x inp, size_t n);
void rt_cuda_act_bwd(void *ctx, rt_act_kind kind, rt_x dinp, rt_x inp, rt_x dout, size_t n);
void rt_cuda_gated_act_fwd(void *ctx, rt_act_kind kind, rt_x out, rt_x gate, rt_x lin, size_t n);
void rt_cuda_gated_act_bwd(void *ctx, rt_act_kind kind, rt_x dgate, rt_x dlin, rt_x gate, rt_x lin, rt_x dout,
                           size_t n);
/* pre (N, C) = sum + bias (bias NULL: none), stored; with act, out = act(sum + bias) from the fp32
 * value, stored: linear_fwd's epilogue where cuBLASLt's cannot run (sum: the fp32 product). */
void rt_cuda_bias_act(void *ctx, rt_x out, rt_x pre, const float *sum, const float *bias, size_t N, int C,
                      const rt_act_kind *act);
/* g (n, fp32, in place) = act'(pre) * g, and dpre = that, stored: linear_dact's epilogue. */
void rt_cuda_dact(void *ctx, rt_act_kind kind, rt_x dpre, float *g, rt_x pre, size_t n);
void rt_cuda_add_bias(void *ctx, float *out, const float *bias, size_t N, int C);
void rt_cuda_add(void *ctx, rt_x out, rt_x a, rt_x b, size_t n);
void rt_cuda_axpy(void *ctx, float *y, float alpha, const float *x, size_t n);
void rt_cuda_scale(void *ctx, float *x, float s, size_t n);
void rt_cuda_scale_rows(void *ctx, rt_x x, const float *w, size_t N, int C);
bool rt_cuda_clamp_inf(void *ctx, rt_x x, size_t n, float limit);
void rt_cuda_clamp_abs_bwd(void *ctx, float *dx, rt_x y, size_t n, float limit);
void rt_cuda_dropout_fwd(void *ctx, float *out, const float *inp, size_t n, float p, uint64_t seed, uint64_t stream,
                         const uint64_t *step);
void rt_cuda_dropout_bwd(void *ctx, float *dinp, const float *dout, size_t n, float p, uint64_t seed, uint64_t stream,
                         const uint64_t *step);
void rt_cuda_dropout_cols(void *ctx, rt_x out, rt_x inp, size_t rows, int cols, int cols_total, int col_offset, float p,
                          uint64_t seed, uint64_t stream, const uint64_t *step);
void rt_cuda_adamw(void *ctx, float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1,
                   float beta2, float eps, float weight_decay, float grad_scale, int64_t t);
double rt_cuda_sumsq(void *ctx, const float *x, size_t n);
void rt_cuda_sumsq_into(void *ctx, rt_step_state *s, const float *x, size_t n);
void rt_cuda_loss_into(void *ctx, double *acc, const float *losses, size_t n);
void rt_cuda_step_finish(void *ctx, rt_step_state *s, double max_norm, double loss_scale);
void rt_cuda_adamw_step(void *ctx, const rt_step_state *s, int group, float *params, const float *grads, float *m,
                        float *v, size_t n);

/* cuda_sdpa_path.cu: cuDNN's SDPA, where rt_cuda_attn_cudnn says it runs (it logs, once per
 * reason, why it does not); fwd and bwd take the handles of attention_fwd and attention_bwd. */
bool rt_cuda_attn_cudnn(rt_cuda_ctx *c, const rt_attn_desc *d);
bool rt_cuda_sdpa_fwd(rt_cuda_ctx *c, const rt_attn_desc *d, rt_x out, void *kept, rt_x q, rt_x k, rt_x v);
void rt_cuda_sdpa_bwd(rt_cuda_ctx *c, const rt_attn_desc *d, rt_x dq, rt_x dk, rt_x dv, float *dbias, rt_x dout,
                      const void *kept, rt_x q, rt_x k, rt_x v);
bool rt_cuda_sdpa_took(const rt_cuda_ctx *c, const rt_attn_desc *d);
/* What the stack keeps a query row for attentions of d's shape with the path on: rt_sdpa_kept_row
 * where cuDNN takes the shape (rt_sdpa_shape_unsupported), else 0 (the probabilities). */
size_t rt_cuda_sdpa_kept_row(const rt_cuda_ctx *c, const rt_attn_desc *d);

/* cuda_attention.cu */
/* cuda_flash.cu: the fused attention, where rt_cuda_attn_fused says it runs, on activation
 * handles of either type (16-bit ones of the compute type). Its probabilities buffer holds
 * (m, 1/l) per query row, not the probabilities. */
bool rt_cuda_attn_fused(const rt_cuda_ctx *c, const rt_attn_desc *d);
size_t rt_cuda_attention_kept_row(void *ctx, const rt_attn_desc *d);
void rt_cuda_flash_fwd(rt_cuda_ctx *c, const rt_attn_desc *d, rt_x out, void *probs, rt_x q, rt_x k, rt_x v);
void rt_cuda_flash_bwd(rt_cuda_ctx *c, const rt_attn_desc *d, rt_x dq, rt_x dk, rt_x dv, float *dbias, rt_x dout,
                       const void *probs, rt_x q, rt_x k, rt_x v);
void rt_cuda_attention_fwd(void *ctx, const rt_attn_desc *d, rt_x out, void *probs, rt_x q, rt_x k, rt_x v);
void rt_cuda_attention_bwd(void *ctx, const rt_attn_desc *d, rt_x dq, rt_x dk, rt_x dv, float *dbias, rt_x dout,
                           const void *probs, rt_x q, rt_x k, rt_x v);

/* cuda_relbias.cu */
void rt_cuda_relbias_fwd(void *ctx, float *bias, const float *table, const int32_t *buckets, int NH, int Tq, int Tk,
                         int num_buckets);
void rt_cuda_relbias_bwd(void *ctx, float *dtable, const float *dbias, const int32_t *buckets, int NH, int Tq, int Tk,
                         int num_buckets);

/* cuda_rows.cu */
void rt_cuda_embedding_fwd(void *ctx, float *out, const int32_t *ids, const float *table, size_t N, int C,
                           int vocab_start, int V, bool accumulate);
void rt_cuda_embedding_bwd(void *ctx, float *dtable, const float *dout, const int32_t *ids, size_t N, int C,
                           int vocab_start, int V);
void rt_cuda_xent_vocab(void *ctx, int phase, float *stats, float *losses, rt_x dlogits, rt_x logits,
                        const float *col_mask, const int32_t *targets, size_t N, int V, int vocab_start,
                        float grad_scale);
void rt_cuda_mse_loss(void *ctx, float *losses, float *dlogits, const float *z, const float *targets, size_t N,
                      float grad_scale);
void rt_cuda_bce_logits_loss(void *ctx, float *losses, float *dlogits, const float *z, const float *targets, size_t N,
                             int C, float grad_scale);
void rt_cuda_softmax_xent(void *ctx, float *losses, float *dlogits, float *probs, const float *logits,
                          const int32_t *targets, size_t N, int V, float grad_scale);
void rt_cuda_gather_rows(void *ctx, float *out, const float *inp, const int32_t *idx, int B, int C);
void rt_cuda_scatter_rows_add(void *ctx, float *dinp, rt_x dout, const int32_t *idx, int B, int C);

#endif
