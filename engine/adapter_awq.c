/* SPDX-License-Identifier: Apache-2.0 */
/*
 * AWQ (AutoAWQ version "gemm", also AutoRound's auto_awq packing) -> canonical contract.
 * 4-bit only. Tensors of <module>, G = K / group_size:
 *   qweight I32 (K, N/8)   word w of row k holds columns 8w..8w+7, interleaved: AutoAWQ
 *                          writes nibble i (bits 4i..4i+3) from column 8w + [0,2,4,6,1,3,5,7][i],
 *                          so column 8w + j is read from nibble [0,4,1,5,2,6,3,7][j]
 *   qzeros  I32 (G, N/8)   the same interleave
 *   scales  F16 (G, N)     (BF16 accepted)
 * w = (q - z) * s with z as stored. Canonical: u4 codes and zero points (repacked along
 * N without the interleave), scales copied: bit-exact. zero_point = false and the
 * gemv/marlin layouts are refused as unsupported.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "adapter.h"
#include "check.h"

static const uint8_t awq_nibble_of_column[8] = {0, 4, 1, 5, 2, 6, 3, 7};

static uint8_t awq_get(const uint8_t *words, int64_t col) {
  uint32_t w = hm_st_load_u32(words, col / 8);
  return (uint8_t)((w >> (4 * awq_nibble_of_column[col % 8])) & 0xf);
}

/* qweight is (K, N/8): source row n is a column of it. */
static void awq_codes(const hm_src_matrix *m, int64_t row, const int64_t *cols, int64_t count, uint8_t *out) {
  for (int64_t j = 0; j < count; j++) out[j] = awq_get(m->data[0] + cols[j] * m->ld[0] * 4, row);
}

static void awq_scale(const hm_src_matrix *m, int64_t row, int64_t group, uint8_t *out) {
  memcpy(out, m->data[1] + (group * m->ld[1] + row) * m->param[1], (size_t)m->param[1]);
}

static uint8_t awq_zero(const hm_src_matrix *m, int64_t row, int64_t group) {
  return awq_get(m->data[2] + group * m->ld[2] * 4, row);
}

static hm_status read_config(hm_ckpt *ck, int64_t *group) {
  json_t *q = hm_ckpt_quant_config(ck);
  const char *dir = hm_ckpt_dir(ck), *file = hm_ckpt_quant_file(ck);
  int64_t bits;
  bool zero_point;
  HM_CHECK(hm_qcfg_int(ck, q, "bits", 4, &bits));
  HM_CHECK(hm_qcfg_int(ck, q, "group_size", 128, group));
  HM_CHECK(hm_qcfg_bool(ck, q, "zero_point", true, &zero_point));
  const char *version = hm_qcfg_str(q, "version", "gemm");
  if (bits != 4) HM_FAIL(HM_UNSUPPORTED, "%s/%s: AWQ bits = %lld (4 supported)", dir, file, (long long)bits);
  if (!zero_point) HM_FAIL(HM_UNSUPPORTED, "%s/%s: AWQ without zero points", dir, file);
  if (strcasecmp(version, "gemm") != 0)
    HM_FAIL(HM_UNSUPPORTED, "%s/%s: AWQ version '%s' (the gemm layout is supported)", dir, file, version);
  if (*group <= 0) HM_FAIL(HM_CORRUPT, "%s/%s: group_size = %lld", dir, file, (long long)*group);
  return HM_OK;
}

static hm_status awq_open(hm_ckpt *ck, const hm_src_request *req, hm_src_matrix *m) {
  int64_t group, n = req->n, k = req->k;
  HM_CHECK(read_config(ck, &group));
  if (req->expert >= 0)
    HM_FAIL(HM_UNSUPPORTED, "%s: AWQ packing of fused expert tensors is not a known layout", req->module);
  if (n % 8 != 0 || k % group != 0)
    HM_FAIL(HM_CORRUPT, "%s: N = %lld must be a multiple of 8 and group_size %lld must divide K = %lld",
            req->module, (long long)n, (long long)group, (long long)k);
  char name[224];
  hm_ckpt_tensor qw, sc, qz;
  m->groups = k / group;
  snprintf(name, sizeof(name), "%s.qweight", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_I32, 2, (int64_t[]){k, n / 8}, &qw));
  snprintf(name, sizeof(name), "%s.scales", req->module);
  HM_CHECK(hm_ckpt_get(ck, name, &sc));
  m->fmt = (hm_quant_format){HM_U4, HM_F16, HM_SCALE_GROUP, (int)group, 0, true, false};
  HM_CHECK(hm_src_scale_dtype(&sc, &m->fmt.scale));
  HM_CHECK(hm_ckpt_expect(ck, name, sc.st->dtype, 2, (int64_t[]){m->groups, n}, &sc));
  snprintf(name, sizeof(name), "%s.qzeros", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_I32, 2, (int64_t[]){m->groups, n / 8}, &qz));
  m->data[0] = qw.st->data;
  m->ld[0] = n / 8;
  m->data[1] = sc.st->data;
  m->ld[1] = n;
  m->param[1] = hm_dtype_bits(m->fmt.scale) / 8;
  m->data[2] = qz.st->data;
  m->ld[2] = n / 8;
  m->codes = awq_codes;
  m->scale = awq_scale;
  m->zero = awq_zero;
  return HM_OK;
}

const hm_adapter hm_adapter_awq = {"awq", awq_open};
