/* tz-convert's conversions (see ckpt_convert.h). */
#include "checkpoints/ckpt_convert.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_native.h"
#include "checkpoints/ckpt_sharded.h"
#include "checkpoints/ckpt_source.h"
#include "checkpoints/ckpt_torch_write.h"
#include "checkpoints/ckpt_weights.h"
#include "runtime/base/rt_atomic.h"
#include "runtime/base/rt_fs.h"
#include "runtime/base/rt_json.h"
#include "runtime/base/rt_log.h"
#include "runtime/base/rt_signal.h"

#define CONV_PATH_MAX 4096
#define CONV_MAX_RANKS 512

/* The files besides weights that a model folder carries and a conversion copies along. */
static const char *const conv_side_files[] = {"config.json",
                                              "generation_config.json",
                                              "tokenizer.json",
                                              "tokenizer_config.json",
                                              "special_tokens_map.json",
                                              "added_tokens.json",
                                              "vocab.json",
                                              "merges.txt",
                                              "vocab.txt",
                                              "spiece.model",
                                              "sentencepiece.model",
                                              "cog-pretrain.model"};

static double conv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool conv_is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool conv_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The folder a source path lives in (itself when it is one). */
static void conv_dir_of(const char *path, char *out, size_t size) {
    if (conv_is_dir(path)) {
        snprintf(out, size, "%s", path);
        return;
    }
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, size, ".");
    else
        snprintf(out, size, "%.*s", (int)(slash - path), path);
}

/* ---- progress ---- */

typedef struct {
    const char *what;
    size_t n_total, n;
    double bytes_total, bytes, t0, last;
} conv_progress;

static void conv_progress_start(conv_progress *p, const char *what, size_t n_total, double bytes_total) {
    *p = (conv_progress){.what = what, .n_total = n_total, .bytes_total = bytes_total, .t0 = conv_now()};
    p->last = p->t0;
}

/* A line every two seconds: enough to see a large conversion move, few enough for a log. */
/* Counts a tensor done; a SIGINT or SIGTERM since the start ends the conversion here, and the
 * caller's cleanup removes the half-built output. */
static rt_status conv_progress_step(conv_progress *p, double bytes) {
    p->n++;
    p->bytes += bytes;
    int sig = rt_signal_stop_requested();
    if (sig)
        return rt_errorf(RT_ERR_RUNTIME, "%s stopped by %s after %zu of %zu tensors; nothing was written", p->what,
                         sig == SIGINT ? "SIGINT" : "SIGTERM", p->n, p->n_total);
    double t = conv_now();
    if (t - p->last < 2.0) return RT_OK;
    p->last = t;
    rt_log_info("%s: %zu/%zu tensors, %.2f/%.2f GB, %.2f GB/s", p->what, p->n, p->n_total, p->bytes / 1e9,
                p->bytes_total / 1e9, p->bytes / 1e9 / (t - p->t0));
    return RT_OK;
}

static void conv_progress_end(conv_progress *p, const char *out, ckpt_convert_stats *stats) {
    double dt = conv_now() - p->t0;
    if (stats) *stats = (ckpt_convert_stats){.tensors = p->n, .bytes = p->bytes, .seconds = dt};
    rt_log_info("%s: %zu tensors, %.3f GB in %.2f s (%.2f GB/s) -> %s", p->what, p->n, p->bytes / 1e9, dt,
                dt > 0 ? p->bytes / 1e9 / dt : 0.0, out);
}

/* ---- finding the source's rank files ---- */

/* Megatron-LM: <src>[/iter_NNNNNNN|/release]/mp_rank_NN/model_optim_rng.pt, the iteration from
 * latest_checkpointed_iteration.txt. Returns the number of ranks (0: not a Megatron folder). */
static rt_status conv_megatron_ranks(const char *src, char paths[][CONV_PATH_MAX], int *n) {
    char base[CONV_PATH_MAX], latest[CONV_PATH_MAX], probe[CONV_PATH_MAX + 64];
    *n = 0;
    snprintf(base, sizeof base, "%s", src);
    snprintf(latest, sizeof latest, "%s/latest_checkpointed_iteration.txt", src);
    if (conv_is_file(latest)) {
        char *text = NULL;
        size_t len = 0;
        rt_status st = rt_read_file(latest, 0, &text, &len);
        if (st != RT_OK) return st;
        char *end;
        long it = strtol(text, &end, 10);
        while (*end == '\n' || *end == ' ' || *end == '\r') end++;
        if (strncmp(text, "release", 7) == 0)
            snprintf(base, sizeof base, "%s/release", src);
        else if (end != text && *end == '\0' && it >= 0)
            snprintf(base, sizeof base, "%s/iter_%07ld", src, it);
        else
            st = rt_errorf(RT_ERR_FORMAT, "%s: expected an iteration number or \"release\"", latest);
        free(text);
        if (st != RT_OK) return st;
    }
    for (int r = 0; r < CONV_MAX_RANKS; r++) {
        static const char *const names[] = {"model_optim_rng.pt", "model_rng.pt"};
        int found = 0;
        for (size_t k = 0; k < 2 && !found; k++) {
            snprintf(probe, sizeof probe, "%s/mp_rank_%02d/%s", base, r, names[k]);
            if (conv_is_file(probe)) {
                snprintf(paths[r], CONV_PATH_MAX, "%s", probe);
                found = 1;
            }
        }
        if (!found) break;
        (*n)++;
    }
    snprintf(probe, sizeof probe, "%s/mp_rank_00_000", base);
    if (*n == 0 && conv_is_dir(probe))
        return rt_errorf(RT_ERR_UNSUPPORTED,
                         "%s: pipeline-parallel Megatron checkpoints (mp_rank_NN_PPP) are not "
                         "supported; merge the pipeline stages with Megatron's tools/checkpoint/convert.py first",
                         base);
    return RT_OK;
}

/* FlagAI's model-parallel GLM files: <src>/pytorch_model_NN.bin. */
static int conv_flagai_ranks(const char *src, char paths[][CONV_PATH_MAX]) {
    int n = 0;
    for (; n < CONV_MAX_RANKS; n++) {
        snprintf(paths[n], CONV_PATH_MAX, "%s/pytorch_model_%02d.bin", src, n);
        if (!conv_is_file(paths[n])) break;
    }
    return n;
}

/* ---- config ---- */

/* An HF GPT-2 config.json for a Megatron GPT, from the checkpoint's args (as HF's own Megatron
 * converter writes one). Megatron's GELU is the erf one unless --openai-gelu. */
static rt_status conv_megatron_config(const char *rank0, int vocab, char **json) {
    rt_status st = RT_OK;
    ckpt_source *s = NULL;
    double v[6] = {0}, gelu = 0, eps = 1e-5;
    static const char *const keys[6] = {"args.num_layers",          "args.hidden_size",
                                        "args.num_attention_heads", "args.max_position_embeddings",
                                        "args.ffn_hidden_size",     "args.padded_vocab_size"};
    RT_TRY(ckpt_source_open(rank0, &s));
    for (int k = 0; k < 5; k++)
        if (!ckpt_source_scalar(s, keys[k], &v[k]))
            RT_FAIL(RT_ERR_CONFIG,
                    "%s: no '%s' in the checkpoint (it has no Megatron args); pass --hf-config with an "
                    "HF GPT-2 config.json for this model",
                    rank0, keys[k]);
    (void)ckpt_source_scalar(s, "args.openai_gelu", &gelu);
    (void)ckpt_source_scalar(s, "args.layernorm_epsilon", &eps);
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "model_type", "gpt2");
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddNumberToObject(c, "vocab_size", vocab);
    cJSON_AddNumberToObject(c, "n_layer", v[0]);
    cJSON_AddNumberToObject(c, "n_embd", v[1]);
    cJSON_AddNumberToObject(c, "n_head", v[2]);
    cJSON_AddNumberToObject(c, "n_positions", v[3]);
    cJSON_AddNumberToObject(c, "n_inner", v[4]);
    cJSON_AddStringToObject(c, "activation_function", gelu != 0 ? "gelu_new" : "gelu");
    cJSON_AddNumberToObject(c, "layer_norm_epsilon", eps);
    cJSON_AddStringToObject(c, "tokenizer_class", "GPT2Tokenizer");
    *json = cJSON_Print(c);
    cJSON_Delete(c);
fail:
    ckpt_source_close(s);
    return st;
}

/* A scalar of a Megatron rank file (args.*), or def. */
static int conv_megatron_int(const char *rank0, const char *key, int def) {
    ckpt_source *s = NULL;
    double v = def;
    if (ckpt_source_open(rank0, &s) == RT_OK) (void)ckpt_source_scalar(s, key, &v);
    ckpt_source_close(s);
    return (int)v;
}

/* ---- import ---- */

typedef struct {
    char rank_paths[CONV_MAX_RANKS][CONV_PATH_MAX];
    int n_ranks;
    bool megatron;
    const ckpt_map *map;
    cJSON *config; /* the source's config.json, when there is one */
    char config_path[CONV_PATH_MAX];
    char *made_config; /* a config.json built for a Megatron source */
    int n_head, vocab;
} conv_import;

static rt_status conv_import_plan(const ckpt_import_opts *o, conv_import *c) {
    rt_status st = RT_OK;
    char dir[CONV_PATH_MAX];
    const char *model_type = NULL;
    conv_dir_of(o->src, dir, sizeof dir);
    if (conv_is_dir(o->src)) {
        RT_TRY(conv_megatron_ranks(o->src, c->rank_paths, &c->n_ranks));
        c->megatron = c->n_ranks > 0;
        if (!c->megatron) c->n_ranks = conv_flagai_ranks(o->src, c->rank_paths);
    }
    if (o->hf_config)
        snprintf(c->config_path, sizeof c->config_path, "%s", o->hf_config);
    else
        snprintf(c->config_path, sizeof c->config_path, "%s/config.json", dir);
    if (conv_is_file(c->config_path)) {
        RT_TRY(rt_json_load(c->config_path, &c->config));
        RT_TRY(rt_json_get_string(c->config, c->config_path, "model_type", &model_type, false, NULL));
        /* FlagAI's GLM config has no model_type; its block_position_encoding says GLM */
        if (!model_type && cJSON_GetObjectItemCaseSensitive(c->config, "block_position_encoding")) model_type = "glm";
    } else if (o->hf_config) {
        RT_FAIL(RT_ERR_IO, "%s: cannot open the --hf-config file", o->hf_config);
    } else {
        c->config_path[0] = '\0';
    }
    const char *arch = o->arch ? o->arch : c->megatron ? "megatron-gpt2" : model_type;
    if (!arch)
        RT_FAIL(RT_ERR_CONFIG, "%s: cannot tell the architecture (no config.json with a model_type); pass --arch (%s)",
                o->src, ckpt_map_arch_list());
    c->map = ckpt_map_for_arch(arch);
    if (!c->map) RT_FAIL(RT_ERR_CONFIG, "architecture '%s' is not supported (%s)", arch, ckpt_map_arch_list());
    if (c->megatron && strcmp(c->map->arch, "megatron-gpt2") != 0)
        RT_FAIL(RT_ERR_CONFIG, "%s: a Megatron-LM checkpoint; only --arch megatron-gpt2 reads it", o->src);
    /* the head count and vocab: the config, else (Megatron) the checkpoint's args */
    c->n_head = 0;
    c->vocab = o->vocab_size;
    if (c->config) {
        const char *heads_key = c->megatron ? "n_head" : c->map->heads_key;
        const char *vocab_key = c->megatron ? "vocab_size" : c->map->vocab_key;
        RT_TRY(rt_json_get_int(c->config, c->config_path, heads_key, &c->n_head, false, 0));
        if (c->vocab < 1) RT_TRY(rt_json_get_int(c->config, c->config_path, vocab_key, &c->vocab, false, 0));
    }
    if (c->megatron) {
        if (c->n_head < 1) c->n_head = conv_megatron_int(c->rank_paths[0], "args.num_attention_heads", 0);
        if (c->vocab < 1) c->vocab = conv_megatron_int(c->rank_paths[0], "args.padded_vocab_size", 0);
        if (!c->config) RT_TRY(conv_megatron_config(c->rank_paths[0], c->vocab, &c->made_config));
    }
    if (o->tp < 1) RT_FAIL(RT_ERR_CONFIG, "--tp %d must be >= 1", o->tp);
    if (c->n_head > 0 && c->n_head % o->tp)
        RT_FAIL(RT_ERR_CONFIG, "--tp %d does not divide the model's %d attention heads", o->tp, c->n_head);
    if (c->n_ranks > 1 && c->vocab < 1)
        RT_FAIL(RT_ERR_CONFIG, "%s: the vocab size is needed to join the embedding's shards; pass --vocab-size",
                o->src);
fail:
    return st;
}

/* config.json (or the one built) and the tokenizer files of the source folder. */
static rt_status conv_copy_side_files(ckpt_sharded_writer *w, const conv_import *c, const char *src) {
    rt_status st = RT_OK;
    char dir[CONV_PATH_MAX], path[CONV_PATH_MAX + 64];
    conv_dir_of(src, dir, sizeof dir);
    if (c->made_config)
        RT_TRY(ckpt_sharded_writer_put_file(w, "config.json", c->made_config, strlen(c->made_config)));
    else if (c->config_path[0]) {
        char *text = NULL;
        size_t n = 0;
        RT_TRY(rt_read_file(c->config_path, 0, &text, &n));
        st = ckpt_sharded_writer_put_file(w, "config.json", text, n);
        free(text);
        RT_TRY(st);
    }
    for (size_t k = 1; k < sizeof conv_side_files / sizeof *conv_side_files; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, conv_side_files[k]);
        if (conv_is_file(path)) RT_TRY(ckpt_sharded_writer_copy(w, path));
    }
fail:
    return st;
}

rt_status ckpt_convert_import(const ckpt_import_opts *o, ckpt_convert_stats *stats) {
    rt_status st = RT_OK;
    conv_import *c = rt_xcalloc(1, sizeof *c);
    ckpt_weights *w = NULL;
    ckpt_sharded_writer *out = NULL;
    float *full = NULL;
    size_t cap = 0;
    RT_TRY(conv_import_plan(o, c));
    if (c->n_ranks > 0) {
        const char *paths[CONV_MAX_RANKS];
        for (int r = 0; r < c->n_ranks; r++) paths[r] = c->rank_paths[r];
        RT_TRY(ckpt_weights_open_ranks(paths, c->n_ranks, c->map, c->n_head, c->vocab, &w));
    } else {
        RT_TRY(ckpt_weights_open(o->src, c->map, c->n_head, &w));
    }
    /* the megatron-gpt2 table reads checkpoint_version >= 2 ([head][q, k, v] rows); version 0
     * ([q; k; v]) and 1.0 ([head][head_dim][q, k, v]) order them otherwise; Megatron reads a
     * missing version as 0 */
    double version = 0;
    if (!strcmp(c->map->arch, "megatron-gpt2") &&
        (!ckpt_weights_scalar(w, "checkpoint_version", &version) || version < 2))
        RT_FAIL(RT_ERR_UNSUPPORTED,
                "%s: Megatron checkpoint_version %g; tz-convert reads version 2 and later (load "
                "and save it once with a recent Megatron-LM to upgrade it)",
                o->src, version);
    const char *first_unused = NULL;
    if (ckpt_weights_unused(w, &first_unused))
        rt_log_warn("%s: %zu tensors map to no %s parameter and are left out (the first: '%s')", o->src,
                    ckpt_weights_unused(w, NULL), c->map->arch, first_unused);
    const size_t n = ckpt_weights_count(w);
    if (n == 0) RT_FAIL(RT_ERR_FORMAT, "%s: no %s tensors in it", o->src, c->map->arch);
    double total = 0;
    rt_dtype dtype = o->dtype;
    for (size_t i = 0; i < n; i++) {
        ckpt_weight_info info;
        ckpt_weights_info(w, i, &info);
        total += (double)info.numel * (double)rt_dtype_size(info.dtype);
        if (i == 0 && o->keep_dtype) dtype = info.dtype == RT_F64 ? RT_F32 : info.dtype;
    }
    if (o->check && c->config_path[0]) { /* the model the config describes, before writing a byte */
        ckpt_tensor_shape *shapes = rt_xcalloc(n, sizeof *shapes);
        ckpt_weight_info *infos = rt_xcalloc(n, sizeof *infos);
        for (size_t i = 0; i < n; i++) {
            ckpt_weights_info(w, i, &infos[i]);
            shapes[i] = (ckpt_tensor_shape){infos[i].name, infos[i].ndim, infos[i].shape};
        }
        const char *ours = c->map->ours_arch ? c->map->ours_arch : c->map->arch;
        st = o->check(ours, c->config_path, shapes, n, o->src);
        free(shapes);
        free(infos);
        RT_TRY(st);
    }
    /* the embedding's rows are the vocab, whatever the config said (HF configs round it up
     * sometimes; the table is what the ids index) */
    int vocab = c->vocab;
    for (size_t i = 0; i < n; i++) {
        ckpt_weight_info info;
        ckpt_weights_info(w, i, &info);
        if (info.row->tp == RT_TP_VOCAB && c->n_ranks == 0) vocab = (int)info.shape[0];
    }
    ckpt_sharded_spec spec = {.arch = c->map->ours_arch ? c->map->ours_arch : c->map->arch,
                              .source_arch = c->map->arch,
                              .source = o->src,
                              .tp = o->tp,
                              .dtype = dtype,
                              .n_head = c->n_head,
                              .vocab_size = vocab};
    RT_TRY(ckpt_sharded_writer_begin(o->out, &spec, &out));
    RT_TRY(conv_copy_side_files(out, c, o->src));
    conv_progress p;
    conv_progress_start(&p, "import", n, total);
    for (size_t i = 0; i < n; i++) {
        ckpt_weight_info info;
        ckpt_weights_info(w, i, &info);
        if (info.numel > cap) {
            cap = info.numel;
            full = rt_xrealloc(full, cap * sizeof(float));
        }
        RT_TRY(ckpt_weights_read(w, i, full));
        RT_TRY(ckpt_sharded_writer_add(out, info.name, info.row->tp, info.ndim, info.shape, full));
        RT_TRY(conv_progress_step(&p, (double)info.numel * (double)rt_dtype_size(info.dtype)));
    }
    st = ckpt_sharded_writer_commit(out);
    out = NULL;
    RT_TRY(st);
    conv_progress_end(&p, o->out, stats);
fail:
    ckpt_sharded_writer_abort(out);
    ckpt_weights_close(w);
    cJSON_Delete(c->config);
    cJSON_free(c->made_config);
    free(c);
    free(full);
    return st;
}

/* ---- reshard ---- */

/* Bytes the folder's tensors take as stored (for the progress lines). */
static double conv_sharded_bytes(const ckpt_sharded *s) {
    double total = 0;
    for (size_t i = 0; i < ckpt_sharded_count(s); i++) {
        ckpt_sharded_tensor t;
        ckpt_sharded_tensor_at(s, i, &t);
        total += (double)t.numel * (double)rt_dtype_size(ckpt_sharded_dtype(s));
    }
    return total;
}

rt_status ckpt_convert_reshard(const char *in, const char *out, int tp, ckpt_convert_stats *stats) {
    rt_status st = RT_OK;
    ckpt_sharded *s = NULL;
    ckpt_sharded_writer *w = NULL;
    float *full = NULL;
    size_t cap = 0;
    char path[CONV_PATH_MAX + 256];
    RT_TRY(ckpt_sharded_open(in, &s));
    const ckpt_map *map = ckpt_map_for_arch(ckpt_sharded_arch(s));
    if (!map) RT_FAIL(RT_ERR_FORMAT, "%s: arch \"%s\" is not one tunezoo knows", in, ckpt_sharded_arch(s));
    if (ckpt_sharded_n_head(s) > 0 && ckpt_sharded_n_head(s) % tp)
        RT_FAIL(RT_ERR_CONFIG, "--tp %d does not divide the model's %d attention heads", tp, ckpt_sharded_n_head(s));
    ckpt_sharded_spec spec = {.arch = ckpt_sharded_arch(s),
                              .source_arch = ckpt_sharded_arch(s),
                              .source = in,
                              .tp = tp,
                              .dtype = ckpt_sharded_dtype(s),
                              .n_head = ckpt_sharded_n_head(s),
                              .vocab_size = ckpt_sharded_vocab_size(s)};
    RT_TRY(ckpt_sharded_writer_begin(out, &spec, &w));
    for (size_t i = 0; i < ckpt_sharded_file_count(s); i++) {
        snprintf(path, sizeof path, "%s/%s", in, ckpt_sharded_file(s, i));
        RT_TRY(ckpt_sharded_writer_copy(w, path));
    }
    const size_t n = ckpt_sharded_count(s);
    const double total = conv_sharded_bytes(s);
    conv_progress p;
    conv_progress_start(&p, "reshard", n, total);
    for (size_t i = 0; i < n; i++) {
        ckpt_sharded_tensor t;
        ckpt_sharded_tensor_at(s, i, &t);
        if (t.numel > cap) {
            cap = t.numel;
            full = rt_xrealloc(full, cap * sizeof(float));
        }
        /* stored values convert to float32 and back exactly, so this is bit-exact */
        RT_TRY(ckpt_sharded_read_full(s, i, full));
        RT_TRY(ckpt_sharded_writer_add(w, t.name, t.rule, t.ndim, t.shape, full));
        RT_TRY(conv_progress_step(&p, (double)t.numel * (double)rt_dtype_size(ckpt_sharded_dtype(s))));
    }
    st = ckpt_sharded_writer_commit(w);
    w = NULL;
    RT_TRY(st);
    conv_progress_end(&p, out, stats);
fail:
    ckpt_sharded_writer_abort(w);
    ckpt_sharded_close(s);
    free(full);
    return st;
}

/* ---- export ---- */

typedef struct {
    ckpt_st_write_entry *entries;
    char (*names)[CKPT_MAP_NAME_MAX];
    size_t (*shapes)[CKPT_MAX_DIMS];
    size_t n;
} conv_export_plan;

/* Their names and shapes of every tensor, in the folder's order (so an export is byte-stable). */
static rt_status conv_export_names(const ckpt_sharded *s, const ckpt_map *map, conv_export_plan *e) {
    const size_t n = ckpt_sharded_count(s);
    e->entries = rt_xcalloc(3 * n + 1, sizeof *e->entries);
    e->names = rt_xcalloc(3 * n + 1, sizeof *e->names);
    e->shapes = rt_xcalloc(3 * n + 1, sizeof *e->shapes);
    for (size_t i = 0; i < n; i++) {
        ckpt_sharded_tensor t;
        long nums[CKPT_MAP_MAX_NUMS];
        int n_nums;
        ckpt_sharded_tensor_at(s, i, &t);
        const ckpt_map_row *row = ckpt_map_find_ours(map, t.name, nums, &n_nums);
        if (!row)
            return rt_errorf(RT_ERR_FORMAT, "%s: tensor '%s' is not a %s parameter", ckpt_sharded_dir(s), t.name,
                             map->arch);
        for (int k = 0; k < ckpt_map_parts(row); k++, e->n++) {
            RT_CHECK(ckpt_map_export_name(map, t.name, k, e->names[e->n], sizeof e->names[e->n]), "export name");
            ckpt_map_their_shape(row, t.ndim, t.shape, e->shapes[e->n]);
            e->entries[e->n] = (ckpt_st_write_entry){
                .name = e->names[e->n], .ndim = t.ndim, .shape = e->shapes[e->n], .store = ckpt_sharded_dtype(s)};
        }
    }
    return RT_OK;
}

/* One tensor part into a torch writer, in the folder's stored dtype. */
static rt_status conv_torch_put(ckpt_torch_writer *tw, const ckpt_st_write_entry *e, const float *data, void **bytes,
                                size_t *cap) {
    size_t n = 1;
    for (int d = 0; d < e->ndim; d++) n *= e->shape[d];
    const void *src = data;
    if (e->store != RT_F32) {
        if (n * 2 > *cap) {
            *cap = n * 2;
            *bytes = rt_xrealloc(*bytes, *cap);
        }
        uint16_t *h = *bytes;
        for (size_t i = 0; i < n; i++) h[i] = e->store == RT_BF16 ? rt_f32_to_bf16(data[i]) : rt_f32_to_f16(data[i]);
        src = h;
    }
    return ckpt_torch_writer_add(tw, e->name, e->store, e->ndim, e->shape, src);
}

rt_status ckpt_convert_export(const char *in, const char *out_dir, ckpt_convert_stats *stats) {
    rt_status st = RT_OK;
    ckpt_sharded *s = NULL;
    ckpt_st_writer *sw = NULL;
    ckpt_torch_writer *tw = NULL;
    void *bytes = NULL;
    size_t bytes_cap = 0, entry = 0;
    conv_export_plan plan = {0};
    float *full = NULL, *theirs = NULL;
    size_t cap = 0;
    char *partial = NULL, path[CONV_PATH_MAX + 256];
    struct stat sb;
    if (stat(out_dir, &sb) == 0)
        return rt_errorf(RT_ERR_IO,
                         "%s: already exists; tz-convert does not overwrite (remove it or pick another name)", out_dir);
    RT_TRY(ckpt_sharded_open(in, &s));
    const ckpt_map *map = ckpt_map_for_arch(ckpt_sharded_arch(s));
    if (!map) RT_FAIL(RT_ERR_FORMAT, "%s: arch \"%s\" is not one tunezoo knows", in, ckpt_sharded_arch(s));
    RT_TRY(conv_export_names(s, map, &plan));
    RT_TRY(rt_atomic_partial_dir(out_dir, &partial));
    snprintf(path, sizeof path, "%s/%s", partial, ckpt_map_weights_file(map));
    if (map->torch_wrap)
        RT_TRY(ckpt_torch_writer_begin(path, map->torch_wrap, &tw));
    else
        RT_TRY(ckpt_safetensors_writer_begin(path, plan.n, plan.entries, "{\"format\":\"pt\"}", &sw));
    const size_t n = ckpt_sharded_count(s);
    const double total = conv_sharded_bytes(s);
    conv_progress p;
    conv_progress_start(&p, "export", n, total);
    for (size_t i = 0; i < n; i++) {
        ckpt_sharded_tensor t;
        long nums[CKPT_MAP_MAX_NUMS];
        int n_nums;
        ckpt_sharded_tensor_at(s, i, &t);
        const ckpt_map_row *row = ckpt_map_find_ours(map, t.name, nums, &n_nums);
        if (t.numel > cap) {
            cap = t.numel;
            full = rt_xrealloc(full, cap * sizeof(float));
            theirs = rt_xrealloc(theirs, cap * sizeof(float));
        }
        RT_TRY(ckpt_sharded_read_full(s, i, full));
        ckpt_map_to_theirs(row, t.ndim, t.shape, ckpt_sharded_n_head(s), full, theirs);
        const int parts = ckpt_map_parts(row);
        for (int k = 0; k < parts; k++) {
            const float *part = theirs + (size_t)k * (t.numel / (size_t)parts);
            if (sw) {
                RT_TRY(ckpt_safetensors_writer_put(sw, part));
                continue;
            }
            const ckpt_st_write_entry *e = &plan.entries[entry++];
            RT_TRY(conv_torch_put(tw, e, part, &bytes, &bytes_cap));
        }
        RT_TRY(conv_progress_step(&p, (double)t.numel * (double)rt_dtype_size(ckpt_sharded_dtype(s))));
    }
    st = sw ? ckpt_safetensors_writer_commit(sw) : ckpt_torch_writer_commit(tw);
    sw = NULL;
    tw = NULL;
    RT_TRY(st);
    for (size_t i = 0; i < ckpt_sharded_file_count(s); i++) {
        char *text = NULL, src[CONV_PATH_MAX + 256];
        size_t len = 0;
        snprintf(src, sizeof src, "%s/%s", in, ckpt_sharded_file(s, i));
        snprintf(path, sizeof path, "%s/%s", partial, ckpt_sharded_file(s, i));
        RT_TRY(rt_read_file(src, 0, &text, &len));
        st = rt_atomic_write_file(path, text, len);
        free(text);
        RT_TRY(st);
    }
    if (rename(partial, out_dir) != 0)
        RT_FAIL(RT_ERR_IO, "%s: cannot move the finished folder into place: %s", out_dir, strerror(errno));
    free(partial);
    partial = NULL;
    conv_progress_end(&p, out_dir, stats);
fail:
    ckpt_safetensors_writer_abort(sw);
    ckpt_torch_writer_abort(tw);
    free(bytes);
    if (partial) rt_atomic_partial_dir_remove(partial); /* what we wrote */
    free(partial);
    ckpt_sharded_close(s);
    free(plan.entries);
    free(plan.names);
    free(plan.shapes);
    free(full);
    free(theirs);
    return st;
}

/* ---- inspect and verify ---- */

static void conv_print_tensor(FILE *out, const char *name, rt_dtype dtype, int ndim, const size_t *shape,
                              const char *crc) {
    char sbuf[128];
    fprintf(out, "%-60s %-5s %-20s %s\n", name, rt_dtype_name(dtype), ckpt_shape_str(ndim, shape, sbuf, sizeof sbuf),
            crc);
}

static bool conv_is_native(const char *path) {
    char magic[8] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t got = read(fd, magic, sizeof magic);
    close(fd);
    return got == (ssize_t)sizeof magic && memcmp(magic, "TZCKPT\0\0", 8) == 0;
}

rt_status ckpt_convert_inspect(const char *path, FILE *out) {
    rt_status st = RT_OK;
    double params = 0, bytes = 0;
    size_t count = 0;
    char crc[16 * 9 + 8];
    if (ckpt_sharded_is_dir(path)) {
        ckpt_sharded *s = NULL;
        RT_TRY(ckpt_sharded_open(path, &s));
        fprintf(out, "%s: tunezoo sharded, arch %s, tp %d, %s\n", path, ckpt_sharded_arch(s), ckpt_sharded_tp(s),
                rt_dtype_name(ckpt_sharded_dtype(s)));
        count = ckpt_sharded_count(s);
        for (size_t i = 0; i < count; i++) {
            ckpt_sharded_tensor t;
            ckpt_sharded_tensor_at(s, i, &t);
            size_t at = (size_t)snprintf(crc, sizeof crc, "%s", ckpt_sharded_rule_name(t.rule));
            for (int r = 0; r < ckpt_sharded_tp(s) && at + 10 < sizeof crc; r++) {
                const void *data;
                size_t nb;
                ckpt_sharded_shard(s, i, r, &data, &nb);
                at += (size_t)snprintf(crc + at, sizeof crc - at, " %08x", (unsigned)ckpt_native_crc32(data, nb));
            }
            conv_print_tensor(out, t.name, ckpt_sharded_dtype(s), t.ndim, t.shape, crc);
            params += (double)t.numel;
            bytes += (double)t.numel * (double)rt_dtype_size(ckpt_sharded_dtype(s));
        }
        ckpt_sharded_close(s);
    } else if (conv_is_file(path) && conv_is_native(path)) {
        ckpt_native_file *f = NULL;
        RT_TRY(ckpt_native_open(path, &f));
        fprintf(out, "%s: tunezoo checkpoint (.tzck)\n", path);
        count = ckpt_native_count(f);
        for (size_t i = 0; i < count; i++) {
            ckpt_native_record r;
            ckpt_native_record_at(f, i, &r);
            snprintf(crc, sizeof crc, "%08x", (unsigned)r.crc32);
            conv_print_tensor(out, r.name, r.dtype, r.ndim, r.shape, crc);
            params += (double)r.numel;
            bytes += (double)r.nbytes;
        }
        ckpt_native_close(f);
    } else {
        ckpt_source *s = NULL;
        RT_TRY(ckpt_source_open(path, &s));
        fprintf(out, "%s\n", ckpt_source_path(s));
        count = ckpt_source_count(s);
        for (size_t i = 0; i < count; i++) {
            ckpt_st_tensor t;
            ckpt_source_tensor(s, i, &t);
            snprintf(crc, sizeof crc, "%08x", (unsigned)ckpt_native_crc32(t.data, t.nbytes));
            conv_print_tensor(out, t.name, t.dtype, t.ndim, t.shape, crc);
            params += (double)t.numel;
            bytes += (double)t.nbytes;
        }
        ckpt_source_close(s);
    }
    fprintf(out, "%zu tensors, %.0f elements, %.0f bytes\n", count, params, bytes);
fail:
    return st;
}

rt_status ckpt_convert_verify(const char *dir, ckpt_shape_check_fn check, FILE *out) {
    rt_status st = RT_OK;
    ckpt_sharded *s = NULL;
    ckpt_sharded_tensor *t = NULL;
    ckpt_tensor_shape *shapes = NULL;
    if (!ckpt_sharded_is_dir(dir))
        return rt_errorf(RT_ERR_IO, "%s: not a tunezoo sharded folder (no %s)", dir, CKPT_SHARDED_MANIFEST);
    RT_TRY(ckpt_sharded_open(dir, &s));
    char config[CONV_PATH_MAX + 16];
    snprintf(config, sizeof config, "%s/config.json", dir);
    if (check && conv_is_file(config)) {
        const size_t n = ckpt_sharded_count(s);
        t = rt_xcalloc(n ? n : 1, sizeof *t);
        shapes = rt_xcalloc(n ? n : 1, sizeof *shapes);
        for (size_t i = 0; i < n; i++) {
            ckpt_sharded_tensor_at(s, i, &t[i]);
            shapes[i] = (ckpt_tensor_shape){t[i].name, t[i].ndim, t[i].shape};
        }
        RT_TRY(check(ckpt_sharded_arch(s), config, shapes, n, dir));
    }
    fprintf(out, "%s: OK: %zu tensors on %d ranks and %zu files match their checksums\n", dir, ckpt_sharded_count(s),
            ckpt_sharded_tp(s), ckpt_sharded_file_count(s));
fail:
    free(t);
    free(shapes);
    ckpt_sharded_close(s);
    return st;
}
