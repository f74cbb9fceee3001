/* Seq2seq data for t5-finetune: two line-aligned UTF-8 files (line i of the source pairs
 * with line i of the target), tokenized as HF's run_translation / run_summarization scripts
 * do: optional lower-casing, the source prefix ("translate English to German: ") before
 * each source, each side truncated to its max length with the tokenizer's end token (`</s>`)
 * kept last. The result is two data_tokenized sets whose rows pair up, which
 * data_loader_init_seq2seq batches with dynamic padding on both sides. */
#ifndef DATA_SEQ2SEQ_H
#define DATA_SEQ2SEQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "data/data_dataset.h"
#include "data/data_table.h"
#include "runtime/base/rt_status.h"
#include "tokenizers/tok.h"

/* The lines of a text file, split in place in one buffer. A UTF-8 BOM is skipped, lines end
 * at '\n' with an optional '\r' before it, and a final newline does not start a line. */
typedef struct {
    char *path;  /* as given, for messages (owned) */
    char *buf;   /* the bytes (owned) */
    char **line; /* (n) NUL-terminated lines into buf */
    size_t n;
    size_t first_line; /* line[0]'s number in the file (1 but from data_lines_reader) */
} data_lines;

/* One text column of a user's table (t5-finetune's --train-file) as lines: the lines point into t,
 * which must outlive them (buf stays NULL). RT_ERR_USAGE naming the table's columns and option
 * when there is no such column; RT_ERR_FORMAT naming file:line and the column for a cell that is
 * missing, empty, or not text. */
rt_status data_lines_from_column(const data_table *t, const char *column, const char *option, data_lines *out);
/* Reads path. An empty file (no lines) and invalid UTF-8 are RT_ERR_FORMAT naming
 * path:line and the byte column. */
rt_status data_lines_read(const char *path, data_lines *out);
/* The same over bytes in memory (copied); name stands in for the path in messages. */
rt_status data_lines_parse(const char *name, const char *bytes, size_t len, data_lines *out);
void data_lines_free(data_lines *l);

/* A text file read in pieces of whole lines, so that a corpus larger than memory can be
 * tokenized as it streams by. Each piece is parsed as data_lines_read parses a file (the BOM
 * skipped at the start only; messages number lines from the file's first). */
typedef struct {
    FILE *f;
    char *path;
    char *carry; /* bytes read past the last whole line */
    size_t carry_len, carry_cap, next_line;
    bool eof;
} data_lines_reader;

rt_status data_lines_reader_open(const char *path, data_lines_reader *r);
/* The next piece: whole lines of about `chunk` bytes (a longer line comes whole). *end, with out
 * empty, after the last piece. A file with no lines at all is RT_ERR_FORMAT, as for
 * data_lines_read. */
rt_status data_lines_reader_next(data_lines_reader *r, size_t chunk, data_lines *out, bool *end);
void data_lines_reader_close(data_lines_reader *r);

/* Reads both files and checks they have the same number of lines (the error names both
 * files and both counts). */
rt_status data_lines_read_pair(const char *src_path, const char *tgt_path, data_lines *src, data_lines *tgt);

typedef struct {
    const char *source_prefix; /* prepended to every source line; NULL or "" for none */
    bool lowercase;            /* lower-case both sides first (Unicode, as Python's str.lower) */
    int max_source_len;        /* tokens, the end token included */
    int max_target_len;
} data_seq2seq_opts;

/* Tokenizes lines [begin, end) of both files (OpenMP over lines). Each side becomes
 * tok_encode(text)[:max_len - 1] + [eos]; a tokenizer without an end token gets none.
 * n_truncated counts the rows that lost tokens on each side. */
rt_status data_seq2seq_tokenize(const data_lines *src, const data_lines *tgt, size_t begin, size_t end,
                                const tok_tokenizer *tok, const data_seq2seq_opts *o, data_tokenized *src_out,
                                data_tokenized *tgt_out);

/* One text as the source side is built: prefix + (lower-cased) text, encoded, truncated, eos
 * appended. Used for prediction input too. */
rt_status data_seq2seq_encode(const tok_tokenizer *tok, const char *prefix, bool lowercase, const char *text,
                              int max_len, tok_ids *out, bool *truncated);

#endif
