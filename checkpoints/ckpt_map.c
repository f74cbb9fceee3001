/* Matching names against the map tables and converting layouts (see ckpt_map.h). */
#include "checkpoints/ckpt_map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const ckpt_map *const ckpt_maps[] = {&ckpt_map_gpt2, &ckpt_map_bert, &ckpt_map_roberta,
                                            &ckpt_map_t5,   &ckpt_map_glm,  &ckpt_map_megatron_gpt2};

const ckpt_map *ckpt_map_for_arch(const char *arch) {
    for (size_t i = 0; arch && i < sizeof ckpt_maps / sizeof *ckpt_maps; i++)
        if (strcmp(ckpt_maps[i]->arch, arch) == 0) return ckpt_maps[i];
    return NULL;
}

const char *ckpt_map_weights_file(const ckpt_map *map) {
    return map->torch_wrap ? "pytorch_model.bin" : "model.safetensors";
}

const char *ckpt_map_arch_list(void) { return "gpt2, bert, roberta, t5, glm, megatron-gpt2"; }

int ckpt_map_parts(const ckpt_map_row *row) { return row->layout == CKPT_LAYOUT_QKV_PARTS ? 3 : 1; }

/* Matches name against pattern; "{n}" takes a decimal number into nums, "{p}" one of the
 * part words into *part. Recursive only at "{p}", which is tried word by word. */
static bool map_match(const char *pat, const char *name, const char *const *parts, long *nums, int *n_nums, int *part) {
    while (*pat) {
        if (strncmp(pat, "{n}", 3) == 0) {
            if (*name < '0' || *name > '9' || *n_nums >= CKPT_MAP_MAX_NUMS) return false;
            char *end;
            nums[(*n_nums)++] = strtol(name, &end, 10);
            name = end;
            pat += 3;
        } else if (strncmp(pat, "{p}", 3) == 0) {
            for (int k = 0; parts && k < 3; k++) {
                size_t len = strlen(parts[k]);
                int saved = *n_nums;
                if (strncmp(name, parts[k], len) == 0 && map_match(pat + 3, name + len, parts, nums, n_nums, part)) {
                    *part = k;
                    return true;
                }
                *n_nums = saved;
            }
            return false;
        } else if (*pat++ != *name++) {
            return false;
        }
    }
    return *name == '\0';
}

/* pattern with its "{n}" filled from nums and "{p}" with part_word, into out. */
static bool map_fill(const char *pat, const long *nums, int n_nums, const char *part_word, char *out, size_t size) {
    size_t o = 0;
    int k = 0;
    while (*pat) {
        int w;
        if (strncmp(pat, "{n}", 3) == 0) {
            if (k >= n_nums) return false;
            w = snprintf(out + o, size - o, "%ld", nums[k++]);
            pat += 3;
        } else if (strncmp(pat, "{p}", 3) == 0) {
            w = snprintf(out + o, size - o, "%s", part_word ? part_word : "");
            pat += 3;
        } else {
            w = snprintf(out + o, size - o, "%c", *pat++);
        }
        if (w < 0 || (size_t)w >= size - o) return false;
        o += (size_t)w;
    }
    return true;
}

/* Strips the map's prefixes (repeatedly: FlagAI nests "module.model.") and applies renames. */
static void map_normalize(const ckpt_map *map, const char *theirs, char *out, size_t size) {
    const char *s = theirs;
    for (int again = 1; again;) {
        again = 0;
        if (map->prefix[0] && strncmp(s, map->prefix, strlen(map->prefix)) == 0) {
            s += strlen(map->prefix);
            again = 1;
        }
        for (size_t i = 0; map->also_prefixes && map->also_prefixes[i]; i++)
            if (strncmp(s, map->also_prefixes[i], strlen(map->also_prefixes[i])) == 0) {
                s += strlen(map->also_prefixes[i]);
                again = 1;
            }
    }
    snprintf(out, size, "%s", s);
    for (size_t i = 0; map->renames && map->renames[i].from; i++) {
        char *at = strstr(out, map->renames[i].from);
        if (!at) continue;
        char tmp[CKPT_MAP_NAME_MAX];
        snprintf(tmp, sizeof tmp, "%.*s%s%s", (int)(at - out), out, map->renames[i].to,
                 at + strlen(map->renames[i].from));
        snprintf(out, size, "%s", tmp);
    }
}

ckpt_map_kind ckpt_map_import_name(const ckpt_map *map, const char *theirs, ckpt_map_match *m) {
    char name[CKPT_MAP_NAME_MAX];
    long nums[CKPT_MAP_MAX_NUMS];
    int n_nums, part = 0;
    map_normalize(map, theirs, name, sizeof name);
    for (size_t r = 0; r < map->n_rows; r++) {
        const ckpt_map_row *row = &map->rows[r];
        n_nums = 0;
        if (!map_match(row->theirs, name, map->qkv_parts, nums, &n_nums, &part)) continue;
        m->row = row;
        m->part = row->layout == CKPT_LAYOUT_QKV_PARTS ? part : 0;
        if (!map_fill(row->ours, nums, n_nums, NULL, m->ours, sizeof m->ours)) continue;
        return CKPT_MAP_MATCHED;
    }
    for (size_t i = 0; map->ignored && map->ignored[i]; i++) {
        n_nums = 0;
        if (map_match(map->ignored[i], name, map->qkv_parts, nums, &n_nums, &part)) return CKPT_MAP_IGNORED;
    }
    return CKPT_MAP_UNKNOWN;
}

const ckpt_map_row *ckpt_map_find_ours(const ckpt_map *map, const char *ours, long nums[CKPT_MAP_MAX_NUMS],
                                       int *n_nums) {
    int part = 0;
    for (size_t r = 0; r < map->n_rows; r++) {
        if (map->rows[r].flags & CKPT_ROW_ALIAS) continue;
        *n_nums = 0;
        if (map_match(map->rows[r].ours, ours, NULL, nums, n_nums, &part)) return &map->rows[r];
    }
    return NULL;
}

bool ckpt_map_export_name(const ckpt_map *map, const char *ours, int part, char *out, size_t size) {
    long nums[CKPT_MAP_MAX_NUMS];
    int n_nums;
    const ckpt_map_row *row = ckpt_map_find_ours(map, ours, nums, &n_nums);
    if (!row || part < 0 || part >= ckpt_map_parts(row)) return false;
    const char *prefix = row->flags & CKPT_ROW_NO_PREFIX ? "" : map->prefix;
    size_t p = strlen(prefix);
    if (p >= size) return false;
    memcpy(out, prefix, p);
    return map_fill(row->theirs, nums, n_nums, map->qkv_parts ? map->qkv_parts[part] : NULL, out + p, size - p);
}

rt_tp_rule ckpt_map_tp_rule(const ckpt_map *map, const char *ours) {
    long nums[CKPT_MAP_MAX_NUMS];
    int n_nums;
    const ckpt_map_row *row = ckpt_map_find_ours(map, ours, nums, &n_nums);
    if (!row) {
        fprintf(stderr,
                "tunezoo: internal error: parameter '%s' has no row in the %s map (checkpoints/ckpt_map_tables.c)\n",
                ours, map->arch);
        abort();
    }
    return row->tp;
}

bool ckpt_map_our_shape(const ckpt_map_row *row, int ndim, const size_t *their, size_t *ours) {
    for (int k = 0; k < ndim; k++) ours[k] = their[k];
    switch (row->layout) {
    case CKPT_LAYOUT_SAME: return true;
    case CKPT_LAYOUT_TRANSPOSE:
        if (ndim != 2) return false;
        ours[0] = their[1];
        ours[1] = their[0];
        return true;
    case CKPT_LAYOUT_QKV_PARTS:
        if (ndim < 1) return false;
        ours[0] = their[0] * 3;
        return true;
    case CKPT_LAYOUT_QKV_PER_HEAD: return ndim >= 1 && their[0] % 3 == 0;
    }
    return false;
}

void ckpt_map_their_shape(const ckpt_map_row *row, int ndim, const size_t *ours, size_t *their) {
    for (int k = 0; k < ndim; k++) their[k] = ours[k];
    if (row->layout == CKPT_LAYOUT_TRANSPOSE && ndim == 2) {
        their[0] = ours[1];
        their[1] = ours[0];
    } else if (row->layout == CKPT_LAYOUT_QKV_PARTS && ndim >= 1) {
        their[0] = ours[0] / 3;
    }
}

static size_t map_numel(int ndim, const size_t *shape) {
    size_t n = 1;
    for (int k = 0; k < ndim; k++) n *= shape[k];
    return n;
}

/* Rows of dim 0 reordered between [head][3][hs] (per_head) and [3][head][hs] (ours). */
static void map_qkv_reorder(const size_t *shape, int ndim, int n_head, const float *src, float *dst, bool to_ours) {
    size_t rest = map_numel(ndim - 1, shape + 1), hs = shape[0] / 3 / (size_t)n_head, nh = (size_t)n_head;
    for (size_t h = 0; h < nh; h++)
        for (size_t part = 0; part < 3; part++) {
            size_t per_head = (h * 3 + part) * hs * rest, fused = (part * nh + h) * hs * rest;
            memcpy(dst + (to_ours ? fused : per_head), src + (to_ours ? per_head : fused), hs * rest * sizeof(float));
        }
}

#if defined(__AVX2__)
#include <immintrin.h>
/* One 8 x 8 block: src rows are `cols` apart, dst rows `rows` apart. */
static void map_transpose8(float *dst, const float *src, size_t rows, size_t cols) {
    __m256 r[8], t[8], u[8];
    for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(src + (size_t)k * cols);
    for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 2; k++) {
        u[4 * k] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
        u[4 * k + 1] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
        u[4 * k + 2] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
        u[4 * k + 3] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps(dst + (size_t)k * rows, _mm256_permute2f128_ps(u[k], u[k + 4], 0x20));
        _mm256_storeu_ps(dst + (size_t)(k + 4) * rows, _mm256_permute2f128_ps(u[k], u[k + 4], 0x31));
    }
}
#endif

/* dst (cols x rows) = src (rows x cols) transposed, in 32 x 32 tiles (8 x 8 AVX2 blocks inside
 * where the build has AVX2). Row by row, every store of a 6144-column matrix missed the cache
 * and the transpose was half of a GPT-2 import's time; tiles and blocks made it 2x faster. */
static void map_transpose(float *dst, const float *src, size_t rows, size_t cols) {
    enum { TILE = 32 };
#pragma omp parallel for collapse(2) schedule(static) if (rows * cols >= (1u << 18))
    for (size_t r0 = 0; r0 < rows; r0 += TILE)
        for (size_t c0 = 0; c0 < cols; c0 += TILE) {
            size_t r1 = r0 + TILE < rows ? r0 + TILE : rows, c1 = c0 + TILE < cols ? c0 + TILE : cols;
#if defined(__AVX2__)
            if (r1 - r0 == TILE && c1 - c0 == TILE) {
                for (size_t r = r0; r < r1; r += 8)
                    for (size_t c = c0; c < c1; c += 8)
                        map_transpose8(dst + c * rows + r, src + r * cols + c, rows, cols);
                continue;
            }
#endif
            for (size_t r = r0; r < r1; r++)
                for (size_t c = c0; c < c1; c++) dst[c * rows + r] = src[r * cols + c];
        }
}

void ckpt_map_to_ours(const ckpt_map_row *row, int ndim, const size_t *shape, int n_head, const float *src,
                      float *dst) {
    size_t n = map_numel(ndim, shape);
    switch (row->layout) {
    case CKPT_LAYOUT_TRANSPOSE: map_transpose(dst, src, shape[1], shape[0]); return; /* theirs [in, out] */
    case CKPT_LAYOUT_QKV_PER_HEAD: map_qkv_reorder(shape, ndim, n_head, src, dst, true); return;
    case CKPT_LAYOUT_SAME:
    case CKPT_LAYOUT_QKV_PARTS: memcpy(dst, src, n * sizeof(float)); return;
    }
}

void ckpt_map_to_theirs(const ckpt_map_row *row, int ndim, const size_t *shape, int n_head, const float *src,
                        float *dst) {
    size_t n = map_numel(ndim, shape);
    switch (row->layout) {
    case CKPT_LAYOUT_TRANSPOSE: map_transpose(dst, src, shape[0], shape[1]); return;
    case CKPT_LAYOUT_QKV_PER_HEAD: map_qkv_reorder(shape, ndim, n_head, src, dst, false); return;
    case CKPT_LAYOUT_SAME:
    case CKPT_LAYOUT_QKV_PARTS: memcpy(dst, src, n * sizeof(float)); return;
    }
}
