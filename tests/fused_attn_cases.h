/* The fused attention's cases, shared by test_flash_tiles (its block code on the CPU) and
 * test_cuda_ops (its kernels on a GPU), each run against the CPU backend's attention. */
#ifndef TZ_FUSED_ATTN_CASES_H
#define TZ_FUSED_ATTN_CASES_H

#include <math.h>
#include <string.h>

#include "runtime/backend/rt_backend.h"
#include "runtime/base/rt_rng.h"

typedef struct {
    const char *name;
    rt_dtype dtype; /* the compute precision; the probabilities are stored in it */
    int B, NH, Tq, Tk, HS;
    bool causal, prefix, mask, fused_qkv; /* fused_qkv: q, k, v views into one (B, T, 3 NH HS) buffer */
    int masked_batch;                     /* with mask: a batch row whose keys are all -inf, or -1 */
    float dropout;
    int head_offset, heads_total;
    bool bias; /* a (NH, Tq, Tk) position bias, and its gradient (T5) */
} fused_attn_case;

static const fused_attn_case FUSED_ATTN_CASES[] = {
    /* BERT: padding masks, a batch row with no key left, dropout, a fused qkv buffer */
    {"encoder mask dropout", RT_BF16, 3, 2, 40, 40, 16, false, false, true, true, 1, 0.1f, 0, 0, false},
    /* GPT-2: causal over two key tiles, head size 64 */
    {"causal 64", RT_BF16, 2, 3, 70, 70, 64, true, false, false, true, -1, 0.1f, 0, 0, false},
    /* GLM: causal with a bidirectional prefix per batch row (FUSED_ATTN_PREFIX), fp16 */
    {"prefix", RT_F16, 2, 2, 37, 37, 32, true, true, false, false, -1, 0.0f, 0, 0, false},
    /* T5-style cross-attention without a bias: Tq != Tk, three key tiles, padded rows */
    {"cross", RT_BF16, 2, 2, 19, 130, 16, false, false, true, false, -1, 0.0f, 0, 0, false},
    /* decoding: one query */
    {"one query", RT_BF16, 2, 2, 1, 9, 16, false, false, false, false, -1, 0.0f, 0, 0, false},
    /* a tensor-parallel shard: heads 3..4 of 6 draw the global heads' dropout */
    {"tp heads", RT_F16, 2, 2, 33, 33, 16, true, false, true, true, -1, 0.2f, 3, 6, false},
    /* head size 48; batch 4, 12 heads at 128 (BERT-base's shape) */
    {"head size 48", RT_BF16, 2, 2, 20, 20, 48, false, false, true, true, -1, 0.1f, 0, 0, false},
    {"batch 4 x 128", RT_BF16, 4, 12, 128, 128, 64, false, false, true, true, 2, 0.1f, 0, 0, false},
    /* T5: the encoder's position bias with a mask and dropout; the decoder's, causal */
    {"t5 encoder bias", RT_BF16, 3, 4, 45, 45, 32, false, false, true, true, 1, 0.1f, 0, 0, true},
    {"t5 decoder bias", RT_F16, 2, 2, 20, 20, 64, true, false, false, true, -1, 0.1f, 0, 0, true},
    /* GPT-2 at 1024 tokens: 16 key tiles, the causal skipping */
    {"gpt2 1024", RT_BF16, 1, 4, 1024, 1024, 64, true, false, false, true, -1, 0.1f, 0, 0, false},
};
#define FUSED_ATTN_CASE_COUNT (sizeof FUSED_ATTN_CASES / sizeof FUSED_ATTN_CASES[0])

/* GLM's bidirectional context per batch row, for cases with prefix */
static const int32_t FUSED_ATTN_PREFIX[4] = {5, 30, 1, 12};

/* A case's description without its masks and bias (the caller's memory): sizes, scale, causality, dropout,
 * heads, and strides (one qkv buffer, or padded rows whose padding must stay untouched). */
static inline rt_attn_desc fused_attn_desc(const fused_attn_case *tc) {
    const size_t C = (size_t)tc->NH * tc->HS;
    rt_attn_desc d;
    memset(&d, 0, sizeof d);
    d.B = tc->B, d.NH = tc->NH, d.Tq = tc->Tq, d.Tk = tc->Tk, d.HS = tc->HS;
    d.scale = 1.0f / sqrtf((float)tc->HS);
    d.causal = tc->causal;
    d.dropout_p = tc->dropout;
    d.seed = 99, d.stream = RT_STREAM(RT_STREAM_DROPOUT, 7);
    d.head_offset = tc->head_offset, d.heads_total = tc->heads_total;
    d.probs_dtype = tc->dtype;
    if (tc->fused_qkv) {
        d.ldq = d.ldk = d.ldv = 3 * C;
        d.ldo = C;
    } else {
        d.ldq = C + 3, d.ldk = C + 1, d.ldv = C + 5, d.ldo = C + 2;
    }
    return d;
}

#endif
