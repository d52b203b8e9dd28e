/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hm_moe_layer weights from the engine's memory (an embedding host's GPU tensors), and
 * the sizes a binding checks those tensors against.
 */
#include "check.h"
#include "layer_internal.h"

static hm_status check_stream(const hm_moe_layer *l, const hm_stream *stream) {
  if (stream != NULL && stream->engine != l->engine)
    HM_FAIL(HM_INVALID_ARGUMENT, "MoE load on a stream of another engine");
  return HM_OK;
}

hm_status hm_moe_layer_load_device(hm_moe_layer *l, const hm_weights_view *gate_up,
                                   const hm_weights_view *down, hm_stream *stream) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK(check_stream(l, stream));
  return hm_moe_fill_experts(l, false, HM_MOE_FILL_DEVICE, gate_up, down, stream);
}

hm_status hm_moe_layer_load_shared_device(hm_moe_layer *l, const hm_weights_view *gate_up,
                                          const hm_weights_view *down, hm_stream *stream) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK(check_stream(l, stream));
  return hm_moe_fill_experts(l, true, HM_MOE_FILL_DEVICE, gate_up, down, stream);
}

hm_status hm_moe_layer_set_router_bias_device(hm_moe_layer *l, const float *bias, hm_stream *stream) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK_NOT_NULL(bias);
  HM_CHECK(check_stream(l, stream));
  if (!l->cfg.router.correction_bias)
    HM_FAIL(HM_INVALID_ARGUMENT, "a router bias was given to a layer whose router has no correction_bias");
  HM_CHECK(hm_engine_copy(l->engine, l->router_bias, bias, (size_t)l->cfg.router.experts * sizeof(float),
                          HM_COPY_D2D, stream));
  l->bias_set = true;
  return HM_OK;
}

/* A GEMM layer's arrays hold its experts one after another: a range has its share of each. */
static hm_status range_bytes(hm_layer *layer, const hm_moe_weights_at *at, hm_weights_bytes *out) {
  HM_CHECK(hm_layer_weights_bytes(layer, out));
  size_t *fields[] = {&out->qweight, &out->scales, &out->zeros, &out->global_scale, &out->bias};
  for (size_t i = 0; i < HM_ARRAY_SIZE(fields); i++)
    *fields[i] = *fields[i] / (size_t)at->experts * (size_t)at->count;
  return HM_OK;
}

hm_status hm_moe_layer_weights_bytes(const hm_moe_layer *l, bool shared, hm_weights_bytes *gate_up,
                                     hm_weights_bytes *down) {
  HM_CHECK_NOT_NULL(l);
  HM_CHECK_NOT_NULL(gate_up);
  HM_CHECK_NOT_NULL(down);
  if (shared && l->shared_width == 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "weight sizes of shared experts asked of a layer configured without them");
  hm_moe_weights_at at = hm_moe_weights_of(l, shared);
  HM_CHECK(range_bytes(at.gate_up, &at, gate_up));
  return range_bytes(at.down, &at, down);
}
