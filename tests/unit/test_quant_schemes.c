/* SPDX-License-Identifier: Apache-2.0 */
/* Every named scheme's weight format: accepted, sized as the contract says, and round-trips. */
#include <stdio.h>
#include <stdlib.h>

#include "test_quant_check.h"

#define EXPERTS 2
#define N 128
#define K 256

static const char *const names[] = {"bf16",        "w4a16",     "w4a16-sym",  "w8a16",     "w8a8-fp8",
                                    "w8a8-fp8-ch", "w8a8-int8", "w4a8-mxfp4", "w4a8-int4", "w4a8-nvfp4"};

/* Array sizes of one expert, from the contract's shapes. */
static void check_sizes(const hm_quant_format *f) {
  int bits = hm_dtype_bits(f->weight);
  assert_int_equal(hm_quant_qweight_words(f, N, K), N * ((K * bits + 31) / 32));
  int64_t scales = 0, zero_rows = 0;
  switch (f->scale_kind) {
    case HM_SCALE_GROUP: scales = N * (K / f->group_k), zero_rows = K / f->group_k; break;
    case HM_SCALE_CHANNEL: scales = N, zero_rows = 1; break;
    case HM_SCALE_BLOCK: scales = (N / f->group_n) * (K / f->group_k); break;
    case HM_SCALE_TENSOR: scales = 1; break;
    default: break;
  }
  assert_int_equal(hm_quant_scale_count(f, N, K), scales);
  assert_int_equal(hm_quant_zero_words(f, N, K), f->zero_point ? zero_rows * ((N * bits + 31) / 32) : 0);
  assert_int_equal(hm_quant_scale_bytes(f), f->scale_kind == HM_SCALE_NONE ? 0 : hm_dtype_bits(f->scale) / 8);
}

static void every_scheme_round_trips(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("every_scheme_round_trips"));
  static const float magnitudes[EXPERTS] = {0.02f, 1.0f};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    hm_quant_scheme scheme;
    HM_ASSERT_OK(hm_quant_scheme_parse(names[i], &scheme));
    const hm_quant_format *f = &scheme.weight;
    HM_ASSERT_OK(hm_quant_format_check(f, N, K));
    check_sizes(f);
    float *x = qc_normal_weights(&rng, EXPERTS, N, K, magnitudes);
    hm_host_weights w;
    double err;
    if (f->scale_kind == HM_SCALE_NONE) {
      float *deq = malloc(sizeof(float) * EXPERTS * N * K);
      HM_ASSERT_OK(hm_host_weights_alloc(&w, f, EXPERTS, N, K));
      HM_ASSERT_OK(hm_quantize_weights(x, &w));
      for (int64_t e = 0; e < EXPERTS; e++) HM_ASSERT_OK(hm_dequantize_rows(&w, e, 0, N, deq + e * N * K));
      err = hm_rel_error(deq, x, (size_t)(EXPERTS * N * K));
      free(deq);
    } else {
      err = qc_round_trip(f, EXPERTS, N, K, x, &w);
    }
    double bound = hm_quant_error_bound(f);
    printf("# %-11s rel error %.5f bound %.5f\n", names[i], err, bound);
    if (!(err <= bound)) fail_msg("%s: rel error %.5f above its bound %.5f", names[i], err, bound);
    hm_weights_view view = hm_host_weights_view(&w);
    assert_ptr_equal(view.qweight, w.qweight);
    assert_ptr_equal(view.scales, w.scales);
    assert_ptr_equal(view.zeros, w.zeros);
    assert_ptr_equal(view.global_scale, w.global_scale);
    assert_null(view.bias);
    assert_true((w.zeros != NULL) == f->zero_point);
    assert_true((w.global_scale != NULL) == f->global_scale);
    hm_host_weights_free(&w);
    free(x);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_scheme_round_trips),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
