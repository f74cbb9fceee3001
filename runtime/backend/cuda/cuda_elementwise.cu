/* Elementwise CUDA kernels: activations (plain and gated) and their derivatives, bias add,
 * add/axpy/scale, dropout from the counter RNG (whole buffers and column shards), AdamW over a
 * slab, and the sum of squares for clipping. The formulas are the CPU backend's
 * (runtime/backend/cpu/cpu_elementwise.c) term by term, so the two
 * differ only by fp32 rounding (CUDA's tanhf/erff/expf and fused multiply-adds); dropout
 * draws rt_rng_uniform for element i exactly as the CPU does, so the masks are the same bits,
 * a Philox block (four elements) per thread: one Philox per element made dropout the larger
 * part of its cost on an H200.
 * Every kernel is a grid-stride loop (over size_t indices, rows, or Philox blocks): any n works
 * with a capped grid. The activations, the linear epilogues and AdamW move their values eight at a
 * time in 16-byte words (cuda_pack.h) where every buffer they touch is 16-byte aligned. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "runtime/backend/rt_adamw_scalars.h"
#include "runtime/backend/cuda/cuda_pack.h"
#include "runtime/backend/cuda/rt_cuda.h"

/* sqrt(2/pi) and the cubic coefficient of the tanh approximation (HF gelu_new). */
#define RT_GELU_BETA 0.7978845608028654f
#define RT_GELU_KAPPA 0.044715f
/* 1/sqrt(2) and 1/sqrt(2 pi) for the exact (erf) GELU. */
#define RT_SQRT1_2 0.7071067811865476f
#define RT_INV_SQRT_2PI 0.3989422804014327f

/* One element of each activation and of its derivative (the CPU backend's formulas), shared
 * by the plain and the gated kernels. */
__device__ __forceinline__ float rt_cuda_act1(int kind, float x) {
    if (kind == RT_ACT_GELU_TANH) {
        float u = RT_GELU_BETA * (x + RT_GELU_KAPPA * x * x * x);
        return 0.5f * x * (1.0f + tanhf(u));
    }
    if (kind == RT_ACT_GELU_ERF) return 0.5f * x * (1.0f + erff(x * RT_SQRT1_2));
    if (kind == RT_ACT_TANH) return tanhf(x);
    return x > 0.0f ? x : 0.0f;
}

/* act'(x); ReLU's is handled by the callers (they pass dout through, not dout * 1). */
__device__ __forceinline__ float rt_cuda_act1_grad(int kind, float x) {
    if (kind == RT_ACT_GELU_TANH) {
        float x2 = x * x;
        float t = tanhf(RT_GELU_BETA * (x + RT_GELU_KAPPA * x2 * x));
        float left = 0.5f * (1.0f + t);
        float right = 0.5f * x * (1.0f - t * t) * RT_GELU_BETA * (1.0f + 3.0f * RT_GELU_KAPPA * x2);
        return left + right;
    }
    if (kind == RT_ACT_GELU_ERF) {
        float cdf = 0.5f * (1.0f + erff(x * RT_SQRT1_2));
        float pdf = expf(-0.5f * x * x) * RT_INV_SQRT_2PI;
        return cdf + x * pdf;
    }
    if (kind == RT_ACT_TANH) {
        float t = tanhf(x);
        return 1.0f - t * t;
    }
    return x > 0.0f ? 1.0f : 0.0f;
}

/* dout * act'(x); ReLU passes dout through (not dout * 1), as the CPU backend. */
__device__ __forceinline__ float rt_cuda_act1_bwd(int kind, float x, float dout) {
    if (kind == RT_ACT_RELU) return x > 0.0f ? dout : 0.0f;
    return dout * rt_cuda_act1_grad(kind, x);
}

/* The activation kernels read and write typed handles in packs (cuda_pack.h): each value is
 * computed in fp32 from the widened inputs and stored once. An output may alias an input: a pack
 * is read whole before it is written. */
__global__ void rt_cuda_act_fwd_kernel(int kind, rt_x out, rt_x inp, size_t n) {
    rt_cuda_pack_walk(n, rt_pack_aligned(out) && rt_pack_aligned(inp), [&](size_t i, int w) {
        const rt_pack x = rt_pack_load_n(inp, i, w);
        rt_pack y = {};
        for (int j = 0; j < w; j++) y.v[j] = rt_cuda_act1(kind, x.v[j]);
        rt_pack_store_n(out, i, w, &y);
    });
}

__global__ void rt_cuda_act_bwd_kernel(int kind, rt_x dinp, rt_x inp, rt_x dout, size_t n) {
    const bool aligned = rt_pack_aligned(dinp) && rt_pack_aligned(inp) && rt_pack_aligned(dout);
    rt_cuda_pack_walk(n, aligned, [&](size_t i, int w) {
        const rt_pack x = rt_pack_load_n(inp, i, w), dy = rt_pack_load_n(dout, i, w);
        rt_pack dx = {};
        for (int j = 0; j < w; j++) dx.v[j] = rt_cuda_act1_bwd(kind, x.v[j], dy.v[j]);
        rt_pack_store_n(dinp, i, w, &dx);
    });
}

__global__ void rt_cuda_gated_act_fwd_kernel(int kind, rt_x out, rt_x gate, rt_x lin, size_t n) {
    const bool aligned = rt_pack_aligned(out) && rt_pack_aligned(gate) && rt_pack_aligned(lin);
    rt_cuda_pack_walk(n, aligned, [&](size_t i, int w) {
        const rt_pack g = rt_pack_load_n(gate, i, w), l = rt_pack_load_n(lin, i, w);
        rt_pack y = {};
        for (int j = 0; j < w; j++) y.v[j] = rt_cuda_act1(kind, g.v[j]) * l.v[j];
        rt_pack_store_n(out, i, w, &y);
    });
}

/* dlin = dout * act(gate); dgate = (dout * lin) * act'(gate), as the CPU backend. dgate or dlin may
 * alias an input: each pack is read before it is written. */
__global__ void rt_cuda_gated_act_bwd_kernel(int kind, rt_x dgate, rt_x dlin, rt_x gate, rt_x lin, rt_x dout,
                                             size_t n) {
    const bool aligned = rt_pack_aligned(dgate) && rt_pack_aligned(dlin) && rt_pack_aligned(gate) &&
                         rt_pack_aligned(lin) && rt_pack_aligned(dout);
    rt_cuda_pack_walk(n, aligned, [&](size_t i, int w) {
        const rt_pack g = rt_pack_load_n(gate, i, w), l = rt_pack_load_n(lin, i, w), dy = rt_pack_load_n(dout, i, w);
        rt_pack dl = {}, dg = {};
        for (int j = 0; j < w; j++) {
            dl.v[j] = dy.v[j] * rt_cuda_act1(kind, g.v[j]);
            dg.v[j] = rt_cuda_act1_bwd(kind, g.v[j], dy.v[j] * l.v[j]);
        }
        rt_pack_store_n(dlin, i, w, &dl);
        rt_pack_store_n(dgate, i, w, &dg);
    });
}

/* linear_fwd's epilogue: v = sum + bias[c] in fp32; pre = v, and with act out = act(v), stored. A
 * row's columns go in packs where C is a whole number of them (so every row starts one) and every
 * buffer is aligned. */
__global__ void rt_cuda_bias_act_kernel(rt_x out, rt_x pre, const float *sum, const float *bias, size_t N, int C,
                                        int kind) {
    const bool packed = C % RT_PACK == 0 && rt_pack_aligned(out) && rt_pack_aligned(pre) &&
                        rt_pack_aligned(rt_pack_xf(sum)) && rt_pack_aligned(rt_pack_xf(bias));
    const int w = packed ? RT_PACK : 1;
    RT_CUDA_FOR_EACH_ROW_COL(r, q, N, C / w) {
        const int c = q * w;
        const size_t i = r * (size_t)C + (size_t)c;
        rt_pack v = rt_pack_load_n(rt_pack_xf(sum), i, w);
        if (bias) {
            const rt_pack b = rt_pack_load_n(rt_pack_xf(bias), (size_t)c, w);
            for (int j = 0; j < w; j++) v.v[j] += b.v[j];
        }
        rt_pack_store_n(pre, i, w, &v);
        if (kind < 0) continue;
        for (int j = 0; j < w; j++) v.v[j] = rt_cuda_act1(kind, v.v[j]);
        rt_pack_store_n(out, i, w, &v);
    }
}

/* linear_dact's epilogue: g = act'(pre) * g in fp32 (what the bias gradient sums), dpre = g stored. */
__global__ void rt_cuda_dact_kernel(int kind, rt_x dpre, float *g, rt_x pre, size_t n) {
    const bool aligned = rt_pack_aligned(dpre) && rt_pack_aligned(rt_pack_xf(g)) && rt_pack_aligned(pre);
    rt_cuda_pack_walk(n, aligned, [&](size_t i, int w) {
        const rt_pack x = rt_pack_load_n(pre, i, w);
        rt_pack d = rt_pack_load_n(rt_pack_xf(g), i, w);
        for (int j = 0; j < w; j++) d.v[j] = rt_cuda_act1_bwd(kind, x.v[j], d.v[j]);
        rt_pack_store_n(rt_pack_xf(g), i, w, &d);
        rt_pack_store_n(dpre, i, w, &d);
    });
}

__global__ void rt_cuda_add_bias_kernel(float *out, const float *bias, size_t N, int C) {
    RT_CUDA_FOR_EACH_ROW_COL(r, c, N, C) out[r * (size_t)C + c] += bias[c];
}

/* out = a + b, stored at the compute precision (kind); out may alias a or b, as each pack is read
 * before it is written. */
__global__ void rt_cuda_add_kernel(rt_x out, rt_x a, rt_x b, size_t n, int kind) {
    const bool aligned = rt_pack_aligned(out) && rt_pack_aligned(a) && rt_pack_aligned(b);
    rt_cuda_pack_walk(n, aligned, [&](size_t i, int w) {
        const rt_pack av = rt_pack_load_n(a, i, w), bv = rt_pack_load_n(b, i, w);
        rt_pack o = {};
        for (int k = 0; k < w; k++) o.v[k] = rt_cuda_round16(av.v[k] + bv.v[k], kind);
        rt_pack_store_n(out, i, w, &o);
    });
}

__global__ void rt_cuda_axpy_kernel(float *y, float alpha, const float *x, size_t n) {
    RT_CUDA_FOR_EACH(i, n) y[i] += alpha * x[i];
}

__global__ void rt_cuda_scale_kernel(float *x, float s, size_t n) { RT_CUDA_FOR_EACH(i, n) x[i] *= s; }

/* Value i of x times w[i / C] (a row's weight; a pack may span two rows). */
__global__ void rt_cuda_scale_rows_kernel(rt_x x, const float *w, size_t n, int C) {
    rt_cuda_pack_walk(n, rt_pack_aligned(x), [&](size_t i, int wd) {
        rt_pack v = rt_pack_load_n(x, i, wd);
        for (int k = 0; k < wd; k++) v.v[k] *= w[(i + (size_t)k) / (size_t)C];
        rt_pack_store_n(x, i, wd, &v);
    });
}

/* *flag = 1 where x holds an inf (every writer writes the same value). */
__global__ void rt_cuda_any_inf_kernel(int *flag, rt_x x, size_t n) {
    rt_cuda_pack_walk(n, rt_pack_aligned(x), [&](size_t i, int w) {
        const rt_pack v = rt_pack_load_n(x, i, w);
        for (int k = 0; k < w; k++)
            if (isinf(v.v[k])) *flag = 1;
    });
}

__global__ void rt_cuda_clamp_abs_kernel(rt_x x, size_t n, float limit) {
    rt_cuda_pack_walk(n, rt_pack_aligned(x), [&](size_t i, int w) {
        rt_pack v = rt_pack_load_n(x, i, w);
        for (int k = 0; k < w; k++) /* NaN stays, as on the CPU */
            v.v[k] = v.v[k] > limit ? limit : v.v[k] < -limit ? -limit : v.v[k];
        rt_pack_store_n(x, i, w, &v);
    });
}

__global__ void rt_cuda_clamp_abs_bwd_kernel(float *dx, rt_x y, size_t n, float limit) {
    const rt_x d = rt_pack_xf(dx);
    rt_cuda_pack_walk(n, rt_pack_aligned(d) && rt_pack_aligned(y), [&](size_t i, int w) {
        const rt_pack v = rt_pack_load_n(y, i, w);
        rt_pack g = rt_pack_load_n(d, i, w);
        for (int k = 0; k < w; k++)
            if (v.v[k] > limit || v.v[k] < -limit) g.v[k] = 0.0f;
        rt_pack_store_n(d, i, w, &g);
    });
}

/* The w values of y from i: keep ? x * s : 0, keep being u >= p (the values' uniforms), stored
 * rounded to kind. */
__device__ __forceinline__ void drop_values(rt_x y, rt_x x, size_t i, int w, const rt_pack u, float p, float s,
                                            int kind) {
    const rt_pack xv = rt_pack_load_n(x, i, w);
    rt_pack o = {};
    for (int j = 0; j < w; j++) o.v[j] = rt_cuda_round16(u.v[j] >= p ? xv.v[j] * s : 0.0f, kind);
    rt_pack_store_n(y, i, w, &o);
}

/* y = keep(i) ? x * s : 0 with keep(i) = uniform(seed, stream, i) >= p; y may alias x. A thread
 * per block of four (launch over (n + 3) / 4). step: NULL, or the step's part of stream, read here
 * so that a replayed graph draws its step's mask (rt_stream_at_step). */
__global__ void rt_cuda_dropout_kernel(float *y, const float *x, size_t n, float p, float s, uint64_t seed,
                                       uint64_t stream_at0, const uint64_t *step, int kind) {
    const uint64_t stream = rt_stream_at_step(stream_at0, step);
    const rt_x Y = rt_pack_xf(y), X = rt_pack_xf(x);
    rt_cuda_drop_walk(seed, stream, 0, n, rt_pack_aligned(Y) && rt_pack_aligned(X),
                      (size_t)blockIdx.x * blockDim.x + threadIdx.x, (size_t)gridDim.x * blockDim.x,
                      [&](size_t i, int w, const rt_pack u) { drop_values(Y, X, i, w, u, p, s, kind); });
}

/* Element (r, c) of a (rows, cols) column block at col_offset of a (rows, cols_total) matrix
 * draws the uniform of its whole-matrix index, as rt_cuda_dropout_kernel would there. */
__global__ void rt_cuda_dropout_cols_kernel(rt_x y, rt_x x, size_t rows, int cols, int cols_total, int col_offset,
                                            float p, float s, uint64_t seed, uint64_t stream_at0, const uint64_t *step,
                                            int kind) {
    const uint64_t stream = rt_stream_at_step(stream_at0, step);
    /* a row per blockIdx.y, its packs (or Philox blocks) across the threads */
    for (size_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const uint64_t g0 = (uint64_t)r * (uint64_t)cols_total + (uint64_t)col_offset;
        const rt_x yr = rt_cuda_x_at(y, r * (size_t)cols), xr = rt_cuda_x_at(x, r * (size_t)cols);
        rt_cuda_drop_walk(seed, stream, g0, (size_t)cols, rt_pack_aligned(yr) && rt_pack_aligned(xr),
                          (size_t)blockIdx.x * blockDim.x + threadIdx.x, (size_t)gridDim.x * blockDim.x,
                          [&](size_t c, int w, const rt_pack u) { drop_values(yr, xr, c, w, u, p, s, kind); });
    }
}

/* copy_kind 1 or 2: each updated weight also goes to copy as bf16 or fp16 (the weights'
 * low-precision copy the matmuls read, rt_weight_copy_set). */
/* AdamW over n weights with scalars k (by value: the host's, or read from an rt_step_state). */
__device__ __forceinline__ void rt_cuda_adamw_loop(const rt_adamw_scalars k, float grad_scale, float *params,
                                                   const float *grads, float *m, float *v, size_t n, void *copy,
                                                   int copy_kind) {
    const rt_x P = rt_pack_xf(params), G = rt_pack_xf(grads), M = rt_pack_xf(m), V = rt_pack_xf(v);
    const rt_x copy_x = rt_pack_x(copy, copy_kind == 1 ? RT_BF16 : RT_F16);
    const bool aligned = rt_pack_aligned(P) && rt_pack_aligned(G) && rt_pack_aligned(M) && rt_pack_aligned(V) &&
                         (!copy_kind || rt_pack_aligned(copy_x));
    rt_cuda_pack_walk(n, aligned, [&](size_t i, int w) {
        const rt_pack gs = rt_pack_load_n(G, i, w);
        rt_pack ps = rt_pack_load_n(P, i, w), ms = rt_pack_load_n(M, i, w), vs = rt_pack_load_n(V, i, w);
        for (int j = 0; j < w; j++) {
            float g = gs.v[j] * grad_scale;
            float p = ps.v[j] * k.decay;
            float mi = ms.v[j];
            /* torch lerp: start + w*(end-start) for w < 0.5, else end - (end-start)*(1-w) */
            mi = k.lerp_low ? mi + k.w1 * (g - mi) : g - (g - mi) * (1.0f - k.w1);
            float vi = vs.v[j] * k.beta2 + k.w2 * g * g;
            float denom = sqrtf(vi) / k.bc2_sqrt + k.eps;
            ps.v[j] = p + (-k.step_size) * mi / denom;
            ms.v[j] = mi;
            vs.v[j] = vi;
        }
        rt_pack_store_n(M, i, w, &ms);
        rt_pack_store_n(V, i, w, &vs);
        rt_pack_store_n(P, i, w, &ps);
        if (copy_kind) rt_pack_store_n(copy_x, i, w, &ps);
    });
}

__global__ void rt_cuda_adamw_kernel(const rt_adamw_scalars k, float grad_scale, float *params, const float *grads,
                                     float *m, float *v, size_t n, void *copy, int copy_kind) {
    rt_cuda_adamw_loop(k, grad_scale, params, grads, m, v, n, copy, copy_kind);
}

/* The step's AdamW: scalars, gradient factor and skip from the state the device computed. */
__global__ void rt_cuda_adamw_step_kernel(const rt_step_state *s, int group, float *params, const float *grads,
                                          float *m, float *v, size_t n, void *copy, int copy_kind) {
    if (s->skip) return;
    rt_cuda_adamw_loop(s->adam[group], s->coef, params, grads, m, v, n, copy, copy_kind);
}

/* One block: the losses summed in double (strided by thread, then a fixed tree), added onto acc. */
__global__ void rt_cuda_loss_into_kernel(double *acc, const float *losses, size_t n) {
    __shared__ double sh[32];
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += (double)losses[i];
    s = rt_cuda_block_sum_d(s, sh);
    if (threadIdx.x == 0) *acc += s;
}

__global__ void rt_cuda_step_finish_kernel(rt_step_state *s, double max_norm, double loss_scale) {
    rt_step_finish(s, max_norm, loss_scale);
}

/* Pass 1 of sumsq: a fixed grid (it depends on n only) writes one double per block. */
__global__ void rt_cuda_sumsq_partial_kernel(double *partial, const float *x, size_t n) {
    __shared__ double sh[32];
    double s = 0.0;
    RT_CUDA_FOR_EACH(i, n) s += (double)x[i] * x[i];
    s = rt_cuda_block_sum_d(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* Pass 2: one block adds the partials (strided by thread, then a fixed tree) into out[0], or
 * onto it (add: the step state's running sum). */
__global__ void rt_cuda_sumsq_final_kernel(double *out, const double *partial, int nblocks, bool add) {
    __shared__ double sh[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < nblocks; i += blockDim.x) s += partial[i];
    s = rt_cuda_block_sum_d(s, sh);
    if (threadIdx.x == 0) out[0] = add ? out[0] + s : s;
}

static void rt_cuda_act_check(rt_act_kind kind) {
    RT_CHECK(kind == RT_ACT_GELU_TANH || kind == RT_ACT_GELU_ERF || kind == RT_ACT_RELU || kind == RT_ACT_TANH,
             "unknown activation kind %d", (int)kind);
}

void rt_cuda_act_fwd(void *ctx, rt_act_kind kind, rt_x out, rt_x inp, size_t n) {
    rt_cuda_act_check(kind);
    if (n == 0) return;
    rt_cuda_act_fwd_kernel<<<rt_cuda_grid(rt_pack_threads(n), RT_CUDA_THREADS), RT_CUDA_THREADS, 0,
                             rt_cuda_stream(ctx)>>>((int)kind, out, inp, n);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_act_bwd(void *ctx, rt_act_kind kind, rt_x dinp, rt_x inp, rt_x dout, size_t n) {
    rt_cuda_act_check(kind);
    if (n == 0) return;
    rt_cuda_act_bwd_kernel<<<rt_cuda_grid(rt_pack_threads(n), RT_CUDA_THREADS), RT_CUDA_THREADS, 0,
                             rt_cuda_stream(ctx)>>>((int)kind, dinp, inp, dout, n);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_gated_act_fwd(void *ctx, rt_act_kind kind, rt_x out, rt_x gate, rt_x lin, size_t n) {
    rt_cuda_act_check(kind);
    if (n == 0) return;
    rt_cuda_gated_act_fwd_kernel<<<rt_cuda_grid(rt_pack_threads(n), RT_CUDA_THREADS), RT_CUDA_THREADS, 0,
                                   rt_cuda_stream(ctx)>>>((int)kind, out, gate, lin, n);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_gated_act_bwd(void *ctx, rt_act_kind kind, rt_x dgate, rt_x dlin, rt_x gate, rt_x lin, rt_x dout,
                           size_t n) {
    rt_cuda_act_check(kind);
    if (n == 0) return;
    rt_cuda_gated_act_bwd_kernel<<<rt_cuda_grid(rt_pack_threads(n), RT_CUDA_THREADS), RT_CUDA_THREADS, 0,
                                   rt_cuda_stream(ctx)>>>((int)kind, dgate, dlin, gate, lin, dout, n);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_bias_act(void *ctx, rt_x out, rt_x pre, const float *sum, const float *bias, size_t N, int C,
                      const rt_act_kind *act) {
    if (act) rt_cuda_act_check(*act);
    if (N == 0 || C <= 0) return;
    rt_cuda_bias_act_kernel<<<rt_cuda_grid_rows(N, (int)rt_pack_threads((size_t)C), RT_CUDA_THREADS), RT_CUDA_THREADS,
                              0, rt_cuda_stream(ctx)>>>(out, pre, sum, bias, N, C, act ? (int)*act : -1);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_dact(void *ctx, rt_act_kind kind, rt_x dpre, float *g, rt_x pre, size_t n) {
    rt_cuda_act_check(kind);
    if (n == 0) return;
    rt_cuda_dact_kernel<<<rt_cuda_grid(rt_pack_threads(n), RT_CUDA_THREADS), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(
        (int)kind, dpre, g, pre, n);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_add_bias(void *ctx, float *out, const float *bias, size_t N, int C) {
    RT_CHECK(C > 0, "C=%d", C);
    size_t n = N * (size_t)C;
    if (n == 0) return;
    rt_cuda_add_bias_kernel<<<rt_cuda_grid_rows(N, C, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(
        out, bias, N, C);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_add(void *ctx, rt_x out, rt_x a, rt_x b, size_t n) {
    if (n == 0) return;
    rt_cuda_add_kernel<<<rt_cuda_grid(rt_pack_threads(n), RT_CUDA_THREADS), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(
        out, a, b, n, rt_cuda_store_kind(ctx));
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_axpy(void *ctx, float *y, float alpha, const float *x, size_t n) {
    if (n == 0) return;
    rt_cuda_axpy_kernel<<<rt_cuda_grid(n, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(y, alpha, x, n);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_scale(void *ctx, float *x, float s, size_t n) {
    if (n == 0) return;
    rt_cuda_scale_kernel<<<rt_cuda_grid(n, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(x, s, n);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_scale_rows(void *ctx, rt_x x, const float *w, size_t N, int C) {
    size_t n = N * (size_t)C;
    if (n == 0) return;
    rt_cuda_scale_rows_kernel<<<rt_cuda_grid(rt_pack_threads(n), RT_CUDA_THREADS), RT_CUDA_THREADS, 0,
                                rt_cuda_stream(ctx)>>>(x, w, n, C);
    CUDA_LAUNCH_CHECK();
}

/* The host reads whether x holds an inf (a synchronization, as the sumsq it replaces), then
 * clamps. */
bool rt_cuda_clamp_inf(void *ctx, rt_x x, size_t n, float limit) {
    if (n == 0) return false;
    cudaStream_t stream = rt_cuda_stream(ctx);
    int *flag = (int *)rt_cuda_scratch((rt_cuda_ctx *)ctx, RT_CUDA_SCRATCH_SUMSQ_OUT, sizeof(double));
    CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream));
    rt_cuda_any_inf_kernel<<<rt_cuda_grid(rt_pack_threads(n), RT_CUDA_THREADS), RT_CUDA_THREADS, 0, stream>>>(flag, x,
                                                                                                              n);
    CUDA_LAUNCH_CHECK();
    int inf = 0;
    CUDA_CHECK(cudaMemcpyAsync(&inf, flag, sizeof inf, cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (!inf) return false;
    rt_cuda_clamp_abs_kernel<<<rt_cuda_grid(rt_pack_threads(n), RT_CUDA_THREADS), RT_CUDA_THREADS, 0, stream>>>(x, n,
                                                                                                                limit);
    CUDA_LAUNCH_CHECK();
    return true;
}

void rt_cuda_clamp_abs_bwd(void *ctx, float *dx, rt_x y, size_t n, float limit) {
    if (n == 0) return;
    rt_cuda_clamp_abs_bwd_kernel<<<rt_cuda_grid(rt_pack_threads(n), RT_CUDA_THREADS), RT_CUDA_THREADS, 0,
                                   rt_cuda_stream(ctx)>>>(dx, y, n, limit);
    CUDA_LAUNCH_CHECK();
}

/* n floats an op copied without a kernel of its own, stored at the compute precision. */
static void rt_cuda_store_copied(void *ctx, float *y, size_t n) {
    const rt_dtype t = ((const rt_cuda_ctx *)ctx)->matmul;
    if (t != RT_F32) rt_cuda_round_to(ctx, t, y, n, 1, 1);
}

/* Shared by fwd and bwd, which apply the same mask (the CPU's rt_cpu_dropout_apply); y stored at
 * the compute precision. */
static void rt_cuda_dropout_apply(void *ctx, float *y, const float *x, size_t n, float p, uint64_t seed,
                                  uint64_t stream, const uint64_t *step) {
    RT_CHECK(p >= 0.0f && p <= 1.0f, "dropout p=%g", (double)p);
    if (n == 0) return;
    if (p == 0.0f) {
        if (y != x) CUDA_CHECK(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, rt_cuda_stream(ctx)));
        rt_cuda_store_copied(ctx, y, n);
        return;
    }
    if (p >= 1.0f) { /* everything dropped; 1/(1-p) would be inf and 0*inf NaN */
        CUDA_CHECK(cudaMemsetAsync(y, 0, n * sizeof(float), rt_cuda_stream(ctx)));
        return;
    }
    float s = 1.0f / (1.0f - p);
    rt_cuda_dropout_kernel<<<rt_cuda_grid((n + 3) / 4, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(
        y, x, n, p, s, seed, stream, step, rt_cuda_store_kind(ctx));
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_dropout_fwd(void *ctx, float *out, const float *inp, size_t n, float p, uint64_t seed, uint64_t stream,
                         const uint64_t *step) {
    rt_cuda_dropout_apply(ctx, out, inp, n, p, seed, stream, step);
}

void rt_cuda_dropout_bwd(void *ctx, float *dinp, const float *dout, size_t n, float p, uint64_t seed, uint64_t stream,
                         const uint64_t *step) {
    rt_cuda_dropout_apply(ctx, dinp, dout, n, p, seed, stream, step);
}

void rt_cuda_dropout_cols(void *ctx, rt_x out, rt_x inp, size_t rows, int cols, int cols_total, int col_offset, float p,
                          uint64_t seed, uint64_t stream, const uint64_t *step) {
    RT_CHECK(p >= 0.0f && p <= 1.0f, "dropout p=%g", (double)p);
    RT_CHECK(cols >= 0 && col_offset >= 0 && (int64_t)col_offset + cols <= cols_total,
             "dropout_cols: cols=%d col_offset=%d cols_total=%d", cols, col_offset, cols_total);
    /* out and inp may differ in type (LoRA's fp32 scratch beside 16-bit activations): the kernel
     * converts per element */
    size_t n = rows * (size_t)cols;
    if (n == 0) return;
    const size_t bytes = n * rt_x_size(out.t);
    if (p == 0.0f && out.t == inp.t) { /* no draws: the whole-matrix rules give the same result */
        if (out.p != inp.p)
            CUDA_CHECK(cudaMemcpyAsync(out.p, inp.p, bytes, cudaMemcpyDeviceToDevice, rt_cuda_stream(ctx)));
        if (out.t == RT_F32) rt_cuda_store_copied(ctx, (float *)out.p, n); /* a 16-bit one holds stored values */
        return;
    }
    if (p >= 1.0f) { /* everything dropped */
        CUDA_CHECK(cudaMemsetAsync(out.p, 0, bytes, rt_cuda_stream(ctx)));
        return;
    }
    float s = 1.0f / (1.0f - p);
    /* a row's blocks: cols / 4 + 2 at most (a partial one at either end) */
    rt_cuda_dropout_cols_kernel<<<rt_cuda_grid_rows(rows, cols / 4 + 2, RT_CUDA_THREADS), RT_CUDA_THREADS, 0,
                                  rt_cuda_stream(ctx)>>>(out, inp, rows, cols, cols_total, col_offset, p, s, seed,
                                                         stream, step, rt_cuda_store_kind(ctx));
    CUDA_LAUNCH_CHECK();
}

/* torch.optim.AdamW (single-tensor path): the step scalars are computed once in double on
 * the host and cast to float, the per-element math is float, as in the CPU backend. */
/* Where AdamW over params[0, n) writes the weights' copy: all of these weights in it (*copy, its
 * kind 1 bf16 or 2 fp16), or none (kind 0: the caller converts the part after). */
static int rt_cuda_adamw_copy(rt_cuda_ctx *c, const float *params, size_t n, void **copy) {
    size_t at = 0;
    const bool whole = rt_weight_copy_overlap(c->copy_w, c->copy_n, params, n, &at) == n;
    *copy = whole ? (char *)c->copy + at * 2 : NULL;
    return whole ? (c->matmul == RT_BF16 ? 1 : 2) : 0;
}

void rt_cuda_adamw(void *ctx, float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1,
                   float beta2, float eps, float weight_decay, float grad_scale, int64_t t) {
    RT_CHECK(t >= 1, "AdamW step t=%lld must be >= 1", (long long)t);
    if (n == 0) return;
    /* the CPU backend's scalars, bit for bit, so both update weights with the same numbers */
    const rt_adamw_scalars k = rt_adamw_scalars_of(lr, beta1, beta2, eps, weight_decay, t);
    void *copy = NULL;
    const int kind = rt_cuda_adamw_copy((rt_cuda_ctx *)ctx, params, n, &copy);
    rt_cuda_adamw_kernel<<<rt_cuda_grid(rt_pack_threads(n), RT_CUDA_THREADS), RT_CUDA_THREADS, 0,
                           rt_cuda_stream(ctx)>>>(k, grad_scale, params, grads, m, v, n, copy, kind);
    CUDA_LAUNCH_CHECK();
    if (!kind) rt_cuda_weight_copy_update(ctx, params, n);
}

void rt_cuda_adamw_step(void *ctx, const rt_step_state *s, int group, float *params, const float *grads, float *m,
                        float *v, size_t n) {
    RT_CHECK(group == 0 || group == 1, "AdamW group %d", group);
    if (n == 0) return;
    void *copy = NULL;
    const int kind = rt_cuda_adamw_copy((rt_cuda_ctx *)ctx, params, n, &copy);
    rt_cuda_adamw_step_kernel<<<rt_cuda_grid(rt_pack_threads(n), RT_CUDA_THREADS), RT_CUDA_THREADS, 0,
                                rt_cuda_stream(ctx)>>>(s, group, params, grads, m, v, n, copy, kind);
    CUDA_LAUNCH_CHECK();
    /* a skipped step left the weights as they were: converting them again changes nothing */
    if (!kind) rt_cuda_weight_copy_update(ctx, params, n);
}

void rt_cuda_loss_into(void *ctx, double *acc, const float *losses, size_t n) {
    if (n == 0) return;
    rt_cuda_loss_into_kernel<<<1, RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(acc, losses, n);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_step_finish(void *ctx, rt_step_state *s, double max_norm, double loss_scale) {
    rt_cuda_step_finish_kernel<<<1, 1, 0, rt_cuda_stream(ctx)>>>(s, max_norm, loss_scale);
    CUDA_LAUNCH_CHECK();
}

/* sumsq of x into out[0] (add: onto it), on the stream: at most 1024 blocks of partials, plenty to
 * fill the device and few enough for one block to finish the sum; the grid depends on n only, so
 * the result is reproducible. */
static void rt_cuda_sumsq_launch(void *ctx, double *out, bool add, const float *x, size_t n) {
    unsigned blocks = rt_cuda_grid(n, RT_CUDA_THREADS);
    if (blocks > 1024) blocks = 1024;
    double *partial = (double *)rt_cuda_scratch((rt_cuda_ctx *)ctx, RT_CUDA_SCRATCH_SUMSQ, blocks * sizeof(double));
    rt_cuda_sumsq_partial_kernel<<<blocks, RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(partial, x, n);
    CUDA_LAUNCH_CHECK();
    rt_cuda_sumsq_final_kernel<<<1, RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(out, partial, (int)blocks, add);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_sumsq_into(void *ctx, rt_step_state *s, const float *x, size_t n) {
    if (n) rt_cuda_sumsq_launch(ctx, &s->sumsq, true, x, n);
}

double rt_cuda_sumsq(void *ctx, const float *x, size_t n) {
    if (n == 0) return 0.0;
    double *buf = (double *)rt_cuda_scratch((rt_cuda_ctx *)ctx, RT_CUDA_SCRATCH_SUMSQ_OUT, sizeof(double));
    rt_cuda_sumsq_launch(ctx, buf, false, x, n);
    double s = 0.0;
    CUDA_CHECK(cudaMemcpyAsync(&s, buf, sizeof s, cudaMemcpyDeviceToHost, rt_cuda_stream(ctx)));
    CUDA_CHECK(cudaStreamSynchronize(rt_cuda_stream(ctx)));
    return s;
}
