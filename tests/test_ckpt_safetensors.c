/* safetensors: our writer read back by our reader, the real tiny-gpt2 file from Hugging Face,
 * hand-built F16/BF16 files, and a list of malformed files that must each give a clear
 * error (and never crash), plus the HF directory weights lookup. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoints/ckpt_safetensors.h"
#include "checkpoints/ckpt_source.h"
#include "tests/testutil.h"

#define EXPECT_MSG(sub) \
    TZ_EXPECT(strstr(rt_error_message(), (sub)) != NULL, "message '%s' lacks '%s'", rt_error_message(), (sub))

static const char *g_dir;

/* Writes a raw safetensors file: length prefix (hlen, or strlen(header) when hlen is -1),
 * the header text, then data. Returns the path. */
static const char *make_raw(const char *name, long long hlen, const char *header, const void *data, size_t n) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        perror(path);
        exit(1);
    }
    unsigned long long len = hlen == -1 ? strlen(header) : (unsigned long long)hlen;
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(len >> (8 * i));
    fwrite(b, 1, 8, fp);
    fwrite(header, 1, strlen(header), fp);
    if (n) fwrite(data, 1, n, fp);
    fclose(fp);
    return path;
}

/* Opening must fail with `want` and a message containing `sub`. */
static void expect_bad(const char *what, const char *path, rt_status want, const char *sub) {
    ckpt_st_file *f = NULL;
    rt_status st = ckpt_safetensors_open(path, &f);
    TZ_EXPECT(st == want, "%s: got %s (%s), want %s", what, rt_status_name(st), rt_error_message(),
              rt_status_name(want));
    TZ_EXPECT(f == NULL, "%s: no handle on error", what);
    TZ_EXPECT(strstr(rt_error_message(), sub) != NULL, "%s: message '%s' lacks '%s'", what, rt_error_message(), sub);
    if (f) ckpt_safetensors_close(f);
}

static void test_round_trip(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/rt.safetensors", g_dir);
    float a[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
    float s[1] = {42.0f};
    float h[4] = {1.0f, -2.0f, 0.5f, 1.0f + 1.0f / 1024.0f};
    float bf[3] = {1.0f, -3.0f, 0.1f};
    size_t shape_a[2] = {2, 3}, shape_z[2] = {0, 4}, shape_h[1] = {4}, shape_b[1] = {3};
    ckpt_st_write_entry e[5] = {
        {.name = "layer.weight", .ndim = 2, .shape = shape_a, .data = a},
        {.name = "scalar", .ndim = 0, .shape = NULL, .data = s},
        {.name = "empty \"quoted\"\n", .ndim = 2, .shape = shape_z, .data = NULL},
        {.name = "half", .ndim = 1, .shape = shape_h, .data = h, .store = RT_F16},
        {.name = "brain", .ndim = 1, .shape = shape_b, .data = bf, .store = RT_BF16},
    };
    TZ_EXPECT_OK(ckpt_safetensors_write(path, 5, e, "{\"format\": \"pt\", \"note\": \"x\"}"));
    struct stat sb;
    TZ_EXPECT(stat(path, &sb) == 0, "file exists");

    ckpt_st_file *f = NULL;
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &f));
    if (!f) return;
    TZ_EXPECT(ckpt_safetensors_count(f) == 5, "count %zu", ckpt_safetensors_count(f));
    TZ_EXPECT(strcmp(ckpt_safetensors_name(f, 0), "layer.weight") == 0, "file order kept");
    const char *fmt = ckpt_safetensors_metadata(f, "format");
    TZ_EXPECT(fmt && strcmp(fmt, "pt") == 0, "metadata");
    TZ_EXPECT(ckpt_safetensors_metadata(f, "absent") == NULL, "absent metadata");

    ckpt_st_tensor t;
    TZ_EXPECT_OK(ckpt_safetensors_find(f, "layer.weight", &t));
    TZ_EXPECT(t.dtype == RT_F32 && t.ndim == 2 && t.shape[0] == 2 && t.shape[1] == 3 && t.numel == 6 && t.nbytes == 24,
              "layer.weight header");
    float got[6];
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, "layer.weight", got, 6));
    TZ_EXPECT(memcmp(got, a, sizeof a) == 0, "F32 bits round-trip");
    TZ_EXPECT_OK(ckpt_safetensors_find(f, "scalar", &t));
    TZ_EXPECT(t.ndim == 0 && t.numel == 1, "scalar");
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, "scalar", got, 1));
    TZ_EXPECT(got[0] == 42.0f, "scalar value");
    TZ_EXPECT_OK(ckpt_safetensors_find(f, "empty \"quoted\"\n", &t));
    TZ_EXPECT(t.numel == 0 && t.ndim == 2 && t.shape[1] == 4, "zero-size tensor with an escaped name");
    TZ_EXPECT_OK(ckpt_safetensors_find(f, "half", &t));
    TZ_EXPECT(t.dtype == RT_F16 && t.nbytes == 8, "stored as F16");
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, "half", got, 4));
    tz_check_close("F16 values", got, h, 4, 0, 0);
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, "brain", got, 3));
    float bf_ref[3] = {1.0f, -3.0f, rt_bf16_to_f32(rt_f32_to_bf16(0.1f))};
    tz_check_close("BF16 values", got, bf_ref, 3, 0, 0);

    TZ_EXPECT(!ckpt_safetensors_has(f, "nope") && ckpt_safetensors_has(f, "half"), "has");
    TZ_EXPECT(ckpt_safetensors_find(f, "nope", &t) == RT_ERR_FORMAT, "missing tensor");
    EXPECT_MSG("no tensor 'nope'");
    TZ_EXPECT(ckpt_safetensors_read_f32(f, "layer.weight", got, 5) == RT_ERR_FORMAT, "wrong numel");
    EXPECT_MSG("rt.safetensors: tensor 'layer.weight' has shape [2, 3] (6 elements), expected 5 elements");
    ckpt_safetensors_close(f);

    /* rewriting replaces the file atomically; a missing directory is an i/o error */
    TZ_EXPECT_OK(ckpt_safetensors_write(path, 1, e, NULL));
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &f));
    if (f) TZ_EXPECT(ckpt_safetensors_count(f) == 1 && ckpt_safetensors_metadata(f, "format") == NULL, "rewritten");
    ckpt_safetensors_close(f);
    char nodir[600];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/x.safetensors", g_dir);
    TZ_EXPECT(ckpt_safetensors_write(nodir, 1, e, NULL) == RT_ERR_IO, "missing directory");
    EXPECT_MSG("no/such/dir/x.safetensors");
    TZ_EXPECT(ckpt_safetensors_write(path, 1, e, "{\"n\": 3}") == RT_ERR_CONFIG, "metadata must be strings");
    TZ_EXPECT(ckpt_safetensors_write(path, 1, e, "{bad") == RT_ERR_FORMAT, "metadata must be JSON");
}

static void test_tiny_gpt2(void) {
    const char *dir = tz_data_path("tiny-gpt2");
    char wpath[4096];
    TZ_EXPECT_OK(ckpt_source_find_weights(dir, wpath, sizeof wpath));
    TZ_EXPECT(strstr(wpath, "tiny-gpt2/model.safetensors") != NULL, "weights path %s", wpath);
    ckpt_st_file *f = NULL;
    TZ_EXPECT_OK(ckpt_safetensors_open(wpath, &f));
    if (!f) return;
    TZ_EXPECT(ckpt_safetensors_count(f) == 28, "28 tensors, got %zu", ckpt_safetensors_count(f));
    const char *fmt = ckpt_safetensors_metadata(f, "format");
    TZ_EXPECT(fmt && strcmp(fmt, "pt") == 0, "format pt");
    size_t total = 0;
    for (size_t i = 0; i < ckpt_safetensors_count(f); i++) {
        ckpt_st_tensor t;
        ckpt_safetensors_tensor(f, i, &t);
        TZ_EXPECT(t.dtype == RT_F32, "%s is F32", t.name);
        TZ_EXPECT(strncmp(t.name, "transformer.", 12) == 0, "name %s", t.name);
        total += t.nbytes;
    }
    TZ_EXPECT(total == 410856, "data bytes %zu", total);
    TZ_EXPECT(!ckpt_safetensors_has(f, "lm_head.weight"), "lm_head is tied, not stored");

    ckpt_st_tensor t;
    TZ_EXPECT_OK(ckpt_safetensors_find(f, "transformer.wte.weight", &t));
    TZ_EXPECT(t.ndim == 2 && t.shape[0] == 50257 && t.shape[1] == 2, "wte shape");
    float *wte = malloc(50257 * 2 * sizeof(float));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, "transformer.wte.weight", wte, 50257 * 2));
    double sum = 0, sq = 0;
    int finite = 1;
    for (size_t i = 0; i < 50257 * 2; i++) {
        finite &= isfinite(wte[i]) != 0;
        sum += wte[i];
        sq += (double)wte[i] * wte[i];
    }
    double mean = sum / (50257 * 2), sd = sqrt(sq / (50257 * 2) - mean * mean);
    TZ_EXPECT(finite, "wte finite");
    TZ_EXPECT(sd > 0.015 && sd < 0.025 && fabs(mean) < 0.002, "wte mean %g std %g (random init, std 0.02)", mean, sd);
    free(wte);

    TZ_EXPECT_OK(ckpt_safetensors_find(f, "transformer.h.1.attn.c_attn.weight", &t));
    TZ_EXPECT(t.ndim == 2 && t.shape[0] == 2 && t.shape[1] == 6, "c_attn is Conv1D [in, out]");
    TZ_EXPECT_OK(ckpt_safetensors_find(f, "transformer.h.0.mlp.c_proj.weight", &t));
    TZ_EXPECT(t.ndim == 2 && t.shape[0] == 8 && t.shape[1] == 2, "mlp.c_proj [8, 2]");
    float lnw[2], lnb[2], ones[2] = {1, 1}, zeros[2] = {0, 0};
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, "transformer.ln_f.weight", lnw, 2));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, "transformer.ln_f.bias", lnb, 2));
    tz_check_close("ln_f.weight", lnw, ones, 2, 0, 0);
    tz_check_close("ln_f.bias", lnb, zeros, 2, 0, 0);
    TZ_EXPECT(ckpt_safetensors_read_f32(f, "transformer.wpe.weight", lnw, 2) == RT_ERR_FORMAT, "shape check");
    EXPECT_MSG("tensor 'transformer.wpe.weight' has shape [1024, 2]");
    ckpt_safetensors_close(f);
}

static void test_half_files(void) {
    /* F16 1, -2, 1/3 (rounded), 65504; BF16 1, -3, 0.25, 3.140625; F64 0.5; I64 7.
     * The header length (not a multiple of 4) leaves the data unaligned, on purpose. */
    const char *hdr = "{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[8,16]},"
                      "\"c\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[16,24]},"
                      "\"d\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[24,32]}}";
    unsigned char data[32] = {0x00, 0x3c, 0x00, 0xc0, 0x55, 0x35, 0xff, 0x7b,
                              0x80, 0x3f, 0x40, 0xc0, 0x80, 0x3e, 0x49, 0x40};
    double half = 0.5;
    long long seven = 7;
    memcpy(data + 16, &half, 8);
    memcpy(data + 24, &seven, 8);
    const char *path = make_raw("half.safetensors", -1, hdr, data, sizeof data);
    ckpt_st_file *f = NULL;
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &f));
    if (!f) return;
    float got[4];
    float ref_a[4] = {1.0f, -2.0f, 0.333251953125f, 65504.0f};
    float ref_b[4] = {1.0f, -3.0f, 0.25f, 3.140625f};
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, "a", got, 4));
    tz_check_close("F16 hand-built", got, ref_a, 4, 0, 0);
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, "b", got, 4));
    tz_check_close("BF16 hand-built", got, ref_b, 4, 0, 0);
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, "c", got, 1));
    TZ_EXPECT(got[0] == 0.5f, "F64");
    ckpt_st_tensor t;
    TZ_EXPECT_OK(ckpt_safetensors_find(f, "d", &t));
    long long v;
    memcpy(&v, t.data, 8);
    TZ_EXPECT(t.dtype == RT_I64 && t.ndim == 0 && v == 7, "I64 scalar raw data");
    TZ_EXPECT(ckpt_safetensors_read_f32(f, "d", got, 1) == RT_ERR_UNSUPPORTED, "I64 does not convert");
    EXPECT_MSG("dtype I64");
    ckpt_safetensors_close(f);
}

static void test_bad_files(void) {
    char path[512];
    unsigned char data[64] = {0};
    snprintf(path, sizeof path, "%s/does-not-exist.safetensors", g_dir);
    expect_bad("missing file", path, RT_ERR_IO, "does-not-exist.safetensors: cannot open");
    expect_bad("directory", g_dir, RT_ERR_IO, "not a regular file");

    snprintf(path, sizeof path, "%s/empty.safetensors", g_dir);
    fclose(fopen(path, "wb"));
    expect_bad("empty file", path, RT_ERR_FORMAT, "empty file");

    snprintf(path, sizeof path, "%s/short.safetensors", g_dir);
    FILE *fp = fopen(path, "wb");
    fwrite("\x10\x00\x00\x00\x00", 1, 5, fp);
    fclose(fp);
    expect_bad("truncated header length", path, RT_ERR_FORMAT, "too short for the 8-byte header length");

    const char *ok_hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    expect_bad("header length beyond file", make_raw("long.safetensors", 4096, ok_hdr, data, 8), RT_ERR_FORMAT,
               "runs past the end of the file");
    expect_bad("header length 2^64-2", make_raw("huge.safetensors", -2, ok_hdr, data, 8), RT_ERR_FORMAT,
               "runs past the end");
    expect_bad("bad json", make_raw("badjson.safetensors", -1, "{\"a\":{\"dtype\":\"F32\",,}}", data, 8), RT_ERR_FORMAT,
               "header:1:");
    expect_bad("not an object", make_raw("arr.safetensors", -1, "[1, 2]", data, 0), RT_ERR_FORMAT, "'{'");
    expect_bad(
        "offsets out of range",
        make_raw("range.safetensors", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", data, 8),
        RT_ERR_FORMAT, "tensor 'a': data_offsets [0, 16] lie outside the data section (8 bytes)");
    expect_bad(
        "begin after end",
        make_raw("rev.safetensors", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", data, 8),
        RT_ERR_FORMAT, "end before they begin");
    expect_bad("overlap",
               make_raw("overlap.safetensors", -1,
                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                        data, 16),
               RT_ERR_FORMAT, "overlap");
    expect_bad(
        "size mismatch",
        make_raw("size.safetensors", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", data, 8),
        RT_ERR_FORMAT, "F32 [3] needs 12 bytes but data_offsets [0, 8] hold 8");
    expect_bad("unknown dtype",
               make_raw("dtype.safetensors", -1, "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[8],\"data_offsets\":[0,8]}}",
                        data, 8),
               RT_ERR_UNSUPPORTED, "dtype 'F8_E4M3'");
    expect_bad("shape overflow",
               make_raw("overflow.safetensors", -1,
                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,8]}}", data,
                        8),
               RT_ERR_FORMAT, "overflows");
    expect_bad("byte size overflow",
               make_raw("overflow2.safetensors", -1,
                        "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,1073741824],\"data_offsets\":[0,8]}}", data,
                        8),
               RT_ERR_FORMAT, "overflows");
    expect_bad(
        "shape beyond 2^53",
        make_raw("big.safetensors", -1, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1e300],\"data_offsets\":[0,8]}}", data, 8),
        RT_ERR_FORMAT, "shape[0]");
    expect_bad(
        "negative dim",
        make_raw("neg.safetensors", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", data, 8),
        RT_ERR_FORMAT, "shape[0] is not a non-negative integer");
    expect_bad(
        "fractional dim",
        make_raw("frac.safetensors", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", data, 8),
        RT_ERR_FORMAT, "shape[0]");
    expect_bad("missing dtype",
               make_raw("nodtype.safetensors", -1, "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8),
               RT_ERR_FORMAT, "field 'dtype' is missing");
    expect_bad("missing shape",
               make_raw("noshape.safetensors", -1, "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", data, 8),
               RT_ERR_FORMAT, "field 'shape'");
    expect_bad(
        "three offsets",
        make_raw("off3.safetensors", -1, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", data, 8),
        RT_ERR_FORMAT, "data_offsets");
    expect_bad("entry not an object", make_raw("str.safetensors", -1, "{\"a\":\"F32\"}", data, 0), RT_ERR_FORMAT,
               "tensor 'a' is a string");
    expect_bad("duplicate name",
               make_raw("dup.safetensors", -1,
                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                        data, 8),
               RT_ERR_FORMAT, "appears twice");
    expect_bad("metadata not strings", make_raw("meta.safetensors", -1, "{\"__metadata__\":{\"step\":3}}", data, 0),
               RT_ERR_FORMAT, "'__metadata__' field 'step'");
    expect_bad("too many dims",
               make_raw("dims.safetensors", -1,
                        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", data, 1),
               RT_ERR_FORMAT, "9 dimensions");

    /* only metadata and padding: a valid, empty file */
    ckpt_st_file *f = NULL;
    TZ_EXPECT_OK(ckpt_safetensors_open(
        make_raw("meta-only.safetensors", -1, "{\"__metadata__\":{\"format\":\"pt\"}}    ", data, 0), &f));
    if (f) TZ_EXPECT(ckpt_safetensors_count(f) == 0, "no tensors");
    ckpt_safetensors_close(f);
}

/* Which weights an HF folder offers, in HF's order (ckpt_source.h reads them all). */
static void test_hf_dirs(void) {
    char d[512], p[600], out[600];
    snprintf(d, sizeof d, "%s/hf-bin", g_dir);
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/pytorch_model.bin", d);
    fclose(fopen(p, "wb"));
    TZ_EXPECT_OK(ckpt_source_find_weights(d, out, sizeof out));
    TZ_EXPECT(strcmp(out, p) == 0, "pytorch_model.bin: '%s'", out);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    fclose(fopen(p, "wb"));
    TZ_EXPECT_OK(ckpt_source_find_weights(d, out, sizeof out));
    TZ_EXPECT(strcmp(out, p) == 0, "safetensors (sharded) before .bin: '%s'", out);

    snprintf(d, sizeof d, "%s/hf-empty", g_dir);
    mkdir(d, 0755);
    TZ_EXPECT(ckpt_source_find_weights(d, out, sizeof out) == RT_ERR_IO, "no weights");
    EXPECT_MSG("no weights in this directory");
    snprintf(d, sizeof d, "%s/hf-missing", g_dir);
    TZ_EXPECT(ckpt_source_find_weights(d, out, sizeof out) == RT_ERR_IO, "missing dir");
    EXPECT_MSG("hf-missing: cannot open model directory");
}

int main(void) {
    g_dir = tz_tmpdir();
    test_round_trip();
    test_tiny_gpt2();
    test_half_files();
    test_bad_files();
    test_hf_dirs();
    return tz_test_result("test_ckpt_safetensors");
}
