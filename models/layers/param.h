/* The one way models/ reads its parameters: by index into the slab, NULL for a parameter a
 * family has not (index -1, e.g. T5's absent biases). Every model struct keeps its slab in
 * `params`, so P(idx) and G(idx) are the values and gradient of the model `m` in scope. */
#ifndef MDL_PARAM_H
#define MDL_PARAM_H

#include <stddef.h>

#include "runtime/train/rt_params.h"

static inline float *mdl_param(const rt_params *p, int idx) { return idx >= 0 ? rt_params_data(p, idx) : NULL; }
static inline float *mdl_grad(const rt_params *p, int idx) { return idx >= 0 ? rt_params_grad(p, idx) : NULL; }

#define P(idx) mdl_param(&m->params, (idx))
#define G(idx) mdl_grad(&m->params, (idx))

#endif
