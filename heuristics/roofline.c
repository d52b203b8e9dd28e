/* SPDX-License-Identifier: Apache-2.0 */
#include <math.h>

#include "check.h"
#include "quant.h"
#include "roofline.h"

double hm_expected_active_experts(int64_t experts, double draws) {
  if (experts <= 1) return 1.0;
  return (double)experts * (1.0 - pow(1.0 - 1.0 / (double)experts, draws));
}

static double act_elem_bytes(hm_dtype act) { return hm_dtype_bits(act) / 8.0; }

/* Tensor-core rate for the activation type (8-bit math when A is 8-bit). */
static double tensor_tflops(const hm_device_profile *p, hm_dtype act) {
  if (act == HM_F8E4M3) return p->tflops_fp8 > 0 ? p->tflops_fp8 : p->tflops_f16;
  if (act == HM_I8) return p->tflops_int8 > 0 ? p->tflops_int8 : p->tflops_f16;
  return p->tflops_f16;
}

static double weight_bytes_per_expert(const hm_layer_config *c) {
  const hm_quant_format *f = &c->scheme.weight;
  double bytes = 4.0 * (double)hm_quant_qweight_words(f, c->n, c->k);
  bytes += (double)hm_quant_scale_count(f, c->n, c->k) * hm_quant_scale_bytes(f);
  bytes += 4.0 * (double)hm_quant_zero_words(f, c->n, c->k);
  return bytes;
}

hm_status hm_roofline_estimate(const hm_layer_config *config, int64_t rows, int top_k,
                               const hm_device_profile *profile, hm_roofline *out) {
  HM_CHECK_NOT_NULL(config);
  HM_CHECK_NOT_NULL(profile);
  HM_CHECK_NOT_NULL(out);
  if (rows < 0 || top_k < 1) HM_FAIL(HM_INVALID_ARGUMENT, "rows %lld, top_k %d", (long long)rows, top_k);
  if (profile->mem_bw_gbs <= 0 || profile->tflops_f16 <= 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "profile %s has no bandwidth or tensor rate", profile->name);
  double tokens = (double)rows / top_k;
  out->active_experts = config->experts > 1
                            ? fmin((double)config->experts, hm_expected_active_experts(config->experts, tokens * top_k))
                            : 1.0;
  if (rows == 0) out->active_experts = 0;
  out->weight_bytes = weight_bytes_per_expert(config) * out->active_experts;
  out->act_bytes = (double)rows * (double)config->k * act_elem_bytes(config->scheme.act);
  out->out_bytes = (double)rows * (double)config->n * hm_dtype_bits(config->out) / 8.0;
  out->flops = 2.0 * (double)rows * (double)config->n * (double)config->k;
  double bytes = out->weight_bytes + out->act_bytes + out->out_bytes;
  out->mem_us = bytes / (profile->mem_bw_gbs * 1e9) * 1e6;
  out->compute_us = out->flops / (tensor_tflops(profile, config->scheme.act) * 1e12) * 1e6;
  out->memory_bound = out->mem_us >= out->compute_us;
  out->predicted_us = fmax(out->mem_us, out->compute_us);
  return HM_OK;
}
