/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hm_layer on the host backend: forward equals a naive product of dequantized weights
 * (dense, with bias) and the reference (indexed); lifecycle errors (forward before
 * transform, transform before load); bad configs and arguments are refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hm_test.h"
#include "numfmt.h"
#include "quant.h"
#include "ref_gemm.h"

static void *xalloc(size_t bytes) {
  void *p = calloc(bytes ? bytes : 1, 1);
  assert_non_null(p);
  return p;
}

static void dense_forward_matches_naive_product(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("dense_forward_matches_naive_product"));
  const int64_t m = 5, n = 96, k = 256;
  hm_engine *e = hm_test_host_engine();
  hm_layer_config cfg = hm_test_layer_config("w4a16", n, k, 1, 0);
  cfg.bias = true;
  hm_layer *l = NULL;
  HM_ASSERT_OK(hm_layer_create(e, &cfg, &l));
  float *w = xalloc((size_t)(n * k) * 4), *bias = xalloc((size_t)n * 4), *x = xalloc((size_t)(m * k) * 4);
  hm_rng_fill_normal(&rng, w, (size_t)(n * k), 0.05f);
  hm_rng_fill_normal(&rng, bias, (size_t)n, 0.5f);
  hm_rng_fill_normal(&rng, x, (size_t)(m * k), 1.0f);
  HM_ASSERT_OK(hm_layer_quantize(l, w, bias));

  /* The same quantization outside the layer gives the weights the layer must use. */
  hm_host_weights hw;
  memset(&hw, 0, sizeof(hw));
  HM_ASSERT_OK(hm_host_weights_alloc(&hw, &cfg.scheme.weight, 1, n, k));
  HM_ASSERT_OK(hm_quantize_weights(w, &hw));
  float *wd = xalloc((size_t)(n * k) * 4);
  HM_ASSERT_OK(hm_dequantize_rows(&hw, 0, 0, n, wd));

  uint16_t *a = xalloc((size_t)(m * k) * 2), *c = xalloc((size_t)(m * n) * 2);
  HM_ASSERT_OK(hm_convert_from_f32(HM_BF16, x, a, m * k));
  hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = m, .a = a, .c = c};
  assert_int_equal(hm_layer_forward(l, &args, NULL), HM_NOT_READY);
  HM_ASSERT_OK(hm_layer_transform(l, NULL));
  HM_ASSERT_OK(hm_layer_forward(l, &args, NULL));

  float *out = xalloc((size_t)(m * n) * 4), *ref = xalloc((size_t)(m * n) * 4);
  for (int64_t r = 0; r < m; r++)
    for (int64_t j = 0; j < n; j++) {
      double s = hm_bf16_to_f32(hm_bf16_from_f32(bias[j]));
      for (int64_t i = 0; i < k; i++) s += (double)hm_bf16_to_f32(a[r * k + i]) * wd[j * k + i];
      ref[r * n + j] = (float)s;
      out[r * n + j] = hm_bf16_to_f32(c[r * n + j]);
    }
  const double err = hm_rel_error(out, ref, (size_t)(m * n));
  printf("host dense w4a16 vs naive: rel_err %.2e\n", err);
  assert_true(err < 4e-3);
  free(w), free(bias), free(x), free(wd), free(a), free(c), free(out), free(ref);
  hm_host_weights_free(&hw);
  hm_layer_destroy(l);
  hm_engine_destroy(e);
}

static void indexed_forward_matches_reference(void **state) {
  (void)state;
  hm_rng rng;
  hm_rng_seed(&rng, hm_test_seed("indexed_forward_matches_reference"));
  const int64_t tokens = 3, top_k = 2, experts = 4, n = 64, k = 128;
  hm_engine *e = hm_test_host_engine();
  hm_layer_config cfg = hm_test_layer_config("w4a16", n, k, experts, 0);
  hm_layer *l = NULL;
  HM_ASSERT_OK(hm_layer_create(e, &cfg, &l));
  hm_host_weights hw;
  memset(&hw, 0, sizeof(hw));
  HM_ASSERT_OK(hm_host_weights_alloc(&hw, &cfg.scheme.weight, experts, n, k));
  float *w = xalloc((size_t)(experts * n * k) * 4);
  hm_rng_fill_normal(&rng, w, (size_t)(experts * n * k), 0.05f);
  HM_ASSERT_OK(hm_quantize_weights(w, &hw));
  hm_weights_view v = hm_host_weights_view(&hw);
  HM_ASSERT_OK(hm_layer_load(l, &v));
  HM_ASSERT_OK(hm_layer_transform(l, NULL));

  const int block_m = hm_layer_block_m(l, tokens * top_k);
  assert_true(block_m >= 8 && block_m % 8 == 0); /* 8: the swapped decode tile */
  /* Slots 0..5 (token*2+slot): experts 0,2 | 2,3 | 0,3; expert 1 has no tokens. */
  const int32_t expert_of[] = {0, 2, 2, 3, 0, 3};
  int32_t *sorted = xalloc((size_t)(4 * block_m) * 4), ids[4] = {0};
  int32_t padded = 0;
  const int64_t sentinel = tokens * top_k;
  for (int32_t x = 0, blk = 0; x < experts; x++) {
    int cnt = 0;
    for (int32_t s = 0; s < sentinel; s++)
      if (expert_of[s] == x) sorted[padded + cnt++] = s;
    if (cnt == 0) continue;
    for (; cnt < block_m; cnt++) sorted[padded + cnt] = (int32_t)sentinel;
    ids[blk++] = x;
    padded += block_m;
  }
  uint16_t *a = xalloc((size_t)(tokens * k) * 2);
  float *xa = xalloc((size_t)(tokens * k) * 4);
  hm_rng_fill_normal(&rng, xa, (size_t)(tokens * k), 1.0f);
  HM_ASSERT_OK(hm_convert_from_f32(HM_BF16, xa, a, tokens * k));
  uint16_t *c = xalloc((size_t)(sentinel * n) * 2), *c_ref = xalloc((size_t)(sentinel * n) * 2);
  hm_gemm_args args = {.type = HM_GEMM_INDEXED, .m = tokens, .a = a, .c = c, .sorted_ids = sorted,
                       .expert_ids = ids, .num_padded = &padded, .max_padded = padded, .block_m = block_m,
                       .top_k = (int)top_k, .a_rows_per_token = (int)top_k};
  HM_ASSERT_OK(hm_layer_forward(l, &args, NULL));
  hm_ref_gemm_problem p = {.w = &hw, .act = HM_BF16, .out = HM_BF16, .args = args};
  p.args.c = c_ref;
  HM_ASSERT_OK(hm_ref_gemm(&p));
  assert_memory_equal(c, c_ref, (size_t)(sentinel * n) * 2);
  free(w), free(sorted), free(a), free(xa), free(c), free(c_ref);
  hm_host_weights_free(&hw);
  hm_layer_destroy(l);
  hm_engine_destroy(e);
}

static void lifecycle_errors(void **state) {
  (void)state;
  hm_engine *e = hm_test_host_engine();
  hm_layer_config cfg = hm_test_layer_config("w4a16", 64, 128, 1, 0);
  hm_layer *l = NULL;
  HM_ASSERT_OK(hm_layer_create(e, &cfg, &l));
  assert_int_equal(hm_layer_transform(l, NULL), HM_NOT_READY);
  hm_gemm_args args = {.type = HM_GEMM_DENSE, .m = 1};
  assert_int_equal(hm_layer_forward(l, &args, NULL), HM_NOT_READY);
  hm_weights_view empty = {0};
  assert_int_equal(hm_layer_load(l, &empty), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_layer_load(l, NULL), HM_INVALID_ARGUMENT);
  float w[64 * 128] = {0}, b[64] = {0};
  assert_int_equal(hm_layer_quantize(l, w, b), HM_INVALID_ARGUMENT); /* no bias configured */
  assert_non_null(strstr(hm_last_error(), "bias"));
  HM_ASSERT_OK(hm_layer_quantize(l, w, NULL));
  assert_int_equal(hm_layer_forward(l, &args, NULL), HM_NOT_READY); /* quantized, not transformed */
  /* The layer named to run next: transformed, of the same engine. */
  HM_ASSERT_OK(hm_layer_transform(l, NULL));
  hm_layer *next = NULL;
  HM_ASSERT_OK(hm_layer_create(e, &cfg, &next));
  args.next_layer = next;
  assert_int_equal(hm_layer_forward(l, &args, NULL), HM_NOT_READY);
  assert_non_null(strstr(hm_last_error(), "next_layer"));
  hm_engine *other = hm_test_host_engine();
  hm_layer *elsewhere = NULL;
  HM_ASSERT_OK(hm_layer_create(other, &cfg, &elsewhere));
  HM_ASSERT_OK(hm_layer_quantize(elsewhere, w, NULL));
  HM_ASSERT_OK(hm_layer_transform(elsewhere, NULL));
  args.next_layer = elsewhere;
  assert_int_equal(hm_layer_forward(l, &args, NULL), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "another engine"));
  hm_layer_destroy(elsewhere);
  hm_engine_destroy(other);
  hm_layer_destroy(next);
  hm_layer_destroy(l);
  hm_layer_destroy(NULL);
  hm_engine_destroy(e);
}

static void bad_configs_are_refused(void **state) {
  (void)state;
  hm_engine *e = hm_test_host_engine();
  hm_layer *l = (hm_layer *)0x1;
  hm_layer_config good = hm_test_layer_config("w4a16", 64, 256, 1, 0);
  assert_int_equal(hm_layer_create(e, NULL, &l), HM_INVALID_ARGUMENT);
  assert_null(l);
  hm_layer_config c = good;
  c.magic = 0;
  assert_int_equal(hm_layer_create(e, &c, &l), HM_INVALID_ARGUMENT);
  c = good;
  c.k = 0;
  assert_int_equal(hm_layer_create(e, &c, &l), HM_INVALID_ARGUMENT);
  c = good;
  c.k = 200; /* group 128 does not divide K */
  assert_int_equal(hm_layer_create(e, &c, &l), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "200"));
  c = good;
  c.out = HM_F8E4M3;
  assert_int_equal(hm_layer_create(e, &c, &l), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "f8e4m3"));
  c = good;
  c.scheme.act = HM_I8; /* 8-bit activations need scales */
  assert_int_equal(hm_layer_create(e, &c, &l), HM_INVALID_ARGUMENT);
  c = good;
  c.scheme.act = HM_F32;
  assert_int_equal(hm_layer_create(e, &c, &l), HM_INVALID_ARGUMENT);
  c = good;
  c.scheme.weight.zero_point = true;
  c.scheme.weight.weight = HM_I4; /* zero points with signed codes */
  assert_int_equal(hm_layer_create(e, &c, &l), HM_INVALID_ARGUMENT);
  /* f16 accumulation: refused on the host as on the GPU outside what its kernels take. */
  c = good;
  c.fp16_accumulate = true;
  assert_int_equal(hm_layer_create(e, &c, &l), HM_UNSUPPORTED);
  assert_non_null(strstr(hm_last_error(), "f16 accumulation"));
  c.n = 128;
  HM_ASSERT_OK(hm_quant_scheme_parse("w8a8-fp8", &c.scheme)); /* 128x128 blocks */
  assert_int_equal(hm_layer_create(e, &c, &l), HM_UNSUPPORTED);
  HM_ASSERT_OK(hm_quant_scheme_parse("w8a8-fp8-ch", &c.scheme));
  HM_ASSERT_OK(hm_layer_create(e, &c, &l));
  hm_layer_destroy(l);
  hm_engine_destroy(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dense_forward_matches_naive_product),
      cmocka_unit_test(indexed_forward_matches_reference),
      cmocka_unit_test(lifecycle_errors),
      cmocka_unit_test(bad_configs_are_refused),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  hm_shutdown();
  return rc;
}
