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
 * keys) drawn once by one lane (rt_cuda_rng_row_walk).
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
 * out, dq, dk and dv in 16 bits; the fp32 operands (the scores' softmax, the dropped probabilities,
 * dS) go through its conversion, and stored 16-bit probabilities are read as they are.
 *
 * With TZ_CUDA_ATTENTION=fused, a 16-bit compute precision goes to the fused kernels instead
 * (cuda_flash.cu) wherever they apply; this path is their reference. They read fp32 handles only. */
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
 * softmaxes, and when pd is non-NULL also writes the dropped, rescaled probabilities; when p16
 * is non-NULL, the probabilities also go there as p16_kind (rt_cuda_kind16). At a 16-bit compute
 * precision (mm_kind) the probabilities are rounded to it, as stored, and so are the dropped
 * ones: what the products read (see the top of this file). */
__global__ void rt_cuda_attn_softmax_kernel(float *S, float *pd, void *p16, int p16_kind, int mm_kind,
                                            const float *key_mask, const float *bias, const int32_t *prefix, int NH,
                                            int Tq, int Tk, bool causal, float p, float keep_scale, uint64_t seed,
                                            uint64_t stream_at0, const uint64_t *step, int head_offset, int heads_total,
                                            size_t rows) {
    const uint64_t stream = rt_stream_at_step(stream_at0, step);
    size_t r = (size_t)blockIdx.x * RT_CUDA_ATTN_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return; /* whole warp together */
    int i = (int)(r % (size_t)Tq);
    int h = (int)((r / (size_t)Tq) % (size_t)NH);
    size_t b = r / ((size_t)Tq * NH);
    float *P = S + r * (size_t)Tk;
    float *Pd = pd ? pd + r * (size_t)Tk : NULL;
    const float *km = key_mask ? key_mask + b * (size_t)Tk : NULL;
    const float *bi = bias ? bias + ((size_t)h * Tq + i) * (size_t)Tk : NULL;
    int jend = causal ? i + 1 : Tk;                                                   /* keys j >= jend are excluded */
    if (causal && prefix && prefix[b] > jend) jend = prefix[b] < Tk ? prefix[b] : Tk; /* GLM's context */

    float mx = -INFINITY;
    for (int j = lane; j < jend; j += 32) {
        float s = P[j];
        if (km) s += km[j];
        if (bi) s += bi[j];
        P[j] = s;
        mx = fmaxf(mx, s);
    }
    mx = rt_cuda_warp_max(mx);
    if (mx == -INFINITY) { /* every key masked: zero row (and zero output after the GEMM) */
        for (int j = lane; j < Tk; j += 32) {
            P[j] = 0.0f;
            if (Pd) Pd[j] = 0.0f;
            if (p16) rt_cuda_store16(p16, p16_kind, r * (size_t)Tk + j, 0.0f);
        }
        return;
    }
    float sum = 0.0f;
    for (int j = lane; j < jend; j += 32) {
        float e = expf(P[j] - mx);
        P[j] = e;
        sum += e;
    }
    sum = rt_cuda_warp_sum(sum);
    float inv = 1.0f / sum;
    if (!Pd) {
        for (int j = lane; j < Tk; j += 32) {
            const float pj = j < jend ? rt_cuda_round16(P[j] * inv, mm_kind) : 0.0f;
            P[j] = pj;
            if (p16) rt_cuda_store16(p16, p16_kind, r * (size_t)Tk + j, pj);
        }
        return;
    }
    /* with dropout, a Philox block (four keys) per lane at a time: lanes now read keys other
     * lanes wrote above, so the warp syncs first (a shuffle orders no memory) */
    __syncwarp();
    const uint64_t g0 = (uint64_t)rt_cuda_attn_rng_row(r, NH, Tq, head_offset, heads_total) * (uint64_t)Tk;
    rt_cuda_rng_row_walk(seed, stream, g0, (uint64_t)Tk, (uint64_t)lane, 32, [&](size_t j, float u) {
        const float pj = (int)j < jend ? rt_cuda_round16(P[j] * inv, mm_kind) : 0.0f;
        P[j] = pj;
        if (p16) rt_cuda_store16(p16, p16_kind, r * (size_t)Tk + j, pj);
        Pd[j] = u >= p ? rt_cuda_round16(pj * keep_scale, mm_kind) : 0.0f;
    });
}

/* Pd = dropout(P) over the rows x Tk probabilities (stored as probs_kind), rounded to the compute
 * precision (mm_kind) as the forward's were, for the backward's dv product; a row per blockIdx.y (launch with rt_cuda_grid_rows over Tk / 4 + 2), its Philox
 * blocks across the threads, so no index is divided per element and each block is drawn once. */
__global__ void rt_cuda_attn_dropout_kernel(float *pd, const void *P, int probs_kind, int mm_kind, size_t rows, float p,
                                            float keep_scale, uint64_t seed, uint64_t stream_at0, const uint64_t *step,
                                            int NH, int Tq, int Tk, int head_offset, int heads_total) {
    const uint64_t stream = rt_stream_at_step(stream_at0, step);
    for (size_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const size_t row = r * (size_t)Tk;
        const uint64_t g0 = (uint64_t)rt_cuda_attn_rng_row(r, NH, Tq, head_offset, heads_total) * (uint64_t)Tk;
        rt_cuda_rng_row_walk(seed, stream, g0, (uint64_t)Tk, (uint64_t)blockIdx.x * blockDim.x + threadIdx.x,
                             (uint64_t)gridDim.x * blockDim.x, [&](size_t j, float u) {
                                 pd[row + j] =
                                     u >= p
                                         ? rt_cuda_round16(rt_cuda_load16(P, probs_kind, row + j) * keep_scale, mm_kind)
                                         : 0.0f;
                             });
    }
}

/* In place on row r of dS, which holds dP' = dout v^T: dP = dP' * mask * keep_scale, then
 * dS = P * (dP - sum_j P dP). */
__global__ void rt_cuda_attn_softmax_bwd_kernel(float *dS, const void *probs, int probs_kind, int NH, int Tq, int Tk,
                                                bool dropout, float p, float keep_scale, uint64_t seed,
                                                uint64_t stream_at0, const uint64_t *step, int head_offset,
                                                int heads_total, size_t rows) {
    const uint64_t stream = rt_stream_at_step(stream_at0, step);
    size_t r = (size_t)blockIdx.x * RT_CUDA_ATTN_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    float *g = dS + r * (size_t)Tk;
    const size_t row = r * (size_t)Tk; /* row r of probs */
    float dot = 0.0f;
    if (!dropout) {
        for (int j = lane; j < Tk; j += 32) dot += rt_cuda_load16(probs, probs_kind, row + j) * g[j];
    } else { /* a Philox block (four keys) per lane at a time */
        const uint64_t g0 = (uint64_t)rt_cuda_attn_rng_row(r, NH, Tq, head_offset, heads_total) * (uint64_t)Tk;
        rt_cuda_rng_row_walk(seed, stream, g0, (uint64_t)Tk, (uint64_t)lane, 32, [&](size_t j, float u) {
            const float dp = u >= p ? g[j] * keep_scale : 0.0f;
            g[j] = dp;
            dot += rt_cuda_load16(probs, probs_kind, row + j) * dp;
        });
    }
    dot = rt_cuda_warp_sum(dot);
    __syncwarp(); /* the dropout walk above wrote keys another lane reads below */
    for (int j = lane; j < Tk; j += 32) g[j] = rt_cuda_load16(probs, probs_kind, row + j) * (g[j] - dot);
}

/* dbias[h, i, j] += sum over b of dS[b, h, i, j], b in order (one thread per element). */
__global__ void rt_cuda_attn_dbias_kernel(float *dbias, const float *dS, int B, size_t per_batch) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < per_batch; e += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += dS[(size_t)b * per_batch + e];
        dbias[e] += s;
    }
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

    float *pd = NULL;
    if (p > 0.0f) pd = (float *)rt_cuda_scratch(c, RT_CUDA_SCRATCH_ATTN_P, rows * Tk * sizeof(float));
    const int mm_kind = rt_cuda_kind16(c->matmul);
    rt_cuda_attn_softmax_kernel<<<rt_cuda_attn_row_grid(rows), 32 * RT_CUDA_ATTN_ROWS_PER_BLOCK, 0,
                                  rt_cuda_stream(ctx)>>>(
        S, pd, f32 ? NULL : probs, rt_cuda_kind16(d->probs_dtype), mm_kind, d->key_mask, d->bias, d->prefix, NH, Tq, Tk,
        d->causal, p, keep_scale, d->seed, d->stream, d->stream_step, d->head_offset,
        d->heads_total > 0 ? d->heads_total : NH, rows);
    CUDA_LAUNCH_CHECK();

    /* out[b, :, h] (Tq x HS) = Pd[b, h] (Tq x Tk) v[b, :, h] (Tk x HS); stored 16-bit probabilities
     * (the softmax's values rounded, which S holds too) are read as they are */
    const rt_x P = pd                                             ? rt_xf(pd)
                   : use16 && !f32 && d->probs_dtype == c->matmul ? rt_x_of(probs, d->probs_dtype)
                                                                  : rt_xf(S);
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
    rt_x P = rt_x_of((void *)probs, d->probs_dtype);
    if (p > 0.0f) {
        float *pd = (float *)rt_cuda_scratch(c, RT_CUDA_SCRATCH_ATTN_P, total * sizeof(float));
        rt_cuda_attn_dropout_kernel<<<rt_cuda_grid_rows(rows, Tk / 4 + 2, RT_CUDA_THREADS), RT_CUDA_THREADS, 0,
                                      rt_cuda_stream(ctx)>>>(pd, probs, probs_kind, mm_kind, rows, p, keep_scale,
                                                             d->seed, d->stream, d->stream_step, NH, Tq, Tk,
                                                             d->head_offset, heads_total);
        CUDA_LAUNCH_CHECK();
        P = rt_xf(pd);
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

    rt_cuda_attn_softmax_bwd_kernel<<<rt_cuda_attn_row_grid(rows), 32 * RT_CUDA_ATTN_ROWS_PER_BLOCK, 0,
                                      rt_cuda_stream(ctx)>>>(dS, probs, probs_kind, NH, Tq, Tk, p > 0.0f, p, keep_scale,
                                                             d->seed, d->stream, d->stream_step, d->head_offset,
                                                             heads_total, rows);
    CUDA_LAUNCH_CHECK();

    if (dbias) {
        size_t per_batch = (size_t)NH * head;
        rt_cuda_attn_dbias_kernel<<<rt_cuda_grid(per_batch, RT_CUDA_THREADS), RT_CUDA_THREADS, 0,
                                    rt_cuda_stream(ctx)>>>(dbias, dS, B, per_batch);
        CUDA_LAUNCH_CHECK();
    }

    /* dS at the compute precision for its products (dbias took it in fp32): the 16-bit matmul
     * rounds it as it converts; the fp32 one is given it rounded */
    if (mm_kind != RT_CUDA_KIND_F32 && !use16) rt_cuda_round_to(ctx, c->matmul, dS, rows, Tk, (size_t)Tk);
    for (int b = 0; b < B; b++) {
        /* dq[b, :, h] (Tq x HS) = scale * dS[b, h] (Tq x Tk) k[b, :, h] (Tk x HS) */
        rt_cuda_attn_gemm(ctx, use16, false, false, Tq, HS, Tk, d->scale, rt_xf(dS + (size_t)b * NH * head), Tk, head,
                          rt_x_at(k, (size_t)b * Tk * d->ldk), (int)d->ldk, (size_t)HS,
                          rt_x_at(dq, (size_t)b * Tq * d->ldq), (int)d->ldq, (size_t)HS, NH);
        /* dk[b, :, h] (Tk x HS) = scale * dS[b, h]^T (Tk x Tq) q[b, :, h] (Tq x HS) */
        rt_cuda_attn_gemm(ctx, use16, true, false, Tk, HS, Tq, d->scale, rt_xf(dS + (size_t)b * NH * head), Tk, head,
                          rt_x_at(q, (size_t)b * Tq * d->ldq), (int)d->ldq, (size_t)HS,
                          rt_x_at(dk, (size_t)b * Tk * d->ldk), (int)d->ldk, (size_t)HS, NH);
    }
}
