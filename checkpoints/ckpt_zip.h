/* A read-only zip reader for the container torch.save writes (pytorch_model.bin).
 *
 * The file is mmap'd and the central directory is the index: every count, offset and length
 * in it (and in each entry's local header, and in the ZIP64 records torch writes for big
 * files) is checked against the file size before use, entries may not overlap, and a bad
 * file is an RT_ERR_FORMAT naming the file and the entry, never a crash. Stored entries are
 * read in place; deflated ones are inflated through zlib on first use (CRC checked) and kept
 * until close. Encryption, multi-disk archives and other methods are refused. */
#ifndef CKPT_ZIP_H
#define CKPT_ZIP_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/base/rt_status.h"

typedef struct ckpt_zip ckpt_zip;

/* "PK\3\4" at the start: a zip, as opposed to a legacy torch pickle or safetensors. */
bool ckpt_zip_sniff(const void *head, size_t n);

rt_status ckpt_zip_open(const char *path, ckpt_zip **out);
void ckpt_zip_close(ckpt_zip *z); /* accepts NULL */

const char *ckpt_zip_path(const ckpt_zip *z);
size_t ckpt_zip_count(const ckpt_zip *z);
const char *ckpt_zip_name(const ckpt_zip *z, size_t i);
/* Uncompressed size of entry i, as the directory declares it (checked at open). */
size_t ckpt_zip_size(const ckpt_zip *z, size_t i);
/* The index of the entry called name, or -1. */
long ckpt_zip_find(const ckpt_zip *z, const char *name);
/* The uncompressed bytes of entry i: in place for a stored entry, inflated (once) for a
 * deflated one. Valid until close. */
rt_status ckpt_zip_data(ckpt_zip *z, size_t i, const void **data, size_t *size);

/* Drops the mapped pages under [p, p + n) if they lie in the file's mapping (a stored entry's
 * data); an inflated entry's heap copy is left alone. */
void ckpt_zip_release(const ckpt_zip *z, const void *p, size_t n);

/* Checks entry i against the CRC-32 its directory record holds (a pass over its bytes;
 * deflated entries are checked when inflated). */
rt_status ckpt_zip_verify(ckpt_zip *z, size_t i);

#endif
