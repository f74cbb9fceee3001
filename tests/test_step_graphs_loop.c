/* The training loop's step graphs (TZ_STEP_GRAPHS=on, runtime/train/rt_trainer.c) on the CPU,
 * through a stand-in for a GPU's graph ops: its capture and its rehearsal mute the backend and
 * check the uploads, and its launch runs the step that was captured or rehearsed. What it checks
 * is the loop's part, which a GPU's graphs need as much:
 * - a run with graphs ends with the same weights and AdamW moments, bit for bit, as without:
 *   every micro-batch's step runs once, captured or replayed, and none is lost or doubled; with
 *   dropout too, whose masks take the step from the step's record (mdl_pass.stream_step);
 * - a key warms up, then captures with its eager run's uploads as the staging's size, then
 *   replays; every graph made is freed by the end;
 * - a rehearsal whose uploads differ and a capture that fails run that step eagerly (the same
 *   weights still), and that key then stays eager;
 * - TZ_STEP_GRAPHS=on on a backend without graphs is an error; an unknown value is too. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_train.h"
#include "models/gpt2/gpt2.h"
#include "runtime/base/rt_log.h"
#include "runtime/train/rt_trainer.h"
#include "tests/testutil.h"

enum { B = 2, T = 8, VOCAB = 97, BATCHES = 10 };

/* ---- the model the loop trains, which remembers its last step for the stand-in's launch ---- */

typedef struct {
    gpt2_model *m;
    double *sink;
    const uint64_t *stream_step;
    /* the last step's arguments */
    const rt_batch *b;
    uint64_t seed;
    int64_t step;
    int micro;
    float scale;
} run_model;

static rt_status model_step(void *ctx, const rt_batch *b, uint64_t seed, int64_t step, int micro, float scale,
                            double *loss) {
    run_model *r = ctx;
    r->b = b, r->seed = seed, r->step = step, r->micro = micro, r->scale = scale;
    const mdl_pass pass = {.seed = seed,
                           .step = step,
                           .micro = micro,
                           .training = true,
                           .loss_sink = r->sink,
                           .stream_step = r->stream_step};
    return gpt2_cls_step(r->m, b, &pass, scale, loss, NULL);
}
static void model_sink(void *ctx, double *sink) { ((run_model *)ctx)->sink = sink; }
/* false: the model keeps the step in its streams (the host's), the reference for the record's */
static bool take_stream_step = true;
static void model_stream_step(void *ctx, const uint64_t *stream_step) {
    if (take_stream_step) ((run_model *)ctx)->stream_step = stream_step;
}

/* ---- the stand-in for a GPU's graph ops ---- */

typedef struct {
    int n;
    void *dst[16];
    size_t bytes[16];
} fake_graph;

typedef struct {
    rt_backend *be;
    const rt_backend_ops *cpu;
    run_model *model;
    fake_graph *recording, *rehearsing;
    int pos;
    bool diverged;
    uint64_t want_uploads, want_bytes, got_bytes;
    int captures, launches, rehearsals, frees, made, wrong_staging;
    int fail_capture_at, diverge_at; /* the Nth capture or rehearsal fails (0: none) */
} fake_state;
static fake_state fake;

/* A new run's counts, its failures planned anew */
static void fake_reset(int fail_capture_at, int diverge_at) {
    memset(&fake.captures, 0, sizeof fake - offsetof(fake_state, captures));
    fake.fail_capture_at = fail_capture_at;
    fake.diverge_at = diverge_at;
}

static void fake_to_device(void *ctx, void *dst, const void *src, size_t bytes) {
    if (fake.recording) {
        fake_graph *g = fake.recording;
        if (g->n < 16) g->dst[g->n] = dst, g->bytes[g->n] = bytes;
        g->n++;
        fake.got_bytes += bytes;
        return;
    }
    if (fake.rehearsing) {
        fake_graph *g = fake.rehearsing;
        if (fake.pos >= g->n || g->dst[fake.pos] != dst || g->bytes[fake.pos] != bytes) fake.diverged = true;
        fake.pos++;
        return;
    }
    fake.cpu->to_device(ctx, dst, src, bytes);
}

static bool fake_capture_begin(void *ctx, uint64_t uploads, uint64_t upload_bytes) {
    (void)ctx;
    fake.recording = rt_xcalloc(1, sizeof *fake.recording);
    fake.want_uploads = uploads, fake.want_bytes = upload_bytes, fake.got_bytes = 0;
    fake.be->muted = true; /* a capture runs nothing */
    return true;
}

static void *fake_capture_end(void *ctx) {
    (void)ctx;
    fake_graph *g = fake.recording;
    fake.recording = NULL;
    fake.be->muted = false;
    fake.captures++;
    if ((uint64_t)g->n != fake.want_uploads || fake.got_bytes != fake.want_bytes) fake.wrong_staging++;
    if (fake.captures == fake.fail_capture_at) {
        free(g);
        return NULL;
    }
    fake.made++;
    return g;
}

static void fake_rehearse_begin(void *ctx, void *graph) {
    (void)ctx;
    fake.rehearsing = graph;
    fake.pos = 0;
    fake.diverged = false;
}

static bool fake_rehearse_end(void *ctx) {
    (void)ctx;
    const bool same = !fake.diverged && fake.pos == fake.rehearsing->n;
    fake.rehearsing = NULL;
    return same && ++fake.rehearsals != fake.diverge_at;
}

/* A GPU runs what was recorded; the stand-in runs the step the host just went through */
static void fake_launch(void *ctx, void *graph) {
    (void)ctx, (void)graph;
    run_model *r = fake.model;
    double loss = 0;
    const mdl_pass pass = {.seed = r->seed,
                           .step = r->step,
                           .micro = r->micro,
                           .training = true,
                           .loss_sink = r->sink,
                           .stream_step = r->stream_step};
    TZ_EXPECT_OK(gpt2_cls_step(r->m, r->b, &pass, r->scale, &loss, NULL));
    fake.launches++;
}

static void fake_free(void *ctx, void *graph) {
    (void)ctx;
    free(graph);
    fake.frees++;
}

/* ---- the data: BATCHES fixed-shape batches, one key ---- */

typedef struct {
    rt_batch batches[BATCHES];
    int32_t ids[BATCHES][B * T], mask[B * T], labels[BATCHES][B], lengths[B];
    int next;
} fixed_data;

static rt_status data_next(void *ctx, rt_batch *into, bool *end) {
    fixed_data *d = ctx;
    *end = d->next == BATCHES;
    if (*end) {
        d->next = 0;
        return RT_OK;
    }
    *into = d->batches[d->next++];
    return RT_OK;
}
static void data_state(void *ctx, int64_t *epoch, int64_t *pos) {
    *epoch = 0;
    *pos = ((fixed_data *)ctx)->next;
}
static rt_status data_set(void *ctx, int64_t epoch, int64_t pos) {
    (void)epoch;
    ((fixed_data *)ctx)->next = (int)pos;
    return RT_OK;
}

static void data_init(fixed_data *d) {
    memset(d, 0, sizeof *d);
    for (int r = 0; r < B; r++) d->lengths[r] = T;
    for (int i = 0; i < B * T; i++) d->mask[i] = 1;
    for (int k = 0; k < BATCHES; k++) {
        for (int i = 0; i < B * T; i++) d->ids[k][i] = 1 + (k * 37 + i * 11) % (VOCAB - 1);
        for (int r = 0; r < B; r++) d->labels[k][r] = (k + r) % 2;
        d->batches[k] = (rt_batch){.B = B,
                                   .T = T,
                                   .input_ids = d->ids[k],
                                   .attention_mask = d->mask,
                                   .lengths = d->lengths,
                                   .labels = d->labels[k],
                                   .n_targets = B,
                                   .n_tokens = B * T};
    }
}

/* Trains 5 steps of 2 micro-batches; the model comes back for its weights (caller frees). */
static gpt2_model *train(rt_backend *be, const char *graphs, float dropout, rt_status want) {
    if (graphs)
        setenv("TZ_STEP_GRAPHS", graphs, 1);
    else
        unsetenv("TZ_STEP_GRAPHS");
    gpt2_config cfg;
    gpt2_config_default(&cfg);
    cfg.vocab_size = VOCAB, cfg.n_positions = 16, cfg.n_embd = 32, cfg.n_layer = 2, cfg.n_head = 4;
    cfg.pad_token_id = 0;
    cfg.embd_pdrop = cfg.resid_pdrop = cfg.attn_pdrop = dropout;
    gpt2_model *m = NULL;
    TZ_EXPECT_OK(gpt2_model_init(&cfg, be, rt_comm_self(), B, T, 11, &m));
    if (!m) return NULL;
    static fixed_data data;
    data_init(&data);
    run_model rm = {.m = m};
    fake.model = &rm;
    const rt_train_opts o = tz_train_opts(5, B, 2, tz_tmpdir());
    rt_train_model tm = {.ctx = &rm,
                         .params = gpt2_model_params(m),
                         .forward_backward = model_step,
                         .set_loss_sink = model_sink,
                         .set_stream_step = model_stream_step};
    rt_train_data td = {
        .ctx = &data, .batches_per_epoch = BATCHES, .next = data_next, .get_state = data_state, .set_state = data_set};
    rt_train_result res;
    const rt_status st = rt_train(&o, &tm, &td, NULL, ckpt_train_io(), &res);
    TZ_EXPECT(st == want, "TZ_STEP_GRAPHS=%s: rt_train %s, want %s (%s)", graphs ? graphs : "(unset)",
              rt_status_name(st), rt_status_name(want), st ? rt_error_message() : "");
    unsetenv("TZ_STEP_GRAPHS");
    return m;
}

static void expect_same(gpt2_model *a, gpt2_model *b, const char *what) {
    if (!a || !b) return;
    const rt_params *x = gpt2_model_params(a), *y = gpt2_model_params(b);
    const bool same = x->numel == y->numel && memcmp(x->param, y->param, x->numel * sizeof(float)) == 0 &&
                      memcmp(x->m, y->m, x->numel * sizeof(float)) == 0 &&
                      memcmp(x->v, y->v, x->numel * sizeof(float)) == 0;
    TZ_EXPECT(same, "%s: the weights or AdamW moments differ from the eager run's", what);
}

int main(void) {
    rt_log_set_quiet(true);
    rt_backend *cpu = NULL, *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &cpu));
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &be));
    if (!cpu || !be) return tz_test_result("test_step_graphs_loop");
    /* `be` gets the stand-in's graph ops */
    static rt_backend_ops ops;
    fake.be = be;
    fake.cpu = be->ops;
    ops = *be->ops;
    ops.to_device = fake_to_device;
    ops.graph_capture_begin = fake_capture_begin;
    ops.graph_capture_end = fake_capture_end;
    ops.graph_rehearse_begin = fake_rehearse_begin;
    ops.graph_rehearse_end = fake_rehearse_end;
    ops.graph_launch = fake_launch;
    ops.graph_free = fake_free;
    be->ops = &ops;

    gpt2_model *eager = train(cpu, NULL, 0.0f, RT_OK);
    /* 10 micro-batches, one key: the first warms up, the second captures, 8 replay */
    gpt2_model *graphs = train(be, "on", 0.0f, RT_OK);
    expect_same(eager, graphs, "with graphs");
    TZ_EXPECT(fake.captures == 1 && fake.rehearsals >= 7 && fake.launches == fake.captures + fake.rehearsals,
              "captures %d (want 1), rehearsals %d (want 7 or 8), launches %d (want one each)", fake.captures,
              fake.rehearsals, fake.launches);
    TZ_EXPECT(fake.wrong_staging == 0, "a capture's staging was not its eager run's uploads");
    TZ_EXPECT(fake.frees == fake.made, "%d graphs made, %d freed", fake.made, fake.frees);
    gpt2_model_free(graphs);

    /* the third rehearsal's uploads differ: that step runs eagerly, the key stays eager after it */
    fake_reset(0, 3);
    graphs = train(be, "on", 0.0f, RT_OK);
    expect_same(eager, graphs, "a rehearsal that diverged");
    TZ_EXPECT(fake.captures == 1 && fake.rehearsals == 3 && fake.launches == 3 && fake.frees == fake.made,
              "after a divergence: captures %d rehearsals %d launches %d (want 1, 3, 1 + 2), %d of %d freed",
              fake.captures, fake.rehearsals, fake.launches, fake.frees, fake.made);
    gpt2_model_free(graphs);

    /* the capture fails: its step runs eagerly, and so does every later one */
    fake_reset(1, 0);
    graphs = train(be, "on", 0.0f, RT_OK);
    expect_same(eager, graphs, "a capture that failed");
    TZ_EXPECT(fake.captures == 1 && fake.rehearsals == 0 && fake.launches == 0 && fake.made == 0,
              "after a failed capture: captures %d rehearsals %d launches %d (want 1, 0, 0)", fake.captures,
              fake.rehearsals, fake.launches);
    gpt2_model_free(graphs);

    /* with dropout: the masks' step comes from the step's record, so the steps replay, each with
     * its own masks: the eager run's weights still */
    gpt2_model *eager_drop = train(cpu, NULL, 0.1f, RT_OK);
    take_stream_step = false;
    gpt2_model *host_streams = train(cpu, NULL, 0.1f, RT_OK);
    take_stream_step = true;
    expect_same(host_streams, eager_drop, "dropout's step from the record, against the host's streams");
    gpt2_model_free(host_streams);
    fake_reset(0, 0);
    graphs = train(be, "on", 0.1f, RT_OK);
    expect_same(eager_drop, graphs, "with graphs and dropout");
    TZ_EXPECT(fake.captures == 1 && fake.rehearsals >= 7 && fake.launches == fake.captures + fake.rehearsals,
              "with dropout: captures %d rehearsals %d launches %d", fake.captures, fake.rehearsals, fake.launches);
    if (eager && eager_drop)
        TZ_EXPECT(memcmp(gpt2_model_params(eager)->param, gpt2_model_params(eager_drop)->param,
                         gpt2_model_params(eager)->numel * sizeof(float)) != 0,
                  "dropout 0.1 changed nothing: its masks were not drawn");
    gpt2_model_free(graphs);
    gpt2_model_free(eager_drop);

    /* planning runs on any backend and changes nothing; on needs a backend with graphs */
    gpt2_model *planned = train(cpu, "plan", 0.0f, RT_OK);
    expect_same(eager, planned, "planned");
    gpt2_model_free(planned);
    gpt2_model_free(train(cpu, "on", 0.0f, RT_ERR_CONFIG));
    TZ_EXPECT(strstr(rt_error_message(), "the cpu backend has no graphs") != NULL, "the error: %s", rt_error_message());
    gpt2_model_free(train(cpu, "sometimes", 0.0f, RT_ERR_CONFIG));
    TZ_EXPECT(strstr(rt_error_message(), "TZ_STEP_GRAPHS=sometimes: expected on, plan or off") != NULL, "the error: %s",
              rt_error_message());

    gpt2_model_free(eager);
    be->ops = fake.cpu;
    rt_backend_free(be);
    rt_backend_free(cpu);
    return tz_test_result("test_step_graphs_loop");
}
