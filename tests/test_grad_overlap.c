/* Overlapping the data-parallel gradient all-reduce with the backward:
 * - each model keeps the contract of rt_grads_hook: the marks it reports during a backward
 *   decrease, and every gradient at or above a mark already holds its final value when the
 *   mark is reported (checked by snapshotting the slab above each mark and comparing with the
 *   end of the backward): GPT-2 (also with activation checkpointing), BERT, T5 (gated, untied
 *   head, encoder and decoder of different depths) and GLM, all with dropout on;
 * - the trainer at dp = 2 (two threads) with small buckets starts some all-reduces inside the
 *   backward, and ends with the same bits as the run that reduces after the backward, over
 *   3 steps of 2 accumulated micro-batches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_train.h"
#include "data/data_loader.h"
#include "models/bert/bert.h"
#include "models/glm/glm.h"
#include "models/gpt2/gpt2.h"
#include "models/t5/t5.h"
#include "runtime/comm/rt_launch.h"
#include "tests/testutil.h"

enum { B = 3, T = 10, MAX_MARKS = 64, N_EXAMPLES = 24, VOCAB = 1000, BATCH = 4 };

/* ---- the contract, model by model ---- */

typedef struct {
    const rt_params *p;
    size_t first[MAX_MARKS];
    float *snap[MAX_MARKS]; /* grad[first ..] when the mark came */
    int n;
} marks;

static void record(void *user, size_t first) {
    marks *mk = user;
    if (mk->n == MAX_MARKS) return;
    size_t n = mk->p->numel - first;
    mk->first[mk->n] = first;
    mk->snap[mk->n] = rt_xmalloc(n * sizeof(float) + 1);
    memcpy(mk->snap[mk->n], mk->p->grad + first, n * sizeof(float));
    mk->n++;
}

static void check_marks(const char *model, marks *mk, int min_marks) {
    TZ_EXPECT(mk->n >= min_marks, "%s: %d marks during the backward, expected at least %d", model, mk->n, min_marks);
    for (int i = 0; i < mk->n; i++) {
        TZ_EXPECT(mk->first[i] < mk->p->numel && (i == 0 || mk->first[i] < mk->first[i - 1]),
                  "%s: mark %d at %zu after %zu (slab %zu)", model, i, mk->first[i], i ? mk->first[i - 1] : 0,
                  mk->p->numel);
        size_t n = mk->p->numel - mk->first[i], diff = 0;
        for (size_t k = 0; k < n; k++)
            diff += memcmp(&mk->snap[i][k], &mk->p->grad[mk->first[i] + k], sizeof(float)) != 0;
        TZ_EXPECT(diff == 0, "%s: %zu gradients above mark %d (offset %zu) changed after it was reported", model, diff,
                  i, mk->first[i]);
        free(mk->snap[i]);
    }
    mk->n = 0;
}

static void test_gpt2(rt_backend *be, int checkpoint) {
    gpt2_config c;
    gpt2_config_default(&c);
    c.vocab_size = 97;
    c.n_positions = 16;
    c.n_embd = 32;
    c.n_layer = 4;
    c.n_head = 4;
    c.pad_token_id = 0;
    c.checkpoint_layers = checkpoint;
    gpt2_model *m = NULL;
    TZ_EXPECT_OK(gpt2_model_init(&c, be, rt_comm_self(), B, T, 7, &m));
    if (!m) return;
    int32_t ids[B * T], mask[B * T], lengths[B] = {T, 7, 4}, labels[B] = {1, 0, 1};
    for (int i = 0; i < B * T; i++) {
        mask[i] = i % T < lengths[i / T];
        ids[i] = mask[i] ? 1 + (i * 17) % 96 : 0;
    }
    rt_batch batch = {
        .B = B, .T = T, .input_ids = ids, .attention_mask = mask, .lengths = lengths, .labels = labels, .n_targets = B};
    marks mk = {.p = gpt2_model_params(m)};
    rt_grads_hook hook = {.ready = record, .user = &mk};
    mdl_pass pass = {.seed = 1, .training = true, .grads = &hook};
    double loss;
    rt_params_zero_grad(gpt2_model_params(m));
    TZ_EXPECT_OK(gpt2_cls_step(m, &batch, &pass, 1.0f, &loss, NULL));
    check_marks(checkpoint ? "GPT-2 (checkpointing)" : "GPT-2", &mk, c.n_layer + 1);
    gpt2_model_free(m);
}

static void test_bert(rt_backend *be) {
    bert_config c;
    bert_config_default(&c);
    c.vocab_size = 97;
    c.hidden_size = 32;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 4;
    c.intermediate_size = 64;
    c.max_position_embeddings = 16;
    c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.1f;
    bert_model *m = NULL;
    TZ_EXPECT_OK(bert_model_init(&c, be, rt_comm_self(), B, T, 9, &m));
    if (!m) return;
    int32_t ids[B * T], mask[B * T], lengths[B] = {T, 6, 3}, labels[B] = {0, 1, 1};
    for (int i = 0; i < B * T; i++) {
        mask[i] = i % T < lengths[i / T];
        ids[i] = mask[i] ? 1 + (i * 11) % 96 : 0;
    }
    rt_batch batch = {
        .B = B, .T = T, .input_ids = ids, .attention_mask = mask, .lengths = lengths, .labels = labels, .n_targets = B};
    marks mk = {.p = bert_model_params(m)};
    rt_grads_hook hook = {.ready = record, .user = &mk};
    mdl_pass pass = {.seed = 2, .training = true, .grads = &hook};
    double loss;
    rt_params_zero_grad(bert_model_params(m));
    TZ_EXPECT_OK(bert_cls_step(m, &batch, &pass, 1.0f, &loss, NULL));
    check_marks("BERT", &mk, c.num_hidden_layers);
    bert_model_free(m);
}

static void test_t5(rt_backend *be) {
    enum { S = 9, TT = 6 };
    t5_config c;
    t5_config_default(&c);
    c.vocab_size = 96;
    c.d_model = 32;
    c.d_kv = 8;
    c.d_ff = 48;
    c.num_heads = 4;
    c.num_layers = 3;
    c.num_decoder_layers = 2;
    c.gated = true;
    c.act = RT_ACT_GELU_TANH;
    c.tie_word_embeddings = false;
    c.scale_decoder_outputs = false;
    c.dropout_rate = 0.1f;
    t5_model *m = NULL;
    TZ_EXPECT_OK(t5_model_init(&c, be, rt_comm_self(), B, S, TT, 17, &m));
    if (!m) return;
    int32_t src[B * S], labels[B * TT];
    for (int i = 0; i < B * S; i++) src[i] = 2 + (i * 19) % 90;
    for (int i = 0; i < B * TT; i++) labels[i] = 2 + (i * 7) % 90;
    t5_batch batch = {.B = B, .S = S, .T = TT, .src_ids = src, .labels = labels};
    marks mk = {.p = t5_model_params(m)};
    rt_grads_hook hook = {.ready = record, .user = &mk};
    mdl_pass pass = {.seed = 3, .training = true, .grads = &hook};
    double loss;
    int n;
    rt_params_zero_grad(t5_model_params(m));
    TZ_EXPECT_OK(t5_step(m, &batch, &pass, 1.0f, &loss, &n, NULL));
    check_marks("T5", &mk, c.num_layers + c.num_decoder_layers + 2);
    t5_model_free(m);
}

static void test_glm(rt_backend *be) {
    glm_config c;
    glm_config_default(&c);
    c.vocab_size = 96;
    c.hidden_size = 32;
    c.num_layers = 3;
    c.num_attention_heads = 4;
    c.max_sequence_length = 16;
    glm_model *m = NULL;
    TZ_EXPECT_OK(glm_model_init(&c, be, rt_comm_self(), B, T, 5, &m));
    if (!m) return;
    int32_t ids[B * T], pos[B * T], bpos[B * T], sep[B], labels[B * T];
    for (int r = 0; r < B; r++) {
        sep[r] = 5 + r;
        for (int t = 0; t < T; t++) {
            int i = r * T + t;
            bool span = t >= sep[r];
            ids[i] = 1 + (i * 13) % 90;
            pos[i] = span ? sep[r] - 1 : t;
            bpos[i] = span ? t - sep[r] + 1 : 0;
            labels[i] = span ? 1 + (i * 3) % 90 : -100;
        }
    }
    glm_inputs in = {.B = B, .T = T, .ids = ids, .pos = pos, .block_pos = bpos, .sep = sep};
    marks mk = {.p = glm_model_params(m)};
    rt_grads_hook hook = {.ready = record, .user = &mk};
    mdl_pass pass = {.seed = 4, .training = true, .grads = &hook};
    double loss;
    rt_params_zero_grad(glm_model_params(m));
    TZ_EXPECT_OK(glm_lm_step(m, &in, labels, &pass, 1.0f, &loss, NULL));
    check_marks("GLM", &mk, c.num_layers + 1);
    glm_model_free(m);
}

/* ---- the trainer at dp = 2 ---- */

static data_tokenized g_ds;

typedef struct {
    gpt2_model *m;
    const rt_grads_hook *grads;
} fb_ctx;

static void set_hook(void *ctx, const rt_grads_hook *hook) { ((fb_ctx *)ctx)->grads = hook; }

static rt_status fwd_bwd(void *ctx, const rt_batch *b, uint64_t seed, int64_t step, int micro, float scale,
                         double *loss) {
    fb_ctx *f = ctx;
    mdl_pass pass = {.seed = seed, .step = step, .micro = micro, .training = true, .grads = f->grads};
    return gpt2_cls_step(f->m, b, &pass, scale, loss, NULL);
}

typedef struct {
    int64_t bucket;
    float *params; /* out: the final slab */
    size_t numel;
    int64_t early;
} rank_arg;

static rt_status rank_run(rt_comm *comm, void *arg) {
    rank_arg *a = arg;
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    gpt2_model *m = NULL;
    data_loader *loader = NULL;
    gpt2_config cfg;
    gpt2_config_default(&cfg);
    cfg.vocab_size = VOCAB;
    cfg.n_positions = 32;
    cfg.n_embd = 32;
    cfg.n_layer = 3;
    cfg.n_head = 4;
    cfg.pad_token_id = VOCAB - 1;
    cfg.embd_pdrop = cfg.resid_pdrop = cfg.attn_pdrop = 0.1f;
    RT_TRY(rt_backend_init("cpu", 1, &be));
    RT_TRY(gpt2_model_init(&cfg, be, rt_comm_self(), BATCH, 24, 11, &m));
    data_sampler_opts so = {.seed = 5, .shuffle = true, .rank = comm->rank, .world = comm->size};
    RT_TRY(data_loader_init(&g_ds, &so, BATCH, VOCAB - 1, &(data_pad){.multiple = 1}, &loader));
    fb_ctx f = {.m = m};
    rt_train_opts o = tz_train_opts(3, BATCH, 2, tz_tmpdir());
    o.dp = comm;
    o.dp_bucket = a->bucket;
    rt_train_model tm = {
        .ctx = &f, .params = gpt2_model_params(m), .forward_backward = fwd_bwd, .set_grads_hook = set_hook};
    rt_train_data td = data_loader_train_data(loader);
    rt_train_result res;
    RT_TRY(rt_train(&o, &tm, &td, NULL, ckpt_train_io(), &res));
    a->early = res.early_buckets;
    a->numel = gpt2_model_params(m)->numel;
    a->params = rt_xmalloc(a->numel * sizeof(float));
    memcpy(a->params, gpt2_model_params(m)->param, a->numel * sizeof(float));
fail:
    data_loader_free(loader);
    gpt2_model_free(m);
    rt_backend_free(be);
    return st;
}

static void run_dp2(int64_t bucket, rank_arg out[2]) {
    out[0] = out[1] = (rank_arg){.bucket = bucket};
    TZ_EXPECT_OK(tz_run_ranks(2, 60.0, rank_run, out, sizeof *out));
}

static void test_trainer(void) {
    g_ds = tz_synthetic_pairs(N_EXAMPLES, VOCAB, 0);
    rank_arg after[2], during[2];
    run_dp2(-1, after);
    run_dp2(3000, during);
    for (int r = 0; r < 2; r++) {
        TZ_EXPECT(after[r].early == 0 && during[r].early > 0, "rank %d: %lld and %lld buckets started in a backward", r,
                  (long long)after[r].early, (long long)during[r].early);
        TZ_EXPECT(after[r].params && during[r].params && after[r].numel == during[r].numel &&
                      memcmp(after[r].params, during[r].params, after[r].numel * sizeof(float)) == 0,
                  "rank %d: the overlapped all-reduce changed the weights", r);
        free(after[r].params);
        free(during[r].params);
    }
    data_tokenized_free(&g_ds);
}

int main(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &be));
    if (be) {
        test_gpt2(be, 0);
        test_gpt2(be, 2);
        test_bert(be);
        test_t5(be);
        test_glm(be);
    }
    rt_backend_free(be);
    test_trainer();
    return tz_test_result("test_grad_overlap");
}
