/* SPDX-License-Identifier: Apache-2.0 */
/* humming-moe tune --plan --gaps: a layer's kernel table against the cost model's best kernel over M. */
#ifndef HM_CLI_TUNE_GAPS_H
#define HM_CLI_TUNE_GAPS_H

#include "heuristics/device_profile.h"
#include "model_layers.h"

/* The column header of the lines hm_cli_tune_gaps prints. */
void hm_cli_tune_gaps_header(void);
/* Prints where l's table of type loses to the model's best kernel, and a summary line. */
hm_status hm_cli_tune_gaps(const hm_model_layer *l, hm_gemm_type type, const hm_device_profile *p);

#endif
