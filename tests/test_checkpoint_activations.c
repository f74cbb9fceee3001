/* Activation checkpointing (models/layers/stack.h, models/bert/bert.c, models/t5/t5.c) changes memory,
 * never numbers: GPT-2, BERT, T5 (gated, 5 encoder and 3 decoder blocks) and GLM with every
 * dropout on give bit-identical losses and gradients with checkpoint_layers
 * 0 (keep everything), 1, 2 (5 blocks: a partial last segment) and 5 (one segment), for two
 * steps with different dropout bits, and take less activation memory. GLM's generation,
 * whose key/value prefill reads each block's input LayerNorm back, gives the same tokens and
 * scores. At tp = 2 (two threads) each rank's GLM gradient shard is the same with and without
 * checkpointing: the recompute repeats the forward's collectives in the same order.
 *
 * The same holds for the 2-byte kept activations of a bf16 or fp16 stack: at each 16-bit
 * precision the reference keeps fp32 buffers (rt_backend.keep_fp32), and the 16-bit runs,
 * alone and with every checkpointing case, give its bits with less memory. */
#include <string.h>

#include "models/bert/bert.h"
#include "models/glm/glm.h"
#include "models/gpt2/gpt2.h"
#include "models/t5/t5.h"
#include "runtime/comm/rt_launch.h"
#include "tests/testutil.h"

enum { B = 3, T = 10, L = 5, N_CASES = 4 };
static const int k_cases[N_CASES] = {0, 1, 2, 5};

/* How a run keeps its activations: checkpoint_layers k, at a compute precision, 16-bit
 * (2-byte kept activations at 16 bits, the default) or not. */
typedef struct {
    int k;
    rt_dtype dtype;
    bool keep_fp32;
} run_mode;

static rt_backend *mode_backend(run_mode md) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &be));
    if (!be) return NULL;
    TZ_EXPECT_OK(rt_set_precision(be, md.dtype));
    be->keep_fp32 = md.keep_fp32;
    return be;
}

typedef struct {
    float *grad;
    size_t numel;
    double loss[2];
    size_t bytes;
} run_result;

/* got against ref (K = 0, fp32 buffers, at got's precision): the same bits, and less memory
 * where got checkpoints or keeps 16-bit activations. */
static void compare(const char *model, run_mode md, const run_result *ref, const run_result *got) {
    const int k = md.k;
    const char *dt = rt_dtype_name(md.dtype), *kept = md.keep_fp32 || md.dtype == RT_F32 ? "fp32" : "16-bit";
    TZ_EXPECT(got->numel == ref->numel, "%s %s K=%d %s: %zu parameters, %zu in the reference", model, dt, k, kept,
              got->numel, ref->numel);
    for (int s = 0; s < 2; s++)
        TZ_EXPECT(memcmp(&got->loss[s], &ref->loss[s], sizeof(double)) == 0,
                  "%s %s K=%d %s step %d: loss %.9g, %.9g in the reference", model, dt, k, kept, s, got->loss[s],
                  ref->loss[s]);
    size_t diff = 0;
    for (size_t i = 0; got->numel == ref->numel && i < ref->numel; i++) diff += got->grad[i] != ref->grad[i];
    TZ_EXPECT(diff == 0, "%s %s K=%d %s: %zu of %zu gradients differ from the reference", model, dt, k, kept, diff,
              ref->numel);
    if ((k > 0 && k < L) || (md.dtype != RT_F32 && !md.keep_fp32))
        TZ_EXPECT(got->bytes < ref->bytes, "%s %s K=%d %s: %zu bytes allocated, %zu in the reference", model, dt, k,
                  kept, got->bytes, ref->bytes);
}

/* ---- GPT-2 sequence classification ---- */

static void gpt2_run(run_mode md, run_result *out) {
    memset(out, 0, sizeof *out);
    rt_backend *be = NULL;
    gpt2_model *m = NULL;
    gpt2_config c;
    gpt2_config_default(&c);
    c.vocab_size = 97;
    c.n_positions = 16;
    c.n_embd = 32;
    c.n_layer = L;
    c.n_head = 4;
    c.embd_pdrop = c.resid_pdrop = c.attn_pdrop = 0.1f;
    c.pad_token_id = 0;
    c.checkpoint_layers = md.k;
    be = mode_backend(md);
    if (!be) return;
    TZ_EXPECT_OK(gpt2_model_init(&c, be, rt_comm_self(), B, T, 7, &m));
    if (!m) goto done;
    out->bytes = be->bytes_allocated;
    int32_t ids[B * T], mask[B * T], lengths[B] = {T, 7, 4}, labels[B] = {1, 0, 1};
    for (int r = 0; r < B; r++)
        for (int t = 0; t < T; t++) {
            mask[r * T + t] = t < lengths[r];
            ids[r * T + t] = t < lengths[r] ? 1 + (r * 31 + t * 17) % 96 : 0;
        }
    rt_batch batch = {
        .B = B, .T = T, .input_ids = ids, .attention_mask = mask, .lengths = lengths, .labels = labels, .n_targets = B};
    rt_params *p = gpt2_model_params(m);
    rt_params_zero_grad(p);
    for (int s = 0; s < 2; s++) {
        mdl_pass pass = {.seed = 11, .step = s, .training = true};
        TZ_EXPECT_OK(gpt2_cls_step(m, &batch, &pass, 1.0f, &out->loss[s], NULL));
    }
    out->numel = p->numel;
    out->grad = rt_xmalloc(p->numel * sizeof(float));
    memcpy(out->grad, p->grad, p->numel * sizeof(float));
done:
    gpt2_model_free(m);
    rt_backend_free(be);
}

/* ---- BERT sequence classification (post-LN: a recompute must not rewrite the kept output) ---- */

static void bert_run(run_mode md, run_result *out) {
    memset(out, 0, sizeof *out);
    rt_backend *be = NULL;
    bert_model *m = NULL;
    bert_config c;
    bert_config_default(&c);
    c.vocab_size = 97;
    c.hidden_size = 32;
    c.num_hidden_layers = L;
    c.num_attention_heads = 4;
    c.intermediate_size = 64;
    c.max_position_embeddings = 16;
    c.hidden_dropout_prob = c.attention_probs_dropout_prob = c.classifier_dropout = 0.1f;
    c.checkpoint_layers = md.k;
    be = mode_backend(md);
    if (!be) return;
    TZ_EXPECT_OK(bert_model_init(&c, be, rt_comm_self(), B, T, 9, &m));
    if (!m) goto done;
    out->bytes = be->bytes_allocated;
    int32_t ids[B * T], mask[B * T], types[B * T], lengths[B] = {T, 6, 3}, labels[B] = {0, 1, 1};
    for (int r = 0; r < B; r++)
        for (int t = 0; t < T; t++) {
            mask[r * T + t] = t < lengths[r];
            types[r * T + t] = t >= lengths[r] / 2 && t < lengths[r];
            ids[r * T + t] = t < lengths[r] ? 1 + (r * 29 + t * 11) % 96 : 0;
        }
    rt_batch batch = {.B = B,
                      .T = T,
                      .input_ids = ids,
                      .attention_mask = mask,
                      .token_type_ids = types,
                      .lengths = lengths,
                      .labels = labels,
                      .n_targets = B};
    rt_params *p = bert_model_params(m);
    rt_params_zero_grad(p);
    for (int s = 0; s < 2; s++) {
        mdl_pass pass = {.seed = 13, .step = s, .training = true};
        TZ_EXPECT_OK(bert_cls_step(m, &batch, &pass, 1.0f, &out->loss[s], NULL));
    }
    out->numel = p->numel;
    out->grad = rt_xmalloc(p->numel * sizeof(float));
    memcpy(out->grad, p->grad, p->numel * sizeof(float));
done:
    bert_model_free(m);
    rt_backend_free(be);
}

/* ---- T5 seq2seq (encoder and decoder stacks of different depths, cross-attention) ---- */

static void t5_run(run_mode md, run_result *out) {
    enum { S = 9, TT = 6 };
    memset(out, 0, sizeof *out);
    rt_backend *be = NULL;
    t5_model *m = NULL;
    t5_config c;
    t5_config_default(&c);
    c.vocab_size = 96;
    c.d_model = 32;
    c.d_kv = 8;
    c.d_ff = 48;
    c.num_heads = 4;
    c.num_layers = L;
    c.num_decoder_layers = 3;
    c.gated = true;
    c.act = RT_ACT_GELU_TANH;
    c.dropout_rate = 0.1f;
    c.checkpoint_layers = md.k;
    be = mode_backend(md);
    if (!be) return;
    TZ_EXPECT_OK(t5_model_init(&c, be, rt_comm_self(), B, S, TT, 17, &m));
    if (!m) goto done;
    out->bytes = be->bytes_allocated;
    int32_t src[B * S], mask[B * S], labels[B * TT];
    for (int r = 0; r < B; r++) {
        for (int t = 0; t < S; t++) {
            mask[r * S + t] = t < S - 2 * r;
            src[r * S + t] = mask[r * S + t] ? 2 + (r * 19 + t * 5) % 90 : 0;
        }
        for (int t = 0; t < TT; t++) labels[r * TT + t] = t < TT - r ? 2 + (r * 7 + t * 3) % 90 : -100;
    }
    t5_batch batch = {.B = B, .S = S, .T = TT, .src_ids = src, .src_mask = mask, .labels = labels};
    rt_params *p = t5_model_params(m);
    rt_params_zero_grad(p);
    for (int s = 0; s < 2; s++) {
        mdl_pass pass = {.seed = 21, .step = s, .training = true};
        int n = 0;
        TZ_EXPECT_OK(t5_step(m, &batch, &pass, 1.0f, &out->loss[s], &n, NULL));
    }
    out->numel = p->numel;
    out->grad = rt_xmalloc(p->numel * sizeof(float));
    memcpy(out->grad, p->grad, p->numel * sizeof(float));
done:
    t5_model_free(m);
    rt_backend_free(be);
}

/* ---- GLM blank infilling ---- */

static void glm_fill(int32_t *ids, int32_t *pos, int32_t *bpos, int32_t *sep, int32_t *labels) {
    for (int r = 0; r < B; r++) {
        sep[r] = 5 + r;
        for (int t = 0; t < T; t++) {
            int i = r * T + t;
            ids[i] = 1 + (r * 13 + t * 7) % 90;
            bool span = t >= sep[r];
            pos[i] = span ? sep[r] - 1 : t;
            bpos[i] = span ? t - sep[r] + 1 : 0;
            labels[i] = span ? 1 + (r * 5 + t * 3) % 90 : -100;
        }
    }
}

static void glm_small(glm_config *c, int k) {
    glm_config_default(c);
    c->vocab_size = 96;
    c->hidden_size = 32;
    c->num_layers = L;
    c->num_attention_heads = 4;
    c->max_sequence_length = 16;
    c->checkpoint_layers = k;
}

static glm_model *glm_build(rt_backend *be, int k) {
    glm_config c;
    glm_small(&c, k);
    glm_model *m = NULL;
    TZ_EXPECT_OK(glm_model_init(&c, be, rt_comm_self(), B, T, 5, &m));
    return m;
}

static void glm_run(run_mode md, run_result *out, int32_t *generated, float *scores) {
    memset(out, 0, sizeof *out);
    rt_backend *be = mode_backend(md);
    if (!be) return;
    glm_model *m = glm_build(be, md.k);
    glm_decoder *d = NULL;
    if (!m) goto done;
    out->bytes = be->bytes_allocated;
    int32_t ids[B * T], pos[B * T], bpos[B * T], sep[B], labels[B * T];
    glm_fill(ids, pos, bpos, sep, labels);
    glm_inputs in = {.B = B, .T = T, .ids = ids, .pos = pos, .block_pos = bpos, .sep = sep};
    rt_params *p = glm_model_params(m);
    rt_params_zero_grad(p);
    for (int s = 0; s < 2; s++) {
        mdl_pass pass = {.seed = 3, .step = s, .training = true};
        TZ_EXPECT_OK(glm_lm_step(m, &in, labels, &pass, 1.0f, &out->loss[s], NULL));
    }
    out->numel = p->numel;
    out->grad = rt_xmalloc(p->numel * sizeof(float));
    memcpy(out->grad, p->grad, p->numel * sizeof(float));
    /* greedy generation in each row's blank: the prefill reads every block's ln1 back */
    enum { S = 6, NEW = 4 };
    int32_t cids[B * S], cpos[B * S], cbpos[B * S] = {0}, csep[B], mask_pos[B], len[B];
    for (int r = 0; r < B; r++) {
        csep[r] = S;
        mask_pos[r] = S - 1;
        for (int t = 0; t < S; t++) {
            cids[r * S + t] = t == S - 1 ? 3 : ids[r * T + t];
            cpos[r * S + t] = t;
        }
    }
    glm_inputs ctx = {.B = B, .T = S, .ids = cids, .pos = cpos, .block_pos = cbpos, .sep = csep};
    gen_options go = {.max_new_tokens = NEW, .num_beams = 1, .eos_token_id = 95};
    memset(generated, 0, B * NEW * sizeof *generated);
    TZ_EXPECT_OK(glm_decoder_init(m, B, 1, S, NEW, &d));
    if (d) TZ_EXPECT_OK(glm_generate(d, &ctx, mask_pos, 4, &go, NULL, NULL, generated, len, scores));
done:
    glm_decoder_free(d);
    glm_model_free(m);
    rt_backend_free(be);
}

/* ---- GLM at tp = 2 ---- */

typedef struct {
    size_t diff, numel;
    double loss[2]; /* K = 0, K = 1 */
} tp_out;

static rt_status tp_rank(rt_comm *comm, void *arg) {
    tp_out *a = arg;
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    glm_model *m = NULL;
    float *ref = NULL;
    glm_config c;
    int32_t ids[B * T], pos[B * T], bpos[B * T], sep[B], labels[B * T];
    glm_fill(ids, pos, bpos, sep, labels);
    glm_inputs in = {.B = B, .T = T, .ids = ids, .pos = pos, .block_pos = bpos, .sep = sep};
    RT_TRY(rt_backend_init("cpu", 1, &be));
    for (int k = 0; k < 2; k++) {
        glm_small(&c, k);
        RT_TRY(glm_model_init(&c, be, comm, B, T, 5, &m));
        rt_params *p = glm_model_params(m);
        rt_params_zero_grad(p);
        mdl_pass pass = {.seed = 3, .step = 1, .training = true};
        RT_TRY(glm_lm_step(m, &in, labels, &pass, 1.0f, &a->loss[k], NULL));
        a->numel = p->numel;
        if (k == 0) {
            ref = rt_xmalloc(p->numel * sizeof(float));
            memcpy(ref, p->grad, p->numel * sizeof(float));
        } else {
            for (size_t i = 0; i < p->numel; i++) a->diff += p->grad[i] != ref[i];
        }
        glm_model_free(m);
        m = NULL;
    }
fail:
    glm_model_free(m);
    free(ref);
    rt_backend_free(be);
    return st;
}

static void test_glm_tp2(void) {
    tp_out out[2] = {{0}};
    TZ_EXPECT_OK(tz_run_ranks(2, 30.0, tp_rank, out, sizeof *out));
    for (int r = 0; r < 2; r++)
        TZ_EXPECT(out[r].numel > 0 && out[r].diff == 0 && out[r].loss[0] == out[r].loss[1],
                  "GLM tp=2 rank %d: %zu of %zu gradients differ with checkpointing (loss %.9g, %.9g without)", r,
                  out[r].diff, out[r].numel, out[r].loss[1], out[r].loss[0]);
}

typedef void (*family_run)(run_mode md, run_result *out);

/* One family at one precision: every checkpointing case, fp32 buffers and 16-bit, against K = 0
 * with fp32 buffers. */
static void family_cases(const char *model, family_run run, rt_dtype dtype) {
    run_result ref, got;
    run((run_mode){0, dtype, true}, &ref);
    for (int kept = 0; kept < (dtype == RT_F32 ? 1 : 2); kept++)
        for (int i = 0; i < N_CASES; i++) {
            const run_mode md = {k_cases[i], dtype, kept == 0};
            if (md.k == 0 && md.keep_fp32) continue; /* the reference */
            run(md, &got);
            compare(model, md, &ref, &got);
            free(got.grad);
        }
    free(ref.grad);
}

static void glm_cases(rt_dtype dtype) {
    run_result ref, got;
    int32_t ref_gen[B * 4], gen[B * 4];
    float ref_scores[B] = {0}, scores[B] = {0};
    glm_run((run_mode){0, dtype, true}, &ref, ref_gen, ref_scores);
    for (int kept = 0; kept < (dtype == RT_F32 ? 1 : 2); kept++)
        for (int i = 0; i < N_CASES; i++) {
            const run_mode md = {k_cases[i], dtype, kept == 0};
            if (md.k == 0 && md.keep_fp32) continue;
            glm_run(md, &got, gen, scores);
            compare("GLM", md, &ref, &got);
            TZ_EXPECT(memcmp(gen, ref_gen, sizeof gen) == 0 && memcmp(scores, ref_scores, sizeof scores) == 0,
                      "GLM %s K=%d: generation differs (row 0 score %.9g, %.9g in the reference)", rt_dtype_name(dtype),
                      md.k, scores[0], ref_scores[0]);
            free(got.grad);
        }
    free(ref.grad);
}

int main(void) {
    const rt_dtype precisions[3] = {RT_F32, RT_BF16, RT_F16};
    for (int d = 0; d < 3; d++) {
        family_cases("GPT-2", gpt2_run, precisions[d]);
        family_cases("BERT", bert_run, precisions[d]);
        family_cases("T5", t5_run, precisions[d]);
        glm_cases(precisions[d]);
    }
    test_glm_tp2();
    return tz_test_result("test_checkpoint_activations");
}
