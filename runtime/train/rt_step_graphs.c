/* The step-graph policy (rt_step_graphs.h). */
#include "runtime/train/rt_step_graphs.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_log.h"
#include "runtime/base/rt_status.h"

/* A key's eager runs that may allocate (growing scratch for its shape) before it is given up */
#define RT_STEP_GRAPHS_ALLOC_RUNS 3

static const char *const reason_reads = "the step reads the device before its end (a loss, a norm or logits)";
static const char *const reason_syncs = "the step waits for the device before its end";
static const char *const reason_draws =
    "the step draws dropout masks from streams the host makes from the step number (a replay would repeat them)";
static const char *const reason_allocs = "the step allocates memory at every run";
static const char *const reason_mismatch = "a step that would replay was not clean: its key missed a host decision";
static const char *const reason_capture = "its capture failed (the backend said why)";

rt_status rt_step_graphs_mode_of(const rt_backend *be, rt_step_graphs_mode *mode) {
    const char *v = getenv("TZ_STEP_GRAPHS");
    *mode = RT_STEP_GRAPHS_OFF;
    if (!v || !*v || strcmp(v, "off") == 0) return RT_OK;
    if (strcmp(v, "plan") == 0) {
        *mode = RT_STEP_GRAPHS_PLAN;
        return RT_OK;
    }
    if (strcmp(v, "on") != 0) return rt_errorf(RT_ERR_CONFIG, "TZ_STEP_GRAPHS=%s: expected on, plan or off", v);
    if (!rt_has_graphs(be))
        return rt_errorf(RT_ERR_CONFIG, "TZ_STEP_GRAPHS=on: the %s backend has no graphs (plan works on any)",
                         be->ops->name);
    *mode = RT_STEP_GRAPHS_ON;
    return RT_OK;
}

void rt_step_graphs_init(rt_step_graphs *g, int capacity, int warmup, int slots) {
    RT_CHECK(capacity >= 1 && warmup >= 0 && slots >= capacity, "step graphs: capacity %d warmup %d slots %d", capacity,
             warmup, slots);
    memset(g, 0, sizeof *g);
    g->capacity = capacity;
    g->warmup = warmup;
    g->slots = slots;
    g->entries = rt_xcalloc((size_t)slots, sizeof *g->entries);
}

static void drop_graph(rt_step_graphs *g, rt_graph_entry *e) {
    if (e->captured && e->graph && g->free_graph) g->free_graph(g->user, e->graph);
    e->captured = false;
    e->graph = NULL;
}

void rt_step_graphs_free(rt_step_graphs *g) {
    for (int i = 0; g->entries && i < g->slots; i++) drop_graph(g, &g->entries[i]);
    free(g->entries);
    g->entries = NULL;
}

static void count_reason(rt_step_graphs *g, const char *why) {
    for (int i = 0; i < RT_STEP_GRAPHS_REASONS; i++) {
        if (!g->reason[i]) g->reason[i] = why;
        if (g->reason[i] == why) {
            g->reason_steps[i]++;
            return;
        }
    }
}

void rt_step_graphs_refuse_run(rt_step_graphs *g, const char *why) {
    if (!g->run_refused) g->run_refused = why;
}

/* FNV-1a over the bytes, one value at a time */
static uint64_t mix(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
static uint64_t mix_int(uint64_t h, int64_t v) { return mix(h, &v, sizeof v); }

/* One bit per value of a mask: set or not */
static uint64_t mix_mask(uint64_t h, const int32_t *mask, size_t n) {
    if (!mask) return mix_int(h, -1);
    uint64_t word = 0;
    for (size_t i = 0; i < n; i++) {
        word = word << 1 | (uint64_t)(mask[i] != 0);
        if (i % 64 == 63 || i + 1 == n) {
            h = mix(h, &word, sizeof word);
            word = 0;
        }
    }
    return mix_int(h, (int64_t)n);
}

uint64_t rt_step_graphs_key(const rt_batch *b, float grad_scale, int padding) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = mix_int(h, b->B);
    h = mix_int(h, b->T);
    h = mix_int(h, b->T_dec);
    h = mix_int(h, b->n_targets);
    h = mix(h, &grad_scale, sizeof grad_scale);
    h = mix_int(h, b->token_type_ids != NULL);
    h = mix_int(h, b->targets ? b->target_width : -1);
    if (padding >= 0)
        h = mix_int(h, padding);
    else
        h = mix_mask(h, b->attention_mask, (size_t)b->B * (size_t)b->T);
    return h;
}

static int graphs_held(const rt_step_graphs *g) {
    int n = 0;
    for (int i = 0; i < g->slots; i++) n += g->entries[i].captured;
    return n;
}

/* The least recently used slot among those with (with_graph) or any (else) */
static rt_graph_entry *least_recent(rt_step_graphs *g, bool with_graph) {
    rt_graph_entry *lru = NULL;
    for (int i = 0; i < g->slots; i++) {
        rt_graph_entry *e = &g->entries[i];
        if (with_graph && !e->captured) continue;
        if (!lru || e->last_used < lru->last_used) lru = e;
    }
    return lru;
}

static rt_graph_entry *find_or_add(rt_step_graphs *g, uint64_t key) {
    rt_graph_entry *free_slot = NULL;
    for (int i = 0; i < g->slots; i++) {
        rt_graph_entry *e = &g->entries[i];
        if (e->used && e->key == key) return e;
        if (!e->used && !free_slot) free_slot = e;
    }
    rt_graph_entry *e = free_slot ? free_slot : least_recent(g, false);
    drop_graph(g, e);
    memset(e, 0, sizeof *e);
    e->used = true;
    e->key = key;
    return e;
}

rt_graph_action rt_step_graphs_plan(rt_step_graphs *g, uint64_t key, uint64_t epoch, rt_graph_entry **entry) {
    g->counts.steps++;
    *entry = NULL;
    if (g->run_refused) {
        count_reason(g, g->run_refused);
        g->counts.eager++;
        return RT_GRAPH_EAGER;
    }
    rt_graph_entry *e = find_or_add(g, key);
    *entry = e;
    e->last_used = ++g->clock;
    e->planned_epoch = epoch;
    if (e->captured && e->epoch != epoch) { /* its addresses moved: warm up again */
        drop_graph(g, e);
        e->clean_runs = 0;
        g->counts.invalidations++;
    }
    if (e->refused) {
        count_reason(g, e->refused);
        g->counts.eager++;
        return RT_GRAPH_EAGER;
    }
    if (e->captured) {
        g->counts.replays++;
        return RT_GRAPH_REPLAY;
    }
    if (e->clean_runs < g->warmup) {
        g->counts.warmup++;
        g->counts.eager++;
        return RT_GRAPH_EAGER;
    }
    if (graphs_held(g) >= g->capacity) {
        drop_graph(g, least_recent(g, true));
        g->counts.evictions++;
    }
    g->counts.captures++;
    return RT_GRAPH_CAPTURE;
}

void rt_step_graphs_failed(rt_step_graphs *g, rt_graph_entry *e, rt_graph_action action) {
    drop_graph(g, e);
    e->refused = action == RT_GRAPH_REPLAY ? reason_mismatch : reason_capture;
    if (action == RT_GRAPH_REPLAY) g->counts.mismatches++;
}

rt_backend_traffic rt_backend_traffic_since(const rt_backend_traffic *now, const rt_backend_traffic *before) {
    return (rt_backend_traffic){.uploads = now->uploads - before->uploads,
                                .upload_bytes = now->upload_bytes - before->upload_bytes,
                                .reads = now->reads - before->reads,
                                .syncs = now->syncs - before->syncs,
                                .allocs = now->allocs - before->allocs,
                                .draws = now->draws - before->draws};
}

/* Why a step with this traffic cannot be a graph; NULL: it can, allocations apart. */
static const char *unfit(const rt_backend_traffic *d) {
    if (d->reads) return reason_reads;
    if (d->syncs) return reason_syncs;
    if (d->draws) return reason_draws;
    return NULL;
}

void rt_step_graphs_observed(rt_step_graphs *g, rt_graph_entry *e, rt_graph_action action,
                             const rt_backend_traffic *delta, uint64_t epoch, void *graph) {
    if (!e) return; /* the run is refused */
    const char *why = unfit(delta);
    const bool allocated = delta->allocs > 0 || epoch != e->planned_epoch;
    if (action == RT_GRAPH_EAGER) {
        e->eager_runs++;
        if (why && !e->refused) e->refused = why;
        if (!why && !allocated) {
            e->clean_runs++;
            e->uploads = delta->uploads;
            e->upload_bytes = delta->upload_bytes;
        }
        if (!e->refused && e->clean_runs == 0 && e->eager_runs >= RT_STEP_GRAPHS_ALLOC_RUNS) e->refused = reason_allocs;
        return;
    }
    /* a capture or replay: the eager run beside it (planning), or the capture itself, was clean */
    if (why || allocated) {
        drop_graph(g, e);
        e->refused = reason_mismatch;
        g->counts.mismatches++;
        return;
    }
    if (action == RT_GRAPH_CAPTURE) {
        e->captured = true;
        e->graph = graph;
        e->epoch = epoch;
    } else if (delta->upload_bytes > g->counts.max_replay_upload_bytes) {
        g->counts.max_replay_upload_bytes = delta->upload_bytes;
    }
}

void rt_step_graphs_report(const rt_step_graphs *g) {
    const double n = g->counts.steps > 0 ? (double)g->counts.steps : 1.0;
    if (g->planning)
        rt_log_info("step graphs (a plan: every step ran eagerly): of %lld micro-batch steps, %lld would replay a "
                    "graph (%.1f%%), %lld capture one, %lld run eagerly (%lld of them warming a shape up)",
                    (long long)g->counts.steps, (long long)g->counts.replays, 100.0 * (double)g->counts.replays / n,
                    (long long)g->counts.captures, (long long)g->counts.eager, (long long)g->counts.warmup);
    else
        rt_log_info("step graphs: of %lld micro-batch steps, %lld replayed a graph (%.1f%%), %lld captured one, %lld "
                    "ran eagerly (%lld of them warming a shape up)",
                    (long long)g->counts.steps, (long long)g->counts.replays, 100.0 * (double)g->counts.replays / n,
                    (long long)g->counts.captures, (long long)g->counts.eager, (long long)g->counts.warmup);
    for (int i = 0; i < RT_STEP_GRAPHS_REASONS && g->reason[i]; i++)
        rt_log_info("step graphs: %lld steps eager because %s", (long long)g->reason_steps[i], g->reason[i]);
    if (g->counts.evictions || g->counts.invalidations || g->counts.mismatches)
        rt_log_info("step graphs: %lld dropped for room (capacity %d), %lld for memory that moved, %lld mismatches",
                    (long long)g->counts.evictions, g->capacity, (long long)g->counts.invalidations,
                    (long long)g->counts.mismatches);
    if (g->counts.replays)
        rt_log_info("step graphs: a replayed step uploads up to %llu bytes (the pinned staging a graph reads)",
                    (unsigned long long)g->counts.max_replay_upload_bytes);
}
