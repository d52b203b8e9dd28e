/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpt-oss checkpoints: MXFP4 blocks and e8m0 scales fused over experts, gate and up
 * rows interleaved, biases; and the bf16 release with transposed fused tensors.
 * Bit-exact canonical weights, de-interleaved [gate; up] rows and biases, the same host
 * GEMM, EP ranges and TP slices, the nibble order pinned on known bytes, bad shapes.
 */
#include "test_checkpoint_util.h"

#define H 128
#define I 64
#define E 4

static const hm_quant_format mx_fmt = {HM_F4E2M1, HM_E8M0, HM_SCALE_GROUP, 32, 0, false, false};
static const hm_quant_format bf16_fmt = {HM_BF16, HM_BF16, HM_SCALE_NONE, 0, 0, false, false};

/* Source row of canonical row n: gate i is row 2i, up i is row 2i + 1. */
static int64_t interleaved(int64_t n, int64_t rows, bool gate_up) {
  if (!gate_up) return n;
  return n < rows / 2 ? 2 * n : 2 * (n - rows / 2) + 1;
}

static void put_blocks(hm_st_writer *w, const char *name, const hm_host_weights *ref, bool gate_up) {
  int64_t n = ref->n, k = ref->k;
  uint8_t *blocks = calloc((size_t)(E * n * k / 2), 1), *scales = malloc((size_t)(E * n * k / 32));
  for (int64_t e = 0; e < E; e++)
    for (int64_t r = 0; r < n; r++) {
      int64_t s = interleaved(r, n, gate_up);
      for (int64_t c = 0; c < k; c++) {
        blocks[(e * n + s) * k / 2 + c / 2] |= (uint8_t)(ck_code(ref, e, r, c) << (4 * (c % 2)));
        scales[(e * n + s) * k / 32 + c / 32] = *ck_scale(ref, e, r, c);
      }
    }
  char full[160];
  snprintf(full, sizeof(full), "%s_blocks", name);
  HM_ASSERT_OK(hm_st_writer_add(w, full, HM_ST_U8, 4, (int64_t[]){E, n, k / 32, 16}, blocks));
  snprintf(full, sizeof(full), "%s_scales", name);
  HM_ASSERT_OK(hm_st_writer_add(w, full, HM_ST_U8, 3, (int64_t[]){E, n, k / 32}, scales));
  free(blocks);
  free(scales);
}

/* bf16 release: (E, K, N), i.e. transposed, same row interleave. */
static void put_transposed(hm_st_writer *w, const char *name, const hm_host_weights *ref, bool gate_up) {
  int64_t n = ref->n, k = ref->k;
  uint16_t *t = malloc((size_t)(E * n * k) * 2);
  for (int64_t e = 0; e < E; e++)
    for (int64_t r = 0; r < n; r++)
      for (int64_t c = 0; c < k; c++)
        t[(e * k + c) * n + interleaved(r, n, gate_up)] = (uint16_t)ck_code(ref, e, r, c);
  HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_BF16, 3, (int64_t[]){E, k, n}, t));
  free(t);
}

static void put_bias(hm_st_writer *w, const char *name, int64_t n, uint16_t *bias) {
  hm_rng rng;
  hm_rng_seed(&rng, (uint64_t)n);
  for (int64_t i = 0; i < E * n; i++) bias[i] = hm_bf16_from_f32(hm_rng_normal(&rng));
  HM_ASSERT_OK(hm_st_writer_add(w, name, HM_ST_BF16, 2, (int64_t[]){E, n}, bias));
}

static json_t *gpt_oss_config(bool quantized) {
  json_t *c = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i}", "model_type", "gpt_oss", "hidden_size", H,
                        "num_hidden_layers", 1, "num_local_experts", E, "num_experts_per_tok", 2,
                        "experts_per_token", 2, "intermediate_size", I);
  if (quantized)
    json_object_set_new(c, "quantization_config",
                        json_pack("{s:s, s:[s, s]}", "quant_method", "mxfp4", "modules_to_not_convert",
                                  "model.layers.*.self_attn", "model.layers.*.mlp.router"));
  return c;
}

static void write_gpt_oss(const char *dir, const ck_ffn *f, bool quantized, uint16_t *bias_gu,
                          uint16_t *bias_d) {
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  if (quantized) {
    put_blocks(w, "model.layers.0.mlp.experts.gate_up_proj", &f->ref_gate_up, true);
    put_blocks(w, "model.layers.0.mlp.experts.down_proj", &f->ref_down, false);
  } else {
    put_transposed(w, "model.layers.0.mlp.experts.gate_up_proj", &f->ref_gate_up, true);
    put_transposed(w, "model.layers.0.mlp.experts.down_proj", &f->ref_down, false);
  }
  put_bias(w, "model.layers.0.mlp.experts.gate_up_proj_bias", 2 * I, bias_gu);
  put_bias(w, "model.layers.0.mlp.experts.down_proj_bias", H, bias_d);
  ck_save(w, dir, "model.safetensors");
  ck_write_json(dir, "config.json", gpt_oss_config(quantized));
}

static void expect_bias(const float *got, const uint16_t *src, hm_expert_range r, int64_t n, bool gate_up) {
  for (int64_t e = 0; e < r.count; e++)
    for (int64_t i = 0; i < n; i++)
      assert_true(got[e * n + i] == hm_bf16_to_f32(src[(r.first + e) * n + interleaved(i, n, gate_up)]));
}

static void round_trip(const hm_quant_format *fmt, bool quantized) {
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  ck_ffn f;
  ck_ffn_make(&f, 41, E, H, I, fmt);
  uint16_t bias_gu[E * 2 * I], bias_d[E * H];
  write_gpt_oss(dir, &f, quantized, bias_gu, bias_d);
  hm_ckpt *ck;
  HM_ASSERT_OK(hm_ckpt_open(dir, &ck));
  hm_host_weights got;
  hm_ckpt_extras x;
  hm_expert_range all = {0, E}, ep1;
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, CK_GATE_UP, all, 0, 1, &got, &x));
  ck_expect_mapped(&got, &f.ref_gate_up, 0, NULL, NULL, 0);
  ck_expect_same_gemm(&got, NULL, &f.ref_gate_up, NULL);
  expect_bias(x.bias, bias_gu, all, 2 * I, true);
  hm_host_weights_free(&got);
  hm_ckpt_extras_free(&x);
  /* a bias is never dropped silently */
  assert_int_equal(hm_ckpt_load_layer(ck, CK_DOWN, all, 0, 1, &got, NULL), HM_INVALID_ARGUMENT);
  HM_ASSERT_OK(hm_expert_range_of_rank(E, 1, 2, &ep1));
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, CK_DOWN, ep1, 1, 2, &got, &x));
  int64_t *cols = ck_down_cols(I, 1, 2, ep1.count), *rows = ck_gate_up_rows(I, 1, 2, ep1.count);
  ck_expect_mapped(&got, &f.ref_down, ep1.first, NULL, cols, 0);
  expect_bias(x.bias, bias_d, ep1, H, false);
  hm_host_weights_free(&got);
  hm_ckpt_extras_free(&x);
  HM_ASSERT_OK(hm_ckpt_load_layer(ck, CK_GATE_UP, ep1, 1, 2, &got, &x));
  ck_expect_mapped(&got, &f.ref_gate_up, ep1.first, rows, NULL, 0);
  for (int64_t e = 0; e < ep1.count; e++)
    for (int64_t i = 0; i < 2 * (I / 2); i++) {
      int64_t full = rows[e * I + i], src = interleaved(full, 2 * I, true);
      assert_true(x.bias[e * I + i] == hm_bf16_to_f32(bias_gu[(ep1.first + e) * 2 * I + src]));
    }
  hm_host_weights_free(&got);
  hm_ckpt_extras_free(&x);
  free(cols);
  free(rows);
  hm_ckpt_close(ck);
  ck_ffn_free(&f);
  ck_rmdir(dir);
}

static void mxfp4_fused_experts(void **state) {
  (void)state;
  round_trip(&mx_fmt, true);
}

static void bf16_release_is_transposed(void **state) {
  (void)state;
  round_trip(&bf16_fmt, false);
}

/* Byte 0x21 is elements (0.5, 1.0); scale byte 128 is 2^1: weights 1.0 and 2.0. */
static void nibble_order_on_known_bytes(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  ck_ffn f;
  ck_ffn_make(&f, 42, E, H, I, &mx_fmt);
  uint16_t bias_gu[E * 2 * I], bias_d[E * H];
  write_gpt_oss(dir, &f, true, bias_gu, bias_d);
  hm_st_writer *w;
  HM_ASSERT_OK(hm_st_writer_create(&w));
  uint8_t *blocks = malloc(E * H * I / 2), *scales = malloc(E * H * I / 32);
  memset(blocks, 0x21, E * H * I / 2);
  memset(scales, 128, E * H * I / 32);
  HM_ASSERT_OK(hm_st_writer_add(w, "model.layers.0.mlp.experts.down_proj_blocks", HM_ST_U8, 4,
                                (int64_t[]){E, H, I / 32, 16}, blocks));
  HM_ASSERT_OK(hm_st_writer_add(w, "model.layers.0.mlp.experts.down_proj_scales", HM_ST_U8, 3,
                                (int64_t[]){E, H, I / 32}, scales));
  ck_save(w, dir, "model.safetensors");
  hm_host_weights got;
  HM_ASSERT_OK(hm_checkpoint_load_layer(dir, CK_DOWN, (hm_expert_range){3, 1}, 0, 1, &got, NULL));
  float row[I];
  HM_ASSERT_OK(hm_dequantize_rows(&got, 0, 5, 1, row));
  for (int k = 0; k < I; k++) assert_true(row[k] == (k % 2 ? 2.0f : 1.0f));
  hm_host_weights_free(&got);
  free(blocks);
  free(scales);
  ck_ffn_free(&f);
  ck_rmdir(dir);
}

static void bad_shapes_and_slices(void **state) {
  (void)state;
  char dir[64];
  ck_tmpdir(dir, sizeof(dir));
  ck_ffn f;
  ck_ffn_make(&f, 43, E, H, I, &mx_fmt);
  uint16_t bias_gu[E * 2 * I], bias_d[E * H];
  write_gpt_oss(dir, &f, true, bias_gu, bias_d);
  hm_host_weights got;
  hm_ckpt_extras x;
  /* TP 8 leaves 8 intermediate columns a rank: less than one 32-wide scale group */
  assert_int_equal(hm_checkpoint_load_layer(dir, CK_DOWN, (hm_expert_range){0, 1}, 0, 8, &got, &x),
                   HM_UNSUPPORTED);
  json_t *c = gpt_oss_config(true);
  json_object_set_new(c, "intermediate_size", json_integer(2 * I));
  ck_write_json(dir, "config.json", c);
  assert_int_equal(hm_checkpoint_load_layer(dir, CK_GATE_UP, (hm_expert_range){0, 1}, 0, 1, &got, &x),
                   HM_CORRUPT);
  assert_non_null(strstr(hm_last_error(), "gate_up_proj_blocks"));
  assert_non_null(strstr(hm_last_error(), "[4, 128, 4, 16]"));
  ck_ffn_free(&f);
  ck_rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(mxfp4_fused_experts),
      cmocka_unit_test(bf16_release_is_transposed),
      cmocka_unit_test(nibble_order_on_known_bytes),
      cmocka_unit_test(bad_shapes_and_slices),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
