/* The tunezoo sharded checkpoint folder: what `tz-convert import` writes, and what every
 * training program's --model accepts at any tp.
 *
 *   tz-manifest.json
 *       {"format": "tunezoo-sharded", "version": 1, "arch": "gpt2", "tp": 2, "dtype": "BF16",
 *        "n_head": 12, "vocab_size": 50257, "source": "/models/gpt2", "source_arch": "gpt2",
 *        "files": ["config.json", "vocab.json", "merges.txt"],
 *        "tensors": [{"name": "wte.weight", "shape": [50257, 768], "tp": "vocab",
 *                     "crc32": ["1c291ca3", "7d5f0a2e"]}, ...]}
 *   rank-00-of-02.tzck, rank-01-of-02.tzck
 *       one native container (ckpt_native.h) per tp rank holding that rank's shard of every
 *       tensor under our parameter names, as the model's slab holds it (the embedding padded
 *       to ckpt_tp_padded_vocab rows); the manifest's crc32 lists each shard's checksum by rank
 *   config.json and the tokenizer files, copied from the source
 *
 * Shapes in the manifest are the FULL tensors in our layout (unpadded vocab), so any tp can
 * re-split them. The writer builds the folder under "<dir>.partial" and renames it into place
 * only when complete; an existing <dir> is never touched. */
#ifndef CKPT_SHARDED_H
#define CKPT_SHARDED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoints/ckpt_safetensors.h" /* CKPT_MAX_DIMS */
#include "runtime/base/rt_dtype.h"
#include "runtime/train/rt_params.h"

#define CKPT_SHARDED_MANIFEST "tz-manifest.json"
#define CKPT_SHARDED_MAX_TP 4096

/* Whether path is a folder holding a tz-manifest.json. */
bool ckpt_sharded_is_dir(const char *path);
/* "vocab" for RT_TP_VOCAB ... and back (false when unknown). */
const char *ckpt_sharded_rule_name(rt_tp_rule rule);
bool ckpt_sharded_rule_from_name(const char *name, rt_tp_rule *rule);

/* ---- writing ---- */
typedef struct ckpt_sharded_writer ckpt_sharded_writer;

typedef struct {
    const char *arch;        /* our model family's map (ckpt_map.h) */
    const char *source_arch; /* the map the source was read with */
    const char *source;      /* for the manifest: where the weights came from */
    int tp;
    rt_dtype dtype; /* RT_F32 or RT_BF16 (or RT_F16) */
    int n_head;
    int vocab_size;
} ckpt_sharded_spec;

rt_status ckpt_sharded_writer_begin(const char *dir, const ckpt_sharded_spec *spec, ckpt_sharded_writer **out);
/* Splits one full tensor (our layout, numel of full_shape floats) into every rank's shard,
 * rounds it to the dtype and streams it to the rank files. Names must be unique. */
rt_status ckpt_sharded_writer_add(ckpt_sharded_writer *w, const char *name, rt_tp_rule rule, int ndim,
                                  const size_t *full_shape, const float *full);
/* Copies a file (config.json, tokenizer files) into the folder under its base name. */
rt_status ckpt_sharded_writer_copy(ckpt_sharded_writer *w, const char *src_path);
/* Writes n bytes as the folder's file `name` (a plain name), listed with its checksum. */
rt_status ckpt_sharded_writer_put_file(ckpt_sharded_writer *w, const char *name, const void *data, size_t n);
/* Writes the manifest and renames the folder into place. Frees w in every case. */
rt_status ckpt_sharded_writer_commit(ckpt_sharded_writer *w);
/* Removes the partial folder. Accepts NULL. */
void ckpt_sharded_writer_abort(ckpt_sharded_writer *w);

/* ---- reading ---- */
typedef struct ckpt_sharded ckpt_sharded;

typedef struct {
    const char *name;
    rt_tp_rule rule;
    int ndim;
    size_t shape[CKPT_MAX_DIMS]; /* full */
    size_t numel;
} ckpt_sharded_tensor;

/* Reads the manifest and opens every rank file (each checks its own CRCs); any disagreement
 * between the two (a missing record, another shape, a checksum) is RT_ERR_FORMAT naming the
 * file and the tensor. */
rt_status ckpt_sharded_open(const char *dir, ckpt_sharded **out);
void ckpt_sharded_close(ckpt_sharded *s); /* accepts NULL */

const char *ckpt_sharded_dir(const ckpt_sharded *s);
const char *ckpt_sharded_arch(const ckpt_sharded *s);
int ckpt_sharded_tp(const ckpt_sharded *s);
rt_dtype ckpt_sharded_dtype(const ckpt_sharded *s);
int ckpt_sharded_n_head(const ckpt_sharded *s);
int ckpt_sharded_vocab_size(const ckpt_sharded *s);
size_t ckpt_sharded_count(const ckpt_sharded *s);
void ckpt_sharded_tensor_at(const ckpt_sharded *s, size_t i, ckpt_sharded_tensor *out);
long ckpt_sharded_find(const ckpt_sharded *s, const char *name);
/* The copied files (config.json, tokenizer files): count and base names. */
size_t ckpt_sharded_file_count(const ckpt_sharded *s);
const char *ckpt_sharded_file(const ckpt_sharded *s, size_t i);
/* The full tensor i (unsharded, vocab padding dropped) as float32 into dst (numel floats). */
rt_status ckpt_sharded_read_full(ckpt_sharded *s, size_t i, float *dst);
/* The stored bytes of tensor i's shard on `rank` (for bit-exact resharding at the same dtype). */
void ckpt_sharded_shard(const ckpt_sharded *s, size_t i, int rank, const void **data, size_t *nbytes);

#endif
