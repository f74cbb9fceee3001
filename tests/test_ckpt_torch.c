/* PyTorch checkpoints read without running code (ckpt_zip, ckpt_pickle, ckpt_torch,
 * ckpt_source), against files torch 2.x wrote (scripts/golden/gen_torch_ckpt_golden.py,
 * versions in tests/golden/torch-ckpt/README.md):
 *  - small.pt holds exactly the bytes and values of small.safetensors:
 *    F32/F16/BF16, a 0-d and an empty tensor, a view at a storage offset (and so do a
 *    deflated copy and a ZIP64 copy);
 *  - the legacy non-zip format, a pickle that REDUCEs posix.system or os.system, a
 *    non-contiguous tensor, a big-endian file, complex64, a sharded index that points
 *    outside its folder or misplaces a tensor, and every truncation and many byte flips of
 *    a valid file fail with a status naming the problem, never a crash; float64 converts and
 *    int64 is readable but not as float32;
 *  - FlagAI {'module': sd} and Megatron {'model': {'language_model': ...}} flatten to
 *    '.'-joined names and expose checkpoint_version;
 *  - tiny-gpt2 as pytorch_model.bin, as two .bin shards and as sharded safetensors loads
 *    through the GPT-2 loader to exactly the weights of the single model.safetensors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_weights.h"
#include "checkpoints/ckpt_pickle.h"
#include "checkpoints/ckpt_safetensors.h"
#include "checkpoints/ckpt_source.h"
#include "checkpoints/ckpt_torch.h"
#include "checkpoints/ckpt_zip.h"
#include "models/gpt2/gpt2.h"
#include "tests/testutil.h"

static const char *g_dir;

static char *golden(const char *rel) {
    char p[512];
    snprintf(p, sizeof p, "tests/golden/torch-ckpt/%s", rel);
    return rt_xstrdup(tz_source_path(p));
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = rt_xmalloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

static const char *spit(const char *name, const unsigned char *data, size_t n) {
    static char p[600];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    if (f) {
        if (n) fwrite(data, 1, n, f);
        fclose(f);
    }
    return p;
}

/* Every tensor of the safetensors twin: same dtype, shape, bytes and float32 values. */
static void compare_with_safetensors(const char *torch_rel, const char *st_rel, const char *prefix) {
    char *tp = golden(torch_rel), *sp = golden(st_rel);
    ckpt_source *src = NULL;
    ckpt_st_file *ref = NULL;
    TZ_EXPECT_OK(ckpt_source_open(tp, &src));
    TZ_EXPECT_OK(ckpt_safetensors_open(sp, &ref));
    if (src && ref) {
        TZ_EXPECT(ckpt_source_count(src) == ckpt_safetensors_count(ref), "%s: %zu tensors, safetensors has %zu", tp,
                  ckpt_source_count(src), ckpt_safetensors_count(ref));
        for (size_t i = 0; i < ckpt_safetensors_count(ref); i++) {
            ckpt_st_tensor r, t;
            ckpt_safetensors_tensor(ref, i, &r);
            char name[256];
            snprintf(name, sizeof name, "%s%s", prefix, r.name);
            long k = ckpt_source_index(src, name);
            TZ_EXPECT(k >= 0, "%s: no tensor '%s'", tp, name);
            if (k < 0) continue;
            ckpt_source_tensor(src, (size_t)k, &t);
            int same_shape = t.ndim == r.ndim && !memcmp(t.shape, r.shape, (size_t)r.ndim * sizeof *r.shape);
            TZ_EXPECT(t.dtype == r.dtype && same_shape && t.numel == r.numel, "%s: '%s' dtype/shape differ", tp, name);
            if (!(t.dtype == r.dtype && same_shape && t.numel == r.numel)) continue;
            TZ_EXPECT(t.nbytes == r.nbytes && (r.nbytes == 0 || memcmp(t.data, r.data, r.nbytes) == 0),
                      "%s: '%s' bytes differ", tp, name);
            float *a = rt_xmalloc((r.numel + 1) * sizeof(float)), *b = rt_xmalloc((r.numel + 1) * sizeof(float));
            TZ_EXPECT_OK(ckpt_source_read_f32(src, name, a, r.numel));
            TZ_EXPECT_OK(ckpt_safetensors_read_f32(ref, r.name, b, r.numel));
            if (r.numel) tz_check_close(name, a, b, r.numel, 0.0f, 0.0f);
            free(a);
            free(b);
        }
    }
    ckpt_source_close(src);
    ckpt_safetensors_close(ref);
    free(tp);
    free(sp);
}

static void test_small(void) {
    compare_with_safetensors("small.pt", "small.safetensors", "");
    compare_with_safetensors("small_deflated.pt", "small.safetensors", "");
    compare_with_safetensors("small_zip64.pt", "small.safetensors", "");
    char *p = golden("small.pt");
    ckpt_source *s = NULL;
    TZ_EXPECT_OK(ckpt_source_open(p, &s));
    if (s) {
        ckpt_st_tensor t;
        long i = ckpt_source_index(s, "scalar");
        TZ_EXPECT(i >= 0, "scalar present");
        if (i >= 0) {
            ckpt_source_tensor(s, (size_t)i, &t);
            float v = 0;
            TZ_EXPECT(t.ndim == 0 && t.numel == 1, "0-d: ndim %d numel %zu", t.ndim, t.numel);
            TZ_EXPECT_OK(ckpt_source_read_f32(s, "scalar", &v, 1));
            TZ_EXPECT(v == 2.5f, "scalar %g", (double)v);
        }
        i = ckpt_source_index(s, "empty");
        if (i >= 0) ckpt_source_tensor(s, (size_t)i, &t);
        TZ_EXPECT(i >= 0 && t.ndim == 2 && t.shape[0] == 0 && t.shape[1] == 4 && t.numel == 0, "empty [0, 4]");
        float buf[4];
        TZ_EXPECT(ckpt_source_read_f32(s, "w_f32", buf, 4) == RT_ERR_FORMAT, "element count mismatch is an error");
        TZ_EXPECT(strstr(rt_error_message(), "small.pt") && strstr(rt_error_message(), "w_f32"), "%s",
                  rt_error_message());
    }
    ckpt_source_close(s);
    free(p);
}

static void expect_fail(const char *rel, rt_status code, const char *const *needles) {
    char *p = golden(rel);
    ckpt_source *s = NULL;
    rt_status st = ckpt_source_open(p, &s);
    TZ_EXPECT(st == code, "%s: got %s, want %s (%s)", rel, rt_status_name(st), rt_status_name(code),
              rt_error_message());
    for (; *needles; needles++)
        TZ_EXPECT(strstr(rt_error_message(), *needles) != NULL, "%s: message lacks '%s': %s", rel, *needles,
                  rt_error_message());
    ckpt_source_close(s);
    free(p);
}

static void test_refused(void) {
    expect_fail("small_legacy.pt", RT_ERR_UNSUPPORTED,
                (const char *const[]){"small_legacy.pt", "legacy", "torch.save(torch.load(", "safetensors", NULL});
    expect_fail("hostile_posix_system.pt", RT_ERR_FORMAT,
                (const char *const[]){"hostile_posix_system.pt", "refusing pickle GLOBAL 'posix.system'", NULL});
    expect_fail("hostile_os_system.pt", RT_ERR_FORMAT,
                (const char *const[]){"refusing pickle GLOBAL 'os.system'", NULL});
    expect_fail("noncontig.pt", RT_ERR_UNSUPPORTED, (const char *const[]){"noncontig.pt", "non-contiguous", NULL});
    expect_fail("bigendian.pt", RT_ERR_UNSUPPORTED, (const char *const[]){"bigendian.pt", "big-endian", NULL});
    expect_fail("complex.pt", RT_ERR_UNSUPPORTED, (const char *const[]){"torch.ComplexFloatStorage", NULL});

    /* float64 converts; int64 is listed (a BERT position_ids buffer) but is no float */
    char *p = golden("other_dtypes.pt");
    ckpt_source *s = NULL;
    TZ_EXPECT_OK(ckpt_source_open(p, &s));
    if (s) {
        float f[2] = {0, 0}, i[3];
        TZ_EXPECT_OK(ckpt_source_read_f32(s, "f64", f, 2));
        TZ_EXPECT(f[0] == 1.5f && f[1] == -2.0f, "f64 %g %g", (double)f[0], (double)f[1]);
        ckpt_st_tensor t;
        long k = ckpt_source_index(s, "i64");
        if (k >= 0) ckpt_source_tensor(s, (size_t)k, &t);
        TZ_EXPECT(k >= 0 && t.dtype == RT_I64 && t.numel == 3 && ((const int64_t *)t.data)[2] == 2, "i64 tensor");
        TZ_EXPECT(ckpt_source_read_f32(s, "i64", i, 3) == RT_ERR_UNSUPPORTED, "int64 to float32 is refused");
    }
    ckpt_source_close(s);
    free(p);
}

/* A pickle of 30 dicts, each holding the one below twice: 2^30 names if expanded. */
static void test_pickle_bomb(void) {
    unsigned char b[1024];
    size_t n = 0;
    const unsigned char head[] = {0x80, 2, '}', 0x8c, 1, 'x', 'K', 1, 's', 'q', 0, '0'};
    memcpy(b, head, sizeof head);
    n = sizeof head;
    for (int lv = 1; lv <= 30; lv++) {
        const unsigned char step[] = {'}',
                                      '(',
                                      0x8c,
                                      1,
                                      'a',
                                      'h',
                                      (unsigned char)(lv - 1),
                                      0x8c,
                                      1,
                                      'b',
                                      'h',
                                      (unsigned char)(lv - 1),
                                      'u',
                                      'q',
                                      (unsigned char)lv,
                                      '0'};
        memcpy(b + n, step, sizeof step);
        n += sizeof step;
    }
    b[n - 1] = '.'; /* keep the last dict on the stack and stop */
    ckpt_pickle_state s;
    rt_status st = ckpt_pickle_read(b, n, "bomb.pkl", &s);
    TZ_EXPECT(st == RT_ERR_FORMAT && strstr(rt_error_message(), "bomb.pkl") &&
                  strstr(rt_error_message(), "share each other"),
              "%s", rt_error_message());
    /* two levels of sharing is fine: 4 names */
    size_t m = sizeof head + 2 * 16;
    memcpy(b + m - 1, ".", 1);
    TZ_EXPECT_OK(ckpt_pickle_read(b, m, "small-share.pkl", &s));
    TZ_EXPECT(s.n_scalars == 4 && strcmp(s.scalars[3].name, "b.b.x") == 0, "%zu scalars", s.n_scalars);
    ckpt_pickle_state_free(&s);
}

/* An argparse.Namespace BUILT with itself 40 times (DUP, BUILD): 2^40 fields if each BUILD
 * copied them; the copies are bounded by the file's size instead (the fuzzer found this). */
static void test_build_bomb(void) {
    unsigned char b[256];
    const unsigned char head[] = {0x80, 2,   'c', 'a', 'r', 'g',  'p', 'a',  'r', 's',  'e', '\n', 'N', 'a', 'm', 'e',
                                  's',  'p', 'a', 'c', 'e', '\n', ')', 0x81, '}', 0x8c, 1,   'a',  'K', 1,   's', 'b'};
    size_t n = sizeof head;
    memcpy(b, head, n);
    for (int k = 0; k < 40; k++) {
        b[n++] = '2';
        b[n++] = 'b';
    }
    b[n++] = '.';
    ckpt_pickle_state s;
    rt_status st = ckpt_pickle_read(b, n, "build-bomb.pkl", &s);
    TZ_EXPECT(st == RT_ERR_FORMAT && strstr(rt_error_message(), "build-bomb.pkl") &&
                  strstr(rt_error_message(), "pickle bomb"),
              "%s", rt_error_message());
}

static void put16(unsigned char *p, unsigned v) { p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8); }
static void put32(unsigned char *p, uint32_t v) { put16(p, v & 0xffff), put16(p + 2, v >> 16); }

/* A zip whose one entry, archive/data.pkl, is n zero bytes deflated (about n / 1000 in the file):
 * written by hand, so that the test needs nothing but zlib. */
static const char *zip_of_zeros(const char *file, size_t n) {
    unsigned char *zeros = rt_xcalloc(n, 1), *def = rt_xmalloc(n / 100 + 1024);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    deflateInit2(&zs, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    zs.next_in = zeros, zs.avail_in = (uInt)n, zs.next_out = def, zs.avail_out = (uInt)(n / 100 + 1024);
    deflate(&zs, Z_FINISH);
    const size_t csize = zs.total_out;
    deflateEnd(&zs);
    const uint32_t crc = (uint32_t)crc32(0, zeros, (uInt)n);
    const char *name = "archive/data.pkl";
    const unsigned nlen = (unsigned)strlen(name);
    unsigned char *z = rt_xcalloc(csize + 2 * nlen + 200, 1), *p = z;
    put32(p, 0x04034b50), put16(p + 8, 8), put32(p + 14, crc), put32(p + 18, (uint32_t)csize);
    put32(p + 22, (uint32_t)n), put16(p + 26, nlen);
    memcpy(p + 30, name, nlen);
    memcpy(p + 30 + nlen, def, csize);
    p += 30 + nlen + csize;
    const size_t cd = (size_t)(p - z);
    put32(p, 0x02014b50), put16(p + 10, 8), put32(p + 16, crc), put32(p + 20, (uint32_t)csize);
    put32(p + 24, (uint32_t)n), put16(p + 28, nlen);
    memcpy(p + 46, name, nlen);
    p += 46 + nlen;
    put32(p, 0x06054b50), put16(p + 8, 1), put16(p + 10, 1), put32(p + 12, (uint32_t)(p - z - cd));
    put32(p + 16, (uint32_t)cd);
    p += 22;
    const char *path = spit(file, z, (size_t)(p - z));
    free(zeros), free(def), free(z);
    return path;
}

/* A small file whose pickle would inflate past what a state dict of its entries needs is
 * refused before inflating (issue 34: 3.5 MB inflating to 3.2 GB took the memory). */
static void test_inflate_bomb(void) {
    const char *path = zip_of_zeros("inflate-bomb.pt", (size_t)64 << 20);
    ckpt_source *s = NULL;
    rt_status st = ckpt_source_open(path, &s);
    TZ_EXPECT(st == RT_ERR_FORMAT && strstr(rt_error_message(), "inflate-bomb.pt") &&
                  strstr(rt_error_message(), "would inflate to 67108864 bytes") &&
                  strstr(rt_error_message(), "damaged or hostile"),
              "%s: %s", rt_status_name(st), rt_error_message());
    ckpt_source_close(s);
}

/* An index whose weight_map reaches outside its folder, or misplaces a tensor, is refused. */
static void test_bad_index(void) {
    char dir[600], link[700], target[700], *src = golden("gpt2-bin-sharded");
    snprintf(dir, sizeof dir, "%s/idx", g_dir);
    mkdir(dir, 0755);
    for (int k = 1; k <= 2; k++) {
        snprintf(link, sizeof link, "%s/pytorch_model-0000%d-of-00002.bin", dir, k);
        snprintf(target, sizeof target, "%s/pytorch_model-0000%d-of-00002.bin", src, k);
        TZ_EXPECT(symlink(target, link) == 0, "symlink %s", link);
    }
    const struct {
        const char *json, *needle;
    } cases[] = {
        {"{\"weight_map\": {\"transformer.wte.weight\": \"../x.bin\"}}", "not a plain file name"},
        {"{\"weight_map\": {\"transformer.wte.weight\": \"pytorch_model-00002-of-00002.bin\"}}", "does not hold it"},
        {"{\"weight_map\": {\"transformer.wte.weight\": \"missing.bin\"}}", "missing.bin: cannot open"},
        {"{\"metadata\": {}}", "weight_map"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        snprintf(link, sizeof link, "%s/pytorch_model.bin.index.json", dir);
        FILE *f = fopen(link, "w");
        if (f) {
            fputs(cases[c].json, f);
            fclose(f);
        }
        ckpt_source *s = NULL;
        rt_status st = ckpt_source_open(dir, &s);
        TZ_EXPECT(st != RT_OK && strstr(rt_error_message(), cases[c].needle), "index case %zu: %s", c,
                  rt_error_message());
        ckpt_source_close(s);
    }
    free(src);
}

static void test_nested(void) {
    compare_with_safetensors("flagai.pt", "nested.safetensors", "module.");
    compare_with_safetensors("megatron.pt", "nested.safetensors", "model.language_model.encoder.");
    char *p = golden("megatron.pt");
    ckpt_source *s = NULL;
    double v = 0;
    TZ_EXPECT_OK(ckpt_source_open(p, &s));
    TZ_EXPECT(s && ckpt_source_scalar(s, "checkpoint_version", &v) && v == 3.0, "checkpoint_version %g", v);
    TZ_EXPECT(s && ckpt_source_scalar(s, "iteration", &v) && v == 7.0, "iteration %g", v);
    ckpt_source_close(s);
    free(p);
}

static ckpt_source *g_ref; /* the undamaged file, when a damaged copy must match it */

/* Opens a damaged copy; when it opens, touches every byte it vouches for (ASan checks) and,
 * with g_ref set, the damage must have missed every tensor (a flip in a field nothing reads). */
static int open_damaged(const char *path) {
    ckpt_source *s = NULL;
    if (ckpt_source_open(path, &s) != RT_OK) {
        TZ_EXPECT(rt_error_message()[0] != '\0', "an error without a message");
        return 0;
    }
    volatile unsigned char sink = 0;
    for (size_t i = 0; i < ckpt_source_count(s); i++) {
        ckpt_st_tensor t;
        ckpt_source_tensor(s, i, &t);
        for (size_t b = 0; b < t.nbytes; b++) sink ^= ((const unsigned char *)t.data)[b];
        if (!g_ref) continue;
        long k = ckpt_source_index(g_ref, t.name);
        ckpt_st_tensor r;
        if (k >= 0) ckpt_source_tensor(g_ref, (size_t)k, &r);
        TZ_EXPECT(k >= 0 && r.dtype == t.dtype && r.nbytes == t.nbytes && memcmp(r.data, t.data, t.nbytes) == 0 &&
                      ckpt_source_count(s) == ckpt_source_count(g_ref),
                  "%s opened with tensor '%s' changed", path, t.name);
    }
    (void)sink;
    ckpt_source_close(s);
    return 1;
}

static void test_damaged(void) {
    size_t n = 0;
    char *p = golden("small.pt");
    unsigned char *orig = slurp(p, &n), *buf = rt_xmalloc(n + 1);
    TZ_EXPECT(orig && n > 1000, "read %s", p);
    if (!orig) return;
    int opened = 0;
    for (size_t len = 0; len < n; len++) opened += open_damaged(spit("trunc.pt", orig, len));
    TZ_EXPECT(opened == 0, "%d of %zu truncated copies opened", opened, n);

    /* flip each byte of the central directory and end record, then bytes of the pickle */
    size_t eocd = n - 22;
    while (eocd > 0 && memcmp(orig + eocd, "PK\5\6", 4) != 0) eocd--;
    size_t cd = (size_t)orig[eocd + 16] | (size_t)orig[eocd + 17] << 8 | (size_t)orig[eocd + 18] << 16;
    TZ_EXPECT(cd > 0 && cd < eocd, "central directory at %zu", cd);
    int flips = 0, failed = 0;
    TZ_EXPECT_OK(ckpt_source_open(p, &g_ref));
    for (size_t k = cd; k < n; k++) {
        memcpy(buf, orig, n);
        buf[k] ^= 0xFF;
        failed += !open_damaged(spit("flip.pt", buf, n));
        flips++;
    }
    /* names, offsets, sizes and the pickle's CRC are checked; times, dates, attributes and
     * the other CRCs are not, and flips there must leave every tensor as it was (above) */
    printf("directory byte flips: %d of %d were errors, the rest left every tensor intact\n", failed, flips);
    TZ_EXPECT(failed > flips / 3, "only %d of %d directory flips were errors", failed, flips);
    /* data.pkl is the first entry: its bytes start after the local header, name and extra */
    size_t pkl = 30 + ((size_t)orig[26] | (size_t)orig[27] << 8) + ((size_t)orig[28] | (size_t)orig[29] << 8);
    for (size_t k = pkl; k < pkl + 600 && k < cd; k++) {
        memcpy(buf, orig, n);
        buf[k] ^= (unsigned char)(1u << (k % 8));
        TZ_EXPECT(!open_damaged(spit("flip.pt", buf, n)), "a flip in data.pkl at byte %zu passed its CRC", k);
    }
    ckpt_source_close(g_ref);
    g_ref = NULL;
    free(orig);
    free(buf);
    free(p);

    /* a real-size file truncated at 64 points */
    p = golden("gpt2-bin/pytorch_model.bin");
    orig = slurp(p, &n);
    opened = 0;
    for (int k = 0; orig && k < 64; k++)
        opened += open_damaged(spit("trunc.bin", orig, n / 64 * (size_t)k + (size_t)k));
    TZ_EXPECT(orig && opened == 0, "%d truncated gpt2 copies opened", opened);
    free(orig);
    free(p);
}

/* All of the model's parameters after loading from `from`. */
static float *load_gpt2(rt_backend *be, const char *from, size_t *numel) {
    gpt2_config cfg;
    gpt2_model *m = NULL;
    ckpt_load_report rep;
    float *out = NULL;
    rt_status st = gpt2_config_load(tz_data_path("tiny-gpt2/config.json"), &cfg);
    TZ_EXPECT(st == RT_OK, "tiny-gpt2 config: %s", rt_error_message());
    if (st != RT_OK) return NULL;
    TZ_EXPECT_OK(gpt2_model_init(&cfg, be, rt_comm_self(), 1, 5, 7, &m));
    if (!m) return NULL;
    rt_params *p = gpt2_model_params(m);
    TZ_EXPECT_OK(ckpt_load_hf(from, &ckpt_map_gpt2, p, cfg.vocab_size, cfg.n_head, 0, 1, NULL, &rep));
    TZ_EXPECT(rep.missing == 1 && rep.unused == 0, "%s: missing %d (%s) unused %d", from, rep.missing,
              rep.first_missing, rep.unused);
    *numel = p->numel;
    out = rt_xmalloc(p->numel * sizeof(float));
    memcpy(out, p->param, p->numel * sizeof(float));
    gpt2_model_free(m);
    return out;
}

static void test_gpt2_layouts(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 2, &be));
    if (!be) return;
    size_t n_ref = 0, n = 0;
    float *ref = load_gpt2(be, tz_data_path("tiny-gpt2"), &n_ref);
    const char *dirs[] = {"gpt2-bin", "gpt2-bin-sharded", "gpt2-st-sharded"};
    for (size_t k = 0; ref && k < 3; k++) {
        char *d = golden(dirs[k]);
        float *got = load_gpt2(be, d, &n);
        TZ_EXPECT(got && n == n_ref, "%s: %zu floats, want %zu", d, n, n_ref);
        if (got && n == n_ref) tz_check_close(dirs[k], got, ref, n, 0.0f, 0.0f);
        free(got);
        free(d);
    }
    free(ref);
    rt_backend_free(be);
}

int main(void) {
    g_dir = tz_tmpdir();
    test_small();
    test_refused();
    test_bad_index();
    test_pickle_bomb();
    test_build_bomb();
    test_inflate_bomb();
    test_nested();
    test_damaged();
    test_gpt2_layouts();
    return tz_test_result("test_ckpt_torch");
}
