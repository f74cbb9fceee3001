/* The RFC 4180 reader (data/data_csv.h): quoted fields holding the delimiter, a newline and
 * doubled quotes; CRLF records; a BOM; blank lines skipped; a trailing empty field; TSV with
 * quotes; and each error naming file, line and column: a quote never closed, text after a closing
 * quote, a record with another field count than the header, invalid UTF-8, a NUL, no header. */
#include <stdio.h>
#include <string.h>

#include "data/data_csv.h"
#include "tests/testutil.h"

static void expect_table(const char *what, const char *text, char delim, int cols, size_t rows,
                         const char *const *cells, const size_t *lines) {
    data_tsv t;
    rt_status st = data_csv_parse(what, text, strlen(text), delim, &t);
    TZ_EXPECT_OK(st);
    if (st != RT_OK) return;
    TZ_EXPECT(t.n_header == cols && t.n_rows == rows, "%s: %d columns and %zu rows, want %d and %zu", what, t.n_header,
              t.n_rows, cols, rows);
    for (int c = 0; c < cols && c < t.n_header; c++)
        TZ_EXPECT(strcmp(t.header[c], cells[c]) == 0, "%s: header %d '%s', want '%s'", what, c, t.header[c], cells[c]);
    for (size_t r = 0; r < rows && r < t.n_rows; r++) {
        TZ_EXPECT(t.row_line[r] == lines[r], "%s: row %zu starts on line %zu, want %zu", what, r, t.row_line[r],
                  lines[r]);
        for (int c = 0; c < cols; c++) {
            const char *got = data_tsv_field(&t, r, c), *want = cells[(r + 1) * (size_t)cols + (size_t)c];
            TZ_EXPECT(got && strcmp(got, want) == 0, "%s: row %zu column %d '%s', want '%s'", what, r, c,
                      got ? got : "(none)", want);
        }
    }
    data_tsv_free(&t);
}

static void expect_error(const char *what, const char *text, size_t len, char delim, const char *needle) {
    data_tsv t;
    rt_status st = data_csv_parse(what, text, len, delim, &t);
    TZ_EXPECT(st == RT_ERR_FORMAT && strstr(rt_error_message(), needle), "%s: %s '%s', want '%s'", what,
              rt_status_name(st), rt_error_message(), needle);
}

int main(void) {
    {
        static const char *const cells[] = {"text", "label",      "a, b", "pos", "say \"hi\"",
                                            "neg",  "two\nlines", "pos",  "",    "neg"};
        static const size_t lines[] = {2, 3, 4, 7};
        expect_table("quoted.csv", "text,label\n\"a, b\",pos\n\"say \"\"hi\"\"\",neg\n\"two\nlines\",pos\n\n,neg\n",
                     ',', 2, 4, cells, lines);
    }
    {
        static const char *const cells[] = {"a", "b", "c", "1", "2", "", "x", "y", "z"};
        static const size_t lines[] = {2, 4};
        expect_table("crlf.csv",
                     "\xEF\xBB\xBF"
                     "a,b,c\r\n1,2,\r\n\r\nx,y,z",
                     ',', 3, 2, cells, lines);
    }
    {
        static const char *const cells[] = {"sentence", "label", "tab\there", "1", "plain \"quote", "0"};
        static const size_t lines[] = {2, 3};
        expect_table("quoted.tsv", "sentence\tlabel\n\"tab\there\"\t1\nplain \"quote\t0\n", '\t', 2, 2, cells, lines);
    }
    {
        static const char *const cells[] = {"only"};
        expect_table("header-only.csv", "only\n", ',', 1, 0, cells, NULL);
    }
    expect_error("open.csv", "a,b\n1,\"never\nclosed\n", 20, ',',
                 "open.csv:2: column 2: a quoted field opened here is never closed");
    expect_error("after.csv", "a,b\n\"x\"y,2\n", 11, ',', "after.csv:2: column 1: text after the closing quote");
    expect_error("short.csv", "a,b,c\n1,2,3\n4,5\n", 16, ',', "short.csv:3: 2 fields, the header has 3");
    expect_error("long.csv", "a,b\n1,2,3\n", 10, ',', "long.csv:2: 3 fields, the header has 2");
    expect_error("utf8.csv", "a,b\n1,\xff\n", 8, ',', "utf8.csv:2: invalid UTF-8");
    expect_error("nul.csv", "a,b\n1,x\0y\n", 10, ',', "nul.csv:2: NUL byte");
    expect_error("empty.csv", "", 0, ',', "empty.csv: no header row");
    /* a file: data_csv_read */
    char path[600];
    snprintf(path, sizeof path, "%s/f.csv", tz_tmpdir());
    tz_write_file(path, "q,a\n\"x,y\",1\n", 12);
    data_tsv t;
    TZ_EXPECT_OK(data_csv_read(path, ',', &t));
    TZ_EXPECT(t.n_rows == 1 && strcmp(data_tsv_field(&t, 0, 0), "x,y") == 0, "data_csv_read");
    data_tsv_free(&t);
    return tz_test_result("test_data_csv");
}
