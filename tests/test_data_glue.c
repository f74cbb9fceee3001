/* The GLUE task table beyond the binary tasks of test_data_tsv.c: every task is known and
 * loads; STS-B's real files (slices in tests/data) give float targets; CoLA's full GLUE dev set
 * is its two raw dev files read as one split; QQP, MNLI (label in the last column, two dev sets)
 * and QNLI are checked on small files in the GLUE layouts written to a temporary folder (the
 * fixtures have none of them); wrong column counts, labels outside the task's labels and missing files
 * give errors naming file:line or the files expected and where to get GLUE. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_glue.h"
#include "tests/testutil.h"

static char tmp_files[32][512];
static int n_tmp_files;

static const char *write_file(const char *dir, const char *name, const char *text) {
    char *p = tmp_files[n_tmp_files++];
    snprintf(p, sizeof tmp_files[0], "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        perror(p);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
    return p;
}

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

static void test_table(void) {
    const char *names[] = {"cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const data_glue_task *t = data_glue_task_find(names[i]);
        TZ_EXPECT(t != NULL && strcmp(t->name, names[i]) == 0, "task %s", names[i]);
        TZ_EXPECT(contains(data_glue_task_names(), names[i]), "%s listed in '%s'", names[i], data_glue_task_names());
        if (!t) continue;
        /* The single-file fields the existing programs use agree with the split lists. */
        TZ_EXPECT(t->n_dev >= 1 && t->dev_file && strcmp(t->dev_file, t->dev[0].files[0]) == 0, "%s dev_file", t->name);
        TZ_EXPECT(t->n_test >= 1 && t->test_file && strcmp(t->test_file, t->test[0].files[0]) == 0, "%s test_file",
                  t->name);
        TZ_EXPECT((t->type == DATA_TASK_REGRESSION) == (t->n_labels == 1), "%s: regression iff one label", t->name);
    }
    const data_glue_task *t = data_glue_task_find("stsb");
    TZ_EXPECT(t && t->type == DATA_TASK_REGRESSION && t->metric == DATA_METRIC_PEARSON_SPEARMAN, "stsb spec");
    t = data_glue_task_find("mnli");
    TZ_EXPECT(t && t->n_labels == 3 && t->n_dev == 2 && strcmp(t->dev[0].name, "dev_matched") == 0 &&
                  strcmp(t->dev[1].files[0], "dev_mismatched.tsv") == 0 && t->metric == DATA_METRIC_ACC,
              "mnli spec");
    t = data_glue_task_find("qqp");
    TZ_EXPECT(t && t->metric == DATA_METRIC_ACC_F1 && t->type == DATA_TASK_CLASSIFICATION, "qqp spec");
    TZ_EXPECT(data_glue_task_find("MNLI") == NULL && data_glue_task_find(NULL) == NULL, "case-sensitive, NULL");
}

static void test_stsb(void) {
    const data_glue_task *t = data_glue_task_find("stsb");
    data_examples ex;
    const char *files[] = {"glue-stsb/train.tsv", "glue-stsb/dev.tsv"};
    const size_t rows[] = {500, 300}; /* the fixtures' slices: the first rows of each file */
    const double means[] = {2.332413999999999, 2.2883266666666677}; /* of the score column, in Python */
    for (int k = 0; k < 2; k++) {
        TZ_EXPECT_OK(data_glue_load(t, tz_data_path(files[k]), true, &ex));
        TZ_EXPECT(ex.n == rows[k] && ex.targets != NULL && ex.text_b != NULL && ex.n_labels == 1, "%s: %zu rows",
                  files[k], ex.n);
        double sum = 0, lo = 1e9, hi = -1e9;
        int labels_none = 1;
        for (size_t i = 0; i < ex.n; i++) {
            sum += ex.targets[i];
            lo = fmin(lo, ex.targets[i]);
            hi = fmax(hi, ex.targets[i]);
            labels_none &= ex.labels[i] == DATA_LABEL_NONE;
        }
        TZ_EXPECT(ex.n && fabs(sum / (double)ex.n - means[k]) < 1e-6 && lo == 0.0 && hi == 5.0,
                  "%s: mean %.9f (want %.9f), range %g..%g", files[k], ex.n ? sum / (double)ex.n : 0, means[k], lo, hi);
        TZ_EXPECT(labels_none, "%s: class labels stay -100 for regression", files[k]);
        data_examples_free(&ex);
    }
    TZ_EXPECT_OK(data_glue_load(t, tz_data_path("glue-stsb/train.tsv"), true, &ex));
    if (ex.n > 1) {
        TZ_EXPECT(ex.targets[0] == 5.0f && ex.targets[1] == 3.8f, "targets %g %g", ex.targets[0], ex.targets[1]);
        TZ_EXPECT(strcmp(ex.text_a[0], "A plane is taking off.") == 0 &&
                      strcmp(ex.text_b[0], "An air plane is taking off.") == 0,
                  "stsb texts '%s' / '%s'", ex.text_a[0], ex.text_b[0]);
    }
    data_examples_free(&ex);
    TZ_EXPECT_OK(data_glue_load(t, tz_data_path("glue-stsb/test.tsv"), false, &ex));
    int all_nan = 1;
    for (size_t i = 0; i < ex.n; i++) all_nan &= isnan(ex.targets[i]) && ex.labels[i] == DATA_LABEL_NONE;
    TZ_EXPECT(ex.n == 200 && all_nan, "stsb test %zu rows, unlabelled", ex.n);
    data_examples_free(&ex);
}

static void test_real_splits(void) {
    data_examples ex;
    /* CoLA: GLUE's dev is in_domain_dev (527) + out_of_domain_dev (516, no final newline). Label counts
     * by `cut -f2 | sort | uniq -c` on the files: 367 + 354 ones, 160 + 162 zeros (SOURCES.md says 365/162
     * for the in-domain file, which the bytes do not bear out). */
    const data_glue_task *t = data_glue_task_find("cola");
    TZ_EXPECT_OK(data_glue_load_split(t, tz_data_path("glue-cola"), &t->dev[0], true, &ex));
    size_t c1 = 0, c0 = 0;
    for (size_t i = 0; i < ex.n; i++) {
        c1 += ex.labels[i] == 1;
        c0 += ex.labels[i] == 0;
    }
    TZ_EXPECT(ex.n == 1043 && c1 == 721 && c0 == 322, "cola dev %zu rows, 1:%zu 0:%zu", ex.n, c1, c0);
    if (ex.n == 1043) {
        TZ_EXPECT(strcmp(ex.text_a[0], "The sailors rode the breeze clear of the rocks.") == 0, "cola[0] '%s'",
                  ex.text_a[0]);
        TZ_EXPECT(strcmp(ex.text_a[527], "Somebody just left - guess who.") == 0 && ex.line[527] == 1,
                  "cola[527] '%s' line %d", ex.text_a[527], ex.line[527]);
        TZ_EXPECT(strcmp(ex.text_a[1042], ex.text_a[1042]) == 0 && ex.line[1042] == 516, "last row line %d",
                  ex.line[1042]);
        TZ_EXPECT(contains(data_examples_row_path(&ex, 526), "in_domain_dev.tsv") &&
                      contains(data_examples_row_path(&ex, 527), "out_of_domain_dev.tsv"),
                  "row paths '%s' '%s'", data_examples_row_path(&ex, 526), data_examples_row_path(&ex, 527));
        TZ_EXPECT(contains(ex.path, "in_domain_dev.tsv + ") && contains(ex.path, "out_of_domain_dev.tsv"), "path '%s'",
                  ex.path);
    }
    data_examples_free(&ex);
    /* dev_file alone keeps its old meaning: the in-domain file. */
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", tz_data_path("glue-cola"), t->dev_file);
    TZ_EXPECT_OK(data_glue_load(t, p, true, &ex));
    TZ_EXPECT(ex.n == 527 && ex.n_files == 1 && strcmp(data_examples_row_path(&ex, 3), p) == 0, "cola dev_file %zu",
              ex.n);
    data_examples_free(&ex);

    /* One-file splits of the other real tasks, through the split API. */
    const struct {
        const char *task;
        size_t dev_rows;
    } real[] = {{"sst2", 872}, {"mrpc", 408}, {"rte", 277}, {"wnli", 71}, {"stsb", 300}};
    for (size_t k = 0; k < sizeof real / sizeof real[0]; k++) {
        t = data_glue_task_find(real[k].task);
        char dir[64];
        snprintf(dir, sizeof dir, "glue-%s", real[k].task);
        TZ_EXPECT_OK(data_glue_load_split(t, strcmp(real[k].task, "mrpc") == 0 ? tz_asset_path(dir) : tz_data_path(dir),
                                          &t->dev[0], true, &ex));
        TZ_EXPECT(ex.n == real[k].dev_rows, "%s dev %zu rows", real[k].task, ex.n);
        data_examples_free(&ex);
    }
    t = data_glue_task_find("sst2");
    TZ_EXPECT_OK(data_glue_load(t, tz_data_path("glue-sst2/train.tsv"), true, &ex));
    c1 = c0 = 0;
    for (size_t i = 0; i < ex.n; i++) {
        c1 += ex.labels[i] == 1;
        c0 += ex.labels[i] == 0;
    }
    TZ_EXPECT(ex.n == 2000 && c1 == 1101 && c0 == 899, "sst2 train %zu rows 1:%zu 0:%zu", ex.n, c1, c0);
    data_examples_free(&ex);
    TZ_EXPECT_OK(data_glue_check_dir(data_glue_task_find("stsb"), tz_data_path("glue-stsb")));
    TZ_EXPECT_OK(data_glue_check_dir(data_glue_task_find("cola"), tz_data_path("glue-cola")));
}

/* GLUE's MNLI header, and rows of it: the label is the last field. */
#define MNLI_HEAD10                                                                                                    \
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse" \
    "\tsentence1\tsentence2"

static void test_synthetic(const char *dir) {
    data_examples ex;
    rt_status st;
    char want[1024];

    /* QQP */
    const data_glue_task *qqp = data_glue_task_find("qqp");
    write_file(dir, "qqp/train.tsv",
               "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
               "0\t1\t2\tHow do I learn C?\tWhat is the best way to learn C?\t1\n"
               "1\t3\t4\tWhy is the sky blue?\tHow tall is Everest?\t0\n");
    write_file(dir, "qqp/dev.tsv",
               "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
               "7\t10\t11\tIs \"this\" quoted?\tIs this quoted?\t1\n");
    write_file(dir, "qqp/test.tsv", "id\tquestion1\tquestion2\n0\tQ one?\tQ two?\n");
    char qdir[600];
    snprintf(qdir, sizeof qdir, "%s/qqp", dir);
    TZ_EXPECT_OK(data_glue_check_dir(qqp, qdir));
    char path[700];
    snprintf(path, sizeof path, "%s/%s", qdir, qqp->train_file);
    TZ_EXPECT_OK(data_glue_load(qqp, path, true, &ex));
    TZ_EXPECT(ex.n == 2 && ex.labels[0] == 1 && ex.labels[1] == 0 && strcmp(ex.text_a[0], "How do I learn C?") == 0 &&
                  strcmp(ex.text_b[1], "How tall is Everest?") == 0 && ex.targets == NULL,
              "qqp train");
    data_examples_free(&ex);
    TZ_EXPECT_OK(data_glue_load_split(qqp, qdir, &qqp->dev[0], true, &ex));
    TZ_EXPECT(ex.n == 1 && strcmp(ex.text_a[0], "Is \"this\" quoted?") == 0 && ex.labels[0] == 1, "qqp dev");
    data_examples_free(&ex);
    TZ_EXPECT_OK(data_glue_load_split(qqp, qdir, &qqp->test[0], false, &ex));
    TZ_EXPECT(ex.n == 1 && strcmp(ex.text_a[0], "Q one?") == 0 && strcmp(ex.text_b[0], "Q two?") == 0 &&
                  ex.labels[0] == DATA_LABEL_NONE,
              "qqp test");
    data_examples_free(&ex);
    /* A label outside 0..1 */
    const char *bad = write_file(dir, "qqp/bad_label.tsv",
                                 "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                                 "0\t1\t2\tA?\tB?\t1\n"
                                 "1\t3\t4\tC?\tD?\t2\n");
    st = data_glue_load(qqp, bad, true, &ex);
    snprintf(want, sizeof want, "%s:3: field 5 (is_duplicate): expected a qqp label 0 or 1, found '2'", bad);
    TZ_EXPECT(st == RT_ERR_FORMAT && contains(rt_error_message(), want), "got '%s'", rt_error_message());

    /* MNLI: train has label1 and gold_label, dev five annotator labels then gold_label. */
    const data_glue_task *mnli = data_glue_task_find("mnli");
    write_file(dir, "mnli/train.tsv",
               MNLI_HEAD10
               "\tlabel1\tgold_label\n"
               "0\t1\t1e\tfiction\t( A )\t( B )\t(ROOT A)\t(ROOT B)\tA man sleeps.\tA person rests.\tentailment\t"
               "entailment\n"
               "1\t2\t2n\tslate\tx\ty\tx\ty\tIt rains.\tThe game is off.\tneutral\tneutral\n"
               "2\t3\t3c\tgovernment\tx\ty\tx\ty\tShe left.\tShe stayed.\tcontradiction\tcontradiction\n");
    write_file(dir, "mnli/dev_matched.tsv",
               MNLI_HEAD10
               "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
               "0\t9\t9n\ttelephone\tx\ty\tx\ty\tP one.\tH one.\tneutral\tneutral\tentailment\tneutral\tneutral\t"
               "neutral\n"
               "1\t8\t8c\tslate\tx\ty\tx\ty\tP two.\tH two.\tcontradiction\tcontradiction\tcontradiction\t"
               "contradiction\tcontradiction\tcontradiction\n");
    write_file(dir, "mnli/dev_mismatched.tsv",
               MNLI_HEAD10 "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
                           "0\t7\t7e\tletters\tx\ty\tx\ty\tP three.\tH three.\tentailment\tentailment\tentailment\t"
                           "neutral\tentailment\tentailment\n");
    write_file(dir, "mnli/test_matched.tsv", MNLI_HEAD10 "\n0\t1\t1\tfiction\tx\ty\tx\ty\tT a.\tT b.\n");
    char mdir[600];
    snprintf(mdir, sizeof mdir, "%s/mnli", dir);
    TZ_EXPECT_OK(data_glue_check_dir(mnli, mdir));
    snprintf(path, sizeof path, "%s/train.tsv", mdir);
    TZ_EXPECT_OK(data_glue_load(mnli, path, true, &ex));
    TZ_EXPECT(ex.n == 3 && ex.labels[0] == 0 && ex.labels[1] == 1 && ex.labels[2] == 2 &&
                  strcmp(ex.text_a[2], "She left.") == 0 && strcmp(ex.text_b[2], "She stayed.") == 0,
              "mnli train: entailment 0, neutral 1, contradiction 2 (HF order)");
    data_examples_free(&ex);
    TZ_EXPECT_OK(data_glue_load_split(mnli, mdir, &mnli->dev[0], true, &ex));
    TZ_EXPECT(ex.n == 2 && ex.labels[0] == 1 && ex.labels[1] == 2 && strcmp(ex.text_a[1], "P two.") == 0,
              "mnli dev_matched: gold_label from column 15");
    data_examples_free(&ex);
    TZ_EXPECT_OK(data_glue_load_split(mnli, mdir, &mnli->dev[1], true, &ex));
    TZ_EXPECT(ex.n == 1 && ex.labels[0] == 0 && strcmp(ex.text_b[0], "H three.") == 0, "mnli dev_mismatched");
    data_examples_free(&ex);
    TZ_EXPECT_OK(data_glue_load_split(mnli, mdir, &mnli->test[0], false, &ex));
    TZ_EXPECT(ex.n == 1 && strcmp(ex.text_a[0], "T a.") == 0 && ex.labels[0] == DATA_LABEL_NONE, "mnli test");
    data_examples_free(&ex);
    /* A dev row missing one annotator field: the last field would be a wrong label column. */
    bad =
        write_file(dir, "mnli/short_row.tsv",
                   MNLI_HEAD10 "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
                               "0\t9\t9n\tx\tx\ty\tx\ty\tP.\tH.\tneutral\tneutral\tneutral\tneutral\tneutral\tneutral\n"
                               "1\t9\t9n\tx\tx\ty\tx\ty\tP.\tH.\tneutral\tneutral\tneutral\tneutral\tneutral\n");
    st = data_glue_load(mnli, bad, true, &ex);
    snprintf(want, sizeof want, "%s:3: expected 16 tab-separated columns (as in the header), found 15", bad);
    TZ_EXPECT(st == RT_ERR_FORMAT && contains(rt_error_message(), want), "got '%s'", rt_error_message());
    bad = write_file(dir, "mnli/bad_label.tsv",
                     MNLI_HEAD10 "\tlabel1\tgold_label\n0\t1\t1\tx\tx\ty\tx\ty\tA.\tB.\t-\t-\n");
    st = data_glue_load(mnli, bad, true, &ex);
    snprintf(want, sizeof want,
             "%s:2: field 11 (gold_label): expected a mnli label 'entailment', 'neutral' or 'contradiction', found '-'",
             bad);
    TZ_EXPECT(st == RT_ERR_FORMAT && contains(rt_error_message(), want), "got '%s'", rt_error_message());

    /* QNLI */
    const data_glue_task *qnli = data_glue_task_find("qnli");
    write_file(dir, "qnli/train.tsv",
               "index\tquestion\tsentence\tlabel\n"
               "0\tWhen did it open?\tIt opened in 1901.\tentailment\n"
               "1\tWho built it?\tThe roof is red.\tnot_entailment\n");
    write_file(dir, "qnli/dev.tsv", "index\tquestion\tsentence\tlabel\n0\tQ?\tS.\tnot_entailment\n");
    char ndir[600];
    snprintf(ndir, sizeof ndir, "%s/qnli", dir);
    TZ_EXPECT_OK(data_glue_check_dir(qnli, ndir));
    snprintf(path, sizeof path, "%s/train.tsv", ndir);
    TZ_EXPECT_OK(data_glue_load(qnli, path, true, &ex));
    TZ_EXPECT(ex.n == 2 && ex.labels[0] == 0 && ex.labels[1] == 1 && strcmp(ex.text_b[0], "It opened in 1901.") == 0,
              "qnli train");
    data_examples_free(&ex);
    /* Wrong column count. */
    bad = write_file(dir, "qnli/short.tsv", "index\tquestion\tsentence\tlabel\n0\tQ?\tS.\tentailment\n1\tQ?\tS.\n");
    st = data_glue_load(qnli, bad, true, &ex);
    snprintf(want, sizeof want, "%s:3: expected at least 4 tab-separated columns, found 3", bad);
    TZ_EXPECT(st == RT_ERR_FORMAT && contains(rt_error_message(), want), "got '%s'", rt_error_message());

    /* STS-B scores: out of range, not a number. */
    const data_glue_task *stsb = data_glue_task_find("stsb");
    const char *sts_head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n";
    char text[1024];
    snprintf(text, sizeof text, "%s0\tg\tf\ty\t1\tnone\tnone\tA.\tB.\t2.5\n1\tg\tf\ty\t2\tnone\tnone\tC.\tD.\t5.5\n",
             sts_head);
    bad = write_file(dir, "stsb_range.tsv", text);
    st = data_glue_load(stsb, bad, true, &ex);
    snprintf(want, sizeof want, "%s:3: field 9 (score): expected a stsb label number in [0, 5], found '5.5'", bad);
    TZ_EXPECT(st == RT_ERR_FORMAT && contains(rt_error_message(), want), "got '%s'", rt_error_message());
    snprintf(text, sizeof text, "%s0\tg\tf\ty\t1\tnone\tnone\tA.\tB.\thigh\n", sts_head);
    bad = write_file(dir, "stsb_word.tsv", text);
    st = data_glue_load(stsb, bad, true, &ex);
    TZ_EXPECT(st == RT_ERR_FORMAT && contains(rt_error_message(), ":2: field 9 (score)") &&
                  contains(rt_error_message(), "found 'high'"),
              "got '%s'", rt_error_message());
}

static void test_missing(const char *dir) {
    data_examples ex;
    char d[700];
    /* A missing task folder. */
    snprintf(d, sizeof d, "%s/no-such-glue-mnli", dir);
    rt_status st = data_glue_check_dir(data_glue_task_find("mnli"), d);
    const char *m = rt_error_message();
    TZ_EXPECT(st == RT_ERR_IO && contains(m, d) && contains(m, "not found") &&
                  contains(m, "train.tsv, dev_matched.tsv, dev_mismatched.tsv") &&
                  contains(m, "test_matched.tsv, test_mismatched.tsv") && contains(m, "gluebenchmark.com") &&
                  contains(m, "Hugging Face datasets") && contains(m, "'glue'"),
              "got '%s'", m);
    /* data_glue_load on a file of a missing folder names the folder. */
    char p[800];
    snprintf(p, sizeof p, "%s/raw/in_domain_train.tsv", d);
    st = data_glue_load(data_glue_task_find("cola"), p, true, &ex);
    m = rt_error_message();
    TZ_EXPECT(st == RT_ERR_IO && contains(m, d) && !contains(m, "/raw:") &&
                  contains(m, "raw/in_domain_train.tsv, raw/in_domain_dev.tsv, raw/out_of_domain_dev.tsv") &&
                  contains(m, "CoLA"),
              "got '%s'", m);
    /* The folder exists but a dev file is missing (qnli has no dev... here: remove it). */
    snprintf(d, sizeof d, "%s/qqp", dir);
    snprintf(p, sizeof p, "%s/dev.tsv", d);
    unlink(p);
    st = data_glue_check_dir(data_glue_task_find("qqp"), d);
    m = rt_error_message();
    TZ_EXPECT(st == RT_ERR_IO && contains(m, p) && contains(m, "qqp") && contains(m, "train.tsv, dev.tsv"), "got '%s'",
              m);
    st = data_glue_load_split(data_glue_task_find("qqp"), d, &data_glue_task_find("qqp")->dev[0], true, &ex);
    TZ_EXPECT(st == RT_ERR_IO && contains(rt_error_message(), p) && ex.n == 0, "got '%s'", rt_error_message());
}

/* GLUE's CoLA folder (train.tsv, dev.tsv in the raw layout, dev already joined) loads as the
 * release layout does: the same rows. */
static void copy_file(const char *from, const char *to, bool append) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, append ? "ab" : "wb");
    char buf[65536];
    size_t n;
    while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    if (in) fclose(in);
    if (out) fclose(out);
}

static void test_cola_glue_layout(const char *dir) {
    char sub[700], from[1024], to[1024];
    snprintf(sub, sizeof sub, "%s/cola_glue", dir);
    mkdir(sub, 0755);
    const char *raw = tz_data_path("glue-cola");
    char rawdir[1024];
    snprintf(rawdir, sizeof rawdir, "%s", raw);
    snprintf(from, sizeof from, "%s/raw/in_domain_train.tsv", rawdir);
    snprintf(to, sizeof to, "%s/train.tsv", sub);
    copy_file(from, to, false);
    snprintf(from, sizeof from, "%s/raw/in_domain_dev.tsv", rawdir);
    snprintf(to, sizeof to, "%s/dev.tsv", sub);
    copy_file(from, to, false);
    snprintf(from, sizeof from, "%s/raw/out_of_domain_dev.tsv", rawdir);
    copy_file(from, to, true);
    const data_glue_task *release = data_glue_task_find("cola");
    const data_glue_task *glue = data_glue_task_for_dir(release, sub);
    TZ_EXPECT(glue != release && strcmp(glue->train_file, "train.tsv") == 0, "GLUE layout picked");
    TZ_EXPECT(data_glue_task_for_dir(release, rawdir) == release, "release layout kept");
    TZ_EXPECT(data_glue_task_for_dir(data_glue_task_find("mrpc"), sub) == data_glue_task_find("mrpc"), "others kept");
    TZ_EXPECT_OK(data_glue_check_dir(glue, sub));
    data_examples a, b;
    TZ_EXPECT_OK(data_glue_load_split(glue, sub, &glue->dev[0], true, &a));
    TZ_EXPECT_OK(data_glue_load_split(release, rawdir, &release->dev[0], true, &b));
    TZ_EXPECT(a.n == b.n && a.n == 1043, "dev rows %zu %zu", a.n, b.n);
    for (size_t i = 0; i < a.n && a.n == b.n; i++)
        if (a.labels[i] != b.labels[i] || strcmp(a.text_a[i], b.text_a[i]) != 0) {
            TZ_EXPECT(0, "row %zu differs", i);
            break;
        }
    data_examples_free(&a);
    data_examples_free(&b);
    snprintf(to, sizeof to, "%s/train.tsv", sub);
    unlink(to);
    snprintf(to, sizeof to, "%s/dev.tsv", sub);
    unlink(to);
    rmdir(sub);
}

int main(void) {
    test_table();
    test_stsb();
    test_real_splits();
    const char *dir = tz_tmpdir();
    char sub[600];
    const char *subs[] = {"qqp", "mnli", "qnli"};
    for (int i = 0; i < 3; i++) {
        snprintf(sub, sizeof sub, "%s/%s", dir, subs[i]);
        mkdir(sub, 0755);
    }
    test_synthetic(dir);
    test_missing(dir);
    test_cola_glue_layout(dir);
    for (int i = 0; i < n_tmp_files; i++) unlink(tmp_files[i]);
    for (int i = 0; i < 3; i++) {
        snprintf(sub, sizeof sub, "%s/%s", dir, subs[i]);
        rmdir(sub);
    }
    rmdir(dir);
    return tz_test_result("test_data_glue");
}
