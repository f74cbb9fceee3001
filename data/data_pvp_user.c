/* A user's cloze pattern (see data_pvp.h, data_pvp_template): parsed once, filled per row. */
#include <stdlib.h>
#include <string.h>

#include "data/data_pvp.h"

void data_pvp_template_free(data_pvp_template *t) {
    if (!t) return;
    for (int i = 0; i < t->n_parts; i++) free(t->parts[i].text);
    for (int k = 0; k < t->n_columns; k++) free(t->columns[k]);
    memset(t, 0, sizeof *t);
}

/* Appends a part; false when the pattern has too many. */
static bool template_push(data_pvp_template *t, char *text, int column, bool mask) {
    if (t->n_parts == DATA_PVP_MAX_PARTS) {
        free(text);
        return false;
    }
    const int second = t->n_columns > 1 ? 1 : -1;
    const bool in_b = second >= 0 && (column == second || (t->n_parts > 0 && t->parts[t->n_parts - 1].segment == 1));
    t->parts[t->n_parts].text = text;
    t->parts[t->n_parts].column = column;
    t->parts[t->n_parts].is_mask = mask;
    t->parts[t->n_parts].segment = in_b ? 1 : 0;
    t->n_parts++;
    return true;
}

rt_status data_pvp_template_parse(const char *pattern, data_pvp_template *out) {
    rt_status st = RT_OK;
    memset(out, 0, sizeof *out);
    const size_t len = strlen(pattern);
    char *text = rt_xmalloc(len + 1); /* the fixed text being gathered */
    size_t n = 0;
    int masks = 0;
#define FLUSH_TEXT()                                                             \
    do {                                                                         \
        if (n) {                                                                 \
            text[n] = '\0';                                                      \
            if (!template_push(out, rt_xstrdup(text), -1, false)) goto too_many; \
            n = 0;                                                               \
        }                                                                        \
    } while (0)
    for (size_t i = 0; i < len;) {
        if ((pattern[i] == '{' && pattern[i + 1] == '{') || (pattern[i] == '}' && pattern[i + 1] == '}')) {
            text[n++] = pattern[i];
            i += 2;
        } else if (strncmp(pattern + i, "[MASK]", 6) == 0) {
            FLUSH_TEXT();
            if (++masks > 1) RT_FAIL(RT_ERR_USAGE, "--cloze '%s': two [MASK]s; a pattern has one blank", pattern);
            if (!template_push(out, NULL, -1, true)) goto too_many;
            i += 6;
        } else if (pattern[i] == '{') {
            const char *close = strchr(pattern + i + 1, '}');
            if (!close) RT_FAIL(RT_ERR_USAGE, "--cloze '%s': a '{' is never closed (write {{ for a brace)", pattern);
            const size_t name_len = (size_t)(close - (pattern + i + 1));
            if (name_len == 0) RT_FAIL(RT_ERR_USAGE, "--cloze '%s': {} names no column", pattern);
            FLUSH_TEXT();
            int column = -1;
            for (int k = 0; k < out->n_columns; k++)
                if (strlen(out->columns[k]) == name_len && strncmp(out->columns[k], pattern + i + 1, name_len) == 0)
                    column = k;
            if (column < 0) {
                if (out->n_columns == 2)
                    RT_FAIL(RT_ERR_USAGE, "--cloze '%s': a third column ('%.*s'); a pattern takes one or two", pattern,
                            (int)name_len, pattern + i + 1);
                char *name = rt_xmalloc(name_len + 1);
                memcpy(name, pattern + i + 1, name_len);
                name[name_len] = '\0';
                out->columns[out->n_columns] = name;
                column = out->n_columns++;
            }
            if (!template_push(out, NULL, column, false)) goto too_many;
            i += name_len + 2;
        } else if (pattern[i] == '}') {
            RT_FAIL(RT_ERR_USAGE, "--cloze '%s': a '}' with no '{' (write }} for a brace)", pattern);
        } else {
            text[n++] = pattern[i++];
        }
    }
    FLUSH_TEXT();
#undef FLUSH_TEXT
    if (masks == 0) RT_FAIL(RT_ERR_USAGE, "--cloze '%s': no [MASK]; the blank is where the class word goes", pattern);
    if (out->n_columns == 0)
        RT_FAIL(RT_ERR_USAGE, "--cloze '%s': no {COLUMN}; name the text column in braces", pattern);
    free(text);
    return RT_OK;
too_many:
    st = rt_errorf(RT_ERR_USAGE, "--cloze '%s': more than %d parts", pattern, DATA_PVP_MAX_PARTS);
fail:
    free(text);
    data_pvp_template_free(out);
    return st;
}

void data_pvp_template_fill(const data_pvp_template *t, const char *const *values, data_pvp_filled *out) {
    memset(out, 0, sizeof *out);
    out->n_parts = t->n_parts;
    for (int i = 0; i < t->n_parts; i++) {
        data_pvp_part *p = &out->parts[i];
        p->is_mask = t->parts[i].is_mask;
        p->segment = t->parts[i].segment;
        p->shortenable = t->parts[i].column >= 0;
        if (!p->is_mask) p->text = rt_xstrdup(t->parts[i].column >= 0 ? values[t->parts[i].column] : t->parts[i].text);
    }
}
