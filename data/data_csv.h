/* A reader for delimited text as RFC 4180 writes it and spreadsheets export it (issue 35's
 * bring-your-own files): a header row naming the columns, fields separated by a delimiter (',' for
 * CSV, '\t' for a quoted TSV), and a field in double quotes may hold the delimiter, a newline, or
 * a quote written twice (""). A UTF-8 BOM is skipped, records end at '\n' or "\r\n" outside quotes,
 * and blank lines are skipped, as Python's csv module does. The table is data_tsv's: one buffer,
 * fields unquoted in place, each NUL-terminated. Errors name path:line (the line where the record
 * starts, or where the problem is) and the column:
 *   - invalid UTF-8, a NUL byte;
 *   - a quoted field never closed; text between a closing quote and the next delimiter;
 *   - a record with more or fewer fields than the header. */
#ifndef DATA_CSV_H
#define DATA_CSV_H

#include "data/data_tsv.h"

/* Reads path (delim ',' or '\t'); the first record is the header. */
rt_status data_csv_read(const char *path, char delim, data_tsv *out);
/* The same over a buffer of len bytes with room for one more, which the table takes over (freed
 * with it, or at once on an error). */
rt_status data_csv_take(const char *name, char *buf, size_t len, char delim, data_tsv *out);
/* The same over bytes in memory (copied); name stands in for the path in messages. */
rt_status data_csv_parse(const char *name, const char *bytes, size_t len, char delim, data_tsv *out);

#endif
