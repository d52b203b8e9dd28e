/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unquantized weights: <module>.weight F16/BF16 (N, K), copied as the canonical 16-bit
 * "format" (two values a word, scale_kind NONE). Fused expert tensors (gpt-oss in
 * bf16) are <module> (E, K, N), i.e. transposed: element (n, k) of expert e sits at
 * [e, k, n].
 */
#include <stdio.h>

#include "adapter.h"
#include "check.h"

static void codes_transposed(const hm_src_matrix *m, int64_t row, const int64_t *cols, int64_t count,
                             uint8_t *out) {
  for (int64_t j = 0; j < count; j++) memcpy(out + 2 * j, m->data[0] + (cols[j] * m->ld[0] + row) * 2, 2);
}

static hm_status float_open(hm_ckpt *ck, const hm_src_request *req, hm_src_matrix *m) {
  char name[224];
  bool fused = req->expert >= 0;
  snprintf(name, sizeof(name), fused ? "%s" : "%s.weight", req->module);
  hm_ckpt_tensor t;
  HM_CHECK(hm_ckpt_get(ck, name, &t));
  hm_st_dtype dtype = t.st->dtype == HM_ST_F16 ? HM_ST_F16 : HM_ST_BF16;
  int64_t shape[3] = {req->experts, req->k, req->n};
  if (fused)
    HM_CHECK(hm_ckpt_expect(ck, name, dtype, 3, shape, &t));
  else
    HM_CHECK(hm_ckpt_expect(ck, name, dtype, 2, (int64_t[]){req->n, req->k}, &t));
  m->fmt =
      (hm_quant_format){dtype == HM_ST_F16 ? HM_F16 : HM_BF16, HM_F32, HM_SCALE_NONE, 0, 0, false, false};
  m->fmt.scale = m->fmt.weight;
  m->param[0] = 2;
  if (fused) {
    m->data[0] = t.st->data + req->expert * req->k * req->n * 2;
    m->ld[0] = req->n;
    m->codes = codes_transposed;
  } else {
    m->data[0] = t.st->data;
    m->ld[0] = req->k * 2;
    m->codes = hm_src_codes_bytes;
  }
  return HM_OK;
}

const hm_adapter hm_adapter_float = {"float", float_open};
