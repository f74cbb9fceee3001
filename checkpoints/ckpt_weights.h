/* A model's weights by OUR parameter names, as full tensors in our layout (weights [out, in],
 * QKV fused as [q; k; v], the embedding with the real vocab's rows), whatever holds them:
 *
 *   - an HF folder or file (any ckpt_source layout: safetensors, .bin, sharded), a FlagAI
 *     .bin or a Megatron-LM checkpoint, read through an architecture's ckpt_map;
 *   - a tunezoo sharded folder (tz-convert's output, checkpoints/ckpt_sharded.h) at any tp.
 *
 * Opening maps every tensor of the files to a row and fails, naming the file and the tensor,
 * on a tensor seen twice (e.g. with and without the "transformer." prefix), a QKV part
 * without its siblings, or a shape the layout cannot take. Tensors no row knows are counted
 * as unused; tensors the map knows and skips (buffers, pre-training heads) as ignored.
 * Reading converts one tensor at a time, so memory stays near the largest tensor. */
#ifndef CKPT_WEIGHTS_H
#define CKPT_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_safetensors.h" /* CKPT_MAX_DIMS */
#include "runtime/comm/rt_comm.h"
#include "runtime/base/rt_dtype.h"

typedef struct ckpt_weights ckpt_weights;

typedef struct {
    const char *name; /* ours; owned by the weights */
    const ckpt_map_row *row;
    int ndim;
    size_t shape[CKPT_MAX_DIMS]; /* full, our layout */
    size_t numel;
    rt_dtype dtype;     /* as stored (F32, F16, BF16, F64) */
    const char *source; /* their name (the first part's), for messages */
} ckpt_weight_info;

/* path: an HF folder/file/index, or a tz-convert folder (it holds tz-manifest.json; its own
 * arch must then be map's). n_head (> 0) is needed by maps with a per-head QKV layout and
 * checks QKV shapes; 0 skips that. */
rt_status ckpt_weights_open(const char *path, const ckpt_map *map, int n_head, ckpt_weights **out);
/* Model-parallel files (Megatron-LM's mp_rank_NN/model_optim_rng.pt, FlagAI's
 * pytorch_model_NN.bin: one path per tp rank, in rank order), joined into full tensors by the
 * map's tp rules. vocab_size (>= 1) cuts the embedding's padding rows. */
rt_status ckpt_weights_open_ranks(const char *const *paths, int n_ranks, const ckpt_map *map, int n_head,
                                  int vocab_size, ckpt_weights **out);
void ckpt_weights_close(ckpt_weights *w); /* accepts NULL */

const char *ckpt_weights_path(const ckpt_weights *w);
const ckpt_map *ckpt_weights_map(const ckpt_weights *w);
size_t ckpt_weights_count(const ckpt_weights *w);
void ckpt_weights_info(const ckpt_weights *w, size_t i, ckpt_weight_info *out);
long ckpt_weights_find(const ckpt_weights *w, const char *ours); /* -1 when absent */
/* Unused: tensors no row maps (the first one's name, or NULL); ignored: known and skipped. */
size_t ckpt_weights_unused(const ckpt_weights *w, const char **first);
size_t ckpt_weights_ignored(const ckpt_weights *w);
/* A number the source carries besides tensors (Megatron's checkpoint_version), or false. */
bool ckpt_weights_scalar(const ckpt_weights *w, const char *name, double *value);
/* Tensor i, full, into dst (info.numel floats). */
rt_status ckpt_weights_read(ckpt_weights *w, size_t i, float *dst);
/* Whether two tensors hold the same bytes as stored (T5 decides its head's tying by this). */
bool ckpt_weights_same_bytes(const ckpt_weights *w, size_t a, size_t b);

/* ---- loading into a model's parameter slab, and writing it back as HF ---- */

typedef struct {
    int loaded;   /* parameters filled */
    int missing;  /* parameters the weights lack (they keep their init), e.g. a new head */
    int adapters; /* LoRA adapters they lack (a base model's file has none; they keep their init or load from a
                   * PEFT folder): not counted in missing */
    char first_missing[RT_PARAM_NAME_MAX];
    char missing_names[256]; /* the missing ones' names, ", "-separated, as many as fit */
    int unused;              /* tensors that map to no parameter of this model */
    char first_unused[CKPT_MAP_NAME_MAX];
} ckpt_load_report;

/* "N tensors loaded; newly initialized: a, b (and K more)" into out, as HF names the weights a
 * model initializes itself. */
void ckpt_load_report_describe(const ckpt_load_report *r, char *out, size_t size);

/* Fills this tp rank's shard of every parameter found. A file of which no tensor fills a
 * parameter (another family's, or an empty state dict) is RT_ERR_FORMAT: the model would train
 * from its random init. Every tensor's full shape must be the
 * parameter's (errors name the file, the tensor and both shapes); the RT_TP_VOCAB embedding
 * must have vocab_size rows. may_be_unused: our names the caller expects without a parameter
 * (NULL-terminated or NULL; T5's tied lm_head copy). */
rt_status ckpt_weights_load_params(ckpt_weights *w, rt_params *p, int vocab_size, int tp_rank, int tp_size,
                                   const char *const *may_be_unused, ckpt_load_report *report);
/* Opens path with map, loads as above and closes. */
rt_status ckpt_load_hf(const char *path, const ckpt_map *map, rt_params *p, int vocab_size, int n_head, int tp_rank,
                       int tp_size, const char *const *may_be_unused, ckpt_load_report *report);
/* Writes the slab as one file with the map's names and layouts: safetensors, or a torch
 * checkpoint {torch_wrap: ...} for maps that set it (GLM: FlagAI's pytorch_model.bin; see
 * ckpt_map_weights_file). Collective over
 * tp (rt_comm_self() for one process): every rank's shards are gathered to tp rank 0, which
 * writes; every rank returns rank 0's status. */
rt_status ckpt_save_hf(const char *path, const ckpt_map *map, const rt_params *p, int vocab_size, int n_head,
                       rt_comm *tp);

#endif
