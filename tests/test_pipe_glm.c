/* GLM split into pipeline stages (glm_model_init_stage, glm_pipe_step) on threads, against the
 * whole model stepping through the same micro-batches one after another, for each of its
 * training heads (the language-model loss, single-token cloze, multi-token choices): with
 * dropout on, 2 and 4 stages over 1, 3 and 5 micro-batches of different shapes, keeping the
 * in-flight activations or recomputing them, every parameter's gradient equals the whole
 * model's bit for bit, except word_embeddings, which the first stage (the embedding) and the
 * last stage's copy (the tied output layer) add up in another order: there within 1e-6, and the
 * two copies hold the same bits. The last stage's summed loss is the whole model's, and
 * evaluating through the stages (also the span check) gives every stage the whole model's loss
 * and scores exactly. The stages draw the whole model's random init by themselves. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/glm/glm.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/comm/rt_launch.h"
#include "tests/testutil.h"

enum { MAXP = 4, MAXM = 5, MAXB = 4, MAXT = 12, V = 96, K = 3 };

typedef struct {
    int32_t ids[MAXB * MAXT], pos[MAXB * MAXT], bpos[MAXB * MAXT], sep[MAXB], labels[MAXB * MAXT];
    int32_t at[MAXB], cand[MAXB * K], label[MAXB];
} host_batch;

static host_batch g_hb[MAXM];
static glm_task g_t[MAXM];

/* Micro-batch k of a head: rows (pairs for the choices), lengths and separators vary; the
 * blank's tokens after each separator are labelled. */
static void make_tasks(glm_head_kind kind) {
    unsigned s = 7;
    for (int k = 0; k < MAXM; k++) {
        const int B = kind == GLM_HEAD_CHOICE ? 2 * (1 + k % 2) : 1 + k % 3, T = 6 + (k * 3) % (MAXT - 5);
        host_batch *h = &g_hb[k];
        for (int r = 0; r < B; r++) {
            h->sep[r] = T - 3 - (r + k) % 2;
            for (int t = 0; t < T; t++) {
                const int i = r * T + t;
                h->ids[i] = (int32_t)((tz_uniform(&s) + 1.0f) * 0.5f * (V - 2));
                h->pos[i] = t < h->sep[r] ? t : h->sep[r] - 1;
                h->bpos[i] = t < h->sep[r] ? 0 : t - h->sep[r] + 1;
                h->labels[i] = t >= h->sep[r] && t + 1 < T ? (int32_t)((tz_uniform(&s) + 1.0f) * 0.5f * (V - 2)) : -100;
            }
            h->at[r] = h->sep[r] - 1;
            for (int c = 0; c < K; c++) h->cand[r * K + c] = (r * 7 + c * 11 + k) % V;
            h->label[r] = (r + k) % 4 == 3 ? -100 : (r + k) % (kind == GLM_HEAD_CHOICE ? 2 : K);
        }
        g_t[k] = (glm_task){.in = {.B = B, .T = T, .ids = h->ids, .pos = h->pos, .block_pos = h->bpos, .sep = h->sep},
                            .kind = kind,
                            .labels = h->labels,
                            .at = h->at,
                            .cand = h->cand,
                            .K = kind == GLM_HEAD_CHOICE ? 2 : K,
                            .label = h->label};
    }
}

static bool g_recompute;

static rt_status make(rt_backend *be, rt_comm *pp, glm_model **out) {
    glm_config c;
    glm_config_default(&c);
    c.vocab_size = V, c.hidden_size = 16, c.num_layers = 4, c.num_attention_heads = 2, c.max_sequence_length = 32;
    c.pp_recompute = g_recompute; /* dropout stays on: FlagAI's 0.1 */
    return glm_model_init_stage(&c, be, rt_comm_self(), pp, MAXM, MAXB, MAXT, 11, out);
}

static glm_model *g_ref;
static rt_backend *g_ref_be;
static double g_eval_loss[2];
static float g_eval_scores[2][MAXB * K];

typedef struct {
    int M;
    char msg[256];
    int mismatched, compared;
    double loss, eval_loss[2];
    float eval_scores[2][MAXB * K];
    float *wte_grad; /* this stage's word_embeddings gradient, if it holds one (malloc'd) */
} stage_run;

/* The evaluation heads of a training head: itself, and the span check for the language model. */
static glm_task eval_task(int k) {
    glm_task t = g_t[k];
    if (t.kind == GLM_HEAD_LM) t.kind = k == 0 ? GLM_HEAD_LM : GLM_HEAD_SPAN_MATCH;
    return t;
}

/* Stage pp->rank (tz_run_ranks): the comparisons go to r, a failure to the return. */
static rt_status run_stage(rt_comm *pp, void *arg) {
    stage_run *r = arg;
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    glm_model *m = NULL;
    RT_TRY(rt_backend_init("cpu", 1, &be));
    RT_TRY(make(be, pp, &m));
    rt_params *p = glm_model_params(m), *q = glm_model_params(g_ref);
    r->mismatched += tz_stage_params_differ(be, p, g_ref_be, q, false, NULL, NULL, NULL, r->msg, sizeof r->msg);
    RT_TRY(glm_pipe_step(m, g_t, r->M, 5, 3, 0.25f, &r->loss));
    RT_TRY(tz_stage_sum_tied(pp, p));
    char grad_msg[256];
    const int bad = tz_stage_params_differ(be, p, g_ref_be, q, true, "word_embeddings.weight", &r->wte_grad,
                                           &r->compared, grad_msg, sizeof grad_msg);
    if (bad && r->mismatched == 0) snprintf(r->msg, sizeof r->msg, "%s", grad_msg); /* the first message stays */
    r->mismatched += bad;
    for (int k = 0; k < 2; k++) {
        const mdl_pass eval = {.training = false};
        const glm_task t = eval_task(k);
        RT_TRY(glm_task_step(m, &t, &eval, 0.0f, &r->eval_loss[k], r->eval_scores[k]));
    }
fail:
    glm_model_free(m);
    rt_backend_free(be);
    return st;
}

static const char *const head_names[] = {"LM", "cloze", "choices", "span"};

static void check(glm_head_kind kind, int P, int M) {
    char name[48];
    snprintf(name, sizeof name, "GLM %s%s", head_names[kind], g_recompute ? " (recompute)" : "");
    make_tasks(kind);
    TZ_EXPECT_OK(make(g_ref_be, rt_comm_self(), &g_ref));
    if (!g_ref) return;
    double want = 0;
    for (int k = 0; k < M; k++) {
        const mdl_pass pass = {.seed = 5, .step = 3, .micro = k, .training = true};
        double loss = 0;
        TZ_EXPECT_OK(glm_task_step(g_ref, &g_t[k], &pass, 0.25f, &loss, NULL));
        want += loss;
    }
    memset(g_eval_scores, 0, sizeof g_eval_scores);
    for (int k = 0; k < 2; k++) {
        const mdl_pass eval = {.training = false};
        const glm_task t = eval_task(k);
        TZ_EXPECT_OK(glm_task_step(g_ref, &t, &eval, 0.0f, &g_eval_loss[k], g_eval_scores[k]));
    }
    stage_run runs[MAXP];
    for (int s = 0; s < P; s++) runs[s] = (stage_run){.M = M};
    TZ_EXPECT_OK(tz_run_ranks(P, 20.0, run_stage, runs, sizeof *runs));
    int compared = 0;
    for (int s = 0; s < P; s++) {
        TZ_EXPECT(runs[s].mismatched == 0, "%s pp %d M %d stage %d: %s", name, P, M, s, runs[s].msg);
        compared += runs[s].compared;
        for (int k = 0; k < 2; k++)
            TZ_EXPECT(runs[s].eval_loss[k] == g_eval_loss[k] &&
                          memcmp(runs[s].eval_scores[k], g_eval_scores[k], sizeof g_eval_scores[k]) == 0,
                      "%s pp %d stage %d: evaluation of batch %d differs from the whole model's", name, P, s, k);
    }
    const rt_params *q = glm_model_params(g_ref);
    TZ_EXPECT(compared == q->n, "%s pp %d: %d parameters on the stages, the whole model has %d", name, P, compared,
              q->n);
    TZ_EXPECT(runs[0].wte_grad && runs[P - 1].wte_grad &&
                  memcmp(runs[0].wte_grad, runs[P - 1].wte_grad,
                         q->specs[rt_params_find(q, "word_embeddings.weight")].numel * sizeof(float)) == 0,
              "%s pp %d: the two copies of word_embeddings have different gradients", name, P);
    TZ_EXPECT(runs[P - 1].loss == want && want > 0, "%s pp %d M %d: loss %.17g, whole model %.17g", name, P, M,
              runs[P - 1].loss, want);
    for (int s = 0; s < P; s++) {
        if (s < P - 1) TZ_EXPECT(runs[s].loss == 0, "%s pp %d: stage %d reports a loss", name, P, s);
        free(runs[s].wte_grad);
    }
    glm_model_free(g_ref);
    g_ref = NULL;
}

/* What a stage cannot do, refused in one line: generation, and layers that do not divide. */
static void check_refusals(void) {
    rt_comm *two[2], *three[3];
    glm_model *m = NULL;
    glm_decoder *d = NULL;
    TZ_EXPECT_OK(rt_comm_threads_create(2, 1.0, two));
    TZ_EXPECT_OK(rt_comm_threads_create(3, 1.0, three));
    TZ_EXPECT(make(g_ref_be, three[0], &m) == RT_ERR_CONFIG && strstr(rt_error_message(), "--pp 3 does not divide"),
              "pp 3 of 4 layers: %s", rt_error_message());
    TZ_EXPECT_OK(make(g_ref_be, two[1], &m));
    if (m) {
        TZ_EXPECT(glm_decoder_init(m, 1, 1, 4, 4, &d) == RT_ERR_CONFIG &&
                      strstr(rt_error_message(), "needs the whole model"),
                  "a stage's decoder: %s", rt_error_message());
        const rt_params *p = glm_model_params(m);
        const int w = rt_params_find(p, "word_embeddings.weight");
        TZ_EXPECT(w >= 0 && p->specs[w].copy && rt_params_find(p, "transformer.position_embeddings.weight") < 0 &&
                      rt_params_find(p, "transformer.final_layernorm.weight") >= 0,
                  "the last stage holds the output layer's copy of word_embeddings and the final LayerNorm only");
    }
    glm_model_free(m);
    for (int i = 0; i < 2; i++) rt_comm_free(two[i]);
    for (int i = 0; i < 3; i++) rt_comm_free(three[i]);
}

int main(void) {
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &g_ref_be));
    if (!g_ref_be) return tz_test_result("test_pipe_glm");
    const int Ms[3] = {1, 3, 5};
    const glm_head_kind heads[3] = {GLM_HEAD_LM, GLM_HEAD_CLOZE, GLM_HEAD_CHOICE};
    for (int r = 0; r < 2; r++) {
        g_recompute = r;
        for (int h = 0; h < 3; h++)
            for (int P = 2; P <= MAXP; P += 2)
                for (int i = 0; i < 3; i++) check(heads[h], P, Ms[i]);
    }
    check_refusals();
    rt_backend_free(g_ref_be);
    return tz_test_result("test_pipe_glm");
}
