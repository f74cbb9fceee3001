/* JSON files (config.json, tokenizer_config.json, checkpoint metadata) through cJSON, with
 * errors that name the file, the line and column of a syntax error, and the field and the
 * type expected when a value is missing or has the wrong type. Every reader of a config goes
 * through these so that all of them fail the same way:
 *
 *     config.json: field 'n_embd' is missing (expected an integer)
 *     config.json: field 'n_embd' is 1000000000, more than the limit 65536
 *     config.json:3:14: invalid JSON near '}'
 */
#ifndef RT_JSON_H
#define RT_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "runtime/base/rt_status.h"

/* Reads and parses a whole file. The caller frees *out with cJSON_Delete. A missing or
 * unreadable file is RT_ERR_IO; a syntax error is RT_ERR_FORMAT "path:line:col: ...". */
rt_status rt_json_load(const char *path, cJSON **out);
/* Parses len bytes of text (no NUL needed); name_for_errors labels the messages. Anything
 * but whitespace after the value is an error. */
rt_status rt_json_parse(const char *text, size_t len, const char *name_for_errors, cJSON **out);

/* Typed getters on an object. A missing key, or a JSON null, gives def when !required and
 * RT_ERR_CONFIG when required; a value of the wrong type is always RT_ERR_CONFIG. An integer
 * must be a whole number within int range (2.0 is accepted, 2.5 is not). A string result
 * points into obj and lives as long as it. */
rt_status rt_json_get_int(const cJSON *obj, const char *path_for_errors, const char *key, int *out, bool required,
                          int def);
/* An integer in [min, max] (a size from a config). A value outside, even one past int range,
 * gets one line naming the file, the field and the bound it broke:
 *
 *     config.json: field 'n_embd' is 1000000000, more than the limit 65536
 *
 * def is not checked: the caller's default is trusted. */
rt_status rt_json_get_int_range(const cJSON *obj, const char *path_for_errors, const char *key, int *out, bool required,
                                int def, int min, int max);
rt_status rt_json_get_double(const cJSON *obj, const char *path_for_errors, const char *key, double *out, bool required,
                             double def);
/* A number stored as float (config hyperparameters: dropout rates, epsilons). */
rt_status rt_json_get_float(const cJSON *obj, const char *path_for_errors, const char *key, float *out, bool required,
                            double def);
rt_status rt_json_get_string(const cJSON *obj, const char *path_for_errors, const char *key, const char **out,
                             bool required, const char *def);
rt_status rt_json_get_bool(const cJSON *obj, const char *path_for_errors, const char *key, bool *out, bool required,
                           bool def);

/* Adds key: v to obj written as the shortest decimal that parses back to v exactly (cJSON's own
 * writer takes any double within a rounding unit for equal, so 0.9999999999999999 came back as 1);
 * null for a value that is not finite, as cJSON writes it. The item, or NULL out of memory. */
cJSON *rt_json_add_number(cJSON *obj, const char *key, double v);

/* "an object", "a string", "null", ... for messages. */
const char *rt_json_type_name(const cJSON *item);

#endif
