/* T5's internals, for the code in models/ that extends t5.c without copying it (generation in
 * t5_generate.c): the model's layout (parameter indices per block, the activation arena of each
 * stack) and the pieces of the forward pass that are shared. Not a public interface: apps and
 * tests use t5.h. */
#ifndef T5_INTERNAL_H
#define T5_INTERNAL_H

#include <math.h>

#include <cjson/cJSON.h>

#include "models/param.h"
#include "models/parallel.h"
#include "models/stack.h"
#include "models/t5.h"

/* Added to attention scores at padded keys: exp() of it is exactly 0, and unlike -inf it
 * cannot turn a fully masked row into NaN (HF adds finfo.min, with the same effect). */
#define T5_MASKED (-1e30f)

/* One stack: its blocks (models/stack.h: pre-RMSNorm, q, k, v apart and without biases, the
 * decoder's cross-attention over the encoder's output), the relative position bias every block
 * adds (block 0 owns its table) and the stack's ids. */
typedef struct {
    mdl_stack blocks;
    bool decoder;
    int L, max_T;
    size_t MR;
    int rel_bias;          /* (num_buckets, NH_local) in block 0 */
    float *bias, *dbias;   /* (NH_local, T, T) the relative position bias, and its gradient */
    int32_t *buckets;      /* (T*T) */
    int32_t *ids;          /* (MR) */
    int buckets_T;         /* the length buckets holds, 0 for none yet */
} t5_stack;

struct t5_model {
    t5_config cfg;
    rt_backend *be;
    rt_comm *tp;
    rt_params params;
    int shared, lm_head; /* lm_head -1 when tied to shared */
    int max_B, max_S, max_T;
    int C, HS, NH_local, I_local, F_local;
    int head_offset, ff_offset;      /* this rank's first head and first FFN column */
    mdl_vocab vocab;                 /* shared's (and lm_head's) shard */
    t5_stack enc, dec;

    void *act_block;
    float *logits;      /* (max_B*max_T, V_local); the gradient overwrites it */
    float *losses;      /* (max_B*max_T) */
    float *xent_stats;  /* (3 * max_B*max_T) */
    float *vocab_mask;  /* (V_local) 0, or T5_MASKED on padding columns */
    float *key_mask;    /* (max_B, max_S) additive */
    int32_t *targets;   /* (max_B*max_T) labels with ignored ones -100 */
    mdl_stack_scratch scratch;      /* the stacks' backward scratch, shared: they run one after the other */
    float *dtop;        /* (max_B*max_T, C) dL/d(decoder output) */
    float *denc;        /* (max_B*max_S, C) dL/d(encoder output), summed over the decoder's blocks */

    int32_t *h_buckets, *h_dec_ids, *h_targets; /* host staging */
    float *h_mask, *h_losses;
};

/* The LM head's parameter: lm_head, or `shared` when tied. */
static inline int t5_head_param(const t5_model *m) { return m->lm_head >= 0 ? m->lm_head : m->shared; }
/* HF: sequence_output * d_model^-0.5 with a Python float, i.e. a float32 multiply. */
static inline float t5_decoder_out_scale(const t5_config *c) { return (float)pow((double)c->d_model, -0.5); }

/* The config as HF's config.json (t5_config.c). */
cJSON *t5_config_json(const t5_config *c);
/* Source ids and their additive key mask (m->key_mask, (B, S)) to the device, checked against
 * the vocab and the sizes the model was built for; the encoder's bucket table for length S. */
rt_status t5_upload_src(t5_model *m, const int32_t *src_ids, const int32_t *src_mask, int B, int S);
/* One stack forward from the ids in s->ids (B*T rows) to s->blocks.out; the decoder reads the
 * encoder's output m->enc.blocks.out (B*S rows). */
rt_status t5_stack_fwd(t5_model *m, t5_stack *s, int B, int T, int S, const mdl_pass *pass);
/* logits (R, V_local) on the device to host_logits (R, vocab_size): this rank's columns, or with
 * tp > 1 all ranks' gathered (a collective every rank joins), the padding columns dropped.
 * dev_scratch (tp > 1) and host_scratch, each R * V_local * tp floats, may be NULL: then they are
 * allocated for the call. */
rt_status t5_logits_to_host(t5_model *m, const float *logits, size_t R, float *host_logits, float *dev_scratch,
                            float *host_scratch);

#endif
