/* SPDX-License-Identifier: Apache-2.0 */
/*
 * FP8 (quant_method "fp8": DeepSeek-V3, Qwen3 FP8) -> canonical contract.
 *   weight            F8_E4M3 (N, K) (F8_E5M2 when fmt is "e5m2")
 *   weight_scale_inv  F32 (ceil(N/bn), ceil(K/bk)) with weight_block_size [bn, bk]; despite
 *                     its name it multiplies: w = q * weight_scale_inv[n/bn, k/bk]
 *   weight_scale      F32, one element, without weight_block_size (per tensor): w = q * s
 * Canonical: the fp8 bytes (four a word), BLOCK f32 scales copied as they are, or, per
 * tensor, CHANNEL f32 with the tensor's scale on each of its rows, so that gate and up
 * (each with its own tensor scale) fuse without requantizing. Bit-exact either way.
 * input_scale (activation_scheme "static") is not read: activations are scaled on the fly.
 */
#include <stdio.h>
#include <string.h>

#include "adapter.h"
#include "check.h"

static void block_scale(const hm_src_matrix *m, int64_t row, int64_t group, uint8_t *out) {
  memcpy(out, m->data[1] + ((row / m->fmt.group_n) * m->ld[1] + group) * 4, 4);
}

static hm_status read_block(hm_ckpt *ck, int64_t *bn, int64_t *bk) {
  json_t *block = json_object_get(hm_ckpt_quant_config(ck), "weight_block_size");
  *bn = *bk = 0;
  if (block == NULL || json_is_null(block)) return HM_OK;
  if (!json_is_array(block) || json_array_size(block) != 2 || !json_is_integer(json_array_get(block, 0)) ||
      !json_is_integer(json_array_get(block, 1)) || json_integer_value(json_array_get(block, 0)) <= 0 ||
      json_integer_value(json_array_get(block, 1)) <= 0 ||
      json_integer_value(json_array_get(block, 0)) > 65536 ||
      json_integer_value(json_array_get(block, 1)) > 65536)
    HM_FAIL(HM_CORRUPT, "%s/%s: weight_block_size is not [rows, columns]", hm_ckpt_dir(ck),
            hm_ckpt_quant_file(ck));
  *bn = (int64_t)json_integer_value(json_array_get(block, 0));
  *bk = (int64_t)json_integer_value(json_array_get(block, 1));
  return HM_OK;
}

static hm_status fp8_open(hm_ckpt *ck, const hm_src_request *req, hm_src_matrix *m) {
  const char *fmt = hm_qcfg_str(hm_ckpt_quant_config(ck), "fmt", "e4m3");
  if (strcmp(fmt, "e4m3") != 0 && strcmp(fmt, "e5m2") != 0)
    HM_FAIL(HM_UNSUPPORTED, "%s/%s: fp8 fmt '%s' (e4m3, e5m2)", hm_ckpt_dir(ck), hm_ckpt_quant_file(ck), fmt);
  if (req->expert >= 0)
    HM_FAIL(HM_UNSUPPORTED, "%s: fp8 fused expert tensors are not a known layout", req->module);
  bool e5m2 = strcmp(fmt, "e5m2") == 0;
  int64_t bn, bk, n = req->n, k = req->k;
  HM_CHECK(read_block(ck, &bn, &bk));
  char name[224];
  hm_ckpt_tensor w, s;
  snprintf(name, sizeof(name), "%s.weight", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, e5m2 ? HM_ST_F8_E5M2 : HM_ST_F8_E4M3, 2, (int64_t[]){n, k}, &w));
  m->fmt = (hm_quant_format){e5m2 ? HM_F8E5M2 : HM_F8E4M3, HM_F32, HM_SCALE_CHANNEL, 0, 0, false, false};
  m->data[0] = w.st->data;
  m->ld[0] = k;
  m->param[0] = 1;
  m->codes = hm_src_codes_bytes;
  m->param[1] = 4;
  if (bn == 0) {
    snprintf(name, sizeof(name), "%s.weight_scale", req->module);
    HM_CHECK(hm_ckpt_expect_scalar(ck, name, HM_ST_F32, &s));
    m->data[1] = s.st->data;
    m->ld[1] = 0;
    m->scale = hm_src_scale_rowmajor;
    return HM_OK;
  }
  snprintf(name, sizeof(name), "%s.weight_scale_inv", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_F32, 2, (int64_t[]){(n + bn - 1) / bn, (k + bk - 1) / bk}, &s));
  m->fmt.scale_kind = HM_SCALE_BLOCK;
  m->fmt.group_n = (int)bn;
  m->fmt.group_k = (int)bk;
  m->groups = (k + bk - 1) / bk;
  m->data[1] = s.st->data;
  m->ld[1] = m->groups;
  m->scale = block_scale;
  return HM_OK;
}

const hm_adapter hm_adapter_fp8 = {"fp8", fp8_open};
