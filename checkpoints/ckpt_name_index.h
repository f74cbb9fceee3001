/* A name -> entry lookup for the files we read (safetensors, .tzck): the entries' names sorted
 * once at open, binary search after. Building it also finds duplicate names, which a file
 * must not have. It keeps pointers to the names, which must outlive it. */
#ifndef CKPT_NAME_INDEX_H
#define CKPT_NAME_INDEX_H

#include <stddef.h>

typedef struct {
    const char *name;
    size_t entry;
} ckpt_name_slot;

typedef struct {
    ckpt_name_slot *slots; /* (n) sorted by name */
    size_t n;
} ckpt_name_index;

/* Indexes n entries of `stride` bytes each, whose `const char *` name sits at byte
 * `name_offset` (offsetof(entry, name)). Returns NULL, or the first name that appears twice. */
const char *ckpt_name_index_build(ckpt_name_index *ix, const void *entries, size_t stride, size_t name_offset,
                                  size_t n);
/* The entry named `name`, or -1. */
long ckpt_name_index_find(const ckpt_name_index *ix, const char *name);
void ckpt_name_index_free(ckpt_name_index *ix);

#endif
