/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The permutation into expert order: each routed (token, slot) gets a copy of its
 * token's row (and scales) at the row the alignment gave it. Host loop or one GPU
 * block per (token, slot) (kernels/moe_align.cuh).
 */
#include <string.h>

#include "check.h"
#include "kernels/moe_align.cuh"
#include "moe_internal.h"

static void copy_plane(const hm_moe_permute_args *a, const void *src, void *dst, size_t row_bytes) {
  for (int64_t i = 0; i < a->items; i++) {
    int32_t row = a->row_of[i];
    if (row < 0) continue;
    memcpy((char *)dst + (size_t)row * row_bytes, (const char *)src + (size_t)(i / a->top_k) * row_bytes,
           row_bytes);
  }
}

hm_status hm_moe_permute_kernel(hm_moe_exec *x, hm_kernel **slot, hm_kernel **out) {
  return hm_moe_kernel_get(x, slot, "hm_moe_permute", "#define HM_PERMUTE 1\n", "moe_align.cuh", out);
}

void hm_moe_permute_params_make(const hm_moe_permute_args *a, struct hm_moe_permute_params *p) {
  *p = (struct hm_moe_permute_params){
      .row_of = a->row_of,
      .src = a->src,
      .dst = a->dst,
      .src2 = a->src2,
      .dst2 = a->dst2,
      .row_bytes = (long long)a->row_bytes,
      .row_bytes2 = (long long)a->row_bytes2,
      .items = a->items,
      .top_k = a->top_k,
  };
}

static hm_status permute_cuda(hm_moe_exec *x, hm_kernel **slot, const hm_moe_permute_args *a) {
  hm_kernel *k = NULL;
  HM_CHECK(hm_moe_permute_kernel(x, slot, &k));
  struct hm_moe_permute_params p;
  hm_moe_permute_params_make(a, &p);
  return hm_moe_kernel_launch(x, k, a->items, 1, 256, &p);
}

hm_status hm_moe_permute_check(const hm_moe_permute_args *a) {
  HM_CHECK_NOT_NULL(a);
  if (a->items < 0 || a->top_k < 1)
    HM_FAIL(HM_INVALID_ARGUMENT, "permutation of %lld items with top_k = %d", (long long)a->items, a->top_k);
  if (a->items == 0) return HM_OK;
  HM_CHECK_NOT_NULL(a->row_of);
  HM_CHECK_NOT_NULL(a->src);
  HM_CHECK_NOT_NULL(a->dst);
  if ((a->src2 == NULL) != (a->dst2 == NULL))
    HM_FAIL(HM_INVALID_ARGUMENT, "permutation: the second plane needs both a source and a destination");
  return HM_OK;
}

hm_status hm_moe_permute_run(hm_moe_exec *x, hm_kernel **slot, const hm_moe_permute_args *a) {
  HM_CHECK(hm_moe_permute_check(a));
  if (a->items == 0) return HM_OK;
  if (!hm_moe_on_host(x)) return permute_cuda(x, slot, a);
  copy_plane(a, a->src, a->dst, a->row_bytes);
  if (a->src2 != NULL) copy_plane(a, a->src2, a->dst2, a->row_bytes2);
  x->launches++;
  return HM_OK;
}
