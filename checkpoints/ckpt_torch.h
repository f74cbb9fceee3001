/* PyTorch checkpoints (torch.save, zip format since torch 1.6) read without running code:
 * the zip container (ckpt_zip) holds <archive>/data.pkl, a pickle of the state dict
 * (ckpt_pickle), and one entry <archive>/data/<key> per storage. Opening checks that every
 * tensor's storage entry exists, has the size its persistent id declares, and holds the
 * tensor's elements; tensors then point into the mapping like safetensors ones.
 *
 * Refused with a message: the legacy pre-1.6 format (with how to re-save), big-endian files
 * (<archive>/byteorder "big"), and everything ckpt_pickle refuses. */
#ifndef CKPT_TORCH_H
#define CKPT_TORCH_H

#include <stdbool.h>
#include <stddef.h>

#include "checkpoints/ckpt_pickle.h"
#include "checkpoints/ckpt_safetensors.h" /* ckpt_st_tensor */

typedef struct ckpt_torch_file ckpt_torch_file;

/* The magic of a legacy (non-zip) torch.save file: a pickled 0x1950a86a20f9469cfc6c. */
bool ckpt_torch_sniff_legacy(const void *head, size_t n);

rt_status ckpt_torch_open(const char *path, ckpt_torch_file **out);
void ckpt_torch_close(ckpt_torch_file *f); /* accepts NULL */

size_t ckpt_torch_count(const ckpt_torch_file *f);
/* Tensor i in pickle order; data points into the mapping (or the inflated entry). */
void ckpt_torch_tensor(const ckpt_torch_file *f, size_t i, ckpt_st_tensor *out);
/* Checks the CRC-32 of the storage entry tensor i lies in, once per entry (a corrupt byte in
 * the data is RT_ERR_FORMAT naming the file and the entry). */
rt_status ckpt_torch_verify_tensor(const ckpt_torch_file *f, size_t i);
/* Drops the mapped pages under tensor i's data (a stored entry) once it has been converted. */
void ckpt_torch_release(const ckpt_torch_file *f, size_t i);
/* Non-tensor numbers of the checkpoint (checkpoint_version, iteration, ...). */
size_t ckpt_torch_scalar_count(const ckpt_torch_file *f);
const ckpt_pickle_scalar *ckpt_torch_scalar(const ckpt_torch_file *f, size_t i);
/* The scalar called name, or false. */
bool ckpt_torch_find_scalar(const ckpt_torch_file *f, const char *name, double *value);

#endif
