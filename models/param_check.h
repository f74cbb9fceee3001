/* A checkpoint's tensors against the model a config.json describes, without building the model:
 * the family's parameters laid out at tp 1 (gpt2_params_layout, bert_params_layout,
 * t5_params_layout, glm_params_layout) and every one looked up by name and full shape, as a
 * training program's load would (tz-convert's import and verify pass it to the conversions). */
#ifndef MDL_PARAM_CHECK_H
#define MDL_PARAM_CHECK_H

#include "checkpoints/ckpt_convert.h"

/* arch: gpt2, bert, roberta, t5 or glm (our map's name). A parameter the tensors lack, or one of
 * another shape, is RT_ERR_FORMAT naming `what`, the parameter and both shapes; missing task heads
 * (GPT-2's score, BERT's pooler and classifier), which a fine-tuning program initializes itself,
 * are fine. A config that does not load is its own error. */
rt_status mdl_check_tensors(const char *arch, const char *config_path, const ckpt_tensor_shape *t, size_t n,
                            const char *what);

#endif
