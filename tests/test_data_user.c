/* A user's own files (data/data_table.h, data/data_user.h): one table from CSV, TSV, JSON Lines and
 * a JSON array; cells' kinds; keys a record leaves out; the format from the extension. Then the
 * task HF's run_glue would make of them: the default text columns, the problem type from the
 * labels (fractions: regression; whole numbers sorted by value; text and true/false sorted by
 * bytes), --label-names and --positive-label, multi-label from JSON lists or --label-separator
 * (the union of the classes, each row's as 0/1 targets), and each error naming file, line and
 * column. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "data/data_user.h"
#include "tests/testutil.h"

static bool parse(const char *name, data_format fmt, const char *text, data_table *t) {
    rt_status st = data_table_parse(name, fmt, text, strlen(text), t);
    TZ_EXPECT(st == RT_OK, "%s: %s", name, rt_error_message());
    return st == RT_OK;
}

static void expect_error(rt_status want, rt_status st, const char *what, const char *needle) {
    TZ_EXPECT(st == want && strstr(rt_error_message(), needle), "%s: %s '%s', want %s '%s'", what, rt_status_name(st),
              rt_error_message(), rt_status_name(want), needle);
}

static void expect_table_error(const char *name, data_format fmt, const char *text, const char *needle) {
    data_table t;
    expect_error(RT_ERR_FORMAT, data_table_parse(name, fmt, text, strlen(text), &t), name, needle);
}

static void test_tables(void) {
    data_table t;
    /* the same two records in each format */
    static const struct {
        const char *name;
        data_format fmt;
        const char *text;
    } same[] = {
        {"a.csv", DATA_FORMAT_CSV, "text,label\n\"good, really\",pos\nbad,neg\n"},
        {"a.tsv", DATA_FORMAT_TSV, "text\tlabel\ngood, really\tpos\nbad\tneg\n"},
        {"a.jsonl", DATA_FORMAT_JSONL,
         "{\"text\": \"good, really\", \"label\": \"pos\"}\r\n{\"text\":\"bad\",\"label\":\"neg\"}\n\n"},
        {"a.json", DATA_FORMAT_JSON,
         "[{\"text\": \"good, really\", \"label\": \"pos\"},\n {\"text\":\"bad\",\"label\":\"neg\"}]"},
    };
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        if (!parse(same[i].name, same[i].fmt, same[i].text, &t)) continue;
        TZ_EXPECT(t.n_cols == 2 && t.n_rows == 2 && data_table_col(&t, "label") == 1, "%s: shape %d x %zu",
                  same[i].name, t.n_cols, t.n_rows);
        TZ_EXPECT(strcmp(data_table_cell(&t, 0, 0), "good, really") == 0 &&
                      strcmp(data_table_cell(&t, 1, 1), "neg") == 0,
                  "%s: cells", same[i].name);
        TZ_EXPECT(t.row_line[1] == (same[i].fmt == DATA_FORMAT_JSON ? 0u : 3u - (same[i].fmt == DATA_FORMAT_JSONL)),
                  "%s: the second row's line %zu", same[i].name, t.row_line[1]);
        data_table_free(&t);
    }
    /* JSON kinds, a key left out, null, numbers' text */
    if (parse("k.jsonl", DATA_FORMAT_JSONL,
              "{\"a\": 3, \"b\": true, \"c\": [\"x\", 1]}\n{\"a\": 0.25, \"d\": {\"k\": 1}, \"b\": null}\n", &t)) {
        TZ_EXPECT(t.n_cols == 4 && strcmp(t.col_names[3], "d") == 0, "columns in order of first appearance");
        TZ_EXPECT(strcmp(data_table_cell(&t, 0, 0), "3") == 0 && data_table_kind(&t, 0, 0) == DATA_CELL_NUMBER, "3");
        TZ_EXPECT(strcmp(data_table_cell(&t, 1, 0), "0.25") == 0, "0.25 reads '%s'", data_table_cell(&t, 1, 0));
        TZ_EXPECT(data_table_kind(&t, 0, 1) == DATA_CELL_BOOL && strcmp(data_table_cell(&t, 0, 1), "true") == 0,
                  "true");
        TZ_EXPECT(data_table_kind(&t, 0, 2) == DATA_CELL_LIST && strcmp(data_table_cell(&t, 0, 2), "[\"x\",1]") == 0,
                  "a list keeps its JSON");
        TZ_EXPECT(data_table_cell(&t, 1, 1) == NULL && data_table_cell(&t, 0, 3) == NULL &&
                      data_table_cell(&t, 1, 2) == NULL,
                  "null and left-out keys are absent");
        TZ_EXPECT(data_table_kind(&t, 1, 3) == DATA_CELL_OBJECT, "an object");
        data_table_free(&t);
    }
    expect_table_error("bad.jsonl", DATA_FORMAT_JSONL, "{\"a\": 1}\n{\"a\": }\n", "bad.jsonl:2:7: invalid JSON");
    expect_table_error("arr.jsonl", DATA_FORMAT_JSONL, "{\"a\": 1}\n[1]\n", "arr.jsonl:2: the line is an array");
    expect_table_error("dup.jsonl", DATA_FORMAT_JSONL, "{\"a\": 1, \"a\": 2}\n",
                       "dup.jsonl:1: key \"a\" appears twice");
    expect_table_error("nul.jsonl", DATA_FORMAT_JSONL, "{\"a\": \"x\"}\n{\"a\": \"x\\u0000y\"}\n",
                       "nul.jsonl:2: a string holds \\u0000");
    expect_table_error("utf8.jsonl", DATA_FORMAT_JSONL, "{\"a\": \"\xff\"}\n", "utf8.jsonl:1: invalid UTF-8");
    expect_table_error("obj.json", DATA_FORMAT_JSON, "{\"a\": 1}",
                       "obj.json: the file holds an object (expected an array");
    expect_table_error("rec.json", DATA_FORMAT_JSON, "[{\"a\": 1}, 2]", "rec.json: record 2 is a number");
    expect_table_error("empty.json", DATA_FORMAT_JSON, "[]", "empty.json: the array is empty");
    expect_table_error("norows.csv", DATA_FORMAT_CSV, "a,b\n", "norows.csv: no rows after the header");
    expect_table_error("short.csv", DATA_FORMAT_CSV, "a,b\n1\n", "short.csv:2: 1 field, the header has 2");
    /* a piece of a JSON Lines file read in pieces: its lines are the file's */
    {
        const char piece[] = "{\"text\": \"a\"}\n{\"text\": \"b\"}\n";
        char *buf = rt_xmalloc(sizeof piece);
        memcpy(buf, piece, sizeof piece);
        TZ_EXPECT_OK(data_table_parse_jsonl_piece("big.jsonl", buf, sizeof piece - 1, 100, &t));
        TZ_EXPECT(t.n_rows == 2 && t.row_line[1] == 101, "a piece's second row is line 101: %zu",
                  t.n_rows ? t.row_line[1] : 0);
        data_table_free(&t);
        const char bad[] = "{\"text\": \"a\"}\n{\"text\": }\n";
        buf = rt_xmalloc(sizeof bad);
        memcpy(buf, bad, sizeof bad);
        expect_error(RT_ERR_FORMAT, data_table_parse_jsonl_piece("big.jsonl", buf, sizeof bad - 1, 100, &t), "piece",
                     "big.jsonl:101:10: invalid JSON");
    }
    /* the format from the name */
    data_format f;
    TZ_EXPECT(data_format_of("x/train.jsonl", DATA_FORMAT_AUTO, &f) == RT_OK && f == DATA_FORMAT_JSONL, "jsonl");
    TZ_EXPECT(data_format_of("x/train.txt", DATA_FORMAT_CSV, &f) == RT_OK && f == DATA_FORMAT_CSV, "given");
    expect_error(RT_ERR_USAGE, data_format_of("x/train.txt", DATA_FORMAT_AUTO, &f), "txt", "pass --data-format");
    TZ_EXPECT(data_format_parse("json") == DATA_FORMAT_JSON && data_format_parse("xml") < 0, "data_format_parse");
    /* from a file */
    char path[600];
    snprintf(path, sizeof path, "%s/t.csv", tz_tmpdir());
    tz_write_file(path, "q,label\nx,1\n", 12);
    TZ_EXPECT_OK(data_table_read(path, DATA_FORMAT_AUTO, &t));
    TZ_EXPECT(t.n_rows == 1 && t.format == DATA_FORMAT_CSV, "data_table_read");
    data_table_free(&t);
}

/* Resolves the task of text (a train file) with o; returns false (and frees) on an error. */
static bool resolve(const char *name, data_format fmt, const char *text, const data_user_opts *o, data_table *t,
                    data_user_task *task) {
    if (!parse(name, fmt, text, t)) return false;
    rt_status st = data_user_task_resolve(t, o, task);
    TZ_EXPECT(st == RT_OK, "%s: %s", name, rt_error_message());
    if (st != RT_OK) data_table_free(t);
    return st == RT_OK;
}

static void expect_classes(const data_user_task *task, const char *what, int n, const char *const *names) {
    TZ_EXPECT(task->type == DATA_TASK_CLASSIFICATION && task->n_labels == n, "%s: %d classes, want %d", what,
              task->n_labels, n);
    for (int k = 0; k < n && k < task->n_labels; k++)
        TZ_EXPECT(strcmp(task->label_names[k], names[k]) == 0, "%s: class %d '%s', want '%s'", what, k,
                  task->label_names[k], names[k]);
}

static void expect_resolve_error(const char *name, data_format fmt, const char *text, const data_user_opts *o,
                                 rt_status want, const char *needle) {
    data_table t;
    data_user_task task;
    if (!parse(name, fmt, text, &t)) return;
    expect_error(want, data_user_task_resolve(&t, o, &task), name, needle);
    data_table_free(&t);
}

static void test_tasks(void) {
    data_table t;
    data_user_task task;
    data_user_opts none = {0};
    /* sentence1,sentence2 first; string labels sorted by bytes */
    if (resolve("p.csv", DATA_FORMAT_CSV, "id,sentence2,sentence1,label\n1,b,a,pos\n2,d,c,neg\n3,f,e,Neutral\n", &none,
                &t, &task)) {
        TZ_EXPECT(task.n_text == 2 && strcmp(task.text_col[0], "sentence1") == 0 &&
                      strcmp(task.text_col[1], "sentence2") == 0,
                  "sentence1,sentence2");
        static const char *const names[] = {"Neutral", "neg", "pos"};
        expect_classes(&task, "text labels", 3, names);
        TZ_EXPECT(task.positive == -1, "no positive class among three");
        data_examples ex;
        TZ_EXPECT_OK(data_user_examples(&task, &t, true, &ex));
        TZ_EXPECT(ex.n == 3 && strcmp(ex.text_a[1], "c") == 0 && strcmp(ex.text_b[1], "d") == 0 && ex.labels[0] == 2 &&
                      ex.labels[2] == 0 && ex.line[2] == 4 && !ex.targets,
                  "examples");
        data_examples_free(&ex);
        data_user_task_free(&task);
        data_table_free(&t);
    }
    /* the first two text columns, numeric columns skipped; whole numbers sorted by value */
    if (resolve("n.csv", DATA_FORMAT_CSV, "id,title,score,body,label\n1,t,5,b,10\n2,u,6,c,9\n3,v,7,d,09\n", &none, &t,
                &task)) {
        TZ_EXPECT(task.n_text == 2 && strcmp(task.text_col[0], "title") == 0 && strcmp(task.text_col[1], "body") == 0,
                  "title,body");
        static const char *const names[] = {"9", "10"};
        expect_classes(&task, "whole numbers", 2, names);
        TZ_EXPECT(task.integer_labels && task.positive == 1, "integer labels, the second class positive");
        data_examples ex;
        TZ_EXPECT_OK(data_user_examples(&task, &t, true, &ex));
        TZ_EXPECT(ex.labels[0] == 1 && ex.labels[1] == 0 && ex.labels[2] == 0, "'09' is the class 9");
        data_examples_free(&ex);
        data_user_task_free(&task);
        data_table_free(&t);
    }
    /* a fraction means regression; 'text' is taken alone */
    if (resolve(
            "r.jsonl", DATA_FORMAT_JSONL,
            "{\"text\": \"a\", \"other\": \"z\", \"label\": 1}\n{\"text\": \"b\", \"other\": \"y\", \"label\": 2.5}\n",
            &none, &t, &task)) {
        TZ_EXPECT(task.type == DATA_TASK_REGRESSION && task.n_labels == 1 && task.n_text == 1 &&
                      strcmp(task.text_col[0], "text") == 0,
                  "regression on text");
        data_examples ex;
        TZ_EXPECT_OK(data_user_examples(&task, &t, true, &ex));
        TZ_EXPECT(ex.targets && ex.targets[0] == 1.0f && ex.targets[1] == 2.5f && ex.labels[0] == DATA_LABEL_NONE,
                  "targets");
        data_examples_free(&ex);
        TZ_EXPECT_OK(data_user_examples(&task, &t, false, &ex));
        TZ_EXPECT(isnan(ex.targets[0]), "a test file's targets are not read");
        data_examples_free(&ex);
        data_user_task_free(&task);
        data_table_free(&t);
    }
    /* CSV "1.0" is a fraction: regression; JSON 1.0 is whole */
    if (resolve("f.csv", DATA_FORMAT_CSV, "text,label\na,1.0\nb,2\n", &none, &t, &task)) {
        TZ_EXPECT(task.type == DATA_TASK_REGRESSION, "1.0 in CSV means regression");
        data_user_task_free(&task);
        data_table_free(&t);
    }
    /* JSON booleans; JSON strings of digits sort as text */
    if (resolve("b.jsonl", DATA_FORMAT_JSONL,
                "{\"text\": \"a\", \"label\": true}\n{\"text\": \"b\", \"label\": false}\n", &none, &t, &task)) {
        static const char *const names[] = {"false", "true"};
        expect_classes(&task, "booleans", 2, names);
        data_user_task_free(&task);
        data_table_free(&t);
    }
    if (resolve("s.jsonl", DATA_FORMAT_JSONL,
                "{\"text\": \"a\", \"label\": \"9\"}\n{\"text\": \"b\", \"label\": \"10\"}\n", &none, &t, &task)) {
        static const char *const names[] = {"10", "9"};
        expect_classes(&task, "digit strings", 2, names);
        data_user_task_free(&task);
        data_table_free(&t);
    }
    /* --label-names fixes the order; --text-columns and --label-column name the columns */
    data_user_opts named = {
        .text_columns = "review", .label_column = "stars", .label_names = "pos,neg", .positive_label = "pos"};
    if (resolve("o.csv", DATA_FORMAT_CSV, "review,stars\nfine,pos\nawful,neg\n", &named, &t, &task)) {
        static const char *const names[] = {"pos", "neg"};
        expect_classes(&task, "--label-names", 2, names);
        TZ_EXPECT(task.positive == 0, "--positive-label pos is class 0, not the default second");
        /* a validation file with a label outside the classes */
        data_table v;
        data_examples ex;
        if (parse("dev.csv", DATA_FORMAT_CSV, "review,stars\nok,pos\nmeh,mixed\n", &v)) {
            expect_error(
                RT_ERR_FORMAT, data_user_examples(&task, &v, true, &ex), "dev label",
                "dev.csv:3: column 'stars': the label 'mixed' is not one of the train file's classes 'pos', 'neg'");
            TZ_EXPECT_OK(data_user_examples(&task, &v, false, &ex)); /* a test file: labels not read */
            data_examples_free(&ex);
            data_table_free(&v);
        }
        if (parse("test.csv", DATA_FORMAT_CSV, "text,stars\nok,pos\n", &v)) {
            expect_error(
                RT_ERR_USAGE, data_user_examples(&task, &v, false, &ex), "test columns",
                "test.csv: no column 'review' (its columns: text, stars); name the column with --text-columns");
            data_table_free(&v);
        }
        if (parse("empty.jsonl", DATA_FORMAT_JSONL, "{\"review\": \"\", \"stars\": \"pos\"}\n", &v)) {
            expect_error(RT_ERR_FORMAT, data_user_examples(&task, &v, true, &ex), "empty text",
                         "empty.jsonl:1: column 'review': the text is empty");
            data_table_free(&v);
        }
        data_user_task_free(&task);
        data_table_free(&t);
    }
    /* labels longer than any fixed buffer stay apart when they differ only at their end */
    {
        char text[1400], a[601], b[601];
        memset(a, 'x', 600);
        memcpy(b, a, 600);
        a[600] = b[600] = '\0';
        a[599] = 'a';
        b[599] = 'b';
        snprintf(text, sizeof text, "text,label\nt,%s\nu,%s\n", b, a);
        if (resolve("long.csv", DATA_FORMAT_CSV, text, &none, &t, &task)) {
            TZ_EXPECT(task.n_labels == 2 && strcmp(task.label_names[0], a) == 0 && strcmp(task.label_names[1], b) == 0,
                      "two 600-byte labels that differ in their last byte are two classes");
            data_user_task_free(&task);
            data_table_free(&t);
        }
    }
    /* errors */
    expect_resolve_error("nolabel.csv", DATA_FORMAT_CSV, "text,y\na,1\n", &none, RT_ERR_USAGE,
                         "nolabel.csv: no column 'label' (its columns: text, y); name the column with --label-column");
    expect_resolve_error("notext.csv", DATA_FORMAT_CSV, "id,label\n1,a\n2,b\n", &none, RT_ERR_USAGE,
                         "notext.csv: no column holds text (its columns: id, label)");
    expect_resolve_error("emptylabel.csv", DATA_FORMAT_CSV, "text,label\na,x\nb,\n", &none, RT_ERR_FORMAT,
                         "emptylabel.csv:3: column 'label': the label is empty");
    expect_resolve_error("mixed.jsonl", DATA_FORMAT_JSONL,
                         "{\"text\":\"a\",\"label\":1}\n{\"text\":\"b\",\"label\":\"x\"}\n", &none, RT_ERR_FORMAT,
                         "mixed.jsonl:2: column 'label': the label is text, but the first row's is a number");
    expect_resolve_error("one.csv", DATA_FORMAT_CSV, "text,label\na,x\nb,x\n", &none, RT_ERR_FORMAT,
                         "one.csv: column 'label': every train row has the label 'x'");
    data_user_opts outside = {.label_names = "a,b"};
    expect_resolve_error("outside.csv", DATA_FORMAT_CSV, "text,label\nt,a\nu,c\n", &outside, RT_ERR_FORMAT,
                         "outside.csv:3: column 'label': the label 'c' is not one of --label-names");
    data_user_opts twice = {.label_names = "a,a"};
    expect_resolve_error("twice.csv", DATA_FORMAT_CSV, "text,label\nt,a\n", &twice, RT_ERR_USAGE, "'a' is given twice");
    data_user_opts pos = {.positive_label = "maybe"};
    expect_resolve_error("pos.csv", DATA_FORMAT_CSV, "text,label\nt,yes\nu,no\n", &pos, RT_ERR_USAGE,
                         "--positive-label 'maybe' is not a class (the classes: 'no', 'yes')");
    data_user_opts cols = {.text_columns = "a,b,c"};
    expect_resolve_error("cols.csv", DATA_FORMAT_CSV, "a,label\nt,yes\n", &cols, RT_ERR_USAGE,
                         "--text-columns 'a,b,c': expected one column name or two");
    data_user_opts self = {.text_columns = "label"};
    expect_resolve_error("self.csv", DATA_FORMAT_CSV, "a,label\nt,yes\n", &self, RT_ERR_USAGE,
                         "'label' is the label column");
    /* a JSON array's rows are named by record */
    expect_resolve_error("arr.json", DATA_FORMAT_JSON, "[{\"text\":\"a\",\"label\":\"x\"},{\"text\":\"b\"}]", &none,
                         RT_ERR_FORMAT, "arr.json: record 2: column 'label': the label is missing");
}

/* The examples' 0/1 targets of a multi-label task, row by row (n_labels each). */
static void expect_multi_hot(const data_user_task *task, const data_table *t, const char *what, size_t rows,
                             const float *want) {
    data_examples ex;
    rt_status st = data_user_examples(task, t, true, &ex);
    TZ_EXPECT(st == RT_OK, "%s: %s", what, rt_error_message());
    if (st != RT_OK) return;
    TZ_EXPECT(ex.n == rows && ex.target_width == task->n_labels && ex.targets, "%s: %zu rows of %d targets", what, ex.n,
              ex.target_width);
    for (size_t i = 0; ex.targets && i < rows * (size_t)task->n_labels; i++)
        TZ_EXPECT(ex.targets[i] == want[i], "%s: target %zu is %g, want %g", what, i, (double)ex.targets[i],
                  (double)want[i]);
    for (size_t i = 0; i < ex.n; i++) TZ_EXPECT(ex.labels[i] == DATA_LABEL_NONE, "%s: row %zu has a class id", what, i);
    data_examples_free(&ex);
}

static void test_multi_label(void) {
    data_table t;
    data_user_task task;
    data_user_opts none = {0};
    /* JSON lists: the union sorted by bytes; [] is a row with no class */
    if (resolve("m.jsonl", DATA_FORMAT_JSONL,
                "{\"text\":\"a\",\"label\":[\"sport\",\"art\"]}\n{\"text\":\"b\",\"label\":[]}\n"
                "{\"text\":\"c\",\"label\":[\"news\",\"sport\",\"sport\"]}\n",
                &none, &t, &task)) {
        static const char *const names[] = {"art", "news", "sport"};
        TZ_EXPECT(task.type == DATA_TASK_MULTI_LABEL && task.n_labels == 3 && task.positive < 0, "lists: multi-label");
        for (int k = 0; k < 3 && k < task.n_labels; k++)
            TZ_EXPECT(strcmp(task.label_names[k], names[k]) == 0, "lists: class %d '%s'", k, task.label_names[k]);
        static const float want[] = {1, 0, 1, 0, 0, 0, 0, 1, 1};
        expect_multi_hot(&task, &t, "lists", 3, want);
        data_user_task_free(&task);
        data_table_free(&t);
    }
    /* whole numbers in lists sort by value */
    if (resolve("n.jsonl", DATA_FORMAT_JSONL, "{\"text\":\"a\",\"label\":[10,9]}\n{\"text\":\"b\",\"label\":[2]}\n",
                &none, &t, &task)) {
        TZ_EXPECT(task.n_labels == 3 && strcmp(task.label_names[0], "2") == 0 && strcmp(task.label_names[2], "10") == 0,
                  "numbered classes by value");
        data_user_task_free(&task);
        data_table_free(&t);
    }
    /* --label-separator on CSV: names trimmed, an empty cell names no class, "09" is class 9 */
    data_user_opts bar = {.label_separator = "|"};
    if (resolve("s.csv", DATA_FORMAT_CSV, "text,label\na,b | a\nb,\nc,c|a\n", &bar, &t, &task)) {
        TZ_EXPECT(task.type == DATA_TASK_MULTI_LABEL && task.n_labels == 3 && strcmp(task.label_names[1], "b") == 0,
                  "separator: classes a, b, c");
        static const float want[] = {1, 1, 0, 0, 0, 0, 1, 0, 1};
        expect_multi_hot(&task, &t, "separator", 3, want);
        data_table v;
        if (parse("s-val.csv", DATA_FORMAT_CSV, "text,label\nz,a|d\n", &v)) { /* a class the train file lacks */
            data_examples ex;
            expect_error(
                RT_ERR_FORMAT, data_user_examples(&task, &v, true, &ex), "validation",
                "s-val.csv:2: column 'label': the class 'd' is not one of the train file's multi-label classes "
                "'a', 'b', 'c'");
            data_table_free(&v);
        }
        data_user_task_free(&task);
        data_table_free(&t);
    }
    if (resolve("i.csv", DATA_FORMAT_CSV, "text,label\na,09;1\nb,10\n", &(data_user_opts){.label_separator = ";"}, &t,
                &task)) {
        TZ_EXPECT(task.integer_labels && task.n_labels == 3 && strcmp(task.label_names[0], "1") == 0 &&
                      strcmp(task.label_names[1], "9") == 0 && strcmp(task.label_names[2], "10") == 0,
                  "separated whole numbers by value");
        data_user_task_free(&task);
        data_table_free(&t);
    }
    /* --label-names fixes the order and the classes */
    data_user_opts named = {.label_separator = ",", .label_names = "z,y,x"};
    if (resolve("o.csv", DATA_FORMAT_CSV, "text,label\na,\"x,y\"\nb,z\n", &named, &t, &task)) {
        static const float want[] = {0, 1, 1, 1, 0, 0};
        expect_multi_hot(&task, &t, "named", 2, want);
        data_user_task_free(&task);
        data_table_free(&t);
    }
    /* errors */
    expect_resolve_error("one.jsonl", DATA_FORMAT_JSONL, "{\"text\":\"a\",\"label\":[\"x\"]}\n", &none, RT_ERR_FORMAT,
                         "one.jsonl: column 'label': the train rows name one class only");
    expect_resolve_error("gap.csv", DATA_FORMAT_CSV, "text,label\na,x||y\n", &bar, RT_ERR_FORMAT,
                         "gap.csv:2: column 'label': the label 'x||y' has an empty class name between separators '|'");
    expect_resolve_error(
        "frac.jsonl", DATA_FORMAT_JSONL, "{\"text\":\"a\",\"label\":[\"x\",0.5]}\n", &none, RT_ERR_FORMAT,
        "frac.jsonl:1: column 'label': a list label holds a number; a class is a name or a whole number");
    expect_resolve_error("nest.jsonl", DATA_FORMAT_JSONL, "{\"text\":\"a\",\"label\":[[\"x\"]]}\n", &none,
                         RT_ERR_FORMAT, "nest.jsonl:1: column 'label': a list label holds an array");
    expect_resolve_error("mix.jsonl", DATA_FORMAT_JSONL,
                         "{\"text\":\"a\",\"label\":[\"x\",\"y\"]}\n{\"text\":\"b\",\"label\":\"x\"}\n", &none,
                         RT_ERR_FORMAT, "mix.jsonl:2: column 'label': the label is text, but the task is multi-label");
    expect_resolve_error("miss.jsonl", DATA_FORMAT_JSONL,
                         "{\"text\":\"a\",\"label\":[\"x\",\"y\"]}\n{\"text\":\"b\"}\n", &none, RT_ERR_FORMAT,
                         "miss.jsonl:2: column 'label': the label is missing");
    data_user_opts pos = {.label_separator = "|", .positive_label = "a"};
    expect_resolve_error("pos.csv", DATA_FORMAT_CSV, "text,label\na,a|b\n", &pos, RT_ERR_USAGE,
                         "--positive-label is for two classes; 'label' in pos.csv is multi-label");
    data_user_opts outside = {.label_separator = "|", .label_names = "a,b"};
    expect_resolve_error("out.csv", DATA_FORMAT_CSV, "text,label\nt,a|c\n", &outside, RT_ERR_FORMAT,
                         "out.csv: column 'label': the class 'c' is not one of --label-names");
}

int main(void) {
    test_tables();
    test_tasks();
    test_multi_label();
    return tz_test_result("test_data_user");
}
