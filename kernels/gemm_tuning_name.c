/* SPDX-License-Identifier: Apache-2.0 */
/* A tuning as one token (bm128_bn256_bk128_w1x8x1_s4_sk4_c1_wgmma_ws) and back. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kernels/gemm_config.h"

void hm_gemm_tuning_name(const hm_gemm_tuning *t, char *buf, size_t len) {
  char split[16] = "dp";
  if (t->stream_k) snprintf(split, sizeof(split), "sk%d", t->sk_min_iters);
  snprintf(buf, len, "bm%d_bn%d_bk%d_w%dx%dx%d_s%d_%s_c%d%s%s", t->bm, t->bn, t->bk, t->warps_m, t->warps_n,
           t->warps_k, t->stages, split, t->ctas_per_sm, t->mma == HM_MMA_WGMMA ? "_wgmma" : "",
           t->ws ? "_ws" : "");
}

hm_status hm_gemm_tuning_parse(const char *name, hm_gemm_tuning *out) {
  HM_CHECK_NOT_NULL(name);
  HM_CHECK_NOT_NULL(out);
  hm_gemm_tuning t = {0};
  char split[8] = "", rest[32] = "";
  int used = 0;
  /* %n after the fixed fields: where the optional suffixes start. */
  const int got = sscanf(name, "bm%d_bn%d_bk%d_w%dx%dx%d_s%d_%7[a-z0-9]_c%d%n", &t.bm, &t.bn, &t.bk, &t.warps_m,
                         &t.warps_n, &t.warps_k, &t.stages, split, &t.ctas_per_sm, &used);
  if (got != 9 || strlen(name + used) >= sizeof(rest))
    HM_FAIL(HM_INVALID_ARGUMENT,
            "kernel tuning '%s': expected bmM_bnN_bkK_wMxNxK_sS_(skI|dp)_cC[_wgmma][_ws], as in "
            "bm128_bn256_bk128_w1x8x1_s4_sk4_c1_wgmma",
            name);
  snprintf(rest, sizeof(rest), "%s", name + used);
  if (strcmp(split, "dp") == 0) {
    t.stream_k = false;
  } else if (sscanf(split, "sk%d", &t.sk_min_iters) == 1 && t.sk_min_iters > 0) {
    t.stream_k = true;
  } else {
    HM_FAIL(HM_INVALID_ARGUMENT, "kernel tuning '%s': schedule '%s' is neither skN (Stream-K, N >= 1) nor dp",
            name, split);
  }
  if (strcmp(rest, "") != 0 && strcmp(rest, "_wgmma") != 0 && strcmp(rest, "_wgmma_ws") != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "kernel tuning '%s': suffix '%s' is not _wgmma or _wgmma_ws", name, rest);
  t.mma = rest[0] != '\0' ? HM_MMA_WGMMA : HM_MMA_SYNC;
  t.ws = strcmp(rest, "_wgmma_ws") == 0;
  *out = t;
  return HM_OK;
}
