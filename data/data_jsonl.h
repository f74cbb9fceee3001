/* JSON Lines (one JSON object per line), as SuperGLUE ships its tasks and as users export
 * records: the bytes are split into lines, each line is checked for UTF-8 (and a NUL) and parsed
 * on its own with cJSON, and the object goes to a callback with "name:line" for its messages. A
 * BOM is skipped and CRLF accepted; blank lines are fine only at the end of the file. Errors name
 * name:line[:column]: a line that is not JSON, a value that is not an object, no record at all. */
#ifndef DATA_JSONL_H
#define DATA_JSONL_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "runtime/base/rt_status.h"

/* One record: obj is the line's object (freed after the call); where is "name:line". */
typedef rt_status (*data_jsonl_record_fn)(void *ctx, const cJSON *obj, const char *where, size_t line);

/* Calls record for every line of buf[0..len) in order; stops at the first error it or the
 * parser gives. buf's first line is line first_line of the file (1: the whole file, whose BOM is
 * skipped; more: a piece of a file read in pieces). */
rt_status data_jsonl_each(const char *name, const char *buf, size_t len, size_t first_line, data_jsonl_record_fn record,
                          void *ctx);

/* Parses s[0..len) (the line or file named by where) as JSON, refusing a NUL and invalid UTF-8
 * first, since cJSON copies such bytes into strings untouched. A syntax error says
 * "where:col: ..." for a one-line text, "where:line:col: ..." otherwise (RT_ERR_FORMAT). */
rt_status data_json_parse_text(const char *name, size_t line, const char *s, size_t len, cJSON **out);

#endif
