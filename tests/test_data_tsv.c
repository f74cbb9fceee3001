/* The GLUE TSV reader and task loader: BOM, CRLF, no quote handling, invalid UTF-8, the real
 * GLUE files (MRPC whole from assets/, the others whole or sliced in tests/data/; row and label
 * counts from their SOURCES.md and from the slices), and bad inputs whose messages must
 * name file:line and the field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data_glue.h"
#include "data/data_tsv.h"
#include "tests/testutil.h"

static char tmp_files[16][512];
static int n_tmp_files;

/* Writes bytes to dir/name and returns the path (kept for removal at the end). */
static const char *write_file(const char *dir, const char *name, const char *bytes, size_t len) {
    char *p = tmp_files[n_tmp_files++];
    snprintf(p, sizeof tmp_files[0], "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        perror(p);
        exit(1);
    }
    fwrite(bytes, 1, len, f);
    fclose(f);
    return p;
}

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

static void test_parse_basics(void) {
    data_tsv t;
    /* BOM, CRLF, quotes kept as text, an empty field, a trailing blank line. */
    const char text[] = "\xEF\xBB\xBFh1\th2\th3\r\n1\t\"a \"quoted\" one\t\r\n2\tb\tc\r\n\r\n";
    TZ_EXPECT_OK(data_tsv_parse("mem.tsv", text, sizeof text - 1, true, 3, &t));
    TZ_EXPECT(t.n_rows == 2, "rows %zu", t.n_rows);
    TZ_EXPECT(t.n_header == 3 && strcmp(t.header[0], "h1") == 0 && strcmp(t.header[2], "h3") == 0,
              "header '%s' (BOM must be skipped, CR stripped)", t.n_header ? t.header[0] : "");
    TZ_EXPECT(strcmp(data_tsv_field(&t, 0, 1), "\"a \"quoted\" one") == 0, "quotes are text: '%s'",
              data_tsv_field(&t, 0, 1));
    TZ_EXPECT(strcmp(data_tsv_field(&t, 0, 2), "") == 0, "empty last field: '%s'", data_tsv_field(&t, 0, 2));
    TZ_EXPECT(strcmp(data_tsv_field(&t, 1, 2), "c") == 0, "CR stripped: '%s'", data_tsv_field(&t, 1, 2));
    TZ_EXPECT(data_tsv_field(&t, 1, 3) == NULL, "out-of-range column is NULL");
    TZ_EXPECT(t.row_line[0] == 2 && t.row_line[1] == 3, "line numbers %zu %zu", t.row_line[0], t.row_line[1]);
    data_tsv_free(&t);

    /* No header, no final newline, extra columns kept. */
    const char text2[] = "a\tb\nc\td\te";
    TZ_EXPECT_OK(data_tsv_parse("mem2.tsv", text2, sizeof text2 - 1, false, 2, &t));
    TZ_EXPECT(t.n_rows == 2 && t.header == NULL, "rows %zu", t.n_rows);
    TZ_EXPECT(data_tsv_ncols(&t, 1) == 3 && strcmp(data_tsv_field(&t, 1, 2), "e") == 0, "extra column kept");
    data_tsv_free(&t);

    /* Empty input: fine without a header, an error with one. */
    TZ_EXPECT_OK(data_tsv_parse("empty.tsv", "", 0, false, 2, &t));
    TZ_EXPECT(t.n_rows == 0, "rows %zu", t.n_rows);
    data_tsv_free(&t);
    rt_status st = data_tsv_parse("empty.tsv", "", 0, true, 2, &t);
    TZ_EXPECT(st == RT_ERR_FORMAT && contains(rt_error_message(), "empty.tsv:1: empty file"), "%s", rt_error_message());

    /* A blank line in the middle is an error at its line. */
    const char text3[] = "h1\th2\na\tb\n\nc\td\n";
    st = data_tsv_parse("blank.tsv", text3, sizeof text3 - 1, true, 2, &t);
    TZ_EXPECT(st == RT_ERR_FORMAT && contains(rt_error_message(), "blank.tsv:3: blank line"), "%s", rt_error_message());

    /* Too few columns, named with line and counts. */
    const char text4[] = "h1\th2\th3\na\tb\tc\nd\te\n";
    st = data_tsv_parse("few.tsv", text4, sizeof text4 - 1, true, 3, &t);
    TZ_EXPECT(st == RT_ERR_FORMAT &&
                  contains(rt_error_message(), "few.tsv:3: expected at least 3 tab-separated columns, found 2"),
              "%s", rt_error_message());

    /* A NUL byte is not text. */
    const char text5[] = "h1\th2\na\0b\tc\n";
    st = data_tsv_parse("nul.tsv", text5, sizeof text5 - 1, true, 2, &t);
    TZ_EXPECT(st == RT_ERR_FORMAT && contains(rt_error_message(), "nul.tsv:2: NUL byte"), "%s", rt_error_message());

    st = data_tsv_read("/nonexistent/dir/x.tsv", true, 1, &t);
    TZ_EXPECT(st == RT_ERR_IO && contains(rt_error_message(), "/nonexistent/dir/x.tsv: cannot open"), "%s",
              rt_error_message());
}

/* Expects data_tsv_parse of text (a C string) to fail with want in the message. */
static void expect_tsv_error(const char *name, const char *text, bool has_header, const char *want) {
    data_tsv t;
    rt_status st = data_tsv_parse(name, text, strlen(text), has_header, 2, &t);
    TZ_EXPECT(st == RT_ERR_FORMAT && contains(rt_error_message(), want), "%s: got %s '%s', want '%s'", name,
              rt_status_name(st), rt_error_message(), want);
    TZ_EXPECT(t.fields == NULL && t.buf == NULL, "%s: freed on error", name);
    if (st == RT_OK) data_tsv_free(&t);
}

/* Invalid UTF-8 anywhere is t5-finetune's error, byte counted from the line's start (after the
 * BOM, before the CR); valid multi-byte text, a BOM and CRLF still load. */
static void test_utf8(void) {
    data_tsv t;
    const char good[] = "\xEF\xBB\xBFh1\th2\r\ncaf\xC3\xA9\t\xE6\x97\xA5\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF\r\n";
    TZ_EXPECT_OK(data_tsv_parse("good.tsv", good, sizeof good - 1, true, 2, &t));
    TZ_EXPECT(t.n_rows == 1 && strcmp(t.header[0], "h1") == 0, "BOM and CRLF: %zu rows", t.n_rows);
    TZ_EXPECT(t.n_rows == 1 && strcmp(data_tsv_field(&t, 0, 0), "caf\xC3\xA9") == 0 &&
                  strcmp(data_tsv_field(&t, 0, 1), "\xE6\x97\xA5\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF") == 0,
              "multi-byte text kept as it is");
    data_tsv_free(&t);

    expect_tsv_error("latin1.tsv", "h1\th2\na\tb\nc\td\xE9j\xE0 vu\n", true,
                     "latin1.tsv:3: invalid UTF-8 at byte 4 of the line");
    expect_tsv_error("bom.tsv",
                     "\xEF\xBB\xBFh\xFF"
                     "1\th2\na\tb\n",
                     true, "bom.tsv:1: invalid UTF-8 at byte 2 of the line");
    expect_tsv_error("overlong.tsv", "a\tb\r\nc\t/\xC0\xAF\r\n", false,
                     "overlong.tsv:2: invalid UTF-8 at byte 4 of the line");
    expect_tsv_error("overlong3.tsv", "a\t\xE0\x80\xAF\n", false,
                     "overlong3.tsv:1: invalid UTF-8 at byte 3 of the line");
    expect_tsv_error("surrogate.tsv", "a\tb\nc\td\xED\xA0\x80\n", false,
                     "surrogate.tsv:2: invalid UTF-8 at byte 4 of the line");
    expect_tsv_error("above.tsv", "a\t\xF4\x90\x80\x80\n", false, "above.tsv:1: invalid UTF-8 at byte 3 of the line");
    expect_tsv_error("cont.tsv",
                     "\x80"
                     "a\tb\n",
                     false, "cont.tsv:1: invalid UTF-8 at byte 1 of the line");
    /* cut short: at the end of the file, and before a CRLF (the CR is not part of the text) */
    expect_tsv_error("cut.tsv", "a\tb\nc\td\xE2\x82", false, "cut.tsv:2: invalid UTF-8 at byte 4 of the line");
    expect_tsv_error("cutcr.tsv", "a\tb\xF0\x9F\x98\r\nc\td\r\n", false,
                     "cutcr.tsv:1: invalid UTF-8 at byte 4 of the line");
}

static void count_labels(const data_examples *ex, size_t *c0, size_t *c1, size_t *other) {
    *c0 = *c1 = *other = 0;
    for (size_t i = 0; i < ex->n; i++) {
        if (ex->labels[i] == 0)
            (*c0)++;
        else if (ex->labels[i] == 1)
            (*c1)++;
        else
            (*other)++;
    }
}

static void test_mrpc(void) {
    const data_glue_task *mrpc = data_glue_task_find("mrpc");
    TZ_EXPECT(mrpc != NULL, "mrpc task");
    TZ_EXPECT(data_glue_task_find("nope") == NULL, "unknown task");
    if (!mrpc) return;
    TZ_EXPECT(mrpc->metric == DATA_METRIC_ACC_F1 && mrpc->n_labels == 2, "mrpc spec");
    data_examples ex;
    size_t c0, c1, other;

    TZ_EXPECT_OK(data_glue_load(mrpc, tz_asset_path("glue-mrpc/train.tsv"), true, &ex));
    TZ_EXPECT(ex.n == 3668, "train rows %zu", ex.n);
    count_labels(&ex, &c0, &c1, &other);
    TZ_EXPECT(c1 == 2474 && c0 == 1194 && other == 0, "train labels 1:%zu 0:%zu other:%zu", c1, c0, other);
    TZ_EXPECT(ex.n > 0 && strncmp(ex.text_a[0], "Amrozi accused his brother", 26) == 0, "first text a '%s'",
              ex.n ? ex.text_a[0] : "");
    TZ_EXPECT(ex.n > 0 && ex.line[0] == 2, "first row is line 2");
    data_examples_free(&ex);

    TZ_EXPECT_OK(data_glue_load(mrpc, tz_asset_path("glue-mrpc/dev.tsv"), true, &ex));
    TZ_EXPECT(ex.n == 408, "dev rows %zu", ex.n);
    count_labels(&ex, &c0, &c1, &other);
    TZ_EXPECT(c1 == 279 && c0 == 129 && other == 0, "dev labels 1:%zu 0:%zu other:%zu", c1, c0, other);
    if (ex.n) {
        TZ_EXPECT(strcmp(ex.text_a[0],
                         "He said the foodservice pie business doesn't fit the company's long-term growth strategy.") ==
                      0,
                  "dev a[0] '%s'", ex.text_a[0]);
        /* The opening quote has no closing one: only QUOTE_NONE reading keeps this right. */
        TZ_EXPECT(strcmp(ex.text_b[0], "\"The foodservice pie business does not fit our long-term growth strategy.") ==
                      0,
                  "dev b[0] '%s'", ex.text_b[0]);
    }
    data_examples_free(&ex);

    TZ_EXPECT_OK(data_glue_load(mrpc, tz_asset_path("glue-mrpc/test.tsv"), false, &ex));
    TZ_EXPECT(ex.n == 1725, "test rows %zu", ex.n);
    count_labels(&ex, &c0, &c1, &other);
    TZ_EXPECT(other == 1725 && ex.labels[0] == DATA_LABEL_NONE, "test is unlabelled");
    TZ_EXPECT(ex.n && strncmp(ex.text_a[0], "PCCW's chief operating officer", 30) == 0, "test a[0] '%s'",
              ex.n ? ex.text_a[0] : "");
    data_examples_free(&ex);
}

static void test_other_tasks(void) {
    data_examples ex;
    size_t c0, c1, other;
    const data_glue_task *t = data_glue_task_find("sst2");
    TZ_EXPECT_OK(data_glue_load(t, tz_data_path("glue-sst2/dev.tsv"), true, &ex));
    count_labels(&ex, &c0, &c1, &other);
    TZ_EXPECT(ex.n == 872 && ex.text_b == NULL && other == 0, "sst2 dev %zu rows", ex.n);
    data_examples_free(&ex);
    TZ_EXPECT_OK(data_glue_load(t, tz_data_path("glue-sst2/test.tsv"), false, &ex));
    TZ_EXPECT(ex.n == 200, "sst2 test %zu rows (the fixture's slice)", ex.n);
    TZ_EXPECT(ex.n && strcmp(ex.text_a[0], "uneasy mishmash of styles and genres .") == 0, "sst2 test a[0] '%s'",
              ex.n ? ex.text_a[0] : "");
    data_examples_free(&ex);

    t = data_glue_task_find("rte");
    TZ_EXPECT_OK(data_glue_load(t, tz_data_path("glue-rte/dev.tsv"), true, &ex));
    count_labels(&ex, &c0, &c1, &other);
    TZ_EXPECT(ex.n == 277 && other == 0 && c0 > 0 && c1 > 0, "rte dev %zu rows, %zu/%zu", ex.n, c0, c1);
    data_examples_free(&ex);
    TZ_EXPECT_OK(data_glue_load(t, tz_data_path("glue-rte/train.tsv"), true, &ex));
    TZ_EXPECT(ex.n == 300 && ex.labels[0] == 1,
              "rte train %zu rows (the fixture's slice), first label not_entailment = 1", ex.n);
    data_examples_free(&ex);

    t = data_glue_task_find("cola");
    TZ_EXPECT_OK(data_glue_load(t, tz_data_path("glue-cola/raw/in_domain_dev.tsv"), true, &ex));
    count_labels(&ex, &c0, &c1, &other);
    TZ_EXPECT(ex.n == 527 && other == 0, "cola in-domain dev %zu rows", ex.n);
    TZ_EXPECT(ex.n && strcmp(ex.text_a[0], "The sailors rode the breeze clear of the rocks.") == 0, "cola a[0] '%s'",
              ex.n ? ex.text_a[0] : "");
    TZ_EXPECT(ex.n && ex.line[0] == 1, "no header: first row is line 1");
    data_examples_free(&ex);
    TZ_EXPECT_OK(data_glue_load(t, tz_data_path("glue-cola/raw/in_domain_train.tsv"), true, &ex));
    TZ_EXPECT(ex.n == 1000, "cola train %zu rows (the fixture's slice)", ex.n);
    data_examples_free(&ex);

    t = data_glue_task_find("wnli");
    TZ_EXPECT_OK(data_glue_load(t, tz_data_path("glue-wnli/dev.tsv"), true, &ex));
    TZ_EXPECT(ex.n == 71, "wnli dev %zu rows", ex.n);
    data_examples_free(&ex);
}

static void test_bad_files(void) {
    const char *dir = tz_tmpdir();
    const data_glue_task *mrpc = data_glue_task_find("mrpc");
    data_examples ex;
    rt_status st;
    char want[600];

    const char missing[] = "\xEF\xBB\xBFQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                           "1\t1\t2\tA.\tB.\n"
                           "0\t3\t4\n";
    const char *p = write_file(dir, "missing_col.tsv", missing, sizeof missing - 1);
    st = data_glue_load(mrpc, p, true, &ex);
    snprintf(want, sizeof want, "%s:3: expected at least 5 tab-separated columns, found 3", p);
    TZ_EXPECT(st == RT_ERR_FORMAT && contains(rt_error_message(), want), "got '%s'", rt_error_message());
    TZ_EXPECT(ex.n == 0 && ex.text_a == NULL, "nothing left behind on error");

    const char nonnum[] = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n"
                          "1\t1\t2\tA.\tB.\r\n"
                          "yes\t3\t4\tC.\tD.\r\n";
    p = write_file(dir, "nonnumeric.tsv", nonnum, sizeof nonnum - 1);
    st = data_glue_load(mrpc, p, true, &ex);
    snprintf(want, sizeof want, "%s:3: field 0 (Quality): expected a mrpc label 0 or 1, found 'yes'", p);
    TZ_EXPECT(st == RT_ERR_FORMAT && contains(rt_error_message(), want), "got '%s'", rt_error_message());

    const char range[] = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n2\t1\t2\tA.\tB.\n";
    p = write_file(dir, "range.tsv", range, sizeof range - 1);
    st = data_glue_load(mrpc, p, true, &ex);
    TZ_EXPECT(st == RT_ERR_FORMAT && contains(rt_error_message(), ":2: field 0 (Quality)") &&
                  contains(rt_error_message(), "found '2'"),
              "got '%s'", rt_error_message());

    const char rte[] = "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailment\n1\tC.\tD.\tcontradiction\n";
    p = write_file(dir, "rte_bad.tsv", rte, sizeof rte - 1);
    st = data_glue_load(data_glue_task_find("rte"), p, true, &ex);
    TZ_EXPECT(st == RT_ERR_FORMAT &&
                  contains(rt_error_message(),
                           ":3: field 3 (label): expected a rte label 'entailment' or 'not_entailment', found "
                           "'contradiction'"),
              "got '%s'", rt_error_message());

    /* A Latin-1 byte in text_b (#2 String) on line 3, after a BOM and CRLF lines: the whole
     * message, file:line and the byte from the line's start. */
    const char latin1[] = "\xEF\xBB\xBFQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n"
                          "1\t1\t2\tA.\tB.\r\n"
                          "0\t3\t4\tC.\tCaf\xE9.\r\n";
    p = write_file(dir, "latin1.tsv", latin1, sizeof latin1 - 1);
    st = data_glue_load(mrpc, p, true, &ex);
    snprintf(want, sizeof want, "%s:3: invalid UTF-8 at byte 13 of the line", p);
    TZ_EXPECT(st == RT_ERR_FORMAT && strcmp(rt_error_message(), want) == 0, "got '%s', want '%s'", rt_error_message(),
              want);
    TZ_EXPECT(ex.n == 0 && ex.text_a == NULL, "nothing left behind on error");

    /* The unlabelled layout of a file that is fine: labels are -100. */
    const char ok[] = "index\tsentence1\tsentence2\n0\tA.\tB.\n\n";
    p = write_file(dir, "rte_test.tsv", ok, sizeof ok - 1);
    TZ_EXPECT_OK(data_glue_load(data_glue_task_find("rte"), p, false, &ex));
    TZ_EXPECT(ex.n == 1 && ex.labels[0] == DATA_LABEL_NONE && strcmp(ex.text_b[0], "B.") == 0, "unlabelled rte");
    data_examples_free(&ex);

    for (int i = 0; i < n_tmp_files; i++) unlink(tmp_files[i]);
    rmdir(dir);
}

int main(void) {
    test_parse_basics();
    test_utf8();
    test_mrpc();
    test_other_tasks();
    test_bad_files();
    return tz_test_result("test_data_tsv");
}
