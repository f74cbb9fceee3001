/* The native tunezoo checkpoint container (.tzck): what --save writes and --resume reads.
 *
 * One file holds a JSON metadata blob chosen by the caller (resolved options, step, RNG
 * state, sampler position, loss scale) and named binary records (weights, AdamW m and v,
 * ...). Layout, all integers little-endian:
 *
 *     0   "TZCKPT\0\0"                 magic
 *     8   u32 version (1), u32 flags (0)
 *     16  u64 metadata length M, then M bytes of JSON
 *         record data, each record starting at a multiple of 64 bytes (so an mmap'd record
 *         is aligned for vector loads)
 *     T   record table: per record u32 name length, name, char dtype[8] ("F32", NUL-padded),
 *         u32 ndim, u64 shape[ndim], u64 offset, u64 byte length, u32 CRC32 of the data
 *     end footer (48 bytes): u64 T, u64 table length, u64 record count, u32 table CRC32,
 *         u32 metadata CRC32, u64 reserved, "TZCKEND\0"
 *
 * The table sits at the end so the writer can stream each record to disk as it is added.
 * The footer is written last, so a truncated file has no valid footer. Files are written
 * through rt_atomic (temp + fsync + rename). Opening checks magic, version, every bound
 * and every CRC; a truncated or corrupt file is RT_ERR_FORMAT naming the path and the
 * problem, never a crash.
 *
 * Checkpoints of one run live in one directory as "step-000120.tzck"; the list/prune/latest
 * helpers implement "keep the last K" and "--resume DIR". */
#ifndef CKPT_NATIVE_H
#define CKPT_NATIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoints/ckpt_safetensors.h" /* CKPT_MAX_DIMS, ckpt_shape_str */
#include "runtime/base/rt_dtype.h"
#include "runtime/base/rt_status.h"

#define CKPT_NATIVE_VERSION 1
#define CKPT_NATIVE_ALIGN 64
#define CKPT_NATIVE_PREFIX "step-"
#define CKPT_NATIVE_EXT ".tzck"

typedef struct ckpt_native_file ckpt_native_file;
typedef struct ckpt_native_writer ckpt_native_writer;

typedef struct {
    const char *name; /* owned by the file */
    rt_dtype dtype;
    int ndim;
    size_t shape[CKPT_MAX_DIMS];
    const void *data; /* into the mapping, 64-byte aligned; lives until close */
    size_t numel;
    size_t nbytes;
    uint32_t crc32; /* of the data, as the table records it (checked at open) */
} ckpt_native_record;

/* zlib's CRC-32 of n bytes (any n), the checksum every record carries. */
uint32_t ckpt_native_crc32(const void *data, size_t n);

/* ---- writing ---- */
/* metadata_json must be valid JSON (checked: a typo here would only show at resume time). */
rt_status ckpt_native_writer_begin(const char *path, const char *metadata_json, ckpt_native_writer **out);
/* Streams one record (numel(shape) elements of dtype at data) to disk. Names must be unique. */
rt_status ckpt_native_writer_add(ckpt_native_writer *w, const char *name, rt_dtype dtype, int ndim, const size_t *shape,
                                 const void *data);
/* The CRC-32 of the record just added (what the table stores for it). */
uint32_t ckpt_native_writer_last_crc(const ckpt_native_writer *w);
/* Writes the table and footer and renames into place. Frees w in every case. */
rt_status ckpt_native_writer_commit(ckpt_native_writer *w);
/* Drops the temporary file; the previous file at path is untouched. Accepts NULL. */
void ckpt_native_writer_abort(ckpt_native_writer *w);

/* ---- reading ---- */
rt_status ckpt_native_open(const char *path, ckpt_native_file **out);
void ckpt_native_close(ckpt_native_file *f); /* accepts NULL */
const char *ckpt_native_path(const ckpt_native_file *f);
/* The metadata JSON text, NUL-terminated (parse it with rt_json_parse). */
const char *ckpt_native_metadata(const ckpt_native_file *f);
size_t ckpt_native_count(const ckpt_native_file *f);
/* Records in file order. */
void ckpt_native_record_at(const ckpt_native_file *f, size_t i, ckpt_native_record *out);
bool ckpt_native_has(const ckpt_native_file *f, const char *name);
/* RT_ERR_FORMAT "path: no record 'name'" when absent. */
rt_status ckpt_native_find(const ckpt_native_file *f, const char *name, ckpt_native_record *out);
/* Drops the mapped pages under a record's data once the caller has converted it (ckpt_pages.h). */
void ckpt_native_release(const ckpt_native_file *f, const void *data, size_t nbytes);
/* Converts a float record (F32, F16, BF16, F64) into dst of numel floats; a different
 * element count is RT_ERR_FORMAT naming the file, the record and both sizes. */
rt_status ckpt_native_read_f32(const ckpt_native_file *f, const char *name, float *dst, size_t numel);
/* Copies a record whose dtype and element count must match exactly (RNG words, counters). */
rt_status ckpt_native_read_raw(const ckpt_native_file *f, const char *name, rt_dtype dtype, void *dst, size_t numel);

/* ---- a directory of checkpoints ---- */
typedef struct {
    char *path;
    long long step;
} ckpt_native_entry;

/* "dir/step-000120.tzck" into out. */
rt_status ckpt_native_step_path(const char *dir, long long step, char *out, size_t size);
/* Files named <prefix><digits>.tzck in dir (prefix NULL = "step-"), sorted by step, oldest
 * first. An empty list is not an error. Free with ckpt_native_list_free. */
rt_status ckpt_native_list(const char *dir, const char *prefix, ckpt_native_entry **out, size_t *n_out);
void ckpt_native_list_free(ckpt_native_entry *list, size_t n);
/* Removes all but the newest `keep` step-*.tzck files (keep < 1 counts as 1: the newest
 * checkpoint is never removed). */
rt_status ckpt_native_prune(const char *dir, size_t keep);
/* Every step-*.tzck in dir, newest first, as malloc'd paths in a malloc'd array (none is not an
 * error); a path to a file lists itself, a missing path is RT_ERR_IO. Free each and the array. */
rt_status ckpt_native_resume_list(const char *dir_or_file, char ***paths, size_t *n);

#endif
