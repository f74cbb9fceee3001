/* Name and layout maps between other frameworks' checkpoints and tunezoo's parameters: one
 * table per architecture, as data (checkpoints/ckpt_map_tables.c). A row says
 *
 *     our name              "h.{n}.attn.c_attn.weight"
 *     their name            "h.{n}.attn.c_attn.weight"   (after the map's prefix)
 *     layout                TRANSPOSE                    (how their tensor becomes ours)
 *     tensor-parallel rule  QKV                          (how ours splits over tp ranks)
 *
 * "{n}" stands for a decimal number (a layer or sub-layer index); our name and theirs hold
 * the same number of them, filled in the same order. "{p}" in their name stands for the three
 * parts of a fused QKV (the map's qkv_parts, e.g. query/key/value).
 *
 * The models take each parameter's tp rule from these tables (ckpt_map_tp_rule), the HF
 * loaders and savers and tz-convert take the names and layouts, so a model, its HF export and
 * the converter cannot disagree. */
#ifndef CKPT_MAP_H
#define CKPT_MAP_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/train/rt_params.h" /* rt_tp_rule, RT_PARAM_NAME_MAX */

typedef enum {
    CKPT_LAYOUT_SAME = 0,    /* their tensor is ours */
    CKPT_LAYOUT_TRANSPOSE,   /* theirs is [in, out] (GPT-2's Conv1D); ours [out, in] */
    CKPT_LAYOUT_QKV_PARTS,   /* ours is [q; k; v] on dim 0, theirs three tensors ("{p}") */
    CKPT_LAYOUT_QKV_PER_HEAD /* theirs is dim 0 ordered [head][q, k, v][head_dim] (Megatron
                              * checkpoint_version >= 2); ours [q; k; v] */
} ckpt_layout;

/* Row flags. */
enum {
    CKPT_ROW_NO_PREFIX = 1, /* exported without the map's prefix (HF's heads: score, classifier) */
    CKPT_ROW_ALIAS = 2      /* another place a checkpoint may keep the same tensor: read only
                             * when the main row's tensor is absent, never written */
};

typedef struct {
    const char *ours;
    const char *theirs;
    ckpt_layout layout;
    rt_tp_rule tp;
    unsigned flags;
} ckpt_map_row;

typedef struct {
    const char *from, *to;
} ckpt_map_rename;

typedef struct {
    const char *arch;                 /* "gpt2", "bert", "roberta", "t5", "glm", "megatron-gpt2" */
    const char *ours_arch;            /* the map whose names ours are when not this one
                                      * (megatron-gpt2 imports into gpt2); NULL = arch */
    const char *prefix;               /* written on export; optional on import ("transformer.") */
    const char *const *also_prefixes; /* other prefixes stripped on import; NULL-terminated or NULL */
    const ckpt_map_rename *renames;   /* old spellings rewritten on import ({"LayerNorm.gamma",
                                      * "LayerNorm.weight"}); first match each; ends with {0} */
    const ckpt_map_row *rows;
    size_t n_rows;
    const char *const *ignored;   /* their names known and not loaded (buffers, pre-training
                                      * heads), patterns as in rows; NULL-terminated or NULL */
    const char *const *qkv_parts; /* the three "{p}" words, or NULL */
    const char *torch_wrap;       /* export as a torch pytorch_model.bin holding {torch_wrap:
                                      * state_dict} (FlagAI's "module") instead of safetensors */
    const char *heads_key;        /* the config.json key of the attention head count */
    const char *vocab_key;        /* and of the vocabulary size */
} ckpt_map;

extern const ckpt_map ckpt_map_gpt2, ckpt_map_bert, ckpt_map_roberta, ckpt_map_t5, ckpt_map_glm, ckpt_map_megatron_gpt2;

/* The weights file an export of this architecture writes: "pytorch_model.bin" (torch_wrap
 * set: FlagAI loads only that) or "model.safetensors". */
const char *ckpt_map_weights_file(const ckpt_map *map);

/* The map called arch (a config.json model_type, or "megatron-gpt2"); NULL when unknown. */
const ckpt_map *ckpt_map_for_arch(const char *arch);
/* "gpt2, bert, ..." for messages. */
const char *ckpt_map_arch_list(void);

#define CKPT_MAP_MAX_NUMS 4
#define CKPT_MAP_NAME_MAX (RT_PARAM_NAME_MAX + 64)

/* One of their tensors, matched to a row. */
typedef struct {
    const ckpt_map_row *row;
    int part; /* 0..2 for QKV_PARTS, else 0 */
    char ours[RT_PARAM_NAME_MAX];
} ckpt_map_match;

typedef enum { CKPT_MAP_UNKNOWN = 0, CKPT_MAP_MATCHED, CKPT_MAP_IGNORED } ckpt_map_kind;

/* Classifies their tensor name: a row's tensor (filling *m), a known tensor to skip, or
 * unknown. Prefixes and renames are applied first. */
ckpt_map_kind ckpt_map_import_name(const ckpt_map *map, const char *theirs, ckpt_map_match *m);
/* The row of our parameter name (and its numbers), or NULL; ALIAS rows are never returned. */
const ckpt_map_row *ckpt_map_find_ours(const ckpt_map *map, const char *ours, long nums[CKPT_MAP_MAX_NUMS],
                                       int *n_nums);
/* Their full name (prefix included unless the row says not) of part `part` of our `ours`. */
bool ckpt_map_export_name(const ckpt_map *map, const char *ours, int part, char *out, size_t size);
/* The tp rule of our parameter; aborts naming it when the table has no row (a model declared a
 * parameter its table lacks: a programming error, caught by every test that builds it). */
rt_tp_rule ckpt_map_tp_rule(const ckpt_map *map, const char *ours);
/* 1 or 3: the tensors of theirs that make one of ours. */
int ckpt_map_parts(const ckpt_map_row *row);

/* Their tensor (shape `their`) as ours: the shape (ours, same ndim), checked for the layout
 * (QKV_PER_HEAD needs n_head to divide dim 0 by 3). `parts` their tensors, each `their`. */
bool ckpt_map_our_shape(const ckpt_map_row *row, int ndim, const size_t *their, size_t *ours);
/* Converts their data (parts back to back, floats) into ours; dst and src must not overlap.
 * shape is OUR full shape; n_head is used by QKV_PER_HEAD. */
void ckpt_map_to_ours(const ckpt_map_row *row, int ndim, const size_t *shape, int n_head, const float *src, float *dst);
/* The inverse: ours into theirs (parts back to back). */
void ckpt_map_to_theirs(const ckpt_map_row *row, int ndim, const size_t *shape, int n_head, const float *src,
                        float *dst);
/* Their shape of one part, from our full shape. */
void ckpt_map_their_shape(const ckpt_map_row *row, int ndim, const size_t *ours, size_t *their);

#endif
