/* SuperGLUE JSONL readers (see data_superglue.h): data_jsonl splits the file into lines, checks
 * each for UTF-8 and parses it on its own with cJSON, and one function per record shape
 * turns the object into examples. Strings are copied out of the cJSON tree (MultiRC's
 * passage once per paragraph, shared by its answer options) so that the tree can go. */
#include "data/data_superglue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data_jsonl.h"
#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_fs.h"
#include "runtime/base/rt_json.h"
#include "runtime/base/rt_utf8.h"

static const char *const sg_bool_labels[] = {"false", "true"};
static const char *const sg_rte_labels[] = {"entailment", "not_entailment"};
static const char *const sg_cb_labels[] = {"entailment", "contradiction", "neutral"};
static const char *const sg_binary_labels[] = {"0", "1"};

static const data_sg_task sg_tasks[DATA_SG_N_TASKS] = {
    {DATA_SG_BOOLQ, "boolq", "superglue-boolq", "BoolQ.zip", 2, sg_bool_labels},
    {DATA_SG_CB, "cb", "superglue-cb", "CB.zip", 3, sg_cb_labels},
    {DATA_SG_COPA, "copa", "superglue-copa", "COPA.zip", 2, sg_binary_labels},
    {DATA_SG_MULTIRC, "multirc", "superglue-multirc", "MultiRC.zip", 2, sg_binary_labels},
    {DATA_SG_RTE, "rte", "superglue-rte", "RTE.zip", 2, sg_rte_labels},
    {DATA_SG_WIC, "wic", "superglue-wic", "WiC.zip", 2, sg_bool_labels},
    {DATA_SG_WSC, "wsc", "superglue-wsc", "WSC.zip", 2, sg_bool_labels},
};

const data_sg_task *data_sg_task_get(data_sg_task_id id) {
    return (unsigned)id < DATA_SG_N_TASKS ? &sg_tasks[id] : NULL;
}

const data_sg_task *data_sg_task_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < DATA_SG_N_TASKS; i++)
        if (strcmp(sg_tasks[i].name, name) == 0) return &sg_tasks[i];
    return NULL;
}

const char *data_sg_task_names(void) { return "boolq, cb, copa, multirc, rte, wic, wsc"; }

int data_sg_label_id(const data_sg_task *task, const char *name) {
    for (int k = 0; task && name && k < task->n_labels; k++)
        if (strcmp(task->label_names[k], name) == 0) return k;
    return -1;
}

/* The reading state of one file: where we are, for messages, and the set being filled. */
typedef struct {
    const data_sg_task *task;
    const char *name;
    size_t line;
    char where[320]; /* "name:line" for the getters' messages */
    bool require_labels;
    data_sg_examples *out;
    size_t cap;
} sg_reader;

/* The getters say RT_ERR_CONFIG (they serve config files); a data file is RT_ERR_FORMAT. */
static rt_status sg_format(rt_status st) { return st == RT_ERR_CONFIG ? RT_ERR_FORMAT : st; }

/* An owned copy of s kept in the set; NULL when out of memory. */
static const char *sg_keep(data_sg_examples *out, const char *s) {
    char **p = rt_grow_try(out->strings, &out->cap_strings, out->n_strings + 1, sizeof *p);
    if (!p) return NULL;
    out->strings = p;
    size_t len = strlen(s);
    char *copy = malloc(len + 1);
    if (!copy) return NULL;
    memcpy(copy, s, len + 1);
    out->strings[out->n_strings++] = copy;
    return copy;
}

/* A required string field of obj (prefix names the object for nested fields, "" at the top),
 * valid UTF-8 after cJSON has decoded its \u escapes, copied into the set. */
static rt_status sg_string(sg_reader *r, const cJSON *obj, const char *prefix, const char *key, const char **out) {
    char where[400];
    const char *s = NULL;
    snprintf(where, sizeof where, "%s%s%s", r->where, *prefix ? ": " : "", prefix);
    rt_status st = sg_format(rt_json_get_string(obj, where, key, &s, true, NULL));
    if (st != RT_OK) return st;
    size_t bad;
    if (!rt_utf8_valid(s, strlen(s), &bad))
        return rt_errorf(RT_ERR_FORMAT, "%s: field '%s' is not valid UTF-8 (byte %zu of the decoded string)", where,
                         key, bad + 1);
    *out = sg_keep(r->out, s);
    if (!*out) return rt_errorf(RT_ERR_NOMEM, "%s: out of memory", where);
    return RT_OK;
}

static rt_status sg_int(sg_reader *r, const cJSON *obj, const char *prefix, const char *key, bool nonnegative,
                        int32_t *out) {
    char where[400];
    int v = 0;
    snprintf(where, sizeof where, "%s%s%s", r->where, *prefix ? ": " : "", prefix);
    rt_status st = sg_format(rt_json_get_int(obj, where, key, &v, true, 0));
    if (st != RT_OK) return st;
    if (nonnegative && v < 0)
        return rt_errorf(RT_ERR_FORMAT, "%s: field '%s' is %d (expected a non-negative integer)", where, key, v);
    *out = v;
    return RT_OK;
}

/* The "label" of obj as a class id of the task, or DATA_SG_LABEL_NONE when it is absent and
 * labels are not required. BoolQ, WiC and WSC spell labels as JSON booleans, RTE and CB as
 * strings, COPA and MultiRC as the integers 0 and 1. */
static rt_status sg_label(sg_reader *r, const cJSON *obj, const char *prefix, int32_t *out) {
    char where[400];
    snprintf(where, sizeof where, "%s%s%s", r->where, *prefix ? ": " : "", prefix);
    const data_sg_task *t = r->task;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, "label");
    *out = DATA_SG_LABEL_NONE;
    if (!it) {
        if (r->require_labels)
            return rt_errorf(RT_ERR_FORMAT, "%s: field 'label' is missing (a %s train or val record needs one)", where,
                             t->name);
        return RT_OK;
    }
    switch (t->id) {
    case DATA_SG_BOOLQ:
    case DATA_SG_WIC:
    case DATA_SG_WSC:
        if (!cJSON_IsBool(it))
            return rt_errorf(RT_ERR_FORMAT, "%s: field 'label' is %s (expected true or false)", where,
                             rt_json_type_name(it));
        *out = cJSON_IsTrue(it) ? 1 : 0;
        return RT_OK;
    case DATA_SG_RTE:
    case DATA_SG_CB:
        if (cJSON_IsString(it) && it->valuestring && (*out = data_sg_label_id(t, it->valuestring)) >= 0) return RT_OK;
        *out = DATA_SG_LABEL_NONE;
        if (cJSON_IsString(it) && it->valuestring)
            return rt_errorf(RT_ERR_FORMAT, "%s: field 'label' is '%.40s' (expected %s%s%s%s%s)", where,
                             it->valuestring, t->label_names[0], t->n_labels > 2 ? ", " : " or ", t->label_names[1],
                             t->n_labels > 2 ? " or " : "", t->n_labels > 2 ? t->label_names[2] : "");
        return rt_errorf(RT_ERR_FORMAT, "%s: field 'label' is %s (expected a string, one of the %s labels)", where,
                         rt_json_type_name(it), t->name);
    default: /* COPA, MultiRC */
        if (cJSON_IsNumber(it) && (it->valuedouble == 0.0 || it->valuedouble == 1.0)) {
            *out = it->valuedouble == 1.0;
            return RT_OK;
        }
        if (cJSON_IsNumber(it))
            return rt_errorf(RT_ERR_FORMAT, "%s: field 'label' is the number %.17g (expected 0 or 1)", where,
                             it->valuedouble);
        return rt_errorf(RT_ERR_FORMAT, "%s: field 'label' is %s (expected the number 0 or 1)", where,
                         rt_json_type_name(it));
    }
}

/* A fresh example at the end of the set, its task-specific numbers unset. */
static data_sg_example *sg_push(sg_reader *r) {
    data_sg_examples *o = r->out;
    data_sg_example *p = rt_grow_try(o->ex, &r->cap, o->n + 1, sizeof *p);
    if (!p) return NULL;
    o->ex = p;
    data_sg_example *e = &o->ex[o->n++];
    memset(e, 0, sizeof *e);
    e->label = DATA_SG_LABEL_NONE;
    e->line = r->line > INT32_MAX ? INT32_MAX : (int32_t)r->line;
    e->span1_index = e->span2_index = e->passage_idx = e->question_idx = -1;
    return e;
}

#define SG_PUSH(e)                                                                     \
    do {                                                                               \
        if (!((e) = sg_push(r))) RT_FAIL(RT_ERR_NOMEM, "%s: out of memory", r->where); \
    } while (0)

/* MultiRC: one record is a paragraph; each answer option of each question is an example. */
static rt_status sg_read_multirc(sg_reader *r, const cJSON *root) {
    rt_status st = RT_OK;
    int32_t pidx;
    const char *passage;
    RT_TRY(sg_int(r, root, "", "idx", false, &pidx));
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "passage");
    if (!cJSON_IsObject(p))
        RT_FAIL(RT_ERR_FORMAT, "%s: field 'passage' is %s (expected an object with 'text' and 'questions')", r->where,
                p ? rt_json_type_name(p) : "missing");
    RT_TRY(sg_string(r, p, "passage", "text", &passage));
    const cJSON *qs = cJSON_GetObjectItemCaseSensitive(p, "questions");
    if (!cJSON_IsArray(qs))
        RT_FAIL(RT_ERR_FORMAT, "%s: passage: field 'questions' is %s (expected an array)", r->where,
                qs ? rt_json_type_name(qs) : "missing");
    int qi = 0;
    for (const cJSON *q = qs->child; q; q = q->next, qi++) {
        char qwhere[64];
        snprintf(qwhere, sizeof qwhere, "passage.questions[%d]", qi);
        if (!cJSON_IsObject(q))
            RT_FAIL(RT_ERR_FORMAT, "%s: %s is %s (expected an object)", r->where, qwhere, rt_json_type_name(q));
        const char *question;
        int32_t qidx;
        RT_TRY(sg_string(r, q, qwhere, "question", &question));
        RT_TRY(sg_int(r, q, qwhere, "idx", false, &qidx));
        const cJSON *as = cJSON_GetObjectItemCaseSensitive(q, "answers");
        if (!cJSON_IsArray(as))
            RT_FAIL(RT_ERR_FORMAT, "%s: %s: field 'answers' is %s (expected an array)", r->where, qwhere,
                    as ? rt_json_type_name(as) : "missing");
        r->out->n_questions++;
        int ai = 0;
        for (const cJSON *a = as->child; a; a = a->next, ai++) {
            char awhere[96];
            snprintf(awhere, sizeof awhere, "%s.answers[%d]", qwhere, ai);
            if (!cJSON_IsObject(a))
                RT_FAIL(RT_ERR_FORMAT, "%s: %s is %s (expected an object)", r->where, awhere, rt_json_type_name(a));
            data_sg_example *e;
            SG_PUSH(e);
            e->text_a = passage;
            e->text_b = question;
            e->passage_idx = pidx;
            e->question_idx = qidx;
            RT_TRY(sg_string(r, a, awhere, "text", &e->text_c));
            RT_TRY(sg_int(r, a, awhere, "idx", false, &e->idx));
            RT_TRY(sg_label(r, a, awhere, &e->label));
        }
    }
    return RT_OK;
fail:
    return st;
}

/* Every other task: one record, one example. */
static rt_status sg_read_record(sg_reader *r, const cJSON *root) {
    rt_status st = RT_OK;
    data_sg_example *e;
    SG_PUSH(e);
    RT_TRY(sg_int(r, root, "", "idx", false, &e->idx));
    switch (r->task->id) {
    case DATA_SG_BOOLQ:
        RT_TRY(sg_string(r, root, "", "passage", &e->text_a));
        RT_TRY(sg_string(r, root, "", "question", &e->text_b));
        break;
    case DATA_SG_CB:
    case DATA_SG_RTE:
        RT_TRY(sg_string(r, root, "", "premise", &e->text_a));
        RT_TRY(sg_string(r, root, "", "hypothesis", &e->text_b));
        break;
    case DATA_SG_COPA: {
        const char *q;
        RT_TRY(sg_string(r, root, "", "premise", &e->text_a));
        RT_TRY(sg_string(r, root, "", "choice1", &e->text_b));
        RT_TRY(sg_string(r, root, "", "choice2", &e->text_c));
        RT_TRY(sg_string(r, root, "", "question", &q));
        if (strcmp(q, "cause") != 0 && strcmp(q, "effect") != 0)
            RT_FAIL(RT_ERR_FORMAT, "%s: field 'question' is '%.40s' (expected cause or effect)", r->where, q);
        e->copa_effect = q[0] == 'e';
        break;
    }
    case DATA_SG_WIC:
        RT_TRY(sg_string(r, root, "", "sentence1", &e->text_a));
        RT_TRY(sg_string(r, root, "", "sentence2", &e->text_b));
        RT_TRY(sg_string(r, root, "", "word", &e->text_c));
        break;
    case DATA_SG_WSC: {
        RT_TRY(sg_string(r, root, "", "text", &e->text_a));
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "target");
        if (!cJSON_IsObject(t))
            RT_FAIL(RT_ERR_FORMAT, "%s: field 'target' is %s (expected an object with the spans)", r->where,
                    t ? rt_json_type_name(t) : "missing");
        RT_TRY(sg_string(r, t, "target", "span1_text", &e->text_b));
        RT_TRY(sg_string(r, t, "target", "span2_text", &e->text_c));
        RT_TRY(sg_int(r, t, "target", "span1_index", true, &e->span1_index));
        RT_TRY(sg_int(r, t, "target", "span2_index", true, &e->span2_index));
        break;
    }
    default: RT_CHECK(false, "task %d has no record reader", (int)r->task->id);
    }
    RT_TRY(sg_label(r, root, "", &e->label));
    return RT_OK;
fail:
    return st;
}

/* One record: the task's fields (data_jsonl_each has checked UTF-8, JSON and the object). */
static rt_status sg_read_line(void *ctx, const cJSON *root, const char *where, size_t line) {
    sg_reader *r = ctx;
    r->line = line;
    snprintf(r->where, sizeof r->where, "%s", where);
    return r->task->id == DATA_SG_MULTIRC ? sg_read_multirc(r, root) : sg_read_record(r, root);
}

static rt_status sg_parse_buffer(const data_sg_task *task, const char *name, const char *buf, size_t len,
                                 bool require_labels, data_sg_examples *out) {
    memset(out, 0, sizeof *out);
    RT_CHECK(task != NULL && name != NULL, "task=%p name=%p", (const void *)task, (const void *)name);
    sg_reader r = {.task = task, .name = name, .require_labels = require_labels, .out = out};
    out->task = task;
    out->path = rt_xstrdup(name);
    rt_status st = data_jsonl_each(name, buf, len, 1, sg_read_line, &r);
    if (st != RT_OK) data_sg_examples_free(out);
    return st;
}

rt_status data_sg_parse(const data_sg_task *task, const char *name, const char *bytes, size_t len, bool require_labels,
                        data_sg_examples *out) {
    return sg_parse_buffer(task, name, bytes, len, require_labels, out);
}

rt_status data_sg_load(const data_sg_task *task, const char *path, bool require_labels, data_sg_examples *out) {
    struct stat sb;
    char *buf = NULL;
    size_t len = 0;
    memset(out, 0, sizeof *out);
    RT_CHECK(task != NULL && path != NULL, "task=%p path=%p", (const void *)task, (const void *)path);
    if (stat(path, &sb) != 0)
        return rt_errorf(RT_ERR_IO,
                         "%s: not found; SuperGLUE task %s reads train.jsonl, val.jsonl and test.jsonl from one "
                         "folder; get them from the official %s (dl.fbaipublicfiles.com/glue/superglue/data/v2/%s) "
                         "and pass that folder as the data directory",
                         path, task->name, task->zip, task->zip);
    rt_status st = rt_read_file(path, 0, &buf, &len);
    if (st == RT_OK) st = sg_parse_buffer(task, path, buf, len, require_labels, out);
    free(buf);
    return st;
}

rt_status data_sg_load_split(const data_sg_task *task, const char *dir, const char *split, data_sg_examples *out) {
    char path[4096];
    RT_CHECK(task != NULL && dir != NULL && split != NULL, "task, dir and split");
    snprintf(path, sizeof path, "%s/%s.jsonl", dir, split);
    return data_sg_load(task, path, strcmp(split, "test") != 0, out);
}

void data_sg_examples_free(data_sg_examples *ex) {
    if (!ex) return;
    for (size_t i = 0; i < ex->n_strings; i++) free(ex->strings[i]);
    free(ex->strings);
    free(ex->ex);
    free(ex->path);
    memset(ex, 0, sizeof *ex);
}
