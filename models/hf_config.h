/* What the model families share when they read and write an HF config.json: HF's activation
 * names, and the way a config's errors are reported (the file named, the status a caller can
 * act on). */
#ifndef HF_CONFIG_H
#define HF_CONFIG_H

#include <stdbool.h>

#include "runtime/rt_backend.h"
#include "runtime/rt_status.h"

/* HF's ACT2FN names: "gelu" is the erf GELU; "gelu_new", "gelu_pytorch_tanh" and "gelu_fast"
 * the tanh one; "relu", "tanh". False for any other name. */
bool mdl_hf_act_from_name(const char *name, rt_act_kind *out);
/* The name HF writes for an activation ("gelu_new" for the tanh GELU). */
const char *mdl_hf_act_name(rt_act_kind act);

/* The end of a config loader: a failed validation gets the file's path in front of its message,
 * and any status other than RT_OK, RT_ERR_CONFIG, RT_ERR_IO and RT_ERR_FORMAT becomes
 * RT_ERR_CONFIG. */
rt_status mdl_hf_config_result(rt_status st, const char *path, bool from_validation);

#endif
