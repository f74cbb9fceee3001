/* ZeRO through the shared training loop, on a tiny GPT-2 with dropout off, one thread per dp
 * rank over the in-process threads communicator (each rank with its own CPU backend and its
 * own model):
 * - ZeRO-1 and ZeRO-2 at dp = 2 and dp = 5 give plain data parallelism's loss, weights and
 *   AdamW moments (read back from the checkpoint, which also checks the regather) at each of 5
 *   steps, each step from plain dp's state after the step before (see compare_step: ZeRO sums
 *   the gradient norm in another order). dp = 5 does not divide the slab, so the padding is
 *   exercised; every dp cuts some parameters in the middle, and the large weight decay (0.5)
 *   makes a wrong decay setting on a cut parameter visible (LayerNorm weights would drift by
 *   5e-4 a step);
 * - every rank ends with the same parameters (the all-gather);
 * - offload gives the same bits as no offload (the same CPU AdamW over host copies);
 * - ZeRO-3 (weights sharded block by block, gathered as the model asks) gives the same, at
 *   dp = 2 and 5; with --offload-params or --offload-optimizer, and with the model built on a
 *   second backend (rt_backend.params_staging, GPU ZeRO-3's host build), the same bits as without;
 *   with gradient accumulation and a last batch smaller than dp (a rank runs a stand-in with a
 *   zero loss scale so that its gathers stay in step) it still matches plain dp;
 * - a ZeRO-1 run stopped after 3 steps with a checkpoint resumes bit-exactly at ZeRO-1 and
 *   the same dp, and its first resumed step is within tolerance at ZeRO-0, at ZeRO-2 over
 *   dp = 3 and at ZeRO-3 over dp = 3; a ZeRO-3 checkpoint resumes bit-exactly at ZeRO-3.
 * Every run uses the constant schedule, so that a run of k + 1 steps resumed after step k takes
 * the learning rate a longer run takes at step k + 1. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_native.h"
#include "checkpoints/ckpt_train.h"
#include "data/data_loader.h"
#include "models/gpt2/gpt2.h"
#include "runtime/comm/rt_launch.h"
#include "runtime/base/rt_log.h"
#include "runtime/train/rt_zero.h"
#include "tests/testutil.h"

enum { N_EXAMPLES = 36, VOCAB = 1000, MAX_DP = 5, STEPS = 5, BATCH = 6 };

static data_tokenized g_ds;

typedef struct {
    int dp, zero;
    int accum, batch; /* 0: 1 and BATCH */
    bool offload, offload_params, resume;
    bool staged; /* the model built on a second (host) backend, as ZeRO-3 on a GPU does */
    int64_t steps;
    int save_interval;
    bool keep_all; /* every checkpoint (the reference of compare_step), not the last 2 */
    const char *dir;
} run_cfg;

typedef struct {
    const run_cfg *cfg;
    rt_comm *comm;
    rt_backend *be;
    gpt2_model *m;
    rt_status st;
    char msg[512];
} rank_arg;

static rt_status fwd_bwd(void *ctx, const rt_batch *b, uint64_t seed, int64_t step, int micro, float scale,
                         double *loss) {
    mdl_pass pass = {.seed = seed, .step = step, .micro = micro, .training = true};
    return gpt2_cls_step(ctx, b, &pass, scale, loss, NULL);
}

static rt_status rank_run(rank_arg *a) {
    rt_status st = RT_OK;
    const run_cfg *c = a->cfg;
    data_loader *loader = NULL;
    gpt2_config cfg;
    gpt2_config_default(&cfg);
    cfg.vocab_size = VOCAB;
    cfg.n_positions = 32;
    cfg.n_embd = 32;
    cfg.n_layer = 2;
    cfg.n_head = 4;
    cfg.pad_token_id = VOCAB - 1;
    cfg.embd_pdrop = cfg.resid_pdrop = cfg.attn_pdrop = 0.0f;
    RT_TRY(rt_backend_init("cpu", 1, &a->be));
    if (c->staged) RT_TRY(rt_backend_init("cpu", 1, &a->be->params_staging));
    RT_TRY(gpt2_model_init(&cfg, a->be, rt_comm_self(), BATCH, 24, 11, &a->m));
    if (c->staged)
        TZ_EXPECT(gpt2_model_params(a->m)->be == a->be->params_staging && gpt2_model_params(a->m)->device == a->be,
                  "a staged model's slab is on the staging backend");
    data_sampler_opts so = {.seed = 5, .shuffle = true, .rank = a->comm->rank, .world = a->comm->size};
    const int batch = c->batch ? c->batch : BATCH;
    RT_TRY(data_loader_init(&g_ds, &so, batch, VOCAB - 1, &(data_pad){.multiple = 1}, &loader));
    rt_train_opts o = tz_train_opts(c->steps, batch, c->accum ? c->accum : 1, c->dir);
    o.epochs = 2;
    o.weight_decay = 0.5, o.warmup = 2, o.clip = 0.5, o.schedule = "constant";
    o.log_interval = 1;
    o.save_interval = c->save_interval;
    o.keep = c->keep_all ? 0 : 2;
    o.resume = c->resume;
    o.dp = a->comm, o.zero = c->zero, o.offload_optimizer = c->offload, o.offload_params = c->offload_params;
    rt_train_model tm = {.ctx = a->m, .params = gpt2_model_params(a->m), .forward_backward = fwd_bwd};
    rt_train_data td = data_loader_train_data(loader);
    rt_train_result res;
    RT_TRY(rt_train(&o, &tm, &td, NULL, ckpt_train_io(), &res));
    if (c->staged)
        TZ_EXPECT(tm.params->be == a->be && !tm.params->device,
                  "after ZeRO-3 the parameters are on the compute backend");
fail:
    data_loader_free(loader);
    return st;
}

static void *rank_main(void *arg) {
    rank_arg *a = arg;
    a->st = rank_run(a);
    if (a->st != RT_OK) snprintf(a->msg, sizeof a->msg, "%s", rt_error_message());
    return NULL;
}

typedef struct {
    int dp;
    rank_arg ranks[MAX_DP];
    double losses[16];
    int n_losses;
    bool ok;
} run_out;

/* Train losses, in order, from the lead rank's metrics.jsonl. */
static int read_losses(const char *dir, double *out, int cap) {
    char path[512], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    int n = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f) && n < cap) {
        if (!strstr(line, "\"type\":\"train\"")) continue;
        const char *l = strstr(line, "\"loss\":");
        if (l) out[n++] = strtod(l + 7, NULL);
    }
    fclose(f);
    return n;
}

static void run(const run_cfg *c, run_out *out) {
    rt_comm *comms[MAX_DP] = {0};
    pthread_t th[MAX_DP];
    memset(out, 0, sizeof *out);
    out->dp = c->dp;
    TZ_EXPECT_OK(rt_comm_threads_create(c->dp, 60.0, comms));
    if (!comms[0]) return;
    for (int r = 0; r < c->dp; r++) {
        out->ranks[r] = (rank_arg){.cfg = c, .comm = comms[r]};
        TZ_EXPECT(pthread_create(&th[r], NULL, rank_main, &out->ranks[r]) == 0, "pthread_create rank %d", r);
    }
    out->ok = true;
    for (int r = 0; r < c->dp; r++) {
        pthread_join(th[r], NULL);
        TZ_EXPECT(out->ranks[r].st == RT_OK, "dp=%d zero=%d rank %d: %s: %s", c->dp, c->zero, r,
                  rt_status_name(out->ranks[r].st), out->ranks[r].msg);
        out->ok &= out->ranks[r].st == RT_OK && out->ranks[r].m;
        rt_comm_free(comms[r]);
    }
    out->n_losses = read_losses(c->dir, out->losses, 16);
    if (!out->ok) return;
    /* the all-gather leaves every rank the same slab */
    const rt_params *p0 = gpt2_model_params(out->ranks[0].m);
    for (int r = 1; r < c->dp; r++)
        TZ_EXPECT(memcmp(gpt2_model_params(out->ranks[r].m)->param, p0->param, p0->numel * sizeof(float)) == 0,
                  "dp=%d zero=%d: rank %d's parameters differ from rank 0's", c->dp, c->zero, r);
}

static void free_out(run_out *o) {
    for (int r = 0; r < o->dp; r++) {
        gpt2_model_free(o->ranks[r].m);
        rt_backend_free(o->ranks[r].be);
    }
}

static const rt_params *params_of(const run_out *o) { return gpt2_model_params(o->ranks[0].m); }

/* A checkpoint (path) loaded into a fresh model's slab (m, v included). */
static gpt2_model *load_path(rt_backend *be, const char *path) {
    gpt2_config cfg;
    gpt2_config_default(&cfg);
    cfg.vocab_size = VOCAB;
    cfg.n_positions = 32;
    cfg.n_embd = 32;
    cfg.n_layer = 2;
    cfg.n_head = 4;
    cfg.pad_token_id = VOCAB - 1;
    gpt2_model *m = NULL;
    char *meta = NULL;
    TZ_EXPECT_OK(gpt2_model_init(&cfg, be, rt_comm_self(), BATCH, 24, 11, &m));
    if (m) TZ_EXPECT_OK(ckpt_train_io()->load(path, gpt2_model_params(m), rt_comm_self(), rt_comm_self(), &meta));
    free(meta);
    return m;
}

/* The newest checkpoint in dir, loaded into a fresh model's slab. */
static gpt2_model *load_latest(rt_backend *be, const char *dir) {
    char path[4096];
    char **found = NULL;
    size_t n_found = 0;
    TZ_EXPECT_OK(ckpt_native_resume_list(dir, &found, &n_found));
    snprintf(path, sizeof path, "%s", n_found ? found[0] : "");
    for (size_t i = 0; i < n_found; i++) free(found[i]);
    free(found);
    return load_path(be, path);
}

static char *fresh_dir(void) { return strdup(tz_tmpdir()); }

static void copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    TZ_EXPECT(in && out, "cannot copy %s to %s", from, to);
    if (in && out) {
        char buf[1 << 16];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0) TZ_EXPECT(fwrite(buf, 1, n, out) == n, "writing %s", to);
    }
    if (in) fclose(in);
    if (out) fclose(out);
}

/* One step of got against ref, from the same state: got runs step k + 1 alone, resumed from the
 * checkpoint after step k in its folder (k = 0: from the start), and its last loss within 1e-5 and
 * its checkpoint's weights within 1e-5 abs + 1e-4 rel (m and v likewise) must be those of ref's
 * checkpoint after step k + 1 (ref: a run that saved every step). Only one step: a layout that
 * sums in another order (ZeRO's gradient norm, slice by slice; another dp's all-reduce) differs in
 * the last bits, and Adam, about lr * sign(g) where g is near eps, grows that step by step past
 * any fixed tolerance. */
static void compare_step(const char *what, run_cfg got, int k, const run_out *ref, const char *ref_dir,
                         rt_backend *be) {
    char name[160], path[4096];
    got.steps = k + 1;
    got.resume = true; /* from the newest checkpoint in got.dir, when there is one */
    got.save_interval = 0;
    got.keep_all = false;
    run_out o;
    run(&got, &o);
    if (!o.ok || !ref->ok) {
        free_out(&o);
        return;
    }
    TZ_EXPECT(o.n_losses > 0 && ref->n_losses > k, "%s step %d: %d losses, reference %d", what, k + 1, o.n_losses,
              ref->n_losses);
    if (o.n_losses > 0 && ref->n_losses > k)
        TZ_EXPECT(fabs(o.losses[o.n_losses - 1] - ref->losses[k]) <= 1e-5, "%s: step %d loss %.9g vs %.9g", what, k + 1,
                  o.losses[o.n_losses - 1], ref->losses[k]);
    free_out(&o);
    TZ_EXPECT_OK(ckpt_train_io()->step_path(ref_dir, k + 1, path, sizeof path));
    gpt2_model *ga = load_latest(be, got.dir), *gb = load_path(be, path);
    if (ga && gb) {
        const rt_params *pa = gpt2_model_params(ga), *pb = gpt2_model_params(gb);
        snprintf(name, sizeof name, "%s: weights after step %d", what, k + 1);
        tz_check_close(name, pa->param, pb->param, pb->numel, 1e-5f, 1e-4f);
        snprintf(name, sizeof name, "%s: exp_avg after step %d", what, k + 1);
        tz_check_close(name, pa->m, pb->m, pb->numel, 1e-6f, 1e-4f);
        snprintf(name, sizeof name, "%s: exp_avg_sq after step %d", what, k + 1);
        tz_check_close(name, pa->v, pb->v, pb->numel, 1e-9f, 1e-4f);
    }
    gpt2_model_free(ga);
    gpt2_model_free(gb);
}

/* got against ref (run with keep_all and a checkpoint every step) at each of ref's steps, each
 * from ref's state after the step before (a copy of its checkpoint in a fresh folder). Except
 * step standin + 1 (-1: none), where a ZeRO-3 rank has no examples: it runs a batch it ran before
 * in their place, and a resumed run has none, so that step runs after step standin, both from
 * ref's state after step standin - 1 (one step apart from ref's state, not several). */
static void compare_steps(const char *what, const run_cfg *got, const run_out *ref, const char *ref_dir, int standin,
                          rt_backend *be) {
    for (int k = 0; k < ref->n_losses; k++) {
        char from[4096], to[4096];
        const int start = k == standin ? k - 1 : k;
        run_cfg c = *got;
        c.dir = fresh_dir();
        if (start > 0) {
            TZ_EXPECT_OK(ckpt_train_io()->step_path(ref_dir, start, from, sizeof from));
            TZ_EXPECT_OK(ckpt_train_io()->step_path(c.dir, start, to, sizeof to));
            copy_file(from, to);
        }
        compare_step(what, c, k, ref, ref_dir, be);
        free((char *)c.dir);
    }
}

/* ZeRO-3's window on its own, one rank: a forward over 6 blocks then a backward gathers each
 * block once going forward and again only for the blocks the window has dropped (the last 3
 * are still there): 2 x 6 - 3 gathers; the values are the parameters, and the model gets the
 * whole slab back. */
static void test_window(rt_backend *be) {
    enum { BLOCKS = 6, N = 40 };
    rt_params p;
    rt_params_init(&p, be);
    for (int k = 0; k < BLOCKS; k++) {
        char name[32];
        snprintf(name, sizeof name, "h.%d.w", k);
        rt_params_add(&p, name, 1, (const int64_t[]){N}, RT_TP_NONE, false, RT_INIT_NORMAL, 1.0f);
    }
    TZ_EXPECT_OK(rt_params_alloc(&p));
    rt_params_init_weights(&p, 5);
    float *want = rt_xmalloc(p.numel * sizeof(float));
    memcpy(want, p.param, p.numel * sizeof(float));
    rt_zero *z = NULL;
    const rt_zero_opts zo = {.stage = 3};
    TZ_EXPECT_OK(rt_zero_init(&p, rt_comm_self(), NULL, &zo, &z));
    if (!z) return;
    TZ_EXPECT(z->n_blocks == BLOCKS && !p.param && p.source, "%d blocks, the slab freed", z->n_blocks);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < BLOCKS; i++) {
            const int k = pass == 0 ? i : BLOCKS - 1 - i;
            TZ_EXPECT(memcmp(rt_params_data(&p, k), want + p.specs[k].offset, N * sizeof(float)) == 0,
                      "block %d's gathered values (pass %d)", k, pass);
        }
    TZ_EXPECT(z->gathers == 2 * BLOCKS - 3, "a forward and a backward over %d blocks took %zu gathers, expected %d",
              BLOCKS, z->gathers, 2 * BLOCKS - 3);
    TZ_EXPECT_OK(rt_zero_gather_params(z));
    TZ_EXPECT(p.param && memcmp(p.param, want, p.numel * sizeof(float)) == 0, "the whole slab back");
    rt_zero_free(z);
    rt_params_free(&p);
    free(want);
}

int main(void) {
    rt_log_set_quiet(getenv("TZ_VERBOSE") == NULL);
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &be));
    test_window(be);
    g_ds = tz_synthetic_pairs(N_EXAMPLES, VOCAB, 0);

    /* equivalence with plain dp at dp = 2 and 5, step by step (the moments are compared
     * through the checkpoints, which ZeRO regathers) */
    for (int dp = 2; dp <= 5; dp += 3) {
        char *d0 = fresh_dir();
        run_cfg c0 = {.dp = dp, .zero = 0, .steps = STEPS, .save_interval = 1, .keep_all = true, .dir = d0};
        run_out o0;
        char what[64];
        run(&c0, &o0);
        if (o0.ok && dp == 5)
            printf("test_zero: slab of %zu floats, %zu mod 5 (padding %s)\n", params_of(&o0)->numel,
                   params_of(&o0)->numel % 5, params_of(&o0)->numel % 5 ? "used" : "not needed");
        TZ_EXPECT(o0.n_losses == STEPS, "dp=%d: %d train losses in metrics.jsonl, expected %d", dp, o0.n_losses, STEPS);
        for (int z = 1; z <= 3; z++) {
            run_cfg cz = c0;
            cz.zero = z;
            snprintf(what, sizeof what, "ZeRO-%d dp=%d vs plain dp", z, dp);
            compare_steps(what, &cz, &o0, d0, -1, be);
        }
        free_out(&o0);
        free(d0);
    }

    /* offloading and staging move the arithmetic, not the numbers: the same bits as the same
     * stage without, over 5 steps (the same layout adds in the same order) */
    {
        char *d1 = fresh_dir(), *d4 = fresh_dir();
        run_cfg c1 = {.dp = 2, .zero = 1, .steps = STEPS, .save_interval = 0, .dir = d1}, c4 = c1;
        c4.zero = 3;
        c4.dir = d4;
        run_out o1, o4;
        run(&c1, &o1);
        run(&c4, &o4);
        for (int k = 0; k < 5; k++) {
            char *d5 = fresh_dir();
            run_cfg c5 = k < 4 ? c4 : c1;
            c5.offload = k == 0 || k == 4;
            c5.offload_params = k == 1 || k == 3;
            c5.staged = k == 2 || k == 3;
            c5.dir = d5;
            const run_out *ref = k < 4 ? &o4 : &o1;
            run_out o5;
            run(&c5, &o5);
            if (o5.ok && ref->ok)
                TZ_EXPECT(
                    memcmp(params_of(&o5)->param, params_of(ref)->param, params_of(ref)->numel * sizeof(float)) == 0,
                    "%s differs from the same stage without",
                    (const char *[]){"ZeRO-3 with --offload-optimizer", "ZeRO-3 with --offload-params",
                                     "ZeRO-3 with a staged build", "ZeRO-3 with a staged build and --offload-params",
                                     "ZeRO-1 with --offload-optimizer"}[k]);
            free_out(&o5);
            free(d5);
        }
        free_out(&o1);
        free_out(&o4);
        free(d1);
        free(d4);
    }

    /* ZeRO-3 with 2 micro-batches a step over dp = 5 and a global batch of 8: 36 examples leave a
     * last batch of 4, so one rank has nothing in that step and runs the stand-in */
    {
        char *d0 = fresh_dir();
        run_cfg c0 = {.dp = 5,
                      .zero = 0,
                      .accum = 2,
                      .batch = 8,
                      .steps = STEPS,
                      .save_interval = 1,
                      .keep_all = true,
                      .dir = d0};
        run_cfg c3 = c0;
        c3.zero = 3;
        run_out o0;
        run(&c0, &o0);
        compare_steps("ZeRO-3 dp=5 accumulation 2, an empty slice vs plain dp", &c3, &o0, d0, 2, be);
        free_out(&o0);
        free(d0);
    }

    /* resume: 6 steps straight vs 3 steps + checkpoint + 3 resumed steps at ZeRO-1 (bits), and
     * the first resumed step in other layouts (compare_step) */
    {
        char *ds = fresh_dir(), *da = fresh_dir(), *db = fresh_dir(), *dc = fresh_dir(), *dd = fresh_dir();
        run_cfg straight = {.dp = 2, .zero = 1, .steps = 6, .save_interval = 1, .keep_all = true, .dir = ds};
        run_out os;
        run(&straight, &os);
        const char *dirs[4] = {da, db, dc, dd};
        for (int k = 0; k < 4; k++) { /* the same first half in four folders */
            run_cfg half = straight;
            half.steps = 3;
            half.save_interval = 0;
            half.keep_all = false;
            half.dir = dirs[k];
            run_out oh;
            run(&half, &oh);
            free_out(&oh);
        }
        run_cfg ra = straight, rb = straight, rc = straight, rd = straight;
        ra.resume = true;
        ra.save_interval = -1;
        ra.keep_all = false;
        ra.dir = da;
        rb.dir = db;
        rb.zero = 0;
        rc.dir = dc;
        rc.zero = 2;
        rc.dp = 3;
        rd.dir = dd;
        rd.zero = 3;
        rd.dp = 3;
        run_out oa;
        run(&ra, &oa);
        if (os.ok && oa.ok) {
            TZ_EXPECT(memcmp(params_of(&oa)->param, params_of(&os)->param, params_of(&os)->numel * sizeof(float)) == 0,
                      "ZeRO-1: 3 steps + resume + 3 differs from 6 steps");
            TZ_EXPECT(oa.n_losses == 6 && os.n_losses == 6 && memcmp(oa.losses, os.losses, 6 * sizeof(double)) == 0,
                      "ZeRO-1: 3 steps + resume + 3 logged other losses than 6 steps");
        }
        compare_step("ZeRO-1 checkpoint resumed at ZeRO-0", rb, 3, &os, ds, be);
        compare_step("ZeRO-1 dp=2 checkpoint resumed at ZeRO-2 dp=3", rc, 3, &os, ds, be);
        compare_step("ZeRO-1 dp=2 checkpoint resumed at ZeRO-3 dp=3", rd, 3, &os, ds, be);
        free_out(&os);
        free_out(&oa);
        free(ds);
        free(da);
        free(db);
        free(dc);
        free(dd);
    }

    /* a ZeRO-3 checkpoint resumes bit-exactly at ZeRO-3 (the shards, m and v go through the
     * full layout and back) */
    {
        char *ds = fresh_dir(), *dh = fresh_dir();
        run_cfg straight = {.dp = 2, .zero = 3, .steps = 6, .save_interval = -1, .dir = ds};
        run_cfg half = straight, rest = straight;
        half.steps = 3;
        half.save_interval = 0;
        half.dir = rest.dir = dh;
        rest.resume = true;
        run_out os, oh, orest;
        run(&straight, &os);
        run(&half, &oh);
        run(&rest, &orest);
        if (os.ok && orest.ok)
            TZ_EXPECT(memcmp(params_of(&orest)->param, params_of(&os)->param, params_of(&os)->numel * sizeof(float)) ==
                          0,
                      "ZeRO-3: 3 steps + resume + 3 differs from 6 steps");
        free_out(&os);
        free_out(&oh);
        free_out(&orest);
        free(ds);
        free(dh);
    }

    data_tokenized_free(&g_ds);
    rt_backend_free(be);
    return tz_test_result("test_zero");
}
