/* One reading interface for Hugging Face weights, whatever the files: model.safetensors,
 * model.safetensors.index.json (sharded), pytorch_model.bin (torch zip, read without running
 * code) and pytorch_model.bin.index.json (sharded). The HF loaders see a flat list of tensors
 * with names, dtypes and shapes, and read one at a time into float32 straight from the
 * mapping of the file that holds it: no whole-file copies.
 *
 * A sharded index names its shards by file name in the index's own folder; a name with a '/'
 * is refused (an index must not reach outside its folder), and a tensor the weight_map puts
 * in one shard must be there. A name found in two shards is an error. */
#ifndef CKPT_SOURCE_H
#define CKPT_SOURCE_H

#include <stdbool.h>
#include <stddef.h>

#include "checkpoints/ckpt_safetensors.h" /* ckpt_st_tensor */

typedef struct ckpt_source ckpt_source;

/* Finds the weights of an HF model folder, in HF's order of preference: model.safetensors,
 * model.safetensors.index.json, pytorch_model.bin, pytorch_model.bin.index.json. A file path
 * is returned as it is, and so is a tunezoo sharded folder (tz-manifest.json; open it with
 * ckpt_weights, not ckpt_source). No weights is RT_ERR_IO saying what was looked for. */
rt_status ckpt_source_find_weights(const char *dir, char *out_path, size_t size);

/* path: a folder (as ckpt_source_find_weights), a .safetensors or torch .bin file, or an
 * *.index.json. The kind of a file is taken from its first bytes, not its name. */
rt_status ckpt_source_open(const char *path, ckpt_source **out);
void ckpt_source_close(ckpt_source *s); /* accepts NULL */

const char *ckpt_source_path(const ckpt_source *s);
size_t ckpt_source_count(const ckpt_source *s);
const char *ckpt_source_name(const ckpt_source *s, size_t i);
/* Tensor i: name, dtype, shape, and data in the mapping of its file. */
void ckpt_source_tensor(const ckpt_source *s, size_t i, ckpt_st_tensor *out);
/* The file tensor i comes from (a shard's path, for messages). */
const char *ckpt_source_file_of(const ckpt_source *s, size_t i);
/* The index of the tensor called name, or -1. */
long ckpt_source_index(const ckpt_source *s, const char *name);
/* Converts a floating tensor to float32 into dst (numel_expected floats); another element
 * count is RT_ERR_FORMAT naming file, tensor and shape; an integer dtype RT_ERR_UNSUPPORTED.
 * A torch file's storage entry is checked against its zip CRC-32 the first time it is read. */
rt_status ckpt_source_read_f32(const ckpt_source *s, const char *name, float *dst, size_t numel_expected);
/* Drops tensor i's mapped pages from the resident set once it has been read (a streamed
 * conversion then holds about one tensor, not the file). */
void ckpt_source_release(const ckpt_source *s, size_t i);
/* A non-tensor number of a torch checkpoint (checkpoint_version), or false. */
bool ckpt_source_scalar(const ckpt_source *s, const char *name, double *value);

#endif
