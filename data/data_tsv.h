/* A reader for GLUE-style TSV files: the whole file is read into one buffer and split in
 * place, so every field is a NUL-terminated pointer into that buffer and nothing else is
 * allocated per field. GLUE (and HF `datasets`) read these files with no quote handling
 * (csv.QUOTE_NONE): MRPC sentences contain bare `"` characters, so a quote is ordinary text
 * here. A UTF-8 BOM is skipped, lines end at '\n' with an optional '\r' before it, fields
 * are split on '\t'. Errors name path:line and what was expected. Every line must be valid
 * UTF-8: a bad byte is RT_ERR_FORMAT "path:line: invalid UTF-8 at byte N of the line", as
 * t5-finetune says it, rather than text each tokenizer would mangle its own way. */
#ifndef DATA_TSV_H
#define DATA_TSV_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/base/rt_status.h"

typedef struct {
    char *path;        /* as given, for error messages (owned) */
    char *buf;         /* the file's bytes, split in place (owned) */
    char **fields;     /* (n_fields) all fields of all rows, row-major */
    size_t *row_start; /* (n_rows + 1) index of each row's first field in fields */
    size_t *row_line;  /* (n_rows) 1-based line number in the file, for messages */
    size_t n_rows;     /* data rows, the header excluded */
    char **header;     /* (n_header) header fields, NULL when the file has none */
    int n_header;
} data_tsv;

/* Reads path. has_header: the first line names the columns and is not a row. min_cols:
 * every row (and the header) must have at least this many fields; extra fields are kept.
 * A blank line at the end of the file is ignored; one in the middle is an error. */
rt_status data_tsv_read(const char *path, bool has_header, int min_cols, data_tsv *out);
/* The same over bytes already in memory (copied); name stands in for the path in messages.
 * The fuzz target and the tests use this. */
rt_status data_tsv_parse(const char *name, const char *bytes, size_t len, bool has_header, int min_cols, data_tsv *out);
void data_tsv_free(data_tsv *t);

static inline int data_tsv_ncols(const data_tsv *t, size_t row) {
    return (int)(t->row_start[row + 1] - t->row_start[row]);
}
/* The field, or NULL when row has fewer than col + 1 fields. */
static inline const char *data_tsv_field(const data_tsv *t, size_t row, int col) {
    if (col < 0 || col >= data_tsv_ncols(t, row)) return NULL;
    return t->fields[t->row_start[row] + (size_t)col];
}

#endif
