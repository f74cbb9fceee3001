/* The host side of cuDNN's SDPA path (runtime/backend/cuda/cuda_sdpa_plan.h), checked on the CPU:
 * which attention calls it takes (padding only as right-padding lengths, T5's position bias, GLM's
 * prefix) and why it refuses the others (each reason on its own), what it keeps for the backward,
 * the plan cache's key (equal for equal calls, apart for any change a plan depends on, the same
 * across dropout seeds), the dropout seed (the same for a forward and its backward, another for
 * another site or another rank's heads), the prefix mask against the keys the CPU scores, and the
 * models' masks as lengths (models/layers/padding.h), and the stack's room for what attention keeps:
 * Tk probabilities per query row on the CPU, at the compute type, for self- and cross-attention
 * (a probe that measured a whole head's rows as one row laid out T times too much).
 * test_cuda_typed runs the calls on a GPU. */
#include <math.h>
#include <string.h>

#include "models/layers/padding.h"
#include "models/layers/stack.h"
#include "runtime/backend/cuda/cuda_sdpa_plan.h"
#include "tests/testutil.h"

/* GPT-2 124M's self-attention at 16 x 1024 in bf16: q, k and v inside one fused (BT, 3C) buffer. */
static rt_attn_desc gpt2_lm(void) {
    return (rt_attn_desc){.B = 16,
                          .NH = 12,
                          .Tq = 1024,
                          .Tk = 1024,
                          .HS = 64,
                          .ldq = 3 * 768,
                          .ldk = 3 * 768,
                          .ldv = 3 * 768,
                          .ldo = 768,
                          .scale = 0.125f,
                          .causal = true,
                          .dropout_p = 0.1f,
                          .seed = 42,
                          .stream = 7,
                          .probs_dtype = RT_BF16};
}

/* cuDNN 9.26, the pack's */
#define CUDNN 92600L

static void expect_refused_on(rt_attn_desc d, rt_dtype io, int sm, long cudnn, const char *want) {
    const char *why = rt_sdpa_unsupported(&d, io, sm, cudnn);
    TZ_EXPECT(why && strcmp(why, want) == 0, "refused as '%s', want '%s'", why ? why : "(taken)", want);
}

static void expect_refused(rt_attn_desc d, rt_dtype io, int sm, const char *want) {
    expect_refused_on(d, io, sm, CUDNN, want);
}

static void expect_taken(rt_attn_desc d, rt_dtype io, int sm, long cudnn, const char *what) {
    const char *why = rt_sdpa_unsupported(&d, io, sm, cudnn);
    TZ_EXPECT(why == NULL, "%s refused: %s", what, why);
}

/* T5-base's encoder self-attention at 8 x 512: heads of 64, no scaling, the position bias (NH, T, T)
 * and the source's padding as lengths. */
static rt_attn_desc t5_enc(void) {
    static const float bias[1] = {0}, mask[1] = {0};
    static const int32_t lens[8] = {512, 300, 17};
    return (rt_attn_desc){.B = 8,
                          .NH = 12,
                          .Tq = 512,
                          .Tk = 512,
                          .HS = 64,
                          .ldq = 3 * 768,
                          .ldk = 3 * 768,
                          .ldv = 3 * 768,
                          .ldo = 768,
                          .scale = 1.0f,
                          .key_mask = mask,
                          .key_len = lens,
                          .bias = bias,
                          .dropout_p = 0.1f,
                          .probs_dtype = RT_BF16};
}

/* GLM's self-attention: causal after a bidirectional prefix, no key mask. */
static rt_attn_desc glm(void) {
    static const int32_t prefix[4] = {10, 3, 0, 200};
    rt_attn_desc d = gpt2_lm();
    d.B = 4;
    d.Tq = d.Tk = 200;
    d.prefix = prefix;
    return d;
}

static void test_support(void) {
    rt_attn_desc d = gpt2_lm();
    expect_taken(d, RT_BF16, 9, CUDNN, "GPT-2's LM attention");
    expect_taken(d, RT_F16, 8, CUDNN, "fp16 on sm_80");
    d.causal = false; /* BERT-like, no mask: taken */
    d.HS = 128;       /* T5-3B's head */
    d.ldq = d.ldk = d.ldv = d.ldo = 4096;
    expect_taken(d, RT_BF16, 9, CUDNN, "head size 128");
    expect_taken(t5_enc(), RT_BF16, 9, CUDNN, "T5's encoder (position bias, padding as lengths)");
    d = t5_enc(); /* the decoder's self-attention: causal, the bias, no padding */
    d.key_mask = NULL;
    d.key_len = NULL;
    d.causal = true;
    d.Tq = d.Tk = 128;
    expect_taken(d, RT_BF16, 9, CUDNN, "T5's decoder (causal, position bias)");
    expect_taken(d, RT_F16, 9, 90100L, "T5's decoder on cuDNN 9.1 (lengths multiples of 64)");
    d = t5_enc(); /* cross-attention: 128 queries over 512 source keys, padding as lengths */
    d.bias = NULL;
    d.Tq = 128;
    d.ldq = d.ldo = 768;
    d.ldk = d.ldv = 2 * 768;
    expect_taken(d, RT_BF16, 9, CUDNN, "T5's cross-attention");
    expect_taken(glm(), RT_BF16, 9, CUDNN, "GLM's prefix");
    d = glm();
    d.causal = false; /* the CPU reads a prefix only with causal: none here */
    TZ_EXPECT(rt_sdpa_bias_of(&d) == RT_SDPA_BIAS_NONE, "a prefix without causal made a mask");
    const rt_attn_desc g = glm(), t5 = t5_enc(), plain = {.B = 1};
    TZ_EXPECT(rt_sdpa_bias_of(&g) == RT_SDPA_BIAS_PREFIX && rt_sdpa_bias_of(&t5) == RT_SDPA_BIAS_POSITION &&
                  rt_sdpa_bias_of(&plain) == RT_SDPA_BIAS_NONE,
              "the bias kinds");

    expect_refused(gpt2_lm(), RT_BF16, 7, "the GPU is older than sm_80");
    expect_refused(gpt2_lm(), RT_F32, 9, "fp32 activations (cuDNN's SDPA reads bf16 or fp16)");
    d = gpt2_lm();
    d.HS = 12;
    expect_refused(d, RT_BF16, 9, "a head size that is not a multiple of 8 up to 128");
    d.HS = 136;
    expect_refused(d, RT_BF16, 9, "a head size that is not a multiple of 8 up to 128");
    d = gpt2_lm();
    d.ldo = 770;
    expect_refused(d, RT_BF16, 9, "a row stride that is not a multiple of 8 values");
    static const float mask[2] = {0};
    static const int32_t prefix[1] = {0};
    d = gpt2_lm();
    d.key_mask = mask;
    expect_refused(d, RT_BF16, 9, "a key mask that is not right padding given as lengths");
    static const int32_t lens[16] = {1024, 1000, 7};
    d.key_len = lens; /* the same mask as right-padding lengths: cuDNN's padding mask */
    expect_taken(d, RT_BF16, 9, CUDNN, "right padding as lengths");
    d = t5_enc();
    d.key_len = NULL; /* T5 with left padding or a row with no key */
    expect_refused(d, RT_BF16, 9, "a key mask that is not right padding given as lengths");
    d = gpt2_lm();
    d.bias = mask;
    d.prefix = prefix;
    expect_refused(d, RT_BF16, 9, "a position bias with a bidirectional prefix");
    d = glm();
    d.key_mask = mask;
    d.key_len = lens;
    expect_refused(d, RT_BF16, 9, "a bidirectional prefix (GLM) with a key mask");
    d = gpt2_lm();
    expect_refused(d, RT_BF16, 10,
                   "dropout or a position bias on sm_100 or newer (cuDNN has no deterministic "
                   "backward for them)");
    d = t5_enc();
    d.dropout_p = 0.0f;
    expect_refused(d, RT_BF16, 10,
                   "dropout or a position bias on sm_100 or newer (cuDNN has no deterministic "
                   "backward for them)");
    d.bias = NULL; /* sm_100 without either: taken */
    expect_taken(d, RT_BF16, 10, CUDNN, "sm_100 without dropout or bias");
    const char *old_dbias = "a position bias's gradient with padding or lengths not multiples of 64 (cuDNN before 9.5)";
    expect_refused_on(t5_enc(), RT_BF16, 9, 90400L, old_dbias); /* padding */
    d = t5_enc();
    d.key_mask = NULL;
    d.key_len = NULL;
    d.Tq = d.Tk = 100;
    expect_refused_on(d, RT_BF16, 9, 90400L, old_dbias);
    expect_taken(d, RT_BF16, 9, 90500L, "a position bias at 100 on cuDNN 9.5");
    d = gpt2_lm();
    d.Tk = 512;
    expect_refused(d, RT_BF16, 9, "causal attention with Tq != Tk");
    d = gpt2_lm();
    d.causal = false;
    d.Tq = 1;
    expect_refused(d, RT_BF16, 9, "one query (decoding: each length would build a plan)");
}

/* What a stack lays out follows the shape alone: a shape cuDNN takes is taken whatever its masks
 * hold (the materialized path recomputes what it could not keep), one it refuses is not. */
static void test_shape(void) {
    static const float mask[2] = {0};
    rt_attn_desc d = gpt2_lm();
    d.key_mask = mask; /* left padding: no lengths */
    TZ_EXPECT(rt_sdpa_shape_unsupported(&d, RT_BF16, 9, CUDNN) == NULL && rt_sdpa_unsupported(&d, RT_BF16, 9, CUDNN),
              "left padding: the shape is cuDNN's, the call is not");
    d = t5_enc();
    d.key_len = NULL;
    TZ_EXPECT(rt_sdpa_shape_unsupported(&d, RT_BF16, 9, CUDNN) == NULL && rt_sdpa_unsupported(&d, RT_BF16, 9, CUDNN),
              "T5 with a row of no key: the shape is cuDNN's, the call is not");
    d = gpt2_lm();
    d.causal = false;
    d.Tq = 1;
    TZ_EXPECT(rt_sdpa_shape_unsupported(&d, RT_BF16, 9, CUDNN) != NULL, "decoding's shape taken");
    d = gpt2_lm();
    d.HS = 12;
    TZ_EXPECT(rt_sdpa_shape_unsupported(&d, RT_BF16, 9, CUDNN) != NULL, "head size 12's shape taken");
    TZ_EXPECT(rt_sdpa_shape_unsupported(&d, RT_F32, 9, CUDNN) != NULL, "fp32's shape taken");
}

static void test_kept(void) {
    const rt_attn_desc d = gpt2_lm();
    TZ_EXPECT(rt_sdpa_kept_row(&d) == 64 * 2 + 4, "kept row %zu bytes, want 132", rt_sdpa_kept_row(&d));
    const size_t rows = (size_t)16 * 12 * 1024;
    TZ_EXPECT(rt_sdpa_stats_offset(&d) == rows * 64 * 2, "statistics at %zu, want after %zu rows of O",
              rt_sdpa_stats_offset(&d), rows);
    TZ_EXPECT(rt_sdpa_stats_offset(&d) % 16 == 0, "statistics not 16-byte aligned");
    /* what the buffer holds fits the rows it is sized for */
    TZ_EXPECT(rt_sdpa_stats_offset(&d) + rows * sizeof(float) == rows * rt_sdpa_kept_row(&d), "layout past its size");
}

static void test_keys(void) {
    const rt_attn_desc base = gpt2_lm();
    rt_sdpa_key a = rt_sdpa_key_of(&base, RT_BF16, false, false), b = rt_sdpa_key_of(&base, RT_BF16, false, false);
    TZ_EXPECT(rt_sdpa_key_equal(&a, &b), "the same call has two keys");
    rt_attn_desc d = base;
    d.seed = 99; /* the seed, and which lengths (their values are read at run time) */
    d.stream = 3;
    d.head_offset = 6;
    b = rt_sdpa_key_of(&d, RT_BF16, false, false);
    TZ_EXPECT(rt_sdpa_key_equal(&a, &b), "the dropout seed moved the plan's key");
    b = rt_sdpa_key_of(&base, RT_BF16, false, true);
    TZ_EXPECT(rt_sdpa_key_equal(&a, &b), "a forward's key depends on a bias gradient");

    /* each change a plan depends on gives another key */
    static const int32_t lens[16] = {1024}, prefix[16] = {3};
    static const float bias[1] = {0};
    for (int change = 0; change < 14; change++) {
        rt_attn_desc e = base;
        rt_dtype io = RT_BF16;
        switch (change) {
        case 0: e.B = 8; break;
        case 1: e.NH = 6; break;
        case 2: e.Tq = e.Tk = 512; break;
        case 3: e.HS = 32; break;
        case 4: e.ldq = e.ldk = e.ldv = 768; break;
        case 5: e.ldo = 2304; break;
        case 6: e.causal = false; break;
        case 7: e.dropout_p = 0.0f; break;
        case 8: e.dropout_p = 0.2f; break;
        case 9: e.scale = 0.25f; break;
        case 10: e.key_len = lens; break;
        case 11: e.bias = bias; break;
        case 12: e.prefix = prefix; break;
        default: io = RT_F16; break;
        }
        b = rt_sdpa_key_of(&e, io, false, false);
        TZ_EXPECT(!rt_sdpa_key_equal(&a, &b), "change %d kept the key", change);
    }
    b = rt_sdpa_key_of(&base, RT_BF16, true, false);
    TZ_EXPECT(!rt_sdpa_key_equal(&a, &b), "forward and backward share a key");
    /* a backward with the position bias's gradient is another plan; without a position bias the
     * flag means nothing */
    const rt_attn_desc t5 = t5_enc();
    a = rt_sdpa_key_of(&t5, RT_BF16, true, false);
    b = rt_sdpa_key_of(&t5, RT_BF16, true, true);
    TZ_EXPECT(!rt_sdpa_key_equal(&a, &b), "a backward with and without dbias share a key");
    a = rt_sdpa_key_of(&base, RT_BF16, true, false);
    b = rt_sdpa_key_of(&base, RT_BF16, true, true);
    TZ_EXPECT(rt_sdpa_key_equal(&a, &b), "dbias without a position bias moved the key");
}

static void test_dropout_seed(void) {
    const rt_attn_desc d = gpt2_lm();
    int64_t fwd[2], bwd[2], other[2];
    rt_sdpa_dropout_seed(&d, fwd);
    rt_sdpa_dropout_seed(&d, bwd);
    TZ_EXPECT(fwd[0] == bwd[0] && fwd[1] == bwd[1], "a forward and its backward draw different masks");
    rt_attn_desc e = d;
    e.stream = 8;
    rt_sdpa_dropout_seed(&e, other);
    TZ_EXPECT(other[0] != fwd[0], "two dropout sites share a seed");
    e = d;
    e.head_offset = 6;
    e.heads_total = 12;
    rt_sdpa_dropout_seed(&e, other);
    TZ_EXPECT(other[0] != fwd[0], "another rank's heads share the seed");
    e = d;
    e.seed = 43;
    rt_sdpa_dropout_seed(&e, other);
    TZ_EXPECT(other[0] != fwd[0], "another run seed gives the same masks");
}

/* The prefix mask scores exactly the keys cpu_attention.c scores: [0, jend) with jend = i + 1, or
 * the prefix (at most Tk) where that is longer; every query row keeps at least key 0. */
static void test_prefix_mask(void) {
    const int Tk = 9;
    const int32_t prefixes[] = {0, 1, 4, 9, 12};
    int bad = 0;
    for (size_t p = 0; p < sizeof prefixes / sizeof prefixes[0]; p++)
        for (int i = 0; i < Tk; i++) {
            int jend = i + 1;
            if (prefixes[p] > jend) jend = prefixes[p] < Tk ? prefixes[p] : Tk;
            for (int j = 0; j < Tk; j++) {
                const float want = j < jend ? 0.0f : -5.0f;
                bad += rt_sdpa_prefix_mask(i, j, prefixes[p], -5.0f) != want;
            }
            bad += rt_sdpa_prefix_mask(i, 0, prefixes[p], -5.0f) != 0.0f;
        }
    TZ_EXPECT(bad == 0, "%d prefix mask values differ from the keys the CPU scores", bad);
    /* the masked value is finite at the type, and exp of it beside a real score is 0 in fp32 */
    TZ_EXPECT(rt_sdpa_mask_neg(RT_F16) == -65504.0f, "fp16's mask value %g", rt_sdpa_mask_neg(RT_F16));
    TZ_EXPECT(rt_sdpa_mask_neg(RT_BF16) == -1e30f, "bf16's mask value %g", rt_sdpa_mask_neg(RT_BF16));
    TZ_EXPECT(expf(rt_sdpa_mask_neg(RT_F16) + 100.0f) == 0.0f, "fp16's mask leaves a weight");
}

static void test_mask_lengths(void) {
    const int32_t right[6] = {1, 1, 1, 0, 0, 0}, full[6] = {1, 1, 1, 1, 1, 1}, none[6] = {0};
    const int32_t left[6] = {0, 0, 1, 1, 1, 1}, hole[6] = {1, 1, 0, 1, 0, 0};
    TZ_EXPECT(mdl_mask_right_len(right, 6) == 3, "right padding: %d, want 3", mdl_mask_right_len(right, 6));
    TZ_EXPECT(mdl_mask_right_len(full, 6) == 6, "no padding: %d, want 6", mdl_mask_right_len(full, 6));
    TZ_EXPECT(mdl_mask_right_len(NULL, 6) == 6, "no mask: %d, want 6", mdl_mask_right_len(NULL, 6));
    /* no length describes these: 0, and the model passes no lengths for the batch */
    TZ_EXPECT(mdl_mask_right_len(none, 6) == 0, "a row with no key: %d, want 0", mdl_mask_right_len(none, 6));
    TZ_EXPECT(mdl_mask_right_len(left, 6) == 0, "left padding: %d, want 0", mdl_mask_right_len(left, 6));
    TZ_EXPECT(mdl_mask_right_len(hole, 6) == 0, "a hole: %d, want 0", mdl_mask_right_len(hole, 6));
}

/* What a model uploads for a batch: no mask without padding, lengths for right padding only; each
 * activation slot keeps its own upload's (a pipeline stage's micro-batches in flight). */
static void test_padding_upload(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 0, &be));
    if (!be) return;
    mdl_padding p = {0};
    /* as the models do: the arena sets key_len before the host staging is made */
    int32_t *slot_len[2] = {NULL, NULL};
    TZ_EXPECT_OK(rt_backend_alloc(be, 3 * sizeof(int32_t), "key_len", (void **)&slot_len[0]));
    TZ_EXPECT_OK(rt_backend_alloc(be, 3 * sizeof(int32_t), "key_len", (void **)&slot_len[1]));
    p.key_len = slot_len[0];
    mdl_padding_init(&p, 3, 2);
    TZ_EXPECT(p.key_len == slot_len[0], "mdl_padding_init dropped the device lengths");
    const int32_t right[12] = {1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0}, left[8] = {1, 1, 1, 1, 0, 1, 1, 1};
    const int32_t full[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    mdl_padding_upload(&p, be, right, 3, 4);
    int32_t got[3] = {0};
    rt_to_host(be, got, p.key_len, sizeof got);
    TZ_EXPECT(p.masked[0] && p.right[0] && got[0] == 4 && got[1] == 2 && got[2] == 1,
              "right padding: masked %d right %d lengths %d %d %d, want 1 1 4 2 1", p.masked[0], p.right[0], got[0],
              got[1], got[2]);
    mdl_stack_mask m = {0};
    const float *key_mask = (const float *)right; /* any pointer: it is passed along, not read */
    mdl_padding_keys(&p, key_mask, &m);
    TZ_EXPECT(m.key_mask == key_mask && m.key_len == p.key_len, "right padding: the stack gets mask and lengths");
    /* slot 1 (as the model's use_slot points there) takes a batch without padding; slot 0 keeps
     * its own: the backward of slot 0's micro-batch still gets its mask and lengths */
    mdl_padding_use_slot(&p, 1);
    p.key_len = slot_len[1];
    mdl_padding_upload(&p, be, full, 2, 4);
    mdl_padding_keys(&p, key_mask, &m);
    TZ_EXPECT(!m.key_mask && !m.key_len, "slot 1 without padding: no mask");
    mdl_padding_use_slot(&p, 0);
    p.key_len = slot_len[0];
    mdl_padding_keys(&p, key_mask, &m);
    TZ_EXPECT(m.key_mask == key_mask && m.key_len == slot_len[0], "slot 0 lost its padding to slot 1's upload");
    mdl_padding_upload(&p, be, left, 2, 4);
    mdl_padding_keys(&p, key_mask, &m);
    TZ_EXPECT(p.masked[0] && !p.right[0] && m.key_mask == key_mask && !m.key_len, "left padding: the mask only");
    mdl_padding_upload(&p, be, full, 2, 4);
    mdl_padding_keys(&p, key_mask, &m);
    TZ_EXPECT(!p.masked[0] && !m.key_mask && !m.key_len, "no padding: no mask");
    mdl_padding_upload(&p, be, NULL, 2, 4);
    TZ_EXPECT(!p.masked[0] && !p.right[0], "no attention mask: no mask");
    rt_free_device(be, slot_len[0]);
    rt_free_device(be, slot_len[1]);
    mdl_padding_free(&p);
    rt_backend_free(be);
}

/* A stack of L blocks at (B, T), cross-attending over S source positions when S > 0: the bytes its
 * layout gives the kept attention rows, against L x B x NH x T rows of Tk probabilities. */
static void check_stack_room(rt_dtype dtype, int S) {
    enum { L = 2, C = 32, NH = 4, B = 3, T = 16 };
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &be));
    if (!be) return;
    TZ_EXPECT_OK(rt_set_precision(be, dtype));
    rt_params params;
    rt_params_init(&params, be);
    const mdl_stack_config c = {.n_layer = L,
                                .C = C,
                                .n_head = NH,
                                .F = 4 * C,
                                .norm = S ? MDL_NORM_RMS : MDL_NORM_LAYER,
                                .norm_eps = 1e-5f,
                                .cross = S > 0,
                                .position_bias = S > 0,
                                .act = RT_ACT_GELU_TANH};
    mdl_stack s;
    mdl_stack_init(&s, &c, be, rt_comm_self(), &params);
    rt_arena measure = {0};
    mdl_stack_layout(&s, &measure, B, T, S, NULL);
    const size_t p = rt_dtype_size(dtype);
    TZ_EXPECT(s.probs_row == (size_t)T * p, "%s: a self-attention row keeps %zu bytes, want T x %zu = %zu",
              rt_dtype_name(dtype), s.probs_row, p, (size_t)T * p);
    if (S)
        TZ_EXPECT(s.cprobs_row == (size_t)S * p, "%s: a cross-attention row keeps %zu bytes, want S x %zu = %zu",
                  rt_dtype_name(dtype), s.cprobs_row, p, (size_t)S * p);
    /* the whole layout is bounded by its buffers: the probabilities are a part, not T times more */
    const size_t probs = (size_t)L * B * NH * T * (T + (size_t)S) * p;
    TZ_EXPECT(measure.used > probs && measure.used < probs + (size_t)64 * L * B * T * C * sizeof(float),
              "%s S=%d: the layout takes %zu bytes, %zu of them probabilities", rt_dtype_name(dtype), S, measure.used,
              probs);
    mdl_stack_free(&s);
    rt_params_free(&params);
    rt_backend_free(be);
}

static void test_stack_room(void) {
    check_stack_room(RT_F32, 0);
    check_stack_room(RT_BF16, 0);
    check_stack_room(RT_BF16, 24);
}

int main(void) {
    test_support();
    test_stack_room();
    test_shape();
    test_kept();
    test_keys();
    test_dropout_seed();
    test_prefix_mask();
    test_mask_lengths();
    test_padding_upload();
    return tz_test_result("test_sdpa_plan");
}
