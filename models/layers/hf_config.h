/* What the model families share when they read and write an HF config.json: HF's activation
 * names, the way a config's errors are reported (the file named, the status a caller can act
 * on), and the size limits every family checks before it allocates anything. */
#ifndef HF_CONFIG_H
#define HF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "checkpoints/ckpt_map.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_params.h"
#include "runtime/base/rt_status.h"

/* Size limits for config fields, one set for every family. Each is many times the largest
 * released model's, and low enough that any product a model forms from them (3 * C,
 * num_heads * d_kv, padded vocab rows) fits an int and a shape product fits 64 bits. */
#define MDL_MAX_WIDTH (1 << 16) /* hidden width (n_embd, hidden_size, d_model) and T5's d_kv */
#define MDL_MAX_FFN (1 << 20)   /* MLP width (n_inner, intermediate_size, d_ff), T5's num_heads * d_kv */
#define MDL_MAX_LAYERS 1024     /* per stack; dropout streams number a layer's sites in 12 bits */
#define MDL_MAX_HEADS 1024
#define MDL_MAX_VOCAB (1 << 24)     /* vocab_size, type_vocab_size */
#define MDL_MAX_POSITIONS (1 << 20) /* learned positions; T5's relative buckets and distance */
#define MDL_MAX_LABELS (1 << 16)    /* classifier outputs */
/* The whole model: 2^40 parameters (over a trillion; 16 TiB for fp32 weights, gradients and
 * AdamW moments) is past anything a run of this suite can hold, and keeps every slab size far
 * from overflowing. */
#define MDL_MAX_PARAMS ((uint64_t)1 << 40)
/* An activation slab's bound (see mdl_check_activations): no machine has 2^56 bytes, and a
 * layout's few dozen terms under it cannot overflow size_t when summed. */
#define MDL_MAX_ACT_BYTES ((uint64_t)1 << 56)

typedef enum { MDL_FIELD_INT, MDL_FIELD_FLOAT, MDL_FIELD_BOOL } mdl_field_kind;

/* One field of a config struct as config.json names it, with HF's default and, for an int, its
 * range (a size's limit from above). A family lists its plain fields once; defaults, reading,
 * validation and writing all come from the table. An int whose range starts at 0 is written
 * as null when 0 (HF's None: GPT-2's n_inner). */
typedef struct {
    const char *key;
    size_t offset; /* of the field in the config struct */
    mdl_field_kind kind;
    double def;
    int min, max;  /* ints; a float must be finite and >= 0, and > 0 where min is 1 (an epsilon) */
    bool required; /* absent or null is an error, not the default */
} mdl_field;

/* Every field of the table at its default. */
void mdl_fields_default(const mdl_field *fields, size_t n, void *cfg);
/* Reads each field into cfg; an absent or null one keeps the value there. A value of the wrong
 * type, or an int outside its range, is RT_ERR_CONFIG "path: field 'n_embd' is 1000000000,
 * more than the limit 65536". */
rt_status mdl_fields_read(const cJSON *root, const char *path, const mdl_field *fields, size_t n, void *cfg);
/* Checks each int of cfg against its range (a config built in code, or edited after loading):
 * "GPT-2 config: field 'n_embd' is 1000000000, more than the limit 65536". */
rt_status mdl_fields_check(const char *what, const mdl_field *fields, size_t n, const void *cfg);
/* Adds each field of cfg to the config object, in the table's order. */
void mdl_fields_write(cJSON *config, const mdl_field *fields, size_t n, const void *cfg);

/* a * b and a + b, saturating at UINT64_MAX: a count that overflowed stays above every limit. */
static inline uint64_t mdl_size_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
static inline uint64_t mdl_size_add(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

static inline uint64_t mdl_size_max(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* RT_ERR_CONFIG "what: fields give N parameters, more than the limit 2^40" when params (a
 * saturated count) is over MDL_MAX_PARAMS. */
rt_status mdl_check_params(const char *what, const char *fields, uint64_t params);

/* Every buffer of an activation slab is at most (layers + 1) x rows x len x width floats, width
 * being the widest per-token row of any buffer (C, 3 C_local, F_local, NH_local * len, the
 * local vocab, ...). Checking that bound in 64 bits before the layout measures its terms means
 * no term and no sum of them can wrap; the bound over MDL_MAX_ACT_BYTES is RT_ERR_NOMEM, one
 * line ending with `hint`, and rows x len over INT32_MAX (token rows are indexed with int32)
 * RT_ERR_CONFIG. The real allocation then fails, if it must, as out of memory. */
rt_status mdl_check_activations(const char *what, uint64_t layers, uint64_t rows, uint64_t len, uint64_t width,
                                const char *hint);

/* HF's ACT2FN names: "gelu" is the erf GELU; "gelu_new", "gelu_pytorch_tanh" and "gelu_fast"
 * the tanh one; "relu", "tanh". False for any other name. */
bool mdl_hf_act_from_name(const char *name, rt_act_kind *out);
/* The name HF writes for an activation ("gelu_new" for the tanh GELU). */
const char *mdl_hf_act_name(rt_act_kind act);

/* The checks every family makes of a run's tp: >= 1, and dividing the attention heads and the
 * FFN width (heads_field, ffn_field: how its config names them). */
rt_status mdl_check_tp(int tp, const char *heads_field, int heads, const char *ffn_field, int ffn);
/* Each of n dropout probabilities in [0, 1): "what: dropout 1.5 not in [0, 1)". */
rt_status mdl_check_dropouts(const char *what, const float *p, int n);

/* A classifier's label count: id2label's size when it has entries, else num_labels; at most
 * MDL_MAX_LABELS. Absent, *num_labels keeps its value. */
rt_status mdl_hf_read_labels(const cJSON *root, const char *path, int *num_labels);
/* The class names of a config.json's id2label (keys 0 .. n-1), when it names them: *names NULL
 * and *n 0 when it has none, or only HF's defaults LABEL_0 ... The caller frees each and the
 * array. RT_ERR_IO/FORMAT for a file that cannot be read or parsed. */
rt_status mdl_hf_label_names(const char *config_path, char ***names, int *n);
/* A new config object with model_type and architectures [arch]. */
cJSON *mdl_hf_config_new(const char *model_type, const char *arch);
/* id2label and label2id (LABEL_0 ...), and problem_type "regression" for one label. */
void mdl_hf_add_labels(cJSON *config, int num_labels);
/* The same with the classes' names (NULL: LABEL_0 ...), replacing what config had; problem_type
 * "regression" for one label, "multi_label_classification" when multi_label, else
 * "single_label_classification" when named. */
void mdl_hf_set_labels(cJSON *config, int num_labels, const char *const *names, bool multi_label);
/* Writes config to path atomically and deletes it. */
rt_status mdl_hf_write_json(cJSON *config, const char *path);
/* An HF folder: dir (made by tp rank 0), model.safetensors in map's names (a collective every
 * tp rank joins) and config.json (written by rank 0, deleted on every rank); every rank
 * returns rank 0's status. With pipeline stages (pp larger than 1; params are this stage's),
 * every stage's tensors come to the first stage (checkpoints/ckpt_pp.h), which writes the
 * whole model's folder from a copy of them in host memory: the folder one process writes. */
rt_status mdl_hf_save_folder(const char *dir, const ckpt_map *map, rt_params *params, int vocab_size, int num_heads,
                             rt_comm *tp, rt_comm *pp, cJSON *config);
/* Just the weights file at path (ckpt_save_hf: its name picks the format), the same way: a
 * collective over tp and pp whose writer is the first stage's tp rank 0. */
rt_status mdl_save_weights(const char *path, const ckpt_map *map, rt_params *params, int vocab_size, int num_heads,
                           rt_comm *tp, rt_comm *pp);
/* The trainable parameters (LoRA's adapters and saved modules) as DIR/adapter_model.safetensors
 * (ckpt_peft_save_weights), the same way: gathered over tp, and over pp to the first stage. */
rt_status mdl_peft_save_weights(const char *dir, const ckpt_map *map, const rt_params *params, rt_comm *tp,
                                rt_comm *pp);

/* The end of a config loader: a failed validation gets the file's path in front of its message,
 * and any status other than RT_OK, RT_ERR_CONFIG, RT_ERR_IO and RT_ERR_FORMAT becomes
 * RT_ERR_CONFIG. */
rt_status mdl_hf_config_result(rt_status st, const char *path, bool from_validation);

#endif
