/* tz-tokenize: runs any tunezoo tokenizer over stdin, one line at a time, so that its ids can be
 * diffed against Hugging Face's and its speed measured (scripts/bench/bench_tokenizer.py).
 * Lines in, lines out: ids (or pieces) per text line, text per id line with --decode, and
 * tab-separated sentence pairs with --pair. See docs/tz-tokenize.md. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_args.h"
#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_utf8.h"
#include "runtime/base/rt_signal.h"
#include "tokenizers/tok.h"

static const char *prog = "tz-tokenize";

/* Appends the decimal form of v to buf (room for 12 bytes), returns the new end. */
static char *put_int(char *p, int32_t v) {
    char tmp[12];
    int n = 0;
    uint32_t u = v < 0 ? (uint32_t)0 - (uint32_t)v : (uint32_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *p++ = '-';
    while (n) *p++ = tmp[--n];
    return p;
}

static void write_ids(const tok_tokenizer *t, const tok_ids *ids, bool pieces, char **buf, size_t *cap) {
    size_t need = ids->n * 12 + 2;
    if (pieces)
        for (size_t i = 0; i < ids->n; i++) {
            const char *s = tok_id_to_piece(t, ids->ids[i]);
            need += (s ? strlen(s) : 0) + 1;
        }
    *buf = rt_grow_to(*buf, cap, need, 1);
    char *p = *buf;
    for (size_t i = 0; i < ids->n; i++) {
        if (i) *p++ = ' ';
        if (pieces) {
            const char *s = tok_id_to_piece(t, ids->ids[i]);
            size_t l = s ? strlen(s) : 0;
            memcpy(p, s, l);
            p += l;
        } else {
            p = put_int(p, ids->ids[i]);
        }
    }
    *p++ = '\n';
    fwrite(*buf, 1, (size_t)(p - *buf), stdout);
}

/* "12 345 6" -> ids; anything else on the line is an error naming the line. */
static rt_status parse_ids(const char *line, size_t lineno, tok_ids *out) {
    const char *p = line;
    tok_ids_clear(out);
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p) return RT_OK;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX ||
            (*end && *end != ' ' && *end != '\t' && *end != '\r'))
            return rt_errorf(RT_ERR_FORMAT, "stdin:%zu: expected space-separated integer ids, found \"%.20s\"", lineno,
                             p);
        tok_ids_push(out, (int32_t)v);
        p = end;
    }
}

static rt_status run(int argc, char **argv) {
    rt_status st = RT_OK;
    const char *path = NULL;
    bool decode = false, pieces = false, pair = false;
    tok_tokenizer *t = NULL;
    tok_ids ids = {0};
    char *line = NULL, *out = NULL, *text = NULL;
    size_t line_cap = 0, out_cap = 0, lineno = 0;
    /* clang-format off */
    const rt_opt opts[] = {
        {"tokenizer", RT_OPT_STRING, &path, NULL, "PATH",
         "HF tokenizer directory (tokenizer.json, vocab.json + merges.txt, encoder.json + vocab.bpe, a BERT "
         "vocab.txt (GLM's English one when tokenizer_config.json names GLMLargeEnWordPieceTokenizer), a T5 "
         "spiece.model or GLM's cog-pretrain.model) or one of those files (required)", NULL, 0, 0},
        {"decode", RT_OPT_FLAG, &decode, NULL, NULL, "read lines of ids and write the decoded text", NULL, 0, 0},
        {"pieces", RT_OPT_FLAG, &pieces, NULL, NULL, "write the token pieces (e.g. \"\xc4\xa0the\") instead of ids",
         NULL, 0, 0},
        {"pair", RT_OPT_FLAG, &pair, NULL, NULL,
         "read tab-separated sentence pairs and add the model's special tokens (RoBERTa: <s> a </s></s> b </s>)",
         NULL, 0, 0},
    };
    /* clang-format on */
    const rt_args_spec spec = {
        prog,
        NULL,
        0,
        0,
        "Tokenizes UTF-8 text from stdin, one line at a time, and writes one line of space-separated ids per "
        "input line (the newline itself is not encoded). A line that is not valid UTF-8 is an error "
        "(stdin:LINE: invalid UTF-8 at byte N of the line).",
        "examples:\n"
        "  echo 'Hello world' | tz-tokenize --tokenizer assets/gpt2-bpe              # 15496 995\n"
        "  echo '15496 995' | tz-tokenize --tokenizer assets/gpt2-bpe --decode\n"
        "  printf 'a\\tb\\n' | tz-tokenize --tokenizer roberta-vocab.json --pair       # 0 102 2 2 428 2\n"
        "exit status: 0 ok, 1 tokenizer or input error, 2 usage error",
        opts,
        (int)(sizeof opts / sizeof opts[0]),
        NULL,
        NULL, /* no presets file */
    };
    const char *pos[1];
    int n_pos = 0;
    RT_TRY(rt_args_parse(&spec, argc, argv, pos, &n_pos));
    if (!path) RT_FAIL(RT_ERR_USAGE, "missing --tokenizer PATH (see --help)");
    if (decode && (pieces || pair)) RT_FAIL(RT_ERR_USAGE, "--decode cannot be combined with --pieces or --pair");
    RT_TRY(tok_load(path, &t));

    static char obuf[1 << 20];
    setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
    ssize_t got;
    while ((got = getline(&line, &line_cap, stdin)) >= 0) {
        size_t len = (size_t)got;
        lineno++;
        if (len && line[len - 1] == '\n') line[--len] = '\0';
        /* Each tokenizer would treat a bad byte its own way (drop, byte-encode, <unk>), so it
         * is an error, worded as the data readers word it. */
        RT_TRY(rt_utf8_check_line("stdin", lineno, line, len));
        tok_ids_clear(&ids);
        if (decode) {
            RT_TRY(parse_ids(line, lineno, &ids));
            free(text);
            text = NULL;
            st = tok_decode(t, ids.ids, ids.n, &text);
            if (st != RT_OK) {
                st = rt_error_wrap(st, "stdin:%zu", lineno); /* the message names the bad id */
                goto fail;
            }
            fputs(text, stdout);
            fputc('\n', stdout);
            continue;
        }
        if (pair) {
            char *tab = strchr(line, '\t');
            if (tab) *tab = '\0';
            RT_TRY(tok_encode_pair(t, line, tab ? tab + 1 : NULL, &ids));
        } else {
            RT_TRY(tok_encode(t, line, len, &ids));
        }
        write_ids(t, &ids, pieces, &out, &out_cap);
    }
    if (ferror(stdin)) RT_FAIL(RT_ERR_IO, "stdin: read error: %s", strerror(errno));
    if (fflush(stdout) != 0) RT_FAIL(RT_ERR_IO, "stdout: write error: %s", strerror(errno));
fail:
    fflush(stdout);
    free(line);
    free(out);
    free(text);
    tok_ids_free(&ids);
    tok_free(t);
    return st;
}

int main(int argc, char **argv) {
    rt_signal_ignore_file_limit();
    return rt_status_exit_code(prog, run(argc, argv));
}
