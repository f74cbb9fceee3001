/* Private to the CPU backend: the kernels each file in runtime/cpu provides to the ops
 * table in cpu_backend.c, and the helpers they share. Outside runtime/cpu only
 * rt_backend.c includes it (for rt_cpu_backend_free); models reach the kernels only
 * through rt_backend_ops.
 *
 * Reductions that cross rows (dweight, dbias, embedding and scatter gradients) are split by
 * column blocks, never by rows, so there are no races and no atomics, and the result is the
 * same bits whatever the thread count (resume and tests depend on that). */
#ifndef RT_CPU_INTERNAL_H
#define RT_CPU_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/backend/rt_backend.h"
#include "runtime/base/rt_dtype.h"
#include "runtime/base/rt_rng.h"

/* Columns per task when a reduction over rows is parallelised by columns: whole cache lines
 * (4 of them), so no two tasks write one line, and enough blocks for the threads at C=768. */
#define RT_CPU_COL_BLOCK 64

/* Below this many elements a parallel region costs more than it saves. */
#define RT_CPU_PAR_MIN 16384

/* u[k] = rt_rng_uniform(seed, stream, start + k) for k < n, with one Philox block per four
 * consecutive indices instead of one per index (same bits, ~4x cheaper), and the whole blocks
 * of the row run as lanes: the ten rounds loop over arrays of blocks, which vectorizes. */
#define RT_CPU_PHILOX_LANES 64
static inline void rt_cpu_uniform_row(uint64_t seed, uint64_t stream, uint64_t start, size_t n, float *u) {
    const float scale = 1.0f / 16777216.0f; /* as rt_rng_uniform: the top 24 bits */
    uint64_t i = start;
    const uint64_t end = start + n;
    while (i < end && (i & 3)) { /* up to the first whole block */
        rt_philox_out o = rt_philox4x32(seed, stream, i >> 2);
        for (unsigned w = (unsigned)(i & 3); w < 4 && i < end; w++, i++) u[i - start] = (float)(o.v[w] >> 8) * scale;
    }
    while (end - i >= 4) {
        const size_t nb = (end - i) / 4 < RT_CPU_PHILOX_LANES ? (size_t)((end - i) / 4) : RT_CPU_PHILOX_LANES;
        uint32_t c0[RT_CPU_PHILOX_LANES], c1[RT_CPU_PHILOX_LANES], c2[RT_CPU_PHILOX_LANES], c3[RT_CPU_PHILOX_LANES];
        const uint64_t first = i >> 2;
        for (size_t b = 0; b < nb; b++) {
            c0[b] = (uint32_t)(first + b);
            c1[b] = (uint32_t)((first + b) >> 32);
            c2[b] = (uint32_t)stream;
            c3[b] = (uint32_t)(stream >> 32);
        }
        uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
        for (int r = 0; r < 10; r++) { /* rt_philox4x32's rounds, a block per lane */
#pragma omp simd
            for (size_t b = 0; b < nb; b++) {
                const uint64_t p0 = (uint64_t)0xD2511F53u * c0[b], p1 = (uint64_t)0xCD9E8D57u * c2[b];
                const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[b] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3[b] ^ k1;
                c1[b] = (uint32_t)p1;
                c3[b] = (uint32_t)p0;
                c0[b] = n0;
                c2[b] = n2;
            }
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        float *out = u + (i - start);
        for (size_t b = 0; b < nb; b++) {
            out[4 * b] = (float)(c0[b] >> 8) * scale;
            out[4 * b + 1] = (float)(c1[b] >> 8) * scale;
            out[4 * b + 2] = (float)(c2[b] >> 8) * scale;
            out[4 * b + 3] = (float)(c3[b] >> 8) * scale;
        }
        i += 4 * (uint64_t)nb;
    }
    if (i < end) { /* the last, partial block */
        rt_philox_out o = rt_philox4x32(seed, stream, i >> 2);
        for (unsigned w = 0; i < end; w++, i++) u[i - start] = (float)(o.v[w] >> 8) * scale;
    }
}

/* Dropout over a run of n elements whose first draws index start: y[k] = x[k] * 1/(1-p) where
 * rt_rng_uniform(seed, stream, start + k) >= p, else 0 (p >= 1: all 0, where 1/(1-p) would be
 * inf and 0*inf NaN). dropout_fwd's rule over a whole buffer, dropout_cols' over a row of a
 * column shard, the fused residual step's over a row: one formula, so the masks and values are
 * the same bits. In chunks of 1024 draws; y may alias x. Serial: callers split. */
static inline void rt_cpu_dropout_run(float *y, const float *x, size_t n, float p, uint64_t seed, uint64_t stream,
                                      uint64_t start) {
    if (p >= 1.0f) {
        for (size_t k = 0; k < n; k++) y[k] = 0.0f;
        return;
    }
    const float s = 1.0f / (1.0f - p);
    float u[1024];
    for (size_t k0 = 0; k0 < n; k0 += 1024) {
        const size_t m = n - k0 < 1024 ? n - k0 : 1024;
        rt_cpu_uniform_row(seed, stream, start + k0, m, u);
        for (size_t k = 0; k < m; k++) y[k0 + k] = u[k] >= p ? x[k0 + k] * s : 0.0f;
    }
}

/* cpu_norm.c */
void rt_cpu_layernorm_fwd(void *ctx, rt_x out, float *mean, float *rstd, rt_x inp, const float *weight,
                          const float *bias, size_t N, int C, float eps);
void rt_cpu_layernorm_bwd(void *ctx, float *dinp, float *dweight, float *dbias, rt_x dout, rt_x inp,
                          const float *weight, const float *mean, const float *rstd, size_t N, int C);
void rt_cpu_rmsnorm_fwd(void *ctx, rt_x out, float *rstd, rt_x inp, const float *weight, size_t N, int C, float eps);
void rt_cpu_rmsnorm_bwd(void *ctx, float *dinp, float *dweight, rt_x dout, rt_x inp, const float *weight,
                        const float *rstd, size_t N, int C);
/* The norms' parameter gradients alone (the second half of their bwd, for the fused residual
 * step): dweight (and dbias, LayerNorm; either may be NULL) += their sums over rows, by column
 * blocks. */
void rt_cpu_layernorm_param_bwd(float *dweight, float *dbias, rt_x dout, rt_x inp, const float *mean, const float *rstd,
                                size_t N, int C);
void rt_cpu_rmsnorm_param_bwd(float *dweight, rt_x dout, rt_x inp, const float *rstd, size_t N, int C);

/* cpu_elementwise.c */
void rt_cpu_act_fwd(void *ctx, rt_act_kind kind, rt_x out, rt_x inp, size_t n);
void rt_cpu_act_bwd(void *ctx, rt_act_kind kind, rt_x dinp, rt_x inp, rt_x dout, size_t n);
void rt_cpu_gated_act_fwd(void *ctx, rt_act_kind kind, rt_x out, rt_x gate, rt_x lin, size_t n);
void rt_cpu_gated_act_bwd(void *ctx, rt_act_kind kind, rt_x dgate, rt_x dlin, rt_x gate, rt_x lin, rt_x dout, size_t n);
/* One row's activation from its fp32 pre-activation, in place: the plain act_fwd's formulas. */
void rt_cpu_act_span(rt_act_kind kind, float *out, const float *in, size_t n);
void rt_cpu_add_bias(void *ctx, float *out, const float *bias, size_t N, int C);
void rt_cpu_bias_bwd(void *ctx, float *dbias, rt_x dout, size_t N, int C);
void rt_cpu_add(void *ctx, rt_x out, rt_x a, rt_x b, size_t n);
void rt_cpu_axpy(void *ctx, float *y, float alpha, const float *x, size_t n);
void rt_cpu_scale(void *ctx, float *x, float s, size_t n);
void rt_cpu_scale_rows(void *ctx, rt_x x, const float *w, size_t N, int C);
bool rt_cpu_clamp_inf(void *ctx, rt_x x, size_t n, float limit);
void rt_cpu_clamp_abs_bwd(void *ctx, float *dx, rt_x y, size_t n, float limit);
void rt_cpu_dropout_fwd(void *ctx, float *out, const float *inp, size_t n, float p, uint64_t seed, uint64_t stream,
                        const uint64_t *step);
void rt_cpu_dropout_bwd(void *ctx, float *dinp, const float *dout, size_t n, float p, uint64_t seed, uint64_t stream,
                        const uint64_t *step);
void rt_cpu_dropout_cols(void *ctx, rt_x out, rt_x inp, size_t rows, int cols, int cols_total, int col_offset, float p,
                         uint64_t seed, uint64_t stream, const uint64_t *step);
/* out[0 .. n) = in rounded to dtype (RT_BF16 or RT_F16), as floats: one loop per type, so each
 * vectorizes (a per-element choice of type keeps the compiler from it). Serial: callers split. */
static inline void rt_cpu_round_span(rt_dtype dtype, float *out, const float *in, size_t n) {
    if (dtype == RT_BF16)
        for (size_t i = 0; i < n; i++) out[i] = rt_round_bf16(in[i]);
    else
        for (size_t i = 0; i < n; i++) out[i] = rt_round_f16(in[i]);
}

/* What the context's matmuls round their inputs to (rt_set_precision): RT_F32, RT_BF16 or RT_F16.
 * Attention's own products follow it (cpu_attention.c). */
rt_dtype rt_cpu_matmul_dtype(const void *ctx);

/* n floats of in as 2-byte dtype values at out (RT_BF16 or RT_F16, to nearest even), and back.
 * Serial: callers split. */
static inline void rt_cpu_narrow_span(rt_dtype dtype, uint16_t *out, const float *in, size_t n) {
    if (dtype == RT_BF16) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) out[i] = rt_f32_to_bf16(in[i]);
    } else {
#pragma omp simd
        for (size_t i = 0; i < n; i++) out[i] = rt_f32_to_f16(in[i]);
    }
}
static inline void rt_cpu_widen_span(rt_dtype dtype, float *out, const uint16_t *in, size_t n) {
    if (dtype == RT_BF16) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) out[i] = rt_bf16_to_f32(in[i]);
    } else {
#pragma omp simd
        for (size_t i = 0; i < n; i++) out[i] = rt_f16_to_f32(in[i]);
    }
}

/* Typed activations (rt_x) in the kernels, a run of at most RT_CPU_X_RUN values at a time: read
 * gives the run as floats (an fp32 handle's own, or widened into buf); dst is where to compute an
 * output run (an fp32 handle's own floats, else buf), and commit stores it (narrowed to the
 * handle's type, to nearest even: the value rt_store would have left). */
#define RT_CPU_X_RUN 1024
static inline const float *rt_cpu_x_read(rt_x x, size_t at, size_t n, float *buf) {
    if (x.t == RT_F32) return (const float *)x.p + at;
    rt_cpu_widen_span(x.t, buf, (const uint16_t *)x.p + at, n);
    return buf;
}
static inline float *rt_cpu_x_dst(rt_x x, size_t at, float *buf) { return x.t == RT_F32 ? (float *)x.p + at : buf; }
static inline void rt_cpu_x_commit(rt_x x, size_t at, size_t n, const float *v) {
    if (x.t != RT_F32) rt_cpu_narrow_span(x.t, (uint16_t *)x.p + at, v, n);
}
/* A run of n floats an op computed, stored at the compute precision dtype: rounded in place
 * unless fp32 (what the wrappers' rt_store does in a pass of its own, done while the run is in
 * cache). */
static inline void rt_cpu_store_run(rt_dtype dtype, float *x, size_t n) {
    if (dtype != RT_F32) rt_cpu_round_span(dtype, x, x, n);
}
/* A row an op computed in y for handle x at value at: a 16-bit handle takes it narrowed (rounding
 * once), an fp32 one (y is its row) has it rounded in place. */
static inline void rt_cpu_x_store_row(rt_dtype dtype, rt_x x, size_t at, size_t n, float *y) {
    if (x.t == RT_F32)
        rt_cpu_store_run(dtype, y, n);
    else
        rt_cpu_x_commit(x, at, n, y);
}

/* AdamW (the ops table's, through cpu_backend.c's), also writing each updated weight into a
 * low-precision copy of these n weights when one is given: copy_bf16 gets bf16 bits, or
 * copy_rounded the weight rounded to dtype. */
void rt_cpu_adamw(float *params, const float *grads, float *m, float *v, size_t n, const rt_adamw_scalars *k,
                  float grad_scale, uint16_t *copy_bf16, float *copy_rounded, rt_dtype dtype);
double rt_cpu_sumsq(void *ctx, const float *x, size_t n);

/* cpu_residual.c: the fused residual step (rt_backend_ops.residual_fwd/bwd). */
void rt_cpu_residual_fwd(void *ctx, const rt_residual_desc *d, rt_x sum, rt_x out, float *mean, float *rstd, rt_x res,
                         rt_x branch);
void rt_cpu_residual_bwd(void *ctx, const rt_residual_desc *d, float *dres, rt_x dbranch, float *dweight, float *dbias,
                         rt_x dout, rt_x sum, const float *mean, const float *rstd);

/* cpu_attention.c */
void rt_cpu_attention_fwd(void *ctx, const rt_attn_desc *d, rt_x out, void *probs, rt_x q, rt_x k, rt_x v);
void rt_cpu_attention_bwd(void *ctx, const rt_attn_desc *d, rt_x dq, rt_x dk, rt_x dv, float *dbias, rt_x dout,
                          const void *probs, rt_x q, rt_x k, rt_x v);

/* cpu_relbias.c */
void rt_cpu_relbias_fwd(void *ctx, float *bias, const float *table, const int32_t *buckets, int NH, int Tq, int Tk,
                        int num_buckets);
void rt_cpu_relbias_bwd(void *ctx, float *dtable, const float *dbias, const int32_t *buckets, int NH, int Tq, int Tk,
                        int num_buckets);

/* cpu_rows.c */
void rt_cpu_embedding_fwd(void *ctx, float *out, const int32_t *ids, const float *table, size_t N, int C,
                          int vocab_start, int V, bool accumulate);
void rt_cpu_embedding_bwd(void *ctx, float *dtable, const float *dout, const int32_t *ids, size_t N, int C,
                          int vocab_start, int V);
void rt_cpu_xent_vocab(void *ctx, int phase, float *stats, float *losses, rt_x dlogits, rt_x logits,
                       const float *col_mask, const int32_t *targets, size_t N, int V, int vocab_start,
                       float grad_scale);
void rt_cpu_mse_loss(void *ctx, float *losses, float *dlogits, const float *z, const float *targets, size_t N,
                     float grad_scale);
void rt_cpu_bce_logits_loss(void *ctx, float *losses, float *dlogits, const float *z, const float *targets, size_t N,
                            int C, float grad_scale);
void rt_cpu_softmax_xent(void *ctx, float *losses, float *dlogits, float *probs, const float *logits,
                         const int32_t *targets, size_t N, int V, float grad_scale);
void rt_cpu_gather_rows(void *ctx, float *out, const float *inp, const int32_t *idx, int B, int C);
void rt_cpu_scatter_rows_add(void *ctx, float *dinp, rt_x dout, const int32_t *idx, int B, int C);

/* cpu_backend.c: frees what rt_cpu_backend_init made (called by rt_backend_free). */
void rt_cpu_backend_free(rt_backend *be);
/* cpu_backend.c: C = alpha op(A) op(B) + beta C in fp32, row-major: oneDNN's matmul where the
 * build has oneDNN (Debian's OpenBLAS runs a generic kernel on CPUs newer than it knows, 4-6x
 * slower here: scripts/bench/bench_attention.c), else cblas_sgemm. Inside an OpenMP parallel
 * region both run on the calling thread. */
void rt_cpu_gemm_f32(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc);
/* Around an OpenMP region whose tasks call cblas: makes the pthread OpenBLAS run each call
 * on the calling thread (its pool would otherwise be shared by every task at once), and
 * gives back the previous count. No-op for a sequential or OpenMP OpenBLAS. */
int rt_cpu_blas_serial_begin(void);
void rt_cpu_blas_serial_end(int saved);

#endif
