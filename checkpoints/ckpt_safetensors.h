/* safetensors: the Hugging Face weights format, read through mmap and written atomically.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"format": "pt"}}
 * and then the data section, with offsets relative to its start. Opening a file validates
 * the whole header before anything uses it (bounds, sizes, overlaps, overflow), because the
 * files come from outside and a bad offset must be an error message, not a crash.
 * Tensor data pointers point into the mapping, may be unaligned, and live until close. */
#ifndef CKPT_SAFETENSORS_H
#define CKPT_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/base/rt_dtype.h"
#include "runtime/base/rt_status.h"

#define CKPT_MAX_DIMS 8

typedef struct ckpt_st_file ckpt_st_file;

typedef struct {
    const char *name; /* owned by the file */
    rt_dtype dtype;
    int ndim; /* 0 for a scalar */
    size_t shape[CKPT_MAX_DIMS];
    const void *data; /* into the mapping; possibly unaligned */
    size_t numel;     /* product of shape (1 for a scalar) */
    size_t nbytes;    /* numel * rt_dtype_size(dtype) */
} ckpt_st_tensor;

rt_status ckpt_safetensors_open(const char *path, ckpt_st_file **out);
void ckpt_safetensors_close(ckpt_st_file *f); /* accepts NULL */

const char *ckpt_safetensors_path(const ckpt_st_file *f);
/* Tensors in data-offset order (the order they lie in the file). */
size_t ckpt_safetensors_count(const ckpt_st_file *f);
const char *ckpt_safetensors_name(const ckpt_st_file *f, size_t i);
void ckpt_safetensors_tensor(const ckpt_st_file *f, size_t i, ckpt_st_tensor *out);
bool ckpt_safetensors_has(const ckpt_st_file *f, const char *name);
/* The index of the tensor called name (for ckpt_safetensors_tensor), or -1. */
long ckpt_safetensors_index(const ckpt_st_file *f, const char *name);
/* RT_ERR_FORMAT "path: no tensor 'name'" when absent (use _has for optional tensors). */
rt_status ckpt_safetensors_find(const ckpt_st_file *f, const char *name, ckpt_st_tensor *out);
/* A "__metadata__" value, or NULL. */
const char *ckpt_safetensors_metadata(const ckpt_st_file *f, const char *key);

/* Converts a floating tensor (F32, F16, BF16, F64) to float32 into dst, which holds
 * numel_expected floats; a different element count is RT_ERR_FORMAT naming file, tensor and
 * both shapes; an integer dtype is RT_ERR_UNSUPPORTED. */
rt_status ckpt_safetensors_read_f32(const ckpt_st_file *f, const char *name, float *dst, size_t numel_expected);
/* Drops the mapped pages under a tensor's data once the caller has converted it (ckpt_pages.h). */
void ckpt_safetensors_release(const ckpt_st_file *f, const void *data, size_t nbytes);
/* "[50257, 2]" into buf, for messages. */
const char *ckpt_shape_str(int ndim, const size_t *shape, char *buf, size_t size);

/* One tensor to write: float32 data in memory, stored as `store` (RT_F32 by default, since
 * a zeroed entry has store == RT_F32; RT_F16 and RT_BF16 round to nearest even). */
typedef struct {
    const char *name;
    int ndim;
    const size_t *shape;
    const float *data;
    rt_dtype store;
} ckpt_st_write_entry;

/* Writes n tensors in the given order, atomically (rt_atomic). metadata_json is NULL or
 * a JSON object of string values, stored as "__metadata__". Names must be distinct. */
rt_status ckpt_safetensors_write(const char *path, size_t n, const ckpt_st_write_entry *entries,
                                 const char *metadata_json);

/* The same, streamed: begin writes the header from the entries' names, shapes and store types
 * (their data is not read), put appends the next tensor's float32 data in entry order, and
 * commit renames the complete file into place. entries must live until commit or abort. */
typedef struct ckpt_st_writer ckpt_st_writer;
rt_status ckpt_safetensors_writer_begin(const char *path, size_t n, const ckpt_st_write_entry *entries,
                                        const char *metadata_json, ckpt_st_writer **out);
rt_status ckpt_safetensors_writer_put(ckpt_st_writer *w, const float *data);
rt_status ckpt_safetensors_writer_commit(ckpt_st_writer *w); /* frees w */
void ckpt_safetensors_writer_abort(ckpt_st_writer *w);       /* accepts NULL */

#endif
