/* The CUDA side of the compute precision (rt_set_precision in runtime/rt_backend.h): rounding
 * stored activations to bf16 or fp16 in place, the weights' 16-bit copy that AdamW keeps
 * (rt_weight_copy_set), and the 16-bit copies of a matmul's other inputs,
 * converted by our kernel (to nearest even, as the CPU backend's rt_f32_to_bf16 and
 * rt_round_f16), which cuda_lt.cu multiplies into fp32 with CUBLAS_COMPUTE_32F, so both backends
 * round at the same points. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "runtime/cuda/rt_cuda.h"

__global__ void rt_cuda_round_kernel(bool bf16, float *x, size_t rows, int cols, size_t ld) {
    const size_t n = rows * (size_t)cols;
    RT_CUDA_FOR_EACH(i, n) {
        float *p = x + (i / (size_t)cols) * ld + i % (size_t)cols;
        *p = bf16 ? __bfloat162float(__float2bfloat16_rn(*p)) : __half2float(__float2half_rn(*p));
    }
}

/* rows x cols of X (row stride ld) converted, packed, into the 16-bit buffer out. */
__global__ void rt_cuda_to_bf16_kernel(__nv_bfloat16 *out, const float *X, size_t rows, int cols, size_t ld) {
    const size_t n = rows * (size_t)cols;
    RT_CUDA_FOR_EACH(i, n) out[i] = __float2bfloat16_rn(X[(i / (size_t)cols) * ld + i % (size_t)cols]);
}
__global__ void rt_cuda_to_f16_kernel(__half *out, const float *X, size_t rows, int cols, size_t ld) {
    const size_t n = rows * (size_t)cols;
    RT_CUDA_FOR_EACH(i, n) out[i] = __float2half_rn(X[(i / (size_t)cols) * ld + i % (size_t)cols]);
}

void rt_cuda_round_to(void *ctx, rt_dtype dtype, float *x, size_t rows, int cols, size_t ld) {
    RT_CHECK(dtype == RT_BF16 || dtype == RT_F16, "round_to %s", rt_dtype_name(dtype));
    const size_t n = rows * (size_t)cols;
    if (n == 0) return;
    rt_cuda_round_kernel<<<rt_cuda_grid(n, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(dtype == RT_BF16, x, rows, cols, ld);
    CUDA_LAUNCH_CHECK();
}

__global__ void rt_cuda_widen_kernel(float *out, const void *in, bool bf16, size_t n) {
    RT_CUDA_FOR_EACH(i, n)
    out[i] = bf16 ? __bfloat162float(((const __nv_bfloat16 *)in)[i]) : __half2float(((const __half *)in)[i]);
}

static void rt_cuda_to_16(void *ctx, rt_dtype dtype, void *out, const float *w, size_t n);

void rt_cuda_narrow(void *ctx, rt_dtype dtype, void *dst, const float *src, size_t n) {
    RT_CHECK(dtype == RT_BF16 || dtype == RT_F16, "narrow to %s", rt_dtype_name(dtype));
    rt_cuda_to_16(ctx, dtype, dst, src, n);
}

void rt_cuda_widen(void *ctx, rt_dtype dtype, float *dst, const void *src, size_t n) {
    RT_CHECK(dtype == RT_BF16 || dtype == RT_F16, "widen from %s", rt_dtype_name(dtype));
    if (n == 0) return;
    rt_cuda_widen_kernel<<<rt_cuda_grid(n, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(dst, src, dtype == RT_BF16, n);
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

/* n values of w converted into the 16-bit buffer out (bf16 or fp16). */
static void rt_cuda_to_16(void *ctx, rt_dtype dtype, void *out, const float *w, size_t n) {
    if (n == 0) return;
    if (dtype == RT_BF16)
        rt_cuda_to_bf16_kernel<<<rt_cuda_grid(n, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>((__nv_bfloat16 *)out, w, 1,
                                                                                    (int)n, n);
    else
        rt_cuda_to_f16_kernel<<<rt_cuda_grid(n, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>((__half *)out, w, 1, (int)n, n);
    CUDA_LAUNCH_CHECK();
}

rt_status rt_cuda_weight_copy_set(void *ctx, const float *w, size_t n) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    CUDA_CHECK(cudaFree(c->copy));
    c->copy = NULL;
    c->copy_w = NULL;
    c->copy_n = 0;
    if (!w || n == 0 || c->matmul == RT_F32) return RT_OK;
    RT_CHECK(n <= (size_t)INT32_MAX, "a weight copy of %zu values", n); /* the kernels take int columns */
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
    const size_t n = (size_t)rows * cols;
    void *out = rt_cuda_scratch(c, slot, n * 2);
    if (c->matmul == RT_BF16)
        rt_cuda_to_bf16_kernel<<<rt_cuda_grid(n, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, c->stream>>>((__nv_bfloat16 *)out, X,
                                                                                    (size_t)rows, cols, (size_t)ld);
    else
        rt_cuda_to_f16_kernel<<<rt_cuda_grid(n, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, c->stream>>>((__half *)out, X, (size_t)rows,
                                                                                   cols, (size_t)ld);
    CUDA_LAUNCH_CHECK();
    return out;
}
