/* SPDX-License-Identifier: Apache-2.0 */
/*
 * MXFP4 (quant_method "mxfp4": gpt-oss) -> canonical contract. Expert tensors are fused
 * over experts:
 *   <module>_blocks  U8 (E, N, K/32, 16)  two e2m1 codes a byte: element 2i in the low
 *                                         nibble, 2i+1 in the high one
 *   <module>_scales  U8 (E, N, K/32)      e8m0, bias 127: w = e2m1 * 2^(scale - 127)
 * Canonical: f4e2m1 codes (a row's bytes already are the canonical LSB-first words) and
 * e8m0 scales per 32, copied: bit-exact. gate_up_proj rows interleave gate (even) and up
 * (odd); the loader de-interleaves into [gate; up]. Biases (<module>_bias (E, N)) are read
 * by the loader. Modules left out (modules_to_not_convert) stay bf16.
 */
#include <stdio.h>

#include "adapter.h"
#include "check.h"

static hm_status mxfp4_open(hm_ckpt *ck, const hm_src_request *req, hm_src_matrix *m) {
  if (req->expert < 0)
    HM_FAIL(HM_UNSUPPORTED, "%s: mxfp4 checkpoints quantize fused expert tensors only", req->module);
  int64_t e = req->expert, experts = req->experts, n = req->n, k = req->k;
  if (k % 32 != 0) HM_FAIL(HM_CORRUPT, "%s: K = %lld is not a multiple of 32", req->module, (long long)k);
  char name[224];
  hm_ckpt_tensor blocks, scales;
  snprintf(name, sizeof(name), "%s_blocks", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_U8, 4, (int64_t[]){experts, n, k / 32, 16}, &blocks));
  snprintf(name, sizeof(name), "%s_scales", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_U8, 3, (int64_t[]){experts, n, k / 32}, &scales));
  m->fmt = (hm_quant_format){HM_F4E2M1, HM_E8M0, HM_SCALE_GROUP, 32, 0, false, false};
  m->groups = k / 32;
  m->data[0] = blocks.st->data + e * n * (k / 2);
  m->ld[0] = k / 2;
  m->data[1] = scales.st->data + e * n * (k / 32);
  m->ld[1] = k / 32;
  m->param[1] = 1;
  m->codes = hm_src_codes_nibbles;
  m->scale = hm_src_scale_rowmajor;
  return HM_OK;
}

const hm_adapter hm_adapter_mxfp4 = {"mxfp4", mxfp4_open};
