/* Scaled-dot-product attention on CUDA (rt_attn_desc in rt_backend.h), the straightforward
 * way: the two products per (batch, head) are strided-batched GEMMs (one call per batch
 * element, the heads as the batch, since q/k/v rows are strided by ld), and the masked
 * softmax, dropout and softmax backward are one-warp-per-row kernels. Forward writes the
 * scores straight into the caller's probs buffer and softmaxes them in place; the dropped
 * probabilities and the backward's dS live in scratch owned by the backend. A fused
 * (flash-style) kernel can replace this later; this one is the reference for it.
 *
 * Semantics are the CPU backend's (runtime/backend/cpu/cpu_attention.c): score = scale * q.k +
 * key_mask[b, j] + bias[h, i, j], key j > i excluded when causal (unless j < prefix[b]), a row with no key left
 * gives zero probabilities and a zero output, and dropout keeps element
 * ((b*heads_total + head_offset + h)*Tq + i)*Tk + j (the global head under tensor
 * parallelism) when rt_rng_uniform(seed, stream, that index) >= p, each Philox block (four
 * keys) drawn once (rt_cuda_drop_walk). The kernels walk a row by packs of eight values
 * (cuda_pack.h) where its buffers start 16-byte aligned.
 *
 * 16-bit probabilities (d->probs_dtype): the scores and the fp32 softmax live in scratch; the
 * softmax kernel also stores them rounded, and backward reads the stored ones as they are (a
 * widened copy only for the dv product without dropout).
 * So the numbers are those of fp32 probabilities rounded after the op, as on the CPU.
 *
 * At a 16-bit compute precision every product reads its inputs rounded to it, as on the CPU
 * (runtime/backend/cpu/cpu_attention.c) and as PyTorch's autocast multiplies bf16 probabilities: q, k, v
 * and dout are stored activations, already rounded; the softmax kernel rounds the probabilities
 * (as stored) and the dropped ones, the backward's regeneration rounds those, and dS is rounded
 * after dbias took it in fp32. The products then run on the tensor cores (rt_cuda_gemm_op) when
 * they are large, else as fp32 GEMMs of the rounded values: the same sums up to their order.
 *
 * Typed activations (rt_x): q, k, v, out, dout, dq, dk and dv may be 16-bit handles of the compute
 * type. Then every product runs on cuBLASLt's 16-bit matmul, reading them as they are and writing
 * out, dq, dk and dv in 16 bits. The kernels write what those products read at the compute type:
 * the dropped probabilities and dS (also in fp32 where a position bias's gradient takes it), so
 * no conversion pass runs over them (the same values: each was rounded to that type already).
 * Stored 16-bit probabilities are read as they are; fp32 ones go through the matmul's conversion.
 *
 * With TZ_CUDA_ATTENTION=fused, a 16-bit compute precision goes to the fused kernels instead
 * (cuda_flash.cu) wherever they apply; this path is their reference. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "runtime/backend/cuda/rt_cuda.h"

#define RT_CUDA_ATTN_ROWS_PER_BLOCK 8 /* warps per block: one softmax row each */

/* Whether a batch row's products run as 16-bit matmuls (cuBLASLt, rt_cuda_gemm_op): always when an
 * operand is a 16-bit handle (typed activations); else at a 16-bit precision from 2^28 multiply-adds
 * a call (GPT-2's 12 heads of 64 at T = 1024 have 3 times that), where the saved GPU time outweighs
 * the conversions and cuBLASLt's host-side setup, the smaller ones being fp32 GEMMs on the rounded
 * values. On an H200, q k^T and dout v^T so saved 8 ms of a 272 ms step at 16 x 1024; below the
 * bound (where these small calls, one per batch row, may be bound by the host) it was not measured. */
static bool rt_cuda_attn_16(const rt_cuda_ctx *c, const rt_attn_desc *d, bool typed) {
    const bool large = (double)d->Tq * d->Tk * d->HS * d->NH >= (double)(1u << 28);
    return c->matmul != RT_F32 && (typed || large);
}

/* One batch row's product over its heads (the heads are the batch): the 16-bit matmul, or cuBLAS's
 * fp32 one on floats. */
static void rt_cuda_attn_gemm(void *ctx, bool use16, bool ta, bool tb, int M, int N, int K, float alpha, rt_x A,
                              int lda, size_t sa, rt_x B, int ldb, size_t sb, rt_x C, int ldc, size_t sc, int heads) {
    if (use16)
        rt_cuda_gemm_op(ctx, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, 0.0f, C, ldc, sc, heads);
    else
        rt_cuda_gemm(ctx, ta, tb, M, N, K, alpha, rt_x_floats(A, "attention"), lda, sa, rt_x_floats(B, "attention"),
                     ldb, sb, 0.0f, rt_x_floats(C, "attention"), ldc, sc, heads);
}

static unsigned rt_cuda_attn_row_grid(size_t rows) {
    size_t blocks = (rows + RT_CUDA_ATTN_ROWS_PER_BLOCK - 1) / RT_CUDA_ATTN_ROWS_PER_BLOCK;
    RT_CHECK(blocks <= 0x7fffffffu, "%zu attention rows is too many for one launch", rows);
    return (unsigned)blocks;
}

/* The RNG row of local row r = (b*NH + h)*Tq + i: the same row with the global head
 * (b*heads_total + head_offset + h); r itself when all heads are local. */
__device__ __forceinline__ size_t rt_cuda_attn_rng_row(size_t r, int NH, int Tq, int head_offset, int heads_total) {
    size_t per_b = (size_t)NH * Tq;
    return (r / per_b) * (size_t)heads_total * Tq + (size_t)head_offset * Tq + r % per_b;
}

/* In place on one row r = (b*NH + h)*Tq + i of S (which holds scale * q.k): adds the masks,
 * softmaxes, and when pd is given also writes the dropped, rescaled probabilities (an fp32 handle,
 * or a 16-bit one of the compute type that a 16-bit product reads as it is); when p16 is given,
 * the probabilities also go there (16-bit stored probabilities). At a 16-bit compute precision
 * (mm_kind) the probabilities are rounded to it, as stored, and so are the dropped ones: what the
 * products read (see the top of this file). The lanes walk the row by packs of eight where its
 * handles start aligned (rt_cuda_pack_row_walk); a walk over the first jend keys and one over all
 * Tk split the row differently, so the warp syncs between them. */
__global__ void rt_cuda_attn_softmax_kernel(float *S, rt_x pd, rt_x p16, int mm_kind, const float *key_mask,
                                            const float *bias, const int32_t *prefix, int NH, int Tq, int Tk,
                                            bool causal, float p, float keep_scale, uint64_t seed, uint64_t stream_at0,
                                            const uint64_t *step, int head_offset, int heads_total, size_t rows) {
    const uint64_t stream = rt_stream_at_step(stream_at0, step);
    size_t r = (size_t)blockIdx.x * RT_CUDA_ATTN_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return; /* whole warp together */
    int i = (int)(r % (size_t)Tq);
    int h = (int)((r / (size_t)Tq) % (size_t)NH);
    size_t b = r / ((size_t)Tq * NH);
    const size_t at = r * (size_t)Tk;
    const rt_x P = rt_pack_xf(S + at), Pd = pd.p ? rt_cuda_x_at(pd, at) : pd, P16 = p16.p ? rt_cuda_x_at(p16, at) : p16;
    const rt_x km = rt_pack_xf(key_mask ? key_mask + b * (size_t)Tk : NULL);
    const rt_x bi = rt_pack_xf(bias ? bias + ((size_t)h * Tq + i) * (size_t)Tk : NULL);
    const bool aligned =
        rt_pack_aligned(P) && rt_pack_aligned(Pd) && rt_pack_aligned(P16) && rt_pack_aligned(km) && rt_pack_aligned(bi);
    int jend = causal ? i + 1 : Tk;                                                   /* keys j >= jend are excluded */
    if (causal && prefix && prefix[b] > jend) jend = prefix[b] < Tk ? prefix[b] : Tk; /* GLM's context */

    float mx = -INFINITY;
    rt_cuda_pack_row_walk(jend, aligned, lane, [&](size_t j, int w) {
        rt_pack s = rt_pack_load_n(P, j, w);
        if (key_mask) {
            const rt_pack m = rt_pack_load_n(km, j, w);
            for (int k = 0; k < w; k++) s.v[k] += m.v[k];
        }
        if (bias) {
            const rt_pack m = rt_pack_load_n(bi, j, w);
            for (int k = 0; k < w; k++) s.v[k] += m.v[k];
        }
        rt_pack_store_n(P, j, w, &s);
        for (int k = 0; k < w; k++) mx = fmaxf(mx, s.v[k]);
    });
    mx = rt_cuda_warp_max(mx);
    if (mx == -INFINITY) { /* every key masked: zero row (and zero output after the GEMM) */
        __syncwarp();
        const rt_pack zero = {};
        rt_cuda_pack_row_walk(Tk, aligned, lane, [&](size_t j, int w) {
            rt_pack_store_n(P, j, w, &zero);
            if (Pd.p) rt_pack_store_n(Pd, j, w, &zero);
            if (P16.p) rt_pack_store_n(P16, j, w, &zero);
        });
        return;
    }
    float sum = 0.0f;
    rt_cuda_pack_row_walk(jend, aligned, lane, [&](size_t j, int w) {
        rt_pack e = rt_pack_load_n(P, j, w);
        for (int k = 0; k < w; k++) {
            e.v[k] = expf(e.v[k] - mx);
            sum += e.v[k];
        }
        rt_pack_store_n(P, j, w, &e);
    });
    sum = rt_cuda_warp_sum(sum);
    float inv = 1.0f / sum;
    __syncwarp(); /* the walks below split the row otherwise: lanes read keys other lanes wrote */
    /* the probabilities of the w keys from j, rounded as stored; keys from jend on get 0 */
    auto probs = [&](size_t j, int w) {
        rt_pack pv = rt_pack_load_n(P, j, w);
        for (int k = 0; k < w; k++) pv.v[k] = (int)j + k < jend ? rt_cuda_round16(pv.v[k] * inv, mm_kind) : 0.0f;
        rt_pack_store_n(P, j, w, &pv);
        if (P16.p) rt_pack_store_n(P16, j, w, &pv);
        return pv;
    };
    if (!Pd.p) {
        rt_cuda_pack_row_walk(Tk, aligned, lane, [&](size_t j, int w) { probs(j, w); });
        return;
    }
    const uint64_t g0 = (uint64_t)rt_cuda_attn_rng_row(r, NH, Tq, head_offset, heads_total) * (uint64_t)Tk;
    rt_cuda_drop_walk(seed, stream, g0, (size_t)Tk, aligned, (size_t)lane, 32, [&](size_t j, int w, const rt_pack u) {
        const rt_pack pv = probs(j, w);
        rt_pack o = {};
        for (int k = 0; k < w; k++) o.v[k] = u.v[k] >= p ? rt_cuda_round16(pv.v[k] * keep_scale, mm_kind) : 0.0f;
        rt_pack_store_n(Pd, j, w, &o);
    });
}

/* Pd = dropout(P) over the rows x Tk probabilities P (the stored ones), rounded to the compute
 * precision (mm_kind) as the forward's were, for the backward's dv product; pd is fp32 or 16-bit
 * of the compute type, as the forward's. A row per blockIdx.y (launch with rt_cuda_grid_rows over
 * Tk / 4 + 2), its packs (or Philox blocks) across the threads, so no index is divided per element
 * and each block is drawn once. */
__global__ void rt_cuda_attn_dropout_kernel(rt_x pd, rt_x P, int mm_kind, size_t rows, float p, float keep_scale,
                                            uint64_t seed, uint64_t stream_at0, const uint64_t *step, int NH, int Tq,
                                            int Tk, int head_offset, int heads_total) {
    const uint64_t stream = rt_stream_at_step(stream_at0, step);
    for (size_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const rt_x src = rt_cuda_x_at(P, r * (size_t)Tk), dst = rt_cuda_x_at(pd, r * (size_t)Tk);
        const uint64_t g0 = (uint64_t)rt_cuda_attn_rng_row(r, NH, Tq, head_offset, heads_total) * (uint64_t)Tk;
        rt_cuda_drop_walk(seed, stream, g0, (size_t)Tk, rt_pack_aligned(src) && rt_pack_aligned(dst),
                          (size_t)blockIdx.x * blockDim.x + threadIdx.x, (size_t)gridDim.x * blockDim.x,
                          [&](size_t j, int w, const rt_pack u) {
                              const rt_pack v = rt_pack_load_n(src, j, w);
                              rt_pack o = {};
                              for (int k = 0; k < w; k++)
                                  o.v[k] = u.v[k] >= p ? rt_cuda_round16(v.v[k] * keep_scale, mm_kind) : 0.0f;
                              rt_pack_store_n(dst, j, w, &o);
                          });
    }
}

/* In place on row r of dS, which holds dP' = dout v^T: dP = dP' * mask * keep_scale, then
 * dS = P * (dP - sum_j P dP), into dS, or into ds16 when given (a 16-bit handle of the compute
 * type, rounded as the 16-bit products would round dS) and, with keep_f32 (a position bias's
 * gradient reads it), into dS too. By packs where the row's handles start aligned. */
__global__ void rt_cuda_attn_softmax_bwd_kernel(float *dS, rt_x ds16, bool keep_f32, rt_x probs, int NH, int Tq, int Tk,
                                                bool dropout, float p, float keep_scale, uint64_t seed,
                                                uint64_t stream_at0, const uint64_t *step, int head_offset,
                                                int heads_total, size_t rows) {
    const uint64_t stream = rt_stream_at_step(stream_at0, step);
    size_t r = (size_t)blockIdx.x * RT_CUDA_ATTN_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const size_t at = r * (size_t)Tk;
    const rt_x g = rt_pack_xf(dS + at), P = rt_cuda_x_at(probs, at), D = ds16.p ? rt_cuda_x_at(ds16, at) : g;
    const bool aligned = rt_pack_aligned(g) && rt_pack_aligned(P) && rt_pack_aligned(D);
    float dot = 0.0f;
    if (!dropout) {
        rt_cuda_pack_row_walk(Tk, aligned, lane, [&](size_t j, int w) {
            const rt_pack pv = rt_pack_load_n(P, j, w), gv = rt_pack_load_n(g, j, w);
            for (int k = 0; k < w; k++) dot += pv.v[k] * gv.v[k];
        });
    } else {
        const uint64_t g0 = (uint64_t)rt_cuda_attn_rng_row(r, NH, Tq, head_offset, heads_total) * (uint64_t)Tk;
        rt_cuda_drop_walk(seed, stream, g0, (size_t)Tk, aligned, (size_t)lane, 32,
                          [&](size_t j, int w, const rt_pack u) {
                              const rt_pack pv = rt_pack_load_n(P, j, w);
                              rt_pack dp = rt_pack_load_n(g, j, w);
                              for (int k = 0; k < w; k++) {
                                  dp.v[k] = u.v[k] >= p ? dp.v[k] * keep_scale : 0.0f;
                                  dot += pv.v[k] * dp.v[k];
                              }
                              rt_pack_store_n(g, j, w, &dp);
                          });
    }
    dot = rt_cuda_warp_sum(dot);
    __syncwarp(); /* the dropout walk above wrote keys another lane reads below */
    rt_cuda_pack_row_walk(Tk, aligned, lane, [&](size_t j, int w) {
        const rt_pack pv = rt_pack_load_n(P, j, w);
        rt_pack gv = rt_pack_load_n(g, j, w);
        for (int k = 0; k < w; k++) gv.v[k] = pv.v[k] * (gv.v[k] - dot);
        rt_pack_store_n(D, j, w, &gv);
        if (keep_f32 && ds16.p) rt_pack_store_n(g, j, w, &gv);
    });
}

/* dbias[h, i, j] += sum over b of dS[b, h, i, j], b in order (one thread per element). */
__global__ void rt_cuda_attn_dbias_kernel(float *dbias, const float *dS, int B, size_t per_batch) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < per_batch; e += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += dS[(size_t)b * per_batch + e];
        dbias[e] += s;
    }
}

/* Scratch for n dropped probabilities (or, in the backward once dv is made, dS), at the compute
 * type where the products are 16-bit matmuls (use16), which then read it as it is instead of
 * converting fp32 values that are rounded to that type already; else fp32. */
static rt_x rt_cuda_attn_dropped(rt_cuda_ctx *c, bool use16, size_t n) {
    const rt_dtype t = use16 ? c->matmul : RT_F32;
    return rt_x_of(rt_cuda_scratch(c, RT_CUDA_SCRATCH_ATTN_P, n * rt_x_size(t)), t);
}

/* The materialized forward: out, and the probabilities into probs. */
static void rt_cuda_attn_materialized_fwd(rt_cuda_ctx *c, const rt_attn_desc *d, rt_x out, void *probs, rt_x q, rt_x k,
                                          rt_x v) {
    void *ctx = c;
    const int B = d->B, NH = d->NH, Tq = d->Tq, Tk = d->Tk, HS = d->HS;
    const size_t head = (size_t)Tq * Tk; /* one (b, h) block of probs */
    const size_t rows = (size_t)B * NH * Tq;
    const float p = d->dropout_p;
    const float keep_scale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    /* the fp32 scores and softmax: probs itself, or scratch beside 16-bit probs */
    const bool f32 = d->probs_dtype == RT_F32;
    float *S = f32 ? (float *)probs : (float *)rt_cuda_scratch(c, RT_CUDA_SCRATCH_ATTN_S, rows * Tk * sizeof(float));

    /* S[b, h] (Tq x Tk) = scale * q[b, :, h] k[b, :, h]^T */
    const bool use16 = rt_cuda_attn_16(c, d, q.t != RT_F32 || k.t != RT_F32 || v.t != RT_F32 || out.t != RT_F32);
    for (int b = 0; b < B; b++)
        rt_cuda_attn_gemm(ctx, use16, false, true, Tq, Tk, HS, d->scale, rt_x_at(q, (size_t)b * Tq * d->ldq),
                          (int)d->ldq, (size_t)HS, rt_x_at(k, (size_t)b * Tk * d->ldk), (int)d->ldk, (size_t)HS,
                          rt_xf(S + (size_t)b * NH * head), Tk, head, NH);

    /* the dropped probabilities at the type their product reads (rounded values either way) */
    rt_x pd = rt_xf(NULL);
    if (p > 0.0f) pd = rt_cuda_attn_dropped(c, use16, rows * Tk);
    const int mm_kind = rt_cuda_kind16(c->matmul);
    rt_cuda_attn_softmax_kernel<<<rt_cuda_attn_row_grid(rows), 32 * RT_CUDA_ATTN_ROWS_PER_BLOCK, 0,
                                  rt_cuda_stream(ctx)>>>(
        S, pd, f32 ? rt_xf(NULL) : rt_x_of(probs, d->probs_dtype), mm_kind, d->key_mask, d->bias, d->prefix, NH, Tq, Tk,
        d->causal, p, keep_scale, d->seed, d->stream, d->stream_step, d->head_offset,
        d->heads_total > 0 ? d->heads_total : NH, rows);
    CUDA_LAUNCH_CHECK();

    /* out[b, :, h] (Tq x HS) = Pd[b, h] (Tq x Tk) v[b, :, h] (Tk x HS); stored 16-bit probabilities
     * (the softmax's values rounded, which S holds too) are read as they are */
    const rt_x P = pd.p ? pd : use16 && !f32 && d->probs_dtype == c->matmul ? rt_x_of(probs, d->probs_dtype) : rt_xf(S);
    for (int b = 0; b < B; b++)
        rt_cuda_attn_gemm(ctx, use16, false, false, Tq, HS, Tk, 1.0f, rt_x_at(P, (size_t)b * NH * head), Tk, head,
                          rt_x_at(v, (size_t)b * Tk * d->ldv), (int)d->ldv, (size_t)HS,
                          rt_x_at(out, (size_t)b * Tq * d->ldo), (int)d->ldo, (size_t)HS, NH);
}

/* Where the stack laid out less than the probabilities for d (cuDNN's SDPA takes d's shape,
 * rt_cuda_sdpa_kept_row) but cuDNN does not take d itself (its masks), the materialized path keeps
 * nothing: its forward writes the probabilities to scratch, and its backward runs the forward again
 * (the same kernels, the same dropout masks: the same numbers) into scratch before its own. */
static bool rt_cuda_attn_recomputes(const rt_cuda_ctx *c, const rt_attn_desc *d) {
    const size_t kept = rt_cuda_sdpa_kept_row(c, d);
    return kept && kept < (size_t)d->Tk * rt_attn_probs_size(d->probs_dtype);
}

static void *rt_cuda_attn_recomputed_probs(rt_cuda_ctx *c, const rt_attn_desc *d) {
    const size_t bytes = (size_t)d->B * d->NH * d->Tq * d->Tk * rt_attn_probs_size(d->probs_dtype);
    return rt_cuda_scratch(c, RT_CUDA_SCRATCH_ATTN_RECOMPUTE, bytes);
}

/* The fused kernels (cuda_flash.cu, TZ_CUDA_ATTENTION=fused) and cuDNN's SDPA
 * (TZ_CUDA_ATTENTION=cudnn, cuda_sdpa_path.cu) take the calls they support; the rest run here. */
void rt_cuda_attention_fwd(void *ctx, const rt_attn_desc *d, rt_x out, void *probs, rt_x q, rt_x k, rt_x v) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    RT_CHECK(probs != NULL, "attention_fwd needs the probs buffer (B*NH*Tq*Tk values)");
    if (rt_cuda_attn_fused(c, d)) {
        rt_cuda_flash_fwd(c, d, out, probs, q, k, v);
        return;
    }
    if (rt_cuda_attn_cudnn(c, d) && rt_cuda_sdpa_fwd(c, d, out, probs, q, k, v)) return;
    rt_cuda_attn_materialized_fwd(c, d, out,
                                  rt_cuda_attn_recomputes(c, d) ? rt_cuda_attn_recomputed_probs(c, d) : probs, q, k, v);
}

void rt_cuda_attention_bwd(void *ctx, const rt_attn_desc *d, rt_x dq, rt_x dk, rt_x dv, float *dbias, rt_x dout,
                           const void *probs, rt_x q, rt_x k, rt_x v) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    if (rt_cuda_attn_fused(c, d)) { /* the forward took the same path: probs holds its row statistics */
        rt_cuda_flash_bwd(c, d, dq, dk, dv, dbias, dout, probs, q, k, v);
        return;
    }
    if (rt_cuda_attn_cudnn(c, d) && rt_cuda_sdpa_took(c, d)) { /* probs holds what its forward kept */
        rt_cuda_sdpa_bwd(c, d, dq, dk, dv, dbias, dout, probs, q, k, v);
        return;
    }
    if (rt_cuda_attn_recomputes(c, d)) { /* the forward kept nothing: run it again, out into scratch */
        void *p = rt_cuda_attn_recomputed_probs(c, d);
        const size_t out_n = (size_t)d->B * d->Tq * d->ldo;
        void *o = rt_cuda_scratch(c, RT_CUDA_SCRATCH_ATTN_RECOMPUTE_OUT, out_n * rt_x_size(dout.t));
        rt_cuda_attn_materialized_fwd(c, d, rt_x_of(o, dout.t), p, q, k, v);
        probs = p;
    }
    const int B = d->B, NH = d->NH, Tq = d->Tq, Tk = d->Tk, HS = d->HS;
    const size_t head = (size_t)Tq * Tk;
    const size_t rows = (size_t)B * NH * Tq;
    const size_t total = rows * Tk;
    const float p = d->dropout_p;
    const float keep_scale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
    const int heads_total = d->heads_total > 0 ? d->heads_total : NH;
    const bool use16 = rt_cuda_attn_16(c, d,
                                       q.t != RT_F32 || k.t != RT_F32 || v.t != RT_F32 || dout.t != RT_F32 ||
                                           dq.t != RT_F32 || dk.t != RT_F32 || dv.t != RT_F32);

    /* the probabilities the forward multiplied v by, for the dv product: the dropped ones
     * regenerated from the stored ones, else the stored ones (16-bit ones read as they are by a
     * 16-bit product, widened for an fp32 one) */
    const int probs_kind = rt_cuda_kind16(d->probs_dtype), mm_kind = rt_cuda_kind16(c->matmul);
    const rt_x stored = rt_x_of((void *)probs, d->probs_dtype);
    rt_x P = stored;
    if (p > 0.0f) {
        const rt_x pd = rt_cuda_attn_dropped(c, use16, total);
        rt_cuda_attn_dropout_kernel<<<rt_cuda_grid_rows(rows, Tk / 4 + 2, RT_CUDA_THREADS), RT_CUDA_THREADS, 0,
                                      rt_cuda_stream(ctx)>>>(pd, stored, mm_kind, rows, p, keep_scale, d->seed,
                                                             d->stream, d->stream_step, NH, Tq, Tk, d->head_offset,
                                                             heads_total);
        CUDA_LAUNCH_CHECK();
        P = pd;
    } else if (probs_kind != RT_CUDA_KIND_F32 && !(use16 && d->probs_dtype == c->matmul)) {
        float *w = (float *)rt_cuda_scratch(c, RT_CUDA_SCRATCH_ATTN_S, total * sizeof(float));
        rt_cuda_widen(ctx, d->probs_dtype, w, probs, total);
        P = rt_xf(w);
    }
    float *dS = (float *)rt_cuda_scratch(c, RT_CUDA_SCRATCH_ATTN_DS, total * sizeof(float));

    for (int b = 0; b < B; b++) {
        /* dv[b, :, h] (Tk x HS) = Pd[b, h]^T (Tk x Tq) dout[b, :, h] (Tq x HS) */
        rt_cuda_attn_gemm(ctx, use16, true, false, Tk, HS, Tq, 1.0f, rt_x_at(P, (size_t)b * NH * head), Tk, head,
                          rt_x_at(dout, (size_t)b * Tq * d->ldo), (int)d->ldo, (size_t)HS,
                          rt_x_at(dv, (size_t)b * Tk * d->ldv), (int)d->ldv, (size_t)HS, NH);
        /* dP'[b, h] (Tq x Tk) = dout[b, :, h] (Tq x HS) v[b, :, h]^T (HS x Tk) */
        rt_cuda_attn_gemm(ctx, use16, false, true, Tq, Tk, HS, 1.0f, rt_x_at(dout, (size_t)b * Tq * d->ldo),
                          (int)d->ldo, (size_t)HS, rt_x_at(v, (size_t)b * Tk * d->ldv), (int)d->ldv, (size_t)HS,
                          rt_xf(dS + (size_t)b * NH * head), Tk, head, NH);
    }

    /* dS at the compute type for its 16-bit products, in the dropped probabilities' slot, which
     * the dv products above were the last to read; in fp32 as well where dbias takes it */
    const rt_x ds16 = use16 ? rt_cuda_attn_dropped(c, true, total) : rt_xf(NULL);
    rt_cuda_attn_softmax_bwd_kernel<<<rt_cuda_attn_row_grid(rows), 32 * RT_CUDA_ATTN_ROWS_PER_BLOCK, 0,
                                      rt_cuda_stream(ctx)>>>(dS, ds16, dbias != NULL, stored, NH, Tq, Tk, p > 0.0f, p,
                                                             keep_scale, d->seed, d->stream, d->stream_step,
                                                             d->head_offset, heads_total, rows);
    CUDA_LAUNCH_CHECK();
    const rt_x dSx = ds16.p ? ds16 : rt_xf(dS);

    if (dbias) {
        size_t per_batch = (size_t)NH * head;
        rt_cuda_attn_dbias_kernel<<<rt_cuda_grid(per_batch, RT_CUDA_THREADS), RT_CUDA_THREADS, 0,
                                    rt_cuda_stream(ctx)>>>(dbias, dS, B, per_batch);
        CUDA_LAUNCH_CHECK();
    }

    /* dS at the compute precision for the fp32 products (dbias took it in fp32): given rounded */
    if (mm_kind != RT_CUDA_KIND_F32 && !use16) rt_cuda_round_to(ctx, c->matmul, dS, rows, Tk, (size_t)Tk);
    for (int b = 0; b < B; b++) {
        /* dq[b, :, h] (Tq x HS) = scale * dS[b, h] (Tq x Tk) k[b, :, h] (Tk x HS) */
        rt_cuda_attn_gemm(ctx, use16, false, false, Tq, HS, Tk, d->scale, rt_x_at(dSx, (size_t)b * NH * head), Tk, head,
                          rt_x_at(k, (size_t)b * Tk * d->ldk), (int)d->ldk, (size_t)HS,
                          rt_x_at(dq, (size_t)b * Tq * d->ldq), (int)d->ldq, (size_t)HS, NH);
        /* dk[b, :, h] (Tk x HS) = scale * dS[b, h]^T (Tk x Tq) q[b, :, h] (Tq x HS) */
        rt_cuda_attn_gemm(ctx, use16, true, false, Tk, HS, Tq, d->scale, rt_x_at(dSx, (size_t)b * NH * head), Tk, head,
                          rt_x_at(q, (size_t)b * Tq * d->ldq), (int)d->ldq, (size_t)HS,
                          rt_x_at(dk, (size_t)b * Tk * d->ldk), (int)d->ldk, (size_t)HS, NH);
    }
}
