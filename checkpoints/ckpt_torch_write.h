/* Writing PyTorch checkpoints (the zip format torch.save has used since 1.6) for tools that
 * only load pytorch_model.bin, e.g. FlagAI, which expects {'module': state_dict}.
 *
 * The file is a zip of stored entries: <archive>/data/<k> holds tensor k's bytes (little
 * endian), <archive>/data.pkl a protocol-2 pickle of {wrap: OrderedDict(name: tensor)} (or the
 * OrderedDict itself) built from torch._utils._rebuild_tensor_v2 and the torch.<T>Storage tags,
 * <archive>/version "3" and <archive>/byteorder "little". ZIP64 records are written when a size
 * or offset needs them. Tensors stream to disk as they are added; the pickle and the directory
 * come last, and the file is renamed into place only when complete (rt_atomic). torch.load
 * and tunezoo's own reader (ckpt_torch.h) read it. */
#ifndef CKPT_TORCH_WRITE_H
#define CKPT_TORCH_WRITE_H

#include <stddef.h>

#include "runtime/base/rt_dtype.h"
#include "runtime/base/rt_status.h"

typedef struct ckpt_torch_writer ckpt_torch_writer;

/* wrap: the key of the one-entry dict around the state dict ("module" for FlagAI), or NULL. */
rt_status ckpt_torch_writer_begin(const char *path, const char *wrap, ckpt_torch_writer **out);
/* A contiguous tensor of numel(shape) elements of dtype (F32, F16, BF16) at data. */
rt_status ckpt_torch_writer_add(ckpt_torch_writer *w, const char *name, rt_dtype dtype, int ndim, const size_t *shape,
                                const void *data);
/* Writes the pickle and the directory and renames the file into place. Frees w. */
rt_status ckpt_torch_writer_commit(ckpt_torch_writer *w);
void ckpt_torch_writer_abort(ckpt_torch_writer *w); /* accepts NULL */

#endif
