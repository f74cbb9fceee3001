/* Which communicator each collective of a training step goes to (rt_grid.h: device comms for
 * backend memory, host comms for host values), checked on CPU where both kinds are the same
 * threads comm underneath.
 *
 * A tiny GPT-2 (dropout off) trains 3 steps of 2 micro-batches at dp = 2 x tp = 2, one thread
 * per rank, through the shared loop, with ZeRO off and with ZeRO-1. The grid's device comms
 * and host comms are wrapped in recording comms, so every call lands in one of two logs:
 * - the device log must hold exactly the slab and activation traffic: per micro-batch
 *   1 + 4 L tp all-reduces (vocab-parallel embedding, two row-parallel outputs and two
 *   column-parallel input gradients per layer) of B*T*C floats outside the parameter slab;
 *   per step one dp all-reduce of the gradient slab (ZeRO-1: a reduce-scatter from the slab
 *   and an all-gather into the parameters, of one shard each);
 * - the host log must hold exactly the scalars, in order, per step: the dp sum of
 *   (targets, tokens, model FLOPs), the dp loss sum, the norm's partial sums (tp all-gather of one
 *   double-float pair; ZeRO-1: dp and tp all-gathers of two pairs), the stop flag's dp and
 *   tp maxima;
 * - the loss sums of every micro-batch, the last loss and every rank's final parameter slab
 *   are bitwise those of the same run without the wrappers (host comm = device comm).
 * Then rt_grid_init_device: a CPU backend or a one-rank grid keeps the host comms; on this
 * machine without a GPU (or without NCCL in the build) a dp = 2 x tp = 2 grid fails on every
 * rank with RT_ERR_UNSUPPORTED and a message naming what is missing, and leaves the grid as
 * it was (nobody waits in an NCCL init). And rt_launch_device_name maps "cuda" to the local
 * rank's GPU. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_train.h"
#include "data/data_loader.h"
#include "models/gpt2/gpt2.h"
#include "runtime/comm/rt_comm_stats.h"
#include "runtime/comm/rt_grid.h"
#include "runtime/comm/rt_launch.h"
#include "runtime/base/rt_log.h"
#include "runtime/train/rt_trainer.h"
#include "tests/testutil.h"

#ifdef TZ_USE_CUDA
#include "runtime/comm/rt_comm_nccl.h"
#endif

enum { WORLD = 4, TP = 2, VOCAB = 300, C = 32, LAYERS = 2, BATCH = 4, ACCUM = 2, STEPS = 3, MAX_T = 24 };
enum { MAX_CALLS = 512, MAX_MICRO = STEPS * ACCUM };

#define OP_BARRIER RT_COMM_OP_COUNT

/* One collective as a recording comm saw it. */
typedef struct {
    char group;       /* 'd' dp, 't' tp */
    int op;           /* rt_comm_op, or OP_BARRIER */
    size_t n;         /* floats (all_reduce; reduce_scatter: n_out; all_gather: n_in), bytes (broadcast) */
    rt_reduce_op red; /* reductions only */
    const void *buf;  /* all_reduce: buf; reduce_scatter: in; all_gather: out; broadcast: buf */
} call_rec;

typedef struct {
    call_rec rec[MAX_CALLS];
    int n, dropped;
} call_log;

typedef struct {
    rt_comm *inner;
    call_log *log;
    char group;
} check_ctx;

static void log_call(check_ctx *c, int op, size_t n, rt_reduce_op red, const void *buf) {
    if (c->log->n == MAX_CALLS) {
        c->log->dropped++;
        return;
    }
    c->log->rec[c->log->n++] = (call_rec){.group = c->group, .op = op, .n = n, .red = red, .buf = buf};
}

static rt_status check_all_reduce(void *ctx, float *buf, size_t n, rt_reduce_op op) {
    check_ctx *c = ctx;
    log_call(c, RT_COMM_OP_ALL_REDUCE, n, op, buf);
    return c->inner->ops->all_reduce(c->inner->ctx, buf, n, op);
}

static rt_status check_reduce_scatter(void *ctx, float *out, const float *in, size_t n_out, rt_reduce_op op) {
    check_ctx *c = ctx;
    log_call(c, RT_COMM_OP_REDUCE_SCATTER, n_out, op, in);
    return c->inner->ops->reduce_scatter(c->inner->ctx, out, in, n_out, op);
}

static rt_status check_all_gather(void *ctx, float *out, const float *in, size_t n_in) {
    check_ctx *c = ctx;
    log_call(c, RT_COMM_OP_ALL_GATHER, n_in, RT_REDUCE_SUM, out);
    return c->inner->ops->all_gather(c->inner->ctx, out, in, n_in);
}

static rt_status check_broadcast(void *ctx, void *buf, size_t bytes, int root) {
    check_ctx *c = ctx;
    log_call(c, RT_COMM_OP_BROADCAST, bytes, RT_REDUCE_SUM, buf);
    return c->inner->ops->broadcast(c->inner->ctx, buf, bytes, root);
}

static rt_status check_barrier(void *ctx) {
    check_ctx *c = ctx;
    log_call(c, OP_BARRIER, 0, RT_REDUCE_SUM, NULL);
    return c->inner->ops->barrier(c->inner->ctx);
}

static rt_status check_split(void *ctx, int color, int key, rt_comm **out) {
    *out = NULL;
    return rt_errorf(RT_ERR_RUNTIME, "test_comm_routing: nothing should split a grid's comm during training");
}

static void check_free(void *ctx) { free(ctx); }

static const rt_comm_ops check_ops = {
    .name = "check",
    .all_reduce = check_all_reduce,
    .reduce_scatter = check_reduce_scatter,
    .all_gather = check_all_gather,
    .broadcast = check_broadcast,
    .barrier = check_barrier,
    .split = check_split,
    .free = check_free,
};

/* A recording view of inner (not owned). */
static rt_comm *check_wrap(rt_comm *inner, call_log *log, char group) {
    check_ctx *c = rt_xcalloc(1, sizeof *c);
    *c = (check_ctx){.inner = inner, .log = log, .group = group};
    rt_comm *w = rt_xcalloc(1, sizeof *w);
    *w = (rt_comm){.ops = &check_ops, .ctx = c, .rank = inner->rank, .size = inner->size};
    return w;
}

static data_tokenized g_ds;

typedef struct {
    rt_comm *world;
    int zero;
    bool routed; /* wrap the comms in recording views */
    const char *dir;
    /* results, read on the main thread */
    call_log dev, host;
    int n_micro;
    int micro_bt[MAX_MICRO]; /* B*T of each micro-batch this rank ran */
    double micro_loss[MAX_MICRO];
    double last_loss;
    float *slab; /* the final parameters (p->numel) */
    size_t numel, shard;
    const float *param_ptr, *grad_ptr; /* where the slab lived during training */
    rt_status st;
    char msg[512];
} rank_arg;

typedef struct {
    rank_arg *a;
    gpt2_model *m;
} fb_ctx;

static rt_status fwd_bwd(void *ctx, const rt_batch *b, uint64_t seed, int64_t step, int micro, float scale,
                         double *loss) {
    fb_ctx *f = ctx;
    mdl_pass pass = {.seed = seed, .step = step, .micro = micro, .training = true};
    rt_status st = gpt2_cls_step(f->m, b, &pass, scale, loss, NULL);
    if (st == RT_OK && f->a->n_micro < MAX_MICRO) {
        f->a->micro_bt[f->a->n_micro] = b->B * b->T;
        f->a->micro_loss[f->a->n_micro++] = *loss;
    }
    return st;
}

static rt_status rank_run(rank_arg *a) {
    rt_status st = RT_OK;
    rt_grid g = {0}, view = {0};
    rt_backend *be = NULL;
    gpt2_model *m = NULL;
    data_loader *loader = NULL;
    gpt2_config cfg;
    RT_TRY(rt_grid_init(a->world, TP, 1, &g));
    view = g;
    if (a->routed) {
        view.dp = check_wrap(g.dp, &a->dev, 'd');
        view.tp = check_wrap(g.tp, &a->dev, 't');
        view.dp_host = check_wrap(g.dp_host, &a->host, 'd');
        view.tp_host = check_wrap(g.tp_host, &a->host, 't');
    }
    gpt2_config_default(&cfg);
    cfg.vocab_size = VOCAB;
    cfg.n_positions = 32;
    cfg.n_embd = C;
    cfg.n_layer = LAYERS;
    cfg.n_head = 4;
    cfg.pad_token_id = VOCAB - 1;
    cfg.embd_pdrop = cfg.resid_pdrop = cfg.attn_pdrop = 0.0f;
    RT_TRY(rt_backend_init("cpu", 1, &be));
    RT_TRY(gpt2_model_init(&cfg, be, view.tp, BATCH, MAX_T, 11, &m));
    data_sampler_opts so = {.seed = 5, .shuffle = true, .rank = g.dp_rank, .world = g.dp_size};
    RT_TRY(data_loader_init(&g_ds, &so, BATCH, VOCAB - 1, &(data_pad){.multiple = 1}, &loader));
    rt_train_opts o = tz_train_opts(STEPS, BATCH, ACCUM, a->dir);
    o.clip = 0.5;
    o.log_interval = 1;
    o.dp = view.dp, o.tp = view.tp, o.dp_host = view.dp_host, o.tp_host = view.tp_host;
    o.zero = a->zero;
    fb_ctx fb = {.a = a, .m = m};
    rt_params *p = gpt2_model_params(m);
    rt_train_model tm = {.ctx = &fb, .params = p, .forward_backward = fwd_bwd};
    rt_train_data td = data_loader_train_data(loader);
    rt_train_result res;
    RT_TRY(rt_train(&o, &tm, &td, NULL, ckpt_train_io(), &res));
    a->last_loss = res.last_train_loss;
    a->numel = p->numel;
    a->shard = (p->numel + (size_t)g.dp_size - 1) / (size_t)g.dp_size;
    a->param_ptr = p->param;
    a->grad_ptr = p->grad;
    a->slab = rt_xmalloc(p->numel * sizeof(float));
    rt_to_host(be, a->slab, p->param, p->numel * sizeof(float));
fail:
    data_loader_free(loader);
    gpt2_model_free(m);
    rt_backend_free(be);
    if (a->routed) {
        rt_comm_free(view.dp);
        rt_comm_free(view.tp);
        rt_comm_free(view.dp_host);
        rt_comm_free(view.tp_host);
    }
    rt_grid_free(&g);
    return st;
}

static void *rank_main(void *arg) {
    rank_arg *a = arg;
    a->st = rank_run(a);
    if (a->st != RT_OK) snprintf(a->msg, sizeof a->msg, "%s", rt_error_message());
    return NULL;
}

/* Runs the 4 ranks; false when a rank failed (reported). */
static bool run(rank_arg *ranks, int zero, bool routed) {
    rt_comm *comms[WORLD] = {0};
    pthread_t th[WORLD];
    bool ok = true;
    const char *dir = tz_tmpdir();
    TZ_EXPECT_OK(rt_comm_threads_create(WORLD, 60.0, comms));
    if (!comms[0]) return false;
    for (int r = 0; r < WORLD; r++) {
        memset(&ranks[r], 0, sizeof ranks[r]);
        ranks[r].world = comms[r];
        ranks[r].zero = zero;
        ranks[r].routed = routed;
        ranks[r].dir = dir;
        TZ_EXPECT(pthread_create(&th[r], NULL, rank_main, &ranks[r]) == 0, "pthread_create rank %d", r);
    }
    for (int r = 0; r < WORLD; r++) {
        pthread_join(th[r], NULL);
        TZ_EXPECT(ranks[r].st == RT_OK, "zero=%d routed=%d rank %d: %s: %s", zero, routed, r,
                  rt_status_name(ranks[r].st), ranks[r].msg);
        ok &= ranks[r].st == RT_OK;
        rt_comm_free(comms[r]);
    }
    return ok;
}

static const char *op_name(int op) { return op == OP_BARRIER ? "barrier" : rt_comm_op_name((rt_comm_op)op); }

/* Checks the next record of log (at *i) is {group, op, n, red} and returns it; NULL (after
 * reporting) on a mismatch or the log's end, where the caller stops rather than report every
 * later call as well. */
static const call_rec *expect_call(const char *what, int rank, const call_log *log, int *i, char group, int op,
                                   size_t n, rt_reduce_op red) {
    if (*i >= log->n) {
        TZ_EXPECT(*i < log->n, "%s rank %d: call %d (%c %s of %zu) missing: the log ends", what, rank, *i, group,
                  op_name(op), n);
        return NULL;
    }
    const call_rec *c = &log->rec[(*i)++];
    bool ok = c->group == group && c->op == op && c->n == n && c->red == red;
    TZ_EXPECT(ok, "%s rank %d: call %d is %c %s of %zu (op %d), expected %c %s of %zu (op %d)", what, rank, *i - 1,
              c->group, op_name(c->op), c->n, (int)c->red, group, op_name(op), n, (int)red);
    return ok ? c : NULL;
}

#define EXPECT_CALL(c, ...)                            \
    do {                                               \
        if (!((c) = expect_call(__VA_ARGS__))) return; \
    } while (0)

static bool in_slab(const void *p, const float *base, size_t n) {
    const float *f = p;
    return f >= base && f < base + n;
}

/* The host log: only the per-step scalars, in the loop's order. */
static void check_host_log(const char *what, int rank, const rank_arg *a) {
    int i = 0;
    const call_log *h = &a->host;
    const call_rec *c;
    TZ_EXPECT(h->dropped == 0, "%s rank %d: %d host calls beyond the log", what, rank, h->dropped);
    for (int s = 0; s < STEPS; s++) {
        EXPECT_CALL(c, what, rank, h, &i, 'd', RT_COMM_OP_ALL_REDUCE, 3, RT_REDUCE_SUM); /* targets, tokens, FLOPs */
        EXPECT_CALL(c, what, rank, h, &i, 'd', RT_COMM_OP_ALL_REDUCE, 1, RT_REDUCE_SUM); /* loss sum */
        if (a->zero) { /* (replicated, sharded) squares as two double-float pairs, over dp then tp */
            EXPECT_CALL(c, what, rank, h, &i, 'd', RT_COMM_OP_ALL_GATHER, 4, RT_REDUCE_SUM);
            EXPECT_CALL(c, what, rank, h, &i, 't', RT_COMM_OP_ALL_GATHER, 4, RT_REDUCE_SUM);
        } else { /* the sharded squares' double-float pair over tp */
            EXPECT_CALL(c, what, rank, h, &i, 't', RT_COMM_OP_ALL_GATHER, 2, RT_REDUCE_SUM);
        }
        EXPECT_CALL(c, what, rank, h, &i, 'd', RT_COMM_OP_ALL_REDUCE, 1, RT_REDUCE_MAX); /* stop flag */
        EXPECT_CALL(c, what, rank, h, &i, 't', RT_COMM_OP_ALL_REDUCE, 1, RT_REDUCE_MAX);
    }
    TZ_EXPECT(i == h->n, "%s rank %d: %d host calls, expected %d", what, rank, h->n, i);
    /* all of them on host memory: none inside the slab */
    for (int k = 0; k < h->n; k++)
        TZ_EXPECT(!in_slab(h->rec[k].buf, a->param_ptr, a->numel) && !in_slab(h->rec[k].buf, a->grad_ptr, a->numel),
                  "%s rank %d: host call %d points into the parameter slab", what, rank, k);
}

/* The device log: activations per micro-batch, then the slab's dp traffic, per step. */
static void check_device_log(const char *what, int rank, const rank_arg *a) {
    int i = 0, micro = 0;
    const call_log *d = &a->dev;
    const call_rec *c;
    TZ_EXPECT(d->dropped == 0, "%s rank %d: %d device calls beyond the log", what, rank, d->dropped);
    TZ_EXPECT(a->n_micro == STEPS * ACCUM, "%s rank %d: %d micro-batches, expected %d", what, rank, a->n_micro,
              STEPS * ACCUM);
    for (int s = 0; s < STEPS; s++) {
        for (int k = 0; k < ACCUM && micro < a->n_micro; k++, micro++) {
            const size_t acts = (size_t)a->micro_bt[micro] * C;
            for (int l = 0; l < 1 + 4 * LAYERS; l++) {
                EXPECT_CALL(c, what, rank, d, &i, 't', RT_COMM_OP_ALL_REDUCE, acts, RT_REDUCE_SUM);
                TZ_EXPECT(!in_slab(c->buf, a->param_ptr, a->numel) && !in_slab(c->buf, a->grad_ptr, a->numel),
                          "%s rank %d: activation call %d points into the parameter slab", what, rank, i - 1);
            }
        }
        if (a->zero) {
            EXPECT_CALL(c, what, rank, d, &i, 'd', RT_COMM_OP_REDUCE_SCATTER, a->shard, RT_REDUCE_SUM);
            TZ_EXPECT(c->buf == a->grad_ptr, "%s rank %d: the reduce-scatter is not from the gradient slab", what,
                      rank);
            EXPECT_CALL(c, what, rank, d, &i, 'd', RT_COMM_OP_ALL_GATHER, a->shard, RT_REDUCE_SUM);
            TZ_EXPECT(c->buf == a->param_ptr, "%s rank %d: the all-gather is not into the parameters", what, rank);
        } else { /* the slab fits one bucket */
            EXPECT_CALL(c, what, rank, d, &i, 'd', RT_COMM_OP_ALL_REDUCE, a->numel, RT_REDUCE_SUM);
            TZ_EXPECT(c->buf == a->grad_ptr, "%s rank %d: the dp all-reduce is not on the gradient slab", what, rank);
        }
    }
    TZ_EXPECT(i == d->n, "%s rank %d: %d device calls, expected %d", what, rank, d->n, i);
}

static void check_routing(int zero) {
    static rank_arg routed[WORLD], plain[WORLD];
    char what[64];
    snprintf(what, sizeof what, "zero=%d", zero);
    bool ok = run(routed, zero, true) && run(plain, zero, false);
    if (!ok) return;
    for (int r = 0; r < WORLD; r++) {
        check_host_log(what, r, &routed[r]);
        check_device_log(what, r, &routed[r]);
        TZ_EXPECT(routed[r].last_loss > 0.1 && routed[r].last_loss < 20, "%s rank %d: last loss %g", what, r,
                  routed[r].last_loss);
        TZ_EXPECT(routed[r].last_loss == plain[r].last_loss, "%s rank %d: last loss %.17g, one comm per group %.17g",
                  what, r, routed[r].last_loss, plain[r].last_loss);
        TZ_EXPECT(routed[r].n_micro == plain[r].n_micro && memcmp(routed[r].micro_loss, plain[r].micro_loss,
                                                                  sizeof(double) * (size_t)routed[r].n_micro) == 0,
                  "%s rank %d: micro-batch loss sums differ from one comm per group", what, r);
        TZ_EXPECT(routed[r].numel == plain[r].numel &&
                      memcmp(routed[r].slab, plain[r].slab, routed[r].numel * sizeof(float)) == 0,
                  "%s rank %d: final parameters differ from one comm per group", what, r);
    }
    /* tp ranks of one replica hold different shards, dp replicas the same ones */
    TZ_EXPECT(memcmp(routed[0].slab, routed[TP].slab, routed[0].numel * sizeof(float)) == 0,
              "%s: dp replicas 0 and 1 of tp rank 0 differ", what);
    for (int r = 0; r < WORLD; r++) {
        free(routed[r].slab);
        free(plain[r].slab);
    }
}

/* ---- rt_grid_init_device without a usable GPU ---- */

typedef struct {
    rt_comm *world;
    rt_status st;
    char msg[512];
    bool unchanged;
} dev_arg;

static void *dev_main(void *arg) {
    dev_arg *a = arg;
    rt_grid g;
    a->st = rt_grid_init(a->world, TP, 1, &g);
    if (a->st != RT_OK) {
        snprintf(a->msg, sizeof a->msg, "grid: %s", rt_error_message());
        return NULL;
    }
    rt_comm *tp = g.tp, *dp = g.dp;
    /* a CPU backend keeps the host comms, with no communication */
    rt_status cpu = rt_grid_init_device(&g, -1, 5.0);
    a->st = rt_grid_init_device(&g, 0, 5.0);
    if (a->st != RT_OK) snprintf(a->msg, sizeof a->msg, "%s", rt_error_message());
    a->unchanged = cpu == RT_OK && g.tp == tp && g.dp == dp && g.tp_host == tp && g.dp_host == dp;
    rt_grid_free(&g);
    return NULL;
}

static void check_device_refusal(void) {
    rt_grid one;
    TZ_EXPECT_OK(rt_grid_init(rt_comm_self(), 1, 1, &one));
    TZ_EXPECT_OK(rt_grid_init_device(&one, 0, 5.0)); /* one rank needs no comm, GPU or not */
    TZ_EXPECT(one.tp == rt_comm_self() && one.dp_host == rt_comm_self(), "one-rank grid changed");
    rt_grid_free(&one);
#ifdef TZ_USE_CUDA
    if (rt_comm_nccl_probe(0) == RT_OK) {
        fprintf(stderr, "test_comm_routing: a GPU with NCCL is present: the refusal check does not apply\n");
        return;
    }
#endif
    rt_comm *comms[WORLD] = {0};
    pthread_t th[WORLD];
    dev_arg args[WORLD];
    TZ_EXPECT_OK(rt_comm_threads_create(WORLD, 20.0, comms));
    if (!comms[0]) return;
    for (int r = 0; r < WORLD; r++) {
        args[r] = (dev_arg){.world = comms[r]};
        TZ_EXPECT(pthread_create(&th[r], NULL, dev_main, &args[r]) == 0, "pthread_create rank %d", r);
    }
    for (int r = 0; r < WORLD; r++) {
        pthread_join(th[r], NULL);
        rt_comm_free(comms[r]);
#ifdef TZ_USE_CUDA
        const char *missing = "no CUDA device";
#ifndef TZ_USE_NCCL
        missing = "has no NCCL";
#endif
#else
        const char *missing = "has no CUDA backend";
#endif
        TZ_EXPECT(args[r].st == RT_ERR_UNSUPPORTED && strstr(args[r].msg, "--device cuda:0 on 4 ranks (dp 2 x tp 2)") &&
                      strstr(args[r].msg, missing),
                  "rank %d: %s: %s (expected RT_ERR_UNSUPPORTED naming '%s')", r, rt_status_name(args[r].st),
                  args[r].msg, missing);
        TZ_EXPECT(args[r].unchanged, "rank %d: the grid's comms changed after a refused or CPU device init", r);
    }
}

/* ---- rt_launch_device_name ---- */

static void check_device_name(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"};
    char *saved[3];
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        saved[i] = v ? rt_xstrdup(v) : NULL;
    }
    char out[32];
    setenv("OMPI_COMM_WORLD_RANK", "5", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    TZ_EXPECT_OK(rt_launch_device_name("cuda", out, sizeof out));
    TZ_EXPECT(strcmp(out, "cuda:1") == 0, "cuda on local rank 1 -> %s", out);
    TZ_EXPECT_OK(rt_launch_device_name("cuda:3", out, sizeof out));
    TZ_EXPECT(strcmp(out, "cuda:3") == 0, "cuda:3 -> %s", out);
    TZ_EXPECT_OK(rt_launch_device_name("cpu", out, sizeof out));
    TZ_EXPECT(strcmp(out, "cpu") == 0, "cpu -> %s", out);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);
    TZ_EXPECT(rt_launch_device_name("cuda", out, sizeof out) == RT_ERR_CONFIG &&
                  strstr(rt_error_message(), "OMPI_COMM_WORLD_LOCAL_RANK"),
              "a malformed local rank: %s", rt_error_message());
    TZ_EXPECT(rt_launch_device_name("cuda:0123456789012345678901234567890123", out, sizeof out) == RT_ERR_USAGE,
              "an over-long device name was accepted");
    for (int i = 0; i < 3; i++) {
        if (saved[i])
            setenv(vars[i], saved[i], 1);
        else
            unsetenv(vars[i]);
        free(saved[i]);
    }
}

int main(void) {
    rt_log_set_quiet(true);
    g_ds = tz_synthetic_pairs(32, VOCAB, 7);
    check_routing(0);
    check_routing(1);
    check_device_refusal();
    check_device_name();
    data_tokenized_free(&g_ds);
    return tz_test_result("test_comm_routing");
}
