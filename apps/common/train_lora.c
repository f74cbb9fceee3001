/* LoRA's options, settings and folders in the training programs (see train_lora.h). */
#include "apps/common/train_lora.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_peft_weights.h"
#include "models/layers/hf_config.h"
#include "models/layers/lora.h"
#include "runtime/base/rt_log.h"

void train_app_add_lora_options(train_app_opts *o, rt_opt *opts, int *n) {
    /* clang-format off */
    const rt_opt lora[TRAIN_APP_N_LORA_OPTS] = {
        {"lora-r", RT_OPT_INT, &o->lora_r, "0", "R",
         "train LoRA adapters of rank R on --lora-targets and freeze every other weight but a classification head "
         "(PEFT's LoRA); 0: full fine-tuning", NULL, 0, CKPT_PEFT_MAX_R},
        {"lora-alpha", RT_OPT_FLOAT, &o->lora_alpha, "8", "A",
         "with --lora-r: the adapters' output is scaled by alpha / r (PEFT's lora_alpha and default)", NULL, 1e-6, 1e6},
        {"lora-dropout", RT_OPT_FLOAT, &o->lora_dropout, "0", "P",
         "with --lora-r: dropout on each adapter's input while training (PEFT's lora_dropout)", NULL, 0, 0.999},
        {"lora-targets", RT_OPT_STRING, &o->lora_targets, NULL, "LIST",
         "with --lora-r: the HF module names to adapt, comma-separated, matched as PEFT's target_modules (a module's "
         "name or its last dotted parts); default: PEFT's for the family", NULL, 0, 0},
        {"lora-from", RT_OPT_STRING, &o->lora_from, NULL, "DIR",
         "start from this PEFT LoRA folder (adapter_config.json, adapter_model.safetensors; PEFT's or --save-lora's) "
         "over the base model, with its settings", NULL, 0, 0},
        {"save-lora", RT_OPT_STRING, &o->save_lora, NULL, "DIR",
         "after training, write the adapters as a PEFT folder, which PeftModel.from_pretrained loads over the base",
         NULL, 0, 0},
    };
    /* clang-format on */
    memcpy(opts + *n, lora, sizeof lora);
    *n += TRAIN_APP_N_LORA_OPTS;
}

/* "a,b , c" as trimmed non-empty names (NULL text: none). */
static rt_status lora_names(const char *text, const char *option, char ***out, int *n) {
    *out = NULL;
    *n = 0;
    if (!text) return RT_OK;
    const char *p = text;
    for (;;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        size_t a = 0, b = len;
        while (a < b && (p[a] == ' ' || p[a] == '\t')) a++;
        while (b > a && (p[b - 1] == ' ' || p[b - 1] == '\t')) b--;
        if (a == b) {
            for (int i = 0; i < *n; i++) free((*out)[i]);
            free(*out);
            *out = NULL;
            *n = 0;
            return rt_errorf(RT_ERR_USAGE, "--%s '%s': an empty module name (expected e.g. c_attn,c_proj)", option,
                             text);
        }
        *out = rt_xrealloc(*out, (size_t)(*n + 1) * sizeof **out);
        char *name = rt_xmalloc(b - a + 1);
        memcpy(name, p + a, b - a);
        name[b - a] = '\0';
        (*out)[(*n)++] = name;
        if (!end) return RT_OK;
        p = end + 1;
    }
}

/* The LoRA settings given without LoRA. */
static rt_status lora_combinations(const rt_args_spec *spec, bool on) {
    static const char *const settings[] = {"lora-alpha", "lora-dropout", "lora-targets", "save-lora"};
    const char *given = train_app_first_given(spec, settings, 4);
    if (!on && given) return rt_errorf(RT_ERR_USAGE, "--%s needs --lora-r (or --lora-from)", given);
    return RT_OK;
}

rt_status train_app_lora_config(const train_app_opts *o, const rt_args_spec *spec, const train_app_lora_family *fam,
                                ckpt_peft_config *out, bool *on) {
    rt_status st = RT_OK;
    memset(out, 0, sizeof *out);
    *on = o->lora_from || o->lora_r > 0;
    RT_TRY(lora_combinations(spec, *on));
    if (!*on) return RT_OK;
    static const char *const settings[] = {"lora-r", "lora-alpha", "lora-dropout", "lora-targets"};
    const char *given;
    if (o->lora_from) {
        given = train_app_first_given(spec, settings, 4);
        if (given)
            return rt_errorf(RT_ERR_USAGE, "--%s and --lora-from: the adapter folder's adapter_config.json sets it",
                             given);
        RT_TRY(ckpt_peft_config_read(o->lora_from, out));
        rt_log_info("LoRA: from %s: r %d, alpha %g, dropout %g, scale %g", o->lora_from, out->r, out->alpha,
                    out->dropout, ckpt_peft_scale(out));
        return RT_OK;
    }
    out->r = (int)o->lora_r;
    out->alpha = o->lora_alpha;
    out->dropout = o->lora_dropout;
    out->fan_in_fan_out = fam->fan_in_fan_out;
    RT_TRY(lora_names(o->lora_targets ? o->lora_targets : fam->default_targets, "lora-targets", &out->targets,
                      &out->n_targets));
    RT_TRY(lora_names(fam->modules_to_save, "modules-to-save", &out->modules_to_save, &out->n_save));
    out->task_type = fam->task_type ? rt_xstrdup(fam->task_type) : NULL; /* NULL: a plain module (GLM) */
    out->base_model = fam->base_model ? rt_xstrdup(fam->base_model) : NULL;
    rt_log_info("LoRA: r %d, alpha %g (scale %g), dropout %g, on %s%s", out->r, out->alpha, ckpt_peft_scale(out),
                out->dropout, o->lora_targets ? o->lora_targets : fam->default_targets,
                o->lora_targets ? "" : " (PEFT's default for the family)");
    return RT_OK;
fail:
    ckpt_peft_config_free(out);
    return st;
}

rt_status train_app_lora_ready(const train_app_opts *o, const ckpt_peft_config *cfg, const ckpt_map *map,
                               const char *family, const char *modules, rt_params *p, const rt_grid *grid) {
    rt_status st = mdl_lora_check_targets(p, cfg, map, family, modules);
    if (st == RT_OK && o->lora_from) {
        st = ckpt_peft_load_weights(o->lora_from, map, p, grid->tp->rank, grid->tp->size, grid->pp_host);
        if (st == RT_OK) rt_log_info("LoRA: adapters loaded from %s", o->lora_from);
    }
    size_t trained = 0, all = 0; /* the tensors' elements (the slab adds alignment) */
    for (int i = 0; i < p->n; i++) {
        all += p->specs[i].numel;
        if (!p->specs[i].frozen) trained += p->specs[i].numel;
    }
    if (st == RT_OK)
        rt_log_info("LoRA: %zu of %zu parameters train (%.2f%%)%s; the rest are frozen", trained, all,
                    100.0 * (double)trained / (double)(all ? all : 1), train_app_params_scope(grid->tp, grid->pp));
    return st;
}

typedef struct {
    const rt_grid *grid;
    const ckpt_peft_config *cfg;
    const ckpt_map *map;
    const rt_params *p;
} lora_export;

static rt_status lora_write(void *ctx, const char *folder) {
    const lora_export *x = ctx;
    /* the tensors gathered over tp by the first replica's group; the config by the first rank */
    rt_status st =
        x->grid->dp_rank == 0 ? mdl_peft_save_weights(folder, x->map, x->p, x->grid->tp, x->grid->pp) : RT_OK;
    if (st == RT_OK && x->grid->world->rank == 0) st = ckpt_peft_config_write(folder, x->cfg);
    return st;
}

rt_status train_app_save_lora(const train_app_opts *o, const rt_grid *grid, const ckpt_peft_config *cfg,
                              const ckpt_map *map, const rt_params *p, const char *default_dir) {
    const char *dir = o->save_lora ? o->save_lora : default_dir;
    if (!dir) return RT_OK;
    lora_export x = {grid, cfg, map, p};
    return train_app_export_dir(dir, "--save-lora", "PEFT adapter folder", grid, lora_write, &x);
}

rt_status train_app_export_model(const char *dir, const rt_grid *grid, const ckpt_peft_config *lora,
                                 const ckpt_map *map, rt_params *p, train_app_hf_write write, void *ctx) {
    if (!lora) return train_app_export_hf(dir, grid, write, ctx);
    mdl_lora_merged saved;
    mdl_lora_merge(p, lora, map, &saved);
    rt_status st = train_app_export_hf(dir, grid, write, ctx);
    mdl_lora_unmerge(p, &saved); /* training state as it was: the run may go on, or checkpoint */
    if (st == RT_OK)
        rt_log_info("LoRA: %s holds the merged model (W + %g B A in every adapted weight)", dir, ckpt_peft_scale(lora));
    return st;
}
