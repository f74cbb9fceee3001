/* A user's data file as a table of named columns, whatever its format (issue 35): CSV and TSV as
 * RFC 4180 writes them (data_csv.h: a header row names the columns), JSON Lines (one object per
 * line) and a JSON array of objects. The format comes from the extension (.csv, .tsv, .jsonl,
 * .json; .txt is not guessed) or is given. Each cell keeps its text and, from JSON, its kind, so
 * that a label column of numbers tells regression from classes.
 *
 * JSON records: the columns are the keys in order of first appearance over the file, so a record
 * may leave a key out; its cell is then absent (NULL), as is a JSON null. A number's text is the
 * shortest that reads back to the same double ("3", "0.25"); true and false read "true" and
 * "false"; an array or an object keeps its compact JSON text (kind LIST or OBJECT). Every string
 * is valid UTF-8 (checked before parsing) and has no NUL (a \u0000 escape is an error naming the
 * record and the key), so text columns go to the tokenizers as they are. */
#ifndef DATA_TABLE_H
#define DATA_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "data/data_tsv.h"
#include "runtime/base/rt_status.h"

typedef enum { DATA_FORMAT_AUTO, DATA_FORMAT_CSV, DATA_FORMAT_TSV, DATA_FORMAT_JSONL, DATA_FORMAT_JSON } data_format;

/* What a cell was written as. CSV and TSV cells are all text. */
typedef enum { DATA_CELL_TEXT, DATA_CELL_NUMBER, DATA_CELL_BOOL, DATA_CELL_LIST, DATA_CELL_OBJECT } data_cell_kind;

typedef struct {
    char *path;         /* as given, for messages (owned) */
    data_format format; /* never AUTO */
    int n_cols;
    char **col_names; /* (n_cols) */
    size_t n_rows;
    const char **cells; /* (n_rows * n_cols) row-major; NULL: absent (a key a record lacks, or null) */
    uint8_t *kinds;     /* (n_rows * n_cols) data_cell_kind; NULL: every cell is text */
    size_t *row_line;   /* (n_rows) the 1-based line a row starts on (a JSON array's record too) */
    /* storage */
    data_tsv csv;   /* CSV/TSV: the parsed file, which the cells and names point into */
    char **strings; /* JSON: owned copies the cells and names point into */
    size_t n_strings, cap_strings;
} data_table;

/* The format for path: fmt unless AUTO, else from the extension; RT_ERR_USAGE naming the file and
 * what to pass (--data-format) when the extension says nothing. */
rt_status data_format_of(const char *path, data_format fmt, data_format *out);
/* "csv", "tsv", "jsonl", "json". */
const char *data_format_name(data_format fmt);
/* Parses "auto", "csv", "tsv", "jsonl" or "json"; -1 for anything else. */
int data_format_parse(const char *name);

/* Reads path in fmt (AUTO: from the extension). RT_ERR_IO for a file that cannot be read,
 * RT_ERR_FORMAT naming path:line (and the column or key) for what does not parse. */
rt_status data_table_read(const char *path, data_format fmt, data_table *out);
/* The same over bytes in memory (copied); fmt must not be AUTO; name stands in for the path. */
rt_status data_table_parse(const char *name, data_format fmt, const char *bytes, size_t len, data_table *out);
/* A piece of a JSON Lines file read in pieces: buf (len bytes and a spare one, taken over and
 * freed on every path) holds whole lines, the first of which is line first_line of the file, as
 * the rows' lines and the messages say. */
rt_status data_table_parse_jsonl_piece(const char *name, char *buf, size_t len, size_t first_line, data_table *out);
void data_table_free(data_table *t);

/* The column's index, or -1. */
int data_table_col(const data_table *t, const char *name);
static inline const char *data_table_cell(const data_table *t, size_t row, int col) {
    return t->cells[row * (size_t)t->n_cols + (size_t)col];
}
static inline data_cell_kind data_table_kind(const data_table *t, size_t row, int col) {
    return t->kinds ? (data_cell_kind)t->kinds[row * (size_t)t->n_cols + (size_t)col] : DATA_CELL_TEXT;
}
/* "FILE:LINE", or "FILE: record N" for a JSON array's row, for messages. */
void data_table_where(const data_table *t, size_t row, char *buf, size_t cap);
/* "a, b, c": the column names (as many as fit), for messages. */
void data_table_columns(const data_table *t, char *buf, size_t cap);
/* RT_ERR_USAGE: "FILE: no column 'NAME' (its columns: ...); name the column with OPTION". */
rt_status data_table_missing_column(const data_table *t, const char *name, const char *option);
/* A text cell: present, not empty, and text (or a number's text); else RT_ERR_FORMAT naming
 * FILE:LINE and the column. */
rt_status data_table_text(const data_table *t, size_t row, int col, const char **out);
/* "text", "a number", "true/false", "a list", "an object", for messages. */
const char *data_cell_kind_name(data_cell_kind kind);

#endif
