/* Seq2seq data: line files (BOM, CRLF, bad UTF-8, empty file, count mismatch), the same files
 * read in pieces of every size (data_lines_reader: the same lines and line numbers), lower-casing,
 * T5 source/target encoding with truncation and </s>, the seq2seq collator (labels padded with
 * -100) and the seq2seq loader. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_collate.h"
#include "data/data_loader.h"
#include "data/data_seq2seq.h"
#include "tests/testutil.h"
#include "tokenizers/tok.h"

static void test_lines(void) {
    data_lines l;
    const char text[] = "\xEF\xBB\xBFone\r\ntwo\n\nf\xC3\xBCnf\n";
    TZ_EXPECT_OK(data_lines_parse("mem", text, sizeof text - 1, &l));
    TZ_EXPECT(l.n == 4, "lines %zu", l.n);
    if (l.n == 4) {
        TZ_EXPECT(strcmp(l.line[0], "one") == 0, "BOM and CR dropped: '%s'", l.line[0]);
        TZ_EXPECT(strcmp(l.line[1], "two") == 0 && l.line[2][0] == '\0', "'%s' '%s'", l.line[1], l.line[2]);
        TZ_EXPECT(strcmp(l.line[3], "f\xC3\xBCnf") == 0, "'%s'", l.line[3]);
    }
    data_lines_free(&l);
    /* no final newline: the last line still counts */
    TZ_EXPECT_OK(data_lines_parse("mem", "a\nb", 3, &l));
    TZ_EXPECT(l.n == 2 && strcmp(l.line[1], "b") == 0, "n=%zu", l.n);
    data_lines_free(&l);

    const char bad[] = "ok\nbad \xC3\x28 here\n";
    rt_status st = data_lines_parse("x.src", bad, sizeof bad - 1, &l);
    TZ_EXPECT(st == RT_ERR_FORMAT && strstr(rt_error_message(), "x.src:2") &&
                  strstr(rt_error_message(), "invalid UTF-8 at byte 5"),
              "%s", rt_error_message());
    st = data_lines_parse("e.src", "", 0, &l);
    TZ_EXPECT(st == RT_ERR_FORMAT && strstr(rt_error_message(), "e.src") && strstr(rt_error_message(), "empty"), "%s",
              rt_error_message());

    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/a.src", tz_tmpdir());
    snprintf(b, sizeof b, "%s/a.tgt", tz_tmpdir());
    tz_write_file(a, "x\ny\nz\n", 6);
    tz_write_file(b, "1\n2\n", 4);
    data_lines s, t;
    st = data_lines_read_pair(a, b, &s, &t);
    TZ_EXPECT(st == RT_ERR_FORMAT && strstr(rt_error_message(), "a.src has 3 lines but") &&
                  strstr(rt_error_message(), "a.tgt has 2"),
              "%s", rt_error_message());
    st = data_lines_read("/nonexistent/dir/f.txt", &s);
    TZ_EXPECT(st == RT_ERR_IO && strstr(rt_error_message(), "/nonexistent/dir/f.txt"), "%s", rt_error_message());
}

/* Reads path in pieces of chunk bytes; the lines joined with '|' into out (or the error). */
static rt_status read_pieces(const char *path, size_t chunk, char *out, size_t cap) {
    data_lines_reader r;
    rt_status st = data_lines_reader_open(path, &r);
    out[0] = '\0';
    size_t expect_first = 1;
    while (st == RT_OK) {
        data_lines l;
        bool end = false;
        st = data_lines_reader_next(&r, chunk, &l, &end);
        if (st != RT_OK || end) break;
        TZ_EXPECT(l.first_line == expect_first && l.n > 0, "chunk %zu: first line %zu, expected %zu", chunk,
                  l.first_line, expect_first);
        expect_first += l.n;
        for (size_t i = 0; i < l.n; i++) {
            strncat(out, l.line[i], cap - strlen(out) - 1);
            strncat(out, "|", cap - strlen(out) - 1);
        }
        data_lines_free(&l);
    }
    data_lines_reader_close(&r);
    return st;
}

static void test_lines_in_pieces(void) {
    char path[512], got[512];
    snprintf(path, sizeof path, "%s/pieces.txt", tz_tmpdir());
    const char text[] = "\xEF\xBB\xBF"
                        "first\r\nsecond line that is long\n\nthird\xC3\xA9\nlast";
    tz_write_file(path, text, sizeof text - 1);
    for (size_t chunk = 1; chunk <= sizeof text + 2; chunk++) {
        TZ_EXPECT_OK(read_pieces(path, chunk, got, sizeof got));
        TZ_EXPECT(strcmp(got, "first|second line that is long||third\xC3\xA9|last|") == 0, "chunk %zu: %s", chunk, got);
    }
    /* bad UTF-8 on line 4: named by its number in the file whatever the piece */
    const char bad[] = "a\nb\nc\nd\xFF\ne\n";
    tz_write_file(path, bad, sizeof bad - 1);
    for (size_t chunk = 1; chunk <= sizeof bad; chunk++)
        TZ_EXPECT(read_pieces(path, chunk, got, sizeof got) == RT_ERR_FORMAT && strstr(rt_error_message(), ":4"),
                  "chunk %zu: %s", chunk, rt_error_message());
    tz_write_file(path, "", 0);
    TZ_EXPECT(read_pieces(path, 4, got, sizeof got) == RT_ERR_FORMAT && strstr(rt_error_message(), "empty"),
              "an empty file: %s", rt_error_message());
    tz_write_file(path, "\xEF\xBB\xBF", 3);
    TZ_EXPECT(read_pieces(path, 4, got, sizeof got) == RT_ERR_FORMAT && strstr(rt_error_message(), "empty"),
              "a BOM alone: %s", rt_error_message());
    snprintf(path, sizeof path, "%s/absent.txt", tz_tmpdir());
    TZ_EXPECT(read_pieces(path, 4, got, sizeof got) == RT_ERR_IO && strstr(rt_error_message(), "absent.txt"),
              "a missing file: %s", rt_error_message());
    TZ_EXPECT(read_pieces(tz_tmpdir(), 4, got, sizeof got) == RT_ERR_IO && strstr(rt_error_message(), "directory"),
              "a directory: %s", rt_error_message());
    data_lines whole;
    TZ_EXPECT(data_lines_read(tz_tmpdir(), &whole) == RT_ERR_IO && strstr(rt_error_message(), "directory"),
              "a directory, read whole: %s", rt_error_message());
}

static void test_lowercase(void) {
    char *out = NULL;
    const char in[] = "Eine GRUPPE von M\xC3\x84NNERN \xC3\x9C"
                      "ber ABC";
    TZ_EXPECT_OK(tok_lowercase(in, strlen(in), &out));
    TZ_EXPECT(out && strcmp(out, "eine gruppe von m\xC3\xA4nnern \xC3\xBC"
                                 "ber abc") == 0,
              "'%s'", out);
    free(out);
}

static void test_encode_and_collate(void) {
    tok_tokenizer *tok = NULL;
    TZ_EXPECT_OK(tok_load(tz_source_path("assets/t5-spiece/spiece.model"), &tok));
    if (!tok) return;
    tok_ids ids = {0};
    bool cut = true;
    /* "translate English to German: The house is wonderful." = 13959 1566 12 2968 10 37 629 19 1627 5 (SOURCES.md) */
    TZ_EXPECT_OK(
        data_seq2seq_encode(tok, "translate English to German: ", false, "The house is wonderful.", 64, &ids, &cut));
    const int32_t want[] = {13959, 1566, 12, 2968, 10, 37, 629, 19, 1627, 5, 1};
    TZ_EXPECT(ids.n == 11 && !cut && memcmp(ids.ids, want, sizeof want) == 0, "n=%zu", ids.n);
    TZ_EXPECT_OK(
        data_seq2seq_encode(tok, "translate English to German: ", false, "The house is wonderful.", 4, &ids, &cut));
    TZ_EXPECT(ids.n == 4 && cut && ids.ids[0] == 13959 && ids.ids[2] == 12 && ids.ids[3] == 1,
              "truncated to 3 + </s>: n=%zu", ids.n);
    /* lower-casing happens before the tokenizer: "HELLO world" encodes as "hello world" */
    tok_ids low = {0};
    TZ_EXPECT_OK(data_seq2seq_encode(tok, NULL, true, "HELLO World", 16, &ids, &cut));
    TZ_EXPECT_OK(data_seq2seq_encode(tok, NULL, false, "hello world", 16, &low, &cut));
    TZ_EXPECT(ids.n == low.n && memcmp(ids.ids, low.ids, ids.n * sizeof(int32_t)) == 0, "lowercase");
    tok_ids_free(&low);
    tok_ids_free(&ids);

    data_lines src, tgt;
    const char s_text[] = "A man sleeps.\nTwo dogs run in the green park.\nHi\n";
    const char t_text[] = "Ein Mann schl\xC3\xA4"
                          "ft.\nZwei Hunde.\nHallo Welt, wie geht es dir heute?\n";
    TZ_EXPECT_OK(data_lines_parse("s", s_text, sizeof s_text - 1, &src));
    TZ_EXPECT_OK(data_lines_parse("t", t_text, sizeof t_text - 1, &tgt));
    data_seq2seq_opts o = {.source_prefix = "translate English to German: ", .max_source_len = 12, .max_target_len = 6};
    data_tokenized ds = {0}, dt = {0};
    TZ_EXPECT_OK(data_seq2seq_tokenize(&src, &tgt, 0, 3, tok, &o, &ds, &dt));
    TZ_EXPECT(ds.n == 3 && dt.n == 3, "rows");
    for (size_t i = 0; i < ds.n; i++) {
        TZ_EXPECT(ds.lengths[i] <= 12 && ds.ids[ds.offsets[i + 1] - 1] == 1, "source %zu ends with </s>", i);
        TZ_EXPECT(dt.lengths[i] <= 6 && dt.ids[dt.offsets[i + 1] - 1] == 1, "target %zu ends with </s>", i);
    }
    /* n_truncated counts the rows whose full encoding is longer than the limit */
    size_t want_cut_s = 0, want_cut_t = 0;
    for (size_t i = 0; i < 3; i++) {
        tok_ids full = {0};
        TZ_EXPECT_OK(data_seq2seq_encode(tok, o.source_prefix, false, src.line[i], 1000, &full, &cut));
        want_cut_s += full.n > 12;
        TZ_EXPECT_OK(data_seq2seq_encode(tok, NULL, false, tgt.line[i], 1000, &full, &cut));
        want_cut_t += full.n > 6;
        tok_ids_free(&full);
    }
    TZ_EXPECT(want_cut_s >= 1 && want_cut_t >= 1, "the example truncates on both sides");
    TZ_EXPECT(ds.n_truncated == want_cut_s && dt.n_truncated == want_cut_t, "truncated %zu %zu, want %zu %zu",
              ds.n_truncated, dt.n_truncated, want_cut_s, want_cut_t);

    rt_batch b = {0};
    int32_t idx[2] = {2, 0};
    TZ_EXPECT_OK(data_collate_seq2seq(&ds, &dt, idx, 2, 0, &(data_pad){.multiple = 1}, &b));
    int want_T = ds.lengths[2] > ds.lengths[0] ? ds.lengths[2] : ds.lengths[0];
    int want_Td = dt.lengths[2] > dt.lengths[0] ? dt.lengths[2] : dt.lengths[0];
    TZ_EXPECT(b.B == 2 && b.T == want_T && b.T_dec == want_Td, "B=%d T=%d T_dec=%d", b.B, b.T, b.T_dec);
    TZ_EXPECT(b.n_targets == dt.lengths[2] + dt.lengths[0], "n_targets %d", b.n_targets);
    for (int r = 0; r < 2; r++) {
        int len = dt.lengths[idx[r]];
        for (int t = 0; t < b.T_dec; t++) {
            int32_t want_id = t < len ? dt.ids[dt.offsets[idx[r]] + (size_t)t] : -100;
            TZ_EXPECT(b.dec_labels[r * b.T_dec + t] == want_id, "row %d label %d", r, t);
        }
        int slen = ds.lengths[idx[r]];
        for (int t = 0; t < b.T; t++) {
            TZ_EXPECT(b.attention_mask[r * b.T + t] == (t < slen), "row %d mask %d", r, t);
            if (t >= slen) TZ_EXPECT(b.input_ids[r * b.T + t] == 0, "row %d source pad %d", r, t);
        }
    }
    /* the loader pairs rows the same way, and covers every row once per epoch */
    data_loader *l = NULL;
    data_sampler_opts so = {.seed = 3, .shuffle = true, .rank = 0, .world = 1};
    TZ_EXPECT_OK(data_loader_init_seq2seq(&ds, &dt, &so, 2, 0, &(data_pad){.multiple = 8}, &l));
    if (l) {
        rt_train_data td = data_loader_train_data(l);
        rt_batch lb = {0};
        bool end = false;
        int seen = 0, mask = 0;
        for (int guard = 0; guard < 10; guard++) {
            TZ_EXPECT_OK(td.next(td.ctx, &lb, &end));
            if (end) break;
            TZ_EXPECT(lb.T % 8 == 0 && lb.T_dec % 8 == 0, "pad to 8: %d %d", lb.T, lb.T_dec);
            for (int r = 0; r < lb.B; r++) {
                int32_t i = lb.example_index[r];
                mask |= 1 << i;
                seen++;
                TZ_EXPECT(memcmp(lb.dec_labels + (size_t)r * lb.T_dec, dt.ids + dt.offsets[i],
                                 (size_t)dt.lengths[i] * sizeof(int32_t)) == 0,
                          "row %d carries example %d's target", r, i);
            }
        }
        TZ_EXPECT(seen == 3 && mask == 7, "epoch covers 3 rows: %d %x", seen, mask);
        data_batch_free(&lb);
    }
    data_loader_free(l);
    /* mismatched sets are refused */
    data_tokenized two = {0}, two_t = {0};
    TZ_EXPECT_OK(data_seq2seq_tokenize(&src, &tgt, 0, 2, tok, &o, &two, &two_t));
    rt_status st = data_loader_init_seq2seq(&ds, &two, &so, 2, 0, &(data_pad){.multiple = 1}, &l);
    TZ_EXPECT(st == RT_ERR_CONFIG && strstr(rt_error_message(), "3 sources but 2 targets"), "%s", rt_error_message());
    data_tokenized_free(&two);
    data_tokenized_free(&two_t);
    data_batch_free(&b);
    data_tokenized_free(&ds);
    data_tokenized_free(&dt);
    data_lines_free(&src);
    data_lines_free(&tgt);
    tok_free(tok);
}

int main(void) {
    test_lines_in_pieces();
    test_lines();
    test_lowercase();
    test_encode_and_collate();
    return tz_test_result("test_data_seq2seq");
}
