/* Table-driven command-line options shared by every program.
 *
 * A program lists its options once (name, type, destination, default, help); the parser
 * accepts `--lr 3e-5` and `--lr=3e-5`, a JSON `--config FILE` whose keys are option names
 * (`-` and `_` interchangeable) and which the command line overrides, and prints the
 * generated `--help`. An unknown option or a bad value is a usage error (exit 2) that
 * names the closest known option. */
#ifndef RT_ARGS_H
#define RT_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/base/rt_status.h"

typedef enum {
    RT_OPT_INT,    /* dest: int64_t* */
    RT_OPT_FLOAT,  /* dest: double* */
    RT_OPT_STRING, /* dest: const char** (points into argv, the config or the default) */
    RT_OPT_CHOICE, /* dest: const char**; value must be one of `choices` ("a|b|c") */
    RT_OPT_FLAG    /* dest: bool*; `--flag`, `--flag=false`, JSON true/false */
} rt_opt_type;

typedef struct {
    const char *name; /* without the leading "--" */
    rt_opt_type type;
    void *dest;
    const char *defval;  /* default as text; NULL = none (STRING: NULL pointer) */
    const char *metavar; /* shown in --help, e.g. "DIR"; NULL = from the type */
    const char *help;
    const char *choices; /* RT_OPT_CHOICE only */
    double min, max;     /* numeric range, checked when min < max */
} rt_opt;

typedef struct rt_args_spec {
    const char *prog;       /* program name for messages */
    const char *positional; /* e.g. "train.src train.tgt"; NULL = none accepted */
    int min_positional, max_positional;
    const char *summary; /* one paragraph printed by --help */
    const char *epilog;  /* examples printed after the options; may be NULL */
    const rt_opt *opts;
    int n_opts;
    /* An option whose value names a file of presets in another tool's format (a DeepSpeed JSON),
     * read by apply_preset before --config and the command line, which override it; it sets
     * options with rt_args_set_from(..., RT_ARG_PRESET). NULL: none. */
    const char *preset_option;
    rt_status (*apply_preset)(const struct rt_args_spec *spec, const char *path);
} rt_args_spec;

/* Parses argv. Positional arguments are returned through pos (pointers into argv; the caller
 * gives room for max_positional). Returns RT_HELP_SHOWN after printing --help, RT_ERR_USAGE
 * (message includes the usage line) for command-line mistakes, RT_ERR_CONFIG/IO for a bad
 * --config file. */
rt_status rt_args_parse(const rt_args_spec *spec, int argc, char **argv, const char **pos, int *n_pos);

/* Where an option's value came from, for options whose meaning depends on it (a DeepSpeed
 * micro-batch is per rank; tunezoo's --batch-size is global). */
typedef enum { RT_ARG_DEFAULT = 0, RT_ARG_PRESET, RT_ARG_CONFIG, RT_ARG_COMMAND_LINE } rt_arg_source;
rt_arg_source rt_args_source_of(const rt_args_spec *spec, const char *name);
/* Sets option `name` from text as a config file would (RT_ERR_CONFIG naming `where` on a bad
 * value); RT_ERR_UNSUPPORTED when the program has no such option. */
rt_status rt_args_set_from(const rt_args_spec *spec, const char *name, const char *value, const char *where,
                           rt_arg_source source);

/* Reads a file holding one JSON object (for --config and --deepspeed-config); errors name
 * the option, the file and the line. The caller frees *out with cJSON_Delete. */
struct cJSON;
rt_status rt_args_read_json_object(const char *path, const char *option, struct cJSON **out);

/* Writes the resolved options as a JSON object (for checkpoints and metrics); malloc'd. */
char *rt_args_to_json(const rt_args_spec *spec);

/* Prints the generated help to stdout. */
void rt_args_print_help(const rt_args_spec *spec);

/* The known option name closest to `name` (edit distance), or NULL when none is close. */
const char *rt_args_closest(const rt_args_spec *spec, const char *name);

#endif
