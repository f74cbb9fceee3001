/* HF config.json conventions shared by the model families (see hf_config.h). */
#include "models/hf_config.h"

#include <stdio.h>
#include <string.h>

bool mdl_hf_act_from_name(const char *name, rt_act_kind *out) {
    if (strcmp(name, "gelu") == 0)
        *out = RT_ACT_GELU_ERF;
    else if (strcmp(name, "gelu_new") == 0 || strcmp(name, "gelu_pytorch_tanh") == 0 || strcmp(name, "gelu_fast") == 0)
        *out = RT_ACT_GELU_TANH;
    else if (strcmp(name, "relu") == 0)
        *out = RT_ACT_RELU;
    else if (strcmp(name, "tanh") == 0)
        *out = RT_ACT_TANH;
    else
        return false;
    return true;
}

const char *mdl_hf_act_name(rt_act_kind act) {
    switch (act) {
    case RT_ACT_GELU_TANH: return "gelu_new";
    case RT_ACT_GELU_ERF: return "gelu";
    case RT_ACT_RELU: return "relu";
    case RT_ACT_TANH: return "tanh";
    }
    return "unknown";
}

rt_status mdl_hf_config_result(rt_status st, const char *path, bool from_validation) {
    if (st != RT_OK && from_validation) {
        char msg[512]; /* rt_errorf writes the buffer rt_error_message() points into */
        snprintf(msg, sizeof msg, "%s", rt_error_message());
        st = rt_errorf(st, "%s: %s", path, msg);
    }
    if (st != RT_OK && st != RT_ERR_CONFIG && st != RT_ERR_IO && st != RT_ERR_FORMAT) st = RT_ERR_CONFIG;
    return st;
}
