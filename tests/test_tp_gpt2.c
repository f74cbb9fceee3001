/* Megatron tensor parallelism on GPT-2 against Hugging Face: the golden tiny
 * GPT2ForSequenceClassification (tests/golden/gpt2-tiny-cls: 4 heads, width 64, vocab 1000)
 * runs at tp = 2 and tp = 4, one thread per rank over the in-process threads communicator,
 * each rank with its own CPU backend (1 thread) and its own model holding HF's weights
 * sharded. Logits, loss and gradient norm must match HF's, and the gradients (all-gathered back
 * to full tensors) HF's. Then 5 clipped AdamW steps, the norm counting replicated parameters
 * once and sharded ones summed over ranks: each later step's loss and gradient norm must match
 * tp = 1's, measured after one step of tp's own from tp = 1's weights and moments (a checkpoint
 * tp = 1 saved after each step, which tp then loads and steps on from). Sums in another order
 * than tp = 1's differ in the last bits, and Adam (about lr * sign(g) where g is near eps)
 * would grow that step by step past any fixed tolerance. With dropout on, tp = 2 must give
 * tp = 1's losses at 3 steps from the same weights: the attention dropout mask is drawn by
 * global head and step. Tolerances are test_golden_gpt2.c's. Checks run on the main thread,
 * after the ranks join. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_weights.h"
#include "checkpoints/ckpt_safetensors.h"
#include "checkpoints/ckpt_tp.h"
#include "checkpoints/ckpt_train.h"
#include "models/gpt2/gpt2.h"
#include "models/layers/parallel.h"
#include "runtime/comm/rt_launch.h"
#include "runtime/train/rt_optim.h"
#include "tests/testutil.h"

#define FWD_ATOL 1e-5f
#define FWD_RTOL 1e-4f
#define GRAD_ATOL 1e-4f
#define GRAD_RTOL 1e-3f

enum { B = 3, T = 16, MAX_PARAMS = 64, STEPS = 5, DROP_STEPS = 3 };

typedef struct {
    int32_t ids[B * T], mask[B * T], labels[B], lengths[B], index[B];
} tp_batch;

/* What rank 0 reports back (other ranks only their status). */
typedef struct {
    float logits[B * 2], loss;
    int n; /* parameters */
    char names[MAX_PARAMS][RT_PARAM_NAME_MAX];
    float *grads[MAX_PARAMS]; /* full tensors, our [out, in] layout */
    size_t numel[MAX_PARAMS];
    int conv[MAX_PARAMS];
    int64_t rows[MAX_PARAMS], cols[MAX_PARAMS];
    float losses[STEPS], norms[STEPS];
    float drop_losses[DROP_STEPS];
} tp_result;

typedef struct {
    rt_comm *comm;
    const tp_batch *batch;
    const char *dir;
    int dropout;           /* 0: golden run; 1: dropout run */
    const char *state_dir; /* golden run: tp = 1 saves its state after each step here, tp > 1 loads it */
    tp_result *res;        /* rank 0 only */
    rt_status st;
    char msg[512];
} tp_rank_arg;

/* Gathers every parameter's gradient shards to the full tensor on rank 0. */
static rt_status gather_grads(gpt2_model *m, tp_result *res) {
    rt_status st = RT_OK;
    rt_params *p = gpt2_model_params(m);
    rt_comm *tp = gpt2_model_tp(m);
    const int V = gpt2_model_config(m)->vocab_size;
    float *all = NULL;
    RT_CHECK(p->n <= MAX_PARAMS, "%d params", p->n);
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        ckpt_tp_desc d = {.rule = s->tp, .ndim = s->ndim, .rank = tp->rank, .size = tp->size};
        for (int k = 0; k < s->ndim; k++) d.full[k] = s->shape[k];
        if (s->tp == RT_TP_COL || s->tp == RT_TP_QKV) d.full[0] *= tp->size;
        if (s->tp == RT_TP_ROW) d.full[1] *= tp->size;
        if (s->tp == RT_TP_VOCAB) d.full[0] = V;
        all = rt_xrealloc(all, s->numel * (size_t)tp->size * sizeof(float));
        RT_TRY(tp->ops->all_gather(tp->ctx, all, p->grad + s->offset, s->numel));
        if (tp->rank != 0) continue;
        size_t n = (size_t)d.full[0] * (size_t)(s->ndim == 2 ? d.full[1] : 1);
        res->grads[i] = rt_xmalloc(n * sizeof(float));
        ckpt_tp_gather(&d, res->grads[i], all);
        res->numel[i] = n;
        res->rows[i] = d.full[0];
        res->cols[i] = s->ndim == 2 ? d.full[1] : 1;
        long nums[CKPT_MAP_MAX_NUMS];
        int n_nums;
        res->conv[i] = ckpt_map_find_ours(&ckpt_map_gpt2, s->name, nums, &n_nums)->layout == CKPT_LAYOUT_TRANSPOSE;
        snprintf(res->names[i], sizeof res->names[i], "%s", s->name);
    }
    if (tp->rank == 0) res->n = p->n;
fail:
    free(all);
    return st;
}

static rt_status rank_run(tp_rank_arg *a) {
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    gpt2_model *m = NULL;
    gpt2_config cfg;
    char path[4096];
    ckpt_load_report rep;
    rt_comm *tp = a->comm;
    tp_result *res = tp->rank == 0 ? a->res : NULL;
    const tp_batch *tb = a->batch;
    rt_batch batch = {.B = B,
                      .T = T,
                      .input_ids = (int32_t *)tb->ids,
                      .attention_mask = (int32_t *)tb->mask,
                      .lengths = (int32_t *)tb->lengths,
                      .labels = (int32_t *)tb->labels,
                      .example_index = (int32_t *)tb->index,
                      .n_targets = B,
                      .n_tokens = 0};
    rt_adamw_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    double loss_sum = 0, norm = 0;

    RT_TRY(rt_backend_init("cpu", 1, &be));
    snprintf(path, sizeof path, "%s/config.json", a->dir);
    RT_TRY(gpt2_config_load(path, &cfg));
    if (a->dropout) cfg.embd_pdrop = cfg.resid_pdrop = cfg.attn_pdrop = 0.1f;
    RT_TRY(gpt2_model_init(&cfg, be, tp, B, T, 7, &m));
    snprintf(path, sizeof path, "%s/model.safetensors", a->dir);
    RT_TRY(ckpt_load_hf(path, &ckpt_map_gpt2, gpt2_model_params(m), cfg.vocab_size, cfg.n_head, tp->rank, tp->size,
                        NULL, &rep));
    if (rep.missing || rep.unused)
        RT_FAIL(RT_ERR_FORMAT, "rank %d: %d missing (%s), %d unused", tp->rank, rep.missing, rep.first_missing,
                rep.unused);
    rt_params *p = gpt2_model_params(m);
    mdl_pass pass = {.seed = 1, .step = 0, .micro = 0, .training = true};

    if (a->dropout) { /* each step's masks on HF's weights: the step, not training, changes them */
        for (int s = 0; s < DROP_STEPS; s++) {
            rt_params_zero_grad(p);
            pass.step = s;
            RT_TRY(gpt2_cls_step(m, &batch, &pass, 1.0f / B, &loss_sum, NULL));
            if (res) res->drop_losses[s] = (float)(loss_sum / B);
        }
        goto fail;
    }
    /* forward, loss and gradients; then the five clipped steps continue from there */
    float logits[B * 2];
    rt_params_zero_grad(p);
    RT_TRY(gpt2_cls_step(m, &batch, &pass, 1.0f / B, &loss_sum, logits));
    if (res) {
        memcpy(res->logits, logits, sizeof logits);
        res->loss = (float)(loss_sum / B);
    }
    RT_TRY(gather_grads(m, res));
    for (int s = 0; s < STEPS; s++) {
        if (s > 0) { /* step 0's gradients are the ones just computed */
            rt_params_zero_grad(p);
            pass.step = s;
            RT_TRY(gpt2_cls_step(m, &batch, &pass, 1.0f / B, &loss_sum, NULL));
        }
        RT_TRY(rt_grad_norm_tp(p, tp, &norm));
        if (res) {
            res->losses[s] = (float)(loss_sum / B);
            res->norms[s] = (float)norm;
        }
        snprintf(path, sizeof path, "%s/state%d.tzck", a->state_dir, s);
        if (s > 0 && tp->size > 1) { /* step on from tp = 1's state, with its gradients there */
            char *meta = NULL;
            RT_TRY(ckpt_train_load(path, p, tp, rt_comm_self(), &meta));
            free(meta);
            rt_params_zero_grad(p);
            RT_TRY(gpt2_cls_step(m, &batch, &pass, 1.0f / B, &loss_sum, NULL));
            RT_TRY(rt_grad_norm_tp(p, tp, &norm));
        }
        RT_TRY(rt_adamw_step(p, &hp, rt_clip_factor(norm, 1.0), s + 1));
        snprintf(path, sizeof path, "%s/state%d.tzck", a->state_dir, s + 1);
        if (tp->size == 1) RT_TRY(ckpt_train_save(path, p, tp, rt_comm_self(), "{}"));
    }
fail:
    gpt2_model_free(m);
    rt_backend_free(be);
    return st;
}

static void *rank_main(void *arg) {
    tp_rank_arg *a = arg;
    a->st = rank_run(a);
    if (a->st != RT_OK) snprintf(a->msg, sizeof a->msg, "%s", rt_error_message());
    return NULL;
}

/* Runs the ranks of one tp size; returns 1 when all succeeded. */
static int run_tp(int tp, const tp_batch *batch, const char *dir, int dropout, const char *state_dir, tp_result *res) {
    rt_comm *comms[8] = {0};
    pthread_t th[8];
    tp_rank_arg args[8];
    memset(res, 0, sizeof *res);
    TZ_EXPECT_OK(rt_comm_threads_create(tp, 30.0, comms));
    if (!comms[0]) return 0;
    for (int r = 0; r < tp; r++) {
        args[r] = (tp_rank_arg){
            .comm = comms[r], .batch = batch, .dir = dir, .dropout = dropout, .state_dir = state_dir, .res = res};
        TZ_EXPECT(pthread_create(&th[r], NULL, rank_main, &args[r]) == 0, "pthread_create rank %d", r);
    }
    int ok = 1;
    for (int r = 0; r < tp; r++) {
        pthread_join(th[r], NULL);
        TZ_EXPECT(args[r].st == RT_OK, "tp=%d rank %d: %s: %s", tp, r, rt_status_name(args[r].st), args[r].msg);
        ok &= args[r].st == RT_OK;
        rt_comm_free(comms[r]);
    }
    return ok;
}

static void free_result(tp_result *res) {
    for (int i = 0; i < res->n; i++) free(res->grads[i]);
}

/* ref: tp = 1's run, which saved its state after each step in state_dir */
static void check_golden(int tp, const tp_batch *batch, const char *dir, const char *state_dir, const tp_result *ref,
                         const ckpt_st_file *g) {
    tp_result res;
    char what[160];
    if (!run_tp(tp, batch, dir, 0, state_dir, &res)) {
        free_result(&res);
        return;
    }
    float ref_logits[B * 2], ref_loss, ref_norms[STEPS];
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "logits", ref_logits, B * 2));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "loss", &ref_loss, 1));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "gradnorm5", ref_norms, STEPS));
    snprintf(what, sizeof what, "tp=%d logits", tp);
    tz_check_close(what, res.logits, ref_logits, B * 2, FWD_ATOL, FWD_RTOL);
    snprintf(what, sizeof what, "tp=%d loss", tp);
    tz_check_close(what, &res.loss, &ref_loss, 1, FWD_ATOL, FWD_RTOL);
    TZ_EXPECT(res.n > 0, "tp=%d: no gradients gathered", tp);
    for (int i = 0; i < res.n; i++) {
        char name[256];
        snprintf(name, sizeof name, "grad.%s%s", strcmp(res.names[i], "score.weight") ? "transformer." : "",
                 res.names[i]);
        size_t n = res.numel[i];
        float *ref = rt_xmalloc(n * sizeof(float)), *got = res.grads[i], *tr = NULL;
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, name, ref, n));
        if (res.conv[i]) { /* ours [out, in] -> HF's Conv1D [in, out] */
            size_t rows = (size_t)res.rows[i], cols = (size_t)res.cols[i];
            tr = rt_xmalloc(n * sizeof(float));
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++) tr[c * rows + r] = got[r * cols + c];
            got = tr;
        }
        snprintf(what, sizeof what, "tp=%d %s", tp, name);
        tz_check_close(what, got, ref, n, GRAD_ATOL, GRAD_RTOL);
        free(ref);
        free(tr);
    }
    /* the first step from HF's weights; each later one from tp = 1's state one step earlier */
    snprintf(what, sizeof what, "tp=%d gradnorm at HF's weights", tp);
    tz_check_close(what, res.norms, ref_norms, 1, GRAD_ATOL, GRAD_RTOL);
    snprintf(what, sizeof what, "tp=%d losses of steps 2..%d vs tp=1's", tp, STEPS);
    tz_check_close(what, res.losses + 1, ref->losses + 1, STEPS - 1, FWD_ATOL, FWD_RTOL);
    snprintf(what, sizeof what, "tp=%d gradnorms of steps 2..%d vs tp=1's", tp, STEPS);
    tz_check_close(what, res.norms + 1, ref->norms + 1, STEPS - 1, GRAD_ATOL, GRAD_RTOL);
    free_result(&res);
}

/* Bad input fails up front: tp = 3 divides neither the 4 heads nor the FFN width 256. */
static void check_validate(const char *dir) {
    char path[4096];
    gpt2_config cfg;
    snprintf(path, sizeof path, "%s/config.json", dir);
    TZ_EXPECT_OK(gpt2_config_load(path, &cfg));
    TZ_EXPECT(gpt2_config_validate(&cfg, 3) == RT_ERR_CONFIG, "tp=3 over 4 heads accepted");
    TZ_EXPECT(strstr(rt_error_message(), "n_head 4") != NULL, "message: %s", rt_error_message());
    cfg.n_inner = 102; /* heads divide by 4, the FFN width does not */
    TZ_EXPECT(gpt2_config_validate(&cfg, 4) == RT_ERR_CONFIG, "FFN 102 over tp=4 accepted");
    TZ_EXPECT(strstr(rt_error_message(), "FFN width 102") != NULL, "message: %s", rt_error_message());
    cfg.n_inner = 0;
    cfg.vocab_size = 1001; /* any vocab: it is padded */
    TZ_EXPECT_OK(gpt2_config_validate(&cfg, 4));
}

int main(void) {
    const char *dir = tz_source_path("tests/golden/gpt2-tiny-cls");
    char dirbuf[4096], path[4096];
    snprintf(dirbuf, sizeof dirbuf, "%s", dir);
    ckpt_st_file *g = NULL;
    snprintf(path, sizeof path, "%s/golden.safetensors", dirbuf);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    if (!g) return tz_test_result("test_tp_gpt2");
    tp_batch batch;
    const char *names[3] = {"input_ids", "attention_mask", "labels"};
    int32_t *dst[3] = {batch.ids, batch.mask, batch.labels};
    size_t count[3] = {B * T, B * T, B};
    for (int k = 0; k < 3; k++) {
        ckpt_st_tensor t;
        TZ_EXPECT_OK(ckpt_safetensors_find(g, names[k], &t));
        TZ_EXPECT(t.dtype == RT_I32 && t.numel == count[k], "%s: dtype %d numel %zu", names[k], (int)t.dtype, t.numel);
        if (t.dtype == RT_I32 && t.numel == count[k]) memcpy(dst[k], t.data, count[k] * sizeof(int32_t));
    }
    for (int b = 0; b < B; b++) {
        batch.index[b] = b;
        batch.lengths[b] = 0;
        for (int t = 0; t < T; t++) batch.lengths[b] += batch.mask[b * T + t];
    }
    if (tz_test_failures == 0) {
        check_validate(dirbuf);
        const char *state_dir = tz_tmpdir();
        tp_result ref;
        if (run_tp(1, &batch, dirbuf, 0, state_dir, &ref)) {
            check_golden(2, &batch, dirbuf, state_dir, &ref, g);
            check_golden(4, &batch, dirbuf, state_dir, &ref, g);
        }
        free_result(&ref);
        /* dropout 0.1 everywhere: tp = 2 draws the masks tp = 1 draws */
        tp_result r1, r2;
        if (run_tp(1, &batch, dirbuf, 1, NULL, &r1) && run_tp(2, &batch, dirbuf, 1, NULL, &r2)) {
            tz_check_close("dropout tp=2 vs tp=1 losses", r2.drop_losses, r1.drop_losses, DROP_STEPS, 1e-5f, 0);
            float nodrop = 0;
            TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "loss", &nodrop, 1));
            TZ_EXPECT(fabsf(r1.drop_losses[0] - nodrop) > 1e-4f, "dropout had no effect (%g vs %g)", r1.drop_losses[0],
                      nodrop);
        }
    }
    ckpt_safetensors_close(g);
    return tz_test_result("test_tp_gpt2");
}
