/* Option parsing for every program (see rt_args.h). Order of precedence: defaults, then the
 * --config JSON file, then the command line. */
#include "runtime/base/rt_args.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_fs.h"

/* Strings taken from a --config file outlive the parse; they are freed at exit. */
static char **rt_args_owned = NULL;
static size_t rt_args_n_owned = 0;

static void rt_args_free_owned(void) {
    for (size_t i = 0; i < rt_args_n_owned; i++) free(rt_args_owned[i]);
    free(rt_args_owned);
    rt_args_owned = NULL;
    rt_args_n_owned = 0;
}

static const char *rt_args_keep(const char *s) {
    if (rt_args_n_owned == 0) atexit(rt_args_free_owned);
    rt_args_owned = rt_xrealloc(rt_args_owned, (rt_args_n_owned + 1) * sizeof *rt_args_owned);
    rt_args_owned[rt_args_n_owned] = rt_xstrdup(s);
    return rt_args_owned[rt_args_n_owned++];
}

/* Option names compare with '-' and '_' as the same character. */
static int rt_args_name_eq(const char *a, const char *b, size_t blen) {
    size_t i = 0;
    for (; i < blen && a[i]; i++) {
        char x = a[i] == '_' ? '-' : a[i], y = b[i] == '_' ? '-' : b[i];
        if (x != y) return 0;
    }
    return i == blen && a[i] == '\0';
}

static const rt_opt *rt_args_find(const rt_args_spec *spec, const char *name, size_t len) {
    for (int i = 0; i < spec->n_opts; i++)
        if (rt_args_name_eq(spec->opts[i].name, name, len)) return &spec->opts[i];
    return NULL;
}

static size_t rt_args_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 99;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t prev = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cur = row[j];
            size_t sub = prev + (a[i - 1] != b[j - 1]);
            size_t best = row[j] + 1 < row[j - 1] + 1 ? row[j] + 1 : row[j - 1] + 1;
            row[j] = sub < best ? sub : best;
            prev = cur;
        }
    }
    return row[lb];
}

const char *rt_args_closest(const rt_args_spec *spec, const char *name) {
    const char *best = NULL;
    size_t best_d = 99;
    for (int i = 0; i < spec->n_opts; i++) {
        size_t d = rt_args_edit_distance(name, spec->opts[i].name);
        /* a prefix match ("--epoch" for "--epochs") is also a good guess */
        if (strncmp(spec->opts[i].name, name, strlen(name)) == 0 && strlen(name) >= 3) d = d < 2 ? d : 2;
        if (d < best_d) {
            best_d = d;
            best = spec->opts[i].name;
        }
    }
    size_t limit = strlen(name) / 2 + 1;
    return best_d <= (limit > 3 ? 3 : limit) ? best : NULL;
}

static void rt_args_usage_line(const rt_args_spec *spec, char *buf, size_t n) {
    snprintf(buf, n, "usage: %s [options]%s%s (see --help)", spec->prog, spec->positional ? " " : "",
             spec->positional ? spec->positional : "");
}

static rt_status rt_args_usage_error(const rt_args_spec *spec, const char *fmt, const char *a, const char *b) {
    char usage[512], what[512];
    rt_args_usage_line(spec, usage, sizeof usage);
    snprintf(what, sizeof what, fmt, a, b ? b : "");
    /* one line, as every error: rt_status_exit_code prints a newline in a message as \x0a */
    return rt_errorf(RT_ERR_USAGE, "%s; %s", what, usage);
}

static int rt_args_choice_ok(const char *choices, const char *v) {
    size_t vl = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == vl && strncmp(p, v, l) == 0) return 1;
        /* a choice ending in ":N" accepts any non-negative integer there ("cuda:N") */
        if (l >= 2 && p[l - 1] == 'N' && p[l - 2] == ':' && vl > l - 1 && strncmp(p, v, l - 1) == 0) {
            const char *d = v + l - 1;
            while (*d >= '0' && *d <= '9') d++;
            if (*d == '\0') return 1;
        }
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

/* Sets one option from text. `where` names the source for messages ("--lr", "cfg.json: lr"). */
static rt_status rt_args_set(const rt_args_spec *spec, const rt_opt *o, const char *value, const char *where,
                             rt_status err_code) {
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case RT_OPT_INT: {
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end != '\0')
            return err_code == RT_ERR_USAGE
                       ? rt_args_usage_error(spec, "%s: expected an integer, got '%s'", where, value)
                       : rt_errorf(err_code, "%s: expected an integer, got '%s'", where, value);
        if (o->min < o->max && (v < o->min || v > o->max)) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s: %lld is out of range [%.17g, %.17g]", where, v, o->min, o->max);
            return err_code == RT_ERR_USAGE ? rt_args_usage_error(spec, "%s%s", msg, NULL)
                                            : rt_errorf(err_code, "%s", msg);
        }
        *(int64_t *)o->dest = v;
        return RT_OK;
    }
    case RT_OPT_FLOAT: {
        double v = strtod(value, &end);
        if (errno || end == value || *end != '\0' || !isfinite(v))
            return err_code == RT_ERR_USAGE ? rt_args_usage_error(spec, "%s: expected a number, got '%s'", where, value)
                                            : rt_errorf(err_code, "%s: expected a number, got '%s'", where, value);
        if (o->min < o->max && (v < o->min || v > o->max)) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s: %g is out of range [%g, %g]", where, v, o->min, o->max);
            return err_code == RT_ERR_USAGE ? rt_args_usage_error(spec, "%s%s", msg, NULL)
                                            : rt_errorf(err_code, "%s", msg);
        }
        *(double *)o->dest = v;
        return RT_OK;
    }
    case RT_OPT_CHOICE:
        if (!rt_args_choice_ok(o->choices, value)) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s: '%s' is not one of %s", where, value, o->choices);
            return err_code == RT_ERR_USAGE ? rt_args_usage_error(spec, "%s%s", msg, NULL)
                                            : rt_errorf(err_code, "%s", msg);
        }
        *(const char **)o->dest = value;
        return RT_OK;
    case RT_OPT_STRING: *(const char **)o->dest = value; return RT_OK;
    case RT_OPT_FLAG:
        if (strcmp(value, "true") == 0 || strcmp(value, "1") == 0) {
            *(bool *)o->dest = true;
        } else if (strcmp(value, "false") == 0 || strcmp(value, "0") == 0) {
            *(bool *)o->dest = false;
        } else {
            return err_code == RT_ERR_USAGE
                       ? rt_args_usage_error(spec, "%s: expected true or false, got '%s'", where, value)
                       : rt_errorf(err_code, "%s: expected true or false, got '%s'", where, value);
        }
        return RT_OK;
    }
    return RT_OK;
}

#define RT_ARGS_MAX_OPTS 256
static rt_arg_source rt_args_sources[RT_ARGS_MAX_OPTS];

static void rt_args_mark(const rt_args_spec *spec, const rt_opt *o, rt_arg_source src) {
    long i = o - spec->opts;
    if (i >= 0 && i < RT_ARGS_MAX_OPTS) rt_args_sources[i] = src;
}

rt_arg_source rt_args_source_of(const rt_args_spec *spec, const char *name) {
    const rt_opt *o = rt_args_find(spec, name, strlen(name));
    long i = o ? o - spec->opts : -1;
    return i >= 0 && i < RT_ARGS_MAX_OPTS ? rt_args_sources[i] : RT_ARG_DEFAULT;
}

rt_status rt_args_set_from(const rt_args_spec *spec, const char *name, const char *value, const char *where,
                           rt_arg_source source) {
    const rt_opt *o = rt_args_find(spec, name, strlen(name));
    if (!o) return rt_errorf(RT_ERR_UNSUPPORTED, "%s: %s has no option --%s", where, spec->prog, name);
    /* the value must outlive the parse, as argv does */
    rt_status st = rt_args_set(spec, o, rt_args_keep(value), where, RT_ERR_CONFIG);
    if (st == RT_OK) rt_args_mark(spec, o, source);
    return st;
}

rt_status rt_args_read_json_object(const char *path, const char *option, cJSON **out) {
    rt_status st = RT_OK;
    char *text = NULL;
    cJSON *root = NULL;
    *out = NULL;
    size_t n = 0;
    /* a config of options: a few KB; /dev/zero, a FIFO or a huge file is no config */
    st = rt_read_file(path, (size_t)16 << 20, &text, &n);
    if (st != RT_OK) return rt_error_wrap(st, "%s", option);
    /* the NUL counted and required: text after the object is an error, not ignored */
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(text, n + 1, &end, 1);
    if (!root || !cJSON_IsObject(root)) {
        const char *at = cJSON_GetErrorPtr();
        int line = 1;
        if (root == NULL && at && at >= text && at <= text + n)
            for (const char *p = text; p < at; p++) line += *p == '\n';
        cJSON_Delete(root);
        root = NULL;
        RT_FAIL(RT_ERR_CONFIG, "%s:%d: not a valid JSON object, or text follows it", path, line);
    }
    for (const cJSON *a = root->child; a; a = a->next) /* JSON allows a key twice; which one counts is a guess */
        for (const cJSON *b = a->next; b; b = b->next)
            if (a->string && b->string && strcmp(a->string, b->string) == 0)
                RT_FAIL(RT_ERR_CONFIG, "%s: \"%s\" is given twice", path, a->string);
    *out = root;
    root = NULL;
fail:
    cJSON_Delete(root);
    free(text);
    return st;
}

static rt_status rt_args_apply_config(const rt_args_spec *spec, const char *path) {
    rt_status st = RT_OK;
    cJSON *root = NULL;
    RT_TRY(rt_args_read_json_object(path, "--config", &root));
    for (cJSON *it = root->child; it; it = it->next) {
        const rt_opt *o = rt_args_find(spec, it->string, strlen(it->string));
        char where[512];
        snprintf(where, sizeof where, "%s: field '%s'", path, it->string);
        if (!o || strcmp(o->name, "config") == 0) {
            const char *close = rt_args_closest(spec, it->string);
            RT_FAIL(RT_ERR_USAGE, "%s: unknown option '%s'%s%s%s", path, it->string, close ? " (did you mean '" : "",
                    close ? close : "", close ? "'?)" : "");
        }
        char num[64];
        const char *value = NULL;
        if (cJSON_IsString(it)) {
            value = rt_args_keep(it->valuestring);
        } else if (cJSON_IsBool(it)) {
            value = cJSON_IsTrue(it) ? "true" : "false";
        } else if (cJSON_IsNumber(it)) {
            if (o->type == RT_OPT_INT && it->valuedouble == floor(it->valuedouble))
                snprintf(num, sizeof num, "%.0f", it->valuedouble);
            else
                snprintf(num, sizeof num, "%.17g", it->valuedouble);
            value = rt_args_keep(num);
        } else {
            RT_FAIL(RT_ERR_CONFIG, "%s: expected a string, number or boolean", where);
        }
        RT_TRY(rt_args_set(spec, o, value, where, RT_ERR_CONFIG));
        rt_args_mark(spec, o, RT_ARG_CONFIG);
    }
fail:
    cJSON_Delete(root);
    return st;
}

rt_status rt_args_parse(const rt_args_spec *spec, int argc, char **argv, const char **pos, int *n_pos) {
    *n_pos = 0;
    RT_CHECK(spec->n_opts <= RT_ARGS_MAX_OPTS, "%s declares %d options", spec->prog, spec->n_opts);
    memset(rt_args_sources, 0, sizeof rt_args_sources);
    /* defaults */
    for (int i = 0; i < spec->n_opts; i++) {
        const rt_opt *o = &spec->opts[i];
        if (o->type == RT_OPT_FLAG) {
            *(bool *)o->dest = o->defval && strcmp(o->defval, "true") == 0;
        } else if (o->type == RT_OPT_STRING || o->type == RT_OPT_CHOICE) {
            *(const char **)o->dest = o->defval;
        } else if (o->defval) {
            rt_status st = rt_args_set(spec, o, o->defval, o->name, RT_ERR_CONFIG);
            RT_CHECK(st == RT_OK, "bad default for --%s: %s", o->name, rt_error_message());
        }
    }
    /* --help anywhere wins; --config is applied before the other options */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) break;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            rt_args_print_help(spec);
            return RT_HELP_SHOWN;
        }
    }
    /* a presets file comes first: --config and the command line override it */
    if (spec->preset_option && spec->apply_preset) {
        size_t len = strlen(spec->preset_option);
        for (int i = 1; i < argc; i++) {
            if (strcmp(argv[i], "--") == 0) break;
            const char *file = NULL;
            if (strncmp(argv[i], "--", 2) == 0 && strncmp(argv[i] + 2, spec->preset_option, len) == 0) {
                if (argv[i][2 + len] == '\0' && i + 1 < argc) file = argv[i + 1];
                if (argv[i][2 + len] == '=') file = argv[i] + 3 + len;
            }
            if (file) {
                rt_status st = spec->apply_preset(spec, file);
                if (st != RT_OK) return st;
            }
        }
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) break;
        const char *cfg = NULL;
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= argc) return rt_args_usage_error(spec, "--config needs a FILE%s%s", "", NULL);
            cfg = argv[i + 1];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            cfg = argv[i] + 9;
        }
        if (cfg) {
            rt_status st = rt_args_apply_config(spec, cfg);
            if (st != RT_OK) return st;
        }
    }
    bool only_positional = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_positional && strcmp(a, "--") == 0) {
            only_positional = true;
            continue;
        }
        if (only_positional || a[0] != '-' || a[1] == '\0') {
            if (*n_pos >= spec->max_positional) return rt_args_usage_error(spec, "unexpected argument '%s'%s", a, NULL);
            pos[(*n_pos)++] = a;
            continue;
        }
        if (a[1] != '-') return rt_args_usage_error(spec, "unknown option '%s' (options start with --)%s", a, NULL);
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const rt_opt *o = rt_args_find(spec, name, len);
        if (!o && !(len == 6 && strncmp(name, "config", 6) == 0)) {
            char nm[128];
            snprintf(nm, sizeof nm, "%.*s", (int)(len < 100 ? len : 100), name);
            const char *close = rt_args_closest(spec, nm);
            char hint[192] = "";
            if (close) snprintf(hint, sizeof hint, " (did you mean --%s?)", close);
            return rt_args_usage_error(spec, "unknown option '--%s'%s", nm, hint);
        }
        const char *value;
        if (eq) {
            value = eq + 1;
        } else if (o && o->type == RT_OPT_FLAG) {
            value = "true";
        } else {
            if (i + 1 >= argc) return rt_args_usage_error(spec, "option '%s' needs a value%s", a, NULL);
            value = argv[++i];
        }
        if (!o) continue; /* --config: already applied */
        char where[160];
        snprintf(where, sizeof where, "--%s", o->name);
        rt_status st = rt_args_set(spec, o, value, where, RT_ERR_USAGE);
        if (st != RT_OK) return st;
        rt_args_mark(spec, o, RT_ARG_COMMAND_LINE);
    }
    if (*n_pos < spec->min_positional)
        return rt_args_usage_error(spec, "missing argument: expected %s%s", spec->positional ? spec->positional : "",
                                   NULL);
    return RT_OK;
}

static const char *rt_args_metavar(const rt_opt *o) {
    if (o->metavar) return o->metavar;
    switch (o->type) {
    case RT_OPT_INT: return "N";
    case RT_OPT_FLOAT: return "X";
    case RT_OPT_STRING: return "STR";
    case RT_OPT_CHOICE: return o->choices;
    case RT_OPT_FLAG: return "";
    }
    return "";
}

void rt_args_print_help(const rt_args_spec *spec) {
    char usage[512];
    snprintf(usage, sizeof usage, "usage: %s [options]%s%s", spec->prog, spec->positional ? " " : "",
             spec->positional ? spec->positional : "");
    printf("%s\n\n%s\n\noptions:\n", usage, spec->summary ? spec->summary : "");
    printf("  %-26s %s\n", "--help", "show this help and exit");
    printf("  %-26s %s\n", "--config FILE",
           "read options from a JSON object {\"lr\": 3e-5, ...}; the command line wins");
    for (int i = 0; i < spec->n_opts; i++) {
        const rt_opt *o = &spec->opts[i];
        char left[128];
        const char *mv = rt_args_metavar(o);
        snprintf(left, sizeof left, "--%s%s%s", o->name, *mv ? " " : "", mv);
        printf("  %-26s %s", left, o->help ? o->help : "");
        if (o->defval && o->type != RT_OPT_FLAG) printf(" (default %s)", o->defval);
        printf("\n");
    }
    if (spec->epilog) printf("\n%s\n", spec->epilog);
}

char *rt_args_to_json(const rt_args_spec *spec) {
    cJSON *obj = cJSON_CreateObject();
    for (int i = 0; i < spec->n_opts; i++) {
        const rt_opt *o = &spec->opts[i];
        switch (o->type) {
        case RT_OPT_INT: cJSON_AddNumberToObject(obj, o->name, (double)*(int64_t *)o->dest); break;
        case RT_OPT_FLOAT: cJSON_AddNumberToObject(obj, o->name, *(double *)o->dest); break;
        case RT_OPT_FLAG: cJSON_AddBoolToObject(obj, o->name, *(bool *)o->dest); break;
        case RT_OPT_STRING:
        case RT_OPT_CHOICE: {
            const char *s = *(const char **)o->dest;
            if (s)
                cJSON_AddStringToObject(obj, o->name, s);
            else
                cJSON_AddNullToObject(obj, o->name);
            break;
        }
        }
    }
    char *out = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    return out;
}
