/* SPDX-License-Identifier: Apache-2.0 */
/* hm_layer on the host backend: the reference GEMM over the canonical weights. */
#include "check.h"
#include "layer_internal.h"
#include "ref_gemm.h"

hm_status hm_layer_host_forward(hm_layer *l, const hm_gemm_args *args) {
  hm_ref_gemm_problem p = {
      .w = &l->host,
      .act = l->cfg.scheme.act,
      .act_scale = l->cfg.scheme.act_scale,
      .out = l->cfg.out,
      .bias = l->host_bias,
      .args = *args,
      .threads = 0,
  };
  return hm_ref_gemm(&p);
}
