/* The CUDA side of the compute precision (rt_set_precision in runtime/backend/rt_backend.h): rounding
 * stored activations to bf16 or fp16 in place, the weights' 16-bit copy that AdamW keeps
 * (rt_weight_copy_set), and the 16-bit copies of a matmul's other inputs,
 * converted by our kernel (to nearest even, as the CPU backend's rt_f32_to_bf16 and
 * rt_round_f16), which cuda_lt.cu multiplies into fp32 with CUBLAS_COMPUTE_32F, so both backends
 * round at the same points. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "runtime/backend/cuda/rt_cuda.h"

/* The kernels below walk a rows x cols block at row stride ld the cheap way: a contiguous
 * block (one row, or ld == cols) as one flat run, any other a row per blockIdx.y with the
 * columns across blockIdx.x. Never a 64-bit division per element: on an H200 it made these
 * kernels 20-25% slower (ncu, GPT-2 124M at 1024 tokens). What is left of their time is the
 * traffic itself; storing activations in 16 bits is what removes it. */
template <typename T> __device__ T rt_cuda_from_f32(float x);
template <> __device__ __nv_bfloat16 rt_cuda_from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __half rt_cuda_from_f32<__half>(float x) { return __float2half_rn(x); }

template <typename T> __device__ float rt_cuda_round_f32(float x) { return (float)rt_cuda_from_f32<T>(x); }

template <typename T> __global__ void rt_cuda_round_flat_kernel(float *x, size_t n) {
    RT_CUDA_FOR_EACH(i, n) x[i] = rt_cuda_round_f32<T>(x[i]);
}
template <typename T> __global__ void rt_cuda_round_rows_kernel(float *x, size_t rows, int cols, size_t ld) {
    RT_CUDA_FOR_EACH_ROW_COL(r, c, rows, cols) x[r * ld + c] = rt_cuda_round_f32<T>(x[r * ld + c]);
}

/* rows x cols of X (row stride ld) converted, packed, into the 16-bit buffer out. */
template <typename T> __global__ void rt_cuda_to16_flat_kernel(T *out, const float *X, size_t n) {
    RT_CUDA_FOR_EACH(i, n) out[i] = rt_cuda_from_f32<T>(X[i]);
}
template <typename T>
__global__ void rt_cuda_to16_rows_kernel(T *out, const float *X, size_t rows, int cols, size_t ld) {
    RT_CUDA_FOR_EACH_ROW_COL(r, c, rows, cols) out[r * (size_t)cols + c] = rt_cuda_from_f32<T>(X[r * ld + c]);
}

template <typename T> static void rt_cuda_round_as(cudaStream_t st, float *x, size_t rows, int cols, size_t ld) {
    const size_t n = rows * (size_t)cols;
    if (rows == 1 || ld == (size_t)cols)
        rt_cuda_round_flat_kernel<T><<<rt_cuda_grid(n, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, st>>>(x, n);
    else
        rt_cuda_round_rows_kernel<T>
            <<<rt_cuda_grid_rows(rows, cols, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, st>>>(x, rows, cols, ld);
    CUDA_LAUNCH_CHECK();
}

/* rows x cols of X (row stride ld) into out, packed, as bf16 or fp16 (dtype). */
static void rt_cuda_to_16_rows(cudaStream_t st, rt_dtype dtype, void *out, const float *X, size_t rows, int cols,
                               size_t ld) {
    const size_t n = rows * (size_t)cols;
    const bool flat = rows == 1 || ld == (size_t)cols;
    const dim3 grid = flat ? dim3(rt_cuda_grid(n, RT_CUDA_THREADS)) : rt_cuda_grid_rows(rows, cols, RT_CUDA_THREADS);
    if (dtype == RT_BF16 && flat)
        rt_cuda_to16_flat_kernel<<<grid, RT_CUDA_THREADS, 0, st>>>((__nv_bfloat16 *)out, X, n);
    else if (dtype == RT_BF16)
        rt_cuda_to16_rows_kernel<<<grid, RT_CUDA_THREADS, 0, st>>>((__nv_bfloat16 *)out, X, rows, cols, ld);
    else if (flat)
        rt_cuda_to16_flat_kernel<<<grid, RT_CUDA_THREADS, 0, st>>>((__half *)out, X, n);
    else
        rt_cuda_to16_rows_kernel<<<grid, RT_CUDA_THREADS, 0, st>>>((__half *)out, X, rows, cols, ld);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_round_to(void *ctx, rt_dtype dtype, float *x, size_t rows, int cols, size_t ld) {
    RT_CHECK(dtype == RT_BF16 || dtype == RT_F16, "round_to %s", rt_dtype_name(dtype));
    if (rows == 0 || cols <= 0) return;
    if (dtype == RT_BF16)
        rt_cuda_round_as<__nv_bfloat16>(rt_cuda_stream(ctx), x, rows, cols, ld);
    else
        rt_cuda_round_as<__half>(rt_cuda_stream(ctx), x, rows, cols, ld);
}

/* n values of w converted into the 16-bit buffer out (bf16 or fp16): one flat run (n rows of one
 * column at stride 1), so any n, a whole slab's included, goes through the size_t flat kernel. */
static void rt_cuda_to_16(void *ctx, rt_dtype dtype, void *out, const float *w, size_t n) {
    if (n > 0) rt_cuda_to_16_rows(rt_cuda_stream(ctx), dtype, out, w, n, 1, 1);
}

__global__ void rt_cuda_widen_kernel(float *out, const void *in, int kind, size_t n) {
    RT_CUDA_FOR_EACH(i, n) out[i] = rt_cuda_load16(in, kind, i);
}

void rt_cuda_narrow(void *ctx, rt_dtype dtype, void *dst, const float *src, size_t n) {
    RT_CHECK(dtype == RT_BF16 || dtype == RT_F16, "narrow to %s", rt_dtype_name(dtype));
    rt_cuda_to_16(ctx, dtype, dst, src, n);
}

void rt_cuda_widen(void *ctx, rt_dtype dtype, float *dst, const void *src, size_t n) {
    RT_CHECK(dtype == RT_BF16 || dtype == RT_F16, "widen from %s", rt_dtype_name(dtype));
    if (n == 0) return;
    rt_cuda_widen_kernel<<<rt_cuda_grid(n, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(
        dst, src, rt_cuda_kind16(dtype), n);
    CUDA_LAUNCH_CHECK();
}

rt_status rt_cuda_set_matmul_precision(void *ctx, rt_dtype dtype) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    /* rt_set_precision lets only these three through */
    RT_CHECK(dtype == RT_F32 || dtype == RT_BF16 || dtype == RT_F16, "matmul precision %s", rt_dtype_name(dtype));
    if (dtype == RT_BF16 && c->sm_major < 8)
        return rt_errorf(RT_ERR_UNSUPPORTED, "bf16 matmuls need a GPU of compute capability 8.0 or newer; %s is %d.%d",
                         c->model, c->sm_major, c->sm_minor);
    if (c->matmul != dtype) rt_cuda_weight_copy_set(ctx, NULL, 0); /* it holds the old precision's values */
    c->matmul = dtype;
    return RT_OK;
}

rt_status rt_cuda_weight_copy_set(void *ctx, const float *w, size_t n) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    CUDA_CHECK(cudaFree(c->copy));
    c->memory_epoch++;
    c->copy = NULL;
    c->copy_w = NULL;
    c->copy_n = 0;
    if (!w || n == 0 || c->matmul == RT_F32) return RT_OK;
    /* No 32-bit limit: the copy is converted by a flat grid-stride loop over size_t indices
     * (rt_cuda_to_16), AdamW writes it at size_t offsets, and a matmul reads a weight's part of
     * it at a size_t offset; a 3B model's slab (2.85e9 floats) is past INT32_MAX. */
    cudaError_t e = cudaMalloc(&c->copy, n * 2);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        c->copy = NULL;
        return rt_errorf(RT_ERR_NOMEM, "cuda:%d: out of memory for the %s copy of the weights (%.1f MiB): %s",
                         c->device, rt_dtype_name(c->matmul), (double)n * 2 / 1048576.0, cudaGetErrorString(e));
    }
    c->copy_w = w;
    c->copy_n = n;
    rt_cuda_to_16(ctx, c->matmul, c->copy, w, n);
    return RT_OK;
}

void rt_cuda_weight_copy_update(void *ctx, const float *part, size_t n) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    size_t at = 0, len = rt_weight_copy_overlap(c->copy_w, c->copy_n, part, n, &at);
    if (len) rt_cuda_to_16(ctx, c->matmul, (char *)c->copy + at * 2, c->copy_w + at, len);
}

const void *rt_cuda_matmul_input(rt_cuda_ctx *c, int slot, const float *X, int rows, int cols, int ld, int *ld_out) {
    const size_t span = rows >= 1 ? (size_t)(rows - 1) * (size_t)ld + (size_t)cols : 0;
    size_t at = 0;
    /* only 16-byte-aligned blocks (a parameter's start is; a slice of one may not be): the
     * tensor-core kernels need it, and a scratch copy is no slower than a slow kernel */
    if (c->copy && span && rt_weight_copy_overlap(c->copy_w, c->copy_n, X, span, &at) == span && at % 8 == 0 &&
        (rows == 1 || ld % 8 == 0)) {
        *ld_out = ld;
        return (const char *)c->copy + at * 2;
    }
    *ld_out = cols;
    return rt_cuda_round_input(c, slot, X, rows, cols, ld);
}

const void *rt_cuda_round_input(rt_cuda_ctx *c, int slot, const float *X, int rows, int cols, int ld) {
    void *out = rt_cuda_scratch(c, slot, (size_t)rows * cols * 2);
    rt_cuda_to_16_rows(c->stream, c->matmul, out, X, (size_t)rows, cols, (size_t)ld);
    return out;
}
