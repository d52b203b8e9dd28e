/* SPDX-License-Identifier: Apache-2.0 */
/* Getting and launching the MoE stage kernels through the JIT, and its expert GEMMs. */
#include <stdio.h>

#include "check.h"
#include "moe_internal.h"

/* Generated sources are a few #defines and one #include. */
#define HM_MOE_SOURCE_MAX 1024

hm_status hm_moe_kernel_get(hm_moe_exec *x, hm_kernel **slot, const char *name, const char *defines,
                            const char *header, hm_kernel **out) {
  if (slot != NULL && *slot != NULL) {
    *out = *slot;
    return HM_OK;
  }
  char source[HM_MOE_SOURCE_MAX];
  int len = snprintf(source, sizeof(source), "%s#include \"%s\"\n", defines, header);
  if (len < 0 || len >= (int)sizeof(source))
    HM_FAIL(HM_INTERNAL, "source of kernel %s is longer than %d bytes", name, HM_MOE_SOURCE_MAX);
  hm_kernel_source src = {.name = name, .source = source, .arch = hm_engine_arch(x->engine)};
  HM_CHECK(hm_kernel_get(x->engine, &src, out));
  if (slot != NULL) *slot = *out;
  return HM_OK;
}

hm_status hm_moe_kernel_launch(hm_moe_exec *x, hm_kernel *kernel, int64_t grid_x, unsigned grid_y,
                               unsigned block, void *params) {
  if (grid_x < 1 || grid_x > INT32_MAX || grid_y < 1 || grid_y > 65535)
    HM_FAIL(HM_INVALID_ARGUMENT, "grid of %lld x %u blocks", (long long)grid_x, grid_y);
  hm_launch_dims dims = {.grid = {(unsigned)grid_x, grid_y, 1}, .block = {block, 1, 1}};
  void *args[] = {params};
  HM_CHECK(hm_kernel_launch(kernel, &dims, args, x->stream));
  x->launches++;
  return HM_OK;
}

hm_status hm_moe_gemm(hm_moe_exec *x, hm_layer *layer, const hm_gemm_args *args) {
  HM_CHECK(hm_layer_forward(layer, args, x->stream));
  x->launches++;
  return HM_OK;
}
