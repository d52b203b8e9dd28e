/* SPDX-License-Identifier: Apache-2.0 */
/* Every named scheme's weight format (and weight-only ones spelled by their parts): accepted,
 * sized as the contract says, and round-trips; the parts parse as documented. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_quant_check.h"

#define EXPERTS 2
#define N 128
#define K 256

static const char *const names[] = {"bf16",        "w4a16",     "w4a16-sym",     "w8a16",        "w8a8-fp8",
                                    "w8a8-fp8-ch", "w8a8-int8", "w4a8-mxfp4",    "w4a8-int4",    "w4a8-nvfp4",
                                    "w3a16",       "w2a16-g64", "w4a16-g32",     "w4a16-ch",     "w8a16-sym",
                                    "w1a16-g16",   "w6a16-ch",  "w4a16-sym-g64", "w5a16-sym-g32"};

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
    printf("# %-14s rel error %.5f bound %.5f\n", names[i], err, bound);
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

typedef struct spelled {
  const char *name;
  hm_dtype weight;
  hm_scale_kind scale_kind;
  int group_k;
  bool zero_point;
} spelled;

static void weight_only_schemes_parse_by_parts(void **state) {
  (void)state;
  static const spelled cases[] = {
      {"w4a16", HM_U4, HM_SCALE_GROUP, 128, true},
      {"w4a16-sym", HM_I4, HM_SCALE_GROUP, 128, false},
      {"w8a16", HM_U8, HM_SCALE_GROUP, 128, false},
      {"w8a16-sym-ch", HM_I8, HM_SCALE_CHANNEL, 0, false},
      {"w3a16-g64", HM_U3, HM_SCALE_GROUP, 64, true},
      {"w2a16-ch", HM_U2, HM_SCALE_CHANNEL, 0, true},
      {"w5a16-sym-g16", HM_U5, HM_SCALE_GROUP, 16, false},
      {"w1a16-g32", HM_U1, HM_SCALE_GROUP, 32, true},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    hm_quant_scheme s;
    HM_ASSERT_OK(hm_quant_scheme_parse(cases[i].name, &s));
    assert_int_equal(s.weight.weight, cases[i].weight);
    assert_int_equal(s.weight.scale_kind, cases[i].scale_kind);
    assert_int_equal(s.weight.group_k, cases[i].group_k);
    assert_int_equal(s.weight.zero_point, cases[i].zero_point);
    assert_int_equal(s.weight.scale, HM_BF16);
    assert_int_equal(s.act, HM_BF16);
    assert_int_equal(s.act_scale, HM_ACT_SCALE_NONE);
  }
  static const char *const refused[] = {"w0a16",      "w9a16",        "w4a16-g",      "w4a16-g48",
                                        "w4a16-g0",   "w4a16-g32-ch", "w4a16-ch-sym", "w4a16-g0128",
                                        "w4a16x",     "w8a8-fp8-g32", "W4a16",        "w4a8-mxfp4-ch",
                                        "w4a16-sym-", "w12a16",       "w4a16-g128 ",  ""};
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
    hm_quant_scheme s;
    assert_int_equal(hm_quant_scheme_parse(refused[i], &s), HM_INVALID_ARGUMENT);
    assert_non_null(strstr(hm_last_error(), "w<B>a16[-sym][-g<G>|-ch]"));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_scheme_round_trips),
      cmocka_unit_test(weight_only_schemes_parse_by_parts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
