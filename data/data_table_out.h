/* A table's rows written back with columns added, in the table's own format, as a program writes
 * its predictions beside a user's input (issue 35): CSV or TSV fields as Python's csv module
 * quotes them (QUOTE_MINIMAL: quotes around a field holding the delimiter, a quote or a line
 * break, with its quotes doubled), JSON Lines objects (a JSON array's records come out as JSON
 * Lines) in which each input cell keeps its kind and a record's left-out keys stay out. An input
 * column with the name of an added one is left out, with a warning. The file is written whole or
 * not at all (rt_atomic). */
#ifndef DATA_TABLE_OUT_H
#define DATA_TABLE_OUT_H

#include "data/data_table.h"

/* The format rows of t are written in: t's, but JSON Lines for a JSON array. */
data_format data_table_out_format(const data_table *t);

/* Added cell k (0 .. n_added) of row: its text, and *kind (TEXT: a JSON string; NUMBER: written
 * bare in JSON). May return scratch (64 bytes) filled, or storage of its own. */
typedef const char *(*data_added_cell_fn)(void *ctx, size_t row, int k, char *scratch, data_cell_kind *kind);

rt_status data_table_write_rows(const data_table *t, const char *path, int n_added, const char *const *added_names,
                                data_added_cell_fn cell, void *ctx);

#endif
