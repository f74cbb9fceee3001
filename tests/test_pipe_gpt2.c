/* The GPT-2 classifier split into pipeline stages (gpt2_model_init_stage, gpt2_pipe_step) on
 * threads, against the whole model stepping through the same micro-batches one after another
 * (gpt2_cls_step with grad accumulation): with dropout on, 2 and 4 stages over 1, 3 and 5
 * micro-batches of different shapes, every parameter's gradient on its stage and the last
 * stage's summed loss equal the whole model's bit for bit. The stages take the whole model's
 * weights by name. Evaluating a batch through the stages gives every stage the whole model's
 * loss and logits. Also: stages that do not divide the layers, and the language model, are
 * refused with one line. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt2.h"
#include "runtime/rt_backend.h"
#include "runtime/rt_comm.h"
#include "runtime/rt_launch.h"
#include "tests/testutil.h"

enum { MAXP = 4, MAXM = 5, MAXB = 3, MAXT = 12, V = 96 };

typedef struct {
    int32_t ids[MAXB * MAXT], mask[MAXB * MAXT], lengths[MAXB], labels[MAXB], index[MAXB];
} host_batch;

static host_batch g_hb[MAXM];
static rt_batch g_b[MAXM];

static void make_batches(void) {
    unsigned s = 99;
    for (int k = 0; k < MAXM; k++) {
        const int B = 1 + k % MAXB, T = 5 + (k * 3) % (MAXT - 4);
        host_batch *h = &g_hb[k];
        for (int r = 0; r < B; r++) {
            const int len = T - (r + k) % 3; /* some rows padded */
            for (int t = 0; t < T; t++) {
                h->ids[r * T + t] = t < len ? (int32_t)((tz_uniform(&s) + 1.0f) * 0.5f * (V - 1)) : 95;
                h->mask[r * T + t] = t < len;
            }
            h->lengths[r] = len, h->labels[r] = (r + k) % 2, h->index[r] = r;
        }
        g_b[k] = (rt_batch){.B = B, .T = T, .input_ids = h->ids, .attention_mask = h->mask, .lengths = h->lengths,
                            .labels = h->labels, .example_index = h->index, .n_targets = B};
    }
}

static gpt2_config tiny(void) {
    gpt2_config c;
    gpt2_config_default(&c);
    c.vocab_size = V, c.n_positions = 32, c.n_embd = 16, c.n_layer = 4, c.n_head = 2, c.num_labels = 2;
    c.pad_token_id = 95;
    return c;
}

/* A parameter's values or gradient on the host (malloc'd). */
static float *fetch(rt_backend *be, const rt_params *p, int i, bool grad) {
    float *h = malloc(p->specs[i].numel * sizeof(float));
    rt_to_host(be, h, (grad ? p->grad : p->param) + p->specs[i].offset, p->specs[i].numel * sizeof(float));
    return h;
}

static gpt2_model *g_ref;
static rt_backend *g_ref_be;

typedef struct {
    rt_comm *pp;
    int M;
    rt_status st;
    char msg[256];
    int mismatched, compared;
    double loss, eval_loss[2];
    float eval_logits[2][MAXB * 2];
} stage_run;

static double g_eval_loss[2];
static float g_eval_logits[2][MAXB * 2];

static void *run_stage(void *arg) {
    stage_run *r = arg;
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    gpt2_model *m = NULL;
    const gpt2_config c = tiny();
    RT_TRY(rt_backend_init("cpu", 1, &be));
    RT_TRY(gpt2_model_init_stage(&c, be, rt_comm_self(), r->pp, MAXM, MAXB, MAXT, 11, &m));
    rt_params *p = gpt2_model_params(m), *q = gpt2_model_params(g_ref);
    for (int i = 0; i < p->n; i++) { /* the whole model's weights */
        const int j = rt_params_find(q, p->specs[i].name);
        RT_CHECK(j >= 0 && q->specs[j].numel == p->specs[i].numel, "%s", p->specs[i].name);
        float *w = fetch(g_ref_be, q, j, false);
        rt_to_device(be, p->param + p->specs[i].offset, w, p->specs[i].numel * sizeof(float));
        free(w);
    }
    RT_TRY(gpt2_pipe_step(m, g_b, r->M, 5, 3, 0.25f, &r->loss));
    for (int i = 0; i < p->n; i++) {
        const int j = rt_params_find(q, p->specs[i].name);
        float *got = fetch(be, p, i, true), *want = fetch(g_ref_be, q, j, true);
        const bool same = memcmp(got, want, p->specs[i].numel * sizeof(float)) == 0;
        if (!same && r->mismatched++ == 0) snprintf(r->msg, sizeof r->msg, "%s's gradient differs", p->specs[i].name);
        r->compared++;
        free(got), free(want);
    }
    /* evaluation: every stage gets the last stage's loss and logits */
    for (int k = 0; k < 2; k++) {
        const mdl_pass eval = {.training = false};
        RT_TRY(gpt2_cls_step(m, &g_b[k], &eval, 0.0f, &r->eval_loss[k], r->eval_logits[k]));
    }
fail:
    if (st != RT_OK) snprintf(r->msg, sizeof r->msg, "%s", rt_error_message());
    r->st = st;
    gpt2_model_free(m);
    rt_backend_free(be);
    return NULL;
}

static void check(int P, int M) {
    /* the reference: M micro-batches through the whole model */
    const gpt2_config c = tiny();
    TZ_EXPECT_OK(gpt2_model_init(&c, g_ref_be, rt_comm_self(), MAXB, MAXT, 11, &g_ref));
    double want = 0;
    for (int k = 0; k < M; k++) {
        const mdl_pass pass = {.seed = 5, .step = 3, .micro = k, .training = true};
        double loss = 0;
        TZ_EXPECT_OK(gpt2_cls_step(g_ref, &g_b[k], &pass, 0.25f, &loss, NULL));
        want += loss;
    }
    for (int k = 0; k < 2; k++) {
        const mdl_pass eval = {.training = false};
        TZ_EXPECT_OK(gpt2_cls_step(g_ref, &g_b[k], &eval, 0.0f, &g_eval_loss[k], g_eval_logits[k]));
    }
    rt_comm *comms[MAXP];
    pthread_t th[MAXP];
    stage_run runs[MAXP];
    TZ_EXPECT_OK(rt_comm_threads_create(P, 20.0, comms));
    for (int s = 0; s < P; s++) {
        runs[s] = (stage_run){.pp = comms[s], .M = M};
        pthread_create(&th[s], NULL, run_stage, &runs[s]);
    }
    int compared = 0;
    for (int s = 0; s < P; s++) {
        pthread_join(th[s], NULL);
        TZ_EXPECT(runs[s].st == RT_OK && runs[s].mismatched == 0, "pp %d M %d stage %d: %s", P, M, s, runs[s].msg);
        compared += runs[s].compared;
        for (int k = 0; k < 2; k++)
            TZ_EXPECT(runs[s].eval_loss[k] == g_eval_loss[k] &&
                          memcmp(runs[s].eval_logits[k], g_eval_logits[k], (size_t)g_b[k].B * 2 * sizeof(float)) == 0,
                      "pp %d stage %d: evaluation of batch %d differs from the whole model's", P, s, k);
        rt_comm_free(comms[s]);
    }
    TZ_EXPECT(compared == gpt2_model_params(g_ref)->n, "pp %d: %d parameters on the stages, the whole model has %d", P,
              compared, gpt2_model_params(g_ref)->n);
    TZ_EXPECT(runs[P - 1].loss == want && want > 0, "pp %d M %d: loss %.17g, whole model %.17g", P, M,
              runs[P - 1].loss, want);
    for (int s = 0; s < P - 1; s++) TZ_EXPECT(runs[s].loss == 0, "pp %d: stage %d reports a loss", P, s);
    gpt2_model_free(g_ref);
}

static void check_refusals(void) {
    gpt2_config c = tiny();
    gpt2_model *m = NULL;
    rt_comm *three[3], *two[2];
    TZ_EXPECT_OK(rt_comm_threads_create(3, 1.0, three));
    TZ_EXPECT_OK(rt_comm_threads_create(2, 1.0, two));
    TZ_EXPECT(gpt2_model_init_stage(&c, g_ref_be, rt_comm_self(), three[0], 4, 2, 8, 1, &m) == RT_ERR_CONFIG &&
                  strstr(rt_error_message(), "--pp 3 does not divide its 4 layers"),
              "pp 3 of 4 layers: %s", rt_error_message());
    c.num_labels = 0;
    TZ_EXPECT(gpt2_model_init_stage(&c, g_ref_be, rt_comm_self(), two[1], 4, 2, 8, 1, &m) == RT_ERR_UNSUPPORTED,
              "the language model in stages: %s", rt_error_message());
    TZ_EXPECT(m == NULL, "a refused model was returned");
    for (int i = 0; i < 3; i++) rt_comm_free(three[i]);
    for (int i = 0; i < 2; i++) rt_comm_free(two[i]);
}

int main(void) {
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &g_ref_be));
    if (!g_ref_be) return tz_test_result("test_pipe_gpt2");
    make_batches();
    const int Ms[3] = {1, 3, 5};
    for (int P = 2; P <= MAXP; P += 2)
        for (int i = 0; i < 3; i++) check(P, Ms[i]);
    check_refusals();
    rt_backend_free(g_ref_be);
    return tz_test_result("test_pipe_gpt2");
}
