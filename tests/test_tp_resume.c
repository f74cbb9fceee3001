/* Checkpoints across tensor-parallel layouts, through the shared training loop: a tiny GPT-2
 * (dropout off, vocab 300, so the embedding is padded to 384 rows at tp=1 and 512 at tp=2 and
 * tp=4) trains 4 steps at tp=2 and checkpoints, then resumes for 4 more at tp=1, tp=2 and
 * tp=4. The tp=2 resume must give an uninterrupted 8-step tp=2 run's losses and final weights
 * bit for bit (the same layout adds in the same order). The tp=1 and tp=4 resumes add in another
 * order, and Adam (about lr * sign(g) where g is near eps) grows a last-bit difference step by
 * step past any fixed tolerance, so they are compared where they start from the checkpoint's
 * weights and moments: the loss of step 5 (the checkpoint's weights) and of step 6 within 1e-5,
 * and the weights after step 5 (gathered to full tensors) within 1e-5 abs / 1e-4 rel of the tp=2
 * run's. Step 1 at tp=2 gives tp=1's loss within 1e-5. Random init depends on tp, so every run
 * starts from one HF-format file written at tp=1. A truncated checkpoint makes every rank of a
 * tp=2 resume fail cleanly (no hang). Ranks are threads over the in-process threads
 * communicator, each with its own 1-thread CPU backend; checks run on the main thread. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_weights.h"
#include "checkpoints/ckpt_native.h"
#include "checkpoints/ckpt_tp.h"
#include "checkpoints/ckpt_train.h"
#include "data/data_loader.h"
#include "models/gpt2/gpt2.h"
#include "runtime/comm/rt_launch.h"
#include "runtime/base/rt_log.h"
#include "tests/testutil.h"

enum { N_EXAMPLES = 24, VOCAB = 300, BATCH = 4, MAX_T = 24, STEPS = 8, HALF = 4, MAX_TP = 4 };

static void config(gpt2_config *cfg) {
    gpt2_config_default(cfg);
    cfg->vocab_size = VOCAB;
    cfg->n_positions = 32;
    cfg->n_embd = 32;
    cfg->n_layer = 2;
    cfg->n_head = 4;
    cfg->pad_token_id = VOCAB - 1;
    cfg->embd_pdrop = cfg->resid_pdrop = cfg->attn_pdrop = 0.0f;
}

/* One run: what rank 0 reports (losses of the steps it ran, the full weights after step HALF + 1
 * and at the end). */
typedef struct {
    float losses[STEPS];
    bool ran[STEPS];
    float *weights, *weights5; /* every parameter's full tensor, back to back */
    size_t n_weights, n_weights5;
} run_result;

typedef struct {
    rt_comm *comm;
    const data_tokenized *ds;
    const char *init_path, *save_dir;
    bool resume;
    int64_t save_interval, fail_at; /* fail_at: forward fails at this step (a crash), -1 never */
    run_result *res;                /* written by rank 0 */
    gpt2_model *m;
    rt_status st;
    char msg[512];
} rank_arg;

static rt_status gather_weights(rt_params *p, rt_comm *tp, float **out, size_t *n_out);

static rt_status fwd_bwd(void *ctx, const rt_batch *b, uint64_t seed, int64_t step, int micro, float scale,
                         double *loss) {
    rank_arg *a = ctx;
    if (step == a->fail_at) return rt_errorf(RT_ERR_RUNTIME, "simulated crash at step %lld", (long long)step);
    if (step == HALF + 1 && micro == 0) { /* the weights after step HALF + 1, the first after a resume */
        run_result *r = a->comm->rank == 0 ? a->res : NULL;
        rt_status st =
            gather_weights(gpt2_model_params(a->m), a->comm, r ? &r->weights5 : NULL, r ? &r->n_weights5 : NULL);
        if (st != RT_OK) return st;
    }
    mdl_pass pass = {.seed = seed, .step = step, .micro = micro, .training = true};
    rt_status st = gpt2_cls_step(a->m, b, &pass, scale, loss, NULL);
    if (st == RT_OK && a->comm->rank == 0 && step < STEPS) { /* one micro-batch per step, dp = 1 */
        a->res->losses[step] = (float)(*loss / (double)b->n_targets);
        a->res->ran[step] = true;
    }
    return st;
}

/* Every parameter gathered to its full tensor on rank 0 (collective): *out, *n_out. */
static rt_status gather_weights(rt_params *p, rt_comm *tp, float **out, size_t *n_out) {
    rt_status st = RT_OK;
    ckpt_tp_scratch scr = {0};
    size_t total = 0;
    for (int i = 0; i < p->n; i++) {
        ckpt_tp_desc d;
        ckpt_tp_param_desc(&p->specs[i], p->specs[i].vocab_rows, tp->rank, tp->size, &d);
        total += ckpt_tp_full_numel(&d);
    }
    float *all = tp->rank == 0 ? rt_xmalloc(total * sizeof(float)) : NULL;
    size_t off = 0;
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        ckpt_tp_desc d;
        ckpt_tp_param_desc(s, s->vocab_rows, tp->rank, tp->size, &d);
        RT_TRY(ckpt_tp_gather_param(p->be, tp, &d, p->param + s->offset, s->numel, &scr, all ? all + off : NULL));
        off += ckpt_tp_full_numel(&d);
    }
    if (all) {
        *out = all;
        *n_out = total;
        all = NULL;
    }
fail:
    free(all);
    ckpt_tp_scratch_free(p->be, &scr);
    return st;
}

static rt_status rank_run(rank_arg *a) {
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    data_loader *loader = NULL;
    gpt2_config cfg;
    ckpt_load_report rep;
    rt_comm *tp = a->comm;
    config(&cfg);
    RT_TRY(rt_backend_init("cpu", 1, &be));
    RT_TRY(gpt2_model_init(&cfg, be, tp, BATCH, MAX_T, 11, &a->m));
    rt_params *p = gpt2_model_params(a->m);
    RT_TRY(ckpt_load_hf(a->init_path, &ckpt_map_gpt2, p, VOCAB, cfg.n_head, tp->rank, tp->size, NULL, &rep));
    if (rep.missing || rep.unused)
        RT_FAIL(RT_ERR_FORMAT, "%s: %d missing (%s), %d unused", a->init_path, rep.missing, rep.first_missing,
                rep.unused);
    data_sampler_opts so = {.seed = 5, .shuffle = true, .world = 1};
    RT_TRY(data_loader_init(a->ds, &so, BATCH, VOCAB - 1, &(data_pad){.multiple = 1}, &loader));
    rt_train_opts o = tz_train_opts(STEPS, BATCH, 1, a->save_dir);
    o.warmup = 2;
    o.save_interval = a->save_interval;
    o.keep = 0;
    o.resume = a->resume;
    o.tp = tp;
    rt_train_model tm = {.ctx = a, .params = p, .forward_backward = fwd_bwd};
    rt_train_data td = data_loader_train_data(loader);
    rt_train_result res;
    RT_TRY(rt_train(&o, &tm, &td, NULL, ckpt_train_io(), &res));
    RT_TRY(gather_weights(p, tp, &a->res->weights, &a->res->n_weights));
fail:
    data_loader_free(loader);
    gpt2_model_free(a->m);
    a->m = NULL;
    rt_backend_free(be);
    return st;
}

static void *rank_main(void *arg) {
    rank_arg *a = arg;
    a->st = rank_run(a);
    if (a->st != RT_OK) snprintf(a->msg, sizeof a->msg, "%s", rt_error_message());
    return NULL;
}

/* Runs one layout; st[r] and msg[r] get each rank's outcome. */
static void run(int tp, const data_tokenized *ds, const char *init_path, const char *save_dir, bool resume,
                int64_t save_interval, int64_t fail_at, run_result *res, rt_status *st, char (*msg)[512]) {
    rt_comm *comms[MAX_TP] = {0};
    pthread_t th[MAX_TP];
    rank_arg args[MAX_TP];
    memset(res, 0, sizeof *res);
    for (int r = 0; r < tp; r++) st[r] = RT_ERR_RUNTIME;
    TZ_EXPECT_OK(rt_comm_threads_create(tp, 30.0, comms));
    if (!comms[0]) return;
    for (int r = 0; r < tp; r++) {
        args[r] = (rank_arg){.comm = comms[r],
                             .ds = ds,
                             .init_path = init_path,
                             .save_dir = save_dir,
                             .resume = resume,
                             .save_interval = save_interval,
                             .fail_at = fail_at,
                             .res = res};
        TZ_EXPECT(pthread_create(&th[r], NULL, rank_main, &args[r]) == 0, "pthread_create rank %d", r);
    }
    for (int r = 0; r < tp; r++) {
        pthread_join(th[r], NULL);
        st[r] = args[r].st;
        snprintf(msg[r], sizeof msg[r], "%s", args[r].msg);
        rt_comm_free(comms[r]);
    }
}

/* Runs a layout that must succeed on every rank. */
static bool run_ok(const char *what, int tp, const data_tokenized *ds, const char *init_path, const char *save_dir,
                   bool resume, run_result *res) {
    rt_status st[MAX_TP];
    char msg[MAX_TP][512];
    run(tp, ds, init_path, save_dir, resume, -1, -1, res, st, msg);
    bool ok = true;
    for (int r = 0; r < tp; r++) {
        TZ_EXPECT(st[r] == RT_OK, "%s: rank %d: %s: %s", what, r, rt_status_name(st[r]), msg[r]);
        ok &= st[r] == RT_OK;
    }
    return ok;
}

/* A resume from the step-HALF checkpoint against the uninterrupted run of the layout that wrote
 * it: bit for bit in that layout; in another, the two steps that start from the checkpoint's
 * state (the losses of steps HALF + 1 and HALF + 2, the weights after step HALF + 1). */
static void compare(const char *what, const run_result *got, const run_result *ref, bool same_layout) {
    char buf[160];
    for (int s = HALF; s < STEPS; s++) TZ_EXPECT(got->ran[s], "%s: step %d did not run", what, s);
    TZ_EXPECT(got->n_weights == ref->n_weights && got->n_weights5 == ref->n_weights5 && ref->n_weights5 > 0,
              "%s: %zu and %zu weights, reference %zu and %zu", what, got->n_weights5, got->n_weights, ref->n_weights5,
              ref->n_weights);
    if (got->n_weights != ref->n_weights || got->n_weights5 != ref->n_weights5) return;
    if (same_layout) {
        TZ_EXPECT(memcmp(got->losses + HALF, ref->losses + HALF, (STEPS - HALF) * sizeof(float)) == 0,
                  "%s: the losses of steps %d..%d differ from the uninterrupted run's", what, HALF + 1, STEPS);
        TZ_EXPECT(memcmp(got->weights, ref->weights, ref->n_weights * sizeof(float)) == 0,
                  "%s: the final weights differ from the uninterrupted run's", what);
        return;
    }
    snprintf(buf, sizeof buf, "%s: losses of steps %d..%d", what, HALF + 1, HALF + 2);
    tz_check_close(buf, got->losses + HALF, ref->losses + HALF, 2, 1e-5f, 0);
    snprintf(buf, sizeof buf, "%s: weights after step %d", what, HALF + 1);
    tz_check_close(buf, got->weights5, ref->weights5, ref->n_weights5, 1e-5f, 1e-4f);
}

static void free_result(run_result *r) {
    free(r->weights);
    free(r->weights5);
}

static void copy_prefix(const char *from, const char *to, long keep_bytes) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    TZ_EXPECT(in && out, "cannot copy %s to %s", from, to);
    if (in && out) {
        char buf[4096];
        long left = keep_bytes;
        size_t n;
        while (left > 0 && (n = fread(buf, 1, left < (long)sizeof buf ? (size_t)left : sizeof buf, in)) > 0) {
            fwrite(buf, 1, n, out);
            left -= (long)n;
        }
    }
    if (in) fclose(in);
    if (out) fclose(out);
}

int main(void) {
    rt_log_set_quiet(true);
    /* ids reach the last real rows, next to the padding */
    data_tokenized ds = tz_synthetic_pairs(N_EXAMPLES, VOCAB, 250);
    char init_path[4096], ckpt[4096], bad[4096];
    const char *init_dir = tz_tmpdir();
    snprintf(init_path, sizeof init_path, "%s/init.safetensors", init_dir);

    /* the shared starting point: the tp=1 random init, as an HF file */
    rt_backend *be = NULL;
    gpt2_model *m0 = NULL;
    gpt2_config cfg;
    config(&cfg);
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &be));
    if (be) TZ_EXPECT_OK(gpt2_model_init(&cfg, be, rt_comm_self(), BATCH, MAX_T, 11, &m0));
    if (m0) TZ_EXPECT_OK(ckpt_save_hf(init_path, &ckpt_map_gpt2, gpt2_model_params(m0), VOCAB, 4, rt_comm_self()));
    gpt2_model_free(m0);
    rt_backend_free(be);
    if (tz_test_failures) return tz_test_result("test_tp_resume");

    run_result ref1, ref, first, res;
    run_ok("straight tp=1", 1, &ds, init_path, tz_tmpdir(), false, &ref1);
    run_ok("straight tp=2", 2, &ds, init_path, tz_tmpdir(), false, &ref);
    for (int s = 0; s < STEPS; s++) TZ_EXPECT(ref.ran[s] && ref1.ran[s], "reference: step %d did not run", s);
    tz_check_close("tp=2 step 1 loss vs tp=1", ref.losses, ref1.losses, 1, 1e-5f, 0);

    /* tp=2: 4 steps, a checkpoint at step 4, then a crash in step 5 */
    const char *dir = tz_tmpdir();
    rt_status st[MAX_TP];
    char msg[MAX_TP][512];
    run(2, &ds, init_path, dir, false, HALF, HALF, &first, st, msg);
    for (int r = 0; r < 2; r++)
        TZ_EXPECT(st[r] == RT_ERR_RUNTIME && strstr(msg[r], "simulated crash"), "tp=2 first half, rank %d: %s: %s", r,
                  rt_status_name(st[r]), msg[r]);
    TZ_EXPECT_OK(ckpt_train_io()->step_path(dir, HALF, ckpt, sizeof ckpt));
    TZ_EXPECT(memcmp(first.losses, ref.losses, HALF * sizeof(float)) == 0,
              "tp=2: the first %d losses differ from the uninterrupted run's", HALF);

    /* the checkpoint holds full tensors: the embedding has the real vocab's rows */
    ckpt_native_file *f = NULL;
    ckpt_native_record rec;
    TZ_EXPECT_OK(ckpt_native_open(ckpt, &f));
    if (f) {
        TZ_EXPECT_OK(ckpt_native_find(f, "param/wte.weight", &rec));
        TZ_EXPECT(rec.ndim == 2 && rec.shape[0] == VOCAB && rec.shape[1] == 32, "wte record %zu x %zu", rec.shape[0],
                  rec.shape[1]);
        TZ_EXPECT_OK(ckpt_native_find(f, "exp_avg/h.0.attn.c_attn.weight", &rec));
        TZ_EXPECT(rec.ndim == 2 && rec.shape[0] == 96 && rec.shape[1] == 32, "c_attn record %zu x %zu", rec.shape[0],
                  rec.shape[1]);
        ckpt_native_close(f);
    }

    /* resume the same checkpoint at tp = 1, 2, 4 (save_interval -1: each leaves it alone) */
    const int tps[3] = {1, 2, 4};
    for (int k = 0; k < 3; k++) {
        char what[64];
        snprintf(what, sizeof what, "tp=2 -> tp=%d resume", tps[k]);
        if (run_ok(what, tps[k], &ds, init_path, dir, true, &res)) compare(what, &res, &ref, tps[k] == 2);
        TZ_EXPECT(!res.ran[0] && !res.ran[HALF - 1], "%s: started from step 0", what);
        free_result(&res);
    }

    /* a truncated checkpoint: every rank fails with an error naming it, none hangs */
    const char *bad_dir = tz_tmpdir();
    TZ_EXPECT_OK(ckpt_train_io()->step_path(bad_dir, HALF, bad, sizeof bad));
    FILE *probe = fopen(ckpt, "rb");
    long size = 0;
    if (probe) {
        fseek(probe, 0, SEEK_END);
        size = ftell(probe);
        fclose(probe);
    }
    copy_prefix(ckpt, bad, size * 2 / 3);
    run(2, &ds, init_path, bad_dir, true, -1, -1, &res, st, msg);
    for (int r = 0; r < 2; r++)
        TZ_EXPECT(st[r] != RT_OK && strstr(msg[r], bad) != NULL, "truncated checkpoint, rank %d: %s: %s", r,
                  rt_status_name(st[r]), msg[r]);
    free_result(&res);

    free_result(&ref1);
    free_result(&ref);
    free_result(&first);
    data_tokenized_free(&ds);
    return tz_test_result("test_tp_resume");
}
