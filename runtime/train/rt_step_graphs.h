/* CUDA graphs for the training loop: which micro-batch steps run eagerly, which are captured
 * and which replay a graph, kept apart from CUDA so the CPU tests the policy and measures it.
 *
 * A micro-batch step (forward, backward, and the loss added on the device) replays a graph only
 * where a replay does what running it would:
 * - the same calls with the same arguments. Its key (rt_step_graphs_key) hashes what the models
 *   decide on the host from a batch: its shape, its padding's kind (the model says which; else
 *   the whole mask), how many targets it has, which optional inputs, and the loss's scale. Two batches with one
 *   key differ only in the bytes they upload, which a replay's rehearsal writes where the
 *   graph's copies read them;
 * - nothing that needs the host between its upload and the step's end. The backend counts it
 *   (rt_backend_traffic): a read or a wait refuses the key for good, and so does a dropout mask
 *   drawn from a stream the host made from the step number (a replay would draw the same mask).
 *   Where the loop keeps a step record, the streams take the step from it on the device
 *   (mdl_pass.stream_step), and a replay draws its own step's masks;
 * - memory at the addresses it was captured with. A key captures only after an eager run that
 *   allocated nothing (the warm-up), and every graph is dropped when the backend's memory epoch
 *   moves (scratch that grew for another shape).
 * Graphs are bounded (capacity), dropped least recently used first; so are the keys remembered.
 *
 * TZ_STEP_GRAPHS=on (a backend with graphs: CUDA) captures and replays. A replay first rehearses
 * the step: its host code runs with the backend's ops muted (rt_backend.muted), so the new batch's
 * uploads land in the graph's pinned staging and nothing else runs; a rehearsal whose uploads
 * differ from the capture's runs the step eagerly instead, and the key is refused. A replay
 * costs the host the rehearsal and one launch; capturing each step and updating the graph's
 * arguments (cudaGraphExecUpdate) would cost about what launching the kernels does.
 * TZ_STEP_GRAPHS=plan runs the policy beside an eager run on any backend: every step still runs
 * eagerly, the one that would capture or replay is checked to be clean, and the run ends with a
 * report of how many steps would replay and what kept the others eager.
 *
 * Not done: the loss scale read from the step's record, so that batches whose target counts
 * differ share a graph. */
#ifndef RT_STEP_GRAPHS_H
#define RT_STEP_GRAPHS_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/backend/rt_backend.h"
#include "runtime/train/rt_batch.h"

typedef enum { RT_GRAPH_EAGER, RT_GRAPH_CAPTURE, RT_GRAPH_REPLAY } rt_graph_action;

typedef struct {
    uint64_t key;
    bool used;              /* the slot holds a key */
    bool captured;          /* a graph of this key exists (graph: the backend's handle, or NULL when planning) */
    void *graph;            /* given back through free_graph when dropped */
    uint64_t epoch;         /* the backend's memory epoch at the capture */
    uint64_t planned_epoch; /* and at the plan of its last step */
    int64_t last_used;      /* the policy's clock at the key's last step */
    int eager_runs;         /* eager runs so far */
    int clean_runs;         /* eager runs that allocated nothing: the warm-up */
    uint64_t uploads, upload_bytes; /* what its last clean eager run uploaded: a capture's staging */
    const char *refused;            /* this key runs eagerly for good: why (a static string); NULL: it may capture */
} rt_graph_entry;

#define RT_STEP_GRAPHS_REASONS 8

typedef struct {
    int capacity; /* graphs kept at once */
    int warmup;   /* clean eager runs of a key before its capture */
    int slots;    /* keys remembered at once (entries) */
    rt_graph_entry *entries;
    int64_t clock;
    bool planning;           /* TZ_STEP_GRAPHS=plan: every step runs eagerly (the report says so) */
    const char *run_refused; /* the whole run stays eager: why (a static string); NULL: none */
    /* Where a dropped graph goes (a backend's destroy); NULL: nobody holds graphs (planning). */
    void (*free_graph)(void *user, void *graph);
    void *user;
    struct {
        int64_t steps, eager, warmup, captures, replays;
        int64_t evictions;                /* graphs dropped for room */
        int64_t invalidations;            /* graphs dropped because the memory epoch moved */
        int64_t mismatches;               /* a capture or replay whose step was not clean: the key was not enough */
        uint64_t max_replay_upload_bytes; /* the most a replayed step uploaded: the pinned staging a graph needs */
    } counts;
    /* steps that ran eagerly for good, by reason (the run's and each key's), for the report */
    const char *reason[RT_STEP_GRAPHS_REASONS];
    int64_t reason_steps[RT_STEP_GRAPHS_REASONS];
} rt_step_graphs;

/* TZ_STEP_GRAPHS on backend be: RT_STEP_GRAPHS_OFF (unset, empty or off), _PLAN or _ON. Another
 * value, or on where be has no graphs, is an RT_ERR_CONFIG naming the variable. */
typedef enum { RT_STEP_GRAPHS_OFF, RT_STEP_GRAPHS_PLAN, RT_STEP_GRAPHS_ON } rt_step_graphs_mode;
rt_status rt_step_graphs_mode_of(const rt_backend *be, rt_step_graphs_mode *mode);

/* capacity >= 1 graphs, warmup >= 0 clean eager runs, slots >= capacity keys. */
void rt_step_graphs_init(rt_step_graphs *g, int capacity, int warmup, int slots);
/* Drops every graph (free_graph) and the keys. */
void rt_step_graphs_free(rt_step_graphs *g);
/* The whole run stays eager; the first reason given is kept. */
void rt_step_graphs_refuse_run(rt_step_graphs *g, const char *why);

/* The key of micro-batch b's step at loss scale grad_scale; padding: what the model decides from
 * its attention mask (rt_train_model.padding_kind), or -1: the mask's every bit goes in. */
uint64_t rt_step_graphs_key(const rt_batch *b, float grad_scale, int padding);

/* What the step of `key` does, the backend's memory being at `epoch`; *entry: its slot (NULL
 * when the run is refused), to pass to rt_step_graphs_observed after the step. */
rt_graph_action rt_step_graphs_plan(rt_step_graphs *g, uint64_t key, uint64_t epoch, rt_graph_entry **entry);
/* After a step the plan said to run as `action`: what it asked of the backend (the traffic's
 * change over the step) and the memory epoch after it. An eager step's traffic decides its key's
 * warm-up or refusal; a capture or replay must have been clean (else the key is refused and
 * counted as a mismatch). graph: the captured handle (CAPTURE only; NULL when planning). */
void rt_step_graphs_observed(rt_step_graphs *g, rt_graph_entry *entry, rt_graph_action action,
                             const rt_backend_traffic *delta, uint64_t epoch, void *graph);

/* A capture or a rehearsal that failed (the backend's reason logged): the key's graph is dropped
 * and the key runs eagerly for good. */
void rt_step_graphs_failed(rt_step_graphs *g, rt_graph_entry *entry, rt_graph_action action);

/* The traffic between two snapshots. */
rt_backend_traffic rt_backend_traffic_since(const rt_backend_traffic *now, const rt_backend_traffic *before);

/* The report's lines, as rt_log_info writes them. */
void rt_step_graphs_report(const rt_step_graphs *g);

#endif
