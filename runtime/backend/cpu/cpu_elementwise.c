/* Elementwise CPU kernels: activations (plain and gated) and their exact derivatives, bias
 * add and its gradient, add/axpy/scale, dropout from the counter RNG (whole buffers and column
 * shards), AdamW over a slab, and the sum of squares for gradient clipping. The formulas
 * follow PyTorch's CPU kernels term by term (float math, same operation order where it
 * matters) so the golden files match to ~1 ulp. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/cpu/cpu_internal.h"
#include "runtime/backend/cpu/cpu_math.h"
#include "runtime/backend/rt_adamw_scalars.h"
#include "runtime/base/rt_dtype.h"

/* sqrt(2/pi) and the cubic coefficient of the tanh approximation (HF gelu_new). */
#define RT_GELU_BETA 0.7978845608028654f
#define RT_GELU_KAPPA 0.044715f
/* 1/sqrt(2) and 1/sqrt(2 pi) for the exact (erf) GELU. */
#define RT_SQRT1_2 0.7071067811865476f
#define RT_INV_SQRT_2PI 0.3989422804014327f

/* One element of each activation and of its derivative, shared by the plain and the gated
 * kernels (one copy of each formula). */
static inline float rt_cpu_gelu_tanh(float x) {
    float u = RT_GELU_BETA * (x + RT_GELU_KAPPA * x * x * x);
    return 0.5f * x * (1.0f + rt_fast_tanhf(u));
}

static inline float rt_cpu_gelu_tanh_grad(float x) {
    float x2 = x * x;
    float t = rt_fast_tanhf(RT_GELU_BETA * (x + RT_GELU_KAPPA * x2 * x));
    float left = 0.5f * (1.0f + t);
    float right = 0.5f * x * (1.0f - t * t) * RT_GELU_BETA * (1.0f + 3.0f * RT_GELU_KAPPA * x2);
    return left + right;
}

/* The exact GELU with the vectorizable erf and exp of cpu_math.h, as PyTorch's CPU GELU
 * also uses an approximate vector erf; the loops below are `simd` so they vectorize. */
static inline float rt_cpu_gelu_erf(float x) { return 0.5f * x * (1.0f + rt_fast_erff(x * RT_SQRT1_2)); }

static inline float rt_cpu_gelu_erf_grad(float x) {
    float cdf = 0.5f * (1.0f + rt_fast_erff(x * RT_SQRT1_2));
    float pdf = rt_fast_expf(-0.5f * x * x) * RT_INV_SQRT_2PI;
    return cdf + x * pdf;
}

static inline float rt_cpu_relu(float x) { return x > 0.0f ? x : 0.0f; }

/* from the input, as the interface passes it: 1 - tanh(x)^2 */
static inline float rt_cpu_tanh_grad(float x) {
    float t = tanhf(x);
    return 1.0f - t * t;
}

/* The kernels below compute a run of fp32 values each (serial, vectorized); rt_cpu_x_map runs
 * one over typed buffers (rt_x). in: [inp] plain, [inp, dout] its backward, [gate, lin] gated,
 * [gate, lin, dout] its backward; out: [out], [dinp], [out], [dgate, dlin]. Each element's
 * inputs are read before its outputs are written, so an output may alias an input. */
typedef void (*cpu_span_fn)(rt_act_kind kind, float *const *out, const float *const *in, size_t n);

void rt_cpu_act_span(rt_act_kind kind, float *out, const float *inp, size_t n) {
    switch (kind) {
    case RT_ACT_GELU_TANH:
#pragma omp simd
        for (size_t i = 0; i < n; i++) out[i] = rt_cpu_gelu_tanh(inp[i]);
        break;
    case RT_ACT_GELU_ERF:
#pragma omp simd
        for (size_t i = 0; i < n; i++) out[i] = rt_cpu_gelu_erf(inp[i]);
        break;
    case RT_ACT_RELU:
        for (size_t i = 0; i < n; i++) out[i] = rt_cpu_relu(inp[i]);
        break;
    case RT_ACT_TANH:
        for (size_t i = 0; i < n; i++) out[i] = tanhf(inp[i]);
        break;
    default: RT_CHECK(0, "unknown activation kind %d", (int)kind);
    }
}

static void act_fwd_span(rt_act_kind kind, float *const *out, const float *const *in, size_t n) {
    rt_cpu_act_span(kind, out[0], in[0], n);
}

static void act_bwd_span(rt_act_kind kind, float *const *out, const float *const *in, size_t n) {
    float *dinp = out[0];
    const float *inp = in[0], *dout = in[1];
    switch (kind) {
    case RT_ACT_GELU_TANH:
#pragma omp simd
        for (size_t i = 0; i < n; i++) dinp[i] = dout[i] * rt_cpu_gelu_tanh_grad(inp[i]);
        break;
    case RT_ACT_GELU_ERF:
#pragma omp simd
        for (size_t i = 0; i < n; i++) dinp[i] = dout[i] * rt_cpu_gelu_erf_grad(inp[i]);
        break;
    case RT_ACT_RELU:
        for (size_t i = 0; i < n; i++) dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
        break;
    case RT_ACT_TANH:
        for (size_t i = 0; i < n; i++) dinp[i] = dout[i] * rt_cpu_tanh_grad(inp[i]);
        break;
    default: RT_CHECK(0, "unknown activation kind %d", (int)kind);
    }
}

/* out = act(gate) * lin, as HF's T5DenseGatedActDense: the activation in float, then the
 * product. */
static void gated_fwd_span(rt_act_kind kind, float *const *o, const float *const *in, size_t n) {
    float *out = o[0];
    const float *gate = in[0], *lin = in[1];
    switch (kind) {
    case RT_ACT_GELU_TANH:
#pragma omp simd
        for (size_t i = 0; i < n; i++) out[i] = rt_cpu_gelu_tanh(gate[i]) * lin[i];
        break;
    case RT_ACT_GELU_ERF:
#pragma omp simd
        for (size_t i = 0; i < n; i++) out[i] = rt_cpu_gelu_erf(gate[i]) * lin[i];
        break;
    case RT_ACT_RELU:
        for (size_t i = 0; i < n; i++) out[i] = rt_cpu_relu(gate[i]) * lin[i];
        break;
    case RT_ACT_TANH:
        for (size_t i = 0; i < n; i++) out[i] = tanhf(gate[i]) * lin[i];
        break;
    default: RT_CHECK(0, "unknown activation kind %d", (int)kind);
    }
}

/* dlin = dout * act(gate); dgate = (dout * lin) * act'(gate), the order autograd takes. */
static void gated_bwd_span(rt_act_kind kind, float *const *out, const float *const *in, size_t n) {
    float *dgate = out[0], *dlin = out[1];
    const float *gate = in[0], *lin = in[1], *dout = in[2];
    switch (kind) {
    case RT_ACT_GELU_TANH:
#pragma omp simd
        for (size_t i = 0; i < n; i++) {
            float g = gate[i], dy = dout[i], l = lin[i];
            dlin[i] = dy * rt_cpu_gelu_tanh(g);
            dgate[i] = (dy * l) * rt_cpu_gelu_tanh_grad(g);
        }
        break;
    case RT_ACT_GELU_ERF:
        for (size_t i = 0; i < n; i++) {
            float g = gate[i], dy = dout[i], l = lin[i];
            dlin[i] = dy * rt_cpu_gelu_erf(g);
            dgate[i] = (dy * l) * rt_cpu_gelu_erf_grad(g);
        }
        break;
    case RT_ACT_RELU:
        for (size_t i = 0; i < n; i++) {
            float g = gate[i], dy = dout[i], l = lin[i];
            dlin[i] = dy * rt_cpu_relu(g);
            dgate[i] = g > 0.0f ? dy * l : 0.0f;
        }
        break;
    case RT_ACT_TANH:
        for (size_t i = 0; i < n; i++) {
            float g = gate[i], dy = dout[i], l = lin[i];
            dlin[i] = dy * tanhf(g);
            dgate[i] = (dy * l) * rt_cpu_tanh_grad(g);
        }
        break;
    default: RT_CHECK(0, "unknown activation kind %d", (int)kind);
    }
}

/* Runs f over n elements of n_in typed inputs into n_out typed outputs, in runs of RT_CPU_X_RUN
 * split over the threads. */
static void cpu_x_map(rt_act_kind kind, cpu_span_fn f, size_t n, int n_in, const rt_x *in, int n_out, const rt_x *out) {
    const size_t runs = (n + RT_CPU_X_RUN - 1) / RT_CPU_X_RUN;
#pragma omp parallel for schedule(static) if (n >= RT_CPU_PAR_MIN)
    for (size_t r = 0; r < runs; r++) {
        const size_t at = r * RT_CPU_X_RUN, m = n - at < RT_CPU_X_RUN ? n - at : RT_CPU_X_RUN;
        float in_buf[3][RT_CPU_X_RUN], out_buf[2][RT_CPU_X_RUN];
        const float *x[3];
        float *y[2];
        for (int k = 0; k < n_in; k++) x[k] = rt_cpu_x_read(in[k], at, m, in_buf[k]);
        for (int k = 0; k < n_out; k++) y[k] = rt_cpu_x_dst(out[k], at, out_buf[k]);
        f(kind, y, x, m);
        for (int k = 0; k < n_out; k++) rt_cpu_x_commit(out[k], at, m, y[k]);
    }
}

void rt_cpu_act_fwd(void *ctx, rt_act_kind kind, rt_x out, rt_x inp, size_t n) {
    cpu_x_map(kind, act_fwd_span, n, 1, &inp, 1, &out);
}

void rt_cpu_act_bwd(void *ctx, rt_act_kind kind, rt_x dinp, rt_x inp, rt_x dout, size_t n) {
    const rt_x in[2] = {inp, dout};
    cpu_x_map(kind, act_bwd_span, n, 2, in, 1, &dinp);
}

void rt_cpu_gated_act_fwd(void *ctx, rt_act_kind kind, rt_x out, rt_x gate, rt_x lin, size_t n) {
    const rt_x in[2] = {gate, lin};
    cpu_x_map(kind, gated_fwd_span, n, 2, in, 1, &out);
}

void rt_cpu_gated_act_bwd(void *ctx, rt_act_kind kind, rt_x dgate, rt_x dlin, rt_x gate, rt_x lin, rt_x dout,
                          size_t n) {
    const rt_x in[3] = {gate, lin, dout}, out[2] = {dgate, dlin};
    cpu_x_map(kind, gated_bwd_span, n, 3, in, 2, out);
}

void rt_cpu_add_bias(void *ctx, float *out, const float *bias, size_t N, int C) {
#pragma omp parallel for schedule(static) if (N * (size_t)C >= RT_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++) {
        float *y = out + n * (size_t)C;
        for (int c = 0; c < C; c++) y[c] += bias[c];
    }
}

void rt_cpu_bias_bwd(void *ctx, float *dbias, rt_x dout, size_t N, int C) {
    int nblk = (C + RT_CPU_COL_BLOCK - 1) / RT_CPU_COL_BLOCK;
#pragma omp parallel for schedule(static) if (N * (size_t)C >= RT_CPU_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * RT_CPU_COL_BLOCK;
        int c1 = c0 + RT_CPU_COL_BLOCK < C ? c0 + RT_CPU_COL_BLOCK : C;
        float acc[RT_CPU_COL_BLOCK] = {0}, buf[RT_CPU_COL_BLOCK];
        for (size_t n = 0; n < N; n++) {
            const float *dy = rt_cpu_x_read(dout, n * (size_t)C + (size_t)c0, (size_t)(c1 - c0), buf);
            for (int c = 0; c < c1 - c0; c++) acc[c] += dy[c];
        }
        for (int c = c0; c < c1; c++) dbias[c] += acc[c - c0];
    }
}

/* Stored at the compute precision a run of RT_CPU_X_RUN at a time, while it is in cache. */
void rt_cpu_add(void *ctx, rt_x out, rt_x a, rt_x b, size_t n) {
    const rt_dtype dtype = rt_cpu_matmul_dtype(ctx);
    const size_t runs = (n + RT_CPU_X_RUN - 1) / RT_CPU_X_RUN;
#pragma omp parallel for schedule(static) if (n >= RT_CPU_PAR_MIN)
    for (size_t r = 0; r < runs; r++) {
        const size_t at = r * RT_CPU_X_RUN, m = n - at < RT_CPU_X_RUN ? n - at : RT_CPU_X_RUN;
        float a_buf[RT_CPU_X_RUN], b_buf[RT_CPU_X_RUN], out_buf[RT_CPU_X_RUN];
        const float *x = rt_cpu_x_read(a, at, m, a_buf), *z = rt_cpu_x_read(b, at, m, b_buf);
        float *y = rt_cpu_x_dst(out, at, out_buf); /* an fp32 out may be x or z: elementwise */
        for (size_t i = 0; i < m; i++) y[i] = x[i] + z[i];
        rt_cpu_x_store_row(dtype, out, at, m, y);
    }
}

void rt_cpu_axpy(void *ctx, float *y, float alpha, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= RT_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

void rt_cpu_scale(void *ctx, float *x, float s, size_t n) {
#pragma omp parallel for schedule(static) if (n >= RT_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void rt_cpu_scale_rows(void *ctx, rt_x x, const float *w, size_t N, int C) {
#pragma omp parallel for schedule(static) if (N * (size_t)C >= RT_CPU_PAR_MIN)
    for (size_t i = 0; i < N; i++) {
        float in_buf[RT_CPU_X_RUN], out_buf[RT_CPU_X_RUN];
        for (int j0 = 0; j0 < C; j0 += RT_CPU_X_RUN) {
            const size_t at = i * (size_t)C + (size_t)j0, len = C - j0 < RT_CPU_X_RUN ? (size_t)(C - j0) : RT_CPU_X_RUN;
            const float *v = rt_cpu_x_read(x, at, len, in_buf);
            float *y = rt_cpu_x_dst(x, at, out_buf);
            for (size_t j = 0; j < len; j++) y[j] = v[j] * w[i];
            rt_cpu_x_commit(x, at, len, y);
        }
    }
}

/* Serial, in runs: only T5's fp16 residual sums come here, and the scan stops at the first inf. */
bool rt_cpu_clamp_inf(void *ctx, rt_x x, size_t n, float limit) {
    float buf[RT_CPU_X_RUN];
    bool inf = false;
    for (size_t at = 0; at < n && !inf; at += RT_CPU_X_RUN) {
        const size_t k = n - at < RT_CPU_X_RUN ? n - at : RT_CPU_X_RUN;
        const float *v = rt_cpu_x_read(x, at, k, buf);
        for (size_t i = 0; i < k; i++) inf |= isinf(v[i]) != 0;
    }
    if (!inf) return false;
    for (size_t at = 0; at < n; at += RT_CPU_X_RUN) {
        const size_t k = n - at < RT_CPU_X_RUN ? n - at : RT_CPU_X_RUN;
        float *v = rt_cpu_x_dst(x, at, buf);
        if (x.t != RT_F32) rt_cpu_widen_span(x.t, v, (const uint16_t *)x.p + at, k);
        for (size_t i = 0; i < k; i++) v[i] = v[i] > limit ? limit : v[i] < -limit ? -limit : v[i];
        rt_cpu_x_commit(x, at, k, v);
    }
    return true;
}

void rt_cpu_clamp_abs_bwd(void *ctx, float *dx, rt_x y, size_t n, float limit) {
    float buf[RT_CPU_X_RUN];
    for (size_t at = 0; at < n; at += RT_CPU_X_RUN) {
        const size_t k = n - at < RT_CPU_X_RUN ? n - at : RT_CPU_X_RUN;
        const float *v = rt_cpu_x_read(y, at, k, buf);
        for (size_t i = 0; i < k; i++)
            if (v[i] > limit || v[i] < -limit) dx[at + i] = 0.0f;
    }
}

/* Shared by fwd and bwd, which apply the same mask (rt_cpu_dropout_run), in chunks of 1024
 * draws (a multiple of 4, so no Philox block is computed twice), each chunk stored at the compute
 * precision dtype as it is made. */
static void rt_cpu_dropout_apply(rt_dtype dtype, float *y, const float *x, size_t n, float p, uint64_t seed,
                                 uint64_t stream) {
    RT_CHECK(p >= 0.0f && p <= 1.0f, "dropout p=%g", (double)p);
    size_t nchunk = (n + 1023) / 1024;
#pragma omp parallel for schedule(static) if (n >= RT_CPU_PAR_MIN)
    for (size_t ch = 0; ch < nchunk; ch++) {
        size_t i0 = ch * 1024, m = i0 + 1024 < n ? 1024 : n - i0;
        if (p == 0.0f) {
            if (y != x) memcpy(y + i0, x + i0, m * sizeof(float));
        } else {
            rt_cpu_dropout_run(y + i0, x + i0, m, p, seed, stream, i0);
        }
        rt_cpu_store_run(dtype, y + i0, m);
    }
}

void rt_cpu_dropout_fwd(void *ctx, float *out, const float *inp, size_t n, float p, uint64_t seed, uint64_t stream,
                        const uint64_t *step) {
    rt_cpu_dropout_apply(rt_cpu_matmul_dtype(ctx), out, inp, n, p, seed, rt_stream_at_step(stream, step));
}

void rt_cpu_dropout_bwd(void *ctx, float *dinp, const float *dout, size_t n, float p, uint64_t seed, uint64_t stream,
                        const uint64_t *step) {
    rt_cpu_dropout_apply(rt_cpu_matmul_dtype(ctx), dinp, dout, n, p, seed, rt_stream_at_step(stream, step));
}

void rt_cpu_dropout_cols(void *ctx, rt_x out, rt_x inp, size_t rows, int cols, int cols_total, int col_offset, float p,
                         uint64_t seed, uint64_t stream_at0, const uint64_t *step) {
    const uint64_t stream = rt_stream_at_step(stream_at0, step);
    RT_CHECK(p >= 0.0f && p <= 1.0f, "dropout p=%g", (double)p);
    RT_CHECK(cols >= 0 && col_offset >= 0 && (int64_t)col_offset + cols <= cols_total,
             "dropout_cols: cols=%d col_offset=%d cols_total=%d", cols, col_offset, cols_total);
    const size_t n = rows * (size_t)cols;
    const rt_dtype dtype = rt_cpu_matmul_dtype(ctx);
#pragma omp parallel for schedule(static) if (n >= RT_CPU_PAR_MIN)
    for (size_t r = 0; r < rows; r++) {
        for (size_t k = 0; k < (size_t)cols; k += RT_CPU_X_RUN) {
            const size_t at = r * (size_t)cols + k,
                         m = (size_t)cols - k < RT_CPU_X_RUN ? (size_t)cols - k : RT_CPU_X_RUN;
            float in_buf[RT_CPU_X_RUN], out_buf[RT_CPU_X_RUN];
            const float *x = rt_cpu_x_read(inp, at, m, in_buf);
            float *y = rt_cpu_x_dst(out, at, out_buf);
            /* p 0 keeps every element (x * 1), p 1 none: the whole-matrix rules */
            rt_cpu_dropout_run(y, x, m, p, seed, stream, (uint64_t)r * (uint64_t)cols_total + (uint64_t)col_offset + k);
            rt_cpu_x_store_row(dtype, out, at, m, y);
        }
    }
}

/* torch.optim.AdamW, single-tensor path (PyTorch 2.x _single_tensor_adamw, the default for
 * CPU tensors): the scalars are Python floats (double), computed once per step and cast to
 * float where they meet a float tensor; the per-element math is float, in PyTorch's order:
 *   p *= 1 - lr*wd;  m.lerp_(g, 1-b1);  v = v*b2 + (1-b2)*g*g;
 *   p += -(lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)
 * lerp with weight < 0.5 is m + w*(g - m), which equals b1*m + (1-b1)*g (PyTorch 1.13's
 * mul_/add_) up to rounding. */
void rt_cpu_adamw(float *params, const float *grads, float *m, float *v, size_t n, const rt_adamw_scalars *kp,
                  float grad_scale, uint16_t *copy_bf16, float *copy_rounded, rt_dtype dtype) {
    const rt_adamw_scalars k = *kp;
    const float decay = k.decay, w1 = k.w1, w2 = k.w2, b2 = k.beta2, step_size = k.step_size, bc2_sqrt = k.bc2_sqrt,
                feps = k.eps;
    const bool lerp_low = k.lerp_low;
    /* blocks of weights: AdamW's loop, then the block's copy while it is in cache (two loops
     * that each vectorize, where one with the copy in it would not) */
    enum { BLOCK = 4096 };
    const size_t n_blocks = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= RT_CPU_PAR_MIN)
    for (size_t blk = 0; blk < n_blocks; blk++) {
        const size_t lo = blk * BLOCK, hi = lo + BLOCK < n ? lo + BLOCK : n;
        for (size_t i = lo; i < hi; i++) {
            float g = grads[i] * grad_scale;
            float p = params[i] * decay;
            float mi = m[i];
            /* torch lerp: start + w*(end-start) for w < 0.5, else end - (end-start)*(1-w) */
            mi = lerp_low ? mi + w1 * (g - mi) : g - (g - mi) * (1.0f - w1);
            float vi = v[i] * b2 + w2 * g * g; /* addcmul: self + value * t1 * t2 */
            float denom = sqrtf(vi) / bc2_sqrt + feps;
            p = p + (-step_size) * mi / denom; /* addcdiv: self + value * t1 / t2 */
            m[i] = mi;
            v[i] = vi;
            params[i] = p;
        }
        if (copy_bf16)
            for (size_t i = lo; i < hi; i++) copy_bf16[i] = rt_f32_to_bf16(params[i]);
        if (copy_rounded) rt_cpu_round_span(dtype, copy_rounded + lo, params + lo, hi - lo);
    }
}

/* The sum of squares in RT_CPU_SUMSQ_PARTS blocks, whatever the thread count, each summed as a
 * vector reduction (an order of its own, which a plain loop may not take, so without it the loop
 * ran one add at a time: 4% of a GPT-2 step, over a 124M-float gradient slab), then the blocks'
 * sums in order: the same bits on any number of threads. */
#define RT_CPU_SUMSQ_PARTS 256
double rt_cpu_sumsq(void *ctx, const float *x, size_t n) {
    double part[RT_CPU_SUMSQ_PARTS] = {0};
    const size_t block = ((n + RT_CPU_SUMSQ_PARTS - 1) / RT_CPU_SUMSQ_PARTS + 63) & ~(size_t)63;
#pragma omp parallel for schedule(static) if (n >= RT_CPU_PAR_MIN)
    for (int p = 0; p < RT_CPU_SUMSQ_PARTS; p++) {
        const size_t lo = (size_t)p * block < n ? (size_t)p * block : n, hi = lo + block < n ? lo + block : n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = lo; i < hi; i++) s += (double)x[i] * x[i];
        part[p] = s;
    }
    double s = 0.0;
    for (int p = 0; p < RT_CPU_SUMSQ_PARTS; p++) s += part[p];
    return s;
}
