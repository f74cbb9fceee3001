/* Fused ("flash") attention for the CUDA backend at a 16-bit compute precision, written once
 * for two machines: a GPU warp, where the products are tensor-core WMMA tiles and 32 lanes share
 * the element work, and a plain C loop on the host, where one "lane" does it all and the
 * products are loops. The kernels in cuda_flash.cu call the block functions below; a CPU test
 * (tests/test_flash_tiles.c) runs the same functions block by block and checks them against the
 * CPU backend's attention, so the tiling, masks, dropout indices and rounding points are tested
 * on machines without a GPU. Only the WMMA calls and the warp's syncs are not.
 *
 * Semantics are rt_attn_desc's (rt_backend.h) and the CPU backend's, at the same rounding points:
 * the probabilities P = softmax(scale q.k + key_mask + bias) are rounded to the compute type, so are the
 * dropped ones (P * 1/(1-p)) and dS, and every product reads 16-bit values and sums in fp32. To
 * round the *normalized* P as the materialized path does, the forward takes two passes over the
 * keys: the first finds each row's max m and sum l (online), the second forms P = exp(s - m) / l
 * and out = P' v. Nothing of size T x T is stored: the probabilities buffer keeps only (m, 1/l)
 * per query row (two floats), and the backward recomputes P from them.
 *
 * Backward, in two kernels (three with a bias): the query side (a block per 16 query rows) first sums
 * D_i = sum_j P_ij dP_ij over the keys, as the CPU does, then dS and dq = scale dS k; the key side
 * (a block per 16 keys) recomputes P and dS for every query and sums dv = P'^T dout and
 * dk = scale dS^T q. A position bias (T5) adds to the scores; its gradient, summed over the batch
 * in order, comes from a third kernel (a block per 16 query rows of a head, over every batch row).
 *
 * Layout of the work: a block is one warp. In the forward and the query side, lanes 2r and 2r+1
 * hold query row r of the block's 16, each half of a 64-key tile (so a row's reductions are one
 * shuffle, and a lane's keys are consecutive, which lets it draw one Philox block per four keys);
 * on the key side a lane holds query columns and walks the 16 keys.
 *
 * q, k, v, dout and the outputs are activation handles (rt_x): 16-bit ones of the compute type,
 * read and written as they are, or fp32 ones holding values of it (a 16-bit output is stored
 * rounded; an fp32 one is rounded by the op's wrapper). */
#ifndef RT_CUDA_FLASH_TILES_H
#define RT_CUDA_FLASH_TILES_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "runtime/backend/rt_backend.h"
#ifdef __cplusplus
}
#endif
/* the 16-bit conversions and PK_HD (host and device), with cuda_bf16.h and cuda_fp16.h under nvcc */
#include "runtime/backend/cuda/cuda_pack.h"
#include "runtime/base/rt_rng.h"

#ifdef __CUDACC__
#include <mma.h>
#endif
#define FL_HD PK_HD

#ifdef __cplusplus
#define FL_ALIGN alignas(32)
#else
#define FL_ALIGN _Alignas(32)
#endif

#define FL_BQ 16     /* query rows of a forward or query-side block; keys of a key-side block */
#define FL_BK 64     /* keys (forward, query side) or queries (key side) of a tile */
#define FL_HS_MAX 64 /* the largest head size the kernels take (a multiple of 16 up to it) */
/* Row strides of the shared tiles, padded past a power of two so rows fall on other banks; each
 * keeps a 16-row, 16-column fragment 32-byte aligned, as WMMA's loads and stores need. */
#define FL_LD16 (FL_HS_MAX + 8) /* 16-bit q/k/v/dout tiles */
#define FL_LDP (FL_BK + 8)      /* 16-bit P and dS tiles */
#define FL_LDF (FL_BK + 4)      /* fp32 score and dP' tiles */

/* What a block reads: rt_attn_desc's fields as the kernels take them by value. */
typedef struct {
    int B, NH, Tq, Tk, HS;
    size_t ldq, ldk, ldv, ldo;
    float scale;
    int causal;
    const int32_t *prefix;
    const float *key_mask;
    const float *bias;   /* (NH, Tq, Tk) position bias, or NULL */
    float p, keep_scale; /* dropout probability, and 1/(1-p) */
    uint64_t seed, stream;
    const uint64_t *stream_step;  /* NULL, or the step's part of stream in device memory (rt_stream_at_step) */
    int head_offset, heads_total; /* heads_total > 0 */
    rt_dtype dtype;               /* RT_BF16 or RT_F16 */
} fl_args;

/* One block's shared memory (36 KiB). */
typedef struct {
    FL_ALIGN uint16_t strip_a[FL_BQ * FL_LD16]; /* forward, query side: q rows; key side: k rows */
    FL_ALIGN uint16_t strip_b[FL_BQ * FL_LD16]; /* query side: dout rows; key side: v rows */
    FL_ALIGN uint16_t tile_a[FL_BK * FL_LD16];  /* forward, query side: k tile; key side: q tile */
    FL_ALIGN uint16_t tile_b[FL_BK * FL_LD16];  /* forward, query side: v tile; key side: dout tile */
    FL_ALIGN float s[FL_BQ * FL_LDF];           /* scores (key side: transposed); then a result */
    FL_ALIGN float dp[FL_BQ * FL_LDF];          /* dP' = dout v^T (key side: transposed) */
    FL_ALIGN uint16_t p[FL_BQ * FL_LDP];        /* P after dropout, a product's operand */
    FL_ALIGN uint16_t ds[FL_BQ * FL_LDP];       /* dS, a product's operand */
} fl_smem;

/* --- the two machines ---------------------------------------------------------------------- */
#ifdef __CUDA_ARCH__
#define FL_LANES 32
#define FL_LANE() ((int)(threadIdx.x & 31))
#define FL_SYNC() __syncwarp()
#define FL_ROW_SLOTS 1                     /* query rows a lane holds */
#define FL_SLOT_ROW(lane, t) ((lane) >> 1) /* the row of a lane's slot t */
#define FL_HALF0(lane) ((lane)&1)          /* the first half of a key tile a lane takes */
#define FL_HALF_STEP 2
#define FL_PAIR_MAX(x) fmaxf((x), __shfl_xor_sync(0xffffffffu, (x), 1))
#define FL_PAIR_SUM(x) ((x) + __shfl_xor_sync(0xffffffffu, (x), 1))
#else
#define FL_LANES 1
#define FL_LANE() 0
#define FL_SYNC() ((void)0)
#define FL_ROW_SLOTS FL_BQ
#define FL_SLOT_ROW(lane, t) (t)
#define FL_HALF0(lane) 0
#define FL_HALF_STEP 1
#define FL_PAIR_MAX(x) (x)
#define FL_PAIR_SUM(x) (x)
#endif

FL_HD float fl_round16(float x, rt_dtype dt) { return rt_pack_widen16(dt, rt_pack_narrow16(dt, x)); }

/* An accumulator of 16 x HS fp32 sums that lives across tiles: registers on the GPU. */
#ifdef __CUDA_ARCH__
typedef struct {
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> f[FL_HS_MAX / 16];
} fl_acc;

template <typename T>
__device__ __forceinline__ void fl_mma_nt_t(float *C, int ldc, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                                            int K) {
    using namespace nvcuda;
#pragma unroll
    for (int n0 = 0; n0 < FL_BK; n0 += 16) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
        wmma::fill_fragment(c, 0.0f);
        for (int k0 = 0; k0 < K; k0 += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
            wmma::load_matrix_sync(a, (const T *)A + k0, (unsigned)lda);
            wmma::load_matrix_sync(b, (const T *)B + (size_t)n0 * ldb + k0, (unsigned)ldb);
            wmma::mma_sync(c, a, b, c);
        }
        wmma::store_matrix_sync(C + n0, c, (unsigned)ldc, wmma::mem_row_major);
    }
}

template <typename T>
__device__ __forceinline__ void fl_acc_mma_t(fl_acc *acc, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                                             int HS) {
    using namespace nvcuda;
#pragma unroll
    for (int k0 = 0; k0 < FL_BK; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::load_matrix_sync(a, (const T *)A + k0, (unsigned)lda);
#pragma unroll
        for (int t = 0; t < FL_HS_MAX / 16; t++) {
            if (t * 16 >= HS) break;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
            wmma::load_matrix_sync(b, (const T *)B + (size_t)k0 * ldb + t * 16, (unsigned)ldb);
            wmma::mma_sync(acc->f[t], a, b, acc->f[t]);
        }
    }
}
#else
typedef struct {
    float v[FL_BQ * FL_HS_MAX];
} fl_acc;
#endif

/* C (16 x FL_BK fp32, row stride ldc) = A (16 x K) B^T, B being FL_BK rows of K: scores. */
FL_HD void fl_mma_nt(float *C, int ldc, const uint16_t *A, int lda, const uint16_t *B, int ldb, int K, rt_dtype dt) {
#ifdef __CUDA_ARCH__
    if (dt == RT_BF16)
        fl_mma_nt_t<__nv_bfloat16>(C, ldc, A, lda, B, ldb, K);
    else
        fl_mma_nt_t<__half>(C, ldc, A, lda, B, ldb, K);
#else
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < FL_BK; n++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++) s += rt_pack_widen16(dt, A[r * lda + k]) * rt_pack_widen16(dt, B[n * ldb + k]);
            C[r * ldc + n] = s;
        }
#endif
}

FL_HD void fl_acc_zero(fl_acc *acc) {
#ifdef __CUDA_ARCH__
#pragma unroll
    for (int t = 0; t < FL_HS_MAX / 16; t++) nvcuda::wmma::fill_fragment(acc->f[t], 0.0f);
#else
    for (int e = 0; e < FL_BQ * FL_HS_MAX; e++) acc->v[e] = 0.0f;
#endif
}

/* acc (16 x HS) += A (16 x FL_BK) B (FL_BK x HS, row stride ldb). */
FL_HD void fl_acc_mma(fl_acc *acc, const uint16_t *A, int lda, const uint16_t *B, int ldb, int HS, rt_dtype dt) {
#ifdef __CUDA_ARCH__
    if (dt == RT_BF16)
        fl_acc_mma_t<__nv_bfloat16>(acc, A, lda, B, ldb, HS);
    else
        fl_acc_mma_t<__half>(acc, A, lda, B, ldb, HS);
#else
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < HS; n++) {
            float s = acc->v[r * FL_HS_MAX + n];
            for (int k = 0; k < FL_BK; k++)
                s += rt_pack_widen16(dt, A[r * lda + k]) * rt_pack_widen16(dt, B[k * ldb + n]);
            acc->v[r * FL_HS_MAX + n] = s;
        }
#endif
}

/* C (16 x HS fp32, row stride ldc) = acc. */
FL_HD void fl_acc_store(float *C, int ldc, const fl_acc *acc, int HS) {
#ifdef __CUDA_ARCH__
#pragma unroll
    for (int t = 0; t < FL_HS_MAX / 16; t++) {
        if (t * 16 >= HS) break;
        nvcuda::wmma::store_matrix_sync(C + t * 16, acc->f[t], (unsigned)ldc, nvcuda::wmma::mem_row_major);
    }
#else
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < HS; n++) C[r * ldc + n] = acc->v[r * FL_HS_MAX + n];
#endif
}

/* --- shared by both machines ---------------------------------------------------------------- */

/* Whether the fused kernels take this attention at compute precision `compute`: NULL if so, else
 * why not (the materialized path runs instead). */
static inline const char *fl_unsupported(const rt_attn_desc *d, rt_dtype compute) {
    if (compute != RT_BF16 && compute != RT_F16) return "fp32 compute";
    /* (fp32 probabilities are rounded by rt_attention_fwd after the op, which the statistics kept
     * in their place must not be) */
    if (d->probs_dtype != compute) return "probabilities stored in another type";
    if (d->HS % 16 != 0 || d->HS > FL_HS_MAX) return "a head size that is not a multiple of 16 up to 64";
    /* the probabilities buffer keeps two floats per query row */
    if ((size_t)d->Tk * rt_attn_probs_size(d->probs_dtype) < 2 * sizeof(float)) return "fewer than 4 keys";
    return NULL;
}

/* Keys j < jend are seen by query i of batch row b (0 for a row past Tq). */
FL_HD int fl_jend(const fl_args *a, int b, int i) {
    if (i >= a->Tq) return 0;
    if (!a->causal) return a->Tk;
    int jend = i + 1;
    if (a->prefix && a->prefix[b] > jend) jend = a->prefix[b] < a->Tk ? a->prefix[b] : a->Tk; /* GLM's context */
    return jend;
}

/* The score of key j from the product's sum, as the CPU forms it: scaled, plus the key mask,
 * plus the position bias (brow: its row for this query, or NULL). */
FL_HD float fl_score(const fl_args *a, float dot, const float *km, const float *brow, int j) {
    float s = a->scale * dot;
    if (km) s += km[j];
    if (brow) s += brow[j];
    return s;
}

/* Query i's row of the position bias of head h, or NULL. */
FL_HD const float *fl_bias_row(const fl_args *a, int h, int i) {
    return a->bias && i < a->Tq ? a->bias + ((size_t)h * a->Tq + i) * (size_t)a->Tk : NULL;
}

/* The dropout stream index of element (i, 0) of head h of batch row b: the global head. */
FL_HD uint64_t fl_rng_base(const fl_args *a, int b, int h, int i) {
    return (((uint64_t)b * (uint64_t)a->heads_total + (uint64_t)(a->head_offset + h)) * (uint64_t)a->Tq + (uint64_t)i) *
           (uint64_t)a->Tk;
}

/* Uniforms along a lane's consecutive elements, a Philox block drawn once per four. */
typedef struct {
    uint64_t blk;
    float u[4];
} fl_rng;
FL_HD void fl_rng_reset(fl_rng *r) { r->blk = ~(uint64_t)0; }
FL_HD float fl_uniform(fl_rng *r, const fl_args *a, uint64_t g) {
    if ((g >> 2) != r->blk) {
        r->blk = g >> 2;
        rt_rng_uniform4(a->seed, rt_stream_at_step(a->stream, a->stream_step), r->blk, r->u);
    }
    return r->u[g & 3];
}

/* Rows r0 .. r0 + nrows - 1 of head h of batch row b of x (T rows a batch row, row stride ld) as
 * 16-bit values into dst (row stride FL_LD16); rows past T are zero. The values are stored
 * activations, already of the type: a 16-bit handle's bits are copied, an fp32 one's floats
 * narrowed exactly. */
FL_HD void fl_load(uint16_t *dst, rt_x x, size_t ld, int b, int T, int h, int HS, int r0, int nrows, rt_dtype dt) {
    for (int e = FL_LANE(); e < nrows * HS; e += FL_LANES) {
        const int r = e / HS, c = e % HS, t = r0 + r;
        const size_t i = ((size_t)b * T + t) * ld + (size_t)h * HS + c;
        uint16_t v = 0; /* +0 in both types */
        if (t < T) v = x.t == RT_F32 ? rt_pack_narrow16(dt, ((const float *)x.p)[i]) : ((const uint16_t *)x.p)[i];
        dst[r * FL_LD16 + c] = v;
    }
}

/* P of one element from its score and its row's (m, 1/l), rounded; and, through *pd and *keep,
 * after dropout (a dropped element's *keep is 0): P / (1 - p), which rounds as it is stored. */
FL_HD float fl_prob(const fl_args *a, float s, float m, float inv, fl_rng *rng, uint64_t g, float *pd, float *keep) {
    const float pr = fl_round16(expf(s - m) * inv, a->dtype);
    *keep = 1.0f;
    *pd = pr;
    if (a->p > 0.0f) {
        const bool kept = fl_uniform(rng, a, g) >= a->p;
        *keep = kept ? a->keep_scale : 0.0f;
        *pd = kept ? pr * a->keep_scale : 0.0f;
    }
    return pr;
}

/* Writes rows i0 .. of the block's 16 x HS fp32 result in sm->s, times mul, to y (T rows a
 * batch row, row stride ld): a 16-bit handle gets each value rounded to its type, an fp32 one the
 * float (its wrapper rounds it). */
FL_HD void fl_write_rows(rt_x y, size_t ld, const fl_smem *sm, int b, int T, int h, int HS, int i0, float mul) {
    for (int e = FL_LANE(); e < FL_BQ * HS; e += FL_LANES) {
        const int r = e / HS, c = e % HS, i = i0 + r;
        if (i >= T) continue;
        const size_t at = ((size_t)b * T + i) * ld + (size_t)h * HS + c;
        const float v = mul * sm->s[r * FL_LDF + c];
        if (y.t == RT_F32)
            ((float *)y.p)[at] = v;
        else
            ((uint16_t *)y.p)[at] = rt_pack_narrow16(y.t, v);
    }
}

/* Key tile k0 .. k0 + 63 of head h of batch row b against the block's strips: S = strip_a k^T
 * into sm->s and dP' = strip_b v^T into sm->dp (the query side's, and the bias gradient's). */
FL_HD void fl_score_tiles(const fl_args *a, fl_smem *sm, int b, int h, int k0, rt_x k, rt_x v) {
    FL_SYNC(); /* the last tile's readers are done */
    fl_load(sm->tile_a, k, a->ldk, b, a->Tk, h, a->HS, k0, FL_BK, a->dtype);
    fl_load(sm->tile_b, v, a->ldv, b, a->Tk, h, a->HS, k0, FL_BK, a->dtype);
    FL_SYNC();
    fl_mma_nt(sm->s, FL_LDF, sm->strip_a, FL_LD16, sm->tile_a, FL_LD16, a->HS, a->dtype);
    fl_mma_nt(sm->dp, FL_LDF, sm->strip_b, FL_LD16, sm->tile_b, FL_LD16, a->HS, a->dtype);
    FL_SYNC();
}

/* The forward of block blk: head (b, h) = blk / ceil(Tq/16), query rows i0 .. i0 + 15. Writes
 * those rows of out and their (m, 1/l) into stats (two floats per row (b*NH + h)*Tq + i). */
FL_HD void fl_fwd_block(const fl_args *a, fl_smem *sm, long long blk, rt_x out, float *stats, rt_x q, rt_x k, rt_x v) {
    const int nqt = (a->Tq + FL_BQ - 1) / FL_BQ, lane = FL_LANE(), HS = a->HS;
    const int bh = (int)(blk / nqt), i0 = (int)(blk % nqt) * FL_BQ, b = bh / a->NH, h = bh % a->NH;
    (void)lane; /* the host's one lane holds every row */
    const int last = i0 + FL_BQ < a->Tq ? i0 + FL_BQ - 1 : a->Tq - 1;
    const int kend = fl_jend(a, b, last); /* the keys any row here sees: jend grows with i */
    const float *km = a->key_mask ? a->key_mask + (size_t)b * a->Tk : NULL;
    float m[FL_ROW_SLOTS], l[FL_ROW_SLOTS], inv[FL_ROW_SLOTS];
    int jend[FL_ROW_SLOTS];
    const float *brow[FL_ROW_SLOTS];
    for (int t = 0; t < FL_ROW_SLOTS; t++) {
        m[t] = -INFINITY;
        l[t] = 0.0f;
        jend[t] = fl_jend(a, b, i0 + FL_SLOT_ROW(lane, t));
        brow[t] = fl_bias_row(a, h, i0 + FL_SLOT_ROW(lane, t));
    }
    fl_load(sm->strip_a, q, a->ldq, b, a->Tq, h, HS, i0, FL_BQ, a->dtype);

    /* pass 1: each row's max and sum of exponentials, online over the key tiles */
    for (int k0 = 0; k0 < kend; k0 += FL_BK) {
        FL_SYNC(); /* the last tile's readers are done */
        fl_load(sm->tile_a, k, a->ldk, b, a->Tk, h, HS, k0, FL_BK, a->dtype);
        FL_SYNC();
        fl_mma_nt(sm->s, FL_LDF, sm->strip_a, FL_LD16, sm->tile_a, FL_LD16, HS, a->dtype);
        FL_SYNC();
        for (int t = 0; t < FL_ROW_SLOTS; t++) {
            const int r = FL_SLOT_ROW(lane, t);
            float tmax = -INFINITY;
            for (int hf = FL_HALF0(lane); hf < 2; hf += FL_HALF_STEP)
                for (int u = 0; u < FL_BK / 2; u++) {
                    const int c = hf * (FL_BK / 2) + u, j = k0 + c;
                    if (j < jend[t]) tmax = fmaxf(tmax, fl_score(a, sm->s[r * FL_LDF + c], km, brow[t], j));
                }
            tmax = FL_PAIR_MAX(tmax);
            const bool any = tmax > -INFINITY; /* a key seen and not masked to -inf */
            const float mn = fmaxf(m[t], tmax);
            float part = 0.0f;
            for (int hf = FL_HALF0(lane); hf < 2; hf += FL_HALF_STEP)
                for (int u = 0; u < FL_BK / 2; u++) {
                    const int c = hf * (FL_BK / 2) + u, j = k0 + c;
                    if (any && j < jend[t]) part += expf(fl_score(a, sm->s[r * FL_LDF + c], km, brow[t], j) - mn);
                }
            part = FL_PAIR_SUM(part); /* every lane shuffles, whatever its row holds */
            if (any) {
                l[t] = (m[t] == -INFINITY ? 0.0f : l[t] * expf(m[t] - mn)) + part;
                m[t] = mn;
            }
        }
    }
    for (int t = 0; t < FL_ROW_SLOTS; t++) inv[t] = m[t] == -INFINITY ? 0.0f : 1.0f / l[t];

    /* pass 2: P = exp(s - m) / l rounded, dropped, and out += P' v */
    fl_acc acc;
    fl_acc_zero(&acc);
    for (int k0 = 0; k0 < kend; k0 += FL_BK) {
        FL_SYNC();
        fl_load(sm->tile_a, k, a->ldk, b, a->Tk, h, HS, k0, FL_BK, a->dtype);
        fl_load(sm->tile_b, v, a->ldv, b, a->Tk, h, HS, k0, FL_BK, a->dtype);
        FL_SYNC();
        fl_mma_nt(sm->s, FL_LDF, sm->strip_a, FL_LD16, sm->tile_a, FL_LD16, HS, a->dtype);
        FL_SYNC();
        for (int t = 0; t < FL_ROW_SLOTS; t++) {
            const int r = FL_SLOT_ROW(lane, t);
            const uint64_t g0 = fl_rng_base(a, b, h, i0 + r);
            for (int hf = FL_HALF0(lane); hf < 2; hf += FL_HALF_STEP) {
                fl_rng rng;
                fl_rng_reset(&rng);
                for (int u = 0; u < FL_BK / 2; u++) {
                    const int c = hf * (FL_BK / 2) + u, j = k0 + c;
                    float pd = 0.0f, keep;
                    if (j < jend[t] && m[t] > -INFINITY)
                        (void)fl_prob(a, fl_score(a, sm->s[r * FL_LDF + c], km, brow[t], j), m[t], inv[t], &rng,
                                      g0 + (uint64_t)j, &pd, &keep);
                    sm->p[r * FL_LDP + c] = rt_pack_narrow16(a->dtype, pd);
                }
            }
        }
        FL_SYNC();
        fl_acc_mma(&acc, sm->p, FL_LDP, sm->tile_b, FL_LD16, HS, a->dtype);
    }
    FL_SYNC();
    fl_acc_store(sm->s, FL_LDF, &acc, HS);
    FL_SYNC();
    fl_write_rows(out, a->ldo, sm, b, a->Tq, h, HS, i0, 1.0f);
    for (int t = 0; t < FL_ROW_SLOTS; t++) {
        const int i = i0 + FL_SLOT_ROW(lane, t);
        if (FL_HALF0(lane) == 0 && i < a->Tq) {
            const size_t row = ((size_t)b * a->NH + h) * a->Tq + i;
            stats[2 * row] = m[t];
            stats[2 * row + 1] = inv[t];
        }
    }
}

/* The query side of the backward, block blk as in the forward: D_i = sum_j P_ij dP_ij into dsum
 * (a float per row), then dq = scale dS k for the block's rows (written). */
FL_HD void fl_bwd_query_block(const fl_args *a, fl_smem *sm, long long blk, rt_x dq, float *dsum, rt_x dout,
                              const float *stats, rt_x q, rt_x k, rt_x v) {
    const int nqt = (a->Tq + FL_BQ - 1) / FL_BQ, lane = FL_LANE(), HS = a->HS;
    const int bh = (int)(blk / nqt), i0 = (int)(blk % nqt) * FL_BQ, b = bh / a->NH, h = bh % a->NH;
    (void)lane; /* the host's one lane holds every row */
    const int last = i0 + FL_BQ < a->Tq ? i0 + FL_BQ - 1 : a->Tq - 1;
    const int kend = fl_jend(a, b, last);
    const float *km = a->key_mask ? a->key_mask + (size_t)b * a->Tk : NULL;
    float m[FL_ROW_SLOTS], inv[FL_ROW_SLOTS], D[FL_ROW_SLOTS];
    int jend[FL_ROW_SLOTS];
    const float *brow[FL_ROW_SLOTS];
    for (int t = 0; t < FL_ROW_SLOTS; t++) {
        const int i = i0 + FL_SLOT_ROW(lane, t);
        const size_t row = ((size_t)b * a->NH + h) * a->Tq + i;
        jend[t] = fl_jend(a, b, i);
        brow[t] = fl_bias_row(a, h, i);
        m[t] = i < a->Tq ? stats[2 * row] : -INFINITY;
        inv[t] = i < a->Tq ? stats[2 * row + 1] : 0.0f;
        D[t] = 0.0f;
    }
    fl_load(sm->strip_a, q, a->ldq, b, a->Tq, h, HS, i0, FL_BQ, a->dtype);
    fl_load(sm->strip_b, dout, a->ldo, b, a->Tq, h, HS, i0, FL_BQ, a->dtype);

    /* pass 1 (D) then pass 2 (dS, dq): both recompute the scores and dP' a tile at a time */
    fl_acc acc;
    fl_acc_zero(&acc);
    for (int pass = 0; pass < 2; pass++)
        for (int k0 = 0; k0 < kend; k0 += FL_BK) {
            fl_score_tiles(a, sm, b, h, k0, k, v);
            for (int t = 0; t < FL_ROW_SLOTS; t++) {
                const int r = FL_SLOT_ROW(lane, t);
                const uint64_t g0 = fl_rng_base(a, b, h, i0 + r);
                float part = 0.0f;
                for (int hf = FL_HALF0(lane); hf < 2; hf += FL_HALF_STEP) {
                    fl_rng rng;
                    fl_rng_reset(&rng);
                    for (int u = 0; u < FL_BK / 2; u++) {
                        const int c = hf * (FL_BK / 2) + u, j = k0 + c;
                        float ds = 0.0f;
                        if (j < jend[t] && m[t] > -INFINITY) {
                            float pd, keep;
                            const float pr = fl_prob(a, fl_score(a, sm->s[r * FL_LDF + c], km, brow[t], j), m[t],
                                                     inv[t], &rng, g0 + (uint64_t)j, &pd, &keep);
                            const float dpv = sm->dp[r * FL_LDF + c] * keep;
                            part += pr * dpv;
                            ds = pr * (dpv - D[t]); /* rounds as it is stored */
                        }
                        if (pass == 1) sm->ds[r * FL_LDP + c] = rt_pack_narrow16(a->dtype, ds);
                    }
                }
                part = FL_PAIR_SUM(part);
                if (pass == 0) D[t] += part;
            }
            if (pass == 1) {
                FL_SYNC();
                fl_acc_mma(&acc, sm->ds, FL_LDP, sm->tile_a, FL_LD16, HS, a->dtype);
            }
        }
    FL_SYNC();
    fl_acc_store(sm->s, FL_LDF, &acc, HS);
    FL_SYNC();
    fl_write_rows(dq, a->ldq, sm, b, a->Tq, h, HS, i0, a->scale);
    for (int t = 0; t < FL_ROW_SLOTS; t++) {
        const int i = i0 + FL_SLOT_ROW(lane, t);
        if (FL_HALF0(lane) == 0 && i < a->Tq) dsum[((size_t)b * a->NH + h) * a->Tq + i] = D[t];
    }
}

/* The key side of the backward, block blk: head (b, h) = blk / ceil(Tk/16), keys j0 .. j0 + 15.
 * Recomputes P and dS against every query (with dsum from the query side) and writes those rows
 * of dv = P'^T dout and dk = scale dS^T q. */
FL_HD void fl_bwd_key_block(const fl_args *a, fl_smem *sm, long long blk, rt_x dk, rt_x dv, rt_x dout,
                            const float *stats, const float *dsum, rt_x q, rt_x k, rt_x v) {
    const int nkt = (a->Tk + FL_BQ - 1) / FL_BQ, lane = FL_LANE(), HS = a->HS;
    const int bh = (int)(blk / nkt), j0 = (int)(blk % nkt) * FL_BQ, b = bh / a->NH, h = bh % a->NH;
    const float *km = a->key_mask ? a->key_mask + (size_t)b * a->Tk : NULL;
    fl_load(sm->strip_a, k, a->ldk, b, a->Tk, h, HS, j0, FL_BQ, a->dtype);
    fl_load(sm->strip_b, v, a->ldv, b, a->Tk, h, HS, j0, FL_BQ, a->dtype);
    fl_acc acc_dk, acc_dv;
    fl_acc_zero(&acc_dk);
    fl_acc_zero(&acc_dv);
    for (int i0 = 0; i0 < a->Tq; i0 += FL_BK) {
        const int last = i0 + FL_BK < a->Tq ? i0 + FL_BK - 1 : a->Tq - 1;
        if (fl_jend(a, b, last) <= j0) continue; /* no query of this tile sees these keys (causal) */
        FL_SYNC();
        fl_load(sm->tile_a, q, a->ldq, b, a->Tq, h, HS, i0, FL_BK, a->dtype);
        fl_load(sm->tile_b, dout, a->ldo, b, a->Tq, h, HS, i0, FL_BK, a->dtype);
        FL_SYNC();
        fl_mma_nt(sm->s, FL_LDF, sm->strip_a, FL_LD16, sm->tile_a, FL_LD16, HS, a->dtype);  /* s^T */
        fl_mma_nt(sm->dp, FL_LDF, sm->strip_b, FL_LD16, sm->tile_b, FL_LD16, HS, a->dtype); /* dP'^T */
        FL_SYNC();
        for (int c = lane; c < FL_BK; c += FL_LANES) {
            const int i = i0 + c;
            const size_t row = ((size_t)b * a->NH + h) * a->Tq + i;
            const bool valid = i < a->Tq;
            const float m = valid ? stats[2 * row] : -INFINITY, inv = valid ? stats[2 * row + 1] : 0.0f;
            const float D = valid ? dsum[row] : 0.0f;
            const int jend = fl_jend(a, b, i);
            const float *brow = fl_bias_row(a, h, i);
            const uint64_t g0 = fl_rng_base(a, b, h, i);
            fl_rng rng;
            fl_rng_reset(&rng);
            for (int r = 0; r < FL_BQ; r++) {
                const int j = j0 + r;
                float pd = 0.0f, ds = 0.0f;
                if (j < jend && m > -INFINITY) { /* jend <= Tk */
                    float keep;
                    const float pr = fl_prob(a, fl_score(a, sm->s[r * FL_LDF + c], km, brow, j), m, inv, &rng,
                                             g0 + (uint64_t)j, &pd, &keep);
                    ds = pr * (sm->dp[r * FL_LDF + c] * keep - D); /* rounds as it is stored */
                }
                sm->p[r * FL_LDP + c] = rt_pack_narrow16(a->dtype, pd);
                sm->ds[r * FL_LDP + c] = rt_pack_narrow16(a->dtype, ds);
            }
        }
        FL_SYNC();
        fl_acc_mma(&acc_dv, sm->p, FL_LDP, sm->tile_b, FL_LD16, HS, a->dtype);
        fl_acc_mma(&acc_dk, sm->ds, FL_LDP, sm->tile_a, FL_LD16, HS, a->dtype);
    }
    FL_SYNC();
    fl_acc_store(sm->s, FL_LDF, &acc_dv, HS);
    FL_SYNC();
    fl_write_rows(dv, a->ldv, sm, b, a->Tk, h, HS, j0, 1.0f);
    FL_SYNC();
    fl_acc_store(sm->s, FL_LDF, &acc_dk, HS);
    FL_SYNC();
    fl_write_rows(dk, a->ldk, sm, b, a->Tk, h, HS, j0, a->scale);
}

/* The position bias's gradient, block blk: head h = blk / ceil(Tq/16), query rows i0 .. i0 + 15,
 * over every batch row in order: dbias[h, i, j] += dS[b, h, i, j] in fp32 (before dS is rounded
 * for its products), each element by one lane, b = 0, 1, ... in turn, as the CPU sums them.
 * Reads dsum from the query side. */
FL_HD void fl_bwd_bias_block(const fl_args *a, fl_smem *sm, long long blk, float *dbias, rt_x dout, const float *stats,
                             const float *dsum, rt_x q, rt_x k, rt_x v) {
    const int nqt = (a->Tq + FL_BQ - 1) / FL_BQ, lane = FL_LANE(), HS = a->HS;
    const int h = (int)(blk / nqt), i0 = (int)(blk % nqt) * FL_BQ;
    (void)lane;
    const int last = i0 + FL_BQ < a->Tq ? i0 + FL_BQ - 1 : a->Tq - 1;
    for (int b = 0; b < a->B; b++) {
        const int kend = fl_jend(a, b, last);
        const float *km = a->key_mask ? a->key_mask + (size_t)b * a->Tk : NULL;
        float m[FL_ROW_SLOTS], inv[FL_ROW_SLOTS], D[FL_ROW_SLOTS];
        int jend[FL_ROW_SLOTS];
        for (int t = 0; t < FL_ROW_SLOTS; t++) {
            const int i = i0 + FL_SLOT_ROW(lane, t);
            const size_t row = ((size_t)b * a->NH + h) * a->Tq + i;
            jend[t] = fl_jend(a, b, i);
            m[t] = i < a->Tq ? stats[2 * row] : -INFINITY;
            inv[t] = i < a->Tq ? stats[2 * row + 1] : 0.0f;
            D[t] = i < a->Tq ? dsum[row] : 0.0f;
        }
        FL_SYNC(); /* the last batch row's products are done with the strips */
        fl_load(sm->strip_a, q, a->ldq, b, a->Tq, h, HS, i0, FL_BQ, a->dtype);
        fl_load(sm->strip_b, dout, a->ldo, b, a->Tq, h, HS, i0, FL_BQ, a->dtype);
        for (int k0 = 0; k0 < kend; k0 += FL_BK) {
            fl_score_tiles(a, sm, b, h, k0, k, v);
            for (int t = 0; t < FL_ROW_SLOTS; t++) {
                const int r = FL_SLOT_ROW(lane, t), i = i0 + r;
                const float *brow = fl_bias_row(a, h, i);
                const uint64_t g0 = fl_rng_base(a, b, h, i);
                for (int hf = FL_HALF0(lane); hf < 2; hf += FL_HALF_STEP) {
                    fl_rng rng;
                    fl_rng_reset(&rng);
                    for (int u = 0; u < FL_BK / 2; u++) {
                        const int c = hf * (FL_BK / 2) + u, j = k0 + c;
                        if (j >= jend[t] || !(m[t] > -INFINITY)) continue;
                        float pd, keep;
                        const float pr = fl_prob(a, fl_score(a, sm->s[r * FL_LDF + c], km, brow, j), m[t], inv[t], &rng,
                                                 g0 + (uint64_t)j, &pd, &keep);
                        dbias[((size_t)h * a->Tq + i) * a->Tk + j] += pr * (sm->dp[r * FL_LDF + c] * keep - D[t]);
                    }
                }
            }
        }
    }
}

/* The kernels' arguments from a descriptor (compute: the 16-bit compute type). */
static inline fl_args fl_args_of(const rt_attn_desc *d, rt_dtype compute) {
    fl_args a;
    a.B = d->B, a.NH = d->NH, a.Tq = d->Tq, a.Tk = d->Tk, a.HS = d->HS;
    a.ldq = d->ldq, a.ldk = d->ldk, a.ldv = d->ldv, a.ldo = d->ldo;
    a.scale = d->scale;
    a.causal = d->causal;
    a.prefix = d->prefix;
    a.key_mask = d->key_mask;
    a.bias = d->bias;
    a.p = d->dropout_p;
    a.keep_scale = d->dropout_p > 0.0f ? 1.0f / (1.0f - d->dropout_p) : 1.0f;
    a.seed = d->seed, a.stream = d->stream, a.stream_step = d->stream_step;
    a.head_offset = d->head_offset;
    a.heads_total = d->heads_total > 0 ? d->heads_total : d->NH;
    a.dtype = compute;
    return a;
}

#endif
