/* Step graphs on CUDA (rt_backend_ops.graph_*; which steps, and when, is the policy in
 * runtime/train/rt_step_graphs.h): a micro-batch's step captured from the backend's one stream
 * into a CUDA graph, then replayed with one launch.
 *
 * A step's uploads (ids, masks, lengths, labels) copy from the graph's own pinned staging. The
 * capture writes its batch's bytes there as it records each copy. Before each replay, a
 * rehearsal (the step's host code with the ops muted) writes the next batch's bytes at the same
 * places, in the same order, after the graph's last launch has read them; an upload the capture
 * did not make marks the rehearsal as diverged, and the caller runs that step eagerly instead.
 *
 * A call that may not be captured (a read, a wait, an allocation) invalidates the capture, and
 * the next checked CUDA call aborts naming it: the policy captures only steps whose eager run made
 * none. */
#include "runtime/backend/cuda/rt_cuda.h"

#include <string.h>

extern "C" {
#include "runtime/base/rt_log.h"
}

/* Each upload's place in the staging starts at this many bytes */
#define GRAPH_ALIGN 16

typedef struct {
    void *dst;
    size_t bytes, at; /* at: its place in the staging */
} graph_upload;

struct rt_cuda_graph {
    cudaGraphExec_t exec;
    unsigned char *staging; /* pinned */
    size_t staging_bytes, used;
    graph_upload *uploads; /* the capture's, in order */
    int n_uploads, max_uploads;
    int next;         /* the rehearsal's next upload */
    bool diverged;    /* an upload the capture did not make, or one past the staging */
    cudaError_t err;  /* a copy the capture refused */
    cudaEvent_t done; /* recorded after each launch: the staging is read once it has passed */
};

static void graph_log_once(rt_cuda_ctx *c, const char *why, cudaError_t e) {
    for (int i = 0; i < 4; i++) {
        if (c->graph_logged[i] == why) return;
        if (!c->graph_logged[i]) {
            c->graph_logged[i] = why;
            break;
        }
    }
    rt_log_info("CUDA graphs: a micro-batch's step runs eagerly: %s%s%s%s", why, e != cudaSuccess ? " (" : "",
                e != cudaSuccess ? cudaGetErrorString(e) : "", e != cudaSuccess ? ")" : "");
}

static void graph_destroy(rt_cuda_graph *g) {
    if (!g) return;
    if (g->done) {
        CUDA_CHECK(cudaEventSynchronize(g->done)); /* its last launch still reads the staging */
        CUDA_CHECK(cudaEventDestroy(g->done));
    }
    if (g->exec) CUDA_CHECK(cudaGraphExecDestroy(g->exec));
    if (g->staging) CUDA_CHECK(cudaFreeHost(g->staging));
    free(g->uploads);
    free(g);
}

bool rt_cuda_graph_capture_begin(void *ctx, uint64_t uploads, uint64_t upload_bytes) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    RT_CHECK(!c->capturing && !c->rehearsing, "a step graph's capture began inside another's");
    rt_cuda_graph *g = (rt_cuda_graph *)rt_xcalloc(1, sizeof *g);
    g->max_uploads = (int)uploads;
    g->uploads = (graph_upload *)rt_xcalloc(uploads + 1, sizeof *g->uploads);
    g->staging_bytes = upload_bytes + (uploads + 1) * GRAPH_ALIGN;
    cudaError_t e = cudaHostAlloc((void **)&g->staging, g->staging_bytes, cudaHostAllocDefault);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        graph_log_once(c, "no pinned memory for a graph's uploads", e);
        graph_destroy(g);
        return false;
    }
    /* ThreadLocal: a call on this thread that may not be captured fails the capture */
    e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        graph_log_once(c, "the stream would not capture", e);
        graph_destroy(g);
        return false;
    }
    c->capturing = g;
    return true;
}

void rt_cuda_graph_upload(rt_cuda_ctx *c, void *dst, const void *host_src, size_t bytes) {
    if (c->capturing) {
        rt_cuda_graph *g = c->capturing;
        const size_t at = (g->used + GRAPH_ALIGN - 1) & ~(size_t)(GRAPH_ALIGN - 1);
        if (g->n_uploads >= g->max_uploads || at + bytes > g->staging_bytes) {
            g->diverged = true; /* more than the eager run uploaded: the capture is given up at its end */
            return;
        }
        memcpy(g->staging + at, host_src, bytes);
        const cudaError_t e = cudaMemcpyAsync(dst, g->staging + at, bytes, cudaMemcpyHostToDevice, c->stream);
        if (e != cudaSuccess && g->err == cudaSuccess) g->err = e;
        const graph_upload u = {dst, bytes, at};
        g->uploads[g->n_uploads++] = u;
        g->used = at + bytes;
        return;
    }
    rt_cuda_graph *g = c->rehearsing;
    const graph_upload *u = g->next < g->n_uploads ? &g->uploads[g->next] : NULL;
    if (!u || u->dst != dst || u->bytes != bytes) {
        g->diverged = true;
        return;
    }
    memcpy(g->staging + u->at, host_src, bytes);
    g->next++;
}

void *rt_cuda_graph_capture_end(void *ctx) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    rt_cuda_graph *g = c->capturing;
    RT_CHECK(g, "a step graph's capture ended without beginning");
    c->capturing = NULL;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    const char *why = NULL;
    if (e != cudaSuccess || g->err != cudaSuccess) {
        why = "its capture failed";
        if (e == cudaSuccess) e = g->err;
    } else if (g->diverged) {
        why = "its capture uploaded more than its eager run";
    } else if ((e = cudaGraphInstantiate(&g->exec, graph, 0)) != cudaSuccess) {
        why = "its graph would not instantiate";
    }
    if (graph) CUDA_CHECK(cudaGraphDestroy(graph));
    if (why) {
        (void)cudaGetLastError();
        graph_log_once(c, why, e);
        graph_destroy(g);
        return NULL;
    }
    return g;
}

void rt_cuda_graph_rehearse_begin(void *ctx, void *graph) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    rt_cuda_graph *g = (rt_cuda_graph *)graph;
    RT_CHECK(!c->capturing && !c->rehearsing && g, "a step graph's rehearsal inside another's");
    CUDA_CHECK(cudaEventSynchronize(g->done)); /* its last launch has read the staging */
    g->next = 0;
    g->diverged = false;
    c->rehearsing = g;
}

bool rt_cuda_graph_rehearse_end(void *ctx) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    rt_cuda_graph *g = c->rehearsing;
    RT_CHECK(g, "a step graph's rehearsal ended without beginning");
    c->rehearsing = NULL;
    return !g->diverged && g->next == g->n_uploads;
}

void rt_cuda_graph_launch(void *ctx, void *graph) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    rt_cuda_graph *g = (rt_cuda_graph *)graph;
    CUDA_CHECK(cudaGraphLaunch(g->exec, c->stream));
    CUDA_CHECK(cudaEventRecord(g->done, c->stream));
}

void rt_cuda_graph_free(void *ctx, void *graph) {
    (void)ctx;
    graph_destroy((rt_cuda_graph *)graph);
}
