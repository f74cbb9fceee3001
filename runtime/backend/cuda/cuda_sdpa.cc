/* cuDNN's fused SDPA through cudnn-frontend (see cuda_sdpa.h). Written from cudnn-frontend's graph
 * API documentation (docs/operations/Attention.md) with llm.c's llmc/cudnn_att.cpp as a reading
 * aid. Tensors are described as (B, NH, T, HS) views of the caller's row-major (B*T, ld) buffers:
 * strides (T*ld, HS, ld, 1), so no transpose or copy is made for q, k, v or their gradients. */
#include "runtime/backend/cuda/cuda_sdpa.h"

#include <stdio.h>
#include <string.h>

#include "runtime/backend/cuda/cuda_sdpa_plan.h"

#ifdef TZ_USE_CUDNN_FRONTEND

#include <memory>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cudnn_frontend.h>

namespace fe = cudnn_frontend;

namespace {

/* The tensors' ids in a graph and in its variant pack. */
enum : int64_t {
    UID_Q = 1,
    UID_K,
    UID_V,
    UID_O,
    UID_STATS,
    UID_DO,
    UID_DQ,
    UID_DK,
    UID_DV,
    UID_SEED,
    UID_OFFSET,
    UID_LEN_Q,
    UID_LEN_KV,
    UID_BIAS,
    UID_DBIAS
};

/* Plans kept at the most: MRPC's dynamic padding makes about 25 lengths a run, each a forward and
 * a backward plan; --length-buckets makes far fewer. The oldest goes first past it. */
constexpr size_t kMaxPlans = 128;

struct Plan {
    rt_sdpa_key key;
    std::shared_ptr<fe::graph::Graph> graph;
    int64_t workspace;
};

fe::DataType_t fe_type(rt_dtype io) { return io == RT_F16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16; }

/* A (B, NH, T, HS) view of rows of ld values. */
std::shared_ptr<fe::graph::Tensor_attributes> view(fe::graph::Graph &g, const char *name, int64_t uid,
                                                   const rt_sdpa_key &k, int64_t T, int64_t ld) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({k.B, k.NH, T, k.HS})
                        .set_stride({T * ld, k.HS, ld, 1}));
}

/* The forward's output as the backward reads it, packed in the kept buffer: (B, Tq, NH, HS). */
std::shared_ptr<fe::graph::Tensor_attributes> kept_out(fe::graph::Graph &g, const char *name, int64_t uid,
                                                       const rt_sdpa_key &k) {
    return view(g, name, uid, k, k.Tq, k.NH * k.HS);
}

std::shared_ptr<fe::graph::Tensor_attributes> stats_tensor(fe::graph::Graph &g, const rt_sdpa_key &k) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name("stats")
                        .set_uid(UID_STATS)
                        .set_dim({k.B, k.NH, k.Tq, 1})
                        .set_stride({k.NH * k.Tq, k.Tq, 1, 1})
                        .set_data_type(fe::DataType_t::FLOAT));
}

std::shared_ptr<fe::graph::Tensor_attributes> scalar(fe::graph::Graph &g, const char *name, int64_t uid) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({1, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_data_type(fe::DataType_t::INT64));
}

/* Per batch row lengths (B, 1, 1, 1) for cuDNN's padding mask. */
std::shared_ptr<fe::graph::Tensor_attributes> lengths(fe::graph::Graph &g, const char *name, int64_t uid,
                                                      const rt_sdpa_key &k) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({k.B, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_data_type(fe::DataType_t::INT32));
}

/* The bias (rt_sdpa_bias_kind) at the io type: T5's position bias (1, NH, Tq, Tk), shared by the
 * batch, or GLM's prefix mask (B, 1, Tq, Tk), shared by the heads; the same layout for its gradient. */
std::shared_ptr<fe::graph::Tensor_attributes> bias_tensor(fe::graph::Graph &g, const char *name, int64_t uid,
                                                          const rt_sdpa_key &k) {
    const bool position = k.bias == RT_SDPA_BIAS_POSITION;
    const int64_t tt = k.Tq * k.Tk;
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({position ? 1 : k.B, position ? k.NH : 1, k.Tq, k.Tk})
                        .set_stride({position ? k.NH * tt : tt, tt, k.Tk, 1})
                        .set_data_type(fe_type((rt_dtype)k.io)));
}

/* The mask and bias both directions share: causal (GLM's prefix mask replaces it), padding as
 * lengths (every query row kept: Tq), and the bias. */
template <typename Attributes> void set_masks(fe::graph::Graph &g, Attributes &opts, const rt_sdpa_key &k) {
    if (k.causal && k.bias != RT_SDPA_BIAS_PREFIX) opts.set_causal_mask(true);
    if (k.bias != RT_SDPA_BIAS_NONE) opts.set_bias(bias_tensor(g, "bias", UID_BIAS, k));
    if (k.padding)
        opts.set_padding_mask(true)
            .set_seq_len_q(lengths(g, "len_q", UID_LEN_Q, k))
            .set_seq_len_kv(lengths(g, "len_kv", UID_LEN_KV, k));
}

/* The forward graph: O into the caller's out, the statistics into the kept buffer. */
void describe_fwd(fe::graph::Graph &g, const rt_sdpa_key &k, float scale, float dropout_p) {
    auto q = view(g, "q", UID_Q, k, k.Tq, k.ldq);
    auto kk = view(g, "k", UID_K, k, k.Tk, k.ldk);
    auto v = view(g, "v", UID_V, k, k.Tk, k.ldv);
    auto opts = fe::graph::SDPA_attributes().set_name("tz_sdpa").set_generate_stats(true).set_attn_scale(scale);
    set_masks(g, opts, k);
    if (k.dropout_bits) opts.set_dropout(dropout_p, scalar(g, "seed", UID_SEED), scalar(g, "offset", UID_OFFSET));
    auto [o, stats] = g.sdpa(q, kk, v, opts);
    o->set_output(true).set_uid(UID_O).set_dim({k.B, k.NH, k.Tq, k.HS}).set_stride({k.Tq * k.ldo, k.HS, k.ldo, 1});
    stats->set_output(true)
        .set_uid(UID_STATS)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({k.B, k.NH, k.Tq, 1})
        .set_stride({k.NH * k.Tq, k.Tq, 1, 1});
}

/* The backward graph: dq, dk and dv with q's, k's and v's strides. */
void describe_bwd(fe::graph::Graph &g, const rt_sdpa_key &k, float scale, float dropout_p) {
    auto q = view(g, "q", UID_Q, k, k.Tq, k.ldq);
    auto kk = view(g, "k", UID_K, k, k.Tk, k.ldk);
    auto v = view(g, "v", UID_V, k, k.Tk, k.ldv);
    auto o = kept_out(g, "o", UID_O, k);
    auto dout = view(g, "dout", UID_DO, k, k.Tq, k.ldo);
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("tz_sdpa_backward")
                    .set_attn_scale(scale)
                    .set_deterministic_algorithm(true); /* resume is bit-exact on the same device */
    set_masks(g, opts, k);
    if (k.dbias) opts.set_dbias(bias_tensor(g, "dbias", UID_DBIAS, k));
    if (k.dropout_bits) opts.set_dropout(dropout_p, scalar(g, "seed", UID_SEED), scalar(g, "offset", UID_OFFSET));
    auto [dq, dk, dv] = g.sdpa_backward(q, kk, v, o, dout, stats_tensor(g, k), opts);
    dq->set_output(true).set_uid(UID_DQ).set_dim({k.B, k.NH, k.Tq, k.HS}).set_stride({k.Tq * k.ldq, k.HS, k.ldq, 1});
    dk->set_output(true).set_uid(UID_DK).set_dim({k.B, k.NH, k.Tk, k.HS}).set_stride({k.Tk * k.ldk, k.HS, k.ldk, 1});
    dv->set_output(true).set_uid(UID_DV).set_dim({k.B, k.NH, k.Tk, k.HS}).set_stride({k.Tk * k.ldv, k.HS, k.ldv, 1});
}

rt_status fe_error(const fe::error_object &e, const char *what, const rt_sdpa_key &k) {
    return rt_errorf(RT_ERR_UNSUPPORTED,
                     "cuDNN SDPA (%s, B %lld NH %lld Tq %lld Tk %lld HS %lld%s%s%s%s%s): %s: %s; "
                     "TZ_CUDA_ATTENTION=materialized runs without it",
                     k.backward ? "backward" : "forward", (long long)k.B, (long long)k.NH, (long long)k.Tq,
                     (long long)k.Tk, (long long)k.HS, k.causal ? ", causal" : "", k.padding ? ", padding" : "",
                     k.dropout_bits ? ", dropout" : "",
                     k.bias == RT_SDPA_BIAS_POSITION ? ", position bias"
                     : k.bias == RT_SDPA_BIAS_PREFIX ? ", prefix"
                                                     : "",
                     k.dbias ? " and its gradient" : "", what, e.err_msg.c_str());
}

} // namespace

struct rt_sdpa {
    cudnnHandle_t handle = nullptr;
    std::vector<Plan> plans;          /* oldest first */
    std::vector<rt_sdpa_key> refused; /* forward keys cuDNN would not build: those calls fall back */
    int64_t *seed = nullptr;          /* device: the dropout's seed and offset */
};

static bool refused(const rt_sdpa *s, const rt_sdpa_key &key) {
    for (const rt_sdpa_key &r : s->refused)
        if (rt_sdpa_key_equal(&r, &key)) return true;
    return false;
}

static bool cached(const rt_sdpa *s, const rt_sdpa_key &key) {
    for (const Plan &p : s->plans)
        if (rt_sdpa_key_equal(&p.key, &key)) return true;
    return false;
}

/* The cached plan for key, built on a miss (which may move the plans already held). */
static rt_status plan_for(rt_sdpa *s, const rt_sdpa_key &key, float scale, float dropout_p, const Plan **out) {
    for (const Plan &p : s->plans)
        if (rt_sdpa_key_equal(&p.key, &key)) {
            *out = &p;
            return RT_OK;
        }
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe_type((rt_dtype)key.io))
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    if (key.backward)
        describe_bwd(*g, key, scale, dropout_p);
    else
        describe_fwd(*g, key, scale, dropout_p);
    fe::error_object e = g->validate();
    if (!e.is_good()) return fe_error(e, "the graph is not valid", key);
    if (!(e = g->build_operation_graph(s->handle)).is_good()) return fe_error(e, "building the graph", key);
    if (!(e = g->create_execution_plans({fe::HeurMode_t::A})).is_good()) return fe_error(e, "no execution plan", key);
    if (!(e = g->check_support(s->handle)).is_good()) return fe_error(e, "no engine takes it", key);
    if (!(e = g->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE)).is_good())
        return fe_error(e, "building the plan", key);
    int64_t ws = 0;
    if (!(e = g->get_workspace_size(ws)).is_good()) return fe_error(e, "its workspace size", key);
    if (s->plans.size() >= kMaxPlans) s->plans.erase(s->plans.begin());
    s->plans.push_back(Plan{key, std::move(g), ws});
    *out = &s->plans.back();
    return RT_OK;
}

static rt_status run(rt_sdpa *s, cudaStream_t stream, const rt_attn_desc *d, rt_dtype io, bool backward, bool dbias,
                     std::unordered_map<int64_t, void *> &pack, rt_sdpa_workspace_fn workspace, void *ws_ctx) {
    try {
        const rt_sdpa_key key = rt_sdpa_key_of(d, io, backward, dbias);
        const Plan *plan = nullptr;
        cudnnStatus_t cs = cudnnSetStream(s->handle, stream);
        if (cs != CUDNN_STATUS_SUCCESS) return rt_errorf(RT_ERR_RUNTIME, "cudnnSetStream: %s", cudnnGetErrorString(cs));
        if (!backward && refused(s, key)) return rt_errorf(RT_ERR_UNSUPPORTED, "%s", ""); /* said the first time */
        rt_status st = RT_OK;
        if (!backward && !cached(s, key)) {
            /* only cuDNN's backward can read what this forward keeps: a forward whose backward it
             * would not build (with the position bias's gradient, as training asks) goes to the
             * materialized path with it, instead of failing at the backward. Built first, as
             * plan_for may move the plans it holds. */
            const Plan *bwd = nullptr;
            st = plan_for(s, rt_sdpa_key_of(d, io, true, true), d->scale, d->dropout_p, &bwd);
        }
        if (st == RT_OK) st = plan_for(s, key, d->scale, d->dropout_p, &plan);
        if (st != RT_OK) {
            if (!backward) s->refused.push_back(key);
            return st;
        }
        if (d->dropout_p > 0.0f) {
            int64_t seed[2];
            rt_sdpa_dropout_seed(d, seed);
            /* from pageable memory: staged before the call returns, so seed may go out of scope */
            cudaError_t ce = cudaMemcpyAsync(s->seed, seed, sizeof seed, cudaMemcpyHostToDevice, stream);
            if (ce != cudaSuccess) return rt_errorf(RT_ERR_RUNTIME, "cuDNN SDPA seed: %s", cudaGetErrorString(ce));
            pack[UID_SEED] = s->seed;
            /* the step's part of the stream, on the device (a step graph's replay draws its step's
             * mask), else 0 */
            pack[UID_OFFSET] = d->stream_step ? (void *)d->stream_step : (void *)(s->seed + 1);
        }
        void *ws = plan->workspace > 0 ? workspace(ws_ctx, (size_t)plan->workspace) : nullptr;
        fe::error_object e = plan->graph->execute(s->handle, pack, ws);
        if (!e.is_good()) return fe_error(e, "running it", key);
        return RT_OK;
    } catch (const std::bad_alloc &) {
        return rt_errorf(RT_ERR_RUNTIME, "cuDNN SDPA: out of host memory");
    }
}

extern "C" bool rt_sdpa_took(const rt_sdpa *s, const rt_attn_desc *d, rt_dtype io) {
    const rt_sdpa_key key = rt_sdpa_key_of(d, io, false, false);
    return !refused(s, key);
}

/* The padding mask's lengths (key_len for the keys, Tq for every query row: q_len, the caller's)
 * and the bias at the io type, where the call has them. */
static void pack_masks(std::unordered_map<int64_t, void *> &pack, const rt_attn_desc *d, const int32_t *q_len,
                       const void *bias) {
    if (d->key_len) {
        pack[UID_LEN_Q] = (void *)q_len;
        pack[UID_LEN_KV] = (void *)d->key_len;
    }
    if (rt_sdpa_bias_of(d) != RT_SDPA_BIAS_NONE) pack[UID_BIAS] = (void *)bias;
}

extern "C" rt_sdpa *rt_sdpa_create(char *why, size_t why_size) {
    rt_sdpa *s = new (std::nothrow) rt_sdpa();
    if (!s) {
        snprintf(why, why_size, "out of host memory");
        return nullptr;
    }
    cudnnStatus_t cs = cudnnCreate(&s->handle);
    if (cs != CUDNN_STATUS_SUCCESS) {
        snprintf(why, why_size, "cudnnCreate: %s", cudnnGetErrorString(cs));
        delete s;
        return nullptr;
    }
    if (cudaMalloc(&s->seed, 2 * sizeof(int64_t)) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, why_size, "no device memory for its dropout seed");
        cudnnDestroy(s->handle);
        delete s;
        return nullptr;
    }
    return s;
}

extern "C" long rt_sdpa_version(const rt_sdpa *s) { return s ? (long)cudnnGetVersion() : 0; }

extern "C" void rt_sdpa_destroy(rt_sdpa *s) {
    if (!s) return;
    cudaFree(s->seed);
    cudnnDestroy(s->handle);
    delete s;
}

extern "C" rt_status rt_sdpa_fwd(rt_sdpa *s, cudaStream_t stream, const rt_attn_desc *d, rt_dtype io, void *out,
                                 void *kept, const void *q, const void *k, const void *v, const int32_t *q_len,
                                 const void *bias, rt_sdpa_workspace_fn workspace, void *ws_ctx) {
    char *stats = (char *)kept + rt_sdpa_stats_offset(d);
    std::unordered_map<int64_t, void *> pack = {
        {UID_Q, (void *)q}, {UID_K, (void *)k}, {UID_V, (void *)v}, {UID_O, out}, {UID_STATS, stats}};
    pack_masks(pack, d, q_len, bias);
    rt_status st = run(s, stream, d, io, false, false, pack, workspace, ws_ctx);
    if (st != RT_OK) return st;
    /* the backward reads O: a packed copy beside the statistics (B*Tq rows of NH*HS values) */
    const size_t row = (size_t)d->NH * d->HS * 2;
    cudaError_t ce =
        cudaMemcpy2DAsync(kept, row, out, d->ldo * 2, row, (size_t)d->B * d->Tq, cudaMemcpyDeviceToDevice, stream);
    return ce == cudaSuccess ? RT_OK : rt_errorf(RT_ERR_RUNTIME, "cuDNN SDPA: keeping O: %s", cudaGetErrorString(ce));
}

extern "C" rt_status rt_sdpa_bwd(rt_sdpa *s, cudaStream_t stream, const rt_attn_desc *d, rt_dtype io, void *dq,
                                 void *dk, void *dv, const void *dout, const void *kept, const void *q, const void *k,
                                 const void *v, const int32_t *q_len, const void *bias, void *dbias,
                                 rt_sdpa_workspace_fn workspace, void *ws_ctx) {
    const char *stats = (const char *)kept + rt_sdpa_stats_offset(d);
    std::unordered_map<int64_t, void *> pack = {{UID_Q, (void *)q},
                                                {UID_K, (void *)k},
                                                {UID_V, (void *)v},
                                                {UID_O, (void *)kept},
                                                {UID_STATS, (void *)stats},
                                                {UID_DO, (void *)dout},
                                                {UID_DQ, dq},
                                                {UID_DK, dk},
                                                {UID_DV, dv}};
    pack_masks(pack, d, q_len, bias);
    const bool want_dbias = dbias && rt_sdpa_bias_of(d) == RT_SDPA_BIAS_POSITION;
    if (want_dbias) pack[UID_DBIAS] = dbias;
    return run(s, stream, d, io, true, want_dbias, pack, workspace, ws_ctx);
}

#else /* built without cudnn-frontend's headers */

extern "C" rt_sdpa *rt_sdpa_create(char *why, size_t why_size) {
    snprintf(why, why_size, "this build has no cudnn-frontend (scripts/setup.sh installs it where nvcc is)");
    return NULL;
}

extern "C" void rt_sdpa_destroy(rt_sdpa *s) { (void)s; }

extern "C" long rt_sdpa_version(const rt_sdpa *s) { return 0; }

extern "C" bool rt_sdpa_took(const rt_sdpa *s, const rt_attn_desc *d, rt_dtype io) { return false; }

extern "C" rt_status rt_sdpa_fwd(rt_sdpa *s, cudaStream_t stream, const rt_attn_desc *d, rt_dtype io, void *out,
                                 void *kept, const void *q, const void *k, const void *v, const int32_t *q_len,
                                 const void *bias, rt_sdpa_workspace_fn workspace, void *ws_ctx) {
    return rt_errorf(RT_ERR_UNSUPPORTED, "this build has no cudnn-frontend");
}

extern "C" rt_status rt_sdpa_bwd(rt_sdpa *s, cudaStream_t stream, const rt_attn_desc *d, rt_dtype io, void *dq,
                                 void *dk, void *dv, const void *dout, const void *kept, const void *q, const void *k,
                                 const void *v, const int32_t *q_len, const void *bias, void *dbias,
                                 rt_sdpa_workspace_fn workspace, void *ws_ctx) {
    return rt_errorf(RT_ERR_UNSUPPORTED, "this build has no cudnn-frontend");
}

#endif
