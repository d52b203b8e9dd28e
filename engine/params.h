/* SPDX-License-Identifier: Apache-2.0 */
/* Cached getters for the parameters of params.def. */
#ifndef HM_PARAMS_H
#define HM_PARAMS_H

#include <stdint.h>
#include <stdio.h>

#define HM_PARAM_INT(name, env, def, lo, hi, help) int64_t hm_param_##name(void);
#define HM_PARAM_STR(name, env, def, help) const char *hm_param_##name(void);
#include "params.def"
#undef HM_PARAM_INT
#undef HM_PARAM_STR

/* Prints every parameter: name, type, default, current value, help. */
void hm_params_print(FILE *out);
/* Forgets cached values so the next getter reads the environment again (tests). */
void hm_params_reload(void);

#endif
