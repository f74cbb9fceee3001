/* The parameter slab (the llm.c pattern). A model declares its parameters as specs
 * {name, shape, tp rule, no_decay, init}; one allocation then holds all parameters, and
 * gradients, AdamW m and v use the same layout. The optimizer, the gradient norm, the
 * data-parallel all-reduce and checkpoint I/O are each one call over a slab.
 *
 * A frozen parameter (LoRA's base weights, issue 36) has no gradient and no AdamW state: the
 * trainable parameters are laid out first, the frozen ones after them, and gradients, m and v
 * hold only the first train_numel floats, so every call over the gradient slab skips the frozen
 * ones without knowing of them. */
#ifndef RT_PARAMS_H
#define RT_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/backend/rt_backend.h"

/* How a parameter is split across tensor-parallel ranks (weights are stored [out, in]). */
typedef enum {
    RT_TP_NONE = 0, /* replicated */
    RT_TP_COL,      /* split dim 0 (output features) */
    RT_TP_ROW,      /* split dim 1 (input features) */
    RT_TP_VOCAB,    /* split dim 0 of an embedding table (vocab rows) */
    RT_TP_QKV       /* split q, k and v by heads: dim 0 holds [q; k; v] */
} rt_tp_rule;

typedef enum {
    RT_INIT_ZEROS = 0,
    RT_INIT_ONES,
    RT_INIT_NORMAL, /* N(0, init_std^2) */
    RT_INIT_UNIFORM /* U(-init_std, init_std) */
} rt_init_kind;

#define RT_PARAM_NAME_MAX 96
#define RT_PARAM_MAX_DIMS 4

typedef struct {
    char name[RT_PARAM_NAME_MAX];
    int ndim;
    int64_t shape[RT_PARAM_MAX_DIMS]; /* local shape on this rank */
    rt_tp_rule tp;
    /* RT_TP_VOCAB only: the real (unpadded) vocab size, which the local shape cannot tell (the
     * shards are padded to a multiple of 128*tp rows). Set by the model after rt_params_add;
     * checkpoints use it to store the full, unpadded table that any tp can reshard. */
    int64_t vocab_rows;
    bool no_decay; /* excluded from weight decay (biases, norm weights) */
    rt_init_kind init;
    float init_std;       /* RT_INIT_NORMAL's standard deviation, RT_INIT_UNIFORM's bound */
    int init_stream;      /* its init's RNG stream: its index, or (a pipeline stage's parameter) its
                                       * index in the whole model, so every layout draws the same numbers */
    bool copy;            /* a tied weight's copy on a later pipeline stage (GPT-2's wte on the last):
                                       * kept equal to the first stage's, so the clipping norm and the files
                                       * count only the first */
    bool tied;            /* a weight several pipeline stages hold (its first and its copies): the
                                       * training loop sums its gradient over them (rt_pipe_sum_tied) */
    bool frozen;          /* not trained: no gradient, no AdamW state (set before the layout) */
    size_t offset, numel; /* position in the slab, in floats */
} rt_param_spec;

/* Where parameters and gradients live when the slab does not hold them: ZeRO-3 keeps only a
 * shard of each and hands out gathered blocks (rt_zero.h). The pointers stay valid while the
 * model works on that block and the one after it. */
typedef struct {
    float *(*data)(void *user, int idx);
    float *(*grad)(void *user, int idx);
    void *user;
} rt_params_source;

typedef struct {
    rt_param_spec *specs;
    int n;
    size_t cap;         /* specs allocated */
    size_t numel;       /* total floats */
    size_t train_numel; /* floats of the trainable parameters, which come first: numel when none is frozen */
    rt_backend *be;
    float *param;                   /* (numel) backend memory; NULL while a source holds the parameters */
    float *grad;                    /* (train_numel); NULL while a source holds the gradients, and in a staged build */
    float *m, *v;                   /* (train_numel) AdamW moments; allocated on first use by the optimizer */
    const rt_params_source *source; /* NULL: param and grad above */
    /* Staged construction (rt_backend.params_staging): be is the host backend holding the slab
     * and device the backend the model computes on, until ZeRO-3 moves the pieces there
     * (rt_zero_init); NULL otherwise. */
    rt_backend *device;
} rt_params;

/* Told during a backward pass, as it goes, that every gradient at slab offsets >= first is final
 * for this step (the trainer starts the data-parallel all-reduce of those buckets while the
 * backward goes on). Calls come with first decreasing. */
typedef struct {
    void (*ready)(void *user, size_t first);
    void *user;
} rt_grads_hook;

/* An empty slab on be, or on be->params_staging when be has one (p->device is then be). */
void rt_params_init(rt_params *p, rt_backend *be);
void rt_params_free(rt_params *p);
/* Declares a parameter; returns its index. Shapes are set before rt_params_alloc. Every dim must
 * be >= 1 and their product fit size_t, else it aborts naming the parameter: a model checks its
 * config's sizes before it declares anything (models/layers/hf_config.h). */
int rt_params_add(rt_params *p, const char *name, int ndim, const int64_t *shape, rt_tp_rule tp, bool no_decay,
                  rt_init_kind init, float init_std);
/* Lays out the declared parameters without allocating anything: each one's offset (16-float
 * aligned, the trainable ones in declaration order, then the frozen ones), p->train_numel and
 * p->numel. RT_ERR_NOMEM naming the parameter when the slab's
 * size overflows size_t in floats or in bytes. rt_params_alloc lays out with it; a caller may
 * call it alone to size a model it will not build (tests/test_big_layouts.c). */
rt_status rt_params_layout(rt_params *p);
/* Lays out (rt_params_layout) and allocates parameters and gradients (zeroed; a staged build,
 * p->device set, gets no gradients). */
rt_status rt_params_alloc(rt_params *p);
/* Allocates the AdamW moments (zeroed, train_numel floats each) if not yet there. */
rt_status rt_params_alloc_moments(rt_params *p);
/* Fills every parameter from its init rule with the counter RNG (a parameter draws from stream
 * RT_STREAM(RT_STREAM_INIT, its init_stream) of seed), so init is independent of thread count
 * and of the pipeline layout. */
void rt_params_init_weights(rt_params *p, uint64_t seed);
/* Gives each parameter of p the init_stream its same-named one has in `whole` (a pipeline
 * stage's parameters, from the whole model's declaration); every name must be there. */
void rt_params_streams_from(rt_params *p, const rt_params *whole);

/* Parameter idx's values and gradient, from the slab or from p->source; a frozen parameter's
 * gradient is NULL (its weight-gradient products are skipped). */
float *rt_params_data(const rt_params *p, int idx);
float *rt_params_grad(const rt_params *p, int idx);
/* Where in the gradient slab the gradients of parameter idx and of every trainable one declared
 * after it begin: its offset, or for a frozen one the next trainable one's (train_numel when
 * none follows), since trainable parameters keep their declaration order. */
size_t rt_params_grad_from(const rt_params *p, int idx);
/* -1 when absent. */
int rt_params_find(const rt_params *p, const char *name);
/* The parameter marked tied (rt_param_spec.tied), or -1; a stage holds at most one. */
int rt_params_tied(const rt_params *p);
/* How many parameters are frozen. */
int rt_params_n_frozen(const rt_params *p);
void rt_params_zero_grad(rt_params *p);

#endif
