/* A pickle reader for PyTorch state dicts that never runs code.
 *
 * torch.save pickles a dict of tensors; loading it with Python's pickle calls whatever
 * GLOBAL the file names, which is how a hostile .bin runs code. This reader interprets the
 * opcodes that state dicts use (protocol 2 as torch writes it, plus the protocol 4 forms of
 * the same things) on its own small value stack, and the only callables it knows are
 * collections.OrderedDict, torch._utils._rebuild_tensor(_v2) and _rebuild_parameter(_with_state),
 * the torch.*Storage type tags of persistent ids, and argparse.Namespace (Megatron's 'args', read as
 * a dict of its fields); torch dtype names (torch.float32) are inert values. Any other GLOBAL is refused at once, with
 * its module.name in the message, before anything could call it.
 *
 * The result is flat: nested dicts (FlagAI's {'module': sd}, Megatron's {'model':
 * {'language_model': ...}, 'checkpoint_version': 3.0}) become '.'-joined names. Tensors carry
 * their storage key (the zip entry <archive>/data/<key>) and element offset; they must be
 * contiguous (torch.save of a state dict always is), else RT_ERR_UNSUPPORTED. Numbers and
 * booleans become scalars; strings, lists, tuples and None are skipped. */
#ifndef CKPT_PICKLE_H
#define CKPT_PICKLE_H

#include <stddef.h>

#include "checkpoints/ckpt_safetensors.h" /* CKPT_MAX_DIMS */
#include "runtime/base/rt_dtype.h"
#include "runtime/base/rt_status.h"

typedef struct {
    char *name;
    rt_dtype dtype;
    int ndim;
    size_t shape[CKPT_MAX_DIMS];
    size_t numel;
    char *storage_key;     /* persistent id key: the zip entry <archive>/data/<key> */
    size_t storage_numel;  /* elements the storage holds, as the file declares */
    size_t storage_offset; /* in elements */
} ckpt_pickle_tensor;

typedef struct {
    char *name;
    double value; /* ints and bools as well (checkpoint_version, iteration) */
} ckpt_pickle_scalar;

typedef struct {
    ckpt_pickle_tensor *tensors;
    size_t n_tensors;
    ckpt_pickle_scalar *scalars;
    size_t n_scalars;
} ckpt_pickle_state;

/* Interprets a state-dict pickle of `size` bytes. `what` names it in messages ("x.bin:
 * archive/data.pkl"). On failure *out is empty. */
rt_status ckpt_pickle_read(const void *data, size_t size, const char *what, ckpt_pickle_state *out);
void ckpt_pickle_state_free(ckpt_pickle_state *s); /* accepts NULL */

#endif
