/* The compute backend: a table of kernels over raw float32 pointers with explicit sizes
 * (the ggml {ops, ctx} pattern with llm.c-style kernels). Models call only these, so the
 * same model code runs on the CPU backend (OpenBLAS + OpenMP) and the CUDA backend.
 *
 * Conventions: all matrices are row-major. "Writes" overwrites the output; "accumulates"
 * adds into it (gradients of shared inputs accumulate). Pointers live in the backend's
 * memory (rt_backend_alloc); int32 id arrays too. */
#ifndef RT_BACKEND_H
#define RT_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/base/rt_dtype.h"
#include "runtime/base/rt_status.h"
#include "runtime/backend/rt_step_state.h"
#include "runtime/backend/rt_x.h"

/* RT_ACT_TANH is plain tanh (BERT's pooler, RoBERTa's classification head). */
typedef enum { RT_ACT_GELU_TANH = 0, RT_ACT_GELU_ERF, RT_ACT_RELU, RT_ACT_TANH } rt_act_kind;

/* Scaled-dot-product attention over heads. q is (B, Tq, NH, HS) with row stride ldq values
 * between consecutive tokens (so q, k and v can be views into one fused qkv buffer); same
 * for k, v (B, Tk, NH, HS) and out (B, Tq, NH, HS). */
typedef struct {
    int B, NH, Tq, Tk, HS;
    size_t ldq, ldk, ldv, ldo;   /* values between tokens */
    float scale;                 /* usually 1/sqrt(HS) */
    bool causal;                 /* key j > query i masked (Tq == Tk) */
    const int32_t *prefix;       /* (B), causal only: keys j < prefix[b] are seen by every query
                                * (GLM's bidirectional context before its causal span); NULL = none */
    const float *key_mask;       /* (B, Tk) additive, e.g. 0 or -inf/-1e9 for padding; may be NULL */
    const int32_t *key_len;      /* (B) or NULL: key_mask is right padding, keys j < key_len[b] unmasked and the
                                * rest masked, key_len[b] >= 1. The same call either way: a backend may
                                * read the lengths instead (cuDNN's SDPA), the CPU reads key_mask. */
    const float *bias;           /* (NH, Tq, Tk) additive position bias (T5); may be NULL */
    float dropout_p;             /* dropout on the probabilities; 0 = off */
    uint64_t seed, stream;       /* counter RNG for that dropout */
    const uint64_t *stream_step; /* NULL, or where the step's part of stream is (rt_stream_at_step) */
    /* Tensor parallelism: these NH heads are heads [head_offset, head_offset + NH) of
     * heads_total, and the dropout mask is drawn at the global index
     * ((b*heads_total + head_offset + h)*Tq + i)*Tk + j, so every tp size drops the same
     * elements. 0 and 0 (or NH) mean all heads are here. */
    int head_offset, heads_total;
    /* How the probabilities buffer is stored: RT_F32 (floats, the default), or the compute
     * precision's RT_BF16 or RT_F16 (2-byte values), which halves the largest activation a
     * layer keeps. The values are the same either way: the softmax in fp32, stored rounded. */
    rt_dtype probs_dtype;
} rt_attn_desc;

/* Bytes of one stored attention probability (rt_attn_desc.probs_dtype). */
static inline size_t rt_attn_probs_size(rt_dtype probs_dtype) { return probs_dtype == RT_F32 ? 4 : 2; }

/* The residual step of a transformer block (rt_backend_ops.residual_fwd/bwd): a branch's
 * dropout, the residual add, and the norm that reads the sum (a pre-norm block's next norm, a
 * post-norm block's norm), over N rows of C. */
typedef struct {
    size_t N;
    int C;
    const float *weight; /* (C): the norm's; NULL: no norm, the plain residual add */
    const float *bias;   /* (C): LayerNorm's, or NULL */
    bool rms;            /* RMSNorm (T5: out = weight * (sum * rstd), no mean, no bias), else LayerNorm */
    float eps;
    float dropout_p;             /* the branch's dropout; 0: none */
    uint64_t seed, stream;       /* its counter RNG: element (n, c) draws index n*C + c, as dropout_fwd over
                            * the whole (N, C) buffer */
    const uint64_t *stream_step; /* NULL, or where the step's part of stream is (rt_stream_at_step) */
} rt_residual_desc;

typedef struct rt_backend_ops {
    const char *name;
    /* memory */
    void *(*alloc)(void *ctx, size_t bytes); /* zeroed; NULL when out of memory */
    void (*free)(void *ctx, void *p);
    /* Bytes the device could still hand out (CPU: the OS's MemAvailable), for the memory
     * report; 0 when unknown. */
    size_t (*free_memory)(void *ctx);
    /* The device's model name ("NVIDIA H100 80GB HBM3"), for the MFU peak table; NULL op: none. */
    const char *(*device_model)(void *ctx);
    void (*to_device)(void *ctx, void *dst, const void *host_src, size_t bytes);
    void (*to_host)(void *ctx, void *host_dst, const void *src, size_t bytes);
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
    void (*zero)(void *ctx, void *p, size_t bytes);
    void (*sync)(void *ctx);

    /* The compute precision (rt_set_precision) lives in the backend context, one per context as
     * llm.c's floatX, not per op. This op is the matmuls' part: with RT_BF16 or RT_F16, gemm
     * rounds A and B to that type (to nearest even) and accumulates in fp32. NULL op: fp32 only. */
    rt_status (*set_matmul_precision)(void *ctx, rt_dtype dtype);
    /* Rounds rows x cols of x (row stride ld floats) in place to the nearest dtype value (RT_BF16
     * or RT_F16; fp16 overflows to inf): how an activation is stored at the compute precision. */
    void (*round_to)(void *ctx, rt_dtype dtype, float *x, size_t rows, int cols, size_t ld);
    /* C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b]; op(A) is M x K, op(B) is K x N, C is
     * M x N; lda/ldb/ldc are row strides of A, B, C as stored; batch strides in values. A and
     * B are read at the matmul precision (a weight: rt_xf over the slab); a 16-bit C is written
     * rounded from the fp32 sum (with beta, beta * C is added to it first). */
    void (*gemm)(void *ctx, bool trans_a, bool trans_b, int M, int N, int K, float alpha, rt_x A, int lda,
                 size_t stride_a, rt_x B, int ldb, size_t stride_b, float beta, rt_x C, int ldc, size_t stride_c,
                 int batch);

    /* The fused linear layer: cuBLASLt's epilogues on CUDA. Each returns false, having done
     * nothing, where this backend cannot fuse these arguments; the wrapper then composes the
     * plain ops, rounding at the same points (NULL op: always composed). Row-major X (N, in),
     * W (out, in), dY (N, out).
     *   linear_fwd: pre = X W^T + b (b (out) or NULL), summed in fp32, stored; with act, out =
     *     act(pre) from the fp32 sum, stored, and pre kept for the backward (GELU_AUX_BIAS);
     *     without (act NULL), out is unused and the result is pre.
     *   linear_wgrad: dW (out, in) += dY^T X and, when db is not NULL, db (out) += the column
     *     sums of dY, both fp32 (BGRADB).
     *   linear_dact: dpre (N, in) = act'(pre) * (dY W), the product in fp32, stored; db (in) +=
     *     the column sums of dpre when not NULL (DGELU_BGRAD).
     * The composed fallback needs fp32 handles for pre and dpre (a backend with typed activations
     * has these ops). */
    bool (*linear_fwd)(void *ctx, rt_x out, rt_x pre, rt_x X, const float *W, const float *b, size_t N, int in,
                       int out_f, const rt_act_kind *act);
    bool (*linear_wgrad)(void *ctx, float *dW, float *db, rt_x dY, rt_x X, size_t N, int in, int out_f);
    bool (*linear_dact)(void *ctx, rt_x dpre, float *db, rt_x dY, const float *W, rt_x pre, size_t N, int in, int out_f,
                        rt_act_kind act);

    /* LayerNorm over rows of C: writes out (N, C), mean (N), rstd (N). inp is an activation of
     * either type (a residual sum: 16-bit at a typed stack's compute precision). The norms store
     * out and dinp at the compute precision themselves (an fp32 handle rounded), a row at a time. */
    void (*layernorm_fwd)(void *ctx, rt_x out, float *mean, float *rstd, rt_x inp, const float *weight,
                          const float *bias, size_t N, int C, float eps);
    /* Accumulates dinp, dweight, dbias (dbias may be NULL). dout is an activation's gradient of
     * either type (16-bit: a typed stack's sublayer input gradient at tp = 1). */
    void (*layernorm_bwd)(void *ctx, float *dinp, float *dweight, float *dbias, rt_x dout, rt_x inp,
                          const float *weight, const float *mean, const float *rstd, size_t N, int C);
    /* RMSNorm (T5): out = inp * rstd * weight. Writes out, rstd; bwd accumulates dinp, dweight. */
    void (*rmsnorm_fwd)(void *ctx, rt_x out, float *rstd, rt_x inp, const float *weight, size_t N, int C, float eps);
    void (*rmsnorm_bwd)(void *ctx, float *dinp, float *dweight, rt_x dout, rt_x inp, const float *weight,
                        const float *rstd, size_t N, int C);

    /* The residual step d, fused into one pass over rows; the numbers are those of the ops it
     * replaces (dropout_fwd, add, layernorm_fwd or rmsnorm_fwd; the norm's bwd and dropout_bwd),
     * each stored value rounded to the compute precision by the op itself where their wrappers
     * round it:
     *   fwd: sum (N, C) = res + drop(branch), the dropped branch stored before the add and the
     *        sum stored (res, branch and sum are handles of either type: a typed stack keeps the
     *        residual sums inside a block, and at tp = 1 the branch, at the compute precision);
     *        with d->weight, out (N, C) = norm(sum), stored, and mean (N, LayerNorm; may be
     *        NULL) and rstd (N) in fp32. out may alias branch (a recompute that needs only the
     *        sum and statistics); sum aliases neither input.
     *   bwd: with d->weight, dres (N, C) += norm's input gradient from dout (a handle of either
     *        type, as the norms' bwd takes it), given the forward's
     *        sum, mean and rstd, then stored; dweight (and dbias, LayerNorm; either may be NULL)
     *        += the norm's parameter gradients in fp32, summed as the norm's bwd sums them. Then,
     *        when d->dropout_p > 0, dbranch (N, C) = dropout's backward of dres, stored (a handle
     *        of either type, as the branch); else dbranch is not written (may be NULL): the
     *        branch's gradient is dres itself.
     * NULL ops: the wrappers compose the ops above. */
    void (*residual_fwd)(void *ctx, const rt_residual_desc *d, rt_x sum, rt_x out, float *mean, float *rstd, rt_x res,
                         rt_x branch);
    void (*residual_bwd)(void *ctx, const rt_residual_desc *d, float *dres, rt_x dbranch, float *dweight, float *dbias,
                         rt_x dout, rt_x sum, const float *mean, const float *rstd);

    /* out = act(inp); bwd writes dinp = dout * act'(inp). */
    void (*act_fwd)(void *ctx, rt_act_kind kind, rt_x out, rt_x inp, size_t n);
    void (*act_bwd)(void *ctx, rt_act_kind kind, rt_x dinp, rt_x inp, rt_x dout, size_t n);
    /* Gated activation (T5 v1.1's gated-gelu): out = act(gate) * lin, elementwise. bwd writes
     * dgate = dout * lin * act'(gate) and dlin = dout * act(gate) (act(gate) is recomputed, so
     * only the two inputs are kept for backward). */
    void (*gated_act_fwd)(void *ctx, rt_act_kind kind, rt_x out, rt_x gate, rt_x lin, size_t n);
    void (*gated_act_bwd)(void *ctx, rt_act_kind kind, rt_x dgate, rt_x dlin, rt_x gate, rt_x lin, rt_x dout, size_t n);

    /* out (N, C) += bias (C) on every row; bias_bwd accumulates dbias (C) += sum of rows. */
    void (*add_bias)(void *ctx, float *out, const float *bias, size_t N, int C);
    void (*bias_bwd)(void *ctx, float *dbias, rt_x dout, size_t N, int C);
    /* out = a + b (out may alias a or b; each a handle of either type), an activation the op stores
     * at the compute precision; accumulate: y += alpha * x; scale: x *= s (no rounding: gradients,
     * weights). */
    void (*add)(void *ctx, rt_x out, rt_x a, rt_x b, size_t n);
    void (*axpy)(void *ctx, float *y, float alpha, const float *x, size_t n);
    void (*scale)(void *ctx, float *x, float s, size_t n);
    /* x (N, C): row i *= w[i] (per-row loss weights, e.g. GLM's multi-token cloze on the LM head's
     * dL/dlogits); a 16-bit x is stored rounded, an fp32 one is left as computed (a matmul reads
     * either rounded to the compute type: the same number). */
    void (*scale_rows)(void *ctx, rt_x x, const float *w, size_t N, int C);
    /* HF T5's fp16 guard on an activation x of n values: where x holds an inf, every value is
     * set to min(max(x, -limit), limit) (infs included), stored, and it returns true; else x is
     * left as it is and it returns false (HF's torch.isinf(x).any()). bwd zeroes dx where
     * |y| > limit, y being the clamped values (torch.clamp's gradient is 0 where it clamped). */
    bool (*clamp_inf)(void *ctx, rt_x x, size_t n, float limit);
    void (*clamp_abs_bwd)(void *ctx, float *dx, rt_x y, size_t n, float limit);

    /* Attention. fwd writes out and probs (B, NH, Tq, Tk, stored as d->probs_dtype): the softmax
     * before dropout, kept for backward; out is computed from the softmax after dropout, which
     * at a 16-bit compute precision is rounded to it, as every matmul input is (and as PyTorch's
     * autocast multiplies bf16 probabilities; the backward's dS likewise, after dbias). bwd
     * writes dq, dk, dv (same strides as q, k, v in d; may be views into one dqkv buffer) and
     * accumulates dbias (NH, Tq, Tk, from the fp32 dS) when non-NULL. */
    void (*attention_fwd)(void *ctx, const rt_attn_desc *d, rt_x out, void *probs, rt_x q, rt_x k, rt_x v);
    void (*attention_bwd)(void *ctx, const rt_attn_desc *d, rt_x dq, rt_x dk, rt_x dv, float *dbias, rt_x dout,
                          const void *probs, rt_x q, rt_x k, rt_x v);
    /* Where the backend fuses attention d and keeps only what its backward needs in the
     * probabilities buffer: those bytes per query row (the CUDA backend's fused kernels: two
     * floats); 0 where it keeps the probabilities (rt_attn_kept_bytes). NULL op: always 0. */
    size_t (*attention_kept_row)(void *ctx, const rt_attn_desc *d);
    /* T5's relative position bias from its bucket table. table is (num_buckets, NH): a row per
     * bucket, a column per head (HF's nn.Embedding(num_buckets, n_heads); under tensor
     * parallelism the rank's column block of heads). buckets (Tq*Tk) holds the bucket of key j
     * seen from query i at [i*Tk + j], in [0, num_buckets). fwd writes bias (NH, Tq, Tk) = table[buckets[i*Tk+j], h],
     * stored at the compute precision by the op; bwd accumulates dtable[bucket, h] += the dbias
     * (NH, Tq, Tk) elements of that bucket. */
    void (*relbias_fwd)(void *ctx, float *bias, const float *table, const int32_t *buckets, int NH, int Tq, int Tk,
                        int num_buckets);
    void (*relbias_bwd)(void *ctx, float *dtable, const float *dbias, const int32_t *buckets, int NH, int Tq, int Tk,
                        int num_buckets);

    /* Embedding rows of a vocab shard [vocab_start, vocab_start + V): ids outside give zero
     * rows (vocab-parallel). fwd writes out (N, C) (accumulate=true adds into out, e.g. token +
     * position), every row stored at the compute precision by the op; bwd accumulates into
     * dtable (V, C). */
    void (*embedding_fwd)(void *ctx, float *out, const int32_t *ids, const float *table, size_t N, int C,
                          int vocab_start, int V, bool accumulate);
    void (*embedding_bwd)(void *ctx, float *dtable, const float *dout, const int32_t *ids, size_t N, int C,
                          int vocab_start, int V);

    /* Fused softmax cross-entropy over rows of logits (N, V). Writes losses (N) (0 where
     * target == -100) and dlogits = (softmax - onehot) * grad_scale (0 rows where ignored).
     * dlogits may alias logits. probs, when non-NULL, receives the softmax (N, V). */
    void (*softmax_xent)(void *ctx, float *losses, float *dlogits, float *probs, const float *logits,
                         const int32_t *targets, size_t N, int V, float grad_scale);
    /* Squared error of one output per row (HF's MSELoss terms, a regression head): where
     * targets[i] is not NaN, d = z[i] - targets[i] in float, losses[i] = d * d and dlogits[i] =
     * 2 d grad_scale; elsewhere both 0. targets may alias dlogits (each element is read before it
     * is written). */
    void (*mse_loss)(void *ctx, float *losses, float *dlogits, const float *z, const float *targets, size_t N,
                     float grad_scale);
    /* Binary cross-entropy of sigmoids over rows of C outputs (HF's BCEWithLogitsLoss terms, a
     * multi-label head), z, targets and dlogits (N, C): where a row's first target is not NaN,
     * losses[i] = (1/C) sum_c (1 - y) z - log_sigmoid(z), PyTorch's formulation, and dlogits =
     * (sigmoid(z) - y) grad_scale / C; elsewhere the loss and the row 0. The 1/C makes the labelled
     * rows' sum over their count PyTorch's mean over every element. targets may alias dlogits. */
    void (*bce_logits_loss)(void *ctx, float *losses, float *dlogits, const float *z, const float *targets, size_t N,
                            int C, float grad_scale);

    /* Vocab-parallel cross-entropy (Megatron): logits (N, V) are this rank's vocab columns
     * [vocab_start, vocab_start + V), read plus col_mask (V; NULL: none) where the row maximum and
     * the sum read them (the vocab's padding columns, MDL_LM_MASKED: they never win); targets are
     * global ids (or -100), never a masked column. stats is (3, N):
     *   phase 0 writes stats[0:N) = row max and stats[N:2N) = the target's logit (0 where the
     *           target is not in this shard); the caller all-reduces MAX over [0:N) and SUM
     *           over [N:2N);
     *   phase 1 writes stats[2N:3N) = sum_j exp(logit - max); the caller all-reduces SUM;
     *   phase 2 writes losses (N) = log(sum) + max - target logit (0 where -100) and
     *           dlogits = (exp(logit - max) / sum - onehot) * grad_scale (0 rows where -100), stored.
     * dlogits may alias logits in phase 2 (NULL: not written). The full logits are never gathered. */
    void (*xent_vocab)(void *ctx, int phase, float *stats, float *losses, rt_x dlogits, rt_x logits,
                       const float *col_mask, const int32_t *targets, size_t N, int V, int vocab_start,
                       float grad_scale);

    /* Dropout with the counter RNG: element i kept when uniform(seed, stream, i) >= p, then
     * scaled by 1/(1-p), stored at the compute precision by the op (as the ops below that write
     * activations: dropout_cols, gather_rows). bwd regenerates the same mask. out may alias inp.
     * step: NULL, or where (in backend memory) the step's part of stream is, which the op adds
     * (rt_stream_at_step). */
    void (*dropout_fwd)(void *ctx, float *out, const float *inp, size_t n, float p, uint64_t seed, uint64_t stream,
                        const uint64_t *step);
    void (*dropout_bwd)(void *ctx, float *dinp, const float *dout, size_t n, float p, uint64_t seed, uint64_t stream,
                        const uint64_t *step);
    /* Dropout on a column block of a (rows, cols_total) matrix, stored as (rows, cols): element
     * (r, c) is kept when uniform(seed, stream, r*cols_total + col_offset + c) >= p, the bit
     * dropout_fwd draws for that element of the whole matrix, so a column-parallel shard drops
     * what one rank would. The mask is its own backward: call it again on the gradient with
     * the same arguments. out may alias inp. */
    void (*dropout_cols)(void *ctx, rt_x out, rt_x inp, size_t rows, int cols, int cols_total, int col_offset, float p,
                         uint64_t seed, uint64_t stream, const uint64_t *step);

    /* Rows: out (B, C) = inp rows idx[b] (rows of a (rows, C) matrix); bwd accumulates. */
    void (*gather_rows)(void *ctx, float *out, const float *inp, const int32_t *idx, int B, int C);
    void (*scatter_rows_add)(void *ctx, float *dinp, rt_x dout, const int32_t *idx, int B, int C);

    /* AdamW on n elements, PyTorch semantics (decoupled decay: p -= lr*wd*p first; bias
     * correction with step t >= 1). grads may be scaled by grad_scale first (clipping). */
    void (*adamw)(void *ctx, float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, int64_t t);
    /* Sum of squares of x, in double. */
    double (*sumsq)(void *ctx, const float *x, size_t n);
    /* The step on the backend, with no host round trip (s: an rt_step_state in backend memory):
     * sumsq_into adds sumsq's sum of x to s->sumsq; step_finish runs rt_step_finish on s;
     * adamw_step is adamw with the scalars of s->adam[group] and the gradients times s->coef, and
     * leaves everything as it was when s->skip. NULL ops: the trainer reads the norm back instead. */
    void (*sumsq_into)(void *ctx, rt_step_state *s, const float *x, size_t n);
    /* *acc += the sum of losses[0, n), summed in double from 0 (in order on the CPU: the host's
     * sum, bit for bit); acc in backend memory (a step state's loss). */
    void (*loss_into)(void *ctx, double *acc, const float *losses, size_t n);
    void (*step_finish)(void *ctx, rt_step_state *s, double max_norm, double loss_scale);
    void (*adamw_step)(void *ctx, const rt_step_state *s, int group, float *params, const float *grads, float *m,
                       float *v, size_t n);

    /* The low-precision copy of the weights (rt_weight_copy_set). NULL ops: none; the matmuls
     * round a weight at each use instead, which gives the same numbers. */
    rt_status (*weight_copy_set)(void *ctx, const float *w, size_t n);
    void (*weight_copy_update)(void *ctx, const float *part, size_t n);
    /* Optional: a count that moves whenever the backend (re)allocates memory of its own
     * (rt_memory_epoch). */
    uint64_t (*memory_epoch)(void *ctx);
    /* Optional, together: graphs of a micro-batch's step (runtime/train/rt_step_graphs.h).
     * - graph_capture_begin: the ops that follow are recorded, not run; each upload is copied into
     *   the graph's own pinned staging, which holds `uploads` uploads of `upload_bytes` in all
     *   (what the step's eager run made). false: no capture (the reason logged once).
     * - graph_capture_end: the graph ready to launch, or NULL where the capture failed (logged
     *   once). Either way nothing captured has run.
     * - graph_rehearse_begin / _end: while the backend is muted (rt_backend.muted), uploads write
     *   the graph's staging in the capture's order; _end says whether they matched it (the same
     *   destinations and sizes, as many). Nothing runs.
     * - graph_launch runs it on the backend's stream; graph_free waits for it, then frees it. */
    bool (*graph_capture_begin)(void *ctx, uint64_t uploads, uint64_t upload_bytes);
    void *(*graph_capture_end)(void *ctx);
    void (*graph_rehearse_begin)(void *ctx, void *graph);
    bool (*graph_rehearse_end)(void *ctx);
    void (*graph_launch)(void *ctx, void *graph);
    void (*graph_free)(void *ctx, void *graph);
} rt_backend_ops;

/* What a backend's callers asked of it that crosses the host boundary or draws host-made
 * randomness, counted by the wrappers below. A training step is fit for a CUDA graph only when,
 * between its upload and its record's read, it reads nothing back, waits for nothing, allocates
 * nothing and draws no dropout mask from a host-made stream (runtime/train/rt_step_graphs.h). */
typedef struct {
    uint64_t uploads;      /* rt_to_device calls */
    uint64_t upload_bytes; /* and their bytes */
    uint64_t reads;        /* rt_to_host calls: the host waits for the device and reads */
    uint64_t syncs;        /* rt_sync calls */
    uint64_t allocs;       /* rt_backend_alloc calls */
    uint64_t draws;        /* calls that draw dropout masks from a (seed, stream) the host made */
} rt_backend_traffic;

typedef struct rt_backend {
    const rt_backend_ops *ops;
    rt_backend_traffic traffic;
    /* A rehearsal (runtime/train/rt_step_graphs.h): every op wrapper below returns at once, except
     * rt_to_device, which the backend then keeps for the graph that will replay the step. */
    bool muted;
    void *ctx;
    int device;             /* -1 for CPU */
    size_t bytes_allocated; /* through rt_backend_alloc so far (frees are not subtracted) */
    size_t bytes_freed;     /* given back through rt_free_sized: allocated - freed is what is held */
    bool native_bf16;       /* bf16 matmuls run on the hardware's own kernels, not an emulation */
    rt_dtype compute;       /* the compute precision (rt_set_precision): RT_F32, RT_BF16 or RT_F16 */
    bool keep_fp32;         /* keep activations in fp32 buffers at a 16-bit compute precision
                             * (rt_act_dtype): the tests' reference for the 2-byte ones */
    bool typed_acts;        /* the ops read and write 16-bit activation handles (rt_x): the CPU, and CUDA
                             * unless TZ_CUDA_ACTIVATIONS=fp32 */
    /* ZeRO-3 on a GPU: a host backend on which a model under construction lays out its whole
     * parameter slab (rt_params_init), so the whole model never sits on the device; rt_zero_init
     * then keeps this rank's pieces here and frees the slab. NULL: the slab is laid out here.
     * Owned (rt_backend_free frees it). */
    struct rt_backend *params_staging;
} rt_backend;

/* "cpu" or "cuda:N". threads <= 0 keeps OpenMP's default. */
rt_status rt_backend_init(const char *device, int threads, rt_backend **out);
void rt_backend_free(rt_backend *be);

/* The CPU backend; the CUDA one lives in runtime/cuda and is reached through rt_backend_init. */
rt_status rt_cpu_backend_init(int threads, rt_backend **out);
#ifdef TZ_USE_CUDA
rt_status rt_cuda_backend_init(int device, rt_backend **out);
void rt_cuda_backend_free(rt_backend *be);
#endif

/* The compute precision, as mixed-precision training defines it (llm.c's floatX on both
 * backends, so the CPU rounds where a GPU would):
 *   - matmuls read their inputs rounded to dtype and accumulate in fp32;
 *   - every activation and activation gradient an op writes is stored rounded to dtype: the
 *     outputs the wrappers below name "stored" (fp16 overflows to inf there, which is what
 *     loss scaling detects);
 *   - weights, parameter gradients (rt_linear_wgrad, norm/bias/embedding gradients), AdamW
 *     state, norm statistics, losses and every reduction stay fp32 (so checkpoints hold fp32
 *     masters and resume in any precision).
 * Where activations live (rt_x, runtime/backend/rt_x.h): an op given a 16-bit handle reads and writes
 * 2-byte values of dtype; given an fp32 one, it works on floats and the wrapper rounds what it
 * wrote. The same values either way, so the storage changes no number. A model stores the
 * sublayers' activations at rt_act_dtype (dtype on a backend whose ops take 16-bit handles, the
 * CPU and CUDA), and so is the residual stream inside a stack: the sums inside a block (after
 * attention, after cross-attention; post-norm, the norms' inputs and norm1's output) and the
 * residual between blocks (llm.c's floatX residual), and at tp = 1 the branches it adds (a
 * row-parallel linear's output), their gradients after dropout and the sublayers' input gradients
 * (the column-parallel linears' dX, which the norms' backward reads). What crosses ranks stays in
 * fp32 buffers holding values rounded to dtype as every stored activation: the stack's two ends
 * (its input, where the embeddings land, and its output, which the final norm or a head reads; a
 * pipeline stage's boundaries), the branches and the sublayers' input gradients under tp (an
 * all-reduce sums them), and the residual gradient the norms' backward adds into. Attention's
 * probabilities are stored at dtype by the op (rt_attn_desc.probs_dtype).
 * RT_F32 switches it off. RT_ERR_UNSUPPORTED, naming the backend, where it has no such matmul. */
rt_status rt_set_precision(rt_backend *be, rt_dtype dtype);

/* The weights' copy at the compute precision, as mixed-precision training keeps one: while it is
 * set, matmul inputs that lie in w[0 .. n) (the parameter slab) are read from the copy instead of
 * being rounded at each use, and the adamw op writes it as it updates each weight. Anything else
 * that changes weights while it is set says so with rt_weight_copy_update (ZeRO's all-gather).
 * n 0 drops it. The trainer sets it for its loop only, after loading and resuming, so code
 * outside the loop never reads a stale copy. A no-op at fp32 and on a backend without the ops.
 * CPU: bf16 bits for oneDNN, or rounded floats for the fp32 GEMM; CUDA: bf16/fp16 for cuBLASLt. */
/* For backends keeping the copy: the part of [p, p + n) that lies in [w, w + w_n), as its offset
 * from w (*at) and its length (0: none). */
static inline size_t rt_weight_copy_overlap(const float *w, size_t w_n, const float *p, size_t n, size_t *at) {
    if (!w || p + n <= w || p >= w + w_n) return 0;
    const float *lo = p > w ? p : w, *hi = p + n < w + w_n ? p + n : w + w_n;
    *at = (size_t)(lo - w);
    return (size_t)(hi - lo);
}
static inline rt_status rt_weight_copy_set(rt_backend *be, const float *w, size_t n) {
    return be->ops->weight_copy_set ? be->ops->weight_copy_set(be->ctx, w, n) : RT_OK;
}
static inline void rt_weight_copy_update(rt_backend *be, const float *part, size_t n) {
    if (be->ops->weight_copy_update && n) be->ops->weight_copy_update(be->ctx, part, n);
}

/* Stores rows x cols of x (row stride ld) at the compute precision: rounds in place unless fp32.
 * For model code that writes an activation without a backend op (rt_scale on one, a copy). */
static inline void rt_store(rt_backend *be, float *x, size_t rows, int cols, size_t ld) {
    if (be->muted) return;
    if (be->compute != RT_F32 && x && rows && cols) be->ops->round_to(be->ctx, be->compute, x, rows, cols, ld);
}
static inline void rt_store_n(rt_backend *be, float *x, size_t n) { rt_store(be, x, n, 1, 1); }
/* What a model stores activations as (rt_x): the compute precision where the backend's ops read
 * and write 16-bit handles and the reference's fp32 buffers are not asked for, else RT_F32. */
static inline rt_dtype rt_act_dtype(const rt_backend *be) {
    return be->compute != RT_F32 && be->typed_acts && !be->keep_fp32 ? be->compute : RT_F32;
}
/* rt_store for a handle: an fp32 one is rounded in place; a 16-bit one was stored by its op, at
 * the compute precision (checked: a handle of another type is a bug). */
static inline void rt_store_x(rt_backend *be, rt_x x, size_t rows, int cols, size_t ld) {
    if (be->muted) return;
    if (x.t == RT_F32) {
        rt_store(be, (float *)x.p, rows, cols, ld);
        return;
    }
    RT_CHECK(x.t == be->compute, "a %s activation under %s compute", rt_dtype_name(x.t), rt_dtype_name(be->compute));
}
static inline void rt_store_xn(rt_backend *be, rt_x x, size_t n) { rt_store_x(be, x, n, 1, 1); }

/* Convenience: allocate or fail with a message naming what. */
rt_status rt_backend_alloc(rt_backend *be, size_t bytes, const char *what, void **out);

/* Every op through one inline call: rt_gemm(be, ...) is be->ops->gemm(be->ctx, ...), then the
 * outputs that are activations are stored at the compute precision: by the op itself where the
 * ops' comments say so (the norms, the residual step, add, dropout, embedding, gather_rows,
 * relbias), else by the wrapper (rt_store; a no-op in fp32).
 * Parameter gradients, statistics, losses and rt_axpy/rt_scale/rt_scale_rows/rt_scatter_rows_add
 * (arithmetic on any buffer, parameters included) are left in fp32. alloc is reached through
 * rt_backend_alloc (which counts the bytes), device_model is optional. */
static inline void rt_free_device(rt_backend *be, void *p) { be->ops->free(be->ctx, p); }
/* rt_free_device for a buffer of known size, counted in bytes_freed (for memory given back
 * while a run goes on: ZeRO's released slabs and gathered blocks). */
static inline void rt_free_sized(rt_backend *be, void *p, size_t bytes) {
    be->ops->free(be->ctx, p);
    be->bytes_freed += bytes;
}
/* Bytes held now through rt_backend_alloc, as far as frees were counted (rt_free_sized). */
static inline size_t rt_bytes_held(const rt_backend *be) { return be->bytes_allocated - be->bytes_freed; }
static inline size_t rt_free_memory(const rt_backend *be) { return be->ops->free_memory(be->ctx); }
static inline void rt_to_device(rt_backend *be, void *dst, const void *host_src, size_t bytes) {
    be->traffic.uploads++;
    be->traffic.upload_bytes += bytes;
    be->ops->to_device(be->ctx, dst, host_src, bytes);
}
static inline void rt_to_host(rt_backend *be, void *host_dst, const void *src, size_t bytes) {
    be->traffic.reads++;
    be->ops->to_host(be->ctx, host_dst, src, bytes);
}
static inline void rt_copy(rt_backend *be, void *dst, const void *src, size_t bytes) {
    if (be->muted) return;
    be->ops->copy(be->ctx, dst, src, bytes);
}
static inline void rt_clear(rt_backend *be, void *p, size_t bytes) {
    if (!be->muted) be->ops->zero(be->ctx, p, bytes);
}
static inline void rt_sync(rt_backend *be) {
    be->traffic.syncs++;
    be->ops->sync(be->ctx);
}
/* How many times the backend has (re)allocated memory of its own (scratch that grew, the weights'
 * copy): a captured graph holds the addresses it had then. 0 where the backend does not say. */
static inline uint64_t rt_memory_epoch(rt_backend *be) {
    return be->ops->memory_epoch ? be->ops->memory_epoch(be->ctx) : 0;
}
/* C is an activation (or its gradient): stored. */
static inline void rt_gemm(rt_backend *be, bool trans_a, bool trans_b, int M, int N, int K, float alpha, rt_x A,
                           int lda, size_t stride_a, rt_x B, int ldb, size_t stride_b, float beta, rt_x C, int ldc,
                           size_t stride_c, int batch) {
    if (be->muted) return;
    be->ops->gemm(be->ctx, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c,
                  batch);
    for (int b = 0; b < batch; b++) rt_store_x(be, rt_x_at(C, (size_t)b * stride_c), (size_t)M, N, (size_t)ldc);
}
/* rt_gemm into a parameter's fp32 gradient: C is not stored at the compute precision. */
static inline void rt_gemm_grad(rt_backend *be, bool trans_a, bool trans_b, int M, int N, int K, float alpha, rt_x A,
                                int lda, rt_x B, int ldb, float beta, float *C, int ldc) {
    if (be->muted) return;
    be->ops->gemm(be->ctx, trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, rt_xf(C), ldc, 0, 1);
}
/* The fused linear layer (see the ops): the backend's fusion, or the plain ops in its order. */
static inline void rt_linear_fwd(rt_backend *be, rt_x out, rt_x pre, rt_x X, const float *W, const float *b, size_t N,
                                 int in, int out_f, const rt_act_kind *act) {
    if (be->muted) return;
    if (!be->ops->linear_fwd || !be->ops->linear_fwd(be->ctx, out, pre, X, W, b, N, in, out_f, act)) {
        float *pre32 = rt_x_floats(pre, "linear_fwd composed"); /* bias and act read the fp32 sum */
        be->ops->gemm(be->ctx, false, true, (int)N, out_f, in, 1.0f, X, in, 0, rt_xf(W), in, 0, 0.0f, pre, out_f, 0, 1);
        if (b) be->ops->add_bias(be->ctx, pre32, b, N, out_f);
        if (act) be->ops->act_fwd(be->ctx, *act, out, pre, N * (size_t)out_f);
    }
    rt_store_xn(be, pre, N * (size_t)out_f);
    if (act) rt_store_xn(be, out, N * (size_t)out_f);
}
/* dW NULL: a frozen weight (rt_params_grad), whose product is skipped; db is still summed. */
static inline void rt_linear_wgrad(rt_backend *be, float *dW, float *db, rt_x dY, rt_x X, size_t N, int in, int out_f) {
    if (be->muted) return;
    if (!dW) {
        if (db) be->ops->bias_bwd(be->ctx, db, dY, N, out_f);
        return;
    }
    if (be->ops->linear_wgrad && be->ops->linear_wgrad(be->ctx, dW, db, dY, X, N, in, out_f)) return;
    be->ops->gemm(be->ctx, true, false, out_f, in, (int)N, 1.0f, dY, out_f, 0, X, in, 0, 1.0f, rt_xf(dW), in, 0, 1);
    if (db) be->ops->bias_bwd(be->ctx, db, dY, N, out_f);
}
static inline void rt_linear_dact(rt_backend *be, rt_x dpre, float *db, rt_x dY, const float *W, rt_x pre, size_t N,
                                  int in, int out_f, rt_act_kind act) {
    if (be->muted) return;
    if (!be->ops->linear_dact || !be->ops->linear_dact(be->ctx, dpre, db, dY, W, pre, N, in, out_f, act)) {
        (void)rt_x_floats(dpre, "linear_dact composed"); /* act' and the bias sums read the fp32 product */
        be->ops->gemm(be->ctx, false, false, (int)N, in, out_f, 1.0f, dY, out_f, 0, rt_xf(W), in, 0, 0.0f, dpre, in, 0,
                      1);
        be->ops->act_bwd(be->ctx, act, dpre, pre, dpre, N * (size_t)in);
        if (db) be->ops->bias_bwd(be->ctx, db, dpre, N, in); /* from the fp32 product, as the epilogue */
    }
    rt_store_xn(be, dpre, N * (size_t)in);
}
static inline void rt_layernorm_fwd(rt_backend *be, rt_x out, float *mean, float *rstd, rt_x inp, const float *weight,
                                    const float *bias, size_t N, int C, float eps) {
    if (be->muted) return;
    be->ops->layernorm_fwd(be->ctx, out, mean, rstd, inp, weight, bias, N, C, eps);
}
static inline void rt_layernorm_bwd(rt_backend *be, float *dinp, float *dweight, float *dbias, rt_x dout, rt_x inp,
                                    const float *weight, const float *mean, const float *rstd, size_t N, int C) {
    if (be->muted) return;
    be->ops->layernorm_bwd(be->ctx, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
static inline void rt_rmsnorm_fwd(rt_backend *be, rt_x out, float *rstd, rt_x inp, const float *weight, size_t N, int C,
                                  float eps) {
    if (be->muted) return;
    be->ops->rmsnorm_fwd(be->ctx, out, rstd, inp, weight, N, C, eps);
}
static inline void rt_rmsnorm_bwd(rt_backend *be, float *dinp, float *dweight, rt_x dout, rt_x inp, const float *weight,
                                  const float *rstd, size_t N, int C) {
    if (be->muted) return;
    be->ops->rmsnorm_bwd(be->ctx, dinp, dweight, dout, inp, weight, rstd, N, C);
}
static inline void rt_act_fwd(rt_backend *be, rt_act_kind kind, rt_x out, rt_x inp, size_t n) {
    if (be->muted) return;
    be->ops->act_fwd(be->ctx, kind, out, inp, n);
    rt_store_xn(be, out, n);
}
static inline void rt_act_bwd(rt_backend *be, rt_act_kind kind, rt_x dinp, rt_x inp, rt_x dout, size_t n) {
    if (be->muted) return;
    be->ops->act_bwd(be->ctx, kind, dinp, inp, dout, n);
    rt_store_xn(be, dinp, n);
}
static inline void rt_gated_act_fwd(rt_backend *be, rt_act_kind kind, rt_x out, rt_x gate, rt_x lin, size_t n) {
    if (be->muted) return;
    be->ops->gated_act_fwd(be->ctx, kind, out, gate, lin, n);
    rt_store_xn(be, out, n);
}
static inline void rt_gated_act_bwd(rt_backend *be, rt_act_kind kind, rt_x dgate, rt_x dlin, rt_x gate, rt_x lin,
                                    rt_x dout, size_t n) {
    if (be->muted) return;
    be->ops->gated_act_bwd(be->ctx, kind, dgate, dlin, gate, lin, dout, n);
    rt_store_xn(be, dgate, n);
    rt_store_xn(be, dlin, n);
}
static inline void rt_add_bias(rt_backend *be, float *out, const float *bias, size_t N, int C) {
    if (be->muted) return;
    be->ops->add_bias(be->ctx, out, bias, N, C);
    rt_store_n(be, out, N * (size_t)C);
}
/* The parameter-gradient wrappers below do nothing for a NULL gradient: a frozen parameter's. */
static inline void rt_bias_bwd(rt_backend *be, float *dbias, rt_x dout, size_t N, int C) {
    if (be->muted) return;
    if (dbias) be->ops->bias_bwd(be->ctx, dbias, dout, N, C);
}
static inline void rt_add(rt_backend *be, rt_x out, rt_x a, rt_x b, size_t n) {
    if (!be->muted) be->ops->add(be->ctx, out, a, b, n);
}
static inline void rt_axpy(rt_backend *be, float *y, float alpha, const float *x, size_t n) {
    if (be->muted) return;
    be->ops->axpy(be->ctx, y, alpha, x, n);
}
static inline void rt_scale(rt_backend *be, float *x, float s, size_t n) {
    if (!be->muted) be->ops->scale(be->ctx, x, s, n);
}
static inline void rt_scale_rows(rt_backend *be, rt_x x, const float *w, size_t N, int C) {
    if (be->muted) return;
    be->ops->scale_rows(be->ctx, x, w, N, C);
}
static inline bool rt_clamp_inf(rt_backend *be, rt_x x, size_t n, float limit) {
    if (be->muted) return false;
    if (!be->ops->clamp_inf(be->ctx, x, n, limit)) return false;
    rt_store_xn(be, x, n);
    return true;
}
static inline void rt_clamp_abs_bwd(rt_backend *be, float *dx, rt_x y, size_t n, float limit) {
    if (be->muted) return;
    be->ops->clamp_abs_bwd(be->ctx, dx, y, n, limit);
}
/* Bytes one query row of attention d keeps for its backward: Tk probabilities, or what a fused
 * attention keeps instead (rt_backend_ops.attention_kept_row). */
static inline size_t rt_attn_kept_row_bytes(rt_backend *be, const rt_attn_desc *d) {
    const size_t row = be->ops->attention_kept_row ? be->ops->attention_kept_row(be->ctx, d) : 0;
    return row ? row : (size_t)d->Tk * rt_attn_probs_size(d->probs_dtype);
}
/* Bytes the probabilities buffer of attention d needs: its B x NH x Tq rows. */
static inline size_t rt_attn_kept_bytes(rt_backend *be, const rt_attn_desc *d) {
    return (size_t)d->B * d->NH * d->Tq * rt_attn_kept_row_bytes(be, d);
}
/* Aborts, naming the fields, on a descriptor no backend takes: a size not positive, a row
 * stride under NH x HS or past a GEMM's int, causal with Tq != Tk, dropout outside [0, 1),
 * heads outside heads_total, probabilities of another dtype. The wrappers below check every
 * call, so the backends' ops need not. */
void rt_attn_check(const rt_attn_desc *d);
/* 16-bit probabilities are stored at the compute precision by the op itself; fp32 ones are
 * rounded after it, as any activation. */
static inline void rt_attention_fwd(rt_backend *be, const rt_attn_desc *d, rt_x out, void *probs, rt_x q, rt_x k,
                                    rt_x v) {
    if (be->muted) return;
    rt_attn_check(d);
    be->traffic.draws += d->dropout_p > 0 && !d->stream_step;
    RT_CHECK(d->probs_dtype == RT_F32 || d->probs_dtype == be->compute,
             "attention probabilities stored as %s under %s compute", rt_dtype_name(d->probs_dtype),
             rt_dtype_name(be->compute));
    be->ops->attention_fwd(be->ctx, d, out, probs, q, k, v);
    rt_store_x(be, out, (size_t)d->B * d->Tq, d->NH * d->HS, d->ldo);
    if (d->probs_dtype == RT_F32) rt_store_n(be, (float *)probs, (size_t)d->B * d->NH * d->Tq * d->Tk);
}
static inline void rt_attention_bwd(rt_backend *be, const rt_attn_desc *d, rt_x dq, rt_x dk, rt_x dv, float *dbias,
                                    rt_x dout, const void *probs, rt_x q, rt_x k, rt_x v) {
    if (be->muted) return;
    rt_attn_check(d);
    be->traffic.draws += d->dropout_p > 0 && !d->stream_step;
    be->ops->attention_bwd(be->ctx, d, dq, dk, dv, dbias, dout, probs, q, k, v);
    rt_store_x(be, dq, (size_t)d->B * d->Tq, d->NH * d->HS, d->ldq);
    rt_store_x(be, dk, (size_t)d->B * d->Tk, d->NH * d->HS, d->ldk);
    rt_store_x(be, dv, (size_t)d->B * d->Tk, d->NH * d->HS, d->ldv);
}
static inline void rt_relbias_fwd(rt_backend *be, float *bias, const float *table, const int32_t *buckets, int NH,
                                  int Tq, int Tk, int num_buckets) {
    if (be->muted) return;
    be->ops->relbias_fwd(be->ctx, bias, table, buckets, NH, Tq, Tk, num_buckets);
}
static inline void rt_relbias_bwd(rt_backend *be, float *dtable, const float *dbias, const int32_t *buckets, int NH,
                                  int Tq, int Tk, int num_buckets) {
    if (be->muted) return;
    if (dtable) be->ops->relbias_bwd(be->ctx, dtable, dbias, buckets, NH, Tq, Tk, num_buckets);
}
static inline void rt_embedding_fwd(rt_backend *be, float *out, const int32_t *ids, const float *table, size_t N, int C,
                                    int vocab_start, int V, bool accumulate) {
    if (be->muted) return;
    be->ops->embedding_fwd(be->ctx, out, ids, table, N, C, vocab_start, V, accumulate);
}
static inline void rt_embedding_bwd(rt_backend *be, float *dtable, const float *dout, const int32_t *ids, size_t N,
                                    int C, int vocab_start, int V) {
    if (be->muted) return;
    if (dtable) be->ops->embedding_bwd(be->ctx, dtable, dout, ids, N, C, vocab_start, V);
}
static inline void rt_softmax_xent(rt_backend *be, float *losses, float *dlogits, float *probs, const float *logits,
                                   const int32_t *targets, size_t N, int V, float grad_scale) {
    if (be->muted) return;
    be->ops->softmax_xent(be->ctx, losses, dlogits, probs, logits, targets, N, V, grad_scale);
    rt_store_n(be, dlogits, N * (size_t)V);
}
static inline void rt_mse_loss(rt_backend *be, float *losses, float *dlogits, const float *z, const float *targets,
                               size_t N, float grad_scale) {
    if (be->muted) return;
    be->ops->mse_loss(be->ctx, losses, dlogits, z, targets, N, grad_scale);
    rt_store_n(be, dlogits, N);
}
static inline void rt_bce_logits_loss(rt_backend *be, float *losses, float *dlogits, const float *z,
                                      const float *targets, size_t N, int C, float grad_scale) {
    if (be->muted) return;
    be->ops->bce_logits_loss(be->ctx, losses, dlogits, z, targets, N, C, grad_scale);
    rt_store_n(be, dlogits, N * (size_t)C);
}
static inline void rt_xent_vocab(rt_backend *be, int phase, float *stats, float *losses, rt_x dlogits, rt_x logits,
                                 const float *col_mask, const int32_t *targets, size_t N, int V, int vocab_start,
                                 float grad_scale) {
    if (be->muted) return;
    be->ops->xent_vocab(be->ctx, phase, stats, losses, dlogits, logits, col_mask, targets, N, V, vocab_start,
                        grad_scale);
    if (phase == 2 && dlogits.p) rt_store_xn(be, dlogits, N * (size_t)V);
}
static inline void rt_dropout_fwd(rt_backend *be, float *out, const float *inp, size_t n, float p, uint64_t seed,
                                  uint64_t stream, const uint64_t *step) {
    if (be->muted) return;
    be->traffic.draws += p > 0 && !step;
    be->ops->dropout_fwd(be->ctx, out, inp, n, p, seed, stream, step);
}
static inline void rt_dropout_bwd(rt_backend *be, float *dinp, const float *dout, size_t n, float p, uint64_t seed,
                                  uint64_t stream, const uint64_t *step) {
    if (be->muted) return;
    be->traffic.draws += p > 0 && !step;
    be->ops->dropout_bwd(be->ctx, dinp, dout, n, p, seed, stream, step);
}
static inline void rt_dropout_cols(rt_backend *be, rt_x out, rt_x inp, size_t rows, int cols, int cols_total,
                                   int col_offset, float p, uint64_t seed, uint64_t stream, const uint64_t *step) {
    if (be->muted) return;
    be->traffic.draws += p > 0 && !step;
    be->ops->dropout_cols(be->ctx, out, inp, rows, cols, cols_total, col_offset, p, seed, stream, step);
}
/* The fused residual step (see the ops), or where the backend has no such op, the ops it fuses in
 * the same order: the dropped branch into sum, the add, the norm (with fp32 handles: a backend
 * with typed activations has the op). */
static inline void rt_residual_fwd(rt_backend *be, const rt_residual_desc *d, rt_x sum, rt_x out, float *mean,
                                   float *rstd, rt_x res, rt_x branch) {
    if (be->muted) return;
    RT_CHECK(sum.p != res.p && sum.p != branch.p, "residual_fwd: sum aliases an input");
    if (be->ops->residual_fwd) {
        be->traffic.draws += d->dropout_p > 0 && !d->stream_step;
        be->ops->residual_fwd(be->ctx, d, sum, out, mean, rstd, res, branch);
        return;
    }
    const size_t n = d->N * (size_t)d->C;
    float *s = rt_x_floats(sum, "composed residual_fwd's sum");
    const float *b = rt_x_floats(branch, "composed residual_fwd's branch");
    if (d->dropout_p > 0) {
        rt_dropout_fwd(be, s, b, n, d->dropout_p, d->seed, d->stream, d->stream_step);
        b = s;
    }
    rt_add(be, sum, res, rt_xf(b), n);
    if (!d->weight) return;
    if (d->rms)
        rt_rmsnorm_fwd(be, out, rstd, sum, d->weight, d->N, d->C, d->eps);
    else
        rt_layernorm_fwd(be, out, mean, rstd, sum, d->weight, d->bias, d->N, d->C, d->eps);
}
static inline void rt_residual_bwd(rt_backend *be, const rt_residual_desc *d, float *dres, rt_x dbranch, float *dweight,
                                   float *dbias, rt_x dout, rt_x sum, const float *mean, const float *rstd) {
    if (be->muted) return;
    if (be->ops->residual_bwd) {
        be->traffic.draws += d->dropout_p > 0 && !d->stream_step;
        be->ops->residual_bwd(be->ctx, d, dres, dbranch, dweight, dbias, dout, sum, mean, rstd);
        return;
    }
    if (d->weight && d->rms)
        rt_rmsnorm_bwd(be, dres, dweight, dout, sum, d->weight, rstd, d->N, d->C);
    else if (d->weight)
        rt_layernorm_bwd(be, dres, dweight, dbias, dout, sum, d->weight, mean, rstd, d->N, d->C);
    if (d->dropout_p > 0)
        rt_dropout_bwd(be, rt_x_floats(dbranch, "composed residual_bwd's dbranch"), dres, d->N * (size_t)d->C,
                       d->dropout_p, d->seed, d->stream, d->stream_step);
}
static inline void rt_gather_rows(rt_backend *be, float *out, const float *inp, const int32_t *idx, int B, int C) {
    if (be->muted) return;
    be->ops->gather_rows(be->ctx, out, inp, idx, B, C);
}
static inline void rt_scatter_rows_add(rt_backend *be, float *dinp, rt_x dout, const int32_t *idx, int B, int C) {
    if (be->muted) return;
    be->ops->scatter_rows_add(be->ctx, dinp, dout, idx, B, C);
}
static inline void rt_adamw(rt_backend *be, float *params, const float *grads, float *m, float *v, size_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, float grad_scale, int64_t t) {
    if (be->muted) return;
    be->ops->adamw(be->ctx, params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t);
}
static inline double rt_sumsq(rt_backend *be, const float *x, size_t n) { return be->ops->sumsq(be->ctx, x, n); }
/* Step graphs (rt_backend_ops.graph_*): a backend without them has none. */
static inline bool rt_has_graphs(const rt_backend *be) { return be->ops->graph_capture_begin != NULL; }
/* A rehearsal mutes the backend's ops and sends its uploads to the graph's staging. */
static inline void rt_graph_rehearse_begin(rt_backend *be, void *graph) {
    be->ops->graph_rehearse_begin(be->ctx, graph);
    be->muted = true;
}
static inline bool rt_graph_rehearse_end(rt_backend *be) {
    be->muted = false;
    return be->ops->graph_rehearse_end(be->ctx);
}

/* The heads' losses added onto the step's record (a loss sink, mdl_pass.loss_sink). */
static inline void rt_loss_into(rt_backend *be, double *sink, const float *losses, size_t n) {
    if (be->muted) return;
    be->ops->loss_into(be->ctx, sink, losses, n);
}

#endif
