/* Which attention calls cuDNN's fused SDPA takes (TZ_CUDA_ATTENTION=cudnn, cuda_sdpa.cc), and the
 * key its execution plans are cached under: plain C with no CUDA in it, so tests/test_sdpa_plan.c
 * checks it on any machine.
 *
 * Taken: 16-bit q, k, v and out (the compute type, bf16 or fp16) on sm_80 or newer; head size a
 * multiple of 8 up to 128; every row stride a multiple of 8 values (16-byte rows); causal or not,
 * with or without dropout; padding on the right given as lengths (rt_attn_desc.key_len: cuDNN's
 * padding mask, every query row kept); T5's position bias, as cuDNN's bias input at the compute
 * type, with its gradient; GLM's bidirectional prefix, as a (B, 1, Tq, Tk) bias that masks what the
 * CPU does not score. Not taken: another key mask (left padding, a hole, a row with no key), a
 * position bias or a prefix beside such a mask, fp32 activations, and one query (decoding), where
 * each new length would build a plan. Those stay on the materialized path (cuda_attention.cu). What
 * the path keeps for the backward in the probabilities buffer, per query row: the softmax's
 * log-sum-exp (fp32) and the row's output (HS values of the compute type), since cuDNN's backward
 * reads O. */
#ifndef CUDA_SDPA_PLAN_H
#define CUDA_SDPA_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" { /* C++ (cuda_sdpa.cc, the .cu files) sees the C declarations as C */
#endif
#include "runtime/backend/rt_backend.h"
#ifdef __cplusplus
}
#endif

#define RT_SDPA_MAX_HEAD 128

/* The first cuDNN whose backward takes a bias gradient with padding, and lengths that are not
 * multiples of 64 (cudnn-frontend's support checks). */
#define RT_SDPA_DBIAS_ANY_CUDNN 90500

#ifdef __CUDACC__
#define RT_SDPA_HD __host__ __device__
#else
#define RT_SDPA_HD
#endif

/* The additive bias a call gives cuDNN's graph, if any. */
typedef enum {
    RT_SDPA_BIAS_NONE = 0,
    RT_SDPA_BIAS_POSITION, /* d->bias (NH, Tq, Tk), as (1, NH, Tq, Tk) at the compute type; its gradient
                            * when the backward asks for one */
    RT_SDPA_BIAS_PREFIX    /* GLM: causal with a prefix, as a (B, 1, Tq, Tk) mask (rt_sdpa_prefix_mask) in
                            * place of cuDNN's causal mask */
} rt_sdpa_bias_kind;

/* A prefix counts only with causal attention, as on the CPU (cpu_attention.c). */
static inline rt_sdpa_bias_kind rt_sdpa_bias_of(const rt_attn_desc *d) {
    if (d->bias) return RT_SDPA_BIAS_POSITION;
    if (d->causal && d->prefix) return RT_SDPA_BIAS_PREFIX;
    return RT_SDPA_BIAS_NONE;
}

/* The prefix mask at query i, key j of a batch row whose prefix is `prefix`: 0 where the CPU scores
 * the key (j <= i, or j < prefix), else neg (rt_sdpa_mask_neg). Every row keeps key 0. */
static inline RT_SDPA_HD float rt_sdpa_prefix_mask(int i, int j, int32_t prefix, float neg) {
    return j <= i || j < prefix ? 0.0f : neg;
}

/* The masked keys' bias at type io: finite, so that exp gives exactly 0 beside any real score
 * (fp16's lowest value; bf16 holds the models' own -1e30). */
static inline float rt_sdpa_mask_neg(rt_dtype io) { return io == RT_F16 ? -65504.0f : -1e30f; }

/* Why cuDNN's SDPA (version cudnn_version, cudnnGetVersion's number) does not take attentions of
 * d's shape (sizes, strides, causal, dropout, whether there is a position bias) with activations of
 * type io on a GPU of compute capability sm_major, whatever their masks; NULL when it takes some.
 * What a stack lays out for its attention follows this (rt_cuda_attention_kept_row): a shape
 * cuDNN takes keeps rt_sdpa_kept_row bytes a query row, and a call of that shape the masks make
 * it refuse runs on the materialized path, which then recomputes the probabilities in its
 * backward instead of keeping them. */
static inline const char *rt_sdpa_shape_unsupported(const rt_attn_desc *d, rt_dtype io, int sm_major,
                                                    long cudnn_version) {
    if (sm_major < 8) return "the GPU is older than sm_80";
    if (io != RT_BF16 && io != RT_F16) return "fp32 activations (cuDNN's SDPA reads bf16 or fp16)";
    if (d->HS % 8 != 0 || d->HS > RT_SDPA_MAX_HEAD) return "a head size that is not a multiple of 8 up to 128";
    if (d->ldq % 8 != 0 || d->ldk % 8 != 0 || d->ldv % 8 != 0 || d->ldo % 8 != 0)
        return "a row stride that is not a multiple of 8 values";
    if (d->causal && d->Tq != d->Tk) return "causal attention with Tq != Tk";
    if (d->Tq == 1) return "one query (decoding: each length would build a plan)";
    if (sm_major >= 10 && (d->dropout_p > 0.0f || d->bias))
        return "dropout or a position bias on sm_100 or newer (cuDNN has no deterministic backward for them)";
    return NULL;
}

/* Why cuDNN's SDPA does not take attention d itself, masks included, or NULL when it does. A
 * forward is taken only where its backward will be too, since the backward must read what the
 * forward kept: a position bias's gradient counts, as training asks for it. */
static inline const char *rt_sdpa_unsupported(const rt_attn_desc *d, rt_dtype io, int sm_major, long cudnn_version) {
    const char *shape = rt_sdpa_shape_unsupported(d, io, sm_major, cudnn_version);
    if (shape) return shape;
    if (d->key_mask && !d->key_len) return "a key mask that is not right padding given as lengths";
    if (d->bias && d->causal && d->prefix) return "a position bias with a bidirectional prefix";
    if (rt_sdpa_bias_of(d) == RT_SDPA_BIAS_PREFIX && d->key_mask) return "a bidirectional prefix (GLM) with a key mask";
    if (d->bias && cudnn_version < RT_SDPA_DBIAS_ANY_CUDNN && (d->key_len || d->Tq % 64 != 0 || d->Tk % 64 != 0))
        return "a position bias's gradient with padding or lengths not multiples of 64 (cuDNN before 9.5)";
    return NULL;
}

/* Bytes per query row the path keeps in the probabilities buffer: the row's output at the
 * compute type, then its log-sum-exp. The buffer holds every row's output first
 * (B, Tq, NH, HS, packed), then the statistics (B, NH, Tq). With the path on, the backend sizes
 * the buffer for this where the shape is one cuDNN takes (rt_sdpa_shape_unsupported), else for
 * the probabilities (rt_cuda_attention_kept_row). */
static inline size_t rt_sdpa_kept_row(const rt_attn_desc *d) { return (size_t)d->HS * 2 + sizeof(float); }
static inline size_t rt_sdpa_stats_offset(const rt_attn_desc *d) { return (size_t)d->B * d->NH * d->Tq * d->HS * 2; }

/* What an execution plan depends on: shapes, strides, the masks and bias, the type, the direction, and the
 * scale and dropout rate, which a graph is built with (their bits; a model's are fixed). The
 * dropout's seed is passed at run time. */
typedef struct {
    int64_t B, NH, Tq, Tk, HS;
    int64_t ldq, ldk, ldv, ldo;
    int32_t io;       /* rt_dtype */
    int32_t backward; /* 0 forward, 1 backward */
    int32_t causal, padding;
    int32_t bias;                      /* rt_sdpa_bias_kind */
    int32_t dbias;                     /* backward: the position bias's gradient is written */
    uint32_t scale_bits, dropout_bits; /* dropout_bits 0: no dropout */
} rt_sdpa_key;

/* dbias: a backward that writes the position bias's gradient (ignored elsewhere). */
static inline rt_sdpa_key rt_sdpa_key_of(const rt_attn_desc *d, rt_dtype io, bool backward, bool dbias) {
    rt_sdpa_key k;
    memset(&k, 0, sizeof k); /* the key is compared bytewise */
    k.B = d->B;
    k.NH = d->NH;
    k.Tq = d->Tq;
    k.Tk = d->Tk;
    k.HS = d->HS;
    k.ldq = (int64_t)d->ldq;
    k.ldk = (int64_t)d->ldk;
    k.ldv = (int64_t)d->ldv;
    k.ldo = (int64_t)d->ldo;
    k.io = (int32_t)io;
    k.backward = backward;
    k.causal = d->causal;
    k.padding = d->key_len != NULL;
    k.bias = (int32_t)rt_sdpa_bias_of(d);
    k.dbias = backward && dbias && k.bias == RT_SDPA_BIAS_POSITION;
    memcpy(&k.scale_bits, &d->scale, sizeof k.scale_bits);
    if (d->dropout_p > 0.0f) memcpy(&k.dropout_bits, &d->dropout_p, sizeof k.dropout_bits);
    return k;
}

static inline bool rt_sdpa_key_equal(const rt_sdpa_key *a, const rt_sdpa_key *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

/* The seed and offset of cuDNN's dropout (its own Philox masks, as DESIGN.md allows on the GPU)
 * for a call's counter RNG (seed, stream) and its heads under tensor parallelism: each dropout
 * site, and another rank's heads, get a seed of their own (splitmix64 of the three), offset 0.
 * Forward and backward pass the same, so the backward sees the forward's mask. */
static inline void rt_sdpa_dropout_seed(const rt_attn_desc *d, int64_t out[2]) {
    uint64_t z = d->seed ^ (d->stream * 0xD1B54A32D192ED03ull) ^ ((uint64_t)d->head_offset * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    out[0] = (int64_t)(z ^ (z >> 31));
    out[1] = 0;
}

#endif
