/* The tokenized cache: a program's tokenized sets saved once, on disk, and loaded by every later
 * run with the same inputs, tokenizer and tokenizing options (HF datasets' map cache), so a
 * second run starts training at once.
 *
 * An entry is one file, DIR/<key>.tzds, named by a 128-bit key over everything that changes the
 * tokens: a kind string (the program and format), the input files (size, mtime and content), the
 * tokenizer's files, and the options (max length, prefix, lowercasing, pair template...). Any
 * change gives another key, so another entry; entries are never updated in place.
 *
 * The file (format 3, data_cache_format.c): the magic "TZDSET\0\1" and the version (16 bytes);
 * per set its arrays (ids, then row offsets, lengths, len_a, labels, and targets of any width
 * per row: regression, multi-label), each set 8-byte
 * aligned; a table of the sets' counts; and a 48-byte trailer (set count, payload size, payload
 * CRC-32 and Adler-32, the key, "TZDS-END"), little-endian. Everything is appended in order, so a corpus is
 * streamed to disk as it is tokenized (data_cache_load_or_stream), and a loaded entry is mapped
 * read-only: the sets point into the mapping (data_backing), so a corpus larger than RAM trains
 * with flat memory. A file that is truncated, fails its checksums or does not parse is reported
 * in one warning line and rebuilt, never trusted. It is written through rt_atomic (exclusive
 * temp file, fsync, rename), and builders of one key take DIR/<key>.lock (flock) first, so
 * concurrent runs (the ranks of a node, or two programs) build an entry once and the others
 * load it. */
#ifndef DATA_CACHE_H
#define DATA_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "data/data_dataset.h"

/* Part of every key: bump it when a change to the tokenizers or the dataset code changes the
 * tokens a run makes, so that no run reads tokens an older build made. */
#define DATA_CACHE_TOKENS_REVISION 1

typedef struct {
    uint64_t h[2]; /* two FNV-1a-64 streams with different offsets */
} data_cache_key;

void data_cache_key_init(data_cache_key *k, const char *kind);
void data_cache_key_bytes(data_cache_key *k, const void *bytes, size_t n);
void data_cache_key_str(data_cache_key *k, const char *s); /* NULL hashes differently from "" */
void data_cache_key_int(data_cache_key *k, int64_t v);
/* The file's size, mtime and content (CRC-32 and Adler-32 over every byte). RT_ERR_IO naming it
 * when it cannot be read. */
rt_status data_cache_key_file(data_cache_key *k, const char *path);
/* A tokenizer: the file itself, or in a folder the tokenizer files it may hold (tokenizer.json,
 * vocab.txt, vocab.json, merges.txt, spiece.model, sentencepiece.bpe.model, the tokenizer and
 * special-token configs, added_tokens.json), never the weights. */
rt_status data_cache_key_tokenizer(data_cache_key *k, const char *path);

/* The default folder: $XDG_CACHE_HOME/tunezoo, else $HOME/.cache/tunezoo; NULL when neither is
 * set. The returned string is static. */
const char *data_cache_default_dir(void);

/* Fills sets[0 .. n_sets) from the entry for key in dir, or calls build (which fills them in
 * memory) and saves them as that entry. dir NULL means no cache: build only. The log says
 * "cache hit: PATH" or "tokenized N rows in X s (cached as PATH)", N counting the rows of every
 * stride-th set (1: all; 2 for source/target pairs); what names the data in messages. A cache
 * that cannot be written (read-only folder, full disk) is a warning and the run goes on. The
 * sets share the mapped entry (data_tokenized_free releases it); their arrays are read-only. */
typedef rt_status (*data_cache_build_fn)(void *ctx, data_tokenized *sets, int n_sets);
rt_status data_cache_load_or_build(const char *dir, const data_cache_key *key, const char *what, int n_sets, int stride,
                                   data_cache_build_fn build, void *ctx, data_tokenized *sets);

/* The same for data too large to build in memory: stream writes the sets in order through w,
 * each as ids (data_cache_write_ids, any number of calls) then its rows (data_cache_end_set),
 * straight into the entry's file; the sets then come from the mapped file. Without dir, or when
 * the entry cannot be written, the stream runs again into memory. */
typedef struct data_cache_writer data_cache_writer;
typedef rt_status (*data_cache_stream_fn)(void *ctx, data_cache_writer *w, int n_sets);
rt_status data_cache_load_or_stream(const char *dir, const data_cache_key *key, const char *what, int n_sets,
                                    int stride, data_cache_stream_fn stream, void *ctx, data_tokenized *sets);
/* Appends ids to the set being written. */
rt_status data_cache_write_ids(data_cache_writer *w, const int32_t *ids, size_t n);
/* Ends the set being written: rows gives its rows over exactly the ids written since the last
 * set ended (rows->ids is not read; offsets may start past 0, as a slice's do). */
rt_status data_cache_end_set(data_cache_writer *w, const data_tokenized *rows);
/* A whole set in memory: its ids, then its rows. */
rt_status data_cache_write_set(data_cache_writer *w, const data_tokenized *d);

/* The file format alone, for tests and the fuzz target: serialize into a malloc'd buffer, and
 * parse bytes (name in messages; 8-byte aligned) into n_sets sets that point into bytes, which
 * must outlive them; RT_ERR_FORMAT naming the problem for anything malformed. */
rt_status data_cache_serialize(const data_cache_key *key, const data_tokenized *sets, int n_sets, void **bytes,
                               size_t *len);
rt_status data_cache_parse(const char *name, const void *bytes, size_t len, const data_cache_key *key, int n_sets,
                           data_tokenized *sets);

#endif
