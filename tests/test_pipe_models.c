/* The classifiers split into pipeline stages (models/layers/stage_pipe.h) on threads, against the whole
 * model stepping through the same micro-batches one after another (step with grad
 * accumulation), for GPT-2, BERT and RoBERTa: with dropout on, 2 and 4 stages over 1, 3 and 5
 * micro-batches of different shapes, keeping every in-flight micro-batch's activations or
 * recomputing them (pp_recompute), every parameter's gradient on its stage and the last
 * stage's summed loss equal the whole model's bit for bit, and so does evaluating a batch
 * through the stages (every stage gets the loss and logits). The stages take the whole model's
 * weights by name; that they draw the same random init by themselves is checked too. Also:
 * stages that do not divide the layers are refused with one line, and GPT-2's language model
 * keeps a copy of wte on its last stage. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/bert/bert.h"
#include "models/gpt2/gpt2.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/comm/rt_launch.h"
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
        g_b[k] = (rt_batch){.B = B,
                            .T = T,
                            .input_ids = h->ids,
                            .attention_mask = h->mask,
                            .lengths = h->lengths,
                            .labels = h->labels,
                            .example_index = h->index,
                            .n_targets = B};
    }
}

static gpt2_config tiny(void) {
    gpt2_config c;
    gpt2_config_default(&c);
    c.vocab_size = V, c.n_positions = 32, c.n_embd = 16, c.n_layer = 4, c.n_head = 2, c.num_labels = 2;
    c.pad_token_id = 95;
    return c;
}

static bert_config tiny_bert(bool roberta) {
    bert_config c;
    bert_config_default(&c);
    c.roberta = roberta;
    c.vocab_size = V, c.hidden_size = 16, c.num_hidden_layers = 4, c.num_attention_heads = 2;
    c.intermediate_size = 32, c.type_vocab_size = 2, c.pad_token_id = roberta ? 1 : 0;
    c.max_position_embeddings = roberta ? 32 + 2 : 32;
    return c;
}

/* A family: its classifier as a whole model (pp = rt_comm_self()) or as stage pp->rank. */
typedef enum { FAM_GPT2, FAM_BERT, FAM_ROBERTA, FAM_COUNT } family;
static const char *const family_names[FAM_COUNT] = {"GPT-2", "BERT", "RoBERTa"};

static bool g_recompute; /* the stages recompute instead of keeping activations */

static rt_status make(family f, rt_backend *be, rt_comm *pp, mdl_classifier *out) {
    if (f == FAM_GPT2) {
        gpt2_config c = tiny();
        c.pp_recompute = g_recompute;
        gpt2_model *m = NULL;
        rt_status st = gpt2_model_init_stage(&c, be, rt_comm_self(), pp, MAXM, MAXB, MAXT, 11, &m);
        if (st == RT_OK) gpt2_classifier(m, out);
        return st;
    }
    bert_config c = tiny_bert(f == FAM_ROBERTA);
    c.pp_recompute = g_recompute;
    bert_model *m = NULL;
    rt_status st = bert_model_init_stage(&c, be, rt_comm_self(), pp, MAXM, MAXB, MAXT, 11, &m);
    return st == RT_OK ? bert_classifier(m, out) : st;
}

static mdl_classifier g_ref;
static rt_backend *g_ref_be;

typedef struct {
    rt_comm *pp;
    family fam;
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
    mdl_classifier m = {0};
    RT_TRY(rt_backend_init("cpu", 1, &be));
    RT_TRY(make(r->fam, be, r->pp, &m));
    rt_params *p = m.params(m.model), *q = g_ref.params(g_ref.model);
    for (int i = 0; i < p->n; i++) { /* the whole model's weights: the same as the stage's own init */
        const int j = rt_params_find(q, p->specs[i].name);
        RT_CHECK(j >= 0 && q->specs[j].numel == p->specs[i].numel, "%s", p->specs[i].name);
        float *w = tz_fetch_param(g_ref_be, q, j, false), *own = tz_fetch_param(be, p, i, false);
        if (memcmp(w, own, p->specs[i].numel * sizeof(float)) != 0 && r->mismatched++ == 0)
            snprintf(r->msg, sizeof r->msg, "%s's random init differs from the whole model's", p->specs[i].name);
        rt_to_device(be, p->param + p->specs[i].offset, w, p->specs[i].numel * sizeof(float));
        free(w), free(own);
    }
    RT_TRY(m.pipeline_step(m.model, g_b, r->M, 5, 3, 0.25f, &r->loss));
    for (int i = 0; i < p->n; i++) {
        const int j = rt_params_find(q, p->specs[i].name);
        float *got = tz_fetch_param(be, p, i, true), *want = tz_fetch_param(g_ref_be, q, j, true);
        const bool same = memcmp(got, want, p->specs[i].numel * sizeof(float)) == 0;
        if (!same && r->mismatched++ == 0) snprintf(r->msg, sizeof r->msg, "%s's gradient differs", p->specs[i].name);
        r->compared++;
        free(got), free(want);
    }
    /* evaluation: every stage gets the last stage's loss and logits */
    for (int k = 0; k < 2; k++) {
        const mdl_pass eval = {.training = false};
        RT_TRY(m.step(m.model, &g_b[k], &eval, 0.0f, &r->eval_loss[k], r->eval_logits[k]));
    }
fail:
    if (st != RT_OK) snprintf(r->msg, sizeof r->msg, "%s", rt_error_message());
    r->st = st;
    if (m.free) m.free(m.model);
    rt_backend_free(be);
    return NULL;
}

static void check(family fam, int P, int M) {
    char name[48];
    snprintf(name, sizeof name, "%s%s", family_names[fam], g_recompute ? " (recompute)" : "");
    /* the reference: M micro-batches through the whole model */
    TZ_EXPECT_OK(make(fam, g_ref_be, rt_comm_self(), &g_ref));
    if (!g_ref.model) return;
    double want = 0;
    for (int k = 0; k < M; k++) {
        const mdl_pass pass = {.seed = 5, .step = 3, .micro = k, .training = true};
        double loss = 0;
        TZ_EXPECT_OK(g_ref.step(g_ref.model, &g_b[k], &pass, 0.25f, &loss, NULL));
        want += loss;
    }
    for (int k = 0; k < 2; k++) {
        const mdl_pass eval = {.training = false};
        TZ_EXPECT_OK(g_ref.step(g_ref.model, &g_b[k], &eval, 0.0f, &g_eval_loss[k], g_eval_logits[k]));
    }
    rt_comm *comms[MAXP];
    pthread_t th[MAXP];
    stage_run runs[MAXP];
    TZ_EXPECT_OK(rt_comm_threads_create(P, 20.0, comms));
    for (int s = 0; s < P; s++) {
        runs[s] = (stage_run){.pp = comms[s], .fam = fam, .M = M};
        pthread_create(&th[s], NULL, run_stage, &runs[s]);
    }
    int compared = 0;
    for (int s = 0; s < P; s++) {
        pthread_join(th[s], NULL);
        TZ_EXPECT(runs[s].st == RT_OK && runs[s].mismatched == 0, "%s pp %d M %d stage %d: %s", name, P, M, s,
                  runs[s].msg);
        compared += runs[s].compared;
        for (int k = 0; k < 2; k++)
            TZ_EXPECT(runs[s].eval_loss[k] == g_eval_loss[k] &&
                          memcmp(runs[s].eval_logits[k], g_eval_logits[k], (size_t)g_b[k].B * 2 * sizeof(float)) == 0,
                      "%s pp %d stage %d: evaluation of batch %d differs from the whole model's", name, P, s, k);
        rt_comm_free(comms[s]);
    }
    const int whole = g_ref.params(g_ref.model)->n;
    TZ_EXPECT(compared == whole, "%s pp %d: %d parameters on the stages, the whole model has %d", name, P, compared,
              whole);
    TZ_EXPECT(runs[P - 1].loss == want && want > 0, "%s pp %d M %d: loss %.17g, whole model %.17g", name, P, M,
              runs[P - 1].loss, want);
    for (int s = 0; s < P - 1; s++) TZ_EXPECT(runs[s].loss == 0, "%s pp %d: stage %d reports a loss", name, P, s);
    g_ref.free(g_ref.model);
    g_ref = (mdl_classifier){0};
}

/* Stages that do not divide the layers are refused; GPT-2's language model keeps wte on its
 * first stage and a copy of it (rt_param_spec.copy, drawn from the same init stream) on its last
 * (its training is test_mpi_pipeline's). */
static void check_stage_layouts(void) {
    gpt2_config c = tiny();
    gpt2_model *m = NULL, *ends[2] = {NULL, NULL};
    rt_comm *three[3], *two[2];
    TZ_EXPECT_OK(rt_comm_threads_create(3, 1.0, three));
    TZ_EXPECT_OK(rt_comm_threads_create(2, 1.0, two));
    TZ_EXPECT(gpt2_model_init_stage(&c, g_ref_be, rt_comm_self(), three[0], 4, 2, 8, 1, &m) == RT_ERR_CONFIG &&
                  strstr(rt_error_message(), "--pp 3 does not divide its 4 layers"),
              "pp 3 of 4 layers: %s", rt_error_message());
    TZ_EXPECT(m == NULL, "a refused model was returned");
    c.num_labels = 0;
    for (int s = 0; s < 2; s++)
        TZ_EXPECT_OK(gpt2_model_init_stage(&c, g_ref_be, rt_comm_self(), two[s], 4, 2, 8, 1, &ends[s]));
    if (ends[0] && ends[1]) {
        rt_params *p0 = gpt2_model_params(ends[0]), *p1 = gpt2_model_params(ends[1]);
        const int i0 = rt_params_find(p0, "wte.weight"), i1 = rt_params_find(p1, "wte.weight");
        TZ_EXPECT(i0 >= 0 && !p0->specs[i0].copy && i1 >= 0 && p1->specs[i1].copy,
                  "the language model's wte: first stage %d, last stage's copy %d", i0, i1);
        if (i0 >= 0 && i1 >= 0) {
            float *w0 = tz_fetch_param(g_ref_be, p0, i0, false), *w1 = tz_fetch_param(g_ref_be, p1, i1, false);
            TZ_EXPECT(memcmp(w0, w1, p0->specs[i0].numel * sizeof(float)) == 0, "the wte copy's init differs");
            free(w0), free(w1);
        }
        TZ_EXPECT(rt_params_find(p1, "wpe.weight") < 0, "the last stage holds wpe");
    }
    for (int s = 0; s < 2; s++) gpt2_model_free(ends[s]);
    for (int i = 0; i < 3; i++) rt_comm_free(three[i]);
    for (int i = 0; i < 2; i++) rt_comm_free(two[i]);
}

int main(void) {
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &g_ref_be));
    if (!g_ref_be) return tz_test_result("test_pipe_models");
    make_batches();
    const int Ms[3] = {1, 3, 5};
    for (int r = 0; r < 2; r++) {
        g_recompute = r;
        for (int f = 0; f < FAM_COUNT; f++)
            for (int P = 2; P <= MAXP; P += 2)
                for (int i = 0; i < 3; i++) check((family)f, P, Ms[i]);
    }
    check_stage_layouts();
    rt_backend_free(g_ref_be);
    return tz_test_result("test_pipe_models");
}
