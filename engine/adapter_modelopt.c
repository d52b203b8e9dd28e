/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ModelOpt (TensorRT Model Optimizer) -> canonical contract. quant_algo comes from
 * hf_quant_config.json's "quantization" or config.json's quantization_config (also
 * nested under "quantization"); MIXED_PRECISION looks the module up in quantized_layers.
 *   NVFP4  weight U8 (N, K/2) e2m1, element 2i in the low nibble; weight_scale F8_E4M3
 *          (N, K/group_size), group_size 16; weight_scale_2 F32 (one element), a
 *          multiplier: w = e2m1 * weight_scale * weight_scale_2. -> f4e2m1, e4m3 scales per
 *          16, global scale = weight_scale_2.
 *   MXFP8  weight F8_E4M3 (N, K); weight_scale U8 (N, K/32) e8m0 -> f8e4m3 with f32 scales
 *          per 32 (2^(s - 127), exact; e8m0 scales go with e2m1 only in the contract).
 *   FP8    weight F8_E4M3 (N, K); weight_scale F32 (one element) -> channel f32 scales.
 * All bit-exact. input_scale tensors are not read; exclude_modules stay 16-bit.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "adapter.h"
#include "check.h"

static void mxfp8_scale(const hm_src_matrix *m, int64_t row, int64_t group, uint8_t *out) {
  float v = ldexpf(1.0f, (int)m->data[1][row * m->ld[1] + group] - 127);
  memcpy(out, &v, 4);
}

static json_t *quant_root(hm_ckpt *ck) {
  json_t *q = hm_ckpt_quant_config(ck), *nested = json_object_get(q, "quantization");
  return json_is_object(nested) ? nested : q;
}

static hm_status find_algo(hm_ckpt *ck, const char *module, const char **algo, int64_t *group) {
  json_t *q = quant_root(ck);
  *algo = hm_qcfg_str(q, "quant_algo", "");
  HM_CHECK(hm_qcfg_int(ck, q, "group_size", 16, group));
  if (strcmp(*algo, "MIXED_PRECISION") != 0) return HM_OK;
  json_t *layer = json_object_get(json_object_get(q, "quantized_layers"), module);
  if (!json_is_object(layer))
    HM_FAIL(HM_CORRUPT, "%s/%s: MIXED_PRECISION without an entry for '%s' in quantized_layers",
            hm_ckpt_dir(ck), hm_ckpt_quant_file(ck), module);
  *algo = hm_qcfg_str(layer, "quant_algo", "");
  return hm_qcfg_int(ck, layer, "group_size", 16, group);
}

static hm_status open_nvfp4(hm_ckpt *ck, const hm_src_request *req, int64_t group, hm_src_matrix *m) {
  int64_t n = req->n, k = req->k;
  if (group != 16 || k % 16 != 0)
    HM_FAIL(HM_CORRUPT, "%s: NVFP4 needs group_size 16 dividing K = %lld (group_size %lld)", req->module,
            (long long)k, (long long)group);
  char name[224];
  hm_ckpt_tensor t;
  snprintf(name, sizeof(name), "%s.weight", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_U8, 2, (int64_t[]){n, k / 2}, &t));
  m->fmt = (hm_quant_format){HM_F4E2M1, HM_F8E4M3, HM_SCALE_GROUP, 16, 0, false, true};
  m->groups = k / 16;
  m->data[0] = t.st->data;
  m->ld[0] = k / 2;
  m->codes = hm_src_codes_nibbles;
  snprintf(name, sizeof(name), "%s.weight_scale", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_F8_E4M3, 2, (int64_t[]){n, m->groups}, &t));
  m->data[1] = t.st->data;
  m->ld[1] = m->groups;
  m->param[1] = 1;
  m->scale = hm_src_scale_rowmajor;
  snprintf(name, sizeof(name), "%s.weight_scale_2", req->module);
  HM_CHECK(hm_ckpt_expect_scalar(ck, name, HM_ST_F32, &t));
  m->global = hm_st_load_f32(t.st->data, 0);
  return HM_OK;
}

static hm_status open_fp8(hm_ckpt *ck, const hm_src_request *req, bool mx, hm_src_matrix *m) {
  int64_t n = req->n, k = req->k;
  char name[224];
  hm_ckpt_tensor t;
  snprintf(name, sizeof(name), "%s.weight", req->module);
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_F8_E4M3, 2, (int64_t[]){n, k}, &t));
  m->fmt = (hm_quant_format){HM_F8E4M3, HM_F32, HM_SCALE_CHANNEL, 0, 0, false, false};
  m->data[0] = t.st->data;
  m->ld[0] = k;
  m->param[0] = 1;
  m->param[1] = 4;
  m->codes = hm_src_codes_bytes;
  snprintf(name, sizeof(name), "%s.weight_scale", req->module);
  if (!mx) {
    HM_CHECK(hm_ckpt_expect_scalar(ck, name, HM_ST_F32, &t));
    m->data[1] = t.st->data;
    m->ld[1] = 0;
    m->scale = hm_src_scale_rowmajor;
    return HM_OK;
  }
  if (k % 32 != 0)
    HM_FAIL(HM_CORRUPT, "%s: MXFP8 needs K = %lld to be a multiple of 32", req->module, (long long)k);
  HM_CHECK(hm_ckpt_expect(ck, name, HM_ST_U8, 2, (int64_t[]){n, k / 32}, &t));
  for (int64_t i = 0; i < n * (k / 32); i++) {
    if (t.st->data[i] == 0xff)
      HM_FAIL(HM_CORRUPT, "%s: tensor '%s' holds the e8m0 NaN code at %lld", t.file, name, (long long)i);
  }
  m->fmt.scale_kind = HM_SCALE_GROUP;
  m->fmt.group_k = 32;
  m->groups = k / 32;
  m->data[1] = t.st->data;
  m->ld[1] = k / 32;
  m->scale = mxfp8_scale;
  return HM_OK;
}

static hm_status modelopt_open(hm_ckpt *ck, const hm_src_request *req, hm_src_matrix *m) {
  if (req->expert >= 0)
    HM_FAIL(HM_UNSUPPORTED, "%s: ModelOpt fused expert tensors are not a known layout", req->module);
  const char *algo;
  int64_t group;
  HM_CHECK(find_algo(ck, req->module, &algo, &group));
  if (strcmp(algo, "NVFP4") == 0) return open_nvfp4(ck, req, group, m);
  if (strcmp(algo, "MXFP8") == 0) return open_fp8(ck, req, true, m);
  if (strcmp(algo, "FP8") == 0) return open_fp8(ck, req, false, m);
  HM_FAIL(HM_UNSUPPORTED, "%s/%s: ModelOpt quant_algo '%s' (NVFP4, MXFP8, FP8 supported) for %s",
          hm_ckpt_dir(ck), hm_ckpt_quant_file(ck), algo, req->module);
}

const hm_adapter hm_adapter_modelopt = {"modelopt", modelopt_open};
