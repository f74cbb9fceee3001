/* The checkpoint conversions behind tz-convert, as library calls (the tests call them too).
 *
 *   import   HF folder or file (safetensors, .bin, sharded), FlagAI GLM (.bin, or the
 *            model-parallel pytorch_model_NN.bin files) or Megatron-LM (mp_rank_NN folders)
 *            -> a tunezoo sharded folder (ckpt_sharded.h) at any tp
 *   reshard  sharded folder at tp N -> sharded folder at tp M (bit-exact)
 *   export   sharded folder -> HF folder: model.safetensors in the architecture's names and
 *            layouts, config.json and the tokenizer files
 *   inspect  every tensor of any readable file with its name, dtype, shape and CRC-32
 *   verify   a sharded folder's checksums (manifest, rank files, copied files)
 *
 * Tensors go one at a time: a conversion holds a few copies of the largest tensor, never the
 * model. Outputs are built under a temporary name and renamed when complete; an existing
 * output is never overwritten. Progress lines (tensors, GB, GB/s) go through rt_log_info. */
#ifndef CKPT_CONVERT_H
#define CKPT_CONVERT_H

#include <stdbool.h>
#include <stdio.h>

#include "runtime/base/rt_dtype.h"
#include "runtime/base/rt_status.h"

/* A tensor as a conversion sees it: our name and its full shape in our layout (vocab unpadded). */
typedef struct {
    const char *name;
    int ndim;
    const size_t *shape;
} ckpt_tensor_shape;

/* Checks n tensors against the model a config.json describes (the family's parameters, in
 * models/): every parameter there with its shape, except the task heads a fine-tuning program
 * initializes itself. `what` names the tensors' file or folder in errors. The conversions take it
 * from their caller, since checkpoints/ knows no model. */
typedef rt_status (*ckpt_shape_check_fn)(const char *arch, const char *config_path, const ckpt_tensor_shape *t,
                                         size_t n, const char *what);

typedef struct {
    const char *src, *out;
    int tp;                    /* >= 1 */
    bool keep_dtype;           /* store as the source stores (F32, BF16 or F16; F64 becomes F32) */
    rt_dtype dtype;            /* else this: RT_F32, RT_BF16 or RT_F16 */
    const char *arch;          /* NULL: config.json's model_type (Megatron folders: megatron-gpt2) */
    const char *hf_config;     /* NULL: <src>/config.json; Megatron without one: built from its args */
    int vocab_size;            /* 0: from the config (Megatron: the real vocab, dropping padding rows) */
    ckpt_shape_check_fn check; /* before anything is written, where the source has a config.json; NULL: none */
} ckpt_import_opts;

typedef struct {
    size_t tensors;
    double bytes; /* read from the source, as stored */
    double seconds;
} ckpt_convert_stats;

rt_status ckpt_convert_import(const ckpt_import_opts *o, ckpt_convert_stats *stats);
rt_status ckpt_convert_reshard(const char *in, const char *out, int tp, ckpt_convert_stats *stats);
rt_status ckpt_convert_export(const char *in, const char *out_dir, ckpt_convert_stats *stats);
/* Lists a safetensors/.bin/index file, an HF folder, a .tzck or a sharded folder to out. */
rt_status ckpt_convert_inspect(const char *path, FILE *out);
/* Opens the sharded folder, which checks every checksum, checks its tensors against its
 * config.json with check (NULL: not), and prints a summary to out. */
rt_status ckpt_convert_verify(const char *dir, ckpt_shape_check_fn check, FILE *out);

#endif
