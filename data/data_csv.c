/* RFC 4180 reader (see data_csv.h). Two passes: the first checks every physical line's UTF-8 and
 * counts the worst case of fields and records, so the index arrays are allocated once; the second
 * walks the bytes with a small state machine, unquoting each field in place (a field never grows
 * when its "" become "), and cuts the buffer into NUL-terminated fields. */
#include "data/data_csv.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_fs.h"
#include "runtime/base/rt_utf8.h"

/* Takes ownership of buf (len bytes and a spare one at buf[len]) on every path. */
static rt_status csv_split(const char *name, char *buf, size_t len, char delim, data_tsv *out) {
    rt_status st = RT_OK;
    memset(out, 0, sizeof *out);
    out->path = rt_xstrdup(name);
    out->buf = buf;
    buf[len] = '\0';
    const size_t begin = rt_utf8_bom_len(buf, len);
    /* pass 1: each line's UTF-8 (a NUL included), and how many fields and records there can be */
    size_t n_lines = 1, n_delims = 0, line = 1;
    for (size_t i = begin, start = begin; i <= len; i++) {
        if (i < len && buf[i] != '\n') {
            n_delims += buf[i] == delim;
            continue;
        }
        if (memchr(buf + start, '\0', i - start))
            RT_FAIL(RT_ERR_FORMAT, "%s:%zu: NUL byte in a text file (expected UTF-8 text)", name, line);
        RT_TRY(rt_utf8_check_line(name, line, buf + start, i - start));
        start = i + 1;
        line++;
        n_lines += i < len;
    }
    out->fields = malloc((n_delims + n_lines) * sizeof *out->fields);
    out->row_start = malloc((n_lines + 1) * sizeof *out->row_start);
    out->row_line = malloc(n_lines * sizeof *out->row_line);
    if (!out->fields || !out->row_start || !out->row_line)
        RT_FAIL(RT_ERR_NOMEM, "%s: out of memory indexing %zu lines", name, n_lines);
    /* pass 2: records */
    size_t nf = 0, nr = 0;
    int want = -1; /* the header's field count */
    char *p = buf + begin, *end = buf + len;
    line = 1;
    while (p < end) {
        if (*p == '\n' || (*p == '\r' && p + 1 < end && p[1] == '\n')) { /* a blank line */
            p += *p == '\r' ? 2 : 1;
            line++;
            continue;
        }
        const size_t record_line = line, first = nf;
        for (;;) {       /* one field */
            char *w = p; /* unquoted text is written back from here */
            out->fields[nf++] = w;
            const int col = (int)(nf - first);
            if (p < end && *p == '"') {
                const size_t open_line = line;
                p++;
                for (;;) {
                    if (p >= end)
                        RT_FAIL(RT_ERR_FORMAT, "%s:%zu: column %d: a quoted field opened here is never closed", name,
                                open_line, col);
                    if (*p == '"' && p + 1 < end && p[1] == '"') {
                        *w++ = '"';
                        p += 2;
                    } else if (*p == '"') {
                        p++;
                        break;
                    } else {
                        line += *p == '\n';
                        *w++ = *p++;
                    }
                }
                if (p < end && *p != delim && *p != '\n' && !(*p == '\r' && p + 1 < end && p[1] == '\n'))
                    RT_FAIL(RT_ERR_FORMAT,
                            "%s:%zu: column %d: text after the closing quote (a quote inside a quoted "
                            "field is written twice: \"\")",
                            name, line, col);
            } else {
                while (p < end && *p != delim && *p != '\n' && !(*p == '\r' && p + 1 < end && p[1] == '\n'))
                    *w++ = *p++;
            }
            const bool more = p < end && *p == delim;
            if (more) {
                p++;
            } else if (p < end) {
                p += *p == '\r' ? 2 : 1;
                line++;
            }
            *w = '\0'; /* at the delimiter or the record's end at the latest: p has moved past it */
            if (!more) break;
        }
        const int got = (int)(nf - first);
        if (want < 0) {
            want = got;
            out->header = out->fields + first;
            out->n_header = got;
            continue;
        }
        if (got != want)
            RT_FAIL(RT_ERR_FORMAT, "%s:%zu: %d field%s, the header has %d (a delimiter inside a field needs quotes)",
                    name, record_line, got, got == 1 ? "" : "s", want);
        out->row_start[nr] = first;
        out->row_line[nr] = record_line;
        nr++;
    }
    if (want < 0) RT_FAIL(RT_ERR_FORMAT, "%s: no header row (the first record names the columns)", name);
    out->row_start[nr] = nf;
    out->n_rows = nr;
fail:
    return st;
}

rt_status data_csv_take(const char *name, char *buf, size_t len, char delim, data_tsv *out) {
    rt_status st = csv_split(name, buf, len, delim, out);
    if (st != RT_OK) data_tsv_free(out);
    return st;
}

rt_status data_csv_parse(const char *name, const char *bytes, size_t len, char delim, data_tsv *out) {
    char *buf = rt_xmalloc(len + 1);
    if (len) memcpy(buf, bytes, len);
    return data_csv_take(name, buf, len, delim, out);
}

rt_status data_csv_read(const char *path, char delim, data_tsv *out) {
    char *buf = NULL;
    size_t len = 0;
    memset(out, 0, sizeof *out);
    rt_status st = rt_read_file(path, 0, &buf, &len); /* NUL-terminated: the spare byte csv_split wants */
    return st == RT_OK ? data_csv_take(path, buf, len, delim, out) : st;
}
