/* Checking a checkpoint's tensors against a config's model (see param_check.h). */
#include "models/param_check.h"

#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_safetensors.h"
#include "checkpoints/ckpt_tp.h"
#include "models/bert/bert.h"
#include "models/glm/glm.h"
#include "models/gpt2/gpt2.h"
#include "models/t5/t5.h"

/* The task heads a fine-tuning program initializes where a checkpoint lacks them (HF's
 * ...ForSequenceClassification does the same). */
static bool mdl_task_head(const char *arch, const char *name) {
    if (strcmp(arch, "gpt2") == 0) return strcmp(name, "score.weight") == 0;
    if (strcmp(arch, "bert") == 0 || strcmp(arch, "roberta") == 0)
        return strncmp(name, "classifier.", 11) == 0 || strncmp(name, "pooler.", 7) == 0;
    return false;
}

/* The family's parameters for the config at path, laid out on be at tp 1, and its vocab size. */
static rt_status mdl_params_of(const char *arch, const char *path, rt_backend *be, rt_params *p, int *vocab) {
    rt_status st = RT_OK;
    if (strcmp(arch, "gpt2") == 0) {
        gpt2_config c;
        RT_TRY(gpt2_config_load(path, &c));
        *vocab = c.vocab_size;
        return gpt2_params_layout(&c, be, rt_comm_self(), p);
    }
    if (strcmp(arch, "bert") == 0 || strcmp(arch, "roberta") == 0) {
        bert_config c;
        RT_TRY(bert_config_load(path, &c));
        *vocab = c.vocab_size;
        return bert_params_layout(&c, be, rt_comm_self(), p);
    }
    if (strcmp(arch, "t5") == 0) {
        t5_config c;
        RT_TRY(t5_config_load(path, &c));
        *vocab = c.vocab_size;
        return t5_params_layout(&c, be, rt_comm_self(), p);
    }
    if (strcmp(arch, "glm") == 0) {
        glm_config c;
        RT_TRY(glm_config_load(path, &c));
        *vocab = c.vocab_size;
        return glm_params_layout(&c, be, rt_comm_self(), p);
    }
    return rt_errorf(RT_ERR_UNSUPPORTED, "no model family '%s' to check %s against", arch, path);
fail:
    return st;
}

rt_status mdl_check_tensors(const char *arch, const char *config_path, const ckpt_tensor_shape *t, size_t n,
                            const char *what) {
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    rt_params p = {0};
    int vocab = 0;
    RT_TRY(rt_cpu_backend_init(1, &be)); /* the layout allocates nothing; the specs name a backend */
    RT_TRY(mdl_params_of(arch, config_path, be, &p, &vocab));
    for (int i = 0; i < p.n; i++) {
        const rt_param_spec *s = &p.specs[i];
        size_t k = 0;
        while (k < n && strcmp(t[k].name, s->name) != 0) k++;
        if (k == n) {
            if (mdl_task_head(arch, s->name)) continue;
            RT_FAIL(RT_ERR_FORMAT,
                    "%s: no tensor for the parameter '%s', which the model of %s has: not this "
                    "model's checkpoint, or an incomplete one",
                    what, s->name, config_path);
        }
        ckpt_tp_desc d;
        ckpt_tp_param_desc(s, vocab, 0, 1, &d);
        size_t want[CKPT_MAX_DIMS] = {0};
        bool same = t[k].ndim == s->ndim;
        for (int j = 0; j < s->ndim; j++) {
            want[j] = (size_t)d.full[j];
            same = same && t[k].shape[j] == want[j];
        }
        if (!same) {
            char got[96], exp[96];
            RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' has shape %s, but the model of %s needs %s", what, s->name,
                    ckpt_shape_str(t[k].ndim, t[k].shape, got, sizeof got), config_path,
                    ckpt_shape_str(s->ndim, want, exp, sizeof exp));
        }
    }
fail:
    rt_params_free(&p);
    rt_backend_free(be);
    return st;
}
