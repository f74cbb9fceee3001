/* The step-graph policy (runtime/train/rt_step_graphs.h) and the traffic it reads:
 * - a key warms up (eager), captures after its first clean eager run, then replays;
 * - a read, a wait or a host-made dropout draw refuses a key for good, each under its reason;
 *   a key that allocates at every eager run is given up after three;
 * - a memory epoch that moves drops the graphs captured before it (they warm up again);
 * - graphs beyond the capacity are dropped least recently used first, through free_graph, and
 *   so are keys beyond the slots; rt_step_graphs_free gives back the rest;
 * - a capture or replay whose step was not clean is a mismatch: the key is refused;
 * - a run refused stays eager, every step counted under the run's reason;
 * - the key: one for batches of one shape, padding kind, target count, inputs and loss scale
 *   whatever their tokens; another when any of those differs; with padding -1, the mask's bits;
 * - the backend's wrappers count uploads (and bytes), reads, waits, allocations and draws (a
 *   draw whose step comes from memory is not the host's);
 * - the streams made at step 0 plus the step's part from memory are the host's streams;
 *   mdl_padding_kind reads a mask as mdl_padding_upload does;
 * - a rehearsal (rt_backend.muted) of a GPT-2 step makes the eager step's uploads, to the same
 *   addresses with the same sizes and bytes, and nothing else: no gradient, no loss, no draw.
 * test_cli_gpt2_finetune runs the plan beside real training (TZ_STEP_GRAPHS=plan). */
#include <string.h>

#include "models/gpt2/gpt2.h"
#include "models/layers/padding.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_step_graphs.h"
#include "tests/testutil.h"

static const rt_backend_traffic clean = {.uploads = 3, .upload_bytes = 100};

/* free_graph's record: the handles given back, in order */
typedef struct {
    int n;
    void *freed[16];
} freed_log;
static void log_free(void *user, void *graph) {
    freed_log *f = user;
    if (f->n < 16) f->freed[f->n] = graph;
    f->n++;
}

/* One step of key k through the policy: what the plan said, the step's traffic as observed */
static rt_graph_action step(rt_step_graphs *g, uint64_t key, uint64_t epoch, const rt_backend_traffic *t, void *graph) {
    rt_graph_entry *e = NULL;
    const rt_graph_action a = rt_step_graphs_plan(g, key, epoch, &e);
    rt_step_graphs_observed(g, e, a, t, epoch, a == RT_GRAPH_CAPTURE ? graph : NULL);
    return a;
}

static void test_warmup_capture_replay(void) {
    rt_step_graphs g;
    freed_log log = {0};
    rt_step_graphs_init(&g, 2, 1, 8);
    g.free_graph = log_free;
    g.user = &log;
    static int handle;
    TZ_EXPECT(step(&g, 7, 0, &clean, &handle) == RT_GRAPH_EAGER, "a new key warms up");
    TZ_EXPECT(step(&g, 7, 0, &clean, &handle) == RT_GRAPH_CAPTURE, "after one clean run it captures");
    for (int i = 0; i < 3; i++) TZ_EXPECT(step(&g, 7, 0, &clean, NULL) == RT_GRAPH_REPLAY, "then replays (%d)", i);
    TZ_EXPECT(g.counts.steps == 5 && g.counts.eager == 1 && g.counts.warmup == 1 && g.counts.captures == 1 &&
                  g.counts.replays == 3,
              "counts: steps %lld eager %lld warmup %lld captures %lld replays %lld", (long long)g.counts.steps,
              (long long)g.counts.eager, (long long)g.counts.warmup, (long long)g.counts.captures,
              (long long)g.counts.replays);
    TZ_EXPECT(g.counts.max_replay_upload_bytes == 100, "replayed uploads %llu bytes",
              (unsigned long long)g.counts.max_replay_upload_bytes);
    /* a first run that allocates (scratch grows for the shape) is not the warm-up */
    const rt_backend_traffic grew = {.allocs = 1};
    TZ_EXPECT(step(&g, 8, 0, &grew, NULL) == RT_GRAPH_EAGER, "key 8: eager");
    TZ_EXPECT(step(&g, 8, 0, &clean, NULL) == RT_GRAPH_EAGER, "key 8: its first run allocated: still warming");
    TZ_EXPECT(step(&g, 8, 0, &clean, &handle) == RT_GRAPH_CAPTURE, "key 8: captures after a clean run");
    /* scratch that grew under a run counts as an allocation too (the epoch moved over it) */
    rt_graph_entry *e = NULL;
    TZ_EXPECT(rt_step_graphs_plan(&g, 9, 0, &e) == RT_GRAPH_EAGER, "key 9: eager");
    rt_step_graphs_observed(&g, e, RT_GRAPH_EAGER, &clean, 1, NULL);
    TZ_EXPECT(step(&g, 9, 1, &clean, NULL) == RT_GRAPH_EAGER, "key 9: memory moved under its first run: warming");
    TZ_EXPECT(step(&g, 9, 1, &clean, &handle) == RT_GRAPH_CAPTURE, "key 9: captures after a clean run");
    /* room for 2: key 9's capture handed back key 7's graph; the free hands back 8's and 9's */
    TZ_EXPECT(log.n == 1 && g.counts.evictions == 1, "%d graphs handed back before the free", log.n);
    rt_step_graphs_free(&g);
    TZ_EXPECT(log.n == 3, "%d graphs handed back in all, want 3", log.n);
}

static void test_refusals(void) {
    rt_step_graphs g;
    rt_step_graphs_init(&g, 4, 1, 8);
    const rt_backend_traffic reads = {.reads = 1}, syncs = {.syncs = 2}, draws = {.draws = 12}, grew = {.allocs = 1};
    TZ_EXPECT(step(&g, 1, 0, &reads, NULL) == RT_GRAPH_EAGER, "key 1 eager");
    TZ_EXPECT(step(&g, 2, 0, &syncs, NULL) == RT_GRAPH_EAGER, "key 2 eager");
    TZ_EXPECT(step(&g, 3, 0, &draws, NULL) == RT_GRAPH_EAGER, "key 3 eager");
    for (int i = 0; i < 3; i++) TZ_EXPECT(step(&g, 4, 0, &grew, NULL) == RT_GRAPH_EAGER, "key 4 eager (%d)", i);
    /* each refused for good, even after clean runs */
    for (int k = 1; k <= 4; k++)
        for (int i = 0; i < 3; i++)
            TZ_EXPECT(step(&g, (uint64_t)k, 0, &clean, NULL) == RT_GRAPH_EAGER, "refused key %d stays eager", k);
    TZ_EXPECT(g.counts.captures == 0 && g.counts.replays == 0, "no capture of a refused key");
    /* four reasons, each with its 3 steps after the refusal */
    int found = 0;
    const char *want[] = {"reads the device", "waits for the device", "draws dropout masks", "allocates memory"};
    for (int w = 0; w < 4; w++)
        for (int i = 0; i < RT_STEP_GRAPHS_REASONS && g.reason[i]; i++)
            if (strstr(g.reason[i], want[w]) && g.reason_steps[i] == 3) found++;
    TZ_EXPECT(found == 4, "%d of 4 reasons counted with their 3 steps", found);
    rt_step_graphs_free(&g);

    /* a run refused: every step eager, under the run's reason, which the first call sets */
    rt_step_graphs_init(&g, 4, 1, 8);
    rt_step_graphs_refuse_run(&g, "run reason");
    rt_step_graphs_refuse_run(&g, "another");
    for (int i = 0; i < 5; i++) TZ_EXPECT(step(&g, 1, 0, &clean, NULL) == RT_GRAPH_EAGER, "refused run: eager");
    TZ_EXPECT(g.reason[0] && strcmp(g.reason[0], "run reason") == 0 && g.reason_steps[0] == 5 && !g.reason[1],
              "the run's reason counts its 5 steps");
    rt_step_graphs_free(&g);
}

static void test_epoch_and_room(void) {
    rt_step_graphs g;
    freed_log log = {0};
    rt_step_graphs_init(&g, 2, 0, 3); /* no warm-up: a key captures at once */
    g.free_graph = log_free;
    g.user = &log;
    static int h[4];
    TZ_EXPECT(step(&g, 1, 5, &clean, &h[1]) == RT_GRAPH_CAPTURE, "key 1 captures");
    TZ_EXPECT(step(&g, 2, 5, &clean, &h[2]) == RT_GRAPH_CAPTURE, "key 2 captures");
    TZ_EXPECT(step(&g, 1, 5, &clean, NULL) == RT_GRAPH_REPLAY, "key 1 replays");
    /* room for two graphs: key 3's capture drops key 2's (used longest ago) */
    TZ_EXPECT(step(&g, 3, 5, &clean, &h[3]) == RT_GRAPH_CAPTURE, "key 3 captures");
    TZ_EXPECT(log.n == 1 && log.freed[0] == &h[2], "key 2's graph handed back (%d freed)", log.n);
    TZ_EXPECT(step(&g, 2, 5, &clean, &h[2]) == RT_GRAPH_CAPTURE, "key 2 captures again");
    TZ_EXPECT(log.n == 2 && log.freed[1] == &h[1], "then key 1's (%d freed)", log.n);
    TZ_EXPECT(g.counts.evictions == 2, "2 evictions, %lld", (long long)g.counts.evictions);
    /* the memory moved: key 3's graph (epoch 5) is dropped when it comes next, and it captures anew */
    TZ_EXPECT(step(&g, 3, 6, &clean, &h[3]) == RT_GRAPH_CAPTURE, "key 3 at a new epoch captures again");
    TZ_EXPECT(log.n == 3 && log.freed[2] == &h[3] && g.counts.invalidations == 1, "key 3's old graph handed back");
    /* three slots for keys: a fourth key takes the least recently used slot, handing back its graph */
    TZ_EXPECT(step(&g, 4, 6, &clean, &h[0]) == RT_GRAPH_CAPTURE, "key 4 captures");
    TZ_EXPECT(log.n == 4 && log.freed[3] == &h[2], "key 2 lost its slot and graph (%d freed)", log.n);
    /* a replay whose step was not clean: the key missed something; refused from then on */
    const rt_backend_traffic reads = {.reads = 1};
    TZ_EXPECT(step(&g, 4, 6, &reads, NULL) == RT_GRAPH_REPLAY, "key 4 replays");
    TZ_EXPECT(g.counts.mismatches == 1 && log.n == 5 && log.freed[4] == &h[0], "a mismatch drops key 4's graph");
    TZ_EXPECT(step(&g, 4, 6, &clean, NULL) == RT_GRAPH_EAGER, "key 4 is eager for good");
    rt_step_graphs_free(&g);
    TZ_EXPECT(log.n == 6 && log.freed[5] == &h[3], "the free hands back key 3's graph (%d freed)", log.n);
}

static void test_key(void) {
    int32_t ids_a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, ids_b[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    int32_t full[8] = {1, 1, 1, 1, 1, 1, 1, 1}, right[8] = {1, 1, 1, 0, 1, 1, 0, 0},
            other[8] = {1, 0, 1, 0, 1, 1, 1, 0};
    int32_t right2[8] = {1, 0, 0, 0, 1, 1, 1, 0}, left[8] = {0, 1, 1, 1, 1, 1, 1, 1};
    const rt_batch a = {.B = 2, .T = 4, .input_ids = ids_a, .attention_mask = full, .n_targets = 6};
    rt_batch b = a;
    b.input_ids = ids_b;
    TZ_EXPECT(rt_step_graphs_key(&a, 0.5f, 0) == rt_step_graphs_key(&b, 0.5f, 0), "tokens do not change the key");
    TZ_EXPECT(rt_step_graphs_key(&a, 0.5f, -1) == rt_step_graphs_key(&b, 0.5f, -1), "nor with the mask's bits");
    const uint64_t k = rt_step_graphs_key(&a, 0.5f, 0);
    int same = 0;
    rt_batch c = a;
    c.T = 3;
    same += rt_step_graphs_key(&c, 0.5f, 0) == k;
    c = a, c.B = 1;
    same += rt_step_graphs_key(&c, 0.5f, 0) == k;
    c = a, c.n_targets = 5;
    same += rt_step_graphs_key(&c, 0.5f, 0) == k;
    c = a, c.T_dec = 2;
    same += rt_step_graphs_key(&c, 0.5f, 0) == k;
    c = a, c.token_type_ids = ids_a;
    same += rt_step_graphs_key(&c, 0.5f, 0) == k;
    float targets[2] = {0};
    c = a, c.targets = targets, c.target_width = 1;
    same += rt_step_graphs_key(&c, 0.5f, 0) == k;
    same += rt_step_graphs_key(&a, 0.25f, 0) == k;
    same += rt_step_graphs_key(&a, 0.5f, 1) == k;
    TZ_EXPECT(same == 0, "%d of 8 changes left the key as it was", same);
    /* the padding's kind, as mdl_padding reads the mask */
    int32_t lens[2];
    TZ_EXPECT(mdl_padding_kind(full, 2, 4, lens) == 0 && lens[0] == 4 && lens[1] == 4, "no padding: kind 0");
    TZ_EXPECT(mdl_padding_kind(NULL, 2, 4, NULL) == 0, "no mask: kind 0");
    TZ_EXPECT(mdl_padding_kind(right, 2, 4, lens) == 1 && lens[0] == 3 && lens[1] == 2, "right padding: kind 1");
    TZ_EXPECT(mdl_padding_kind(other, 2, 4, lens) == 2 && lens[0] == 0 && lens[1] == 3, "a gap: kind 2");
    TZ_EXPECT(mdl_padding_kind(left, 2, 4, NULL) == 2, "left padding: kind 2");
    /* two right-padded masks of one shape: one key by kind, two by bits */
    c = a, c.attention_mask = right;
    b = a, b.attention_mask = right2;
    TZ_EXPECT(rt_step_graphs_key(&c, 0.5f, 1) == rt_step_graphs_key(&b, 0.5f, 1), "right padding: one key by kind");
    TZ_EXPECT(rt_step_graphs_key(&c, 0.5f, -1) != rt_step_graphs_key(&b, 0.5f, -1), "two keys by the mask's bits");
}

/* The streams made at step 0, plus the step's part from memory, are the host's streams */
static void test_stream_step(void) {
    const uint64_t step[2] = {RT_STREAM_STEP_DROPOUT(123457), RT_STREAM_STEP_LORA(123457)};
    const mdl_pass host = {.step = 123457, .micro = 3}, dev = {.step = 123457, .micro = 3, .stream_step = step};
    int bad = 0;
    for (int site = 0; site < 4096; site += 97) {
        bad += rt_stream_at_step(mdl_dropout_stream(&dev, site), mdl_dropout_step(&dev)) !=
               mdl_dropout_stream(&host, site);
        bad += rt_stream_at_step(mdl_lora_stream(&dev, site), mdl_lora_step(&dev)) != mdl_lora_stream(&host, site);
    }
    TZ_EXPECT(bad == 0, "%d streams differ from the host's", bad);
    TZ_EXPECT(!mdl_dropout_step(&host) && !mdl_lora_step(&host), "the host's streams need no step from memory");
}

static void test_traffic(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &be));
    if (!be) return;
    const rt_backend_traffic before = be->traffic;
    float *buf = NULL, host[16] = {0};
    TZ_EXPECT_OK(rt_backend_alloc(be, sizeof host, "test", (void **)&buf));
    rt_to_device(be, buf, host, sizeof host);
    rt_to_device(be, buf, host, 8);
    rt_to_host(be, host, buf, sizeof host);
    rt_sync(be);
    rt_dropout_fwd(be, buf, buf, 16, 0.0f, 1, 2, NULL); /* no dropout: not a draw */
    rt_dropout_fwd(be, buf, buf, 16, 0.5f, 1, 2, NULL);
    rt_dropout_bwd(be, buf, buf, 16, 0.5f, 1, 2, NULL);
    const uint64_t step = 5;
    rt_dropout_fwd(be, buf, buf, 16, 0.5f, 1, 2, &step); /* its step from memory: not the host's draw */
    const rt_backend_traffic d = rt_backend_traffic_since(&be->traffic, &before);
    TZ_EXPECT(d.uploads == 2 && d.upload_bytes == sizeof host + 8 && d.reads == 1 && d.syncs == 1 && d.allocs == 1 &&
                  d.draws == 2,
              "traffic: uploads %llu (%llu bytes) reads %llu syncs %llu allocs %llu draws %llu",
              (unsigned long long)d.uploads, (unsigned long long)d.upload_bytes, (unsigned long long)d.reads,
              (unsigned long long)d.syncs, (unsigned long long)d.allocs, (unsigned long long)d.draws);
    rt_free_device(be, buf);
    rt_backend_free(be);
}

/* The uploads a step makes, as the backend sees them: where, how many bytes, and a hash of them */
typedef struct {
    int n;
    void *dst[64];
    size_t bytes[64];
    uint64_t hash[64];
} upload_log;
static upload_log *logging;
static const rt_backend_ops *cpu_ops;
static rt_backend *rehearsed;

static void logged_to_device(void *ctx, void *dst, const void *src, size_t bytes) {
    if (logging && logging->n < 64) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < bytes; i++) h = (h ^ ((const unsigned char *)src)[i]) * 0x100000001b3ull;
        logging->dst[logging->n] = dst;
        logging->bytes[logging->n] = bytes;
        logging->hash[logging->n] = h;
    }
    if (logging) logging->n++;
    if (!rehearsed->muted) cpu_ops->to_device(ctx, dst, src, bytes); /* a GPU's would fill the graph's staging */
}

static bool same_uploads(const upload_log *a, const upload_log *b, bool bytes_too) {
    if (a->n != b->n || a->n > 64) return false;
    for (int i = 0; i < a->n; i++)
        if (a->dst[i] != b->dst[i] || a->bytes[i] != b->bytes[i] || (bytes_too && a->hash[i] != b->hash[i]))
            return false;
    return true;
}

static void test_rehearsal(void) {
    enum { B = 3, T = 10 };
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &be));
    if (!be) return;
    static rt_backend_ops ops;
    cpu_ops = be->ops;
    ops = *be->ops;
    ops.to_device = logged_to_device;
    be->ops = &ops;
    rehearsed = be;
    gpt2_config c;
    gpt2_config_default(&c);
    c.vocab_size = 97, c.n_positions = 16, c.n_embd = 32, c.n_layer = 2, c.n_head = 4, c.pad_token_id = 0;
    c.embd_pdrop = c.resid_pdrop = c.attn_pdrop = 0.0f;
    gpt2_model *m = NULL;
    double *sink = NULL;
    TZ_EXPECT_OK(gpt2_model_init(&c, be, rt_comm_self(), B, T, 7, &m));
    TZ_EXPECT_OK(rt_backend_alloc(be, sizeof *sink, "loss sink", (void **)&sink));
    if (!m || !sink) goto done;
    rt_params *p = gpt2_model_params(m);
    int32_t ids[2][B * T], mask[B * T], lengths[B] = {T, 7, 4}, labels[2][B] = {{1, 0, 1}, {0, 0, 1}};
    for (int r = 0; r < B; r++)
        for (int t = 0; t < T; t++) {
            mask[r * T + t] = t < lengths[r];
            ids[0][r * T + t] = t < lengths[r] ? 1 + (r * 31 + t * 17) % 96 : 0;
            ids[1][r * T + t] = t < lengths[r] ? 1 + (r * 13 + t * 5) % 96 : 0;
        }
    const mdl_pass pass = {.seed = 11, .training = true, .loss_sink = sink};
    upload_log eager[2] = {0}, rehearsal = {0};
    for (int k = 0; k < 2; k++) {
        rt_batch b = {.B = B,
                      .T = T,
                      .input_ids = ids[k],
                      .attention_mask = mask,
                      .lengths = lengths,
                      .labels = labels[k],
                      .n_targets = B};
        double loss = 0;
        rt_params_zero_grad(p);
        logging = &eager[k];
        TZ_EXPECT_OK(gpt2_cls_step(m, &b, &pass, 1.0f, &loss, NULL));
        logging = NULL;
    }
    TZ_EXPECT(eager[0].n > 0 && same_uploads(&eager[0], &eager[1], false) && !same_uploads(&eager[0], &eager[1], true),
              "two batches of one shape upload to the same places, different bytes (%d and %d uploads)", eager[0].n,
              eager[1].n);
    /* the rehearsal of the second batch after the first's eager step */
    rt_params_zero_grad(p);
    *sink = 0;
    rt_batch b = {.B = B,
                  .T = T,
                  .input_ids = ids[1],
                  .attention_mask = mask,
                  .lengths = lengths,
                  .labels = labels[1],
                  .n_targets = B};
    const rt_backend_traffic before = be->traffic;
    double loss = -1;
    be->muted = true;
    logging = &rehearsal;
    TZ_EXPECT_OK(gpt2_cls_step(m, &b, &pass, 1.0f, &loss, NULL));
    logging = NULL;
    be->muted = false;
    const rt_backend_traffic d = rt_backend_traffic_since(&be->traffic, &before);
    TZ_EXPECT(same_uploads(&rehearsal, &eager[1], true), "the rehearsal's %d uploads are not the eager step's %d",
              rehearsal.n, eager[1].n);
    size_t nonzero = 0;
    for (size_t i = 0; i < p->numel; i++) nonzero += p->grad[i] != 0.0f;
    TZ_EXPECT(nonzero == 0 && *sink == 0 && loss == 0, "the rehearsal computed: %zu gradients, sink %g, loss %g",
              nonzero, *sink, loss);
    TZ_EXPECT(d.reads == 0 && d.syncs == 0 && d.draws == 0 && d.allocs == 0, "the rehearsal's traffic");
done:
    if (sink) rt_free_device(be, sink);
    gpt2_model_free(m);
    be->ops = cpu_ops;
    rt_backend_free(be);
}

int main(void) {
    test_warmup_capture_replay();
    test_refusals();
    test_epoch_and_room();
    test_key();
    test_traffic();
    test_stream_step();
    test_rehearsal();
    return tz_test_result("test_step_graphs");
}
