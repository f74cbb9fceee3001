/* T5 split into pipeline stages (t5_model_init_stage, t5_pipe_step) on threads, against the
 * whole model stepping through the same micro-batches one after another: v1.0 (relu, the head
 * tied to `shared`, the decoder output rescaled) and v1.1 (gated gelu, its own lm_head), with
 * dropout on, 2 and 4 stages (the encoder on the first half) over 1, 3 and 5 micro-batches of
 * different shapes with padded sources, keeping the in-flight activations or recomputing them. Every parameter's gradient equals the whole model's
 * bit for bit (the relative bias tables too: each stage continues the sum it receives), except
 * `shared`, whose copies (the encoder's and the decoder's embedding, the tied head) add their
 * gradients in another order than one process: there within 1e-6, and every copy holds the same
 * bits. The last stage's summed loss is the whole model's; evaluating through the stages gives
 * every stage the whole model's loss. The stages draw the whole model's random init by
 * themselves. Layouts that cannot split are refused in one line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/t5/t5.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/comm/rt_launch.h"
#include "tests/testutil.h"

enum { MAXP = 4, MAXM = 5, MAXB = 3, MAXS = 9, MAXT = 7, V = 96 };

typedef struct {
    int32_t src[MAXB * MAXS], mask[MAXB * MAXS], labels[MAXB * MAXT];
} host_batch;

static host_batch g_hb[MAXM];
static t5_batch g_b[MAXM];

static void make_batches(void) {
    unsigned s = 3;
    for (int k = 0; k < MAXM; k++) {
        const int B = 1 + k % MAXB, S = 5 + k % 4, T = 3 + (k * 2) % 4;
        host_batch *h = &g_hb[k];
        for (int r = 0; r < B; r++) {
            const int len = S - (r + k) % 3, tlen = T - r % 2;
            for (int t = 0; t < S; t++) {
                h->src[r * S + t] = t < len ? 2 + (int32_t)((tz_uniform(&s) + 1.0f) * 0.5f * (V - 3)) : 0;
                h->mask[r * S + t] = t < len;
            }
            for (int t = 0; t < T; t++)
                h->labels[r * T + t] = t < tlen ? 2 + (int32_t)((tz_uniform(&s) + 1.0f) * 0.5f * (V - 3)) : -100;
        }
        g_b[k] = (t5_batch){.B = B, .S = S, .T = T, .src_ids = h->src, .src_mask = h->mask, .labels = h->labels};
    }
}

static bool g_v11;       /* gated gelu and an untied lm_head */
static bool g_recompute; /* the stages recompute instead of keeping activations */

static t5_config tiny(int layers) {
    t5_config c;
    t5_config_default(&c);
    c.vocab_size = V, c.d_model = 16, c.d_kv = 8, c.d_ff = 32, c.num_heads = 2;
    c.num_layers = c.num_decoder_layers = layers;
    c.relative_attention_num_buckets = 8, c.relative_attention_max_distance = 16;
    c.dropout_rate = 0.1f;
    c.pp_recompute = g_recompute;
    if (g_v11) c.gated = true, c.act = RT_ACT_GELU_TANH, c.tie_word_embeddings = c.scale_decoder_outputs = false;
    return c;
}

static rt_status make(rt_backend *be, rt_comm *pp, t5_model **out) {
    const t5_config c = tiny(2);
    return t5_model_init_stage(&c, be, rt_comm_self(), pp, MAXM, MAXB, MAXS, MAXT, 11, out);
}

static t5_model *g_ref;
static rt_backend *g_ref_be;
static double g_eval_loss;

typedef struct {
    int M;
    char msg[256];
    int mismatched, compared;
    double loss, eval_loss;
    float *shared_grad; /* this stage's gradient of `shared`, if it holds it (malloc'd) */
} stage_run;

/* Stage pp->rank (tz_run_ranks): the comparisons go to r, a failure to the return. */
static rt_status run_stage(rt_comm *pp, void *arg) {
    stage_run *r = arg;
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    t5_model *m = NULL;
    RT_TRY(rt_backend_init("cpu", 1, &be));
    RT_TRY(make(be, pp, &m));
    rt_params *p = t5_model_params(m), *q = t5_model_params(g_ref);
    r->mismatched += tz_stage_params_differ(be, p, g_ref_be, q, false, NULL, NULL, NULL, r->msg, sizeof r->msg);
    RT_TRY(t5_pipe_step(m, g_b, r->M, 5, 3, 0.25f, &r->loss));
    RT_TRY(tz_stage_sum_tied(pp, p));
    char grad_msg[256];
    const int bad = tz_stage_params_differ(be, p, g_ref_be, q, true, "shared.weight", &r->shared_grad, &r->compared,
                                           grad_msg, sizeof grad_msg);
    if (bad && r->mismatched == 0) snprintf(r->msg, sizeof r->msg, "%s", grad_msg); /* the first message stays */
    r->mismatched += bad;
    const mdl_pass eval = {.training = false};
    int n = 0;
    RT_TRY(t5_step(m, &g_b[1], &eval, 0.0f, &r->eval_loss, &n, NULL));
fail:
    t5_model_free(m);
    rt_backend_free(be);
    return st;
}

static void check(int P, int M) {
    char name[48];
    snprintf(name, sizeof name, "T5 %s%s", g_v11 ? "v1.1" : "v1.0", g_recompute ? " (recompute)" : "");
    TZ_EXPECT_OK(make(g_ref_be, rt_comm_self(), &g_ref));
    if (!g_ref) return;
    double want = 0;
    for (int k = 0; k < M; k++) {
        const mdl_pass pass = {.seed = 5, .step = 3, .micro = k, .training = true};
        double loss = 0;
        int n = 0;
        TZ_EXPECT_OK(t5_step(g_ref, &g_b[k], &pass, 0.25f, &loss, &n, NULL));
        want += loss;
    }
    const mdl_pass eval = {.training = false};
    int n = 0;
    TZ_EXPECT_OK(t5_step(g_ref, &g_b[1], &eval, 0.0f, &g_eval_loss, &n, NULL));
    stage_run runs[MAXP];
    for (int s = 0; s < P; s++) runs[s] = (stage_run){.M = M};
    TZ_EXPECT_OK(tz_run_ranks(P, 20.0, run_stage, runs, sizeof *runs));
    int compared = 0;
    for (int s = 0; s < P; s++) {
        TZ_EXPECT(runs[s].mismatched == 0, "%s pp %d M %d stage %d: %s", name, P, M, s, runs[s].msg);
        compared += runs[s].compared;
        TZ_EXPECT(runs[s].eval_loss == g_eval_loss, "%s pp %d stage %d: evaluation %.17g, whole model %.17g", name, P,
                  s, runs[s].eval_loss, g_eval_loss);
    }
    const rt_params *q = t5_model_params(g_ref);
    TZ_EXPECT(compared == q->n, "%s pp %d: %d parameters on the stages, the whole model has %d", name, P, compared,
              q->n);
    const size_t n_shared = q->specs[rt_params_find(q, "shared.weight")].numel;
    for (int s = 1; s < P; s++)
        if (runs[s].shared_grad)
            TZ_EXPECT(runs[0].shared_grad &&
                          memcmp(runs[0].shared_grad, runs[s].shared_grad, n_shared * sizeof(float)) == 0,
                      "%s pp %d: stage %d's copy of shared has another gradient than stage 0's", name, P, s);
    TZ_EXPECT(runs[P - 1].loss == want && want > 0, "%s pp %d M %d: loss %.17g, whole model %.17g", name, P, M,
              runs[P - 1].loss, want);
    for (int s = 0; s < P; s++) {
        if (s < P - 1) TZ_EXPECT(runs[s].loss == 0, "%s pp %d: stage %d reports a loss", name, P, s);
        free(runs[s].shared_grad);
    }
    t5_model_free(g_ref);
    g_ref = NULL;
}

/* Layouts that cannot give each stack equal stages, and what a stage cannot do. */
static void check_refusals(void) {
    rt_comm *three[3], *two[2];
    t5_model *m = NULL;
    TZ_EXPECT_OK(rt_comm_threads_create(3, 1.0, three));
    TZ_EXPECT_OK(rt_comm_threads_create(2, 1.0, two));
    t5_config c = tiny(2);
    TZ_EXPECT(t5_model_init_stage(&c, g_ref_be, rt_comm_self(), three[0], 4, MAXB, MAXS, MAXT, 1, &m) ==
                      RT_ERR_CONFIG &&
                  strstr(rt_error_message(), "--pp 3 cannot give its 2 encoder and 2 decoder blocks equal stages"),
              "pp 3 of 2 + 2 blocks: %s", rt_error_message());
    c.num_decoder_layers = 1;
    TZ_EXPECT(t5_model_init_stage(&c, g_ref_be, rt_comm_self(), two[0], 4, MAXB, MAXS, MAXT, 1, &m) == RT_ERR_CONFIG,
              "pp 2 of 2 + 1 blocks: %s", rt_error_message());
    c = tiny(2);
    TZ_EXPECT_OK(t5_model_init_stage(&c, g_ref_be, rt_comm_self(), two[1], 4, MAXB, MAXS, MAXT, 1, &m));
    if (m) {
        int n = 0;
        const mdl_pass pass = {.training = true};
        double loss = 0;
        TZ_EXPECT(t5_step(m, &g_b[0], &pass, 1.0f, &loss, &n, NULL) == RT_ERR_CONFIG, "a stage's t5_step trained");
        const rt_params *p = t5_model_params(m);
        const int sh = rt_params_find(p, "shared.weight");
        TZ_EXPECT(sh >= 0 && p->specs[sh].copy && rt_params_find(p, "encoder.final_layer_norm.weight") < 0 &&
                      rt_params_find(p, "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight") >= 0,
                  "the decoder's stage holds a copy of shared, block 0's bias table and no encoder");
    }
    t5_model_free(m);
    for (int i = 0; i < 3; i++) rt_comm_free(three[i]);
    for (int i = 0; i < 2; i++) rt_comm_free(two[i]);
}

int main(void) {
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &g_ref_be));
    if (!g_ref_be) return tz_test_result("test_pipe_t5");
    make_batches();
    const int Ms[3] = {1, 3, 5};
    for (int r = 0; r < 2; r++)
        for (int v = 0; v < 2; v++) {
            g_v11 = v, g_recompute = r;
            for (int P = 2; P <= MAXP; P += 2)
                for (int i = 0; i < 3; i++) check(P, Ms[i]);
        }
    g_recompute = false;
    g_v11 = false;
    check_refusals();
    rt_backend_free(g_ref_be);
    return tz_test_result("test_pipe_t5");
}
