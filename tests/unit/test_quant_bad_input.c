/* SPDX-License-Identifier: Apache-2.0 */
/* Formats outside the support matrix, wrong shapes and NULL pointers: a clear status, no crash. */
#include <math.h>
#include <string.h>

#include "hm_test.h"
#include "quant.h"

#define F(wt, st, kind, gk, gn, zp, gs) ((hm_quant_format){wt, st, kind, gk, gn, zp, gs})

/* Refused with HM_INVALID_ARGUMENT and a message naming the cause. */
static void expect_refused(hm_quant_format f, int64_t n, int64_t k, const char *needle) {
  hm_status st = hm_quant_format_check(&f, n, k);
  if (st != HM_INVALID_ARGUMENT)
    fail_msg("expected a refusal mentioning '%s', got %s", needle, hm_status_str(st));
  if (strstr(hm_last_error(), needle) == NULL) fail_msg("message '%s' lacks '%s'", hm_last_error(), needle);
  hm_host_weights w;
  assert_int_equal(hm_host_weights_alloc(&w, &f, 1, n, k), HM_INVALID_ARGUMENT);
  assert_null(w.qweight);
  /* The bound does not know the shape; a refused format has a negative one. */
  if (n == 64 && k == 256) assert_true(hm_quant_error_bound(&f) < 0.0);
}

static void dtype_pairs_outside_the_matrix(void **state) {
  (void)state;
  expect_refused(F(HM_I4, HM_BF16, HM_SCALE_GROUP, 128, 0, true, false), 64, 256, "unsigned integer");
  expect_refused(F(HM_F8E4M3, HM_F32, HM_SCALE_CHANNEL, 0, 0, true, false), 64, 256, "f8e4m3");
  expect_refused(F(HM_U4, HM_E8M0, HM_SCALE_GROUP, 32, 0, false, false), 64, 256, "e8m0");
  expect_refused(F(HM_F4E2M1, HM_E8M0, HM_SCALE_GROUP, 16, 0, false, false), 64, 256, "e8m0 scales per 32");
  expect_refused(F(HM_F4E2M1, HM_F8E4M3, HM_SCALE_GROUP, 32, 0, false, true), 64, 256,
                 "f8e4m3 scales per 16");
  expect_refused(F(HM_F4E2M1, HM_BF16, HM_SCALE_GROUP, 32, 0, false, false), 64, 256, "bf16");
  expect_refused(F(HM_F32, HM_F32, HM_SCALE_CHANNEL, 0, 0, false, false), 64, 256,
                 "f32 is not a weight type");
  expect_refused(F(HM_E8M0, HM_F32, HM_SCALE_CHANNEL, 0, 0, false, false), 64, 256,
                 "e8m0 is not a weight type");
  expect_refused(F((hm_dtype)99, HM_F32, HM_SCALE_CHANNEL, 0, 0, false, false), 64, 256, "invalid");
  expect_refused(F(HM_U4, HM_U8, HM_SCALE_CHANNEL, 0, 0, false, false), 64, 256, "u8 scales");
}

static void scale_layouts(void **state) {
  (void)state;
  expect_refused(F(HM_U4, HM_BF16, HM_SCALE_NONE, 0, 0, false, false), 64, 256, "need scales");
  expect_refused(F(HM_BF16, HM_BF16, HM_SCALE_GROUP, 128, 0, false, false), 64, 256, "scale_kind NONE");
  expect_refused(F(HM_F16, HM_F16, HM_SCALE_NONE, 0, 0, false, true), 64, 256, "global scale");
  expect_refused(F(HM_U4, HM_BF16, HM_SCALE_GROUP, 48, 0, false, false), 64, 288, "group_k 48");
  expect_refused(F(HM_U4, HM_BF16, HM_SCALE_GROUP, 256, 0, false, false), 64, 512, "group_k 256");
  expect_refused(F(HM_U4, HM_BF16, HM_SCALE_GROUP, 64, 0, true, false), 64, 96, "does not divide K = 96");
  expect_refused(F(HM_F8E4M3, HM_F32, HM_SCALE_BLOCK, 128, 64, false, false), 128, 256,
                 "128x128, not 64x128");
  expect_refused(F(HM_F8E4M3, HM_F32, HM_SCALE_BLOCK, 128, 128, false, false), 200, 256, "N = 200");
  expect_refused(F(HM_F8E4M3, HM_F32, HM_SCALE_BLOCK, 128, 128, false, false), 256, 320, "K = 320");
  expect_refused(F(HM_F8E4M3, HM_BF16, HM_SCALE_BLOCK, 128, 128, false, false), 128, 128,
                 "block scales are f32");
  expect_refused(F(HM_U4, HM_F32, HM_SCALE_BLOCK, 128, 128, true, false), 128, 128, "zero points");
  expect_refused(F(HM_U4, HM_F32, HM_SCALE_TENSOR, 0, 0, true, false), 128, 128, "zero points");
  expect_refused(F(HM_U4, HM_F32, (hm_scale_kind)9, 0, 0, false, false), 128, 128, "scale_kind 9");
  expect_refused(F(HM_U4, HM_F32, HM_SCALE_CHANNEL, 0, 0, false, false), 0, 128, "N = 0");
  expect_refused(F(HM_U4, HM_F32, HM_SCALE_CHANNEL, 0, 0, false, false), 16, -4, "K = -4");
}

static void null_pointers_and_ranges(void **state) {
  (void)state;
  hm_quant_format good = F(HM_U4, HM_BF16, HM_SCALE_GROUP, 32, 0, true, false);
  assert_int_equal(hm_quant_format_check(NULL, 8, 32), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_host_weights_alloc(NULL, &good, 1, 8, 32), HM_INVALID_ARGUMENT);
  hm_host_weights w;
  assert_int_equal(hm_host_weights_alloc(&w, NULL, 1, 8, 32), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_host_weights_alloc(&w, &good, 0, 8, 32), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "expert count 0"));
  HM_ASSERT_OK(hm_host_weights_alloc(&w, &good, 2, 8, 32));
  float x[2 * 8 * 32] = {0}, out[8 * 32];
  assert_int_equal(hm_quantize_weights(NULL, &w), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_quantize_weights(x, NULL), HM_INVALID_ARGUMENT);
  x[77] = INFINITY;
  assert_int_equal(hm_quantize_weights(x, &w), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "finite"));
  x[77] = 0.0f;
  HM_ASSERT_OK(hm_quantize_weights(x, &w));
  assert_int_equal(hm_dequantize_rows(&w, 2, 0, 1, out), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "expert 2"));
  assert_int_equal(hm_dequantize_rows(&w, -1, 0, 1, out), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_dequantize_rows(&w, 0, 6, 3, out), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_dequantize_rows(&w, 0, -1, 1, out), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_dequantize_rows(&w, 0, 0, 1, NULL), HM_INVALID_ARGUMENT);
  assert_int_equal(hm_dequantize_rows(NULL, 0, 0, 1, out), HM_INVALID_ARGUMENT);
  uint32_t *zeros = w.zeros;
  w.zeros = NULL; /* a format with zero points but no zero array */
  assert_int_equal(hm_quantize_weights(x, &w), HM_INVALID_ARGUMENT);
  assert_non_null(strstr(hm_last_error(), "zeros"));
  w.zeros = zeros;
  hm_host_weights_free(&w);
  assert_null(w.qweight);
  hm_host_weights_free(&w);
  hm_host_weights_free(NULL);
  assert_int_equal(hm_quantize_weights(x, &w), HM_INVALID_ARGUMENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dtype_pairs_outside_the_matrix),
      cmocka_unit_test(scale_layouts),
      cmocka_unit_test(null_pointers_and_ranges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
