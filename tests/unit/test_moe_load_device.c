/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loading a MoE layer from the engine's memory (the embedding path) on the host backend:
 * the same forward bits as a load from the host, the caller's arrays free to go once the
 * call returns, the array sizes a binding checks, refused calls, hm_abi_sizeof and
 * hm_engine_device.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hm_test.h"
#include "numfmt.h"
#include "quant.h"

enum { H = 256, I = 128, E = 8, TOP_K = 2, T = 5 };

static hm_moe_config deepseek_like(void) {
  hm_moe_config c = HM_MOE_CONFIG_INIT;
  c.hidden = H;
  c.intermediate = I;
  c.router = (hm_moe_router_config){HM_MOE_SCORING_SIGMOID, E, TOP_K, 2, 1, true, true, 2.5f};
  c.shared_experts = 1;
  if (hm_quant_scheme_parse("w4a16", &c.scheme) != HM_OK) fail_msg("w4a16: %s", hm_last_error());
  return c;
}

static void quantized(hm_rng *rng, const hm_quant_format *fmt, int64_t experts, int64_t n, int64_t k,
                      hm_host_weights *w) {
  float *f = malloc((size_t)(experts * n * k) * sizeof(float));
  hm_rng_fill_normal(rng, f, (size_t)(experts * n * k), 1.0f / sqrtf((float)k));
  HM_ASSERT_OK(hm_host_weights_alloc(w, fmt, experts, n, k));
  HM_ASSERT_OK(hm_quantize_weights(f, w));
  free(f);
}

/* A copy of an array in engine memory, as an embedding host would hold it. */
static void *engine_copy_of(hm_engine *eng, const void *src, size_t bytes) {
  if (bytes == 0) return NULL;
  void *d = NULL;
  HM_ASSERT_OK(hm_mem_alloc(eng, bytes, &d));
  HM_ASSERT_OK(hm_mem_upload(eng, d, src, bytes));
  return d;
}

typedef struct engine_view {
  hm_weights_view view;
  void *ptrs[3];
  size_t bytes[3];
} engine_view;

static engine_view engine_view_of(hm_engine *eng, const hm_host_weights *w, const hm_weights_bytes *sz) {
  engine_view v;
  memset(&v, 0, sizeof(v));
  v.bytes[0] = sz->qweight, v.bytes[1] = sz->scales, v.bytes[2] = sz->zeros;
  v.ptrs[0] = engine_copy_of(eng, w->qweight, sz->qweight);
  v.ptrs[1] = engine_copy_of(eng, w->scales, sz->scales);
  v.ptrs[2] = engine_copy_of(eng, w->zeros, sz->zeros);
  v.view.qweight = v.ptrs[0], v.view.scales = v.ptrs[1], v.view.zeros = v.ptrs[2];
  return v;
}

/* Overwrites and frees the caller's arrays: the layer must hold its own copies by now. */
static void engine_view_free(hm_engine *eng, engine_view *v) {
  for (int i = 0; i < 3; i++) {
    if (v->ptrs[i] == NULL) continue;
    memset(v->ptrs[i], 0xff, v->bytes[i]);
    hm_mem_free(eng, v->ptrs[i]);
  }
}

static void forward(hm_moe_layer *l, hm_stream *s, const uint16_t *x, const float *logits, uint16_t *y) {
  hm_moe_forward_args a = {.tokens = T, .x = x, .router_logits = logits, .y = y};
  HM_ASSERT_OK(hm_moe_layer_forward(l, &a, s));
  HM_ASSERT_OK(hm_stream_synchronize(s));
}

static void device_load_matches_host_load(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("moe_load_device"));
  hm_engine *eng = hm_test_host_engine();
  const hm_moe_config c = deepseek_like();
  const hm_quant_format *fmt = &c.scheme.weight;
  hm_host_weights gu, dn, sgu, sdn;
  quantized(&rng, fmt, E, 2 * I, H, &gu);
  quantized(&rng, fmt, E, H, I, &dn);
  quantized(&rng, fmt, 1, 2 * I, H, &sgu);
  quantized(&rng, fmt, 1, H, I, &sdn);
  float bias[E];
  hm_rng_fill_uniform(&rng, bias, E, -0.05f, 0.05f);

  hm_moe_layer *ref = NULL, *emb = NULL;
  HM_ASSERT_OK(hm_moe_layer_create(eng, &c, &ref));
  hm_weights_view vgu = hm_host_weights_view(&gu), vdn = hm_host_weights_view(&dn);
  hm_weights_view vsgu = hm_host_weights_view(&sgu), vsdn = hm_host_weights_view(&sdn);
  HM_ASSERT_OK(hm_moe_layer_load(ref, &vgu, &vdn));
  HM_ASSERT_OK(hm_moe_layer_load_shared(ref, &vsgu, &vsdn));
  HM_ASSERT_OK(hm_moe_layer_set_router_bias(ref, bias));
  HM_ASSERT_OK(hm_moe_layer_transform(ref, NULL));

  hm_stream *s = NULL;
  HM_ASSERT_OK(hm_stream_wrap(eng, NULL, &s));
  HM_ASSERT_OK(hm_moe_layer_create(eng, &c, &emb));
  hm_weights_bytes b_gu, b_dn, b_sgu, b_sdn;
  HM_ASSERT_OK(hm_moe_layer_weights_bytes(emb, false, &b_gu, &b_dn));
  HM_ASSERT_OK(hm_moe_layer_weights_bytes(emb, true, &b_sgu, &b_sdn));
  engine_view egu = engine_view_of(eng, &gu, &b_gu), edn = engine_view_of(eng, &dn, &b_dn);
  engine_view esgu = engine_view_of(eng, &sgu, &b_sgu), esdn = engine_view_of(eng, &sdn, &b_sdn);
  float *ebias = engine_copy_of(eng, bias, sizeof(bias));
  HM_ASSERT_OK(hm_moe_layer_load_device(emb, &egu.view, &edn.view, s));
  HM_ASSERT_OK(hm_moe_layer_load_shared_device(emb, &esgu.view, &esdn.view, s));
  HM_ASSERT_OK(hm_moe_layer_set_router_bias_device(emb, ebias, s));
  HM_ASSERT_OK(hm_stream_synchronize(s));
  engine_view_free(eng, &egu), engine_view_free(eng, &edn), engine_view_free(eng, &esgu);
  engine_view_free(eng, &esdn);
  memset(ebias, 0xff, sizeof(bias));
  hm_mem_free(eng, ebias);
  HM_ASSERT_OK(hm_moe_layer_transform(emb, s));

  float xf[T * H], logits[T * E];
  uint16_t x[T * H], y_ref[T * H], y_emb[T * H];
  hm_rng_fill_normal(&rng, xf, T * H, 1.0f);
  hm_rng_fill_normal(&rng, logits, T * E, 1.0f);
  HM_ASSERT_OK(hm_convert_from_f32(HM_BF16, xf, x, T * H));
  forward(ref, s, x, logits, y_ref);
  forward(emb, s, x, logits, y_emb);
  assert_memory_equal(y_ref, y_emb, sizeof(y_ref));
  float yf[T * H];
  HM_ASSERT_OK(hm_convert_to_f32(HM_BF16, y_ref, yf, T * H));
  double sq = 0;
  for (int i = 0; i < T * H; i++) sq += (double)yf[i] * yf[i];
  assert_true(sq > 0 && isfinite(sq));

  hm_moe_layer_destroy(emb), hm_moe_layer_destroy(ref);
  hm_stream_destroy(s);
  hm_host_weights_free(&gu), hm_host_weights_free(&dn), hm_host_weights_free(&sgu),
      hm_host_weights_free(&sdn);
  hm_engine_destroy(eng);
}

/* w4a16: u4 codes packed 8 a word along K, bf16 scales and u4 zeros per 128 columns. */
static void weights_bytes_of_w4a16(void **state) {
  (void)state;
  hm_engine *eng = hm_test_host_engine();
  const hm_moe_config c = deepseek_like();
  hm_moe_layer *l = NULL;
  HM_ASSERT_OK(hm_moe_layer_create(eng, &c, &l));
  hm_weights_bytes gu, dn;
  HM_ASSERT_OK(hm_moe_layer_weights_bytes(l, false, &gu, &dn));
  assert_int_equal(gu.qweight, (size_t)E * 2 * I * (H / 8) * 4);
  assert_int_equal(gu.scales, (size_t)E * 2 * I * (H / 128) * 2);
  assert_int_equal(gu.zeros, (size_t)E * (H / 128) * (2 * I / 8) * 4);
  assert_int_equal(gu.global_scale, 0);
  assert_int_equal(gu.bias, 0);
  assert_int_equal(dn.qweight, (size_t)E * H * (I / 8) * 4);
  assert_int_equal(dn.scales, (size_t)E * H * (I / 128) * 2);
  assert_int_equal(dn.zeros, (size_t)E * (I / 128) * (H / 8) * 4);
  HM_ASSERT_OK(hm_moe_layer_weights_bytes(l, true, &gu, &dn));
  assert_int_equal(gu.qweight, (size_t)2 * I * (H / 8) * 4);
  assert_int_equal(dn.scales, (size_t)H * (I / 128) * 2);
  hm_moe_layer_destroy(l);
  hm_engine_destroy(eng);
}

static void bad_calls_are_refused(void **state) {
  (void)state;
  hm_engine *eng = hm_test_host_engine(), *other = hm_test_host_engine();
  hm_moe_config c = deepseek_like();
  hm_moe_layer *l = NULL;
  HM_ASSERT_OK(hm_moe_layer_create(eng, &c, &l));
  uint32_t words[4] = {0};
  hm_weights_view no_qweight = {.qweight = NULL, .scales = words, .zeros = words};
  assert_int_equal(hm_moe_layer_load_device(l, &no_qweight, &no_qweight, NULL), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "qweight"));
  hm_stream *foreign = NULL;
  HM_ASSERT_OK(hm_stream_wrap(other, NULL, &foreign));
  assert_int_equal(hm_moe_layer_load_device(l, &no_qweight, &no_qweight, foreign), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "another engine"));
  assert_int_equal(hm_moe_layer_set_router_bias_device(l, NULL, NULL), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_moe_layer_transform(l, NULL), HM_NOT_READY);
  hm_moe_layer_destroy(l);

  c.shared_experts = 0;
  c.router.correction_bias = false;
  HM_ASSERT_OK(hm_moe_layer_create(eng, &c, &l));
  float bias[E] = {0};
  hm_weights_bytes gu, dn;
  assert_int_equal(hm_moe_layer_load_shared_device(l, &no_qweight, &no_qweight, NULL), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_moe_layer_set_router_bias_device(l, bias, NULL), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "correction_bias"));
  assert_int_equal(hm_moe_layer_weights_bytes(l, true, &gu, &dn), HM_INVALID_ARGUMENT);
  hm_moe_layer_destroy(l);
  hm_stream_destroy(foreign);
  hm_engine_destroy(other);
  hm_engine_destroy(eng);
}

static void abi_sizes_and_device_ordinal(void **state) {
  (void)state;
  assert_int_equal(hm_abi_sizeof("hm_moe_config"), sizeof(hm_moe_config));
  assert_int_equal(hm_abi_sizeof("hm_engine_config"), sizeof(hm_engine_config));
  assert_int_equal(hm_abi_sizeof("hm_weights_view"), sizeof(hm_weights_view));
  assert_int_equal(hm_abi_sizeof("hm_moe_forward_args"), sizeof(hm_moe_forward_args));
  assert_int_equal(hm_abi_sizeof("hm_comm_nccl_id"), sizeof(hm_comm_nccl_id));
  assert_int_equal(hm_abi_sizeof("hm_no_such_struct"), 0);
  assert_int_equal(hm_abi_sizeof(NULL), 0);
  hm_engine *eng = hm_test_host_engine();
  assert_int_equal(hm_engine_device(eng), -1);
  hm_engine_destroy(eng);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(device_load_matches_host_load),
      cmocka_unit_test(weights_bytes_of_w4a16),
      cmocka_unit_test(bad_calls_are_refused),
      cmocka_unit_test(abi_sizes_and_device_ordinal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
